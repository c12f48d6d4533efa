/* Rebooting vfs and ramfs (docs/recovery.md): state the program can observe —
 * open descriptors, their offsets, status and close-on-exec flags, dup'ed
 * descriptors sharing an offset, an unlinked file still open, a pipe with
 * unread bytes, a renamed directory, file contents, the umask and the
 * working directory — checked after every round of calls, so that a
 * component rebooted under the program (shoal run --inject vfs:panic@N,
 * ramfs:…) shows as a wrong answer if anything was lost.
 *   heal [ROUNDS]   the checked loop (default 300); prints "ok ROUNDS rounds"
 *   heal loop N     N rounds of open/write/close of one file (the log must
 *                   stay bounded); prints "ok N loops"
 *   heal fill MIB   writes a file 1 MiB at a time, up to MIB MiB or until
 *                   the memory runs out, then opens it 50 times; prints
 *                   "wrote N MiB" and "done"
 *   heal process [ROUNDS]  the same for process's state: signal handlers,
 *                   ignored, blocked and pending signals, the alternate
 *                   stack, resource limits, a System V semaphore and message
 *                   queue; prints "ok ROUNDS process rounds"
 *   heal net [ROUNDS]  the same for net's state: AF_UNIX stream and
 *                   datagram pairs with unread bytes and a shut-down end,
 *                   a socket option, an eventfd counter, an armed timerfd
 *                   and an epoll set (level- and edge-triggered entries);
 *                   prints "ok ROUNDS net rounds"
 *   heal netloop N  N rounds of socketpair, eventfd, epoll_create1 with
 *                   both added, a write and a read, then all closed (net's
 *                   log must stay bounded); prints "ok N net loops"
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/msg.h>
#include <sys/resource.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/sem.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/stat.h>
#include <unistd.h>

static int fail(const char *what, int i) {
    printf("FAIL %s in round %d (errno %d)\n", what, i, errno);
    return 1;
}

/* `rw N`: one open, then only write, one lseek and read: after the open
 * every call that reaches vfs comes through net's read and write (which
 * serve sockets and hand other descriptors to vfs), whose gate is not a
 * rebootable component's: a fault or hang injected there is vfs's. */
