/* Robust and priority-inheritance mutexes: a robust
 * mutex whose owner exited gives EOWNERDEAD (also to a waiter blocked at
 * the time), PI mutexes lock, contend and hand over, and the raw futex
 * protocol — FUTEX_LOCK_PI/TRYLOCK_PI/UNLOCK_PI, FUTEX_WAITERS, EDEADLK,
 * ESRCH, EPERM, get_robust_list and the kernel's robust-list walk at a
 * raw thread exit — behaves as on Linux. Prints the same natively and on
 * shoal. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The futex ABI (linux/futex.h, which musl's sysroot does not have). */
#define FUTEX_WAIT 0
#define FUTEX_LOCK_PI 6
#define FUTEX_UNLOCK_PI 7
#define FUTEX_TRYLOCK_PI 8
#define FUTEX_WAITERS 0x80000000u
#define FUTEX_OWNER_DIED 0x40000000u
#define FUTEX_TID_MASK 0x3fffffffu

static const char *en(int e)
{
	switch (e) {
	case 0: return "0";
	case EOWNERDEAD: return "EOWNERDEAD";
	case ENOTRECOVERABLE: return "ENOTRECOVERABLE";
	case EBUSY: return "EBUSY";
	case EDEADLK: return "EDEADLK";
	case ESRCH: return "ESRCH";
	case EPERM: return "EPERM";
	case EAGAIN: return "EAGAIN";
	case EINVAL: return "EINVAL";
	case ETIMEDOUT: return "ETIMEDOUT";
	default: return strerror(e);
	}
}

static long futex(volatile uint32_t *w, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, w, op, val, ts, 0, 0);
}

#define RAW(label, expr) do { long r_ = (expr); printf("%-44s %s\n", label, r_ < 0 ? en(errno) : "0"); } while (0)

static pthread_mutex_t m;

static void *lock_and_exit(void *a)
{
	pthread_mutex_lock(&m);
	if (a)
		usleep(50000);
	return 0; /* exits holding it */
}

static void *hold_then_unlock(void *a)
{
	(void)a;
	pthread_mutex_lock(&m);
	usleep(50000);
	printf("thread: unlock\n");
	pthread_mutex_unlock(&m);
	return 0;
}

static void *try_from_thread(void *a)
{
	(void)a;
	printf("thread: trylock %s\n", en(pthread_mutex_trylock(&m)));
	printf("thread: unlock (not owner) %s\n", en(pthread_mutex_unlock(&m)));
	return 0;
}

static void init(int robust, int pi, int type)
{
	pthread_mutexattr_t at;
	pthread_mutexattr_init(&at);
	if (robust)
		pthread_mutexattr_setrobust(&at, PTHREAD_MUTEX_ROBUST);
	if (pi)
		printf("setprotocol PRIO_INHERIT %s\n", en(pthread_mutexattr_setprotocol(&at, PTHREAD_PRIO_INHERIT)));
	pthread_mutexattr_settype(&at, type);
	pthread_mutex_init(&m, &at);
	pthread_mutexattr_destroy(&at);
}

static void robust_cases(int pi)
{
	pthread_t t;
	printf("-- robust%s: owner exits\n", pi ? " PI" : "");
	init(1, pi, PTHREAD_MUTEX_NORMAL);
	pthread_create(&t, 0, lock_and_exit, 0);
	pthread_join(t, 0);
	printf("lock %s\n", en(pthread_mutex_lock(&m)));
	printf("consistent %s\n", en(pthread_mutex_consistent(&m)));
	printf("unlock %s\n", en(pthread_mutex_unlock(&m)));
	printf("lock again %s\n", en(pthread_mutex_lock(&m)));
	pthread_mutex_unlock(&m);

	printf("-- robust%s: owner exits while main waits\n", pi ? " PI" : "");
	pthread_create(&t, 0, lock_and_exit, (void *)1);
	usleep(10000);
	printf("main: lock (blocks)\n");
	printf("main: lock %s\n", en(pthread_mutex_lock(&m)));
	pthread_join(t, 0);
	printf("unlock without consistent %s\n", en(pthread_mutex_unlock(&m)));
	printf("lock now %s\n", en(pthread_mutex_lock(&m)));
	pthread_mutex_destroy(&m);
}

static void pi_cases(void)
{
	pthread_t t;
	printf("-- PI mutex\n");
	init(0, 1, PTHREAD_MUTEX_ERRORCHECK);
	printf("lock %s\n", en(pthread_mutex_lock(&m)));
	printf("lock again %s\n", en(pthread_mutex_lock(&m)));
	pthread_create(&t, 0, try_from_thread, 0);
	pthread_join(t, 0);
	printf("unlock %s\n", en(pthread_mutex_unlock(&m)));
	pthread_create(&t, 0, hold_then_unlock, 0);
	usleep(10000);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 10000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	printf("main: timedlock 10 ms %s\n", en(pthread_mutex_timedlock(&m, &ts)));
	printf("main: lock (blocks)\n");
	printf("main: lock %s\n", en(pthread_mutex_lock(&m)));
	pthread_mutex_unlock(&m);
	pthread_join(t, 0);
	pthread_mutex_destroy(&m);
}

