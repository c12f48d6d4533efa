#define _GNU_SOURCE
/* http: a small HTTP/1.1 server written against the plain socket API,
 * built natively and with `shoal cc` from this one source.
 *
 *   http PORT ROOT [MAX]
 *
 * One thread per connection, keep-alive. Answers:
 *   GET /hello          "hello from http\n"
 *   GET /chunked?n=N    N lines "line K\n" in chunked transfer encoding
 *   GET /PATH           the file ROOT/PATH, sent with sendfile(2)
 * anything else: 404 or 405. Prints "listening on PORT" once it listens;
 * with MAX it exits after MAX connections have closed. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *root;
static long max_conns = -1, closed;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= w;
	}
	return 0;
}

static int reply(int c, const char *status, const char *type, const char *body)
{
	char head[256];
	int n = snprintf(head, sizeof head, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n", status, type, strlen(body));
	return write_all(c, head, n) || write_all(c, body, strlen(body));
}

static int send_file(int c, const char *path)
{
	char full[1024];
	if (strstr(path, "..") || snprintf(full, sizeof full, "%s/%s", root, path) >= (int)sizeof full)
		return reply(c, "404 Not Found", "text/plain", "not found\n");
	int f = open(full, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (f < 0 || fstat(f, &st) < 0 || !S_ISREG(st.st_mode)) {
		if (f >= 0)
			close(f);
		return reply(c, "404 Not Found", "text/plain", "not found\n");
	}
	char head[256];
	int n = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: %lld\r\n\r\n", (long long)st.st_size);
	int rc = write_all(c, head, n);
	off_t off = 0;
	while (!rc && off < st.st_size) {
		ssize_t s = sendfile(c, f, &off, st.st_size - off);
		if (s < 0 && errno == EINTR)
			continue;
		if (s <= 0)
			rc = -1;
	}
	close(f);
	return rc;
}

static int chunked(int c, long lines)
{
	const char *head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n";
	if (write_all(c, head, strlen(head)))
		return -1;
	for (long k = 0; k < lines; k++) {
		char line[64], chunk[96];
		int n = snprintf(line, sizeof line, "line %ld\n", k);
		int m = snprintf(chunk, sizeof chunk, "%x\r\n%s\r\n", n, line);
		if (write_all(c, chunk, m))
			return -1;
	}
	return write_all(c, "0\r\n\r\n", 5);
}

/* Handles one request line; returns 0 to keep the connection. */
static int handle(int c, char *req)
{
	char method[16], target[512];
	if (sscanf(req, "%15s %511s", method, target) != 2)
		return reply(c, "400 Bad Request", "text/plain", "bad request\n"), -1;
	if (strcmp(method, "GET"))
		return reply(c, "405 Method Not Allowed", "text/plain", "GET only\n");
	if (!strcmp(target, "/hello"))
		return reply(c, "200 OK", "text/plain", "hello from http\n");
	if (!strncmp(target, "/chunked?n=", 11))
		return chunked(c, atol(target + 11));
	return send_file(c, target + 1);
}

static void *serve(void *arg)
{
	int c = (int)(long)arg;
	static __thread char buf[8192];
	size_t have = 0;
	for (;;) {
		char *end = memmem(buf, have, "\r\n\r\n", 4);
		if (end) {
			*end = 0;
			int keep = !strcasestr(buf, "Connection: close");
			if (handle(c, buf) || !keep)
				break;
			size_t used = end + 4 - buf;
			memmove(buf, buf + used, have - used);
			have -= used;
			continue;
		}
		if (have == sizeof buf)
			break;
		ssize_t n = read(c, buf + have, sizeof buf - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += n;
	}
	close(c);
	pthread_mutex_lock(&lock);
	int done = max_conns >= 0 && ++closed >= max_conns;
	pthread_mutex_unlock(&lock);
	if (done) {
		printf("served %ld connections\n", closed);
		fflush(stdout);
		exit(0);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: http PORT ROOT [MAX]\n");
		return 2;
	}
	root = argv[2];
	if (argc > 3)
		max_conns = atol(argv[3]);
	int s = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int v6 = 1;
	if (s < 0) {
		s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		v6 = 0;
	}
	int one = 1, zero = 0;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	int rc;
	if (v6) {
		setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
		struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = htons(atoi(argv[1])), .sin6_addr = IN6ADDR_ANY_INIT };
		rc = bind(s, (struct sockaddr *)&a, sizeof a);
	} else {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
		rc = bind(s, (struct sockaddr *)&a, sizeof a);
	}
	if (rc < 0 || listen(s, 1024) < 0) {
		fprintf(stderr, "http: bind/listen: %s\n", strerror(errno));
		return 1;
	}
	printf("listening on %s\n", argv[1]);
	fflush(stdout);
	for (;;) {
		int c = accept4(s, 0, 0, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			fprintf(stderr, "http: accept: %s\n", strerror(errno));
			return 1;
		}
		setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		pthread_t t;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, serve, (void *)(long)c))
			close(c);
	}
}
