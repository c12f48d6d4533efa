/* SCM_RIGHTS between AF_UNIX sockets of one process: a datagram carrying
 * two descriptors, a short control buffer (MSG_CTRUNC, the extra one
 * closed), MSG_PEEK (the descriptors installed again), a stream where
 * the descriptors ride on their send's bytes, errors of malformed
 * control messages, and a message dropped with its socket (the passed
 * pipe's write end goes, so its reader sees end of file). Prints what it
 * observes; crates/shoal-cli/tests/pysuite.rs compares with native. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static int send_fds(int s, const char *data, const int *fds, int n)
{
    char ctl[CMSG_SPACE(sizeof(int) * 4)];
    struct iovec iov = {(void *)data, strlen(data)};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (n > 0) {
        memset(ctl, 0, sizeof ctl);
        m.msg_control = ctl;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * n);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * n);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
    }
    return sendmsg(s, &m, 0) < 0 ? -errno : 0;
}

/* Receives into buf with a control buffer of ctllen bytes; returns the
 * byte count and fills fds (at most 4) and *nfds, *flags, *clen. */
static long recv_fds(int s, char *buf, size_t len, size_t ctllen, int flags, int *fds, int *nfds, int *mflags, size_t *clen)
{
    char ctl[256];
    struct iovec iov = {buf, len};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctllen ? ctl : NULL;
    m.msg_controllen = ctllen;
    long r = recvmsg(s, &m, flags);
    if (r < 0)
        return -errno;
    *nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int) && *nfds < 4; k++)
                memcpy(&fds[(*nfds)++], CMSG_DATA(c) + k * sizeof(int), sizeof(int));
    *mflags = m.msg_flags;
    *clen = m.msg_controllen;
    return r;
}

static int same_file(int a, int b)
{
    struct stat x, y;
    return fstat(a, &x) == 0 && fstat(b, &y) == 0 && x.st_ino == y.st_ino && x.st_dev == y.st_dev;
}

int main(void)
{
    int sv[2], p[2], fds[4], n, fl;
    size_t clen;
    char buf[64];
    if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) || pipe(p))
        return 1;

    /* Two descriptors; the receiver's are new numbers for the same pipe. */
    int two[2] = {p[0], p[1]};
    printf("send: %d\n", send_fds(sv[0], "pipe", two, 2));
    long r = recv_fds(sv[1], buf, sizeof buf, CMSG_SPACE(sizeof(int) * 2), 0, fds, &n, &fl, &clen);
    printf("recv: %ld bytes, %d fds, flags %#x, controllen %zu, same %d %d, new %d\n", r, n, fl, clen, same_file(fds[0], p[0]),
           same_file(fds[1], p[1]), fds[0] != p[0] && fds[1] != p[1]);
    write(fds[1], "via", 3);
    printf("read: %zd\n", read(p[0], buf, sizeof buf));
    close(fds[0]);
    close(fds[1]);

    /* MSG_PEEK installs them too, and the message stays. */
    send_fds(sv[0], "peek", two, 2);
    r = recv_fds(sv[1], buf, sizeof buf, 64, MSG_PEEK, fds, &n, &fl, &clen);
    printf("peek: %ld bytes, %d fds, same %d\n", r, n, n == 2 && same_file(fds[0], p[0]));
    for (int k = 0; k < n; k++)
        close(fds[k]);
    /* Room for one descriptor: MSG_CTRUNC, the other closed. */
    r = recv_fds(sv[1], buf, sizeof buf, CMSG_LEN(sizeof(int)), 0, fds, &n, &fl, &clen);
    printf("short: %ld bytes, %d fds, ctrunc %d, controllen %zu\n", r, n, !!(fl & MSG_CTRUNC), clen);
    close(fds[0]);
    /* No control buffer at all. */
    send_fds(sv[0], "none", two, 2);
    r = recv_fds(sv[1], buf, sizeof buf, 0, 0, fds, &n, &fl, &clen);
    printf("none: %ld bytes, %d fds, ctrunc %d\n", r, n, !!(fl & MSG_CTRUNC));

    /* Malformed control messages. */
    int bad = 999;
    printf("ebadf: %d\n", send_fds(sv[0], "x", &bad, 1) == -EBADF);
    char ctl[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec iov = {"x", 1};
    struct msghdr m = {0};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = sizeof ctl + 8;
    printf("too long: %d\n", sendmsg(sv[0], &m, 0) < 0 ? errno == EINVAL : 0);
    c->cmsg_len = CMSG_LEN(sizeof(int));
    c->cmsg_type = 77;
    printf("bad type: %d\n", sendmsg(sv[0], &m, 0) < 0 ? errno == EINVAL : 0);

    /* A stream: the descriptors come with the read that reaches their
     * bytes, and that read stops at their end. */
    int st[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, st))
        return 1;
    write(st[0], "abc", 3);
    send_fds(st[0], "defg", &p[0], 1);
    write(st[0], "hij", 3);
    r = recv_fds(st[1], buf, sizeof buf, 64, 0, fds, &n, &fl, &clen);
    printf("stream: %ld bytes \"%.*s\", %d fds\n", r, (int)r, buf, n);
    close(fds[0]);
    r = recv_fds(st[1], buf, sizeof buf, 64, 0, fds, &n, &fl, &clen);
    printf("stream: %ld bytes \"%.*s\", %d fds\n", r, (int)r, buf, n);

    /* A message dropped with its socket lets the passed write end go:
     * the pipe's reader sees end of file once ours is closed too. */
    int q[2];
    if (pipe(q))
        return 1;
    send_fds(sv[0], "drop", &q[1], 1);
    close(q[1]);
    close(sv[1]);
    fcntl(q[0], F_SETFL, O_NONBLOCK);
    printf("dropped: eof %zd\n", read(q[0], buf, sizeof buf));
    return 0;
}
