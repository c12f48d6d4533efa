/* F_GETPIPE_SZ and F_SETPIPE_SZ as Linux answers them (as root): the
 * default size, rounding up to a power of two of pages, a write bounded
 * by the size, EBUSY below what the pipe holds, EINVAL past 2 GiB, EBADF
 * on a directory that is not a pipe. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define show(what, call)                                                  \
    do {                                                                  \
        errno = 0;                                                        \
        long r_ = (call);                                                 \
        printf("%s: %ld %s\n", what, r_, errno ? strerror(errno) : "-"); \
    } while (0)

int main(void) {
    int p[2];
    static char buf[20000];
    if (pipe2(p, O_NONBLOCK) != 0) {
        perror("pipe2");
        return 1;
    }
    show("get", fcntl(p[0], F_GETPIPE_SZ));
    show("set 0", fcntl(p[1], F_SETPIPE_SZ, 0));
    show("set 5000", fcntl(p[0], F_SETPIPE_SZ, 5000));
    show("get", fcntl(p[1], F_GETPIPE_SZ));
    show("write 20000", write(p[1], buf, sizeof buf));
    show("write 1 more", write(p[1], buf, 1));
    show("set 4096 (holds 8192)", fcntl(p[1], F_SETPIPE_SZ, 4096));
    show("set 2 GiB + 1", fcntl(p[1], F_SETPIPE_SZ, (1u << 31) + 1));
    show("set 1 MiB", fcntl(p[1], F_SETPIPE_SZ, 1 << 20));
    show("write 1 more", write(p[1], buf, 1));
    show("read 20000", read(p[0], buf, sizeof buf));
    int f = open("/", O_RDONLY | O_DIRECTORY);
    show("get on a directory", fcntl(f, F_GETPIPE_SZ));
    show("set on a directory", fcntl(f, F_SETPIPE_SZ, 4096));
    return 0;
}
