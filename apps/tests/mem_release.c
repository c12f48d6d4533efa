/* Freed memory goes back to the host: the test reads the
 * tender's resident set (/proc/PID/status) at each step, which the program
 * announces on stdout and then waits for a line on stdin to leave.
 *   1. 64 MiB mapped and written: "touched"
 *   2. munmap of it: "unmapped"
 *   3. 64 MiB mapped, written, madvise(MADV_DONTNEED): "discarded" (and the
 *      memory reads as zero, still mapped and writable)
 *   4. 64 MiB of malloc'd blocks of 256 KiB, written, then freed: "freed"
 * Natively the same steps drop the resident set the same way.
 *
 * With an argument, the guest calls the host's madvise itself (spt, a raw
 * `syscall`): "raw-ok" MADV_DONTNEED on its own heap page (the Release
 * hypercall's call: allowed, prints 0 and the page reads as zero),
 * "raw-advice" MADV_DONTFORK there and "raw-code" MADV_DONTNEED over its
 * own code (both killed by the seccomp filter). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define SIZE (64u << 20)

static void step(const char *what) {
    char line[16];
    printf("%s\n", what);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin))
        exit(3);
}

static long sys3(long n, long a, long b, long c) {
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return r;
}

static int raw(const char *mode) {
    unsigned char *page = aligned_alloc(4096, 4096);
    if (!page)
        return 1;
    memset(page, 7, 4096);
    long code = (long)raw & ~4095L;
    long r = -1;
    if (!strcmp(mode, "raw-ok"))
        r = sys3(28, (long)page, 4096, MADV_DONTNEED);
    else if (!strcmp(mode, "raw-advice"))
        r = sys3(28, (long)page, 4096, 10 /* MADV_DONTFORK */);
    else if (!strcmp(mode, "raw-code"))
        r = sys3(28, code, 4096, MADV_DONTNEED);
    printf("%ld %d\n", r, page[100]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1)
        return raw(argv[1]);
    unsigned char *p = mmap(0, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    memset(p, 0x5a, SIZE);
    step("touched");
    if (munmap(p, SIZE))
        return 1;
    step("unmapped");
    p = mmap(0, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    memset(p, 0xa5, SIZE);
    if (madvise(p, SIZE, MADV_DONTNEED))
        return 1;
    for (size_t i = 0; i < SIZE; i += 4096)
        if (p[i] || p[i + 4095])
            return 2;
    p[4096] = 1; /* still mapped and writable */
    step("discarded");
    munmap(p, SIZE);
    enum { N = 256 };
    static void *blocks[N];
    for (int i = 0; i < N; i++) {
        blocks[i] = malloc(SIZE / N);
        if (!blocks[i])
            return 1;
        memset(blocks[i], i, SIZE / N);
    }
    for (int i = 0; i < N; i++)
        free(blocks[i]);
    step("freed");
    printf("done\n");
    return 0;
}
