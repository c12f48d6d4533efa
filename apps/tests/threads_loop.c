/* Threads created in a loop: joinable ones (create + join, one at a time
 * and in batches) and detached ones (which free their own stacks). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>

static int done;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;

static void *joinable(void *arg) { return (void *)((long)arg * 2); }

static void *detached(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&m);
	done++;
	pthread_cond_signal(&c);
	pthread_mutex_unlock(&m);
	return 0;
}

int main(void)
{
	long bad = 0;
	for (long i = 0; i < 2000; i++) {
		pthread_t t;
		void *r;
		if (pthread_create(&t, 0, joinable, (void *)i)) { printf("create %ld failed\n", i); return 1; }
		pthread_join(t, &r);
		if ((long)r != i * 2) bad++;
	}
	printf("2000 create+join, wrong results: %ld\n", bad);

	for (int round = 0; round < 20; round++) {
		pthread_t t[50];
		for (long i = 0; i < 50; i++)
			if (pthread_create(&t[i], 0, joinable, (void *)i)) { puts("batch create failed"); return 1; }
		for (long i = 0; i < 50; i++) {
			void *r;
			pthread_join(t[i], &r);
			if ((long)r != i * 2) bad++;
		}
	}
	printf("20 batches of 50, wrong results: %ld\n", bad);

	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	int created = 0;
	for (int round = 0; round < 20; round++) {
		for (int i = 0; i < 100; i++) {
			pthread_t t;
			if (pthread_create(&t, &a, detached, 0)) { puts("detached create failed"); return 1; }
			created++;
		}
		pthread_mutex_lock(&m);
		while (done < created) pthread_cond_wait(&c, &m);
		pthread_mutex_unlock(&m);
	}
	/* Let the last detached threads finish exiting. */
	for (int i = 0; i < 10; i++) sched_yield();
	printf("%d detached threads ran: %d\n", created, done);
	return 0;
}
