/* net_bindany: binds where it is told, for the tests of --net-bind-any
 * (a guest bind on any port makes the tender bind that host port then).
 *
 *   tcp ADDR PORT    bind ADDR:PORT (IPv6 if ADDR has a ':'), listen, print
 *                    "listening on P" (P from getsockname: the real port of
 *                    a port-0 bind), answer one connection with
 *                    "hello from P\n", print "served"
 *   udp PORT         bind 0.0.0.0:PORT, print "ready", echo one datagram
 *                    back with "echo:" before it, print "echoed"
 *   bind ADDR PORT   bind and listen once; print "bound" or the error
 *   listen           listen on an unbound socket; print whether it got a port
 *   twice            bind 127.0.0.1:0 and listen, then bind a second
 *                    socket to the same port; print both results
 *
 * Every failure prints "CALL: strerror" and exits 1 (bind: 0, so that the
 * output compares with a native run). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fail(const char *what)
{
	printf("%s: %s\n", what, strerror(errno));
	return 1;
}

/* A socket of `type` bound to addr:port (SO_REUSEADDR set, as servers
 * do); -1 with errno set on failure. */
static int bound(int type, const char *addr, int port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	memset(&ss, 0, sizeof ss);
	int v6 = strchr(addr, ':') != NULL;
	if (v6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons(port);
		if (inet_pton(AF_INET6, addr, &a->sin6_addr) != 1)
			return errno = EINVAL, -1;
		len = sizeof *a;
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		a->sin_family = AF_INET;
		a->sin_port = htons(port);
		if (inet_pton(AF_INET, addr, &a->sin_addr) != 1)
			return errno = EINVAL, -1;
		len = sizeof *a;
	}
	int s = socket(v6 ? AF_INET6 : AF_INET, type, 0);
	if (s < 0)
		return -1;
	int one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(s, (struct sockaddr *)&ss, len) < 0) {
		int e = errno;
		close(s);
		return errno = e, -1;
	}
	return s;
}

static int port_of(int s)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof ss;
	if (getsockname(s, (struct sockaddr *)&ss, &len) < 0)
		return -1;
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc >= 4 && !strcmp(argv[1], "tcp")) {
		int s = bound(SOCK_STREAM, argv[2], atoi(argv[3]));
		if (s < 0)
			return fail("bind");
		if (listen(s, 8) < 0)
			return fail("listen");
		int p = port_of(s);
		printf("listening on %d\n", p);
		int c = accept(s, NULL, NULL);
		if (c < 0)
			return fail("accept");
		char msg[64];
		int n = snprintf(msg, sizeof msg, "hello from %d\n", p);
		if (write(c, msg, n) != n)
			return fail("write");
		close(c);
		printf("served\n");
		return 0;
	}
	if (argc >= 3 && !strcmp(argv[1], "udp")) {
		int s = bound(SOCK_DGRAM, "0.0.0.0", atoi(argv[2]));
		if (s < 0)
			return fail("bind");
		printf("ready\n");
		char buf[512];
		struct sockaddr_storage from;
		socklen_t fl = sizeof from;
		ssize_t k = recvfrom(s, buf + 5, sizeof buf - 5, 0, (struct sockaddr *)&from, &fl);
		if (k < 0)
			return fail("recvfrom");
		memcpy(buf, "echo:", 5);
		if (sendto(s, buf, k + 5, 0, (struct sockaddr *)&from, fl) != k + 5)
			return fail("sendto");
		printf("echoed\n");
		return 0;
	}
	if (argc >= 4 && !strcmp(argv[1], "bind")) {
		int s = bound(SOCK_STREAM, argv[2], atoi(argv[3]));
		if (s < 0 || listen(s, 8) < 0) {
			fail("bind");
			return 0;
		}
		printf("bound\n");
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "listen")) {
		/* listen without bind: Linux binds an ephemeral port. */
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (s < 0 || listen(s, 8) < 0)
			return fail("listen");
		printf("listen without bind: %s\n", port_of(s) > 0 ? "a port" : "no port");
		return 0;
	}
	if (argc >= 2 && !strcmp(argv[1], "twice")) {
		int a = bound(SOCK_STREAM, "127.0.0.1", 0);
		if (a < 0 || listen(a, 8) < 0)
			return fail("first bind");
		int p = port_of(a);
		printf("first bind: %s\n", p > 0 ? "a port" : "no port");
		if (bound(SOCK_STREAM, "127.0.0.1", p) >= 0)
			printf("second bind: bound\n");
		else
			printf("second bind: %s\n", strerror(errno));
		return 0;
	}
	fprintf(stderr, "usage: net_bindany tcp ADDR PORT | udp PORT | bind ADDR PORT | listen | twice\n");
	return 2;
}
