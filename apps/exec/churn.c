/* What a long-running program does many times over, which must not wear
 * anything out: "longjmp" leaves 10,000 SIGSEGV handlers with siglongjmp
 * (half of them on an alternate stack); "threads" creates and joins
 * 10,000 threads, four at a time. Prints what it did; a failure prints
 * why and exits 1. Compared with a native run (gcc -static). */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 10000

static sigjmp_buf jb;
static volatile int faults;

static void on_segv(int sig) {
    (void)sig;
    faults++;
    siglongjmp(jb, 1);
}

static int longjmps(void) {
    static char alt[64 * 1024];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
    sigaltstack(&ss, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_segv;
    for (int i = 0; i < ROUNDS; i++) {
        sa.sa_flags = i % 2 ? SA_ONSTACK : 0;
        sigaction(SIGSEGV, &sa, 0);
        if (!sigsetjmp(jb, 1))
            *(volatile int *)(long)(16 + i % 64) = i;
    }
    printf("%d siglongjmps out of SIGSEGV handlers\n", faults);
    return faults == ROUNDS ? 0 : 1;
}

static void *work(void *arg) {
    return (void *)((long)arg * 2);
}

static int threads(void) {
    long sum = 0;
    for (int i = 0; i < ROUNDS; i += 4) {
        pthread_t t[4];
        for (int k = 0; k < 4; k++) {
            int e = pthread_create(&t[k], 0, work, (void *)(long)(i + k));
            if (e) {
                printf("pthread_create of thread %d: %s\n", i + k, strerror(e));
                return 1;
            }
        }
        for (int k = 0; k < 4; k++) {
            void *r;
            pthread_join(t[k], &r);
            sum += (long)r;
        }
    }
    printf("%d threads created and joined, sum %ld\n", ROUNDS, sum);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "longjmp"))
        return longjmps();
    if (argc == 2 && !strcmp(argv[1], "threads"))
        return threads();
    fprintf(stderr, "usage: churn longjmp|threads\n");
    return 2;
}