static volatile uint32_t word;
static volatile int stage;

static void *pi_waiter(void *a)
{
	(void)a;
	stage = 1;
	long r = futex(&word, FUTEX_LOCK_PI, 0, 0);
	printf("thread: FUTEX_LOCK_PI %s, owner is me %d, waiters bit %d\n", r < 0 ? en(errno) : "0",
	       (word & FUTEX_TID_MASK) == (uint32_t)gettid(), !!(word & FUTEX_WAITERS));
	RAW("thread: FUTEX_UNLOCK_PI", futex(&word, FUTEX_UNLOCK_PI, 0, 0));
	printf("thread: word now %#x\n", word);
	return 0;
}

static void *trylock_other(void *a)
{
	(void)a;
	RAW("thread: FUTEX_TRYLOCK_PI (held by main)", futex(&word, FUTEX_TRYLOCK_PI, 0, 0));
	RAW("thread: FUTEX_UNLOCK_PI (not owner)", futex(&word, FUTEX_UNLOCK_PI, 0, 0));
	return 0;
}

struct robust_head {
	void *next;
	long offset;
	void *pending;
};
struct node {
	void *next;
	volatile uint32_t word;
};
static struct node node;
static struct robust_head rhead;
static volatile uint32_t child_tid;

static void *raw_exit(void *a)
{
	(void)a;
	rhead.next = &node;
	rhead.offset = offsetof(struct node, word);
	rhead.pending = 0;
	node.next = &rhead;
	node.word = gettid();
	child_tid = gettid();
	syscall(SYS_set_robust_list, &rhead, sizeof rhead);
	struct robust_head *h;
	size_t len;
	syscall(SYS_get_robust_list, 0, &h, &len);
	printf("thread: get_robust_list head ok %d, len %zu\n", h == &rhead, len);
	usleep(30000);
	syscall(SYS_exit, 0); /* no pthread_exit: the kernel walks the list */
	return 0;
}

static void raw_protocol(void)
{
	printf("-- raw PI futex protocol\n");
	word = 0;
	RAW("FUTEX_LOCK_PI on 0", futex(&word, FUTEX_LOCK_PI, 0, 0));
	printf("word is my tid %d\n", word == (uint32_t)gettid());
	RAW("FUTEX_LOCK_PI again", futex(&word, FUTEX_LOCK_PI, 0, 0));
	RAW("FUTEX_TRYLOCK_PI again", futex(&word, FUTEX_TRYLOCK_PI, 0, 0));
	pthread_t t;
	pthread_create(&t, 0, trylock_other, 0);
	pthread_join(t, 0);
	pthread_create(&t, 0, pi_waiter, 0);
	while (!stage)
		usleep(1000);
	usleep(20000);
	printf("main: waiters bit %d\n", !!(word & FUTEX_WAITERS));
	/* Printed after the join: natively the new owner runs at once. */
	long ur = futex(&word, FUTEX_UNLOCK_PI, 0, 0);
	int ue = errno;
	pthread_join(t, 0);
	errno = ue;
	RAW("main: FUTEX_UNLOCK_PI (before the thread's lines)", ur);
	RAW("FUTEX_UNLOCK_PI of a free word", futex(&word, FUTEX_UNLOCK_PI, 0, 0));
	word = 0x3ffffffe;
	RAW("FUTEX_LOCK_PI, owner does not exist", futex(&word, FUTEX_LOCK_PI, 0, 0));
	RAW("FUTEX_TRYLOCK_PI, owner does not exist", futex(&word, FUTEX_TRYLOCK_PI, 0, 0));
	word = FUTEX_OWNER_DIED;
	RAW("FUTEX_TRYLOCK_PI, owner died", futex(&word, FUTEX_TRYLOCK_PI, 0, 0));
	printf("owner died kept %d, mine %d\n", !!(word & FUTEX_OWNER_DIED), (word & FUTEX_TID_MASK) == (uint32_t)gettid());
	futex(&word, FUTEX_UNLOCK_PI, 0, 0);

	printf("-- get_robust_list and the kernel's robust-list walk\n");
	struct robust_head *h;
	size_t len;
	RAW("get_robust_list of a missing thread", syscall(SYS_get_robust_list, 0x3ffffffe, &h, &len));
	pthread_create(&t, 0, raw_exit, 0);
	while (!child_tid)
		usleep(1000);
	uint32_t v = node.word;
	__atomic_compare_exchange_n(&node.word, &v, v | FUTEX_WAITERS, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	while ((node.word & FUTEX_TID_MASK) != 0)
		futex(&node.word, FUTEX_WAIT, node.word, 0);
	printf("after the owner's exit: owner died %d, waiters %d, tid %u\n", !!(node.word & FUTEX_OWNER_DIED),
	       !!(node.word & FUTEX_WAITERS), node.word & FUTEX_TID_MASK);
}

int main(void)
{
	robust_cases(0);
	robust_cases(1);
	pi_cases();
	raw_protocol();
	printf("done\n");
	return 0;
}
