/* net_rawsys: a hostile guest that makes host socket system calls itself
 * with the `syscall` instruction (what an spt guest can do, since it
 * shares the tender's process). Run with one published port, so fd 3 is
 * the handed-over listener. argv[1] picks the attempt; the result of a
 * call the sandbox allows is printed, one it forbids kills the instance.
 * "channel" and "recvmsg-0" run with --net-bind-any and no published
 * port: fd 3 is then the bind channel to the waiting parent. "relay PORT"
 * runs with one published /udp port and no --net-outbound: fd 3 is then
 * the instance's end of the parent's UDP relay. */
#include <stdio.h>
#include <string.h>

static long sys(long n, long a, long b, long c, long d)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = 0;
	register long r9 __asm__("r9") = 0;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
	return r;
}

static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
	return r;
}

/* recvmsg(fd) of one int and one descriptor; prints what came. */
static void recv_reply(int fd, const char *what)
{
	int reply = -1;
	unsigned long ctl[4] = { 0 };
	struct {
		void *base;
		unsigned long len;
	} iov = { &reply, sizeof reply };
	struct {
		void *name;
		unsigned namelen;
		void *iov;
		unsigned long iovlen;
		void *control;
		unsigned long controllen;
		int flags;
	} msg = { 0, 0, &iov, 1, ctl, sizeof ctl, 0 };
	long n = sys(47, fd, (long)&msg, 0, 0);
	printf("%s: %ld bytes, errno %d, %s\n", what, n, reply, msg.controllen ? "a descriptor" : "no descriptor");
}

int main(int argc, char **argv)
{
	const char *w = argc > 1 ? argv[1] : "";
	unsigned char sin[16] = { 2, 0, 0x1f, 0x90, 127, 0, 0, 1 }; /* 127.0.0.1:8080 */
	if (!strcmp(w, "socket"))
		printf("socket: %ld\n", sys(41, 2, 1 | 04000, 0, 0));
	else if (!strcmp(w, "connect"))
		printf("connect: %ld\n", sys(42, 3, (long)sin, 16, 0));
	else if (!strcmp(w, "accept-blocking"))
		printf("accept4 without SOCK_NONBLOCK: %ld\n", sys(288, 3, 0, 0, 0));
	else if (!strcmp(w, "accept-other"))
		printf("accept4 on fd 9: %ld\n", sys(288, 9, 0, 0, 04000));
	else if (!strcmp(w, "accept-ok"))
		printf("accept4 on the listener: %ld\n", sys(288, 3, 0, 0, 04000));
	else if (!strcmp(w, "recvmsg"))
		recv_reply(3, "recvmsg on the listener");
	else if (!strcmp(w, "recvmsg-0"))
		recv_reply(0, "recvmsg on stdin");
	else if (!strcmp(w, "channel")) {
		/* The guest talks to the parent itself: garbage, then a well-formed
		 * request of a family the parent refuses, then a good one. */
		printf("garbage sent: %ld\n", sys(44, 3, (long)"junk!", 5, 0x4000));
		recv_reply(3, "garbage");
		unsigned char req[144] = { 0 };
		req[0] = 1; /* AF_UNIX */
		req[4] = 1;
		req[12] = 16;
		memcpy(req + 16, sin, 16);
		printf("request sent: %ld\n", sys(44, 3, (long)req, sizeof req, 0x4000));
		recv_reply(3, "AF_UNIX");
		req[0] = 2; /* AF_INET, 127.0.0.1:0 */
		req[18] = req[19] = 0;
		printf("request sent: %ld\n", sys(44, 3, (long)req, sizeof req, 0x4000));
		recv_reply(3, "AF_INET");
	} else if (!strcmp(w, "relay") && argc > 2) {
		/* Datagrams of its own to 127.0.0.1:PORT, past the handler: a
		 * sendto with the address, then a frame written as the parent's
		 * relay reads them (header: address length, the sockaddr_in,
		 * padding to 32 bytes; then the data). */
		int port = 0;
		for (const char *p = argv[2]; *p >= '0' && *p <= '9'; p++)
			port = port * 10 + (*p - '0');
		unsigned char to[16] = { 2, 0, port >> 8, port & 0xff, 127, 0, 0, 1 };
		printf("sendto with an address: %ld\n", sys6(44, 3, (long)"leak", 4, 0x4000, (long)to, 16));
		unsigned char frame[36] = { 16 };
		memcpy(frame + 4, to, 16);
		memcpy(frame + 32, "leak", 4);
		printf("frame sent: %ld\n", sys6(44, 3, (long)frame, sizeof frame, 0x4000, 0, 0));
	} else if (!strcmp(w, "mptcp")) {
		/* IPPROTO_MPTCP: its ports are outside Landlock's TCP rules. */
		long s = sys(41, 2, 1 | 04000, 262, 0);
		printf("mptcp socket: %s\n", s >= 3 ? "ok" : "failed");
	} else if (!strcmp(w, "tcp")) {
		printf("tcp socket: %s\n", sys(41, 2, 1 | 04000, 6, 0) >= 3 ? "ok" : "failed");
		printf("udp socket: %s\n", sys(41, 10, 2 | 04000, 17, 0) >= 3 ? "ok" : "failed");
	} else if (!strcmp(w, "reuseaddr") || !strcmp(w, "reuseport")) {
		/* Address reuse on a UDP socket: sharing a port a host service
		 * bound. */
		long s = sys(41, 2, 2 | 04000, 0, 0);
		int one = 1;
		printf("socket: %s\n", s >= 3 ? "ok" : "failed");
		fflush(stdout);
		printf("setsockopt: %ld\n", sys6(54, s, 1, w[5] == 'a' ? 2 : 15, (long)&one, 4, 0));
	} else if (!strcmp(w, "nodelay")) {
		long s = sys(41, 2, 1 | 04000, 0, 0);
		int one = 1;
		printf("setsockopt TCP_NODELAY: %ld\n", sys6(54, s, 6, 1, (long)&one, 4, 0));
		printf("setsockopt SO_KEEPALIVE: %ld\n", sys6(54, s, 1, 9, (long)&one, 4, 0));
	} else if (!strcmp(w, "fastopen")) {
		/* A send that connects (TCP Fast Open), on the listener. */
		printf("sendto MSG_FASTOPEN: %ld\n", sys6(44, 3, (long)"x", 1, 0x20000000 | 0x40, (long)sin, 16));
	} else if (!strcmp(w, "bind")) {
		long s = sys(41, 2, 1 | 04000, 0, 0);
		printf("socket: %s\n", s >= 3 ? "ok" : "failed");
		printf("bind 127.0.0.1:8080: %ld\n", sys(49, s, (long)sin, 16, 0));
	}
	return 0;
}
