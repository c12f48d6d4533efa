/* Measures the cost of system calls from inside a program: used by
 * `shoal bench syscall`, built both as a shoal image and as a native static
 * musl program from this same source.
 *
 *   syscall N   -> N getpid calls, N 1-byte writes to stdout, N 1-byte
 *                  writes to a file; prints ns per call of each on stderr:
 *                  "getpid=<ns> write=<ns> filewrite=<ns>"
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	if (n <= 0) {
		fprintf(stderr, "usage: %s ITERATIONS\n", argv[0]);
		return 2;
	}
	/* syscall(SYS_getpid) rather than getpid(): no libc may cache it. */
	double t0 = now_ns();
	for (long i = 0; i < n; i++)
		syscall(SYS_getpid);
	double t1 = now_ns();
	for (long i = 0; i < n; i++)
		if (write(1, "x", 1) != 1)
			return 3;
	double t2 = now_ns();
	char path[64];
	snprintf(path, sizeof path, "/tmp/shoal-syscall-bench-%ld", (long)getpid());
	int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	if (fd < 0)
		return 4;
	double t3 = now_ns();
	for (long i = 0; i < n; i++)
		if (write(fd, "x", 1) != 1)
			return 5;
	double t4 = now_ns();
	close(fd);
	unlink(path);
	fprintf(stderr, "getpid=%.1f write=%.1f filewrite=%.1f\n",
		(t1 - t0) / n, (t2 - t1) / n, (t4 - t3) / n);
	return 0;
}
