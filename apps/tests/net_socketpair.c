/* net_socketpair: an AF_UNIX stream socketpair between two threads moves
 * 1 MiB in odd-sized writes and reads; the reader checks length and
 * checksum. Then datagram and seqpacket pairs keep message boundaries,
 * shutdown gives end of file, and socket options read back as set.
 * Prints only facts that are the same on Linux and on shoal. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define TOTAL (1 << 20)
static int sv[2];

static uint8_t byte_at(uint32_t i) { return (uint8_t)(i * 2654435761u >> 13); }

static void *writer(void *arg)
{
	(void)arg;
	static uint8_t buf[70000];
	uint32_t off = 0, chunk = 1;
	while (off < TOTAL) {
		uint32_t n = chunk % sizeof buf + 1;
		if (n > TOTAL - off) n = TOTAL - off;
		for (uint32_t k = 0; k < n; k++) buf[k] = byte_at(off + k);
		ssize_t w = write(sv[0], buf, n);
		if (w <= 0) { printf("write failed: %s\n", strerror(errno)); return 0; }
		off += (uint32_t)w;
		chunk = chunk * 7 + 13;
	}
	shutdown(sv[0], SHUT_WR);
	return 0;
}

static void stream_1mib(void)
{
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) { perror("socketpair"); return; }
	pthread_t t;
	pthread_create(&t, 0, writer, 0);
	static uint8_t buf[50000];
	uint32_t got = 0, bad = 0, sum = 2166136261u;
	size_t want = 1;
	for (;;) {
		ssize_t n = read(sv[1], buf, want % sizeof buf + 1);
		if (n < 0) { printf("read failed: %s\n", strerror(errno)); break; }
		if (n == 0) break;
		for (ssize_t k = 0; k < n; k++) {
			if (buf[k] != byte_at(got + k)) bad++;
			sum = (sum ^ buf[k]) * 16777619u; /* FNV-1a */
		}
		got += (uint32_t)n;
		want = want * 5 + 3;
	}
	pthread_join(t, 0);
	printf("stream: %u bytes, %u wrong, checksum %08x\n", got, bad, sum);
	close(sv[0]);
	close(sv[1]);
}

static void messages(int type, const char *name)
{
	int p[2];
	if (socketpair(AF_UNIX, type, 0, p)) { printf("%s: socketpair: %s\n", name, strerror(errno)); return; }
	send(p[0], "one", 3, 0);
	send(p[0], "second", 6, 0);
	struct iovec iov[2] = {{"thi", 3}, {"rd!", 3}};
	struct msghdr m = {0};
	m.msg_iov = iov;
	m.msg_iovlen = 2;
	sendmsg(p[0], &m, 0);
	char b[16];
	ssize_t n = recv(p[1], b, sizeof b, 0);
	printf("%s: %zd '%.*s'\n", name, n, (int)n, b);
	n = recv(p[1], b, 3, 0);
	printf("%s: truncated read %zd '%.*s'\n", name, n, (int)n, b);
	char c1[2], c2[10];
	struct iovec r[2] = {{c1, 2}, {c2, 10}};
	struct msghdr rm = {0};
	rm.msg_iov = r;
	rm.msg_iovlen = 2;
	n = recvmsg(p[1], &rm, 0);
	printf("%s: recvmsg %zd '%.2s' '%.*s' trunc=%d\n", name, n, c1, (int)n - 2, c2, !!(rm.msg_flags & MSG_TRUNC));
	n = recv(p[1], b, sizeof b, MSG_DONTWAIT);
	printf("%s: empty -> %zd %s\n", name, n, n < 0 && errno == EAGAIN ? "EAGAIN" : "?");
	close(p[0]);
	n = recv(p[1], b, sizeof b, MSG_DONTWAIT);
	printf("%s: after close -> %zd %s\n", name, n, n < 0 ? strerror(errno) : "");
	close(p[1]);
}

static void options(void)
{
	int s = socket(AF_UNIX, SOCK_STREAM, 0), v;
	socklen_t l = sizeof v;
	getsockopt(s, SOL_SOCKET, SO_TYPE, &v, &l);
	printf("SO_TYPE stream=%d len=%u\n", v == SOCK_STREAM, l);
	l = sizeof v;
	getsockopt(s, SOL_SOCKET, SO_ERROR, &v, &l);
	printf("SO_ERROR %d\n", v);
	v = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &v, sizeof v);
	setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &v, sizeof v);
	int r1 = 0, r2 = 0;
	l = sizeof v;
	getsockopt(s, SOL_SOCKET, SO_REUSEADDR, &r1, &l);
	l = sizeof v;
	getsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &r2, &l);
	printf("SO_REUSEADDR %d SO_KEEPALIVE %d\n", r1, r2);
	v = 65536;
	setsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
	setsockopt(s, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
	int rb = 0, sb = 0;
	l = sizeof v;
	getsockopt(s, SOL_SOCKET, SO_RCVBUF, &rb, &l);
	l = sizeof v;
	getsockopt(s, SOL_SOCKET, SO_SNDBUF, &sb, &l);
	printf("SO_RCVBUF doubled %d SO_SNDBUF doubled %d\n", rb == 2 * v, sb == 2 * v);
	struct linger lg = {1, 7}, lg2 = {0, 0};
	setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	l = sizeof lg2;
	getsockopt(s, SOL_SOCKET, SO_LINGER, &lg2, &l);
	printf("SO_LINGER %d %d len=%u\n", lg2.l_onoff, lg2.l_linger, l);
	int r = setsockopt(s, SOL_SOCKET, 9999, &v, sizeof v);
	printf("bad option: %d %s\n", r, strerror(errno));
	struct sockaddr_storage ss;
	l = sizeof ss;
	getsockname(s, (struct sockaddr *)&ss, &l);
	printf("unnamed getsockname len=%u family=%d\n", l, ss.ss_family);
	r = getpeername(s, (struct sockaddr *)&ss, &l);
	printf("getpeername: %d %s\n", r, strerror(errno));
	r = getsockopt(1, SOL_SOCKET, SO_TYPE, &v, &l);
	printf("not a socket: %d %s\n", r, strerror(errno));
	r = socket(AF_UNIX, 77, 0);
	printf("bad type: %d %s\n", r, strerror(errno));
	close(s);
}

int main(void)
{
	stream_1mib();
	messages(SOCK_DGRAM, "dgram");
	messages(SOCK_SEQPACKET, "seqpacket");
	options();
	return 0;
}
