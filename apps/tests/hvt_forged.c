/* A hostile hvt guest: it runs at CPL 3 with IOPL 3, so
 * it can write the hypercall ports itself. `hvt_forged fault` writes a
 * made-up fault report to the fault port, pointing where the CPL-0
 * exception stub puts its real ones; `hvt_forged code` asks for a console
 * write whose argument structure (and so its result) is the program's own
 * code. The VMM must refuse both as invalid hypercalls (status 255). Each
 * prints the addresses tests/hostile.rs needs for the exact message first.
 * Only for hvt: on spt, `out` at user level is a general protection fault. */
#include <stdio.h>
#include <string.h>

/* shoal_abi: HYPERCALL_PORT_BASE + Hypercall::{ConsoleWrite, Fault}. */
#define PORT_CONSOLE 0x501
#define PORT_FAULT 0x504
/* x86::FAULT_REPORT_ADDR in shoal-hvt: the top of the stub's stack. */
#define STUB_REPORT 0x3fc8

extern char forged_fault_after[];

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "";
    if (strcmp(what, "fault") == 0) {
        printf("after %#lx\n", (unsigned long)forged_fault_after);
        fflush(stdout);
        __asm__ volatile("out %%eax, %%dx\n"
                         ".globl forged_fault_after\n"
                         "forged_fault_after:\n"
                         :
                         : "a"(STUB_REPORT), "d"(PORT_FAULT)
                         : "memory");
    } else if (strcmp(what, "code") == 0) {
        unsigned long at = (unsigned long)&main;
        printf("main %#lx\n", at);
        fflush(stdout);
        __asm__ volatile("out %%eax, %%dx" : : "a"((unsigned)at), "d"(PORT_CONSOLE) : "memory");
    } else {
        printf("usage: hvt_forged fault|code\n");
        return 2;
    }
    printf("still running\n");
    return 0;
}
