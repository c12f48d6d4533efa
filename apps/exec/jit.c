/* System calls from code made at run time, which shoal never saw and
 * never rewrote: each `syscall` takes the trap path to shoal's kernel.
 * getpid from a page written and then made executable (W^X, as a JIT
 * does) must agree with libc's getpid; a
 * raw openat of a host file and a raw connect to a host listener on
 * 127.0.0.1 (arguments: the file, the port) get what the instance's
 * kernel gives (on shoal: no such file in the instance, and its own
 * loopback, where nothing listens), never the host's. Prints one line
 * per call. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

typedef long (*raw_fn)(long nr, long a, long b, long c, long d, long e);

/* mov eax, 39; syscall; ret */
static const unsigned char getpid_code[] = {0xb8, 0x27, 0, 0, 0, 0x0f, 0x05, 0xc3};
/* mov rax, rdi; mov rdi, rsi; mov rsi, rdx; mov rdx, rcx; mov r10, r8;
 * mov r8, r9; syscall; ret */
static const unsigned char raw_code[] = {0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x48, 0x89,
                                         0xca, 0x4d, 0x89, 0xc2, 0x4d, 0x89, 0xc8, 0x0f, 0x05, 0xc3};

static void *code_page(void) {
    unsigned char *p = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        printf("mmap: %s\n", strerror(errno));
        exit(1);
    }
    memcpy(p, getpid_code, sizeof getpid_code);
    memcpy(p + 64, raw_code, sizeof raw_code);
    if (mprotect(p, 4096, PROT_READ | PROT_EXEC)) {
        printf("mprotect: %s\n", strerror(errno));
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: jit FILE PORT\n");
        return 2;
    }
    unsigned char *wx = code_page();
    long want = getpid();
    long (*gp)(void) = (long (*)(void))(void *)wx;
    int same = 1;
    for (int i = 0; i < 1000; i++)
        same &= gp() == want;
    printf("getpid from run-time code: %s\n", same ? "agrees" : "differs");
    raw_fn raw = (raw_fn)(void *)(wx + 64);
    long fd = raw(257 /* openat */, AT_FDCWD, (long)argv[1], O_RDONLY, 0, 0);
    printf("raw openat of the host file: %s\n", fd >= 0 ? "opened" : strerror((int)-fd));
    long s = raw(41 /* socket */, AF_INET, SOCK_STREAM, 0, 0, 0);
    if (s < 0) {
        printf("raw socket: %s\n", strerror((int)-s));
        return 0;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(argv[2]))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    long c = raw(42 /* connect */, s, (long)&a, sizeof a, 0, 0);
    printf("raw connect to 127.0.0.1:%s: %s\n", argv[2], c == 0 ? "connected" : strerror((int)-c));
    int s2 = socket(AF_INET, SOCK_STREAM, 0);
    int c2 = connect(s2, (struct sockaddr *)&a, sizeof a);
    printf("libc connect to 127.0.0.1:%s: %s\n", argv[2], c2 == 0 ? "connected" : strerror(errno));
    return 0;
}
