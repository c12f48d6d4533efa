/* serial: a function that serves one connection at a time, the common shape
 * of a hand-written server: accept, then read requests and write answers on
 * that connection until the client closes it, then accept the next. It
 * answers "serial\n" to every request (keep-alive, HTTP/1.1, requests
 * without a body). A gateway that opens several connections to one such
 * instance and keeps the first alive starves the others: the gateway's
 * default of one request at a time per instance serves it (docs/serve.md,
 * "The concurrency contract"). Listens like fn_http: $LISTEN_FD, or $PORT. */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int listener(void)
{
	const char *lfd = getenv("LISTEN_FD");
	if (lfd)
		return atoi(lfd);
	const char *port = getenv("PORT");
	if (!port) {
		fprintf(stderr, "serial: neither PORT nor LISTEN_FD is set\n");
		exit(2);
	}
	int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(port))};
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 128) < 0) {
		perror("serial: listen");
		exit(2);
	}
	return s;
}

/* Serves one connection until the client closes it: every complete request
 * head in the buffer gets one answer. */
static void serve(int c)
{
	static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n\r\nserial\n";
	char buf[16384];
	size_t have = 0;
	for (;;) {
		ssize_t n = read(c, buf + have, sizeof buf - 1 - have);
		if (n <= 0)
			return;
		have += (size_t)n;
		buf[have] = 0;
		char *end;
		while ((end = strstr(buf, "\r\n\r\n"))) {
			if (write(c, answer, sizeof answer - 1) != (ssize_t)(sizeof answer - 1))
				return;
			size_t used = (size_t)(end + 4 - buf);
			memmove(buf, buf + used, have - used + 1);
			have -= used;
		}
		if (have == sizeof buf - 1)
			return;
	}
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	int s = listener();
	for (;;) {
		int c = accept(s, NULL, NULL);
		if (c < 0)
			continue;
		serve(c);
		close(c);
	}
}
