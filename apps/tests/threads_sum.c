/* pthread_create/join of N threads computing parts of a sum; each thread
 * returns its part; gettid differs per thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

#define N 8
#define PER 100000L

static long tids[N];

static void *part(void *arg)
{
	long i = (long)arg, s = 0;
	for (long k = i * PER; k < (i + 1) * PER; k++) {
		s += k;
		if (k % 10000 == 0) sched_yield();
	}
	tids[i] = syscall(SYS_gettid);
	return (void *)s;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : N;
	pthread_t t[N];
	long total = 0;
	if (n > N) n = N;
	for (long i = 0; i < n; i++)
		if (pthread_create(&t[i], 0, part, (void *)i)) { puts("create failed"); return 1; }
	for (int i = 0; i < n; i++) {
		void *r;
		pthread_join(t[i], &r);
		total += (long)r;
	}
	int distinct = 1;
	for (int i = 0; i < n; i++)
		for (int j = 0; j < i; j++)
			if (tids[i] == tids[j] || tids[i] == getpid()) distinct = 0;
	long expect = (long)n * PER * ((long)n * PER - 1) / 2;
	printf("threads %d sum %ld expected %ld tids distinct %s\n", n, total, expect, distinct ? "yes" : "no");
	return total == expect && distinct ? 0 : 1;
}
