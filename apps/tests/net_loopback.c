/* Loopback inside one instance, over 127.0.0.1 and ::1: a UDP and a TCP
 * echo with the calls servers make (bind to port 0, getsockname,
 * getpeername, accept, poll/epoll readiness, MSG_PEEK, datagram
 * boundaries and truncation, non-blocking EAGAIN, shutdown, EADDRINUSE,
 * ECONNREFUSED), and a dual-stack listener on :: taking an IPv4 client.
 * Prints only what is the same on any Linux (no port numbers): compared
 * with the same source run natively. Run with no network option. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct sockaddr_storage ss_t;

static const char *en(int e)
{
	switch (e) {
	case 0: return "ok";
	case EAGAIN: return "EAGAIN";
	case EADDRINUSE: return "EADDRINUSE";
	case ECONNREFUSED: return "ECONNREFUSED";
	case ENOTCONN: return "ENOTCONN";
	case EMSGSIZE: return "EMSGSIZE";
	case EDESTADDRREQ: return "EDESTADDRREQ";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case EPIPE: return "EPIPE";
	case EINVAL: return "EINVAL";
	default: return strerror(e);
	}
}

#define R(x) ((x) < 0 ? en(errno) : "ok")

static int fam;

static socklen_t lo_addr(ss_t *a, int port)
{
	memset(a, 0, sizeof *a);
	if (fam == AF_INET) {
		struct sockaddr_in *s = (void *)a;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		return sizeof *s;
	}
	struct sockaddr_in6 *s = (void *)a;
	s->sin6_family = AF_INET6;
	s->sin6_port = htons(port);
	s->sin6_addr = in6addr_loopback;
	return sizeof *s;
}

static int port_of(const ss_t *a)
{
	return a->ss_family == AF_INET ? ntohs(((struct sockaddr_in *)a)->sin_port) : ntohs(((struct sockaddr_in6 *)a)->sin6_port);
}

static const char *ip(const ss_t *a)
{
	static char b[64];
	const void *p = a->ss_family == AF_INET ? (const void *)&((struct sockaddr_in *)a)->sin_addr : (const void *)&((struct sockaddr_in6 *)a)->sin6_addr;
	return inet_ntop(a->ss_family, p, b, sizeof b) ? b : "?";
}

static ss_t name(int fd, int peer)
{
	ss_t a;
	socklen_t l = sizeof a;
	memset(&a, 0, sizeof a);
	if ((peer ? getpeername(fd, (void *)&a, &l) : getsockname(fd, (void *)&a, &l)) < 0)
		a.ss_family = 0xffff;
	return a;
}

/* A port nothing is bound to now (bound to 0, then closed). */
static int closed_port(int type)
{
	ss_t a;
	int s = socket(fam, type, 0);
	bind(s, (void *)&a, lo_addr(&a, 0));
	ss_t n = name(s, 0);
	int p = port_of(&n);
	close(s);
	return p;
}

