/* net_hostile: a guest that makes the Net and NetPoll hypercalls itself,
 * with wild pointers, lengths and handles, and prints each result (a
 * negative errno). Run with one published port (--publish), so that
 * handle 3 is a listening socket. The tender must answer each with an
 * error and keep going; the program then prints "survived". With the
 * argument bind-any (run with --net-bind-any too) it also sends BIND_NEW
 * requests with wild addresses and values; without it, one BIND_NEW. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct net_op {
	uint32_t op, flags;
	int64_t handle;
	uint64_t a, b, buf, len, addr, addrlen;
	int64_t ret;
};
struct net_args {
	uint64_t ops, count;
	int64_t ret;
};
struct net_poll_fd {
	int32_t handle;
	int16_t events, revents;
};
struct net_poll_args {
	uint64_t fds, nfds, timeout_ns;
	int64_t ret;
};

enum { HC_NET = 5, HC_NET_POLL = 6 };
enum { OP_SOCKET = 1, OP_RECV = 7, OP_SEND = 6, OP_GETSOCKOPT = 11, OP_BIND_NEW = 14 };

static const struct net_op rodata_ops[1] = { { .op = OP_RECV, .handle = 3 } };
static const char rodata[64] = "read-only";

static void hypercall(uint64_t nr, void *arg)
{
	uint64_t entry = *(volatile uint64_t *)(uintptr_t)(0x10000 + 72);
	if (entry) {
		((void (*)(uint64_t, uint64_t))entry)(nr, (uint64_t)(uintptr_t)arg);
	} else {
		uint16_t port = 0x500 + nr;
		uint32_t a = (uint32_t)(uintptr_t)arg;
		__asm__ volatile("out %0, %1" : : "a"(a), "Nd"(port) : "memory");
	}
}

static int64_t batch(uint64_t ops, uint64_t count)
{
	struct net_args a = { ops, count, 0 };
	hypercall(HC_NET, &a);
	return a.ret;
}

static int64_t one(struct net_op o)
{
	int64_t rc = batch((uint64_t)(uintptr_t)&o, 1);
	return rc < 0 ? rc : o.ret;
}

int main(int argc, char **argv)
{
	char buf[256];
	unsigned char sin[16] = { 2, 0, 0, 0, 127, 0, 0, 1 }; /* 127.0.0.1:0 */
	uint64_t sa = (uint64_t)(uintptr_t)sin;
	printf("ops array wild: %ld\n", (long)batch(0xdead00000000ull, 1));
	printf("ops array in rodata: %ld\n", (long)batch((uint64_t)(uintptr_t)rodata_ops, 1));
	printf("too many ops: %ld\n", (long)batch((uint64_t)(uintptr_t)buf, 100000));
	printf("recv into wild buffer: %ld\n", (long)one((struct net_op){ .op = OP_RECV, .handle = 3, .buf = 0xdead00000000ull, .len = 16 }));
	printf("recv into code: %ld\n", (long)one((struct net_op){ .op = OP_RECV, .handle = 3, .buf = (uint64_t)(uintptr_t)main, .len = 16 }));
	printf("send of a huge length: %ld\n", (long)one((struct net_op){ .op = OP_SEND, .handle = 3, .buf = (uint64_t)(uintptr_t)buf, .len = 1ull << 40 }));
	printf("handle 1 (the console): %ld\n", (long)one((struct net_op){ .op = OP_RECV, .handle = 1, .buf = (uint64_t)(uintptr_t)buf, .len = 16 }));
	printf("handle -5: %ld\n", (long)one((struct net_op){ .op = OP_RECV, .handle = -5, .buf = (uint64_t)(uintptr_t)buf, .len = 16 }));
	printf("handle 2^40: %ld\n", (long)one((struct net_op){ .op = OP_RECV, .handle = 1ll << 40, .buf = (uint64_t)(uintptr_t)buf, .len = 16 }));
	printf("handle 999 (not open): %ld\n", (long)one((struct net_op){ .op = OP_RECV, .handle = 999, .buf = (uint64_t)(uintptr_t)buf, .len = 16 }));
	printf("getsockopt into rodata: %ld\n", (long)one((struct net_op){ .op = OP_GETSOCKOPT, .handle = 3, .a = 1, .b = 3, .buf = (uint64_t)(uintptr_t)rodata, .len = 4 }));
	printf("unknown operation: %ld\n", (long)one((struct net_op){ .op = 999, .handle = 3 }));
	printf("socket without --net-outbound: %ld\n", (long)one((struct net_op){ .op = OP_SOCKET, .a = 2, .b = 1 }));
	if (argc > 1 && !strcmp(argv[1], "bind-any")) {
		printf("bind_new of a wild address: %ld\n", (long)one((struct net_op){ .op = OP_BIND_NEW, .a = 2, .b = 1, .addr = 0xdead00000000ull, .addrlen = 16 }));
		printf("bind_new of a 4096-byte address: %ld\n", (long)one((struct net_op){ .op = OP_BIND_NEW, .a = 2, .b = 1, .addr = sa, .addrlen = 4096 }));
		printf("bind_new of AF_UNIX: %ld\n", (long)one((struct net_op){ .op = OP_BIND_NEW, .a = 1, .b = 1, .addr = sa, .addrlen = 16 }));
		printf("bind_new of SOCK_RAW: %ld\n", (long)one((struct net_op){ .op = OP_BIND_NEW, .a = 2, .b = 3, .addr = sa, .addrlen = 16 }));
		printf("bind_new with unknown flags: %ld\n", (long)one((struct net_op){ .op = OP_BIND_NEW, .flags = 0x80, .a = 2, .b = 1, .addr = sa, .addrlen = 16 }));
		printf("bind_new of a 2-byte address: %ld\n", (long)one((struct net_op){ .op = OP_BIND_NEW, .a = 2, .b = 1, .addr = sa, .addrlen = 2 }));
		printf("bind_new of 127.0.0.1:0: %s\n", one((struct net_op){ .op = OP_BIND_NEW, .a = 2, .b = 1, .addr = sa, .addrlen = 16 }) >= 3 ? "a handle" : "failed");
	} else {
		printf("bind_new without --net-bind-any: %ld\n", (long)one((struct net_op){ .op = OP_BIND_NEW, .a = 2, .b = 1, .addr = sa, .addrlen = 16 }));
	}
	struct net_poll_args p = { 0xdead00000000ull, 1, 0, 0 };
	hypercall(HC_NET_POLL, &p);
	printf("poll of a wild array: %ld\n", (long)p.ret);
	struct net_poll_args q = { (uint64_t)(uintptr_t)buf, 1u << 30, 0, 0 };
	hypercall(HC_NET_POLL, &q);
	printf("poll of 2^30 entries: %ld\n", (long)q.ret);
	printf("survived\n");
	return 0;
}
