/* Threads that never block (issue 17, item 7): without preemption the
 * first one to spin keeps the only vCPU and the others never run.
 *
 *   preempt two      two threads spin on shared volatile counters while
 *                    main spins until both made progress
 *   preempt three    the same with three
 *   preempt watchdog one thread spin-waits for a flag that another sets
 *                    after a computation; the waiter prints the result
 *   preempt cancel   pthread_cancel of a looping thread whose cancel type
 *                    is asynchronous (it makes no system call at all)
 *   preempt single   one thread computes alone (no other thread ever)
 *   preempt sleeper  main spin-waits for a thread that first sleeps 50 ms
 *   preempt alarm    one thread computes until its SIGALRM handler (an
 *                    interval timer) sets a flag
 *   preempt fpu      three threads compute with SSE doubles and x87 long
 *                    doubles while ticks switch between them: the results
 *                    are exact only if every switch keeps their FPU state
 *
 * Every case prints the same on Linux (only results, never counts that
 * depend on timing). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define TARGET 2000000UL

static volatile unsigned long counter[3];
static volatile int stop;

static void *spin(void *arg)
{
	long i = (long)arg;
	while (!stop)
		counter[i]++;
	return 0;
}

static int spinners(int n)
{
	pthread_t t[3];
	for (long i = 0; i < n; i++)
		if (pthread_create(&t[i], 0, spin, (void *)i)) {
			printf("pthread_create failed\n");
			return 1;
		}
	/* main spins too: until every spinner has counted TARGET times. */
	for (;;) {
		int all = 1;
		for (int i = 0; i < n; i++)
			if (counter[i] < TARGET)
				all = 0;
		if (all)
			break;
	}
	stop = 1;
	for (int i = 0; i < n; i++)
		pthread_join(t[i], 0);
	printf("%d busy threads all made progress\n", n);
	return 0;
}

static volatile int ready;
static volatile unsigned long result;

/* Sum of the primes below 200000, by trial division (a few hundred ms). */
static void *compute(void *arg)
{
	(void)arg;
	unsigned long sum = 0;
	for (unsigned long n = 2; n < 200000; n++) {
		int prime = 1;
		for (unsigned long d = 2; d * d <= n; d++)
			if (n % d == 0) {
				prime = 0;
				break;
			}
		if (prime)
			sum += n;
	}
	result = sum;
	ready = 1;
	return 0;
}

static void *waiter(void *arg)
{
	(void)arg;
	while (!ready)
		; /* a spin-wait: no system call, no yield */
	printf("watchdog saw the result: %lu\n", result);
	return 0;
}

static int watchdog(void)
{
	pthread_t w, c;
	/* The waiter first, so that it is the one that spins first. */
	if (pthread_create(&w, 0, waiter, 0) || pthread_create(&c, 0, compute, 0)) {
		printf("pthread_create failed\n");
		return 1;
	}
	pthread_join(w, 0);
	pthread_join(c, 0);
	return 0;
}

static volatile int looping;

static void *loop_forever(void *arg)
{
	(void)arg;
	pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, 0);
	looping = 1;
	for (;;)
		counter[0]++;
	return 0;
}

static int cancel(void)
{
	pthread_t t;
	void *r;
	if (pthread_create(&t, 0, loop_forever, 0)) {
		printf("pthread_create failed\n");
		return 1;
	}
	while (!looping)
		;
	if (pthread_cancel(t)) {
		printf("pthread_cancel failed\n");
		return 1;
	}
	pthread_join(t, &r);
	printf("looping thread %s\n", r == PTHREAD_CANCELED ? "cancelled" : "not cancelled");
	return 0;
}

static int single(void)
{
	compute(0);
	printf("single thread computed %lu\n", result);
	return 0;
}

static int fpu_started;
static double fpu_s[3];
static long double fpu_l[3];

/* A floating-point loop long enough to be preempted many times; its
 * registers hold the running sums between iterations. */
static void *fpu_work(void *arg)
{
	long k = (long)arg;
	double s = 0;
	long double l = 0;
	__atomic_fetch_add(&fpu_started, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&fpu_started, __ATOMIC_SEQ_CST) < 3)
		; /* everyone computes at the same time */
	for (long i = 1; i < 30000000; i++) {
		s += 1.0 / (double)(i + k);
		l += 1.0L / (long double)(i * (k + 1));
	}
	fpu_s[k] = s;
	fpu_l[k] = l;
	return 0;
}

static int fpu(void)
{
	pthread_t t[3];
	for (long i = 0; i < 3; i++)
		if (pthread_create(&t[i], 0, fpu_work, (void *)i)) {
			printf("pthread_create failed\n");
			return 1;
		}
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], 0);
	for (int i = 0; i < 3; i++)
		printf("thread %d: %.12f %.12Lf\n", i, fpu_s[i], fpu_l[i]);
	return 0;
}

static volatile int woke;

static void *sleeper_thread(void *arg)
{
	(void)arg;
	usleep(50000);
	woke = 1;
	return 0;
}

static int sleeper(void)
{
	pthread_t t;
	if (pthread_create(&t, 0, sleeper_thread, 0)) {
		printf("pthread_create failed\n");
		return 1;
	}
	while (!woke)
		; /* the only runnable thread, next to one asleep */
	pthread_join(t, 0);
	printf("the sleeper woke while main spun\n");
	return 0;
}

static volatile sig_atomic_t rang;

static void on_alarm(int sig)
{
	(void)sig;
	rang = 1;
}

static int alarm_case(void)
{
	struct itimerval it = {{0, 0}, {0, 50000}};
	signal(SIGALRM, on_alarm);
	setitimer(ITIMER_REAL, &it, 0);
	while (!rang)
		counter[0]++; /* no system call until the handler ran */
	printf("SIGALRM interrupted the computation\n");
	return 0;
}

int main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "";
	if (!strcmp(c, "two"))
		return spinners(2);
	if (!strcmp(c, "three"))
		return spinners(3);
	if (!strcmp(c, "watchdog"))
		return watchdog();
	if (!strcmp(c, "cancel"))
		return cancel();
	if (!strcmp(c, "single"))
		return single();
	if (!strcmp(c, "fpu"))
		return fpu();
	if (!strcmp(c, "sleeper"))
		return sleeper();
	if (!strcmp(c, "alarm"))
		return alarm_case();
	printf("usage: preempt two|three|watchdog|cancel|single|fpu|sleeper|alarm\n");
	return 2;
}
