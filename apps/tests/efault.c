/* System calls asked to write into memory the program may not write must
 * fail with EFAULT, as on Linux, and leave the instance running: the
 * image's code and read-only data, read-only and PROT_NONE mappings, and
 * unmapped memory. Each line names the call and what it
 * returned (tests/hostile.rs expects EFAULT for each, on spt and hvt). A
 * native build cannot be compared: there clock_gettime runs in the vDSO,
 * which writes the result itself and faults. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <sys/socket.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Read-only data the calls below are pointed at (used, so it stays). */
__attribute__((used)) static const char rodata[256] = "read-only data, which no system call may overwrite";

/* The result of a call as "ok" or the errno's name. */
static const char *res(long r) {
    if (r >= 0)
        return "ok";
    switch (errno) {
    case EFAULT: return "EFAULT";
    case EINVAL: return "EINVAL";
    case EBADF: return "EBADF";
    default: return "other error";
    }
}

/* A pointer the compiler cannot see through: the calls write there behind
 * its back, so it must not assume the constants are untouched. */
static void *hide(const void *p) {
    void *q = (void *)p;
    __asm__ volatile("" : "+r"(q));
    return q;
}

int main(void) {
    char *ro = hide(rodata);
    char *code = hide((const void *)&main);
    unsigned char code_before[16];
    memcpy(code_before, code, sizeof code_before);

    int p[2];
    if (pipe(p) != 0) {
        printf("pipe failed\n");
        return 1;
    }
    if (write(p[1], "abc", 3) != 3) {
        printf("write failed\n");
        return 1;
    }
    printf("read into rodata: %s\n", res(read(p[0], ro, 3)));
    printf("read into code: %s\n", res(read(p[0], code, 3)));
    struct timespec *ts = hide(ro + 64);
    printf("clock_gettime(CLOCK_MONOTONIC) into rodata: %s\n", res(clock_gettime(CLOCK_MONOTONIC, ts)));
    printf("clock_gettime(CLOCK_REALTIME) into code: %s\n", res(clock_gettime(CLOCK_REALTIME, hide(code))));
    /* musl's fstat() copies from a stack buffer itself (and would fault
     * in the program, as on Linux): the system call is asked directly. */
    printf("fstat into rodata: %s\n", res(syscall(SYS_fstat, p[0], hide(ro + 64))));
    printf("pipe into rodata: %s\n", res(pipe(hide(ro + 128))));
    /* Output pointers are checked before the work: no descriptor leaks. */
    int before = dup(0);
    close(before);
    printf("socketpair into rodata: %s\n", res(socketpair(AF_UNIX, SOCK_STREAM, 0, hide(ro + 128))));
    int after = dup(0);
    close(after);
    printf("no descriptor leaked: %s\n", after == before ? "yes" : "no");

    char *m = mmap(0, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        printf("mmap failed\n");
        return 1;
    }
    mprotect(m, 4096, PROT_READ);
    mprotect(m + 4096, 4096, PROT_NONE);
    munmap(m + 2 * 4096, 4096);
    printf("read into a PROT_READ mapping: %s\n", res(read(p[0], m, 3)));
    printf("read into a PROT_NONE mapping: %s\n", res(read(p[0], m + 4096, 3)));
    printf("read into unmapped memory: %s\n", res(read(p[0], m + 2 * 4096, 3)));

    /* Nothing was consumed or overwritten, and the instance still runs. */
    char buf[4] = {0};
    printf("read into the stack: %s \"%s\"\n", res(read(p[0], buf, 3)), buf);
    printf("rodata intact: %s\n", strcmp(rodata, "read-only data, which no system call may overwrite") == 0 ? "yes" : "no");
    printf("code intact: %s\n", memcmp(code_before, code, sizeof code_before) == 0 ? "yes" : "no");
    struct timespec now;
    printf("clock_gettime into the stack: %s\n", res(clock_gettime(CLOCK_MONOTONIC, &now)));
    return 0;
}
