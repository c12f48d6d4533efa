/* Component recovery: many calls into the stateless kernel
 * components (user, sysinfo, time) and process, each result checked, so
 * that a component rebooted under the program (shoal run --inject
 * COMPONENT:panic@N) shows as a wrong or missing answer if anything was
 * lost. getrandom's bytes must never repeat (a rebooted generator that
 * started again from its seed would repeat them).
 *   recover [ROUNDS [SECONDS]]  the loop (default 200 rounds), taking at
 *                      least SECONDS (sleeping between rounds); prints
 *                      "ok ROUNDS rounds"
 *   recover crash      a fault in the application itself (a null write)
 *   recover spin N     the application computes alone for N million
 *                      iterations without a system call (long, but not a
 *                      component's hang); prints "spun N"
 *   recover threads N  a second thread spins (so the preemption tick runs)
 *                      while main makes N rounds of clock_gettime and
 *                      getuid calls, checking each; prints "threads ok N"
 *   recover ready N    prints "ready" (flushed) and then makes N
 *                      clock_gettime calls; prints "clock ok N" (with
 *                      --watchdog off --inject time:hang@K, K <= N, the
 *                      kernel spins in the K-th call, after "ready")
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/sysinfo.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROUNDS 1000

static unsigned char seen[MAX_ROUNDS][16];

static volatile int stop_spinner;
static volatile unsigned long spins;

static void *spinner(void *arg) {
    (void)arg;
    while (!stop_spinner)
        spins++;
    return 0;
}

static int fail(const char *what, int i) {
    printf("FAIL %s in round %d\n", what, i);
    return 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "crash")) {
        printf("uid %d\n", (int)getuid());
        fflush(stdout);
        volatile int *p = (int *)0;
        *p = 1;
        printf("survived\n");
        return 0;
    }
    if (argc > 2 && !strcmp(argv[1], "spin")) {
        long n = atol(argv[2]);
        volatile unsigned long x = 1;
        for (long i = 0; i < n * 1000000; i++)
            x = x * 6364136223846793005ul + 1442695040888963407ul;
        printf("spun %ld\n", n);
        return 0;
    }
    if (argc > 2 && !strcmp(argv[1], "ready")) {
        int n = atoi(argv[2]);
        printf("ready\n");
        fflush(stdout);
        for (int i = 0; i < n; i++) {
            struct timespec ts;
            if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
                return fail("clock_gettime", i);
        }
        printf("clock ok %d\n", n);
        return 0;
    }
    if (argc > 2 && !strcmp(argv[1], "threads")) {
        int n = atoi(argv[2]);
        pthread_t t;
        if (pthread_create(&t, 0, spinner, 0) != 0)
            return fail("pthread_create", 0);
        struct timespec last = {0, 0};
        for (int i = 0; i < n; i++) {
            struct timespec ts;
            if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
                return fail("clock_gettime", i);
            if (ts.tv_sec < last.tv_sec || (ts.tv_sec == last.tv_sec && ts.tv_nsec < last.tv_nsec))
                return fail("monotonic", i);
            last = ts;
            if (getuid() != 0)
                return fail("getuid", i);
        }
        stop_spinner = 1;
        pthread_join(t, 0);
        printf("threads ok %d\n", n);
        return 0;
    }
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    if (rounds < 1 || rounds > MAX_ROUNDS)
        return fail("rounds", 0);
    double secs = argc > 2 ? atof(argv[2]) : 0;
    pid_t pid = getpid();
    struct timespec last = {0, 0}, start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int i = 0; i < rounds; i++) {
        if (secs > 0) {
            /* Round i starts no earlier than i/rounds of SECONDS. */
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            double due = secs * i / rounds, at = (now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9;
            if (at < due) {
                struct timespec d = {0, (long)((due - at) * 1e9)};
                nanosleep(&d, 0);
            }
        }
        if (getuid() != 0 || geteuid() != 0 || getgid() != 0 || getegid() != 0)
            return fail("ids", i);
        if (getpid() != pid)
            return fail("getpid", i);
        struct utsname u;
        if (uname(&u) != 0 || strcmp(u.sysname, "Linux") || strcmp(u.machine, "x86_64"))
            return fail("uname", i);
        struct timespec t, r;
        if (clock_gettime(CLOCK_MONOTONIC, &t) != 0)
            return fail("clock_gettime", i);
        if (t.tv_sec < last.tv_sec || (t.tv_sec == last.tv_sec && t.tv_nsec < last.tv_nsec))
            return fail("monotonic", i);
        last = t;
        if (clock_gettime(CLOCK_REALTIME, &r) != 0 || r.tv_sec < 1600000000)
            return fail("realtime", i);
        struct timeval tv;
        if (gettimeofday(&tv, 0) != 0 || tv.tv_sec < r.tv_sec || time(0) < r.tv_sec)
            return fail("gettimeofday", i);
        struct sysinfo si;
        if (sysinfo(&si) != 0 || si.totalram == 0)
            return fail("sysinfo", i);
        if (getrandom(seen[i], 16, 0) != 16)
            return fail("getrandom", i);
        for (int j = 0; j < i; j++)
            if (!memcmp(seen[i], seen[j], 16))
                return fail("getrandom repeated earlier bytes", i);
    }
    if (secs > 0) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < secs) {
            struct timespec d = {0, 1000000};
            nanosleep(&d, 0);
            clock_gettime(CLOCK_MONOTONIC, &now);
        }
    }
    printf("ok %d rounds\n", rounds);
    return 0;
}
