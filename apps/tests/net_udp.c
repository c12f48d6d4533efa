/* net_udp: a UDP echo server for the host-networking tests. Binds
 * 0.0.0.0:PORT, prints "ready", echoes N datagrams back to their senders
 * (prefixed with "echo:"), then prints how many it echoed and exits. */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0) {
		perror("socket/bind");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	int n = atoi(argv[2]), done = 0;
	char buf[2048];
	while (done < n) {
		struct sockaddr_in from;
		socklen_t fl = sizeof from;
		ssize_t k = recvfrom(s, buf + 5, sizeof buf - 5, 0, (struct sockaddr *)&from, &fl);
		if (k < 0) {
			perror("recvfrom");
			return 1;
		}
		memcpy(buf, "echo:", 5);
		if (sendto(s, buf, k + 5, 0, (struct sockaddr *)&from, fl) != k + 5) {
			perror("sendto");
			return 1;
		}
		done++;
	}
	printf("echoed %d datagrams\n", done);
	return 0;
}