static int rw(int n) {
    int fd = open("/tmp/rw", O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return fail("rw open", 0);
    char line[16], got[16];
    for (int i = 0; i < n; i++) {
        int len = snprintf(line, sizeof line, "%07d\n", i);
        if (write(fd, line, len) != len)
            return fail("rw write", i);
    }
    if (lseek(fd, 0, SEEK_SET) != 0)
        return fail("rw lseek", n);
    for (int i = 0; i < n; i++) {
        int len = snprintf(line, sizeof line, "%07d\n", i);
        if (read(fd, got, len) != len || memcmp(got, line, len))
            return fail("rw read", i);
    }
    if (read(fd, got, 1) != 0)
        return fail("rw end of file", n);
    printf("ok %d rw\n", n);
    return 0;
}

static int loop(long n) {
    char buf[64];
    for (long i = 0; i < n; i++) {
        int fd = open("/tmp/loop", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0)
            return fail("open", (int)i);
        int len = snprintf(buf, sizeof buf, "iteration %ld\n", i);
        if (write(fd, buf, len) != len)
            return fail("write", (int)i);
        if (close(fd) != 0)
            return fail("close", (int)i);
    }
    int fd = open("/tmp/loop", O_RDONLY);
    int len = snprintf(buf, sizeof buf, "iteration %ld\n", n - 1);
    char got[64] = {0};
    if (fd < 0 || read(fd, got, sizeof got) != len || memcmp(got, buf, len))
        return fail("final contents", (int)n);
    printf("ok %ld loops\n", n);
    return 0;
}

static volatile int usr1, usr2;
static void on_usr1(int sig) { usr1 += sig == SIGUSR1; }
static void on_usr2(int sig) { usr2 += sig == SIGUSR2; }

struct msg {
    long type;
    char text[8];
};

static int process(int rounds) {
    static char alt[16384];
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    struct rlimit rl = {100, 4096};
    if (sigaction(SIGUSR1, &sa, 0) || signal(SIGTERM, SIG_IGN) == SIG_ERR || sigprocmask(SIG_BLOCK, &set, 0) || raise(SIGUSR2) ||
        setrlimit(RLIMIT_NOFILE, &rl) || sigaltstack(&ss, 0))
        return fail("setup signals", 0);
    int sem = semget(IPC_PRIVATE, 1, 0600), q = msgget(IPC_PRIVATE, 0600);
    struct msg m = {7, "kept"};
    if (sem < 0 || q < 0 || semctl(sem, 0, SETVAL, 3) || msgsnd(q, &m, sizeof m.text, 0))
        return fail("setup ipc", 0);
    for (int i = 0; i < rounds; i++) {
        if (raise(SIGUSR1) || usr1 != i + 1)
            return fail("the SIGUSR1 handler", i);
        struct sigaction old;
        if (sigaction(SIGTERM, 0, &old) || old.sa_handler != SIG_IGN || sigaction(SIGUSR1, 0, &old) || old.sa_handler != on_usr1)
            return fail("dispositions", i);
        sigset_t cur, pend;
        if (sigprocmask(SIG_BLOCK, 0, &cur) || !sigismember(&cur, SIGUSR2) || sigpending(&pend) || !sigismember(&pend, SIGUSR2) || usr2)
            return fail("blocked and pending SIGUSR2", i);
        stack_t got;
        if (sigaltstack(0, &got) || got.ss_sp != alt || got.ss_size != sizeof alt)
            return fail("the alternate stack", i);
        if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur != 100 || rl.rlim_max != 4096)
            return fail("RLIMIT_NOFILE", i);
        struct sembuf up = {0, 1, 0};
        if (semop(sem, &up, 1) || semctl(sem, 0, GETVAL) != 4 + i)
            return fail("the semaphore", i);
        struct msg in = {0};
        m.type = 8 + i;
        if (msgsnd(q, &m, sizeof m.text, 0) || msgrcv(q, &in, sizeof in.text, 8 + i, 0) != sizeof in.text || strcmp(in.text, "kept"))
            return fail("the message queue's round trip", i);
        struct msqid_ds ds;
        if (msgctl(q, IPC_STAT, &ds) || ds.msg_qnum != 1)
            return fail("the queued message", i);
    }
    struct msg in = {0};
    if (msgrcv(q, &in, sizeof in.text, 7, 0) != sizeof in.text || strcmp(in.text, "kept"))
        return fail("the first message", rounds);
    signal(SIGUSR2, on_usr2);
    if (sigprocmask(SIG_UNBLOCK, &set, 0) || usr2 != 1)
        return fail("SIGUSR2 delivered once unblocked", rounds);
    printf("ok %d process rounds\n", rounds);
    return 0;
}

static int fill(int max) {
    static char buf[1 << 20];
    int fd = open("/tmp/big", O_WRONLY | O_CREAT, 0644);
    if (fd < 0)
        return fail("open", 0);
    memset(buf, 'x', sizeof buf);
    int mb = 0;
    while (mb < max && write(fd, buf, sizeof buf) == sizeof buf)
        mb++;
    close(fd);
    printf("wrote %d MiB\n", mb);
    fflush(stdout);
    for (int i = 0; i < 50; i++)
        close(open("/tmp/big", O_RDONLY));
    printf("done\n");
    return 0;
}

