/* net_rawsys: a hostile guest that makes host socket system calls itself
 * with the `syscall` instruction (what an spt guest can do, since it
 * shares the tender's process). Run with one published port, so fd 3 is
 * the handed-over listener. argv[1] picks the attempt; the result of a
 * call the sandbox allows is printed, one it forbids kills the instance. */
#include <stdio.h>
#include <string.h>

static long sys(long n, long a, long b, long c, long d)
{
	long r;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
	return r;
}

int main(int argc, char **argv)
{
	const char *w = argc > 1 ? argv[1] : "";
	unsigned char sin[16] = { 2, 0, 0x1f, 0x90, 127, 0, 0, 1 }; /* 127.0.0.1:8080 */
	if (!strcmp(w, "socket"))
		printf("socket: %ld\n", sys(41, 2, 1 | 04000, 0, 0));
	else if (!strcmp(w, "connect"))
		printf("connect: %ld\n", sys(42, 3, (long)sin, 16, 0));
	else if (!strcmp(w, "accept-blocking"))
		printf("accept4 without SOCK_NONBLOCK: %ld\n", sys(288, 3, 0, 0, 0));
	else if (!strcmp(w, "accept-other"))
		printf("accept4 on fd 9: %ld\n", sys(288, 9, 0, 0, 04000));
	else if (!strcmp(w, "accept-ok"))
		printf("accept4 on the listener: %ld\n", sys(288, 3, 0, 0, 04000));
	else if (!strcmp(w, "bind")) {
		long s = sys(41, 2, 1 | 04000, 0, 0);
		printf("socket: %s\n", s >= 3 ? "ok" : "failed");
		printf("bind 127.0.0.1:8080: %ld\n", sys(49, s, (long)sin, 16, 0));
	}
	return 0;
}
