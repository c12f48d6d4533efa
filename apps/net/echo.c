/* echo: a TCP echo server written against the plain socket API, built
 * natively (musl-gcc -static) and with `shoal cc` from this one source.
 *
 *   echo threads PORT [MAX]   one thread per connection (blocking I/O)
 *   echo epoll PORT [MAX]     one thread, non-blocking sockets, epoll
 *                             edge-triggered
 *
 * Listens on 0.0.0.0:PORT (on shoal, the tender attaches this to the host
 * socket published for PORT). Prints "listening on PORT" once it listens.
 * With MAX it exits (status 0) after MAX connections have closed;
 * otherwise it serves forever. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static long max_conns = -1;
static long closed;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void die(const char *what)
{
	fprintf(stderr, "echo: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void one_closed(void)
{
	pthread_mutex_lock(&lock);
	closed++;
	int done = max_conns >= 0 && closed >= max_conns;
	pthread_mutex_unlock(&lock);
	if (done) {
		printf("served %ld connections\n", closed);
		fflush(stdout);
		exit(0);
	}
}

static int listen_on(int port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		die("socket");
	int one = 1;
	if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
		die("setsockopt SO_REUSEADDR");
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_ANY) };
	if (bind(s, (struct sockaddr *)&a, sizeof a) < 0)
		die("bind");
	if (listen(s, 1024) < 0)
		die("listen");
	printf("listening on %d\n", port);
	fflush(stdout);
	return s;
}

static void *serve(void *arg)
{
	int c = (int)(long)arg;
	char buf[16384];
	for (;;) {
		ssize_t n = read(c, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(c, buf + off, n - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				goto out;
			off += w;
		}
	}
out:
	close(c);
	one_closed();
	return 0;
}

static void run_threads(int s)
{
	for (;;) {
		int c = accept(s, 0, 0);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			die("accept");
		}
		int one = 1;
		setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		pthread_t t;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&at, 64 << 10);
		if (pthread_create(&t, &at, serve, (void *)(long)c) != 0) {
			errno = EAGAIN;
			die("pthread_create");
		}
	}
}

/* Per-connection state of the epoll server: bytes read but not yet
 * written back. */
struct conn {
	int fd;
	size_t len, off;
	char buf[16384];
};

static void drop(int ep, struct conn *k)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, k->fd, 0);
	close(k->fd);
	free(k);
	one_closed();
}

/* Edge-triggered: on each event, read and write until EAGAIN. */
static void pump(int ep, struct conn *k)
{
	for (;;) {
		while (k->off < k->len) {
			ssize_t w = write(k->fd, k->buf + k->off, k->len - k->off);
			if (w < 0 && errno == EAGAIN)
				return; /* EPOLLOUT will come */
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				drop(ep, k);
				return;
			}
			k->off += w;
		}
		k->off = k->len = 0;
		ssize_t n = read(k->fd, k->buf, sizeof k->buf);
		if (n < 0 && errno == EAGAIN)
			return;
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			drop(ep, k);
			return;
		}
		k->len = n;
	}
}

static void run_epoll(int s)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = 0 };
	if (epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) < 0)
		die("epoll_ctl");
	struct epoll_event evs[256];
	for (;;) {
		int n = epoll_wait(ep, evs, 256, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			struct conn *k = evs[i].data.ptr;
			if (k) {
				pump(ep, k);
				continue;
			}
			for (;;) {
				int c = accept4(s, 0, 0, SOCK_NONBLOCK | SOCK_CLOEXEC);
				if (c < 0) {
					if (errno == EAGAIN)
						break;
					if (errno == EINTR || errno == ECONNABORTED)
						continue;
					die("accept4");
				}
				int one = 1;
				setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
				k = calloc(1, sizeof *k);
				if (!k)
					die("calloc");
				k->fd = c;
				struct epoll_event ce = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = k };
				if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &ce) < 0)
					die("epoll_ctl ADD conn");
				pump(ep, k);
			}
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 3 || (strcmp(argv[1], "threads") && strcmp(argv[1], "epoll"))) {
		fprintf(stderr, "usage: echo threads|epoll PORT [MAX]\n");
		return 2;
	}
	if (argc > 3)
		max_conns = atol(argv[3]);
	int s = listen_on(atoi(argv[2]));
	if (!strcmp(argv[1], "threads"))
		run_threads(s);
	else
		run_epoll(s);
	return 0;
}
