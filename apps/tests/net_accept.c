/* net_accept: a server thread accept()s AF_UNIX connections on a path
 * and on an abstract name from several client threads and answers each;
 * names, errors of connect and bind, a non-blocking accept, and datagram
 * sockets with addresses (sendto/recvfrom, sendmmsg/recvmmsg). Results
 * are collected and printed in order by the main thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define CLIENTS 6
static struct sockaddr_un path_addr, abs_addr;
static socklen_t abs_len;
static char replies[CLIENTS][64];
static int listeners[2];

static void *server(void *arg)
{
	int l = *(int *)arg;
	for (int i = 0; i < CLIENTS / 2; i++) {
		struct sockaddr_un peer;
		socklen_t pl = sizeof peer;
		int c = accept4(l, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC);
		if (c < 0) { printf("accept: %s\n", strerror(errno)); return 0; }
		char b[32];
		ssize_t n = read(c, b, sizeof b);
		for (ssize_t k = 0; k < n; k++) if (b[k] >= 'a' && b[k] <= 'z') b[k] -= 32;
		char out[64];
		int m = snprintf(out, sizeof out, "%.*s (peerlen %u)", (int)n, b, pl);
		write(c, out, m);
		close(c);
	}
	return 0;
}

static void *client(void *arg)
{
	int i = (int)(long)arg;
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	int r = i % 2 ? connect(s, (struct sockaddr *)&abs_addr, abs_len)
	              : connect(s, (struct sockaddr *)&path_addr, sizeof path_addr);
	if (r) { snprintf(replies[i], 64, "connect: %s", strerror(errno)); return 0; }
	char msg[16];
	int m = snprintf(msg, sizeof msg, "hello %d", i);
	write(s, msg, m);
	ssize_t n = read(s, replies[i], 63);
	if (n < 0) snprintf(replies[i], 64, "read: %s", strerror(errno));
	close(s);
	return 0;
}

int main(void)
{
	char path[64];
	snprintf(path, sizeof path, "/tmp/net_accept_%d.sock", (int)getpid());
	unlink(path);
	path_addr.sun_family = AF_UNIX;
	strcpy(path_addr.sun_path, path);
	abs_addr.sun_family = AF_UNIX;
	int al = snprintf(abs_addr.sun_path + 1, sizeof abs_addr.sun_path - 1, "shoal-net-accept-%d", (int)getpid());
	abs_len = offsetof(struct sockaddr_un, sun_path) + 1 + al;

	listeners[0] = socket(AF_UNIX, SOCK_STREAM, 0);
	listeners[1] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int r = listen(listeners[0], 4);
	printf("listen unbound: %d %s\n", r, strerror(errno));
	r = bind(listeners[0], (struct sockaddr *)&path_addr, sizeof path_addr);
	printf("bind path: %d\n", r);
	r = bind(listeners[1], (struct sockaddr *)&abs_addr, abs_len);
	printf("bind abstract: %d\n", r);
	int dup_s = socket(AF_UNIX, SOCK_STREAM, 0);
	r = bind(dup_s, (struct sockaddr *)&abs_addr, abs_len);
	printf("bind taken: %d %s\n", r, strerror(errno));
	close(dup_s);
	listen(listeners[0], 8);
	listen(listeners[1], 8);
	int c = accept(listeners[1], 0, 0);
	printf("non-blocking accept: %d %s\n", c, strerror(errno));
	fcntl(listeners[1], F_SETFL, 0);

	struct sockaddr_un got;
	socklen_t gl = sizeof got;
	getsockname(listeners[1], (struct sockaddr *)&got, &gl);
	printf("abstract name: len ok %d, bytes ok %d\n", gl == abs_len, memcmp(&got, &abs_addr, abs_len) == 0);
	gl = sizeof got;
	getsockname(listeners[0], (struct sockaddr *)&got, &gl);
	printf("path name: len ok %d, %s\n", gl == offsetof(struct sockaddr_un, sun_path) + strlen(path) + 1,
	       strcmp(got.sun_path, path) == 0 ? "same path" : got.sun_path);

	pthread_t sv[2], cl[CLIENTS];
	pthread_create(&sv[0], 0, server, &listeners[0]);
	pthread_create(&sv[1], 0, server, &listeners[1]);
	for (long i = 0; i < CLIENTS; i++) pthread_create(&cl[i], 0, client, (void *)i);
	for (int i = 0; i < CLIENTS; i++) pthread_join(cl[i], 0);
	pthread_join(sv[0], 0);
	pthread_join(sv[1], 0);
	for (int i = 0; i < CLIENTS; i++) printf("client %d: %s\n", i, replies[i]);

	/* Errors. */
	struct sockaddr_un none = {AF_UNIX, "/tmp/net_accept_nobody.sock"};
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	r = connect(s, (struct sockaddr *)&none, sizeof none);
	printf("connect to nothing: %d %s\n", r, strerror(errno));
	struct sockaddr_un absnone = {AF_UNIX};
	strcpy(absnone.sun_path + 1, "shoal-nobody-here");
	r = connect(s, (struct sockaddr *)&absnone, offsetof(struct sockaddr_un, sun_path) + 18);
	printf("connect to abstract nothing: %d %s\n", r, strerror(errno));
	int d = socket(AF_UNIX, SOCK_DGRAM, 0);
	r = connect(s, (struct sockaddr *)&abs_addr, abs_len);
	printf("stream connect: %d\n", r);
	r = connect(s, (struct sockaddr *)&abs_addr, abs_len);
	printf("connect twice: %d %s\n", r, strerror(errno));
	r = connect(d, (struct sockaddr *)&abs_addr, abs_len);
	printf("dgram to stream listener: %d %s\n", r, strerror(errno));
	r = listen(d, 1);
	printf("listen on dgram: %d %s\n", r, strerror(errno));
	close(s);
	close(listeners[0]);
	close(listeners[1]);

	/* Datagrams with addresses. */
	struct sockaddr_un da = {AF_UNIX}, db = {AF_UNIX};
	socklen_t dal = offsetof(struct sockaddr_un, sun_path) + 1 + sprintf(da.sun_path + 1, "shoal-dg-a-%d", (int)getpid());
	socklen_t dbl = offsetof(struct sockaddr_un, sun_path) + 1 + sprintf(db.sun_path + 1, "shoal-dg-b-%d", (int)getpid());
	int b2 = socket(AF_UNIX, SOCK_DGRAM, 0);
	bind(d, (struct sockaddr *)&da, dal);
	bind(b2, (struct sockaddr *)&db, dbl);
	sendto(d, "ping", 4, 0, (struct sockaddr *)&db, dbl);
	char buf[32];
	struct sockaddr_un from;
	socklen_t fl = sizeof from;
	ssize_t n = recvfrom(b2, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
	printf("recvfrom: %zd '%.*s' from a: %d\n", n, (int)n, buf, fl == dal && memcmp(&from, &da, dal) == 0);
	struct mmsghdr mm[3];
	struct iovec iv[3] = {{"m1", 2}, {"mm2", 3}, {"mmm3", 4}};
	memset(mm, 0, sizeof mm);
	for (int i = 0; i < 3; i++) {
		mm[i].msg_hdr.msg_iov = &iv[i];
		mm[i].msg_hdr.msg_iovlen = 1;
		mm[i].msg_hdr.msg_name = &db;
		mm[i].msg_hdr.msg_namelen = dbl;
	}
	r = sendmmsg(d, mm, 3, 0);
	printf("sendmmsg: %d lens %u %u %u\n", r, mm[0].msg_len, mm[1].msg_len, mm[2].msg_len);
	char rb[3][8];
	struct iovec ri[3] = {{rb[0], 8}, {rb[1], 8}, {rb[2], 8}};
	struct mmsghdr rm[4];
	memset(rm, 0, sizeof rm);
	for (int i = 0; i < 3; i++) {
		rm[i].msg_hdr.msg_iov = &ri[i];
		rm[i].msg_hdr.msg_iovlen = 1;
	}
	rm[3] = rm[2];
	r = recvmmsg(b2, rm, 4, MSG_WAITFORONE, 0);
	printf("recvmmsg: %d '%.*s' '%.*s' '%.*s'\n", r, (int)rm[0].msg_len, rb[0], (int)rm[1].msg_len, rb[1],
	       (int)rm[2].msg_len, rb[2]);
	unlink(path);
	return 0;
}