/* `net N`: net's objects, each changed and checked every round. */
static int net(int rounds) {
    int sv[2], keep[2], shut[2], dg[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) || socketpair(AF_UNIX, SOCK_STREAM, 0, keep) ||
        socketpair(AF_UNIX, SOCK_STREAM, 0, shut) || socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK, 0, dg))
        return fail("socketpair", 0);
    int ev = eventfd(0, EFD_NONBLOCK);
    int tf = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ev < 0 || tf < 0 || ep < 0)
        return fail("eventfd/timerfd/epoll", 0);
    /* Far in the future: nothing expires during the run. */
    struct itimerspec its = {{100, 0}, {1000, 0}};
    int rcv = 10000;
    if (timerfd_settime(tf, 0, &its, 0) || setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv))
        return fail("settime/setsockopt", 0);
    if (write(keep[0], "unread", 6) != 6 || shutdown(shut[0], SHUT_WR) || send(dg[0], "dgram", 5, 0) != 5)
        return fail("setup sockets", 0);
    struct epoll_event e = {.events = EPOLLIN, .data.u64 = 1};
    struct epoll_event f = {.events = EPOLLIN | EPOLLET, .data.u64 = 2};
    struct epoll_event g = {.events = EPOLLIN, .data.u64 = 3};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, sv[1], &e) || epoll_ctl(ep, EPOLL_CTL_ADD, ev, &f) || epoll_ctl(ep, EPOLL_CTL_ADD, tf, &g))
        return fail("epoll_ctl", 0);
    for (int i = 0; i < rounds; i++) {
        char msg[8], got[16];
        int len = snprintf(msg, sizeof msg, "%05d", i);
        uint64_t v = i + 1, r = 0;
        if (write(sv[0], msg, len) != len || write(ev, &v, 8) != 8)
            return fail("write", i);
        /* Both reported (the timer is not due); the eventfd, edge-
         * triggered, only once. */
        struct epoll_event out[4];
        int n = epoll_wait(ep, out, 4, 0);
        uint64_t seen = 0;
        for (int k = 0; k < n; k++)
            seen |= 1u << out[k].data.u64;
        if (n != 2 || seen != 6)
            return fail("epoll_wait", i);
        n = epoll_wait(ep, out, 4, 0);
        if (n != 1 || out[0].data.u64 != 1)
            return fail("epoll_wait edge-triggered", i);
        if (read(sv[1], got, sizeof got) != len || memcmp(got, msg, len))
            return fail("stream bytes", i);
        if (read(sv[1], got, sizeof got) != -1 || errno != EAGAIN)
            return fail("stream drained", i);
        if (read(ev, &r, 8) != 8 || r != v)
            return fail("eventfd counter", i);
        if (epoll_wait(ep, out, 4, 0) != 0)
            return fail("epoll_wait empty", i);
        /* What stays: unread bytes, a queued datagram, end of file after
         * the peer's shutdown, the option, the timer's setting. */
        if (recv(keep[1], got, sizeof got, MSG_PEEK) != 6 || memcmp(got, "unread", 6))
            return fail("unread bytes", i);
        if (recv(dg[1], got, sizeof got, MSG_PEEK) != 5 || memcmp(got, "dgram", 5))
            return fail("queued datagram", i);
        if (read(shut[1], got, sizeof got) != 0)
            return fail("end of file after shutdown", i);
        int val = 0;
        socklen_t vl = sizeof val;
        if (getsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &val, &vl) || val != 2 * rcv)
            return fail("SO_RCVBUF", i);
        struct itimerspec cur;
        if (timerfd_gettime(tf, &cur) || cur.it_interval.tv_sec != 100 || cur.it_value.tv_sec < 900)
            return fail("timerfd setting", i);
    }
    printf("ok %d net rounds\n", rounds);
    return 0;
}