static void udp(void)
{
	ss_t a, from;
	socklen_t fl;
	char buf[16];
	int s = socket(fam, SOCK_DGRAM, 0);
	printf("udp socket: %s\n", R(s));
	printf("bind port 0: %s\n", R(bind(s, (void *)&a, lo_addr(&a, 0))));
	ss_t me = name(s, 0);
	printf("getsockname: %s port set %d\n", ip(&me), port_of(&me) != 0);
	/* To itself, as libc-test's functional/socket does. */
	printf("sendto self: %zd\n", sendto(s, "x", 1, 0, (void *)&me, lo_addr(&a, port_of(&me))));
	fl = sizeof from;
	ssize_t n = recvfrom(s, buf, sizeof buf, 0, (void *)&from, &fl);
	printf("recvfrom self: %zd from self %d\n", n, port_of(&from) == port_of(&me));
	int c = socket(fam, SOCK_DGRAM, 0);
	printf("send unconnected: %s\n", R(send(c, "x", 1, 0)));
	for (int i = 1; i <= 3; i++)
		sendto(c, "abc", i, 0, (void *)&me, lo_addr(&a, port_of(&me)));
	ss_t cn = name(c, 0);
	printf("client autobound: %s port set %d\n", ip(&cn), port_of(&cn) != 0);
	fl = sizeof from;
	n = recvfrom(s, buf, sizeof buf, MSG_PEEK, (void *)&from, &fl);
	printf("peek: %zd from %s client port %d\n", n, ip(&from), port_of(&from) == port_of(&cn));
	for (int i = 0; i < 3; i++)
		printf("datagram %d: %zd\n", i, recv(s, buf, sizeof buf, 0));
	printf("empty, nonblocking: %s\n", R(recv(s, buf, sizeof buf, MSG_DONTWAIT)));
	/* Truncation. */
	sendto(c, "12345678", 8, 0, (void *)&me, lo_addr(&a, port_of(&me)));
	struct iovec iov = { buf, 4 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	n = recvmsg(s, &mh, 0);
	printf("truncated: %zd MSG_TRUNC %d\n", n, !!(mh.msg_flags & MSG_TRUNC));
	/* Connected: send without an address, echo back. */
	printf("connect: %s\n", R(connect(c, (void *)&a, lo_addr(&a, port_of(&me)))));
	ss_t pn = name(c, 1);
	printf("getpeername: %s port matches %d\n", ip(&pn), port_of(&pn) == port_of(&me));
	printf("send: %zd\n", send(c, "ping", 4, 0));
	fl = sizeof from;
	n = recvfrom(s, buf, sizeof buf, 0, (void *)&from, &fl);
	printf("server got %zd '%.4s'\n", n, buf);
	printf("echo: %zd\n", sendto(s, buf, n, 0, (void *)&from, fl));
	struct pollfd p = { c, POLLIN, 0 };
	int k = poll(&p, 1, 1000);
	printf("poll client: %d revents %#x\n", k, p.revents);
	memset(buf, 0, sizeof buf);
	n = recv(c, buf, sizeof buf, 0);
	printf("client got %zd '%s'\n", n, buf);
	/* The port is taken. */
	int d = socket(fam, SOCK_DGRAM, 0);
	printf("bind taken port: %s\n", R(bind(d, (void *)&a, lo_addr(&a, port_of(&me)))));
	static char big[70000];
	printf("70000-byte datagram: %s\n", R(sendto(d, big, sizeof big, 0, (void *)&a, lo_addr(&a, port_of(&me)))));
	close(d);
	/* A connected socket learns that nothing is there. */
	d = socket(fam, SOCK_DGRAM, 0);
	printf("connect to a closed port: %s\n", R(connect(d, (void *)&a, lo_addr(&a, closed_port(SOCK_DGRAM)))));
	printf("send there: %zd\n", send(d, "x", 1, 0));
	p = (struct pollfd){ d, POLLIN, 0 };
	k = poll(&p, 1, 1000);
	printf("poll: %d revents %#x\n", k, p.revents);
	printf("recv: %s\n", R(recv(d, buf, sizeof buf, 0)));
	close(d);
	close(c);
	close(s);
}

static void tcp(void)
{
	ss_t a, from;
	socklen_t fl;
	char buf[64];
	int one = 1, v;
	socklen_t vl = sizeof v;
	ssize_t n;
	int l = socket(fam, SOCK_STREAM, 0);
	printf("tcp socket: %s\n", R(l));
	printf("SO_REUSEADDR: %s\n", R(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one)));
	printf("bind: %s\n", R(bind(l, (void *)&a, lo_addr(&a, 0))));
	printf("listen: %s\n", R(listen(l, 8)));
	ss_t me = name(l, 0);
	printf("listener: %s port set %d\n", ip(&me), port_of(&me) != 0);
	getsockopt(l, SOL_SOCKET, SO_ACCEPTCONN, &v, &vl);
	printf("SO_ACCEPTCONN %d\n", v);
	fcntl(l, F_SETFL, O_NONBLOCK);
	printf("accept, nobody: %s\n", R(accept(l, 0, 0)));
	int r = socket(fam, SOCK_STREAM, 0);
	printf("connect to a closed port: %s\n", R(connect(r, (void *)&a, lo_addr(&a, closed_port(SOCK_STREAM)))));
	close(r);
	int c = socket(fam, SOCK_STREAM, 0);
	printf("TCP_NODELAY: %s\n", R(setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one)));
	vl = sizeof v;
	getsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, &vl);
	printf("TCP_NODELAY reads %d\n", v != 0);
	vl = sizeof v;
	getsockopt(c, SOL_SOCKET, SO_DOMAIN, &v, &vl);
	printf("SO_DOMAIN is the family %d\n", v == fam);
	vl = sizeof v;
	getsockopt(c, SOL_SOCKET, SO_PROTOCOL, &v, &vl);
	printf("SO_PROTOCOL %d\n", v);
	printf("recv unconnected: %s\n", R(recv(c, buf, 1, MSG_DONTWAIT)));
	printf("getpeername unconnected: %s\n", R(getpeername(c, (void *)&from, &(socklen_t){sizeof from})));
	printf("connect: %s\n", R(connect(c, (void *)&a, lo_addr(&a, port_of(&me)))));
	struct pollfd p = { l, POLLIN, 0 };
	int k = poll(&p, 1, 1000);
	printf("poll listener: %d revents %#x\n", k, p.revents);
	fl = sizeof from;
	int s = accept(l, (void *)&from, &fl);
	printf("accept: %s\n", R(s));
	ss_t cn = name(c, 0), cp = name(c, 1), sn = name(s, 0), sp = name(s, 1);
	printf("client %s, peer %s port matches %d\n", ip(&cn), ip(&cp), port_of(&cp) == port_of(&me));
	printf("server %s port matches %d, peer %s is the client %d, accept's address too %d\n", ip(&sn), port_of(&sn) == port_of(&me), ip(&sp),
	       port_of(&sp) == port_of(&cn), port_of(&from) == port_of(&cn));
	printf("bind taken port: %s\n", R(bind(socket(fam, SOCK_STREAM, 0), (void *)&a, lo_addr(&a, port_of(&me)))));
	/* Echo through epoll. */
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = s };
	epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
	printf("epoll, nothing yet: %d\n", epoll_wait(ep, &ev, 1, 0));
	printf("write: %zd\n", write(c, "hello", 5));
	k = epoll_wait(ep, &ev, 1, 1000);
	printf("epoll: %d events %#x\n", k, ev.events);
	printf("peek: %zd\n", recv(s, buf, sizeof buf, MSG_PEEK));
	n = read(s, buf, sizeof buf);
	printf("server read %zd '%.*s'\n", n, (int)n, buf);
	printf("echo: %zd\n", write(s, buf, n));
	memset(buf, 0, sizeof buf);
	n = read(c, buf, sizeof buf);
	printf("client read %zd '%s'\n", n, buf);
	fcntl(s, F_SETFL, O_NONBLOCK);
	printf("server read, empty: %s\n", R(read(s, buf, sizeof buf)));
	/* 256 KiB through, both ends non-blocking, in one thread. */
	fcntl(c, F_SETFL, O_NONBLOCK);
	static char out[262144], in[262144];
	for (size_t i = 0; i < sizeof out; i++)
		out[i] = (char)(i * 7 + i / 251);
	size_t sent = 0, got = 0;
	while (got < sizeof in) {
		if (sent < sizeof out) {
			ssize_t k = write(c, out + sent, sizeof out - sent);
			if (k > 0)
				sent += k;
			else if (errno != EAGAIN)
				break;
		}
		ssize_t k = read(s, in + got, sizeof in - got);
		if (k > 0)
			got += k;
		else if (k == 0 || errno != EAGAIN)
			break;
	}
	printf("256 KiB: %zu bytes, same %d\n", got, memcmp(in, out, sizeof in) == 0);
	/* Half close, then close. */
	printf("shutdown(SHUT_WR): %s\n", R(shutdown(c, SHUT_WR)));
	p = (struct pollfd){ s, POLLIN | POLLRDHUP, 0 };
	k = poll(&p, 1, 1000);
	printf("poll server: %d revents %#x\n", k, p.revents);
	printf("server read: %zd\n", read(s, buf, sizeof buf));
	printf("client write after SHUT_WR: %s\n", R(send(c, "x", 1, MSG_NOSIGNAL)));
	printf("server write: %zd\n", write(s, "bye", 3));
	p = (struct pollfd){ c, POLLIN, 0 };
	poll(&p, 1, 1000);
	printf("client read %zd\n", read(c, buf, sizeof buf));
	close(s);
	p = (struct pollfd){ c, POLLIN | POLLRDHUP, 0 };
	k = poll(&p, 1, 1000);
	printf("after server close, poll client: %d revents %#x\n", k, p.revents);
	printf("client read: %zd\n", read(c, buf, sizeof buf));
	close(c);
	close(ep);
	close(l);
}

