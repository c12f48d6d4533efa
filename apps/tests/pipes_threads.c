/* pipes_threads: a thread blocks reading an empty pipe (and another in
 * poll) while a second thread sleeps and then writes; the blocked threads
 * must wake with the data, as on Linux. Prints only ordered facts. */
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int p1[2], p2[2];

static void *writer(void *arg)
{
	(void)arg;
	struct timespec d = {0, 20 * 1000 * 1000};
	nanosleep(&d, 0);
	write(p1[1], "hello", 5);
	nanosleep(&d, 0);
	write(p2[1], "x", 1);
	return 0;
}

static void *poller(void *arg)
{
	(void)arg;
	struct pollfd pf = {p2[0], POLLIN, 0};
	int n = poll(&pf, 1, 5000);
	char c;
	read(p2[0], &c, 1);
	printf("poller: poll=%d revents_in=%d byte=%c\n", n, !!(pf.revents & POLLIN), c);
	return 0;
}

int main(void)
{
	pipe(p1);
	pipe(p2);
	pthread_t w, p;
	pthread_create(&p, 0, poller, 0);
	pthread_create(&w, 0, writer, 0);
	char buf[16] = {0};
	ssize_t n = read(p1[0], buf, sizeof buf - 1);
	printf("reader: read %zd bytes: %s\n", n, buf);
	pthread_join(w, 0);
	pthread_join(p, 0);
	close(p1[1]);
	n = read(p1[0], buf, sizeof buf);
	printf("reader: after close, read returns %zd (end of file)\n", n);
	return 0;
}
