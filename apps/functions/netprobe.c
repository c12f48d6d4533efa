/* netprobe: a test function for the gateway's network isolation
 * (crates/shoal-cli/tests/serve.rs): `?to=P1,P2,…` tries a TCP connect to
 * 127.0.0.1:P for each port and answers one line per port, "P connected"
 * or "P refused: REASON (errno N)". Not built by build.sh. */
#include "fn_http.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int handle(const char *method, const char *path, const char *query, const char *body, size_t len, struct reply *r)
{
	(void)method, (void)path, (void)body, (void)len;
	static __thread char out[4096];
	size_t n = 0;
	const char *p = strstr(query, "to=");
	p = p ? p + 3 : "";
	while (*p && *p != '&' && n < sizeof out - 128) {
		char *end;
		long port = strtol(p, &end, 10);
		if (end == p)
			break;
		int s = socket(AF_INET, SOCK_STREAM, 0);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((unsigned short)port) };
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0)
			n += (size_t)snprintf(out + n, sizeof out - n, "%ld connected\n", port);
		else
			n += (size_t)snprintf(out + n, sizeof out - n, "%ld refused: %s (errno %d)\n", port, strerror(errno), errno);
		if (s >= 0)
			close(s);
		p = *end == ',' ? end + 1 : end;
	}
	r->body = out;
	r->len = n;
	return 0;
}
