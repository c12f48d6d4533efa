/* pthread_cancel of threads blocked at cancellation points (condition
 * wait, nanosleep, pthread_join... ) and of one polling
 * pthread_testcancel; cleanup handlers run; join sees PTHREAD_CANCELED.
 * Also: a thread that disables cancellation is not cancelled while
 * sleeping, and pthread_exit from a thread. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int cleaned[4];

static void cleanup(void *arg) { cleaned[(long)arg]++; }
static void unlock(void *arg) { pthread_mutex_unlock(arg); }

static void *condwaiter(void *arg)
{
	pthread_cleanup_push(cleanup, arg);
	pthread_mutex_lock(&m);
	pthread_cleanup_push(unlock, &m);
	for (;;) pthread_cond_wait(&c, &m);
	pthread_cleanup_pop(0);
	pthread_cleanup_pop(0);
	return 0;
}

static void *sleeper(void *arg)
{
	pthread_cleanup_push(cleanup, arg);
	for (;;) sleep(100);
	pthread_cleanup_pop(0);
	return 0;
}

static volatile int spin_started;
static void *poller(void *arg)
{
	pthread_cleanup_push(cleanup, arg);
	spin_started = 1;
	for (;;) { pthread_testcancel(); sched_yield(); }
	pthread_cleanup_pop(0);
	return 0;
}

static void *uncancellable(void *arg)
{
	(void)arg;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, 0);
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	nanosleep(&ts, 0);
	pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, 0);
	return (void *)42;  /* reached: no cancellation point after enabling */
}

static void *exiter(void *arg)
{
	(void)arg;
	pthread_exit((void *)7);
	return 0;
}

int main(void)
{
	void *(*fns[3])(void *) = { condwaiter, sleeper, poller };
	const char *names[3] = { "cond_wait", "sleep", "testcancel" };
	for (long i = 0; i < 3; i++) {
		pthread_t t;
		void *r;
		pthread_create(&t, 0, fns[i], (void *)i);
		struct timespec ts = { 0, 20 * 1000 * 1000 };
		nanosleep(&ts, 0); /* let it block */
		pthread_cancel(t);
		pthread_join(t, &r);
		printf("%s: %s, cleanup ran %d\n", names[i], r == PTHREAD_CANCELED ? "cancelled" : "NOT cancelled", cleaned[i]);
	}
	/* The mutex the cond waiter held was released by its cleanup handler. */
	printf("mutex free: %s\n", pthread_mutex_trylock(&m) == 0 ? "yes" : "no");
	pthread_mutex_unlock(&m);

	pthread_t t;
	void *r;
	pthread_create(&t, 0, uncancellable, 0);
	sched_yield();
	pthread_cancel(t);
	pthread_join(t, &r);
	printf("cancel disabled: returned %ld\n", (long)r);

	pthread_create(&t, 0, exiter, 0);
	pthread_join(t, &r);
	printf("pthread_exit: %ld\n", (long)r);
	return 0;
}
