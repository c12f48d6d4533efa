/* net_connect: outbound TCP from the guest (run with --net-outbound).
 *   net_connect refused PORT   non-blocking connect to 127.0.0.1:PORT,
 *                              where nothing listens: poll for POLLOUT,
 *                              then SO_ERROR; then a blocking connect
 *   net_connect talk PORT      connect to 127.0.0.1:PORT, send "ping",
 *                              print what comes back */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[2])), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (!strcmp(argv[1], "refused")) {
		int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		int rc = connect(s, (struct sockaddr *)&a, sizeof a);
		printf("non-blocking connect: %s\n", rc == 0 ? "connected" : strerror(errno));
		struct pollfd p = { .fd = s, .events = POLLOUT };
		int n = poll(&p, 1, 5000);
		printf("poll: %d, POLLOUT %s\n", n, p.revents & POLLOUT ? "set" : "clear");
		int err = -1;
		socklen_t len = sizeof err;
		getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
		printf("SO_ERROR: %s\n", strerror(err));
		close(s);
		s = socket(AF_INET, SOCK_STREAM, 0);
		rc = connect(s, (struct sockaddr *)&a, sizeof a);
		printf("blocking connect: %s\n", rc == 0 ? "connected" : strerror(errno));
		return 0;
	}
	int s = socket(AF_INET, SOCK_STREAM, 0);
	if (s < 0) {
		printf("socket: %s\n", strerror(errno));
		return 1;
	}
	if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) {
		printf("connect: %s\n", strerror(errno));
		return 1;
	}
	write(s, "ping", 4);
	char buf[64];
	ssize_t n = read(s, buf, sizeof buf - 1);
	buf[n > 0 ? n : 0] = 0;
	printf("got: %s\n", buf);
	return 0;
}
