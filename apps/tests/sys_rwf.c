/* preadv2/pwritev2 and their RWF_* flags as Linux
 * honours them on tmpfs, pipes and the memory devices. Prints the same
 * natively (the file in /dev/shm, a tmpfs) and on shoal. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* musl 1.2.3 names none of the RWF_* flags. */
#define RWF_HIPRI 0x01
#define RWF_DSYNC 0x02
#define RWF_NOWAIT 0x08
#define RWF_APPEND 0x10

/* musl 1.2.3 has no wrappers; x86-64 passes the offset as (low, high). */
static long pw2(int fd, const char *s, long pos, int flags)
{
	struct iovec io = { (void *)s, strlen(s) };
	return syscall(SYS_pwritev2, fd, &io, 1, pos, 0L, flags);
}

static long pr2(int fd, char *b, size_t n, long pos, int flags)
{
	struct iovec io = { b, n };
	return syscall(SYS_preadv2, fd, &io, 1, pos, 0L, flags);
}

static const char *en(int e)
{
	switch (e) {
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EINVAL: return "EINVAL";
	case EAGAIN: return "EAGAIN";
	case EBADF: return "EBADF";
	case EPIPE: return "EPIPE";
	case ESPIPE: return "ESPIPE";
	default: return strerror(e);
	}
}

#define SHOW(label, expr) do { long r_ = (expr); printf("%-44s %ld %s\n", label, r_, r_ < 0 ? en(errno) : ""); } while (0)

static void contents(int fd)
{
	char b[64] = { 0 };
	long n = pread(fd, b, sizeof b - 1, 0);
	printf("  file: %ld \"%s\", offset %ld\n", n, b, (long)lseek(fd, 0, SEEK_CUR));
}

static int wfd;
static void *late_writer(void *arg)
{
	(void)arg;
	usleep(50000);
	write(wfd, "late", 4);
	return 0;
}

static volatile int sigpipes;
static void on_pipe(int s)
{
	(void)s;
	sigpipes++;
}

int main(void)
{
	char path[64];
	snprintf(path, sizeof path, "%s/sys_rwf.XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	int fd = mkstemp(path);
	write(fd, "0123456789", 10);

	printf("-- RWF_APPEND\n");
	SHOW("pwritev2 at 2, RWF_APPEND", pw2(fd, "ab", 2, RWF_APPEND));
	contents(fd);
	SHOW("pwritev2 at -1, RWF_APPEND", pw2(fd, "cd", -1, RWF_APPEND));
	contents(fd);
	SHOW("pwritev2 at 0, no flags", pw2(fd, "XY", 0, 0));
	contents(fd);

	printf("-- each flag on a file\n");
	for (int f = 1; f <= 0x200; f <<= 1) {
		char label[64], b[8];
		snprintf(label, sizeof label, "pwritev2 flag %#x", f);
		SHOW(label, pw2(fd, "w", 1, f));
		snprintf(label, sizeof label, "preadv2 flag %#x", f);
		SHOW(label, pr2(fd, b, 4, 0, f));
	}
	contents(fd);
	SHOW("RWF_APPEND|RWF_NOAPPEND", pw2(fd, "z", 0, RWF_APPEND | 0x20));
	SHOW("offset -2", pw2(fd, "z", -2, 0));
	int ro = open(path, O_RDONLY);
	SHOW("read-only descriptor, unknown flag", pw2(ro, "z", 0, 0x200));
	close(ro);
	int ap = open(path, O_RDWR | O_APPEND);
	SHOW("O_APPEND, RWF_NOAPPEND at 3", pw2(ap, "N", 3, 0x20));
	SHOW("O_APPEND, no flag at 3", pw2(ap, "A", 3, 0));
	contents(fd);
	close(ap);

	printf("-- pipes\n");
	int p[2];
	pipe(p);
	char b[16] = { 0 };
	SHOW("preadv2 RWF_NOWAIT, empty pipe", pr2(p[0], b, 8, -1, RWF_NOWAIT));
	SHOW("preadv2 at 0 on a pipe", pr2(p[0], b, 8, 0, 0));
	write(p[1], "data", 4);
	SHOW("preadv2 RWF_NOWAIT, data", pr2(p[0], b, 8, -1, RWF_NOWAIT));
	wfd = p[1];
	pthread_t t;
	pthread_create(&t, 0, late_writer, 0);
	memset(b, 0, sizeof b);
	SHOW("preadv2 waits for a writer", pr2(p[0], b, 8, -1, 0));
	printf("  got \"%s\"\n", b);
	pthread_join(t, 0);
	fcntl(p[1], F_SETFL, O_NONBLOCK);
	static char big[4096];
	while (write(p[1], big, sizeof big) > 0)
		;
	fcntl(p[1], F_SETFL, 0);
	SHOW("pwritev2 RWF_NOWAIT, full pipe", pw2(p[1], "x", -1, RWF_NOWAIT));
	close(p[0]);
	signal(SIGPIPE, on_pipe);
	SHOW("pwritev2 RWF_NOSIGNAL, no reader", pw2(p[1], "x", -1, 0x100));
	printf("  SIGPIPE %d\n", sigpipes);
	SHOW("pwritev2, no reader", pw2(p[1], "x", -1, 0));
	printf("  SIGPIPE %d\n", sigpipes);
	close(p[1]);

	printf("-- devices\n");
	int null = open("/dev/null", O_RDWR), full = open("/dev/full", O_RDWR);
	SHOW("/dev/null preadv2 RWF_NOWAIT", pr2(null, b, 4, -1, RWF_NOWAIT));
	SHOW("/dev/null pwritev2 RWF_DSYNC", pw2(null, "abc", -1, RWF_DSYNC));
	SHOW("/dev/full pwritev2 RWF_HIPRI", pw2(full, "abc", -1, RWF_HIPRI));
	SHOW("/dev/full pwritev2 RWF_DSYNC", pw2(full, "abc", -1, RWF_DSYNC));
	SHOW("/dev/full preadv2 RWF_NOWAIT", pr2(full, b, 4, -1, RWF_NOWAIT));

	unlink(path);
	printf("done\n");
	return 0;
}
