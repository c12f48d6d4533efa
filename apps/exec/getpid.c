/* getpid: the cost of one system call through each kind of site, for
 * `shoal bench exec` (built with `gcc -static`, run natively and by
 * `shoal run`).
 *
 *   getpid N  -> N getpid calls through a `mov eax, 39; syscall` pair (the
 *                kind shoal rewrites into a jump) and N through a `syscall`
 *                right after a jump target (the kind shoal leaves to the
 *                trap path), then N clock_gettime(CLOCK_MONOTONIC) through
 *                libc (glibc calls the vDSO when the auxiliary vector
 *                offers one) and N through the system call (a `mov eax,
 *                228; syscall` pair); prints ns per call of each on stderr:
 *                "pair=<ns> trap=<ns> clock_vdso=<ns> clock_syscall=<ns>"
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static long pair(void)
{
	long r;
	__asm__ volatile("mov $39, %%eax\n\tsyscall" : "=a"(r) : : "rcx", "r11", "memory");
	return r;
}

/* The jump lands on the `syscall`: nothing before it may move, so shoal
 * leaves it to the trap path. */
static long trapped(void)
{
	long r;
	__asm__ volatile("mov $39, %%eax\n\tjmp 1f\n1:\tsyscall" : "=a"(r) : : "rcx", "r11", "memory");
	return r;
}

static long clock_syscall(struct timespec *ts)
{
	long r;
	__asm__ volatile("mov $228, %%eax\n\tsyscall" : "=a"(r) : "D"(1L), "S"(ts) : "rcx", "r11", "memory");
	return r;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	if (n <= 0) {
		fprintf(stderr, "usage: %s ITERATIONS\n", argv[0]);
		return 2;
	}
	long sum = 0;
	double t0 = now_ns();
	for (long i = 0; i < n; i++)
		sum += pair();
	double t1 = now_ns();
	long m = n / 10 > 0 ? n / 10 : 1; /* the trap path costs microseconds */
	for (long i = 0; i < m; i++)
		sum += trapped();
	double t2 = now_ns();
	struct timespec ts;
	for (long i = 0; i < n; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		sum += ts.tv_nsec & 1;
	}
	double t3 = now_ns();
	for (long i = 0; i < n; i++) {
		clock_syscall(&ts);
		sum += ts.tv_nsec & 1;
	}
	double t4 = now_ns();
	if (sum == 0)
		return 3;
	fprintf(stderr, "pair=%.1f trap=%.1f clock_vdso=%.1f clock_syscall=%.1f\n", (t1 - t0) / n, (t2 - t1) / m, (t3 - t2) / n, (t4 - t3) / n);
	return 0;
}
