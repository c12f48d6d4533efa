/* console N: N writes of two bytes ("x\n") to stdout, each its own
 * write(2) — a program printing many short lines (on hvt every
 * unbuffered console write was a VM exit). `shoal bench syscall` times it
 * start to exit with stdout in a file. */
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	for (long i = 0; i < n; i++)
		if (write(1, "x\n", 2) != 2)
			return 1;
	return 0;
}
