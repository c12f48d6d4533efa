/* Exercises the file/memory layer: device files, pipes, poll/select, file
 * mmap, statfs, chown, sendfile and friends. Its output is compared with
 * the native static musl build (tests/files.rs): print only what Linux and
 * shoal must agree on (no inode numbers, no file-system sizes). Creating
 * device nodes is left out: root may do it natively, shoal says EPERM. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/file.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL %s:%d %s (errno %d)\n", __FILE__, __LINE__, #c, errno); } } while (0)

static void devices(void) {
    const char *names[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"};
    for (int i = 0; i < 5; i++) {
        struct stat st;
        CHECK(stat(names[i], &st) == 0);
        printf("%s chr=%d rdev=%u,%u mode=%o\n", names[i], S_ISCHR(st.st_mode), major(st.st_rdev), minor(st.st_rdev), st.st_mode & 0777);
    }
    char buf[64];
    int fd = open("/dev/null", O_RDWR);
    ssize_t nr = read(fd, buf, sizeof buf);
    ssize_t nw = write(fd, "abc", 3);
    printf("null read=%zd write=%zd\n", nr, nw);
    close(fd);
    fd = open("/dev/zero", O_RDONLY);
    memset(buf, 7, sizeof buf);
    ssize_t n = read(fd, buf, sizeof buf);
    int zero = 1;
    for (int i = 0; i < 64; i++) zero &= buf[i] == 0;
    printf("zero read=%zd allzero=%d\n", n, zero);
    void *z = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    printf("zero mmap ok=%d first=%d\n", z != MAP_FAILED, z != MAP_FAILED ? ((char *)z)[100] : -1);
    close(fd);
    fd = open("/dev/full", O_WRONLY);
    errno = 0;
    n = write(fd, "x", 1);
    printf("full write=%zd errno=%s\n", n, errno == ENOSPC ? "ENOSPC" : "?");
    close(fd);
    fd = open("/dev/urandom", O_RDONLY);
    char r1[32], r2[32];
    CHECK(read(fd, r1, 32) == 32 && read(fd, r2, 32) == 32);
    printf("urandom differs=%d\n", memcmp(r1, r2, 32) != 0);
    close(fd);
    /* /dev/stdout and /dev/fd/N reach the same files. */
    FILE *f = fopen("/dev/stdout", "a");
    CHECK(f != NULL);
    fflush(stdout);
    fprintf(f, "via /dev/stdout\n");
    fclose(f);
    int tfd = open("fdfile", O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(write(tfd, "hello fd", 8) == 8);
    char path[32];
    snprintf(path, sizeof path, "/dev/fd/%d", tfd);
    int again = open(path, O_RDONLY);
    memset(buf, 0, sizeof buf);
    n = read(again, buf, 63);
    printf("reopen %s read=%zd '%s'\n", again >= 0 ? "ok" : "fail", n, buf);
    struct stat a, b;
    fstat(tfd, &a);
    stat(path, &b);
    printf("same inode=%d\n", a.st_ino == b.st_ino && a.st_dev == b.st_dev);
    close(again);
    close(tfd);
    char link[64] = {0};
    readlink("/dev/stdin", link, sizeof link - 1);
    printf("/dev/stdin -> %s\n", link);
}

static int got_pipe;
static void on_pipe(int s) { (void)s; got_pipe++; }

