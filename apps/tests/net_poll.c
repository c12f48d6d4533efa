/* net_poll: poll, ppoll, select and pselect over sockets, eventfds and
 * epoll descriptors: readiness before and after data, POLLOUT, hang-ups,
 * and a thread blocked in poll or select woken by another thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int sv[2];

static void *late(void *arg)
{
	struct timespec d = {0, 30 * 1000 * 1000};
	nanosleep(&d, 0);
	write(sv[0], arg, 1);
	return 0;
}

int main(void)
{
	socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
	struct pollfd pf[2] = {{sv[1], POLLIN | POLLOUT | POLLRDHUP, 0}, {sv[0], POLLIN, 0}};
	int n = poll(pf, 2, 0);
	printf("idle: n=%d r0=%x r1=%x\n", n, pf[0].revents, pf[1].revents);
	write(sv[0], "abc", 3);
	n = poll(pf, 2, 0);
	printf("data: n=%d r0=%x r1=%x\n", n, pf[0].revents, pf[1].revents);

	fd_set rd, wr;
	FD_ZERO(&rd);
	FD_ZERO(&wr);
	FD_SET(sv[0], &rd);
	FD_SET(sv[1], &rd);
	FD_SET(sv[0], &wr);
	struct timeval tv = {0, 0};
	n = select(sv[1] + 1, &rd, &wr, 0, &tv);
	printf("select: n=%d rd0=%d rd1=%d wr0=%d\n", n, FD_ISSET(sv[0], &rd), FD_ISSET(sv[1], &rd), FD_ISSET(sv[0], &wr));
	char b[8];
	read(sv[1], b, sizeof b);

	/* Blocking poll woken by another thread. */
	pthread_t t;
	pthread_create(&t, 0, late, "x");
	struct pollfd one = {sv[1], POLLIN, 0};
	n = poll(&one, 1, 5000);
	printf("blocked poll: n=%d in=%d\n", n, !!(one.revents & POLLIN));
	pthread_join(t, 0);
	read(sv[1], b, sizeof b);

	/* Blocking pselect woken by another thread. */
	pthread_create(&t, 0, late, "y");
	FD_ZERO(&rd);
	FD_SET(sv[1], &rd);
	struct timespec ts = {5, 0};
	sigset_t none;
	sigemptyset(&none);
	n = pselect(sv[1] + 1, &rd, 0, 0, &ts, &none);
	printf("blocked pselect: n=%d set=%d\n", n, FD_ISSET(sv[1], &rd));
	pthread_join(t, 0);
	read(sv[1], b, sizeof b);

	/* ppoll timing out. */
	struct timespec short_ts = {0, 10 * 1000 * 1000};
	n = ppoll(&one, 1, &short_ts, 0);
	printf("ppoll timeout: n=%d\n", n);

	/* eventfd and epoll descriptors. */
	int e = eventfd(0, 0), ep = epoll_create1(0);
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 1};
	epoll_ctl(ep, EPOLL_CTL_ADD, e, &ev);
	struct pollfd q[2] = {{e, POLLIN | POLLOUT, 0}, {ep, POLLIN, 0}};
	n = poll(q, 2, 0);
	printf("eventfd 0, epoll: n=%d r0=%x r1=%x\n", n, q[0].revents, q[1].revents);
	uint64_t v = 2;
	write(e, &v, 8);
	n = poll(q, 2, 0);
	printf("eventfd 2, epoll: n=%d r0=%x r1=%x\n", n, q[0].revents, q[1].revents);

	/* Hang-ups. */
	shutdown(sv[0], SHUT_WR);
	n = poll(pf, 1, 0);
	printf("peer SHUT_WR: n=%d r0=%x\n", n, pf[0].revents);
	close(sv[0]);
	n = poll(pf, 1, 0);
	printf("peer closed: n=%d r0=%x\n", n, pf[0].revents);
	ssize_t w = send(sv[1], "z", 1, MSG_NOSIGNAL);
	printf("send to closed peer: %zd %s\n", w, strerror(errno));
	struct pollfd bad = {999, POLLIN, 0};
	n = poll(&bad, 1, 0);
	printf("closed fd: n=%d nval=%d\n", n, !!(bad.revents & POLLNVAL));
	int fresh = socket(AF_UNIX, SOCK_STREAM, 0);
	struct pollfd f = {fresh, POLLIN | POLLOUT, 0};
	n = poll(&f, 1, 0);
	printf("unconnected stream: n=%d r=%x\n", n, f.revents);
	return 0;
}
