/* signalfd and signalfd4: a descriptor that reads blocked pending signals
 * as signalfd_siginfo records (a queued real-time signal once per send,
 * with its value), readable for poll and epoll, non-blocking with
 * SFD_NONBLOCK (EAGAIN), a blocking read woken by a signal another
 * thread sends, a new mask for an existing descriptor, and the errors
 * Linux gives. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_t main_thread;
static void *sender(void *arg) {
    (void)arg;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, 0);
    pthread_kill(main_thread, SIGUSR2);
    return 0;
}

int main(void) {
    int rt = SIGRTMIN + 3;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    sigaddset(&set, rt);
    sigprocmask(SIG_BLOCK, &set, 0);
    int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    printf("signalfd: %s, cloexec %d, nonblock %d\n", fd >= 0 ? "ok" : strerror(errno), (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0,
           (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
    struct signalfd_siginfo si[4];
    ssize_t n = read(fd, si, sizeof si);
    printf("read with nothing pending: %zd %s\n", n, n < 0 ? strerror(errno) : "");
    struct pollfd p = {.fd = fd, .events = POLLIN};
    printf("poll before: %d\n", poll(&p, 1, 0));
    for (int i = 0; i < 3; i++) {
        union sigval v = {.sival_int = 100 + i};
        sigqueue(getpid(), rt, v);
    }
    kill(getpid(), SIGUSR1);
    kill(getpid(), SIGUSR1);
    int r = poll(&p, 1, 0);
    printf("poll after: %d revents %d\n", r, p.revents);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = 7}, out;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    r = epoll_wait(ep, &out, 1, 0);
    printf("epoll: %d data %u\n", r, out.data.u32);
    n = read(fd, si, 100);
    printf("short buffer: %zd %s\n", n, strerror(errno));
    n = read(fd, si, sizeof si);
    printf("read: %zd bytes\n", n);
    for (int i = 0; i < n / (ssize_t)sizeof si[0]; i++)
        printf("  signo %s code %d pid ok %d int %d\n", si[i].ssi_signo == SIGUSR1 ? "SIGUSR1" : si[i].ssi_signo == (unsigned)rt ? "RT+3" : "other",
               si[i].ssi_code, si[i].ssi_pid == (unsigned)getpid(), si[i].ssi_int);
    n = read(fd, si, sizeof si);
    printf("read again: %zd bytes, int %d\n", n, n > 0 ? si[0].ssi_int : -1);
    printf("epoll drained: %d\n", epoll_wait(ep, &out, 1, 0));
    sigset_t none;
    sigpending(&none);
    printf("nothing pending: %d\n", !sigismember(&none, rt) && !sigismember(&none, SIGUSR1));

    /* A blocking signalfd woken by another thread's signal. */
    int bfd = signalfd(-1, &set, 0);
    main_thread = pthread_self();
    pthread_t t;
    pthread_create(&t, 0, sender, 0);
    n = read(bfd, si, sizeof si);
    printf("blocking read: %zd bytes, %s, code SI_TKILL %d\n", n, si[0].ssi_signo == SIGUSR2 ? "SIGUSR2" : "other", si[0].ssi_code == SI_TKILL);
    pthread_join(t, 0);

    /* A new mask: SIGUSR1 only. */
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, SIGUSR1);
    printf("new mask: %d\n", signalfd(fd, &one, 0) == fd);
    raise(SIGUSR2);
    printf("SIGUSR2 no longer read: %zd\n", read(fd, si, sizeof si));
    struct timespec z = {0, 0};
    printf("still pending for sigtimedwait: %d\n", sigtimedwait(&set, 0, &z) == SIGUSR2);
    errno = 0;
    r = signalfd(ep, &one, 0);
    printf("not a signalfd: %d %s\n", r, strerror(errno));
    r = (int)syscall(289, -1, &one, 4, 0);
    printf("bad size: %d %s\n", r, strerror(errno));
    r = signalfd(-1, &one, 1);
    printf("bad flags: %d %s\n", r, strerror(errno));
    r = signalfd(99, &one, 0);
    printf("closed fd: %d %s\n", r, strerror(errno));
    return 0;
}
