/* Advisory locks: flock, POSIX record locks and
 * open-file-description locks conflict as on Linux, F_GETLK reports the
 * holder, blocking waits block only the calling thread, and locks go on
 * close (POSIX: any close of the file; OFD/flock: the description's last).
 * Prints the same natively and on shoal. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static char path[] = "/tmp/sys_locks.XXXXXX";

static const char *en(int e)
{
	switch (e) {
	case EAGAIN: return "EAGAIN";
	case EBADF: return "EBADF";
	case EINVAL: return "EINVAL";
	case EINTR: return "EINTR";
	case EDEADLK: return "EDEADLK";
	default: return strerror(e);
	}
}

#define SHOW(label, expr) do { int r_ = (expr); printf("%-40s %d %s\n", label, r_, r_ < 0 ? en(errno) : ""); } while (0)

static int lk(int fd, int cmd, short type, off_t start, off_t len)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
	return fcntl(fd, cmd, &fl);
}

static void getlk(const char *label, int fd, int cmd, short type, off_t start, off_t len)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len };
	if (fcntl(fd, cmd, &fl) < 0) {
		printf("%-40s -1 %s\n", label, en(errno));
		return;
	}
	if (fl.l_type == F_UNLCK) {
		printf("%-40s unlocked\n", label);
		return;
	}
	printf("%-40s %s start %ld len %ld pid %s\n", label, fl.l_type == F_WRLCK ? "write" : "read",
	       (long)fl.l_start, (long)fl.l_len,
	       fl.l_pid == getpid() ? "self" : fl.l_pid == -1 ? "-1" : "other");
}

static int ofd_a;

static void *ofd_waiter(void *arg)
{
	(void)arg;
	int e = open(path, O_RDWR);
	SHOW("thread: OFD setlk (held by main)", lk(e, F_OFD_SETLK, F_WRLCK, 0, 0));
	printf("thread: waiting in F_OFD_SETLKW\n");
	SHOW("thread: OFD setlkw", lk(e, F_OFD_SETLKW, F_WRLCK, 0, 0));
	/* A POSIX lock (owner: the process) conflicts with the OFD lock this
	 * thread now holds through another description. */
	SHOW("thread: POSIX setlk vs own OFD lock", lk(ofd_a, F_SETLK, F_RDLCK, 0, 1));
	close(e);
	return 0;
}

static void *flock_waiter(void *arg)
{
	(void)arg;
	int e = open(path, O_RDONLY);
	SHOW("thread: flock EX|NB (held by main)", flock(e, LOCK_EX | LOCK_NB));
	printf("thread: waiting in flock\n");
	SHOW("thread: flock EX", flock(e, LOCK_EX));
	close(e);
	return 0;
}

static void *posix_thread(void *arg)
{
	(void)arg;
	int e = open(path, O_RDWR);
	SHOW("thread: POSIX setlk where main holds", lk(e, F_SETLK, F_WRLCK, 0, 10));
	close(e); /* drops the process's POSIX locks on the file */
	return 0;
}

