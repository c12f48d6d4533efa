/* CPU faults delivered as signals to the program's own handlers: nil and
 * near-nil stores (SIGSEGV, si_addr the faulting address), a division by
 * zero (SIGFPE), int3 (SIGTRAP), left with siglongjmp; ud2 (SIGILL),
 * resumed by moving rip past it in the context; then a fault with the
 * default action, which kills. Built with gcc -static and with shoal cc;
 * the output is compared with a native run. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>

static sigjmp_buf jb;
static volatile unsigned long seen_addr, seen_trapno, seen_err;
static volatile int seen_sig, seen_code;

static void note(int sig, siginfo_t *si, void *ctx) {
    ucontext_t *uc = ctx;
    seen_sig = sig;
    seen_code = si->si_code;
    seen_addr = (unsigned long)si->si_addr;
    seen_trapno = (unsigned long)uc->uc_mcontext.gregs[REG_TRAPNO];
    seen_err = (unsigned long)uc->uc_mcontext.gregs[REG_ERR];
}

static void on_fault(int sig, siginfo_t *si, void *ctx) {
    note(sig, si, ctx);
    siglongjmp(jb, 1);
}

static void on_ill(int sig, siginfo_t *si, void *ctx) {
    ucontext_t *uc = ctx;
    note(sig, si, ctx);
    if (seen_addr != (unsigned long)uc->uc_mcontext.gregs[REG_RIP])
        printf("SIGILL si_addr is not rip\n");
    uc->uc_mcontext.gregs[REG_RIP] += 2; /* past the ud2 */
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, 0);
    sigaction(SIGFPE, &sa, 0);
    sigaction(SIGTRAP, &sa, 0);
    for (int i = 0; i < 3; i++) {
        if (sigsetjmp(jb, 1) == 0) {
            *(volatile int *)(uintptr_t)(i * 8) = 1;
            printf("no fault\n");
        } else {
            printf("SIGSEGV %d code %d addr %#lx trapno %lu err %lu\n", seen_sig, seen_code, seen_addr, seen_trapno, seen_err);
        }
    }
    if (sigsetjmp(jb, 1) == 0) {
        volatile int z = 0;
        volatile int r = 7 / z;
        printf("no fault %d\n", r);
    } else {
        printf("SIGFPE %d code %d trapno %lu\n", seen_sig, seen_code, seen_trapno);
    }
    if (sigsetjmp(jb, 1) == 0) {
        __asm__ volatile("int3");
        printf("no trap\n");
    } else {
        printf("SIGTRAP %d trapno %lu\n", seen_sig, seen_trapno);
    }
    sa.sa_sigaction = on_ill;
    sigaction(SIGILL, &sa, 0);
    long x = 41;
    __asm__ volatile("ud2" : "+r"(x) : : "memory");
    x++;
    printf("SIGILL %d code %d trapno %lu resumed x=%ld\n", seen_sig, seen_code, seen_trapno, x);
    signal(SIGSEGV, SIG_DFL);
    fflush(stdout);
    *(volatile int *)0 = 2;
    printf("unreachable\n");
    return 0;
}
