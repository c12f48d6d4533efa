#define _GNU_SOURCE
/* fn_http.c: main() of every example function (see fn_http.h). Parses
 * HTTP/1.1 requests (Content-Length bodies; chunked request bodies are
 * answered 411), calls handle(), writes the reply with Content-Length. */
#include "fn_http.h"
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX 16384
#define BODY_MAX (64L << 20)

/* Whether a failed call on a blocking socket is worth repeating: EINTR,
 * and EAGAIN after waiting for the socket. A blocking socket never gives
 * EAGAIN on Linux (no timeouts are set here), but it does under gVisor's
 * runsc (release 20221219, --network=host): its strace showed 18 of 40
 * reads of a connection fail with errno 11, which closed connections
 * without an answer. */
static int again(int fd, short events)
{
	if (errno == EINTR)
		return 1;
	if (errno != EAGAIN && errno != EWOULDBLOCK)
		return 0;
	struct pollfd p = {.fd = fd, .events = events};
	while (poll(&p, 1, -1) < 0 && errno == EINTR)
		;
	return 1;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && again(fd, POLLOUT))
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

long fn_query_long(const char *query, const char *key, long dflt)
{
	size_t k = strlen(key);
	for (const char *p = query; p && *p;) {
		if (!strncmp(p, key, k) && p[k] == '=')
			return strtol(p + k + 1, NULL, 10);
		p = strchr(p, '&');
		if (p)
			p++;
	}
	return dflt;
}

void fn_printf(struct reply *r, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	r->body = s;
	r->len = (size_t)n;
	r->body_free = 1;
}

const char *fn_root(void)
{
	const char *r = getenv("FN_ROOT");
	return r ? r : "";
}

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 301: return "Moved Permanently";
	case 302: return "Found";
	case 304: return "Not Modified";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 411: return "Length Required";
	case 413: return "Payload Too Large";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	default: return "Status";
	}
}

/* Sends r; 0 on success. */
static int send_reply(int c, struct reply *r, int keep)
{
	char head[512];
	long long len = (long long)r->len;
	int f = -1;
	if (r->file) {
		struct stat st;
		f = open(r->file, O_RDONLY | O_CLOEXEC);
		if (f < 0 || fstat(f, &st) < 0 || !S_ISREG(st.st_mode)) {
			if (f >= 0)
				close(f);
			f = -1;
			r->status = 404;
			r->body = "not found\n";
			r->len = strlen(r->body);
			len = (long long)r->len;
		} else {
			len = (long long)st.st_size;
		}
	}
	int status = r->status ? r->status : 200;
	int n = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %lld\r\n%s\r\n", status, reason(status),
			 r->type ? r->type : "text/plain", len, keep ? "" : "Connection: close\r\n");
	int rc;
	char *one = NULL;
	/* A small answer goes out in one write: head and body in one segment. */
	if (f < 0 && !r->body_delay_ms && !r->two_writes && r->len && r->len <= 65536 && (one = malloc((size_t)n + r->len))) {
		memcpy(one, head, (size_t)n);
		memcpy(one + n, r->body, r->len);
		rc = write_all(c, one, (size_t)n + r->len);
		free(one);
		return rc;
	}
	rc = write_all(c, head, (size_t)n);
	if (!rc && r->body_delay_ms > 0) {
		struct timespec ts = {r->body_delay_ms / 1000, (r->body_delay_ms % 1000) * 1000000L};
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	if (f >= 0) {
		off_t off = 0;
		while (!rc && off < len) {
			ssize_t s = sendfile(c, f, &off, (size_t)(len - off));
			if (s < 0 && again(c, POLLOUT))
				continue;
			if (s <= 0)
				rc = -1;
		}
		close(f);
	} else if (!rc && r->len) {
		rc = write_all(c, r->body, r->len);
	}
	return rc;
}

static void *serve(void *arg)
{
	int c = (int)(long)arg;
	char *buf = malloc(HEAD_MAX + 1);
	size_t have = 0;
	if (!buf)
		goto out;
	for (;;) {
		/* Read until the end of the head. */
		char *end;
		buf[have] = 0;
		while (!(end = strstr(buf, "\r\n\r\n"))) {
			if (have >= HEAD_MAX)
				goto out;
			ssize_t r = read(c, buf + have, HEAD_MAX - have);
			if (r < 0 && again(c, POLLIN))
				continue;
			if (r <= 0)
				goto out;
			have += (size_t)r;
			buf[have] = 0;
		}
		size_t head_len = (size_t)(end - buf) + 4;
		char method[16], target[4096];
		if (sscanf(buf, "%15s %4095s", method, target) != 2)
			goto out;
		long clen = 0;
		int keep = 1, chunked = 0;
		for (char *h = strstr(buf, "\r\n"); h && h < end; h = strstr(h + 2, "\r\n")) {
			char *l = h + 2;
			if (!strncasecmp(l, "Content-Length:", 15))
				clen = strtol(l + 15, NULL, 10);
			else if (!strncasecmp(l, "Connection:", 11) && strcasestr(l, "close") && strcasestr(l, "close") < strstr(l, "\r\n"))
				keep = 0;
			else if (!strncasecmp(l, "Transfer-Encoding:", 18))
				chunked = 1;
		}
		struct reply r = {0};
		if (chunked || clen < 0 || clen > BODY_MAX) {
			r.status = chunked ? 411 : 413;
			r.body = "request body not supported\n";
			r.len = strlen(r.body);
			send_reply(c, &r, 0);
			goto out;
		}
		char *body = malloc((size_t)clen + 1);
		if (!body)
			goto out;
		size_t got = have - head_len < (size_t)clen ? have - head_len : (size_t)clen;
		memcpy(body, buf + head_len, got);
		while (got < (size_t)clen) {
			ssize_t r2 = read(c, body + got, (size_t)clen - got);
			if (r2 < 0 && again(c, POLLIN))
				continue;
			if (r2 <= 0) {
				free(body);
				goto out;
			}
			got += (size_t)r2;
		}
		body[clen] = 0;
		/* What follows this request (pipelining) stays in buf. */
		size_t used = head_len + (size_t)clen;
		size_t rest = have > used ? have - used : 0;
		char *q = strchr(target, '?');
		const char *query = "";
		if (q) {
			*q = 0;
			query = q + 1;
		}
		int rc = handle(method, target, query, body, (size_t)clen, &r);
		free(body);
		if (rc < 0)
			goto out;
		rc = send_reply(c, &r, keep);
		if (r.body_free)
			free((void *)r.body);
		if (rc || !keep)
			goto out;
		memmove(buf, buf + have - rest, rest);
		have = rest;
	}
out:
	free(buf);
	close(c);
	return NULL;
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	if (fn_init && fn_init() != 0)
		return 1;
	int s;
	const char *lfd = getenv("LISTEN_FD");
	if (lfd) {
		s = atoi(lfd);
	} else {
		const char *port = getenv("PORT");
		if (!port) {
			fprintf(stderr, "fn_http: neither PORT nor LISTEN_FD is set\n");
			return 2;
		}
		s = socket(AF_INET, SOCK_STREAM, 0);
		int one = 1;
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(port))};
		if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 4096) < 0) {
			perror("fn_http: listen");
			return 2;
		}
	}
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 256 << 10);
	for (;;) {
		int c = accept(s, NULL, NULL);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE || again(s, POLLIN))
				continue;
			perror("fn_http: accept");
			return 1;
		}
		int one = 1;
		if (!&fn_nagle || !fn_nagle)
			setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		pthread_t t;
		if (pthread_create(&t, &at, serve, (void *)(long)c))
			close(c);
	}
}
