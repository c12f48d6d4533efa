/* Console output order (hvt buffers stdout in the guest). Modes:
 *   lines N  N short writes to stdout, each its own write(2) of "i\n"
 *   crash    stdout, stderr, stdout, then a write through a null pointer
 *   wait     "ready" on stdout, then waits for a line on stdin and echoes it
 * Whatever a buffering kernel does, the bytes and their order (stdout
 * against stderr, and against the program's waiting) are those of Linux. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void say(int fd, const char *s)
{
	if (write(fd, s, strlen(s)) != (ssize_t)strlen(s))
		exit(3);
}

int main(int argc, char **argv)
{
	if (argc > 2 && !strcmp(argv[1], "lines")) {
		long n = atol(argv[2]);
		char b[32];
		for (long i = 0; i < n; i++) {
			int len = snprintf(b, sizeof b, "%ld\n", i);
			if (write(1, b, (size_t)len) != len)
				return 3;
		}
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "crash")) {
		say(1, "one (stdout)\n");
		say(2, "two (stderr)\n");
		say(1, "three (stdout)\n");
		*(volatile int *)0 = 1;
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "wait")) {
		say(1, "ready\n");
		char line[256];
		ssize_t n = read(0, line, sizeof line - 1);
		if (n < 0)
			return 4;
		line[n] = 0;
		say(1, "got: ");
		say(1, line);
		return 0;
	}
	fprintf(stderr, "usage: console_order lines N | crash | wait\n");
	return 2;
}