static void pipes(void) {
    int p[2];
    CHECK(pipe(p) == 0);
    struct stat st;
    fstat(p[0], &st);
    printf("pipe fifo=%d\n", S_ISFIFO(st.st_mode));
    CHECK(write(p[1], "ping", 4) == 4);
    struct pollfd pf[2] = {{p[0], POLLIN, 0}, {p[1], POLLOUT, 0}};
    int pr = poll(pf, 2, 0);
    printf("poll=%d in=%d out=%d\n", pr, !!(pf[0].revents & POLLIN), !!(pf[1].revents & POLLOUT));
    char buf[8] = {0};
    ssize_t rn = read(p[0], buf, sizeof buf - 1);
    printf("read=%zd '%s'\n", rn, buf);
    /* Empty, non-blocking: EAGAIN; poll with a timeout returns 0. */
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    errno = 0;
    rn = read(p[0], buf, 1);
    printf("empty read=%zd eagain=%d\n", rn, errno == EAGAIN);
    pf[0].revents = 0;
    printf("poll timeout=%d\n", poll(pf, 1, 20));
    fd_set rs, ws;
    FD_ZERO(&rs);
    FD_ZERO(&ws);
    FD_SET(p[0], &rs);
    FD_SET(p[1], &ws);
    struct timeval tv = {0, 1000};
    int sel = select(p[1] + 1, &rs, &ws, 0, &tv);
    printf("select=%d r=%d w=%d\n", sel, FD_ISSET(p[0], &rs), FD_ISSET(p[1], &ws));
    /* Fill the pipe: 64 KiB, then EAGAIN. */
    fcntl(p[1], F_SETFL, O_NONBLOCK);
    static char big[70000];
    ssize_t w = write(p[1], big, sizeof big);
    errno = 0;
    ssize_t w2 = write(p[1], "x", 1);
    printf("fill=%zd then=%zd eagain=%d\n", w, w2, errno == EAGAIN);
    /* Writer gone: data, then end of file. */
    close(p[1]);
    ssize_t total = 0, k;
    while ((k = read(p[0], big, sizeof big)) > 0) total += k;
    printf("drained=%zd eof=%zd\n", total, k);
    pf[0].events = POLLIN;
    poll(pf, 1, 0);
    printf("hup=%d\n", !!(pf[0].revents & POLLHUP));
    close(p[0]);
    /* Reader gone: EPIPE and SIGPIPE. */
    CHECK(pipe2(p, O_CLOEXEC) == 0);
    close(p[0]);
    signal(SIGPIPE, on_pipe);
    errno = 0;
    rn = write(p[1], "x", 1);
    printf("epipe write=%zd epipe=%d signals=%d\n", rn, errno == EPIPE, got_pipe);
    close(p[1]);
    /* Named FIFO. */
    CHECK(mkfifo("fifo", 0600) == 0);
    stat("fifo", &st);
    printf("mkfifo isfifo=%d mode=%o\n", S_ISFIFO(st.st_mode), st.st_mode & 0777);
    errno = 0;
    int ow = open("fifo", O_WRONLY | O_NONBLOCK);
    printf("open writer nonblock=%d enxio=%d\n", ow, errno == ENXIO);
    int r = open("fifo", O_RDONLY | O_NONBLOCK);
    int wr = open("fifo", O_WRONLY);
    CHECK(r >= 0 && wr >= 0);
    CHECK(write(wr, "fifo!", 5) == 5);
    memset(buf, 0, sizeof buf);
    rn = read(r, buf, 7);
    printf("fifo read=%zd '%s'\n", rn, buf);
    close(r);
    close(wr);
    unlink("fifo");
    errno = 0;
    printf("mknod reg=%d\n", mknod("regular", S_IFREG | 0600, 0));
    /* poll on the standard streams and a regular file. */
    int fd = open("regular", O_RDWR);
    struct pollfd q[3] = {{1, POLLOUT, 0}, {fd, POLLIN | POLLOUT, 0}, {99, POLLIN, 0}};
    pr = poll(q, 3, -1);
    printf("poll std/file/bad=%d out=%d file=%d nval=%d\n", pr, !!(q[0].revents & POLLOUT), q[1].revents & (POLLIN | POLLOUT), !!(q[2].revents & POLLNVAL));
    close(fd);
}

