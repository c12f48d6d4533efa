/* net_policy: what a guest tries against the tenders' network policy, for
 * the network-policy bypass tests (docs/architecture.md, threat model).
 * Each mode prints one line per call: "CALL: ok" (or the result) or
 * "CALL: ERRNAME", so a test compares exact errnos.
 *
 *   unspec PORT   a UDP sendto 127.0.0.1:PORT with the family AF_UNSPEC
 *                 (Linux's UDP takes it as AF_INET)
 *   udp PORT      a UDP socket bound to 127.0.0.1:0, then a sendto
 *                 127.0.0.1:PORT (a datagram of its own, not a reply)
 *   reply LPORT PORT  a UDP socket bound to 127.0.0.1:LPORT; prints
 *                 "ready", answers one datagram's sender with "pong", then
 *                 a sendto 127.0.0.1:PORT (not a sender: refused without
 *                 outbound)
 *   tfo PORT      a TCP socket bound to 127.0.0.1:0, then a sendto with
 *                 MSG_FASTOPEN to 127.0.0.1:PORT (a send that connects)
 *   mptcp PORT    socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP), as Go
 *                 probes it; then a plain TCP listener as Go makes one
 *                 (SO_REUSEADDR, bind 127.0.0.1:PORT, listen), prints
 *                 "listening" and answers one connection with "hello\n"
 *   reuse PORT    a UDP socket with SO_REUSEADDR and SO_REUSEPORT, bound
 *                 to 127.0.0.1:PORT (a port a host service bound)
 *
 * Single-threaded on purpose. */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef IPPROTO_MPTCP
#define IPPROTO_MPTCP 262
#endif
#ifndef MSG_FASTOPEN
#define MSG_FASTOPEN 0x20000000
#endif

static const char *name(int e)
{
	switch (e) {
	case EACCES: return "EACCES";
	case EPERM: return "EPERM";
	case EINVAL: return "EINVAL";
	case EADDRINUSE: return "EADDRINUSE";
	case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
	case ENOPROTOOPT: return "ENOPROTOOPT";
	case EINPROGRESS: return "EINPROGRESS";
	case ECONNREFUSED: return "ECONNREFUSED";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	case ENOTCONN: return "ENOTCONN";
	case EDESTADDRREQ: return "EDESTADDRREQ";
	default: return strerror(e);
	}
}

/* Prints "what: ok" for rc >= 0, else "what: ERRNAME"; returns rc. */
static long say(const char *what, long rc)
{
	if (rc < 0)
		printf("%s: %s\n", what, name(errno));
	else
		printf("%s: ok\n", what);
	fflush(stdout);
	return rc;
}

static struct sockaddr_in loopback(int port)
{
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static int bound(int type, int port)
{
	int s = socket(AF_INET, type, 0);
	if (say("socket", s) < 0)
		exit(1);
	struct sockaddr_in a = loopback(port);
	if (say("bind", bind(s, (struct sockaddr *)&a, sizeof a)) < 0)
		exit(1);
	return s;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	const char *mode = argv[1];
	int port = argc > 2 ? atoi(argv[2]) : 0;
	if (!strcmp(mode, "unspec")) {
		int s = socket(AF_INET, SOCK_DGRAM, 0);
		struct sockaddr_in a = loopback(port);
		a.sin_family = AF_UNSPEC;
		say("sendto", sendto(s, "leak", 4, 0, (struct sockaddr *)&a, sizeof a));
	} else if (!strcmp(mode, "udp")) {
		int s = bound(SOCK_DGRAM, 0);
		struct sockaddr_in a = loopback(port);
		say("sendto", sendto(s, "leak", 4, 0, (struct sockaddr *)&a, sizeof a));
	} else if (!strcmp(mode, "reply") && argc > 3) {
		int s = bound(SOCK_DGRAM, port);
		printf("ready\n");
		fflush(stdout);
		char buf[64];
		struct sockaddr_storage from;
		socklen_t fl = sizeof from;
		if (say("recvfrom", recvfrom(s, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl)) < 0)
			return 1;
		say("reply", sendto(s, "pong", 4, 0, (struct sockaddr *)&from, fl));
		struct sockaddr_in a = loopback(atoi(argv[3]));
		say("sendto other", sendto(s, "leak", 4, 0, (struct sockaddr *)&a, sizeof a));
	} else if (!strcmp(mode, "tfo")) {
		int s = bound(SOCK_STREAM, 0);
		struct sockaddr_in a = loopback(port);
		say("sendto", sendto(s, "leak", 4, MSG_FASTOPEN, (struct sockaddr *)&a, sizeof a));
	} else if (!strcmp(mode, "mptcp")) {
		int m = socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP);
		if (say("mptcp socket", m) >= 0) {
			struct sockaddr_in a = loopback(port);
			say("mptcp bind", bind(m, (struct sockaddr *)&a, sizeof a));
			say("mptcp listen", listen(m, 4));
			close(m);
		}
		int s = socket(AF_INET, SOCK_STREAM, 0);
		int one = 1;
		say("socket", s);
		say("setsockopt SO_REUSEADDR", setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
		struct sockaddr_in a = loopback(port);
		if (say("bind", bind(s, (struct sockaddr *)&a, sizeof a)) < 0 || say("listen", listen(s, 4)) < 0)
			return 1;
		printf("listening\n");
		fflush(stdout);
		int c = accept(s, NULL, NULL);
		if (say("accept", c) < 0)
			return 1;
		say("write", write(c, "hello\n", 6));
		close(c);
	} else if (!strcmp(mode, "reuse")) {
		int s = socket(AF_INET, SOCK_DGRAM, 0);
		int one = 1;
		say("socket", s);
		say("setsockopt SO_REUSEADDR", setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
		say("setsockopt SO_REUSEPORT", setsockopt(s, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one));
		struct sockaddr_in a = loopback(port);
		say("bind", bind(s, (struct sockaddr *)&a, sizeof a));
	} else {
		return 2;
	}
	return 0;
}
