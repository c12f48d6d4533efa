/* mprotect for real: protections reach the host's pages.
 *   sys_mprotect prot        PROT_NONE and back, read-only, contents kept: prints, exits 0
 *   sys_mprotect none        touches a PROT_NONE page: killed by SIGSEGV
 *   sys_mprotect readonly    writes a PROT_READ page: killed by SIGSEGV
 *   sys_mprotect overflow    a thread with a 64 KiB stack recurses a few KiB
 *                            past it, into musl's guard page: killed by SIGSEGV
 *                            (without real protections it would print "survived")
 * Prints the same natively and on shoal. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PG 4096

static int depth(int n)
{
	volatile char buf[1024];
	buf[0] = (char)n;
	buf[1023] = (char)n;
	if (n == 0)
		return buf[0];
	return depth(n - 1) + buf[1023];
}

static void *deep(void *arg)
{
	(void)arg;
	/* 64 KiB of stack, 68 frames of a little over 1 KiB: a few KiB into the 8 KiB guard. */
	printf("depth: %d\n", depth(68));
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "prot";
	if (!strcmp(mode, "overflow")) {
		pthread_attr_t a;
		pthread_attr_init(&a);
		pthread_attr_setstacksize(&a, 64 * 1024);
		pthread_t t;
		printf("thread: %d\n", pthread_create(&t, &a, deep, 0));
		fflush(stdout);
		pthread_join(t, 0);
		printf("survived\n");
		return 0;
	}
	char *p = mmap(0, 3 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 1;
	memset(p, 'a', 3 * PG);
	printf("none: %d\n", mprotect(p + PG, PG, PROT_NONE));
	printf("back: %d\n", mprotect(p + PG, PG, PROT_READ | PROT_WRITE));
	printf("kept: %c%c%c\n", p[0], p[PG], p[2 * PG + 5]);
	p[PG] = 'b';
	printf("read-only: %d\n", mprotect(p, 3 * PG, PROT_READ));
	printf("reads: %c%c\n", p[0], p[PG]);
	printf("read-write: %d\n", mprotect(p, 3 * PG, PROT_READ | PROT_WRITE));
	p[0] = 'c';
	printf("writes: %c\n", p[0]);
	fflush(stdout);
	if (!strcmp(mode, "none")) {
		mprotect(p + PG, PG, PROT_NONE);
		printf("touched: %c\n", ((volatile char *)p)[PG]);
	} else if (!strcmp(mode, "readonly")) {
		mprotect(p, PG, PROT_READ);
		((volatile char *)p)[8] = 'x';
		printf("wrote\n");
	}
	munmap(p, 3 * PG);
	return 0;
}