static void mapping(void) {
    int fd = open("map", O_CREAT | O_RDWR | O_TRUNC, 0644);
    char data[10000];
    for (int i = 0; i < 10000; i++) data[i] = 'a' + i % 26;
    CHECK(write(fd, data, sizeof data) == sizeof data);
    /* Private, at an offset: the file's bytes, zeros after the end. */
    char *m = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 4096);
    CHECK(m != MAP_FAILED);
    printf("private first=%c last-in-file=%c past-eof=%d\n", m[0], m[10000 - 4096 - 1], m[10000 - 4096]);
    m[0] = '#';
    char c;
    pread(fd, &c, 1, 4096);
    printf("private write not in file=%d\n", c != '#');
    munmap(m, 8192);
    errno = 0;
    int bad = mmap(0, 4096, PROT_READ, MAP_PRIVATE, fd, 100) == MAP_FAILED;
    printf("unaligned offset=%d einval=%d\n", bad, errno == EINVAL);
    /* Shared read-only. */
    char *s = mmap(0, 10000, PROT_READ, MAP_SHARED, fd, 0);
    printf("shared ro=%c%c%c\n", s[0], s[1], s[9999]);
    munmap(s, 10000);
    /* Shared writable: msync and munmap write back. */
    s = mmap(0, 10000, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(s != MAP_FAILED);
    memcpy(s + 10, "SHARED", 6);
    CHECK(msync(s, 10000, MS_SYNC) == 0);
    char back[7] = {0};
    pread(fd, back, 6, 10);
    printf("after msync '%s'\n", back);
    memcpy(s + 5000, "UNMAP", 5);
    s[9999] = '!';
    unsigned char vec[3];
    int mc = mincore(s, 10000, vec);
    printf("mincore=%d resident=%d\n", mc, vec[0] & 1);
    munmap(s, 10000);
    close(fd);
    fd = open("map", O_RDONLY);
    memset(back, 0, sizeof back);
    pread(fd, back, 5, 5000);
    pread(fd, &c, 1, 9999);
    struct stat st;
    fstat(fd, &st);
    printf("after munmap '%s' last=%c size=%lld\n", back, c, (long long)st.st_size);
    errno = 0;
    bad = mmap(0, 4096, PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED;
    printf("shared write on rdonly fd=%d eacces=%d\n", bad, errno == EACCES);
    /* mremap of a file mapping grows into the file. */
    m = mmap(0, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    m = mremap(m, 4096, 8192, MREMAP_MAYMOVE);
    printf("mremap grown byte=%c\n", m[4096]);
    munmap(m, 8192);
    /* Mapping outlives close. */
    m = mmap(0, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    printf("after close=%c\n", m[1]);
    munmap(m, 4096);
    int p[2];
    pipe(p);
    errno = 0;
    bad = mmap(0, 4096, PROT_READ, MAP_PRIVATE, p[0], 0) == MAP_FAILED;
    printf("mmap pipe=%d enodev=%d\n", bad, errno == ENODEV);
    close(p[0]);
    close(p[1]);
}

static void misc(void) {
    struct statfs sf;
    CHECK(statfs("/tmp", &sf) == 0);
    printf("statfs bsize=%ld namelen=%ld\n", (long)sf.f_bsize, (long)sf.f_namelen);
    int fd = open("own", O_CREAT | O_RDWR, 04755);
    fchmod(fd, 04755);
    CHECK(fchown(fd, 1000, 1000) == 0);
    struct stat st;
    fstat(fd, &st);
    printf("fchown uid=%u gid=%u suid-cleared=%d\n", st.st_uid, st.st_gid, !(st.st_mode & 04000));
    CHECK(chown("own", -1, 7) == 0);
    CHECK(lchown("own", 5, -1) == 0);
    CHECK(fchownat(AT_FDCWD, "own", 0, 0, 0) == 0);
    stat("own", &st);
    printf("chown uid=%u gid=%u\n", st.st_uid, st.st_gid);
    struct timeval tv[2] = {{1000, 5}, {2000, 7}};
    CHECK(utimes("own", tv) == 0);
    stat("own", &st);
    printf("utimes atime=%ld.%09ld mtime=%ld.%09ld\n", (long)st.st_atim.tv_sec, st.st_atim.tv_nsec, (long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    CHECK(posix_fallocate(fd, 0, 12345) == 0);
    fstat(fd, &st);
    printf("fallocate size=%lld\n", (long long)st.st_size);
    printf("fadvise=%d\n", posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL));
    char a[4] = "abc", b[4] = "def";
    struct iovec iov[2] = {{a, 3}, {b, 3}};
    printf("pwritev=%zd\n", pwritev(fd, iov, 2, 100));
    memset(a, 0, 3);
    memset(b, 0, 3);
    ssize_t pv = preadv(fd, iov, 2, 100);
    printf("preadv=%zd '%s' '%s'\n", pv, a, b);
    printf("offset unchanged=%lld\n", (long long)lseek(fd, 0, SEEK_CUR));
    /* sendfile from a file to stdout and to another file. */
    int src = open("src", O_CREAT | O_RDWR | O_TRUNC, 0644);
    write(src, "sendfile works\n", 15);
    off_t off = 0;
    fflush(stdout);
    ssize_t n = sendfile(1, src, &off, 100);
    printf("sendfile=%zd off=%lld\n", n, (long long)off);
    int dst = open("dst", O_CREAT | O_RDWR | O_TRUNC, 0644);
    lseek(src, 9, SEEK_SET);
    n = sendfile(dst, src, NULL, 5);
    char out[8] = {0};
    pread(dst, out, 7, 0);
    printf("sendfile file=%zd '%s' srcoff=%lld\n", n, out, (long long)lseek(src, 0, SEEK_CUR));
    off_t o1 = 0, o2 = 20;
    n = copy_file_range(src, &o1, dst, &o2, 8, 0);
    memset(out, 0, sizeof out);
    pread(dst, out, 7, 20);
    printf("copy_file_range=%zd '%s'\n", n, out);
    CHECK(link("src", "src2") == 0);
    stat("src", &st);
    printf("link nlink=%lu\n", (unsigned long)st.st_nlink);
    printf("flock=%d\n", flock(src, LOCK_EX));
    int sf1 = syncfs(src);
    int sf2 = sync_file_range(src, 0, 0, 0);
    printf("syncfs=%d sync_file_range=%d\n", sf1, sf2);
    close(src);
    close(dst);
    close(fd);
}

/* argv[1]: a scratch directory to work in. */
int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 2 || chdir(argv[1]) != 0) {
        printf("usage: devices SCRATCH-DIR\n");
        return 2;
    }
    devices();
    pipes();
    mapping();
    misc();
    printf("done\n");
    return 0;
}
