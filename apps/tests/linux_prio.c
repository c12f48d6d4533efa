/* Scheduling priorities and process times as Linux answers them:
 * sched_get_priority_max/min per policy, getpriority/setpriority (run as
 * root: the nice value goes both ways, clamped to -20..19) and their
 * errors, times() with and without a buffer. */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/times.h>
#include <time.h>
#include <unistd.h>

/* errno is cleared before each call: getpriority may return -1 as a value. */
#define prio(what, call)                                          \
    do {                                                          \
        errno = 0;                                                \
        int r_ = (call);                                          \
        printf("%s: %d %s\n", what, r_, errno ? strerror(errno) : "-"); \
    } while (0)

int main(void) {
    int policies[] = {SCHED_OTHER, SCHED_FIFO, SCHED_RR, SCHED_BATCH, SCHED_IDLE, 6, 4, -1};
    for (unsigned i = 0; i < sizeof policies / sizeof *policies; i++) {
        errno = 0;
        int mx = sched_get_priority_max(policies[i]);
        int e1 = errno;
        errno = 0;
        int mn = sched_get_priority_min(policies[i]);
        printf("policy %d: max %d (%s) min %d (%s)\n", policies[i], mx, strerror(e1), mn, strerror(errno));
    }
    prio("set 5", setpriority(PRIO_PROCESS, 0, 5));
    prio("get", getpriority(PRIO_PROCESS, 0));
    prio("set 100", setpriority(PRIO_PROCESS, 0, 100));
    prio("get own pid", getpriority(PRIO_PROCESS, getpid()));
    prio("set -3 (root)", setpriority(PRIO_PROCESS, 0, -3));
    /* The group's value depends on who started this process: only no error. */
    errno = 0;
    getpriority(PRIO_PGRP, 0);
    printf("get pgrp: %s\n", errno ? strerror(errno) : "-");
    prio("set -100 (root)", setpriority(PRIO_PROCESS, 0, -100));
    prio("get", getpriority(PRIO_PROCESS, 0));
    prio("set 0", setpriority(PRIO_PROCESS, 0, 0));
    prio("get which 3", getpriority(3, 0));
    prio("set which 3", setpriority(3, 0, 0));
    prio("get no such pid", getpriority(PRIO_PROCESS, 999999));
    prio("set no such pid", setpriority(PRIO_PROCESS, 999999, 0));
    prio("get no such user", getpriority(PRIO_USER, 54321));

    struct tms t;
    clock_t a = times(NULL), b = times(&t);
    printf("times: %s, children %ld %ld\n", a != (clock_t)-1 && b >= a ? "ok" : "bad", (long)t.tms_cutime, (long)t.tms_cstime);
    /* Spin until the process has used 0.15 s of CPU (10 s at most). */
    time_t end = time(NULL) + 10;
    do {
        for (volatile int i = 0; i < 1000000; i++) {
        }
        times(&t);
    } while (t.tms_utime + t.tms_stime < 15 && time(NULL) < end);
    printf("cpu ticks >= 15: %s\n", t.tms_utime + t.tms_stime >= 15 ? "yes" : "no");
    printf("ticks per second: %ld\n", sysconf(_SC_CLK_TCK));
    errno = 0;
    long r = (long)times((struct tms *)8);
    printf("times bad pointer: %ld %s\n", r, strerror(errno));
    return 0;
}
