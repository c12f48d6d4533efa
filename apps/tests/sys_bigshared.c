/* A shared mapping of a large sparse file (CPython's test_mmap maps
 * 256 MiB of one): shoal shows at most 128 MiB of file pages in shared
 * mappings at once (mm::file::MAX_SHOWN_PAGES), so the 256 MiB mapping is
 * ENOMEM there (Linux maps it); nothing may be left behind by the refusal:
 * the top 16 MiB of the memory it would have used (where fresh mappings
 * go next, and where the crash was) are then mapped anonymously and
 * written page by page, and a 16 MiB shared mapping of the same file
 * reads as the file. Prints the 256 MiB mapping's outcome first (the line that
 * differs from Linux), then lines that must equal a native run. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MIB (1024L * 1024)

int main(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/shoal-bigshared-%d", (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || pwrite(fd, "end", 3, 320 * MIB - 3) != 3) {
        perror("sparse file");
        unlink(path);
        return 1;
    }
    char *p = mmap(0, 256 * MIB, PROT_READ, MAP_SHARED, fd, 64 * MIB);
    printf("shared 256 MiB: %s\n", p == MAP_FAILED ? strerror(errno) : "mapped");
    if (p != MAP_FAILED) {
        printf("last bytes: %.3s\n", p + 256 * MIB - 3);
        munmap(p, 256 * MIB);
    }
    /* The memory a half-made mapping would have broken. */
    char *a = mmap(0, 16 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) {
        perror("anonymous 16 MiB");
        return 1;
    }
    for (long i = 0; i < 16 * MIB; i += 4096)
        a[i] = 1;
    printf("anonymous 16 MiB written\n");
    munmap(a, 16 * MIB);
    char *q = mmap(0, 16 * MIB, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 304 * MIB);
    if (q == MAP_FAILED) {
        perror("shared 16 MiB");
        return 1;
    }
    printf("shared 16 MiB: first %d, last bytes %.3s\n", q[0], q + 16 * MIB - 3);
    munmap(q, 16 * MIB);
    close(fd);
    unlink(path);
    return 0;
}
