/* Signal frames as Linux lays them out on x86-64: the handler is entered
 * with the return address sa_restorer at its stack pointer (16-byte
 * aligned above it), the ucontext_t just above it and the siginfo_t after
 * the ucontext (rt_sigframe); uc_flags, uc_stack, uc_sigmask, the
 * segment word of the gregs and an fpstate pointer to an fxsave area
 * hold what Linux puts there. A handler that changes the interrupted
 * registers (here rax of a spinning loop a thread's signal interrupts)
 * changes them for the code that resumes. SA_NODEFER, SA_RESETHAND and
 * SA_ONSTACK with sigaltstack behave as on Linux. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

/* The handler's first instruction records its stack pointer. */
void probe_handler(int, siginfo_t *, void *);
uintptr_t entry_sp;
__asm__(".text\n.globl probe_entry\nprobe_entry:\n mov %rsp, entry_sp(%rip)\n jmp probe_handler\n");
void probe_entry(int, siginfo_t *, void *);

struct ksigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    unsigned long mask;
};

static int ok_ret, ok_align, ok_uc, ok_info, ok_flags, ok_stack, ok_mask, ok_cs, ok_fp, ok_signo;
static sigset_t mask_before;

void probe_handler(int sig, siginfo_t *si, void *ucp) {
    ucontext_t *uc = ucp;
    struct ksigaction k;
    syscall(SYS_rt_sigaction, sig, 0, &k, 8);
    ok_ret = *(void **)entry_sp == k.restorer && k.restorer != 0;
    ok_align = (entry_sp + 8) % 16 == 0;
    ok_uc = (uintptr_t)uc == entry_sp + 8;
    ok_info = (uintptr_t)si == entry_sp + 8 + 304;
    ok_signo = si->si_signo == sig && si->si_code == SI_TKILL && si->si_pid == getpid();
    ok_flags = (uc->uc_flags & 6) == 6;
    ok_stack = uc->uc_stack.ss_flags == 0 && uc->uc_stack.ss_sp == 0 && uc->uc_stack.ss_size == 0;
    ok_mask = memcmp(&uc->uc_sigmask, &mask_before, 8) == 0;
    ok_cs = (uc->uc_mcontext.gregs[REG_CSGSFS] & 0xffff) == 0x33;
    /* fxsave layout: mxcsr at byte 24. */
    const unsigned char *fp = (const void *)uc->uc_mcontext.fpregs;
    uint32_t mxcsr = 0;
    if (fp) memcpy(&mxcsr, fp + 24, 4);
    ok_fp = fp != 0 && (uintptr_t)fp % 16 == 0 && (mxcsr & 0xffbf) == 0x1f80 && (uintptr_t)fp > (uintptr_t)si;
}

/* A loop that spins while rax is 0; the handler makes it 7. */
static volatile int spinning;
static void set_rax(int sig, siginfo_t *si, void *ucp) {
    (void)sig; (void)si;
    ucontext_t *uc = ucp;
    uc->uc_mcontext.gregs[REG_RAX] = 7;
    uc->uc_mcontext.gregs[REG_RBX] = 11;
}

static pthread_t main_thread;
static void *kicker(void *arg) {
    (void)arg;
    while (!spinning) sched_yield();
    pthread_kill(main_thread, SIGUSR2);
    return 0;
}

static int depth, max_depth, calls;
static void nested(int sig) {
    calls++;
    depth++;
    if (depth > max_depth) max_depth = depth;
    if (calls == 1) raise(sig);
    depth--;
}

static char altstack[64 * 1024];
static int on_alt, alt_flags_ok;
static void on_alt_handler(int sig, siginfo_t *si, void *ucp) {
    (void)sig; (void)si;
    char here;
    on_alt = &here >= altstack && &here < altstack + sizeof altstack;
    ucontext_t *uc = ucp;
    alt_flags_ok = uc->uc_stack.ss_sp == altstack && uc->uc_stack.ss_size == sizeof altstack;
    stack_t now;
    sigaltstack(0, &now);
    alt_flags_ok = alt_flags_ok && (now.ss_flags & SS_ONSTACK);
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = probe_entry;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &sa, 0);
    sigemptyset(&mask_before);
    sigaddset(&mask_before, SIGWINCH);
    sigprocmask(SIG_SETMASK, &mask_before, 0);
    raise(SIGUSR1);
    printf("return address is sa_restorer %d, aligned %d\n", ok_ret, ok_align);
    printf("ucontext above it %d, siginfo after the ucontext %d, siginfo %d\n", ok_uc, ok_info, ok_signo);
    printf("uc_flags %d, uc_stack %d, uc_sigmask %d, cs %d, fpstate %d\n", ok_flags, ok_stack, ok_mask, ok_cs, ok_fp);
    sigset_t now;
    sigprocmask(SIG_SETMASK, 0, &now);
    printf("mask restored: %d\n", sigismember(&now, SIGWINCH) && !sigismember(&now, SIGUSR1));

    /* A handler changes the interrupted registers. */
    sa.sa_sigaction = set_rax;
    sigaction(SIGUSR2, &sa, 0);
    main_thread = pthread_self();
    pthread_t t;
    pthread_create(&t, 0, kicker, 0);
    long rax, rbx;
    spinning = 1;
    __asm__ volatile("xor %%eax, %%eax\n xor %%ebx, %%ebx\n 1: test %%rax, %%rax\n jz 1b" : "=a"(rax), "=b"(rbx) : : "memory");
    pthread_join(t, 0);
    printf("the handler set rax %ld rbx %ld\n", rax, rbx);

    /* SA_NODEFER: the handler is entered again from inside itself. */
    struct sigaction n;
    memset(&n, 0, sizeof n);
    n.sa_handler = nested;
    n.sa_flags = SA_NODEFER;
    sigaction(SIGHUP, &n, 0);
    raise(SIGHUP);
    printf("SA_NODEFER: %d calls, nested %d deep\n", calls, max_depth);
    calls = max_depth = 0;
    n.sa_flags = 0;
    sigaction(SIGHUP, &n, 0);
    raise(SIGHUP);
    printf("without: %d calls, nested %d deep\n", calls, max_depth);

    /* SA_RESETHAND: the action is back to SIG_DFL once delivered. */
    calls = 1; /* counts on from here: no nested raise */
    n.sa_flags = SA_RESETHAND;
    sigaction(SIGHUP, &n, 0);
    raise(SIGHUP);
    struct sigaction after;
    sigaction(SIGHUP, 0, &after);
    printf("SA_RESETHAND: %d call, then default %d\n", calls - 1, after.sa_handler == SIG_DFL);

    /* SA_ONSTACK */
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof altstack, .ss_flags = 0};
    sigaltstack(&ss, 0);
    struct sigaction o;
    memset(&o, 0, sizeof o);
    o.sa_sigaction = on_alt_handler;
    o.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGURG, &o, 0);
    raise(SIGURG);
    printf("SA_ONSTACK: on the alternate stack %d, uc_stack and SS_ONSTACK %d\n", on_alt, alt_flags_ok);
    return 0;
}
