/* threads: a glibc program (built with gcc -static by the tests) using
 * pthreads, a mutex, a condition variable, stdio and malloc; exits 7. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;
static long total;
static int finished;

static void *work(void *arg)
{
	long id = (long)arg;
	for (int i = 0; i < 100000; i++) {
		pthread_mutex_lock(&m);
		total += id;
		pthread_mutex_unlock(&m);
	}
	pthread_mutex_lock(&m);
	finished++;
	pthread_cond_signal(&done);
	pthread_mutex_unlock(&m);
	return (void *)(id * 2);
}

int main(int argc, char **argv)
{
	pthread_t t[4];
	for (long i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, work, (void *)(i + 1));
	pthread_mutex_lock(&m);
	while (finished < 4)
		pthread_cond_wait(&done, &m);
	pthread_mutex_unlock(&m);
	long sum = 0;
	for (int i = 0; i < 4; i++) {
		void *r;
		pthread_join(t[i], &r);
		sum += (long)r;
	}
	printf("total=%ld sum=%ld\n", total, sum);
	char *p = malloc(1 << 20);
	memset(p, 'x', 1 << 20);
	printf("malloc ok %c\n", p[12345]);
	for (int i = 1; i < argc; i++)
		printf("argv[%d]=%s\n", i, argv[i]);
	printf("env GREETING=%s\n", getenv("GREETING") ? getenv("GREETING") : "(none)");
	return 7;
}
