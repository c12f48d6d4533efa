/* Thread-local variables: each thread sees its own copy, initialised from
 * the TLS template, across switches; pthread keys too. */
#include <pthread.h>
#include <stdio.h>
#include <sched.h>

static __thread int counter = 100;
static __thread char name[16] = "main";
static pthread_key_t key;
static int ok = 1;
static char report[4][64];

static void *run(void *arg)
{
	long id = (long)arg;
	if (counter != 100 || name[0] != 'm') ok = 0;
	snprintf(name, sizeof name, "thread%ld", id);
	pthread_setspecific(key, (void *)(id + 1));
	for (int i = 0; i < 1000; i++) {
		counter++;
		if (i % 7 == 0) sched_yield();
	}
	if ((long)pthread_getspecific(key) != id + 1) ok = 0;
	snprintf(report[id], sizeof report[id], "%s counter %d", name, counter);
	return (void *)&counter;
}

int main(void)
{
	pthread_t t[4];
	void *addr[4];
	pthread_key_create(&key, 0);
	counter = 7;
	for (long i = 0; i < 4; i++) pthread_create(&t[i], 0, run, (void *)i);
	for (int i = 0; i < 4; i++) pthread_join(t[i], &addr[i]);
	int distinct = 1;
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < i; j++)
			if (addr[i] == addr[j]) distinct = 0;
	for (int i = 0; i < 4; i++) puts(report[i]);
	printf("main %s counter %d, per-thread addresses distinct %s, ok %d\n", name, counter, distinct ? "yes" : "no", ok);
	return 0;
}
