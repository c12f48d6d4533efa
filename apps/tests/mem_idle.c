/* Freed memory that the kernel keeps for reuse goes back to the host once
 * the instance idles (shoal_sched::IDLE_RELEASE_NS). mm keeps up
 * to 2 MiB of freed pages resident, so 1 MiB unmapped stays with the host
 * until then. The test reads the tender's resident set at each step, which
 * the program announces on stdout:
 *   1. 1 MiB mapped and written: "touched", then a line on stdin
 *   2. munmap of it: "unmapped", then it waits for a line on stdin (an
 *      idle wait without a deadline: the memory goes after a second)
 *   3. 1 MiB mapped, written and unmapped again: "unmapped again", then a
 *      sleep of 3 s (a long idle wait: the memory goes at once): "slept" */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIZE (1u << 20)

static void line(const char *what) {
    printf("%s\n", what);
    fflush(stdout);
}

static void wait_line(void) {
    char buf[16];
    if (!fgets(buf, sizeof buf, stdin))
        exit(3);
}

static void touch_and_unmap(void) {
    char *p = mmap(0, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        exit(4);
    memset(p, 0x5a, SIZE);
    if (munmap(p, SIZE))
        exit(5);
}

int main(void) {
    char *p = mmap(0, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 4;
    memset(p, 0x5a, SIZE);
    line("touched");
    wait_line();
    if (munmap(p, SIZE))
        return 5;
    line("unmapped");
    wait_line();
    touch_and_unmap();
    line("unmapped again");
    sleep(3);
    line("slept");
    return 0;
}
