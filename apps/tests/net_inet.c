/* net_inet: an instance with no network option has Internet sockets of
 * its own loopback only: addresses outside it are unreachable
 * (ENETUNREACH, EADDRNOTAVAIL, as in a network namespace with only "lo"),
 * never faked. Not compared with Linux (the host has a network). */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

static const char *en(int r)
{
	if (r >= 0)
		return "ok";
	switch (errno) {
	case ENETUNREACH: return "ENETUNREACH";
	case EADDRNOTAVAIL: return "EADDRNOTAVAIL";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EAFNOSUPPORT: return "EAFNOSUPPORT";
	default: return strerror(errno);
	}
}

int main(void)
{
	struct sockaddr_in out = { .sin_family = AF_INET, .sin_port = htons(80) };
	inet_pton(AF_INET, "192.0.2.1", &out.sin_addr);
	int s = socket(AF_INET, SOCK_STREAM, 0);
	printf("AF_INET stream: %s\n", en(s));
	printf("connect 192.0.2.1:80: %s\n", en(connect(s, (struct sockaddr *)&out, sizeof out)));
	int u = socket(AF_INET6, SOCK_DGRAM, 0);
	printf("AF_INET6 dgram: %s\n", en(u));
	struct sockaddr_in6 out6 = { .sin6_family = AF_INET6, .sin6_port = htons(53) };
	inet_pton(AF_INET6, "2001:db8::1", &out6.sin6_addr);
	printf("sendto [2001:db8::1]:53: %s\n", en(sendto(u, "x", 1, 0, (struct sockaddr *)&out6, sizeof out6)));
	printf("bind 192.0.2.1:80: %s\n", en(bind(socket(AF_INET, SOCK_STREAM, 0), (struct sockaddr *)&out, sizeof out)));
	int sv[2];
	printf("AF_INET socketpair: %s\n", en(socketpair(AF_INET, SOCK_STREAM, 0, sv)));
	printf("unknown family: %s\n", en(socket(12345, SOCK_STREAM, 0)));
	return 0;
}
