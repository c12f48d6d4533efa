/* Threads that never block: without preemption the
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
 *   preempt xstate   three threads fill every vector register the CPU
 *                    runs with (AVX-512's zmm0-31 and k0-7 where XCR0
 *                    enables them, else AVX's ymm0-15, else xmm0-15) and
 *                    spin while ticks switch between them: the registers
 *                    must come back exactly (the save area must be sized
 *                    for the XCR0 the CPU really has, and nothing may
 *                    write past it)
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

/* The register classes preempt xstate fills: what XCR0 enables decides
 * (a bit can only be set where the CPU has the state), not CPUID leaf 7,
 * which a VMM may not pass on. */
enum vclass { V_SSE, V_AVX, V_AVX512 };

static enum vclass vclass(void)
{
	unsigned a, b, c, d;
	__asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(1), "c"(0));
	if (!(c & (1u << 27)))
		return V_SSE; /* no OSXSAVE */
	unsigned lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	if ((lo & 0xe6) == 0xe6)
		return V_AVX512;
	if (lo & 4)
		return V_AVX;
	return V_SSE;
}

#define XS_SPIN 200000000UL
#define XS_ROUNDS 4

static unsigned char xs_in[3][32 * 64 + 8 * 8] __attribute__((aligned(64)));
static unsigned char xs_out[3][32 * 64 + 8 * 8] __attribute__((aligned(64)));
static int xs_started;
static int xs_bad[3];

#define L16(op, r, i) op " " #i "*64(%0), %%" r #i "\n\t"
#define S16(op, r, i) op " %%" r #i ", " #i "*64(%1)\n\t"
#define ALL16(m, op, r)                                                            \
	m(op, r, 0) m(op, r, 1) m(op, r, 2) m(op, r, 3) m(op, r, 4) m(op, r, 5)    \
	m(op, r, 6) m(op, r, 7) m(op, r, 8) m(op, r, 9) m(op, r, 10) m(op, r, 11) \
	m(op, r, 12) m(op, r, 13) m(op, r, 14) m(op, r, 15)
#define ALL16HI(m, op, r)                                                             \
	m(op, r, 16) m(op, r, 17) m(op, r, 18) m(op, r, 19) m(op, r, 20) m(op, r, 21) \
	m(op, r, 22) m(op, r, 23) m(op, r, 24) m(op, r, 25) m(op, r, 26) m(op, r, 27) \
	m(op, r, 28) m(op, r, 29) m(op, r, 30) m(op, r, 31)
#define LK(i) "kmovq 2048+" #i "*8(%0), %%k" #i "\n\t"
#define SK(i) "kmovq %%k" #i ", 2048+" #i "*8(%1)\n\t"
#define SPIN "mov %2, %%rcx\n\t1: dec %%rcx\n\tjnz 1b\n\t"

static void xs_sse(const void *in, void *out)
{
	__asm__ volatile(ALL16(L16, "movdqu", "xmm") SPIN ALL16(S16, "movdqu", "xmm")
			 :
			 : "r"(in), "r"(out), "r"(XS_SPIN)
			 : "rcx", "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
			   "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}

__attribute__((target("avx"))) static void xs_avx(const void *in, void *out)
{
	__asm__ volatile(ALL16(L16, "vmovdqu", "ymm") SPIN ALL16(S16, "vmovdqu", "ymm") "vzeroupper\n\t"
			 :
			 : "r"(in), "r"(out), "r"(XS_SPIN)
			 : "rcx", "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
			   "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}

__attribute__((target("avx512f,avx512bw"))) static void xs_avx512(const void *in, void *out)
{
	__asm__ volatile(ALL16(L16, "vmovdqu64", "zmm") ALL16HI(L16, "vmovdqu64", "zmm")
			 LK(1) LK(2) LK(3) LK(4) LK(5) LK(6) LK(7) SPIN
			 ALL16(S16, "vmovdqu64", "zmm") ALL16HI(S16, "vmovdqu64", "zmm")
			 SK(1) SK(2) SK(3) SK(4) SK(5) SK(6) SK(7) "vzeroupper\n\t"
			 :
			 : "r"(in), "r"(out), "r"(XS_SPIN)
			 : "rcx", "memory", "cc", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
			   "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16",
			   "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25",
			   "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31", "k1", "k2", "k3", "k4", "k5",
			   "k6", "k7");
}

static void *xs_work(void *arg)
{
	long k = (long)arg;
	enum vclass v = vclass();
	__atomic_fetch_add(&xs_started, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&xs_started, __ATOMIC_SEQ_CST) < 3)
		; /* everyone spins at the same time */
	for (int r = 0; r < XS_ROUNDS; r++) {
		for (size_t j = 0; j < sizeof xs_in[k]; j++)
			xs_in[k][j] = (unsigned char)(k * 71 + j * 13 + r * 7 + 1);
		memset(xs_out[k], 0, sizeof xs_out[k]);
		if (v == V_AVX512)
			xs_avx512(xs_in[k], xs_out[k]);
		else if (v == V_AVX)
			xs_avx(xs_in[k], xs_out[k]);
		else
			xs_sse(xs_in[k], xs_out[k]);
		for (int i = 0; i < (v == V_AVX512 ? 32 : 16); i++) {
			/* xmm: 16 bytes of each 64, ymm: 32, zmm: all. */
			size_t w = v == V_AVX512 ? 64 : v == V_AVX ? 32 : 16;
			if (memcmp(xs_in[k] + i * 64, xs_out[k] + i * 64, w))
				xs_bad[k]++;
		}
		if (v == V_AVX512 && memcmp(xs_in[k] + 2048 + 8, xs_out[k] + 2048 + 8, 7 * 8))
			xs_bad[k]++;
	}
	return 0;
}

static int xstate(void)
{
	pthread_t t[3];
	for (long i = 0; i < 3; i++)
		if (pthread_create(&t[i], 0, xs_work, (void *)i)) {
			printf("pthread_create failed\n");
			return 1;
		}
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], 0);
	int bad = 0;
	for (int i = 0; i < 3; i++)
		if (xs_bad[i]) {
			printf("thread %d: %d registers changed while it was switched out\n", i, xs_bad[i]);
			bad = 1;
		}
	if (!bad)
		printf("xstate: 3 threads kept every vector register over %d rounds\n", XS_ROUNDS);
	return bad;
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
	if (!strcmp(c, "xstate"))
		return xstate();
	if (!strcmp(c, "sleeper"))
		return sleeper();
	if (!strcmp(c, "alarm"))
		return alarm_case();
	printf("usage: preempt two|three|watchdog|cancel|single|fpu|xstate|sleeper|alarm\n");
	return 2;
}
