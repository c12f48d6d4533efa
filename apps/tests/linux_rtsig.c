/* Real-time signals are queued as on Linux: a blocked SIGRTMIN+1 sent 100
 * times (sigqueue, kill, raise) runs its handler 100 times once
 * unblocked, each with its own siginfo (si_value, si_code, si_pid), in
 * the order sent; a standard signal sent several times while blocked
 * runs once. sigtimedwait, sigwaitinfo and sigwait take queued signals
 * without a handler, wait for one a thread sends, time out (EAGAIN) and
 * poll with a zero timeout. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N 100
static int got_rt, got_usr1, bad_order, bad_pid;
static int codes[N], values[N];

static void on_rt(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    if (got_rt < N) {
        codes[got_rt] = si->si_code;
        values[got_rt] = si->si_value.sival_int;
    }
    if (si->si_signo != sig) bad_order++;
    if (si->si_pid != getpid()) bad_pid++;
    got_rt++;
}

static void on_usr1(int sig, siginfo_t *si, void *uc) {
    (void)sig; (void)si; (void)uc;
    got_usr1++;
}

static pthread_t main_thread;

static void *sender(void *arg) {
    (void)arg;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, 0);
    pthread_kill(main_thread, SIGRTMIN + 2);
    return 0;
}

int main(void) {
    int rt = SIGRTMIN + 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_rt;
    sa.sa_flags = SA_SIGINFO;
    sigaction(rt, &sa, 0);
    sa.sa_sigaction = on_usr1;
    sigaction(SIGUSR1, &sa, 0);

    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, rt);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, &old);
    int refused = 0;
    for (int i = 0; i < 90; i++) {
        union sigval v = {.sival_int = i};
        if (sigqueue(getpid(), rt, v) != 0) refused++;
    }
    for (int i = 0; i < 5; i++) kill(getpid(), rt);
    for (int i = 0; i < 5; i++) raise(rt);
    for (int i = 0; i < 3; i++) kill(getpid(), SIGUSR1);
    sigset_t pend;
    sigpending(&pend);
    printf("refused %d; pending rt %d usr1 %d; handled so far %d\n", refused, sigismember(&pend, rt), sigismember(&pend, SIGUSR1), got_rt);
    sigprocmask(SIG_SETMASK, &old, 0);
    printf("after unblocking: rt handler ran %d times, SIGUSR1 %d times\n", got_rt, got_usr1);
    int in_order = 1, queued_codes = 1;
    /* Linux takes a thread's own signals (raise) before the process's
     * (sigqueue, kill), each kind in the order sent. */
    for (int i = 0; i < 90; i++) {
        if (values[5 + i] != i) in_order = 0;
        if (codes[5 + i] != SI_QUEUE) queued_codes = 0;
    }
    printf("raise first, SI_TKILL %d; sigqueue values in order %d, SI_QUEUE %d; kill last, SI_USER %d; signo ok %d; si_pid ok %d\n",
           codes[0] == SI_TKILL && codes[4] == SI_TKILL, in_order, queued_codes, codes[95] == SI_USER && codes[99] == SI_USER, bad_order == 0, bad_pid == 0);
    sigpending(&pend);
    printf("pending afterwards: %d\n", sigismember(&pend, rt));

    /* sigtimedwait and friends */
    int w = SIGRTMIN + 2;
    sigemptyset(&set);
    sigaddset(&set, w);
    sigprocmask(SIG_BLOCK, &set, 0);
    struct timespec zero = {0, 0}, short_wait = {0, 30 * 1000 * 1000};
    siginfo_t si;
    int r = sigtimedwait(&set, &si, &zero);
    printf("poll with nothing pending: %d %s\n", r, r < 0 ? strerror(errno) : "");
    r = sigtimedwait(&set, &si, &short_wait);
    printf("30 ms with nothing: %d %s\n", r, r < 0 ? strerror(errno) : "");
    for (int i = 0; i < 3; i++) {
        union sigval v = {.sival_int = 40 + i};
        sigqueue(getpid(), w, v);
    }
    for (int i = 0; i < 3; i++) {
        memset(&si, 0, sizeof si);
        r = sigtimedwait(&set, &si, &zero);
        printf("sigtimedwait: %s, value %d, SI_QUEUE %d, pid ok %d\n", r == w ? "SIGRTMIN+2" : "other", si.si_value.sival_int, si.si_code == SI_QUEUE, si.si_pid == getpid());
    }
    main_thread = pthread_self();
    pthread_t t;
    pthread_create(&t, 0, sender, 0);
    memset(&si, 0, sizeof si);
    r = sigwaitinfo(&set, &si);
    printf("sigwaitinfo from a thread: %s, SI_TKILL %d\n", r == w ? "SIGRTMIN+2" : "other", si.si_code == SI_TKILL);
    pthread_join(t, 0);
    raise(w);
    int sig = 0;
    r = sigwait(&set, &sig);
    printf("sigwait: %d %s\n", r, sig == w ? "SIGRTMIN+2" : "other");
    sigpending(&pend);
    printf("nothing left: %d\n", !sigismember(&pend, w));
    sigset_t bad;
    sigemptyset(&bad);
    sigaddset(&bad, SIGKILL);
    r = sigtimedwait(&bad, &si, &zero);
    printf("waiting for SIGKILL only: %d %s\n", r, r < 0 ? strerror(errno) : "");
    return 0;
}
