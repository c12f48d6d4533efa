/* net_epoll: epoll semantics over sockets, pipes, eventfds and timerfds:
 * edge-triggered reports again only after new data (a level-triggered
 * implementation fails the "ET: partial read" line), EPOLLONESHOT until
 * re-armed, EPOLLRDHUP and EPOLLHUP, closing the last descriptor removes a
 * description from the set (a dup keeps it), EPERM for regular files,
 * ELOOP for cycles, and a thread blocked in epoll_wait woken by another. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static int ep;

/* epoll_wait with timeout 0; prints the events as "n:[data:mask...]". */
static void show(const char *what, int timeout)
{
	struct epoll_event ev[8];
	int n = epoll_wait(ep, ev, 8, timeout);
	printf("%-28s n=%d", what, n);
	for (int i = 0; i < n; i++) {
		uint32_t e = ev[i].events;
		printf(" [%d:%s%s%s%s%s]", (int)ev[i].data.u64, e & EPOLLIN ? "IN" : "", e & EPOLLOUT ? " OUT" : "",
		       e & EPOLLRDHUP ? " RDHUP" : "", e & EPOLLHUP ? " HUP" : "", e & EPOLLERR ? " ERR" : "");
	}
	printf("\n");
}

static int add(int fd, uint32_t events, int tag)
{
	struct epoll_event e = {.events = events, .data.u64 = (uint64_t)tag};
	return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
}

static int sv[2];

static void *late_writer(void *arg)
{
	(void)arg;
	struct timespec d = {0, 30 * 1000 * 1000};
	nanosleep(&d, 0);
	write(sv[0], "wake", 4);
	return 0;
}

int main(void)
{
	char buf[64];
	ep = epoll_create1(EPOLL_CLOEXEC);
	socketpair(AF_UNIX, SOCK_STREAM, 0, sv);

	/* Edge-triggered. */
	add(sv[1], EPOLLIN | EPOLLET, 1);
	show("ET: nothing yet", 0);
	write(sv[0], "0123456789", 10);
	show("ET: data arrived", 0);
	read(sv[1], buf, 4);
	show("ET: partial read, no new", 0);
	show("ET: still nothing new", 0);
	write(sv[0], "ab", 2);
	show("ET: more data arrived", 0);
	read(sv[1], buf, sizeof buf);
	epoll_ctl(ep, EPOLL_CTL_DEL, sv[1], 0);

	/* Level-triggered for contrast. */
	add(sv[1], EPOLLIN, 2);
	write(sv[0], "xyz", 3);
	show("LT: data", 0);
	read(sv[1], buf, 1);
	show("LT: partial read", 0);
	read(sv[1], buf, sizeof buf);
	show("LT: drained", 0);

	/* One-shot. */
	struct epoll_event e = {.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 3};
	epoll_ctl(ep, EPOLL_CTL_MOD, sv[1], &e);
	write(sv[0], "1", 1);
	show("ONESHOT: first", 0);
	write(sv[0], "2", 1);
	show("ONESHOT: disabled", 0);
	epoll_ctl(ep, EPOLL_CTL_MOD, sv[1], &e);
	show("ONESHOT: re-armed", 0);
	read(sv[1], buf, sizeof buf);

	/* A blocked epoll_wait woken by another thread. */
	e.events = EPOLLIN;
	e.data.u64 = 4;
	epoll_ctl(ep, EPOLL_CTL_MOD, sv[1], &e);
	pthread_t t;
	pthread_create(&t, 0, late_writer, 0);
	show("blocked until a write", 5000);
	pthread_join(t, 0);
	read(sv[1], buf, sizeof buf);

	/* Hang-ups: RDHUP when asked for, HUP always. */
	e.events = EPOLLIN | EPOLLRDHUP;
	e.data.u64 = 5;
	epoll_ctl(ep, EPOLL_CTL_MOD, sv[1], &e);
	shutdown(sv[0], SHUT_WR);
	show("peer SHUT_WR", 0);
	e.events = 0;
	epoll_ctl(ep, EPOLL_CTL_MOD, sv[1], &e);
	close(sv[0]);
	show("peer closed, events=0", 0);

	/* Closing the last descriptor removes it; a dup keeps it. */
	int d = dup(sv[1]);
	close(sv[1]);
	show("original closed, dup open", 0);
	close(d);
	show("last descriptor closed", 0);
	int r = epoll_ctl(ep, EPOLL_CTL_DEL, d, 0);
	printf("DEL of closed fd: %d %s\n", r, strerror(errno));

	/* Pipes, eventfds, timerfds. */
	int p[2];
	pipe(p);
	add(p[0], EPOLLIN | EPOLLET, 6);
	write(p[1], "p", 1);
	show("pipe ET", 0);
	show("pipe ET again", 0);
	close(p[1]);
	show("pipe writer closed", 0);
	close(p[0]);
	int efd = eventfd(0, EFD_NONBLOCK);
	add(efd, EPOLLIN, 7);
	show("eventfd 0", 0);
	uint64_t one = 1;
	write(efd, &one, 8);
	show("eventfd 1", 0);
	read(efd, &one, 8);
	close(efd);
	int tfd = timerfd_create(CLOCK_MONOTONIC, 0);
	add(tfd, EPOLLIN, 8);
	struct itimerspec its = {{0, 0}, {0, 20 * 1000 * 1000}};
	timerfd_settime(tfd, 0, &its, 0);
	show("timerfd before expiry", 0);
	show("timerfd wait", 5000);
	close(tfd);

	/* Errors. */
	int f = open("/tmp/net_epoll_file", O_CREAT | O_RDWR, 0600);
	r = add(f, EPOLLIN, 9);
	printf("regular file: %d %s\n", r, strerror(errno));
	close(f);
	unlink("/tmp/net_epoll_file");
	r = add(ep, EPOLLIN, 10);
	printf("itself: %d %s\n", r, strerror(errno));
	int ep2 = epoll_create(1);
	add(ep2, EPOLLIN, 11);
	e.events = EPOLLIN;
	r = epoll_ctl(ep2, EPOLL_CTL_ADD, ep, &e);
	printf("cycle: %d %s\n", r, strerror(errno));
	int q[2];
	pipe(q);
	add(q[0], EPOLLIN, 12);
	r = add(q[0], EPOLLIN, 12);
	printf("twice: %d %s\n", r, strerror(errno));
	e.events = EPOLLIN | EPOLLEXCLUSIVE;
	r = epoll_ctl(ep, EPOLL_CTL_MOD, q[0], &e);
	printf("MOD with EPOLLEXCLUSIVE: %d %s\n", r, strerror(errno));
	r = epoll_wait(ep, (struct epoll_event *)buf, 0, 0);
	printf("maxevents 0: %d %s\n", r, strerror(errno));
	r = epoll_ctl(q[0], EPOLL_CTL_ADD, q[1], &e);
	printf("not an epoll: %d %s\n", r, strerror(errno));
	/* An epoll inside an epoll: the outer one is readable when the inner is. */
	int ep3 = epoll_create1(0);
	r = add(ep3, EPOLLIN, 13);
	write(q[1], "q", 1);
	show("nested", 0);
	return 0;
}
