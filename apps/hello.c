/* hello: prints a greeting, its arguments (not argv[0], whose path differs
 * between runs) and its environment, in order. */
#include <stdio.h>

extern char **environ;

int main(int argc, char **argv)
{
	printf("hello, world\n");
	printf("argc=%d\n", argc);
	for (int i = 1; i < argc; i++)
		printf("argv[%d]=%s\n", i, argv[i]);
	for (char **e = environ; *e; e++)
		printf("env: %s\n", *e);
	fprintf(stderr, "hello on stderr\n");
	return argc > 1 && argv[1][0] == 'x' ? 3 : 0;
}
