/* net_eventfd: an eventfd between threads (a consumer blocks in read
 * while producers add), EFD_SEMAPHORE, EFD_NONBLOCK, the counter's
 * overflow rules and argument checks, as on Linux. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#define PER 1000
static int efd;

static void *producer(void *arg)
{
	uint64_t v = (uint64_t)(uintptr_t)arg;
	for (int i = 0; i < PER; i++) {
		write(efd, &v, 8);
		if (i % 100 == 0) sched_yield();
	}
	return 0;
}

int main(void)
{
	efd = eventfd(0, 0);
	pthread_t t[3];
	for (int i = 0; i < 3; i++) pthread_create(&t[i], 0, producer, (void *)(uintptr_t)(i + 1));
	uint64_t total = 0, v;
	int reads = 0;
	while (total < PER * 6) {
		if (read(efd, &v, 8) != 8) { printf("read failed: %s\n", strerror(errno)); return 1; }
		total += v;
		reads++;
	}
	for (int i = 0; i < 3; i++) pthread_join(t[i], 0);
	printf("threads: total %llu (reads > 0: %d)\n", (unsigned long long)total, reads > 0);

	int s = eventfd(3, EFD_SEMAPHORE | EFD_NONBLOCK);
	for (int i = 0; i < 4; i++) {
		ssize_t n = read(s, &v, 8);
		printf("semaphore read %d: %zd %llu %s\n", i, n, n == 8 ? (unsigned long long)v : 0ULL, n < 0 ? strerror(errno) : "");
	}
	close(s);

	int o = eventfd(0, EFD_NONBLOCK);
	v = 0xfffffffffffffffeULL;
	ssize_t n = write(o, &v, 8);
	printf("write max: %zd\n", n);
	v = 1;
	n = write(o, &v, 8);
	printf("write 1 more: %zd %s\n", n, strerror(errno));
	v = 0xffffffffffffffffULL;
	n = write(o, &v, 8);
	printf("write ULLONG_MAX: %zd %s\n", n, strerror(errno));
	n = read(o, &v, 4);
	printf("short read: %zd %s\n", n, strerror(errno));
	n = read(o, &v, 8);
	printf("read: %zd %llx\n", n, (unsigned long long)v);
	n = read(o, &v, 8);
	printf("read empty: %zd %s\n", n, strerror(errno));
	uint32_t small = 1;
	n = write(o, &small, 4);
	printf("short write: %zd %s\n", n, strerror(errno));
	int r = eventfd(0, 0x12345);
	printf("bad flags: %d %s\n", r, strerror(errno));
	eventfd_t ev;
	eventfd_write(o, 5);
	eventfd_read(o, &ev);
	printf("eventfd_read: %llu\n", (unsigned long long)ev);
	return 0;
}
