/* Standard input: a cat-like program that numbers the
 * lines it reads from stdin, waits for input with poll first, and reports
 * whether stdin is a terminal, the totals and end of input. Fed the same
 * script, it prints the same natively and on shoal. */
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(void)
{
	struct pollfd p = { .fd = 0, .events = POLLIN };
	int ready = poll(&p, 1, 10000);
	printf("isatty(0): %d\n", isatty(0));
	printf("poll: %d, readable: %s\n", ready, (p.revents & (POLLIN | POLLHUP)) ? "yes" : "no");
	char line[4096];
	long lines = 0, bytes = 0;
	while (fgets(line, sizeof line, stdin)) {
		lines++;
		bytes += (long)strlen(line);
		printf("%4ld  %s", lines, line);
		if (line[strlen(line) - 1] != '\n')
			printf("\n");
	}
	printf("eof: %s, lines: %ld, bytes: %ld\n", feof(stdin) ? "yes" : "no", lines, bytes);
	char c;
	printf("read after eof: %zd\n", read(0, &c, 1));
	return 0;
}
