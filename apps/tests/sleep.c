/* nanosleep in one thread blocks only that thread: others keep running;
 * timed waits time out (pthread_cond_timedwait, sem_timedwait,
 * pthread_mutex_timedlock); a sleeping main thread wakes the others' work. */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <time.h>

static volatile long ticks;
static volatile int stop;

static long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *worker(void *arg)
{
	(void)arg;
	while (!stop) { ticks++; sched_yield(); }
	return 0;
}

static void *napper(void *arg)
{
	long ms = (long)arg;
	struct timespec ts = { 0, ms * 1000000 };
	nanosleep(&ts, 0);
	return (void *)ms;
}

int main(void)
{
	pthread_t w, n1, n2;
	pthread_create(&w, 0, worker, 0);
	long t0 = now_ms();
	struct timespec ts = { 0, 100 * 1000 * 1000 };
	nanosleep(&ts, 0);
	long slept = now_ms() - t0;
	printf("main slept >= 100 ms: %s; worker ran meanwhile: %s\n", slept >= 100 ? "yes" : "no", ticks > 0 ? "yes" : "no");
	stop = 1;
	pthread_join(w, 0);

	/* Two sleepers at once: total wall time is the longer one, not the sum. */
	t0 = now_ms();
	pthread_create(&n1, 0, napper, (void *)150L);
	pthread_create(&n2, 0, napper, (void *)100L);
	pthread_join(n1, 0);
	pthread_join(n2, 0);
	long both = now_ms() - t0;
	printf("two sleepers overlap: %s\n", both >= 150 && both < 240 ? "yes" : "no");

	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t c = PTHREAD_COND_INITIALIZER;
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_nsec += 30 * 1000000;
	if (dl.tv_nsec >= 1000000000) { dl.tv_sec++; dl.tv_nsec -= 1000000000; }
	pthread_mutex_lock(&m);
	int e = pthread_cond_timedwait(&c, &m, &dl);
	pthread_mutex_unlock(&m);
	printf("cond_timedwait: %s\n", e == ETIMEDOUT ? "ETIMEDOUT" : "other");

	sem_t s;
	sem_init(&s, 0, 0);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_nsec += 20 * 1000000;
	if (dl.tv_nsec >= 1000000000) { dl.tv_sec++; dl.tv_nsec -= 1000000000; }
	int r = sem_timedwait(&s, &dl);
	printf("sem_timedwait: %s\n", r == -1 && errno == ETIMEDOUT ? "ETIMEDOUT" : "other");
	sem_post(&s);
	printf("sem_wait after post: %d\n", sem_wait(&s));
	return 0;
}
