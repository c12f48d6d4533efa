/* net_timerfd: timerfds on both clocks, relative and absolute, with an
 * interval: read returns the expiration count as a u64 and blocks (or
 * EAGAIN) while it is zero; gettime and disarming; poll on a timerfd.
 * Counts depend on timing, so only bounds that always hold are printed. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000L

static long now_ms(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return t.tv_sec * 1000 + t.tv_nsec / MS;
}

int main(void)
{
	uint64_t n;
	int t = timerfd_create(CLOCK_MONOTONIC, 0);
	struct itimerspec its = {{0, 10 * MS}, {0, 10 * MS}}, cur;
	timerfd_settime(t, 0, &its, 0);
	long t0 = now_ms(CLOCK_MONOTONIC);
	ssize_t r = read(t, &n, 8);
	long waited = now_ms(CLOCK_MONOTONIC) - t0;
	printf("blocking read: %zd count>=1 %d waited>=9ms %d\n", r, n >= 1, waited >= 9);
	struct timespec d = {0, 55 * MS};
	nanosleep(&d, 0);
	r = read(t, &n, 8);
	printf("after 55ms: %zd count>=5 %d\n", r, n >= 5);
	timerfd_gettime(t, &cur);
	printf("gettime: interval %ld ms, value <= 10ms %d\n", cur.it_interval.tv_nsec / MS,
	       cur.it_value.tv_sec == 0 && cur.it_value.tv_nsec <= 10 * MS);
	struct itimerspec off = {{0, 0}, {0, 0}}, old;
	timerfd_settime(t, 0, &off, &old);
	printf("disarm: old interval %ld ms\n", old.it_interval.tv_nsec / MS);
	timerfd_gettime(t, &cur);
	printf("disarmed: %ld %ld\n", (long)cur.it_value.tv_sec, cur.it_value.tv_nsec);
	r = read(t, &n, 4);
	printf("short read: %zd %s\n", r, strerror(errno));
	close(t);

	int nb = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	r = read(nb, &n, 8);
	printf("nonblocking unarmed: %zd %s\n", r, strerror(errno));
	struct itimerspec once = {{0, 0}, {0, 15 * MS}};
	timerfd_settime(nb, 0, &once, 0);
	struct pollfd pf = {nb, POLLIN, 0};
	int p = poll(&pf, 1, 0);
	printf("poll before expiry: %d\n", p);
	p = poll(&pf, 1, 5000);
	printf("poll until expiry: %d revents_in %d\n", p, !!(pf.revents & POLLIN));
	r = read(nb, &n, 8);
	printf("one-shot: %zd %llu\n", r, (unsigned long long)n);
	r = read(nb, &n, 8);
	printf("one-shot again: %zd %s\n", r, strerror(errno));

	/* Absolute on CLOCK_REALTIME, 20 ms ahead. */
	int rt = timerfd_create(CLOCK_REALTIME, 0);
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	now.tv_nsec += 20 * MS;
	if (now.tv_nsec >= 1000 * MS) { now.tv_sec++; now.tv_nsec -= 1000 * MS; }
	struct itimerspec abs = {{0, 0}, now};
	timerfd_settime(rt, TFD_TIMER_ABSTIME, &abs, 0);
	t0 = now_ms(CLOCK_MONOTONIC);
	r = read(rt, &n, 8);
	printf("absolute realtime: %zd %llu waited>=15ms %d\n", r, (unsigned long long)n, now_ms(CLOCK_MONOTONIC) - t0 >= 15);
	/* Absolute in the past: expires at once. */
	struct itimerspec past = {{0, 0}, {1, 0}};
	timerfd_settime(rt, TFD_TIMER_ABSTIME, &past, 0);
	r = read(rt, &n, 8);
	printf("absolute past: %zd %llu\n", r, (unsigned long long)n);
	close(rt);

	int e = timerfd_create(12345, 0);
	printf("bad clock: %d %s\n", e, strerror(errno));
	e = timerfd_create(CLOCK_MONOTONIC, 0x10);
	printf("bad flags: %d %s\n", e, strerror(errno));
	int m = timerfd_create(CLOCK_MONOTONIC, 0);
	struct itimerspec bad = {{0, 0}, {0, 2000 * MS}};
	e = timerfd_settime(m, 0, &bad, 0);
	printf("bad nsec: %d %s\n", e, strerror(errno));
	e = timerfd_settime(0, 0, &once, 0);
	printf("not a timerfd: %d %s\n", e, strerror(errno));
	return 0;
}
