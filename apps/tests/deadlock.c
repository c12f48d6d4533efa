/* Two threads take two mutexes in opposite order: a deadlock. shoal
 * reports it and stops the instance instead of hanging. */
#include <pthread.h>
#include <stdio.h>
#include <sched.h>

static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t bar;

static void *other(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&b);
	pthread_barrier_wait(&bar);
	pthread_mutex_lock(&a);
	return 0;
}

int main(void)
{
	pthread_t t;
	pthread_barrier_init(&bar, 0, 2);
	pthread_create(&t, 0, other, 0);
	pthread_mutex_lock(&a);
	pthread_barrier_wait(&bar);
	printf("both hold one lock\n");
	fflush(stdout);
	pthread_mutex_lock(&b);
	pthread_join(t, 0);
	printf("not reached\n");
	return 0;
}
