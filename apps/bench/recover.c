/* The system calls of VampOS's Fig. 5 and the cost of a
 * component gate, measured from inside a program: used by `shoal bench
 * recover`, built both as a shoal image (run with the gates, and with
 * `shoal run --no-recover`) and as a native static musl program from this
 * same source.
 *
 *   recover N   -> N calls of each operation, the whole set 5 times;
 *                  prints on stderr, per call, the lowest of the 5 (the
 *                  machine is shared: the minimum is the cost without
 *                  interference) in cycles (rdtsc around the loop) and
 *                  nanoseconds (CLOCK_MONOTONIC around the loop):
 *                  "call_cyc=.. call_ns=.. getuid_cyc=.. ... sock_ns=.."
 *
 * Operations: an empty function call (the floor), getuid (a call into
 * `user`, a rebootable component: the whole gate), getpid (`process`: a
 * gate that only records and counts), and Fig. 5's open, 1-byte write,
 * 1-byte read and close of a file in /tmp, and a 222-byte write and read
 * on a connected AF_UNIX socket pair (inside the kernel) and on a TCP
 * connection over 127.0.0.1 (when the program may bind and connect:
 * shoal run --net-bind-any --net-outbound). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static inline uint64_t rdtsc(void)
{
	uint32_t lo, hi;
	__asm__ volatile("lfence; rdtsc" : "=a"(lo), "=d"(hi) : : "memory");
	return ((uint64_t)hi << 32) | lo;
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

__attribute__((noinline)) static long empty(long x)
{
	__asm__ volatile("" : "+r"(x));
	return x;
}

/* One measured operation: total cycles and nanoseconds over n calls. */
struct m {
	const char *name;
	double cyc, ns;
};

#define MEASURE(slot, label, body)                       \
	do {                                             \
		double t0 = now_ns();                    \
		uint64_t c0 = rdtsc();                   \
		for (long i = 0; i < n; i++) {           \
			body;                            \
		}                                        \
		uint64_t c1 = rdtsc();                   \
		double t1 = now_ns();                    \
		(slot) = (struct m){(label), (double)(c1 - c0) / n, (t1 - t0) / n}; \
	} while (0)

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	if (n <= 0) {
		fprintf(stderr, "usage: %s ITERATIONS\n", argv[0]);
		return 2;
	}
	struct m best[9];
	int k = 0;
	long sink = 0;
	for (int rep = 0; rep < 5; rep++) {
	struct m r[9];
	k = 0;
	MEASURE(r[k++], "call", sink += empty(i));
	/* syscall() rather than the libc wrappers: no libc may cache them. */
	MEASURE(r[k++], "getuid", sink += syscall(SYS_getuid));
	MEASURE(r[k++], "getpid", sink += syscall(SYS_getpid));
	char path[64];
	snprintf(path, sizeof path, "/tmp/shoal-recover-bench-%ld", (long)getpid());
	int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
	if (fd < 0)
		return 3;
	MEASURE(r[k++], "write", if (write(fd, "x", 1) != 1) return 4);
	if (lseek(fd, 0, SEEK_SET) != 0)
		return 5;
	char c;
	MEASURE(r[k++], "read", if (read(fd, &c, 1) != 1) return 6);
	close(fd);
	/* open and close apart: each loop times its own half. */
	double open_cyc = 0, open_ns = 0, close_cyc = 0, close_ns = 0;
	for (long i = 0; i < n; i++) {
		double t0 = now_ns();
		uint64_t c0 = rdtsc();
		int f = open(path, O_RDONLY);
		uint64_t c1 = rdtsc();
		double t1 = now_ns();
		if (f < 0)
			return 7;
		close(f);
		uint64_t c2 = rdtsc();
		double t2 = now_ns();
		open_cyc += c1 - c0;
		open_ns += t1 - t0;
		close_cyc += c2 - c1;
		close_ns += t2 - t1;
	}
	r[k++] = (struct m){"open", open_cyc / n, open_ns / n};
	r[k++] = (struct m){"close", close_cyc / n, close_ns / n};
	unlink(path);
	int sv[2];
	char buf[222] = {0};
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0) {
		/* A write and the read that takes it back: one socket write
		 * and one socket read of Fig. 5 per iteration. */
		MEASURE(r[k++], "sock", if (write(sv[0], buf, sizeof buf) != sizeof buf) return 8;
			if (read(sv[1], buf, sizeof buf) != sizeof buf) return 9);
		close(sv[0]);
		close(sv[1]);
	}
	/* The same over a TCP connection on 127.0.0.1 (the paper's socket
	 * read and write go through the network stack; on shoal the host's,
	 * through the tender: shoal run --net-bind-any --net-outbound). */
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	int one = 1;
	if (l >= 0 && bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 1) == 0 &&
	    getsockname(l, (struct sockaddr *)&a, &al) == 0) {
		int c = socket(AF_INET, SOCK_STREAM, 0);
		if (c >= 0 && connect(c, (struct sockaddr *)&a, sizeof a) == 0) {
			int s = accept(l, 0, 0);
			if (s >= 0) {
				setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
				MEASURE(r[k++], "tcp", if (write(c, buf, sizeof buf) != sizeof buf) return 12;
					for (size_t got = 0; got < sizeof buf;) {
						ssize_t g = read(s, buf + got, sizeof buf - got);
						if (g <= 0)
							return 13;
						got += g;
					});
				close(s);
			}
		}
		if (c >= 0)
			close(c);
	}
	if (l >= 0)
		close(l);
	for (int i = 0; i < k; i++) {
		if (rep == 0 || r[i].cyc < best[i].cyc)
			best[i].cyc = r[i].cyc;
		if (rep == 0 || r[i].ns < best[i].ns)
			best[i].ns = r[i].ns;
		best[i].name = r[i].name;
	}
	}
	for (int i = 0; i < k; i++)
		fprintf(stderr, "%s_cyc=%.1f %s_ns=%.1f ", best[i].name, best[i].cyc, best[i].name, best[i].ns);
	fprintf(stderr, "sink=%ld\n", sink & 1);
	return 0;
}