/* An AF_INET6 listener on :: (not V6ONLY) takes an IPv4 client. */
static void dual(void)
{
	struct sockaddr_in6 any = { .sin6_family = AF_INET6 };
	int zero = 0;
	int l = socket(AF_INET6, SOCK_STREAM, 0);
	setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
	printf("dual bind [::]:0: %s\n", R(bind(l, (void *)&any, sizeof any)));
	listen(l, 1);
	ss_t me = name(l, 0);
	printf("dual listener: %s\n", ip(&me));
	fam = AF_INET;
	ss_t a;
	int c = socket(AF_INET, SOCK_STREAM, 0);
	int rc = connect(c, (void *)&a, lo_addr(&a, port_of(&me)));
	printf("IPv4 connect: %s\n", R(rc));
	if (rc == 0) {
		ss_t from;
		socklen_t fl = sizeof from;
		int s = accept(l, (void *)&from, &fl);
		printf("accepted from %s\n", ip(&from));
		close(s);
	}
	close(c);
	close(l);
}

int main(void)
{
	setvbuf(stdout, 0, _IONBF, 0);
	fam = AF_INET;
	printf("== IPv4\n");
	udp();
	tcp();
	fam = AF_INET6;
	printf("== IPv6\n");
	udp();
	tcp();
	printf("== dual stack\n");
	dual();
	return 0;
}
