/* tmpl (a test helper for templates, docs/serve.md "Templates"): what
 * must differ between copies of one template.
 *
 * GET /        "count=N random=HEX marks=M poison=P\n": N is this
 *              instance's request count so far (1 on a fresh instance),
 *              HEX 16 bytes from getrandom, M how many /tmp/mark-*
 *              files it sees after writing its own (1: it sees no
 *              sibling's), P a global variable /poison sets.
 * GET /poison  sets that variable to 1 (a sibling must not see it).
 * GET /host?nr=N&a=A&b=B&c=C
 *              makes host system call N straight from the program (an
 *              inline `syscall` instruction: the guest kernel never sees
 *              it; what a hostile program can do), answers "ret=R" if the
 *              sandbox lets it return.
 * CRASH_BEFORE_READY=1 in the environment: the program crashes before it
 * listens (a template that never reaches its ready point).
 * FORK_BEFORE_READY=1: before it listens the program forks on the host
 * itself (an inline clone(CLONE_PARENT), what a template may do at its
 * ready point); the child, if there is one, sleeps for ever. GET / then
 * adds "fork=R", the call's result in the parent (-11: EAGAIN).
 * FORGE_READY=1: before it listens the program writes the template's
 * ready word on the control channel itself (descriptor 63) and then forks
 * on the host until a fork succeeded and a later one fails (up to 3 s):
 * the children sleep for ever.
 * READY_EXPLICIT=1: an expensive start (about 20 ms of work whose result
 * and a random draw are kept), then the explicit ready point: two writes
 * of "ready" to /dev/shoal/ready (the second changes nothing), then a
 * second random draw, then it listens. GET / then adds "init=HEX"
 * (drawn before the ready point: the template's, the same in every copy),
 * "after=HEX" (drawn after it: each copy's own), "work=W" (the start's
 * result), "inits=N" (how many times the start ran in this memory: 1) and
 * "ready=A,B" (the two writes' results). */
#include "fn_http.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static long count;
static int poison;
static long forked = 1;
static char init_hex[17] = "-", after_hex[17] = "-";
static unsigned long work;
static long inits, ready_a = -1, ready_b = -1;

static void draw(char *hex)
{
	unsigned char b[8];
	if (getrandom(b, sizeof b, 0) == (ssize_t)sizeof b)
		for (int i = 0; i < 8; i++)
			snprintf(hex + 2 * i, 3, "%02x", b[i]);
}

/* The explicit ready point (READY_EXPLICIT=1): an ordinary open and write. */
static long say_ready(void)
{
	int fd = open("/dev/shoal/ready", O_WRONLY);
	if (fd < 0)
		return -errno;
	long r = write(fd, "ready\n", 6);
	if (r < 0)
		r = -errno;
	close(fd);
	return r;
}

static long host_syscall(long n, long a, long b, long c);

static long host_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
	return ret;
}

static void sleep_for_ever(void)
{
	struct timespec ts = { 3600, 0 };
	for (;;)
		host_syscall6(230, 1 /* CLOCK_MONOTONIC */, 0, (long)&ts, 0, 0, 0);
}

int fn_init(void)
{
	const char *c = getenv("CRASH_BEFORE_READY");
	if (c && *c == '1')
		*(volatile int *)0 = 1;
	const char *f = getenv("FORK_BEFORE_READY");
	if (f && *f == '1') {
		forked = host_syscall(56, 0x8000 /* CLONE_PARENT */, 0, 0);
		if (forked == 0)
			sleep_for_ever();
	}
	const char *g = getenv("FORGE_READY");
	if (g && *g == '1') {
		/* The template's ready word, "TL READY" (shoal-spt's template.rs). */
		unsigned long long word = 0x5944414552204c54ULL;
		host_syscall6(44 /* sendto */, 63, (long)&word, 8, 0x4000 /* MSG_NOSIGNAL */, 0, 0);
		struct timespec ms = { 0, 1000000 };
		int made = 0;
		for (int i = 0; i < 3000; i++) {
			long r = host_syscall(56, 0x8000 /* CLONE_PARENT */, 0, 0);
			if (r == 0)
				sleep_for_ever();
			if (r > 0)
				made++;
			else if (made > 0)
				break;
			else
				host_syscall6(230, 1, 0, (long)&ms, 0, 0, 0);
		}
		forked = made;
	}
	const char *x = getenv("READY_EXPLICIT");
	if (x && *x == '1') {
		inits++;
		/* The expensive start a template saves every copy. */
		unsigned long h = 1469598103934665603UL;
		for (unsigned long i = 0; i < 20000000UL; i++)
			h = (h ^ i) * 1099511628211UL;
		work = h;
		draw(init_hex);
		ready_a = say_ready();
		ready_b = say_ready();
		draw(after_hex);
	}
	return 0;
}

static long host_syscall(long n, long a, long b, long c)
{
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return ret;
}

int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r)
{
	(void)method, (void)body, (void)len;
	long n = __atomic_add_fetch(&count, 1, __ATOMIC_SEQ_CST);
	if (!strcmp(path, "/poison")) {
		poison = 1;
		fn_printf(r, "poisoned\n");
		return 0;
	}
	if (!strcmp(path, "/host")) {
		long ret = host_syscall(fn_query_long(query, "nr", -1), fn_query_long(query, "a", 0), fn_query_long(query, "b", 0), fn_query_long(query, "c", 0));
		fn_printf(r, "ret=%ld\n", ret);
		return 0;
	}
	unsigned char rnd[16];
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
		r->status = 500;
		fn_printf(r, "getrandom failed\n");
		return 0;
	}
	char hex[33];
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
	mkdir("/tmp", 0777);
	char mark[64];
	snprintf(mark, sizeof mark, "/tmp/mark-%s", hex);
	int fd = open(mark, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	if (fd >= 0) {
		(void)!write(fd, hex, 32);
		close(fd);
	}
	int marks = 0;
	DIR *d = opendir("/tmp");
	if (d) {
		struct dirent *e;
		while ((e = readdir(d)))
			if (!strncmp(e->d_name, "mark-", 5))
				marks++;
		closedir(d);
	}
	fn_printf(r, "count=%ld random=%s marks=%d poison=%d fork=%ld init=%s after=%s work=%lx inits=%ld ready=%ld,%ld\n", n, hex, marks, poison, forked, init_hex,
		  after_hex, work, inits, ready_a, ready_b);
	return 0;
}
