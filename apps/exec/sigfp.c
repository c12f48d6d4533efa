/* The FPU/SSE state of a signal frame: a handler sees the interrupted
 * xmm registers and MXCSR in uc_mcontext.fpregs, and what it writes there
 * is what the thread resumes with after rt_sigreturn, as on Linux. Two
 * ways in: a fault (ud2, SIGILL, resumed past it) and a timer signal
 * (SIGALRM) that interrupts a loop spinning on xmm15 until the handler
 * sets it. Built with gcc -static and with shoal cc; the output is
 * compared with a native run. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <ucontext.h>

static volatile uint64_t seen;
static volatile unsigned seen_round;

static uint64_t xmm_lo(ucontext_t *uc, int i) {
    uint64_t v;
    memcpy(&v, uc->uc_mcontext.fpregs->_xmm[i].element, 8);
    return v;
}

static void set_xmm_lo(ucontext_t *uc, int i, uint64_t v) {
    memcpy(uc->uc_mcontext.fpregs->_xmm[i].element, &v, 8);
}

static void on_ill(int sig, siginfo_t *si, void *ctx) {
    ucontext_t *uc = ctx;
    (void)sig, (void)si;
    seen = xmm_lo(uc, 0);
    seen_round = (uc->uc_mcontext.fpregs->mxcsr >> 13) & 3;
    set_xmm_lo(uc, 0, 0x1122334455667788ULL);
    /* Round toward zero from here on. */
    uc->uc_mcontext.fpregs->mxcsr |= 3u << 13;
    uc->uc_mcontext.gregs[REG_RIP] += 2; /* past the ud2 */
}

static void on_alarm(int sig, siginfo_t *si, void *ctx) {
    ucontext_t *uc = ctx;
    (void)sig, (void)si;
    seen = xmm_lo(uc, 14);
    set_xmm_lo(uc, 15, 1);
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_flags = SA_SIGINFO;
    sa.sa_sigaction = on_ill;
    sigaction(SIGILL, &sa, 0);
    uint64_t in = 0xdeadbeefcafef00dULL, out;
    __asm__ volatile("movq %1, %%xmm0\n\tud2\n\tmovq %%xmm0, %0" : "=r"(out) : "r"(in) : "xmm0");
    unsigned mx;
    __asm__ volatile("stmxcsr %0" : "=m"(mx));
    printf("fault: the handler saw xmm0 %s, rounding %u; after it xmm0 = %#llx, rounding %u\n",
           seen == in ? "as set" : "changed", seen_round, (unsigned long long)out, (mx >> 13) & 3);
    mx &= ~(3u << 13);
    __asm__ volatile("ldmxcsr %0" : : "m"(mx));

    sa.sa_sigaction = on_alarm;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval it = {{0, 0}, {0, 20000}};
    setitimer(ITIMER_REAL, &it, 0);
    uint64_t pattern = 0x0123456789abcdefULL, x14, left;
    /* Spins until xmm15 is nonzero (at most about 2^33 rounds). */
    __asm__ volatile("movq %2, %%xmm14\n\t"
                     "pxor %%xmm15, %%xmm15\n\t"
                     "movabs $0x200000000, %1\n\t"
                     "1: movq %%xmm15, %0\n\t"
                     "test %0, %0\n\t"
                     "jnz 2f\n\t"
                     "dec %1\n\t"
                     "jnz 1b\n\t"
                     "2: movq %%xmm14, %0"
                     : "=&r"(x14), "=&r"(left)
                     : "r"(pattern)
                     : "xmm14", "xmm15", "cc");
    printf("timer: the handler saw xmm14 %s; the loop %s; xmm14 after it %s\n", seen == pattern ? "as set" : "changed",
           left ? "ended when the handler set xmm15" : "never saw xmm15 change", x14 == pattern ? "kept" : "changed");
    return 0;
}