/* `netloop N`: sessions of net's objects opened and closed. */
static int netloop(long n) {
    for (long i = 0; i < n; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
            return fail("socketpair", (int)i);
        int ev = eventfd(1, 0), ep = epoll_create1(0);
        struct epoll_event e = {.events = EPOLLIN, .data.u64 = 1};
        if (ev < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, sv[1], &e) || epoll_ctl(ep, EPOLL_CTL_ADD, ev, &e))
            return fail("eventfd/epoll", (int)i);
        char b[8];
        struct epoll_event out[2];
        if (write(sv[0], "ping", 4) != 4 || epoll_wait(ep, out, 2, 0) != 2 || read(sv[1], b, sizeof b) != 4)
            return fail("write/epoll_wait/read", (int)i);
        close(ep);
        close(ev);
        close(sv[0]);
        close(sv[1]);
    }
    printf("ok %ld net loops\n", n);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[1], "fill"))
        return fill(atoi(argv[2]));
    if (argc > 2 && !strcmp(argv[1], "rw"))
        return rw(atoi(argv[2]));
    if (argc > 2 && !strcmp(argv[1], "loop"))
        return loop(atol(argv[2]));
    if (argc > 1 && !strcmp(argv[1], "process"))
        return process(argc > 2 ? atoi(argv[2]) : 300);
    if (argc > 2 && !strcmp(argv[1], "netloop"))
        return netloop(atol(argv[2]));
    if (argc > 1 && !strcmp(argv[1], "net"))
        return net(argc > 2 ? atoi(argv[2]) : 300);
    int rounds = argc > 1 ? atoi(argv[1]) : 300;
    umask(027);
    if (mkdir("/tmp/w", 0755) || mkdir("/tmp/w/d1", 0700) || chdir("/tmp/w"))
        return fail("setup dirs", 0);
    /* a: read-write, offset moves; b: dup of a (shares the offset) with
     * FD_CLOEXEC; c: O_APPEND log; u: unlinked but open; p: a pipe. */
    int a = open("data", O_RDWR | O_CREAT, 0666);
    int b = dup(a);
    int c = open("/tmp/w/log", O_WRONLY | O_CREAT | O_APPEND, 0600);
    int u = open("gone", O_RDWR | O_CREAT | O_EXCL, 0600);
    int p[2];
    if (a < 0 || b < 0 || c < 0 || u < 0 || pipe(p) || fcntl(b, F_SETFD, FD_CLOEXEC) || fcntl(c, F_SETFL, O_APPEND | O_NONBLOCK))
        return fail("setup fds", 0);
    if (write(u, "still here", 10) != 10 || unlink("gone") || write(p[1], "queued", 6) != 6)
        return fail("setup unlinked/pipe", 0);
    if (rename("d1", "d2"))
        return fail("rename", 0);
    char line[32], got[64];
    long off = 0, logged = 0;
    for (int i = 0; i < rounds; i++) {
        /* One state change per round on each kind of session. */
        int len = snprintf(line, sizeof line, "round %05d\n", i);
        if (write(i % 2 ? a : b, line, len) != len)
            return fail("write", i);
        off += len;
        if (write(c, "x", 1) != 1)
            return fail("append", i);
        logged++;
        /* Checks: the shared offset, the flags, the contents. */
        if (lseek(a, 0, SEEK_CUR) != off || lseek(b, 0, SEEK_CUR) != off)
            return fail("offset", i);
        if (fcntl(b, F_GETFD) != FD_CLOEXEC || fcntl(a, F_GETFD) != 0)
            return fail("cloexec", i);
        if ((fcntl(c, F_GETFL) & (O_APPEND | O_NONBLOCK | O_ACCMODE)) != (O_APPEND | O_NONBLOCK | O_WRONLY))
            return fail("status flags", i);
        if (pread(a, got, len, off - len) != len || memcmp(got, line, len))
            return fail("contents of the last write", i);
        if (pread(a, got, 12, 0) != 12 || memcmp(got, "round 00000\n", 12))
            return fail("contents of the first write", i);
        struct stat st;
        if (fstat(c, &st) || st.st_size != logged || (st.st_mode & 0777) != 0600)
            return fail("size and mode of the log", i);
        if (fstat(u, &st) || st.st_nlink != 0 || st.st_size != 10 || pread(u, got, 10, 0) != 10 || memcmp(got, "still here", 10))
            return fail("the unlinked file", i);
        if (stat("d2", &st) || !S_ISDIR(st.st_mode) || (st.st_mode & 0777) != 0700 || access("d1", F_OK) == 0)
            return fail("the renamed directory", i);
        if (!getcwd(got, sizeof got) || strcmp(got, "/tmp/w"))
            return fail("the working directory", i);
        mode_t m = umask(027);
        if (m != 027)
            return fail("the umask", i);
        /* A short-lived session each round: opened, written, closed. */
        int t = open("tmpfile", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (t < 0 || write(t, line, len) != len || close(t))
            return fail("a short session", i);
    }
    if (read(p[0], got, 6) != 6 || memcmp(got, "queued", 6))
        return fail("the pipe's bytes", rounds);
    printf("ok %d rounds\n", rounds);
    return 0;
}
