/* The program the shoal-oci tests run as a container: `exit N` exits with
 * N, `wait` says ready and sleeps until it is killed, `tty` reports whether
 * its stdin and stdout are terminals, `alloc N` touches N MiB one MiB at a
 * time (saying how far it got) and then waits; otherwise it greets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "exit") == 0) {
		printf("exiting with %s\n", argv[2]);
		return atoi(argv[2]);
	}
	if (argc > 1 && strcmp(argv[1], "wait") == 0) {
		printf("ready\n");
		fflush(stdout);
		for (;;)
			sleep(60);
	}
	if (argc > 2 && strcmp(argv[1], "alloc") == 0) {
		long n = atol(argv[2]);
		for (long i = 1; i <= n; i++) {
			char *p = malloc(1 << 20);
			if (!p) {
				printf("malloc failed after %ld MiB\n", i - 1);
				return 12;
			}
			memset(p, 1, 1 << 20);
			printf("touched %ld MiB\n", i);
			fflush(stdout);
		}
		for (;;)
			sleep(60);
	}
	if (argc > 1 && strcmp(argv[1], "tty") == 0) {
		printf("isatty %d %d\n", isatty(0), isatty(1));
		return 0;
	}
	printf("hello from a shoal container\n");
	return 0;
}
