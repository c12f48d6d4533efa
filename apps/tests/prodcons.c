/* Producer-consumer with a mutex and two condition variables: 3 producers,
 * 2 consumers, a bounded buffer of 4. */
#include <pthread.h>
#include <stdio.h>

#define ITEMS 20000
#define PRODUCERS 3
#define CONSUMERS 2
#define CAP 4

static int buf[CAP], head, count, produced_total;
static long consumed_sum;
static int consumed_n;
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER, not_empty = PTHREAD_COND_INITIALIZER;

static void *producer(void *arg)
{
	long id = (long)arg;
	for (int i = id; i < ITEMS; i += PRODUCERS) {
		pthread_mutex_lock(&m);
		while (count == CAP) pthread_cond_wait(&not_full, &m);
		buf[(head + count) % CAP] = i;
		count++;
		produced_total++;
		pthread_cond_signal(&not_empty);
		pthread_mutex_unlock(&m);
	}
	return 0;
}

static void *consumer(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&m);
		while (count == 0 && consumed_n < ITEMS) pthread_cond_wait(&not_empty, &m);
		if (consumed_n == ITEMS) {
			pthread_cond_broadcast(&not_empty);
			pthread_mutex_unlock(&m);
			return 0;
		}
		int v = buf[head];
		head = (head + 1) % CAP;
		count--;
		consumed_sum += v;
		consumed_n++;
		if (consumed_n == ITEMS) pthread_cond_broadcast(&not_empty);
		pthread_cond_signal(&not_full);
		pthread_mutex_unlock(&m);
	}
}

int main(void)
{
	pthread_t p[PRODUCERS], c[CONSUMERS];
	for (long i = 0; i < CONSUMERS; i++) pthread_create(&c[i], 0, consumer, (void *)i);
	for (long i = 0; i < PRODUCERS; i++) pthread_create(&p[i], 0, producer, (void *)i);
	for (int i = 0; i < PRODUCERS; i++) pthread_join(p[i], 0);
	for (int i = 0; i < CONSUMERS; i++) pthread_join(c[i], 0);
	long expect = (long)ITEMS * (ITEMS - 1) / 2;
	printf("produced %d consumed %d sum %ld expected %ld\n", produced_total, consumed_n, consumed_sum, expect);
	return consumed_sum == expect ? 0 : 1;
}
