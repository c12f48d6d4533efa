/* Resource limits enforced and signal masks applied:
 * RLIMIT_NOFILE (EMFILE), RLIMIT_AS and RLIMIT_DATA (ENOMEM from mmap and
 * brk), RLIMIT_FSIZE (EFBIG and SIGXFSZ), handlers on the alternate
 * signal stack, and the signal masks of ppoll and pselect6. Prints the
 * same natively and on shoal. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MiB (1024L * 1024)

static const char *en(int e)
{
	switch (e) {
	case EMFILE: return "EMFILE";
	case EBADF: return "EBADF";
	case EINVAL: return "EINVAL";
	case ENOMEM: return "ENOMEM";
	case EFBIG: return "EFBIG";
	case EINTR: return "EINTR";
	case EPERM: return "EPERM";
	default: return strerror(e);
	}
}

#define SHOW(label, expr) do { long r_ = (long)(expr); printf("%-44s %ld %s\n", label, r_, r_ < 0 ? en(errno) : ""); } while (0)

static void soft(int res, rlim_t v)
{
	struct rlimit r;
	getrlimit(res, &r);
	r.rlim_cur = v;
	if (setrlimit(res, &r))
		printf("setrlimit %d failed: %s\n", res, en(errno));
}

static const char *mapped(void *p)
{
	return p == MAP_FAILED ? en(errno) : "mapped";
}

static void nofile(void)
{
	printf("-- RLIMIT_NOFILE\n");
	soft(RLIMIT_NOFILE, 16);
	struct rlimit r;
	getrlimit(RLIMIT_NOFILE, &r);
	printf("soft limit %ld\n", (long)r.rlim_cur);
	int fd, last = -1;
	while ((fd = open("/dev/null", O_RDONLY)) >= 0)
		last = fd;
	printf("last fd %d, then %s\n", last, en(errno));
	SHOW("dup", dup(0));
	SHOW("dup2 to 20", dup2(0, 20));
	SHOW("F_DUPFD from 20", fcntl(0, F_DUPFD, 20));
	SHOW("pipe", pipe((int[2]){0, 0}));
	close(last);
	SHOW("open after a close", fd = open("/dev/null", O_RDONLY));
	for (int i = 3; i <= last; i++)
		close(i);
	soft(RLIMIT_NOFILE, 1024);
}

static void memory(void)
{
	printf("-- RLIMIT_AS\n");
	soft(RLIMIT_AS, 64 * MiB);
	void *a = mmap(0, 40 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	printf("mmap 40 MiB: %s\n", mapped(a));
	void *b = mmap(0, 40 * MiB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	printf("mmap 40 MiB more: %s\n", mapped(b));
	void *c = malloc(40 * MiB);
	printf("malloc 40 MiB more: %s\n", c ? "ok" : "NULL");
	munmap(a, 40 * MiB);
	b = mmap(0, 40 * MiB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	printf("after munmap, mmap 40 MiB: %s\n", mapped(b));
	munmap(b, 40 * MiB);
	soft(RLIMIT_AS, RLIM_INFINITY);

	printf("-- RLIMIT_DATA\n");
	soft(RLIMIT_DATA, 32 * MiB);
	a = mmap(0, 40 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	printf("mmap 40 MiB writable: %s\n", mapped(a));
	a = mmap(0, 40 * MiB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	printf("mmap 40 MiB read-only: %s\n", mapped(a));
	munmap(a, 40 * MiB);
	c = malloc(40 * MiB);
	printf("malloc 40 MiB: %s\n", c ? "ok" : "NULL");
	long cur = syscall(SYS_brk, 0);
	long r = syscall(SYS_brk, cur + 40 * MiB);
	printf("brk +40 MiB: %s\n", r == cur ? "unchanged" : "moved");
	r = syscall(SYS_brk, cur + 4096);
	printf("brk +4 KiB: %s\n", r == cur + 4096 ? "moved" : "unchanged");
	syscall(SYS_brk, cur);
	soft(RLIMIT_DATA, RLIM_INFINITY);
	c = malloc(40 * MiB);
	printf("malloc 40 MiB without the limit: %s\n", c ? "ok" : "NULL");
	free(c);
}

static volatile int xfsz;
static void on_xfsz(int s)
{
	(void)s;
	xfsz++;
}

static void fsize(void)
{
	printf("-- RLIMIT_FSIZE\n");
	signal(SIGXFSZ, on_xfsz);
	char path[] = "/tmp/sys_limits.XXXXXX";
	int fd = mkstemp(path);
	char buf[150];
	memset(buf, 'x', sizeof buf);
	soft(RLIMIT_FSIZE, 100);
	SHOW("write 150 bytes (cut at 100)", write(fd, buf, 150));
	printf("SIGXFSZ %d\n", xfsz);
	SHOW("write at 100", write(fd, buf, 10));
	printf("SIGXFSZ %d\n", xfsz);
	SHOW("pwrite 10 at 50", pwrite(fd, buf, 10, 50));
	SHOW("pwrite 10 at 95", pwrite(fd, buf, 10, 95));
	SHOW("ftruncate to 200", ftruncate(fd, 200));
	printf("SIGXFSZ %d\n", xfsz);
	SHOW("ftruncate to 20", ftruncate(fd, 20));
	SHOW("write to a pipe is not limited", write(1, "", 0));
	soft(RLIMIT_FSIZE, RLIM_INFINITY);
	SHOW("write 150 bytes without the limit", write(fd, buf, 150));
	close(fd);
	unlink(path);
	signal(SIGXFSZ, SIG_DFL);
}

static char *alt;
#define ALTSZ (64 * 1024)
static volatile int on_alt, flags_in_handler, change_in_handler;

static void on_usr(int s)
{
	(void)s;
	char here;
	on_alt = &here >= alt && &here < alt + ALTSZ;
	stack_t cur, n = { .ss_sp = alt, .ss_size = ALTSZ };
	sigaltstack(0, &cur);
	flags_in_handler = cur.ss_flags;
	change_in_handler = sigaltstack(&n, 0) < 0 ? errno : 0;
}

static void altstack(void)
{
	printf("-- sigaltstack\n");
	alt = malloc(ALTSZ);
	stack_t ss = { .ss_sp = alt, .ss_size = ALTSZ };
	SHOW("sigaltstack", sigaltstack(&ss, 0));
	struct sigaction sa = { .sa_handler = on_usr, .sa_flags = SA_ONSTACK };
	sigaction(SIGUSR1, &sa, 0);
	raise(SIGUSR1);
	printf("SA_ONSTACK: on the alternate stack %d, SS_ONSTACK %d, change %s\n", on_alt,
	       flags_in_handler & SS_ONSTACK, change_in_handler ? en(change_in_handler) : "ok");
	sa.sa_flags = 0;
	sigaction(SIGUSR1, &sa, 0);
	raise(SIGUSR1);
	printf("without: on the alternate stack %d, SS_ONSTACK %d\n", on_alt, flags_in_handler & SS_ONSTACK);
	stack_t old;
	sigaltstack(0, &old);
	printf("outside: SS_ONSTACK %d\n", old.ss_flags & SS_ONSTACK);
	ss.ss_flags = SS_DISABLE;
	sigaltstack(&ss, 0);
}

static volatile int got;
static void on_sig(int s)
{
	got = s;
}

static pthread_t main_thread;
static void *kicker(void *arg)
{
	(void)arg;
	usleep(50000);
	pthread_kill(main_thread, SIGUSR2);
	return 0;
}

static int blocked(int s)
{
	sigset_t m;
	sigprocmask(SIG_BLOCK, 0, &m);
	return sigismember(&m, s);
}

static void masks(void)
{
	printf("-- ppoll and pselect6 masks\n");
	signal(SIGUSR1, on_sig);
	signal(SIGUSR2, on_sig);
	sigset_t block, empty;
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigaddset(&block, SIGUSR2);
	sigemptyset(&empty);
	sigprocmask(SIG_BLOCK, &block, 0);
	int p[2];
	pipe(p);
	struct pollfd pf = { .fd = p[0], .events = POLLIN };
	struct timespec ts = { 1, 0 };

	/* A pending signal the temporary mask lets through: EINTR at once. */
	raise(SIGUSR1);
	printf("pending, handled %d\n", got);
	SHOW("ppoll with an empty mask", ppoll(&pf, 1, &ts, &empty));
	printf("handled %d, SIGUSR1 blocked again %d\n", got, blocked(SIGUSR1));
	got = 0;
	raise(SIGUSR1);
	SHOW("ppoll with the signal still blocked", ppoll(&pf, 1, &(struct timespec){0, 1000000}, &block));
	printf("handled %d\n", got);
	fd_set rd;
	FD_ZERO(&rd);
	FD_SET(p[0], &rd);
	SHOW("pselect with an empty mask", pselect(p[0] + 1, &rd, 0, 0, &ts, &empty));
	printf("handled %d, SIGUSR1 blocked again %d\n", got, blocked(SIGUSR1));
	got = 0;

	/* Sent by another thread while the wait runs. */
	main_thread = pthread_self();
	pthread_t t;
	pthread_create(&t, 0, kicker, 0);
	SHOW("ppoll, signalled by a thread", ppoll(&pf, 1, &ts, &empty));
	printf("handled %d, SIGUSR2 blocked again %d\n", got, blocked(SIGUSR2));
	pthread_join(t, 0);
	got = 0;
	pthread_create(&t, 0, kicker, 0);
	FD_ZERO(&rd);
	FD_SET(p[0], &rd);
	SHOW("pselect, signalled by a thread", pselect(p[0] + 1, &rd, 0, 0, &ts, &empty));
	printf("handled %d, SIGUSR2 blocked again %d\n", got, blocked(SIGUSR2));
	pthread_join(t, 0);
	/* A ready descriptor wins over a signal. */
	write(p[1], "x", 1);
	raise(SIGUSR1);
	got = 0;
	SHOW("ppoll, ready and signalled", ppoll(&pf, 1, &ts, &empty));
	printf("handled %d\n", got);
	sigprocmask(SIG_UNBLOCK, &block, 0);
	printf("after unblocking, handled %d\n", got);
}

int main(void)
{
	nofile();
	memory();
	fsize();
	altstack();
	masks();
	printf("done\n");
	return 0;
}
