/* The Linux system calls and files runtimes use to size themselves and
 * tune memory: sched_getaffinity/sched_setaffinity, getrandom's flags,
 * prctl, madvise, mincore, membarrier, and the /proc and /sys files Go,
 * glibc and libuv read (/proc/self/{exe,maps,auxv,fd,cgroup,mountinfo},
 * /proc/{meminfo,cpuinfo,stat}, /sys/devices/system/cpu/online,
 * transparent_hugepage/hpage_pmd_size, the cgroup v2 cpu.max). What it
 * prints holds on Linux (native run) and in an instance alike: each file
 * is checked against what the system calls say, not against fixed values,
 * since the machine has more CPUs and memory than an instance. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <unistd.h>

static const char *err(long r) { return r < 0 ? strerror(errno) : "ok"; }

static int slurp(const char *path, char *buf, size_t n) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, buf + got, n - 1 - got);
        if (r <= 0) break;
        got += r;
    }
    close(fd);
    buf[got] = 0;
    return (int)got;
}

static char buf[1 << 16];

int main(void) {
    /* affinity */
    cpu_set_t set;
    CPU_ZERO(&set);
    long r = sched_getaffinity(0, sizeof set, &set);
    printf("getaffinity: %s, cpu0 %d\n", err(r), CPU_ISSET(0, &set));
    int ncpu = CPU_COUNT(&set);
    r = syscall(SYS_sched_getaffinity, 0, 4, &set);
    printf("getaffinity short: %s\n", err(r));
    r = syscall(SYS_sched_getaffinity, 0, sizeof set, &set);
    printf("getaffinity returns the mask size: %d\n", r >= 8 && r % 8 == 0);
    r = syscall(SYS_sched_getaffinity, gettid(), sizeof set, &set);
    printf("getaffinity of own tid: %s\n", err(r));
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    printf("setaffinity {0}: %s\n", err(sched_setaffinity(0, sizeof one, &one)));
    CPU_ZERO(&one);
    printf("setaffinity {}: %s\n", err(sched_setaffinity(0, sizeof one, &one)));
    printf("setaffinity of no thread: %s\n", err(sched_setaffinity(999999, sizeof set, &set)));
    sched_setaffinity(0, sizeof set, &set);

    /* getrandom */
    char rnd[16];
    printf("getrandom nonblock: %ld\n", (long)getrandom(rnd, sizeof rnd, GRND_NONBLOCK));
    r = getrandom(rnd, sizeof rnd, 0x100);
    printf("getrandom bad flag: %s\n", err(r));
    r = getrandom(rnd, sizeof rnd, GRND_RANDOM | 4);
    printf("getrandom random|insecure: %s\n", err(r));

    /* prctl */
    printf("pdeathsig set: %s\n", err(prctl(PR_SET_PDEATHSIG, 15)));
    int pd = -1;
    r = prctl(PR_GET_PDEATHSIG, &pd);
    printf("pdeathsig get: %s %d\n", err(r), pd);
    printf("pdeathsig 65: %s\n", err(prctl(PR_SET_PDEATHSIG, 65)));
    printf("set name: %s\n", err(prctl(PR_SET_NAME, "sizing-test-long-name")));
    char name[16] = {0};
    prctl(PR_GET_NAME, name);
    printf("name: %s\n", name);
    printf("unknown option: %s\n", err(prctl(0x7ffe, 0, 0, 0, 0)));

    /* madvise and mincore */
    long pg = sysconf(_SC_PAGESIZE);
    unsigned char *m = mmap(0, 4 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(m, 0x5a, 4 * pg);
    unsigned char vec[4] = {0};
    r = mincore(m, 4 * pg, vec);
    printf("mincore: %s, resident %d%d%d%d\n", err(r), vec[0] & 1, vec[1] & 1, vec[2] & 1, vec[3] & 1);
    r = madvise(m, pg, MADV_DONTNEED);
    printf("dontneed: %s, reads %d, next page %d\n", err(r), m[10], m[pg + 10]);
    printf("free: %s\n", err(madvise(m + pg, pg, MADV_FREE)));
    printf("hugepage: %s\n", err(madvise(m, 4 * pg, MADV_HUGEPAGE)));
    printf("nohugepage: %s\n", err(madvise(m, 4 * pg, MADV_NOHUGEPAGE)));
    printf("bad advice: %s\n", err(madvise(m, pg, 999)));
    munmap(m, 4 * pg);
    printf("mincore unmapped: %s\n", err(mincore(m, pg, vec)));
    printf("madvise unmapped: %s\n", err(madvise(m, pg, MADV_WILLNEED)));

    /* membarrier */
    long q = syscall(SYS_membarrier, 0, 0, 0);
    printf("membarrier query: %s, private expedited %d\n", err(q), q > 0 && (q & 8) != 0);
    printf("membarrier flags: %s\n", err(syscall(SYS_membarrier, 0, 1, 0)));
    printf("membarrier private unregistered: %s\n", err(syscall(SYS_membarrier, 8, 0, 0)));
    printf("membarrier register: %s\n", err(syscall(SYS_membarrier, 16, 0, 0)));
    printf("membarrier private: %s\n", err(syscall(SYS_membarrier, 8, 0, 0)));
    printf("membarrier bad: %s\n", err(syscall(SYS_membarrier, 1 << 20, 0, 0)));

    /* /proc and /sys against the system calls */
    int online = -1;
    if (slurp("/sys/devices/system/cpu/online", buf, sizeof buf) > 0) {
        int a = 0, b = 0;
        if (sscanf(buf, "%d-%d", &a, &b) == 2) online = b - a + 1;
        else online = 1;
    }
    printf("cpu/online matches the CPUs: %d\n", online == ncpu || online == sysconf(_SC_NPROCESSORS_ONLN));
    int procs = 0;
    slurp("/proc/cpuinfo", buf, sizeof buf);
    for (char *p = buf; (p = strstr(p, "processor\t:")); p++) procs++;
    printf("cpuinfo processors match: %d, has model name %d, flags %d\n", procs == online, strstr(buf, "model name") != 0, strstr(buf, "sse2") != 0);
    struct sysinfo si;
    sysinfo(&si);
    slurp("/proc/meminfo", buf, sizeof buf);
    unsigned long total = 0, avail = 0;
    char *t = strstr(buf, "MemTotal:");
    if (t) sscanf(t, "MemTotal: %lu", &total);
    t = strstr(buf, "MemAvailable:");
    if (t) sscanf(t, "MemAvailable: %lu", &avail);
    printf("meminfo total matches sysinfo: %d, available <= total %d\n", total == si.totalram * si.mem_unit / 1024, avail > 0 && avail <= total);
    slurp("/proc/stat", buf, sizeof buf);
    printf("stat: cpu line %d, cpu0 line %d, btime %d\n", strncmp(buf, "cpu ", 4) == 0, strstr(buf, "\ncpu0 ") != 0, strstr(buf, "\nbtime ") != 0);
    slurp("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", buf, sizeof buf);
    printf("hpage_pmd_size: %s", buf);

    /* cgroup: the quota Go 1.25 reads allows no more CPUs than the mask */
    int v2 = 0;
    if (slurp("/proc/self/cgroup", buf, sizeof buf) > 0) v2 = strstr(buf, "0::/") != 0;
    int mounted = slurp("/proc/self/mountinfo", buf, sizeof buf) > 0 && strstr(buf, " - cgroup2 ") != 0;
    int ok = 1;
    if (v2 && mounted && slurp("/sys/fs/cgroup/cpu.max", buf, sizeof buf) > 0) {
        long quota = 0, period = 0;
        if (sscanf(buf, "%ld %ld", &quota, &period) == 2) ok = period > 0 && (quota + period - 1) / period <= ncpu;
    }
    printf("cgroup cpu quota fits the CPUs: %d\n", ok);

    /* /proc/self */
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    printf("exe: absolute %d\n", n > 0 && buf[0] == '/');
    unsigned long pagesz = 0, phdr = 0;
    int fd = open("/proc/self/auxv", O_RDONLY);
    unsigned long kv[2];
    while (fd >= 0 && read(fd, kv, sizeof kv) == sizeof kv && kv[0]) {
        if (kv[0] == AT_PAGESZ) pagesz = kv[1];
        if (kv[0] == AT_PHDR) phdr = kv[1];
    }
    close(fd);
    printf("auxv: pagesz matches %d, phdr matches %d\n", pagesz == getauxval(AT_PAGESZ), phdr == getauxval(AT_PHDR));
    void *probe = mmap(0, 3 * pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    slurp("/proc/self/maps", buf, sizeof buf);
    char want[64];
    snprintf(want, sizeof want, "%08lx-%08lx r--p ", (unsigned long)probe, (unsigned long)probe + 3 * pg);
    printf("maps: lists a new mapping %d, stack %d\n", strstr(buf, want) != 0, strstr(buf, "[stack]") != 0);
    fd = open("/tmp/sizing-file", O_CREAT | O_RDWR, 0600);
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    printf("fd link: %s\n", buf);
    unlink("/tmp/sizing-file");
    n = readlink(link, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    printf("fd link after unlink: deleted %d\n", n > 10 && strcmp(buf + n - 10, " (deleted)") == 0);
    close(fd);
    printf("closed fd link: %s\n", err(readlink(link, buf, sizeof buf)));
    return 0;
}