int main(void)
{
	int t = mkstemp(path);
	if (t < 0)
		return 1;
	close(t);
	int a = open(path, O_RDWR), b = open(path, O_RDWR), ro = open(path, O_RDONLY);

	printf("-- flock\n");
	SHOW("flock a EX", flock(a, LOCK_EX));
	SHOW("flock b EX|NB", flock(b, LOCK_EX | LOCK_NB));
	SHOW("flock b SH|NB", flock(b, LOCK_SH | LOCK_NB));
	SHOW("flock a EX again", flock(a, LOCK_EX | LOCK_NB));
	SHOW("flock a UN", flock(a, LOCK_UN));
	SHOW("flock b SH|NB", flock(b, LOCK_SH | LOCK_NB));
	SHOW("flock a SH|NB", flock(a, LOCK_SH | LOCK_NB));
	SHOW("flock a EX|NB (upgrade, fails)", flock(a, LOCK_EX | LOCK_NB));
	SHOW("flock b EX|NB (a's lock went)", flock(b, LOCK_EX | LOCK_NB));
	int d = dup(b);
	close(b);
	SHOW("flock a SH|NB (dup keeps b's)", flock(a, LOCK_SH | LOCK_NB));
	close(d);
	SHOW("flock a SH|NB (last close)", flock(a, LOCK_SH | LOCK_NB));
	SHOW("flock bad op", flock(a, 3));
	SHOW("flock a UN", flock(a, LOCK_UN));
	b = open(path, O_RDWR);

	printf("-- record locks\n");
	SHOW("POSIX a write [0,100)", lk(a, F_SETLK, F_WRLCK, 0, 100));
	SHOW("POSIX b write [50,60) same process", lk(b, F_SETLK, F_WRLCK, 50, 10));
	getlk("GETLK b", b, F_GETLK, F_WRLCK, 0, 0);
	SHOW("OFD b read [10,11)", lk(b, F_OFD_SETLK, F_RDLCK, 10, 1));
	getlk("OFD_GETLK b", b, F_OFD_GETLK, F_RDLCK, 10, 1);
	SHOW("POSIX unlock [10,20)", lk(a, F_SETLK, F_UNLCK, 10, 10));
	getlk("OFD_GETLK b [5,...)", b, F_OFD_GETLK, F_WRLCK, 5, 0);
	SHOW("OFD b write [10,20)", lk(b, F_OFD_SETLK, F_WRLCK, 10, 10));
	getlk("OFD_GETLK b own lock", b, F_OFD_GETLK, F_WRLCK, 12, 1);
	getlk("GETLK a", a, F_GETLK, F_RDLCK, 0, 0);
	SHOW("POSIX write on read-only fd", lk(ro, F_SETLK, F_WRLCK, 0, 1));
	SHOW("GETLK with F_UNLCK", lk(a, F_GETLK, F_UNLCK, 0, 1));
	SHOW("negative start", lk(a, F_SETLK, F_RDLCK, -5, 1));
	struct flock fl = { .l_type = F_RDLCK, .l_pid = 7 };
	SHOW("OFD lock with l_pid set", fcntl(a, F_OFD_SETLK, &fl));
	getlk("OFD_GETLK a [0,10) before close", a, F_OFD_GETLK, F_WRLCK, 0, 10);
	close(ro); /* any close drops the process's POSIX locks */
	getlk("OFD_GETLK a [0,10) after close", a, F_OFD_GETLK, F_WRLCK, 0, 10);
	getlk("OFD_GETLK a [10,20)", a, F_OFD_GETLK, F_WRLCK, 10, 10);
	d = dup(b);
	close(b);
	getlk("OFD lock kept by the dup", a, F_OFD_GETLK, F_WRLCK, 10, 10);
	close(d);
	getlk("OFD lock gone at last close", a, F_OFD_GETLK, F_WRLCK, 10, 10);

	printf("-- threads\n");
	pthread_t th;
	ofd_a = a;
	SHOW("main: OFD write whole file", lk(a, F_OFD_SETLK, F_WRLCK, 0, 0));
	pthread_create(&th, 0, ofd_waiter, 0);
	usleep(100000);
	printf("main: OFD unlock\n");
	lk(a, F_OFD_SETLK, F_UNLCK, 0, 0);
	pthread_join(th, 0);

	int f = open(path, O_RDONLY);
	SHOW("main: flock EX", flock(f, LOCK_EX));
	pthread_create(&th, 0, flock_waiter, 0);
	usleep(100000);
	printf("main: close the flock's description\n");
	close(f);
	pthread_join(th, 0);

	SHOW("main: POSIX write [0,10)", lk(a, F_SETLK, F_WRLCK, 0, 10));
	pthread_create(&th, 0, posix_thread, 0);
	pthread_join(th, 0);
	b = open(path, O_RDWR);
	getlk("after the thread's close", b, F_OFD_GETLK, F_WRLCK, 0, 10);

	unlink(path);
	printf("done\n");
	return 0;
}
