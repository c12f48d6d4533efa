/* clock: checks the clocks a program sees, printing only facts that hold
 * on every correct system, so its output can be compared with a native run. */
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static double ts(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(void)
{
	double r0 = ts(CLOCK_REALTIME), m0 = ts(CLOCK_MONOTONIC);
	struct timeval tv;
	gettimeofday(&tv, 0);
	time_t t = time(0);
	printf("realtime after 2024: %s\n", r0 > 1704067200.0 ? "yes" : "no");
	printf("time() agrees with clock_gettime: %s\n", t - (time_t)r0 <= 1 && (time_t)r0 - t <= 1 ? "yes" : "no");
	printf("gettimeofday agrees: %s\n", tv.tv_sec - (time_t)r0 <= 1 ? "yes" : "no");
	struct timespec req = {0, 50 * 1000 * 1000};
	printf("nanosleep: %d\n", nanosleep(&req, 0));
	double m1 = ts(CLOCK_MONOTONIC);
	printf("slept at least 50 ms: %s\n", m1 - m0 >= 0.050 ? "yes" : "no");
	printf("slept less than 1 s: %s\n", m1 - m0 < 1.0 ? "yes" : "no");
	usleep(10000);
	printf("monotonic increases: %s\n", ts(CLOCK_MONOTONIC) > m1 ? "yes" : "no");
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_nsec += 20 * 1000 * 1000;
	if (deadline.tv_nsec >= 1000000000) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000;
	}
	printf("clock_nanosleep absolute: %d\n", clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, 0));
	printf("reached the deadline: %s\n", ts(CLOCK_MONOTONIC) >= deadline.tv_sec + deadline.tv_nsec / 1e9 ? "yes" : "no");
	struct timespec res;
	clock_getres(CLOCK_MONOTONIC, &res);
	printf("resolution at most 1 ms: %s\n", res.tv_sec == 0 && res.tv_nsec <= 1000000 ? "yes" : "no");
	time_t fixed = 1700000000;
	char buf[64];
	strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", gmtime(&fixed));
	printf("gmtime(1700000000) = %s\n", buf);
	double c = (double)clock() / CLOCKS_PER_SEC;
	printf("cpu clock sane: %s\n", c >= 0 && c < 100 ? "yes" : "no");
	return 0;
}
