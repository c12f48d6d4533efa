/* Read-only host directories (`shoal run --mount HOSTDIR:GUESTDIR:ro`),
 * driven by crates/shoal-cli/tests/mount.rs.
 *
 * `mount tree DIR`: walks DIR (names sorted, `.` and `..` skipped) and
 * prints, per entry, what lstat, stat, statx, fstat, read, pread, mmap
 * and readlink say; the same program run natively on the host directory
 * must print the same.
 *
 * `mount hostile DIR`: tries to leave the mount (`..`, symbolic links
 * relative and absolute, /proc magic links), to write through it and to
 * map what it should not, printing `NAME ERRNO-NAME` per attempt.
 *
 * `mount rw WDIR RDIR [tender]`: writes beneath the writable mount WDIR
 * (create, write, append, truncate, rename, mkdir, rmdir, unlink, chmod,
 * utimes, fsync), what a writable mount refuses (links, FIFOs), the
 * read-only mount RDIR still EROFS, and the raw hypercall's writes with
 * hostile paths; prints `NAME ERRNO-NAME [detail]` per step.
 *
 * `mount files ROFILE RWFILE [tender]`: two single-file mounts (mount 0
 * read-only, mount 1 writable): reads, stats, maps and writes them, what
 * a mount point refuses (EBUSY, ENOTDIR beneath a file, EROFS), and the
 * raw hypercall and (spt) the host calls with other paths.
 *
 * `mount raw DIR`: the same as a guest that bypasses its kernel and asks
 * the tender itself (the HostFs hypercall with hostile paths, lengths and
 * buffers), and on spt makes the host system calls itself.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

static uint64_t fnv(const unsigned char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

static const char *ename(int e)
{
	switch (e) {
	case 0: return "OK";
	case ENOENT: return "ENOENT";
	case EROFS: return "EROFS";
	case EEXIST: return "EEXIST";
	case EACCES: return "EACCES";
	case EPERM: return "EPERM";
	case EBADF: return "EBADF";
	case EXDEV: return "EXDEV";
	case ELOOP: return "ELOOP";
	case ENODEV: return "ENODEV";
	case EBUSY: return "EBUSY";
	case EINVAL: return "EINVAL";
	case EFAULT: return "EFAULT";
	case EISDIR: return "EISDIR";
	case ENOTDIR: return "ENOTDIR";
	case ENAMETOOLONG: return "ENAMETOOLONG";
	case ENOSYS: return "ENOSYS";
	case ENOTEMPTY: return "ENOTEMPTY";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EAGAIN: return "EAGAIN";
	default: {
		static char buf[32];
		snprintf(buf, sizeof buf, "errno%d", e);
		return buf;
	}
	}
}

static int cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void show_file(const char *path, const char *rel, const struct stat *st)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		printf("  open %s\n", ename(errno));
		return;
	}
	struct stat fst;
	if (fstat(fd, &fst) != 0 || fst.st_ino != st->st_ino || fst.st_size != st->st_size)
		printf("  fstat differs\n");
	size_t n = (size_t)st->st_size;
	unsigned char *buf = malloc(n + 1);
	size_t got = 0;
	for (;;) {
		ssize_t r = read(fd, buf + got, n + 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
		if (got == n + 1)
			break;
	}
	printf("  read %zu %016llx\n", got, (unsigned long long)fnv(buf, got));
	if (n > 2) {
		unsigned char mid[64];
		ssize_t r = pread(fd, mid, sizeof mid, (off_t)(n / 2));
		printf("  pread %zd %016llx\n", r, (unsigned long long)fnv(mid, r > 0 ? (size_t)r : 0));
	}
	off_t end = lseek(fd, 0, SEEK_END);
	printf("  seek-end %lld\n", (long long)end);
	if (n > 0) {
		void *m = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED) {
			printf("  mmap %s\n", ename(errno));
		} else {
			printf("  mmap %016llx\n", (unsigned long long)fnv(m, n));
			munmap(m, n);
		}
		if (n > 4096) {
			void *m2 = mmap(NULL, n - 4096, PROT_READ, MAP_PRIVATE, fd, 4096);
			printf("  mmap-off %016llx\n", m2 == MAP_FAILED ? 0ull : (unsigned long long)fnv(m2, n - 4096));
		}
	}
	free(buf);
	(void)rel;
	close(fd);
}

static void tree(const char *dir, const char *rel)
{
	DIR *d = opendir(dir);
	if (!d) {
		printf("%s/ opendir %s\n", rel, ename(errno));
		return;
	}
	char *names[4096];
	int count = 0;
	struct dirent *e;
	while ((e = readdir(d)) && count < 4096) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		names[count++] = strdup(e->d_name);
	}
	closedir(d);
	qsort(names, count, sizeof *names, cmp);
	for (int i = 0; i < count; i++) {
		char path[4096], sub[4096];
		snprintf(path, sizeof path, "%s/%s", dir, names[i]);
		snprintf(sub, sizeof sub, "%s/%s", rel, names[i]);
		struct stat st;
		if (lstat(path, &st) != 0) {
			printf("%s lstat %s\n", sub, ename(errno));
			continue;
		}
		printf("%s mode %o nlink %lu size %lld ino %llu mtime %lld.%09ld uid %u\n", sub, st.st_mode, (unsigned long)st.st_nlink,
		       (long long)st.st_size, (unsigned long long)st.st_ino, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_uid);
		/* statx(2) by number: musl 1.2.3 has no wrapper. Offsets of
		 * struct statx: stx_mode 28, stx_ino 32, stx_size 40. */
		unsigned char sx[256];
		if (syscall(SYS_statx, AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, 0x7ffu, sx) == 0) {
			uint16_t mode;
			uint64_t ino, size;
			memcpy(&mode, sx + 28, 2);
			memcpy(&ino, sx + 32, 8);
			memcpy(&size, sx + 40, 8);
			printf("  statx size %llu ino %llu mode %o\n", (unsigned long long)size, (unsigned long long)ino, mode);
		}
		if (S_ISLNK(st.st_mode)) {
			char target[4096];
			ssize_t n = readlink(path, target, sizeof target - 1);
			target[n > 0 ? n : 0] = 0;
			printf("  link %s\n", target);
			struct stat t;
			if (stat(path, &t) == 0)
				printf("  follows mode %o size %lld\n", t.st_mode, (long long)t.st_size);
			else
				printf("  follows %s\n", ename(errno));
		} else if (S_ISREG(st.st_mode)) {
			show_file(path, sub, &st);
		} else if (S_ISDIR(st.st_mode)) {
			tree(path, sub);
		}
		free(names[i]);
	}
}

#define TRY(name, expr)                                                   \
	do {                                                              \
		errno = 0;                                                \
		long r_ = (long)(expr);                                   \
		printf("%s %s\n", name, r_ < 0 ? ename(errno) : "OK");    \
	} while (0)

static void hostile(const char *dir)
{
	char p[4096];
#define P(rel) (snprintf(p, sizeof p, "%s/%s", dir, rel), p)
	/* Leaving the mount. */
	TRY("dotdot", open(P("../../../../../../etc/shadow"), O_RDONLY));
	TRY("dotdot-sub", open(P("sub/../../../../../etc/shadow"), O_RDONLY));
	TRY("link-rel", open(P("escape_rel"), O_RDONLY));
	TRY("link-abs", open(P("escape_abs"), O_RDONLY));
	TRY("link-abs-dir", open(P("escape_dir/shadow"), O_RDONLY));
	TRY("link-magic", open(P("magic_root"), O_RDONLY));
	TRY("link-magic-fd", open(P("magic_fd"), O_RDONLY));
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	TRY("openat-dotdot", openat(dfd, "../../../etc/shadow", O_RDONLY));
	snprintf(p, sizeof p, "/proc/self/fd/%d/../../../etc/shadow", dfd);
	TRY("procfd-dotdot", open(p, O_RDONLY));
	TRY("host-file", open("/etc/shadow", O_RDONLY));
	TRY("fifo", open(P("fifo"), O_RDONLY | O_NONBLOCK));
	/* Writing through it. */
	TRY("open-wronly", open(P("hello.txt"), O_WRONLY));
	TRY("open-rdwr", open(P("hello.txt"), O_RDWR));
	TRY("open-trunc", open(P("hello.txt"), O_RDONLY | O_TRUNC));
	TRY("open-append", open(P("hello.txt"), O_WRONLY | O_APPEND));
	TRY("create", open(P("new.txt"), O_WRONLY | O_CREAT, 0644));
	TRY("create-excl-existing", open(P("hello.txt"), O_WRONLY | O_CREAT | O_EXCL, 0644));
	TRY("creat-through-link", open(P("escape_rel"), O_WRONLY | O_CREAT, 0644));
	TRY("open-dir-write", open(dir, O_WRONLY));
	TRY("unlink", unlink(P("hello.txt")));
	TRY("unlink-missing", unlink(P("missing")));
	TRY("mkdir", mkdir(P("newdir"), 0755));
	TRY("mkdir-existing", mkdir(P("sub"), 0755));
	TRY("rmdir", rmdir(P("sub")));
	TRY("rmdir-mountpoint", rmdir(dir));
	TRY("rename", rename(P("hello.txt"), P("renamed.txt")));
	TRY("rename-out", rename(P("hello.txt"), "/tmp/stolen"));
	TRY("symlink", symlink("/etc/shadow", P("newlink")));
	TRY("link", link(P("hello.txt"), "/tmp/hardlink"));
	TRY("chmod", chmod(P("hello.txt"), 0777));
	TRY("truncate", truncate(P("hello.txt"), 0));
	TRY("utimes", utimes(P("hello.txt"), NULL));
	TRY("access-w", access(P("hello.txt"), W_OK));
	TRY("access-r", access(P("hello.txt"), R_OK));
	int fd = open(P("hello.txt"), O_RDONLY);
	TRY("write-ro-fd", write(fd, "x", 1));
	TRY("ftruncate-ro-fd", ftruncate(fd, 0));
	TRY("fchmod", fchmod(fd, 0777));
	/* Mapping what it should not. */
	void *m;
	errno = 0;
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	printf("mmap-shared-write %s\n", m == MAP_FAILED ? ename(errno) : "OK");
	errno = 0;
	m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, dfd, 0);
	printf("mmap-dir %s\n", m == MAP_FAILED ? ename(errno) : "OK");
	errno = 0;
	m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, 987, 0);
	printf("mmap-badfd %s\n", m == MAP_FAILED ? ename(errno) : "OK");
	int pfd = open(P("hello.txt"), O_PATH);
	errno = 0;
	m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, pfd, 0);
	printf("mmap-opath %s\n", m == MAP_FAILED ? ename(errno) : "OK");
	errno = 0;
	m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	if (m != MAP_FAILED) {
		/* A private copy: writing it changes nothing on the host. */
		memcpy(m, "XXXX", 4);
		char again[8] = {0};
		pread(fd, again, 5, 0);
		printf("mmap-private-write OK %s\n", again);
	} else {
		printf("mmap-private-write %s\n", ename(errno));
	}
#undef P
}

/* shoal_abi: Hypercall::HostFs, HostFsArgs, HOSTFS_*; BootInfo::hypercall_entry. */
enum { HC_HOSTFS = 18, OP_MOUNT = 0, OP_STAT = 1, OP_READ = 2, OP_LIST = 3, OP_READLINK = 4, OP_MAP = 5, OP_MAP_EXEC = 6, OP_UNMAP = 7 };
enum { OP_WRITABLE = 8, OP_CREATE = 9, OP_WRITE = 10, OP_TRUNCATE = 11, OP_UNLINK = 12, OP_MKDIR = 13, OP_RENAME = 15, OP_CHMOD = 17 };
struct hostfs_args {
	uint64_t op, mount, path, path_len, off, buf, len;
	int64_t ret;
};

static void hypercall(uint64_t nr, void *arg)
{
	uint64_t entry = *(volatile uint64_t *)(uintptr_t)(0x10000 + 72);
	if (entry) {
		((void (*)(uint64_t, uint64_t))entry)(nr, (uint64_t)(uintptr_t)arg);
	} else {
		uint16_t port = 0x500 + nr;
		uint32_t a = (uint32_t)(uintptr_t)arg;
		__asm__ volatile("out %0, %1" : : "a"(a), "Nd"(port) : "memory");
	}
}

static const char *raw_ename(int64_t r)
{
	return r >= 0 ? "OK" : ename((int)-r);
}

static void raw_op(const char *name, uint64_t op, uint64_t mount, const char *path, uint64_t path_len, void *buf, uint64_t len)
{
	static struct hostfs_args a;
	a = (struct hostfs_args){op, mount, (uint64_t)(uintptr_t)path, path_len, 0, (uint64_t)(uintptr_t)buf, len, 0};
	hypercall(HC_HOSTFS, &a);
	printf("%s %s\n", name, raw_ename(a.ret));
}

/* HOSTFS_MAP and HOSTFS_UNMAP with hostile ranges, offsets and files. */
static int64_t raw_map(const char *name, uint64_t op, const char *path, uint64_t off, uint64_t addr, uint64_t len)
{
	static struct hostfs_args a;
	a = (struct hostfs_args){op, 0, (uint64_t)(uintptr_t)path, path ? strlen(path) : 0, off, addr, len, 0};
	hypercall(HC_HOSTFS, &a);
	printf("%s %s", name, raw_ename(a.ret));
	if (a.ret >= 0 && op != OP_UNMAP)
		printf(" %lld", (long long)a.ret);
	printf("\n");
	return a.ret;
}

static void raw_maps(void)
{
	uint64_t pg = 4096;
	char *area = mmap(NULL, 3 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED) {
		printf("raw-map-area %s\n", ename(errno));
		return;
	}
	uint64_t at = (uint64_t)(uintptr_t)area;
	if (raw_map("raw-map-ok", OP_MAP, "hello.txt", 0, at, 2 * pg) == (int64_t)pg)
		printf("raw-map-shows %.11s then %d\n", area, area[pg - 1]);
	if (raw_map("raw-unmap-ok", OP_UNMAP, NULL, PROT_READ | PROT_WRITE, at, 2 * pg) == 0) {
		area[0] = 'x';
		printf("raw-unmap-zero %d %d\n", area[1], area[pg]);
	}
	raw_map("raw-map-big-tail", OP_MAP, "sub/big.bin", 48 * pg, at, 3 * pg);
	raw_map("raw-map-past-end", OP_MAP, "hello.txt", 16 * pg, at, pg);
	raw_map("raw-map-code", OP_MAP, "hello.txt", 0, (uint64_t)(uintptr_t)&raw_maps & ~(pg - 1), pg);
	raw_map("raw-map-low", OP_MAP, "hello.txt", 0, 0, pg);
	raw_map("raw-map-outside", OP_MAP, "hello.txt", 0, 0xfffffffffff000ull, pg);
	raw_map("raw-map-wrap", OP_MAP, "hello.txt", 0, at, 0 - pg);
	raw_map("raw-map-unaligned", OP_MAP, "hello.txt", 0, at + 1, pg);
	raw_map("raw-map-odd-len", OP_MAP, "hello.txt", 0, at, 100);
	raw_map("raw-map-empty", OP_MAP, "hello.txt", 0, at, 0);
	raw_map("raw-map-odd-off", OP_MAP, "hello.txt", 1, at, pg);
	raw_map("raw-map-dotdot", OP_MAP, "../../../../etc/shadow", 0, at, pg);
	raw_map("raw-map-link", OP_MAP, "escape_abs", 0, at, pg);
	raw_map("raw-map-dir", OP_MAP, "sub", 0, at, pg);
	raw_map("raw-map-fifo", OP_MAP, "fifo", 0, at, pg);
	raw_map("raw-map-exec", OP_MAP_EXEC, "hello.txt", 0, at, pg);
	raw_map("raw-unmap-code", OP_UNMAP, NULL, PROT_READ, (uint64_t)(uintptr_t)&raw_maps & ~(pg - 1), pg);
	raw_map("raw-unmap-exec", OP_UNMAP, NULL, PROT_READ | PROT_EXEC, at, pg);
	raw_map("raw-unmap-prot", OP_UNMAP, NULL, 0x10, at, pg);
	raw_map("raw-unmap-back", OP_UNMAP, NULL, PROT_READ | PROT_WRITE, at, 3 * pg);
}

static long raw_syscall4(long nr, long a, long b, long c, long d)
{
	long r;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall" : "=a"(r) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
	return r;
}

static long raw_syscall6(long nr, long a, long b, long c, long d, long e, long f)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall" : "=a"(r) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
	return r;
}

static void raw(const char *tender)
{
	static char buf[8192];
	char *s;
#define R(name, op, path, b, l) raw_op(name, op, 0, path, (s = (path)) ? strlen(s) : 0, b, l)
	R("raw-read-ok", OP_READ, "hello.txt", buf, sizeof buf);
	R("raw-dotdot", OP_READ, "../../../../etc/shadow", buf, sizeof buf);
	R("raw-inner-dotdot", OP_STAT, "sub/../hello.txt", buf, sizeof buf);
	R("raw-absolute", OP_READ, "/etc/shadow", buf, sizeof buf);
	R("raw-link-rel", OP_READ, "escape_rel", buf, sizeof buf);
	R("raw-link-abs", OP_READ, "escape_abs", buf, sizeof buf);
	R("raw-link-dir", OP_READ, "escape_dir/shadow", buf, sizeof buf);
	R("raw-link-magic", OP_READ, "magic_root", buf, sizeof buf);
	R("raw-list-link", OP_LIST, "escape_dir", buf, sizeof buf);
	R("raw-fifo", OP_READ, "fifo", buf, sizeof buf);
	R("raw-dir-read", OP_READ, "sub", buf, sizeof buf);
	R("raw-buf-code", OP_READ, "hello.txt", (void *)(uintptr_t)&raw, 16);
	R("raw-buf-outside", OP_READ, "hello.txt", (void *)(uintptr_t)0xfffffffffff000ull, 16);
	R("raw-buf-low", OP_READ, "hello.txt", (void *)(uintptr_t)0x10, 16);
	R("raw-buf-wrap", OP_READ, "hello.txt", buf, (uint64_t)-1);
	R("raw-list-tiny", OP_LIST, "", buf, 8);
	raw_op("raw-path-outside", OP_READ, 0, (const char *)(uintptr_t)0xfffffffffff000ull, 8, buf, sizeof buf);
	raw_op("raw-path-long", OP_READ, 0, buf, 1 << 20, buf, sizeof buf);
	raw_op("raw-path-nul", OP_READ, 0, "hello.txt\0x", 11, buf, sizeof buf);
	raw_op("raw-mount-99", OP_READ, 99, "hello.txt", 9, buf, sizeof buf);
	raw_op("raw-mount-huge", OP_READ, (uint64_t)-1, "hello.txt", 9, buf, sizeof buf);
	raw_op("raw-op-bad", 77, 0, "hello.txt", 9, buf, sizeof buf);
	raw_op("raw-mount-name-99", OP_MOUNT, 99, "", 0, buf, sizeof buf);
#undef R
	raw_maps();
	if (strcmp(tender, "spt") == 0) {
		/* The host calls the filter allows, made by the guest itself,
		 * beneath the mount's descriptor (shoal-spt MOUNT_FD0) without
		 * RESOLVE_BENEATH: the read-only clone and the empty root hold. */
		struct {
			uint64_t flags, mode, resolve;
		} how = {O_RDONLY, 0, 0};
		long r = raw_syscall4(437, 1000, (long)"../../../../etc/shadow", (long)&how, 24);
		printf("sys-openat2-dotdot %s\n", r >= 0 ? "OK" : ename((int)-r));
		r = raw_syscall4(437, 1000, (long)"/etc/shadow", (long)&how, 24);
		printf("sys-openat2-absolute %s\n", r >= 0 ? "OK" : ename((int)-r));
		r = raw_syscall4(437, 1000, (long)"escape_abs", (long)&how, 24);
		printf("sys-openat2-link-abs %s\n", r >= 0 ? "OK" : ename((int)-r));
		how.flags = O_WRONLY | O_CREAT;
		how.mode = 0644;
		r = raw_syscall4(437, 1000, (long)"planted", (long)&how, 24);
		printf("sys-openat2-create %s\n", r >= 0 ? "OK" : ename((int)-r));
		how.flags = O_WRONLY;
		how.mode = 0;
		r = raw_syscall4(437, 1000, (long)"hello.txt", (long)&how, 24);
		printf("sys-openat2-write %s\n", r >= 0 ? "OK" : ename((int)-r));
		/* A mounted file mapped privately and read-only over its own
		 * memory by the guest itself: what HOSTFS_MAP does, allowed. */
		how.flags = O_RDONLY;
		r = raw_syscall4(437, 1000, (long)"hello.txt", (long)&how, 24);
		char *area = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (r >= 0 && area != MAP_FAILED) {
			long m = raw_syscall6(9, (long)area, 4096, PROT_READ, MAP_PRIVATE | MAP_FIXED, r, 0);
			printf("sys-mmap-mounted %s %.5s\n", m >= 0 ? "OK" : ename((int)-m), m >= 0 ? area : "");
		}
		fflush(stdout);
		/* Not beneath a mount's descriptor: the filter kills. */
		how.flags = O_RDONLY;
		r = raw_syscall4(437, -100, (long)"/etc/shadow", (long)&how, 24);
		printf("sys-openat2-cwd survived %ld\n", r);
	}
}

static void rw(const char *w, const char *r, const char *tender)
{
	char p[512], q[512];
#define W(n) (snprintf(p, sizeof p, "%s/%s", w, n), p)
#define W2(n) (snprintf(q, sizeof q, "%s/%s", w, n), q)
	umask(022);
	int fd = open(W("new.txt"), O_WRONLY | O_CREAT | O_EXCL, 0664);
	printf("create %s\n", fd >= 0 ? "OK" : ename(errno));
	TRY("write", write(fd, "hello rw\n", 9) == 9 ? 0 : -1);
	TRY("pwrite", pwrite(fd, "RW", 2, 6) == 2 ? 0 : -1);
	TRY("fsync", fsync(fd));
	TRY("ftruncate-grow", ftruncate(fd, 12));
	TRY("ftruncate-back", ftruncate(fd, 9));
	close(fd);
	struct stat st;
	stat(W("new.txt"), &st);
	printf("mode %o size %lld\n", (unsigned)(st.st_mode & 07777), (long long)st.st_size);
	fd = open(W("new.txt"), O_WRONLY | O_APPEND);
	TRY("append", write(fd, "more\n", 5) == 5 ? 0 : -1);
	close(fd);
	TRY("create-excl-existing", open(W("new.txt"), O_WRONLY | O_CREAT | O_EXCL, 0644));
	fd = open(W("new.txt"), O_RDONLY);
	char buf[64] = {0};
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == '\n')
			buf[i] = '|';
	printf("read-back %s\n", buf);
	TRY("mkdir", mkdir(W("d"), 0750));
	stat(W("d"), &st);
	printf("dir-mode %o\n", (unsigned)(st.st_mode & 07777));
	TRY("mkdir-existing", mkdir(W("d"), 0750));
	TRY("rename", rename(W("new.txt"), W2("d/moved.txt")));
	TRY("rename-gone", access(W("new.txt"), F_OK));
	TRY("truncate", truncate(W("d/moved.txt"), 5));
	TRY("chmod", chmod(W("d/moved.txt"), 0600));
	stat(W("d/moved.txt"), &st);
	printf("chmod-mode %o size %lld\n", (unsigned)(st.st_mode & 07777), (long long)st.st_size);
	struct timeval tv[2] = {{1000000000, 0}, {1000000000, 0}};
	TRY("utimes", utimes(W("d/moved.txt"), tv));
	stat(W("d/moved.txt"), &st);
	printf("mtime %lld\n", (long long)st.st_mtime);
	TRY("access-w", access(W("d/moved.txt"), W_OK));
	TRY("unlink", unlink(W("gone.txt")));
	TRY("unlink-missing", unlink(W("gone.txt")));
	TRY("unlink-dir", unlink(W("d")));
	TRY("rmdir-full", rmdir(W("d")));
	TRY("rmdir-empty", rmdir(W("empty")));
	TRY("rmdir-file", rmdir(W("d/moved.txt")));
	TRY("rename-noreplace", syscall(SYS_renameat2, AT_FDCWD, W("keep.txt"), AT_FDCWD, W2("d/moved.txt"), 1));
	TRY("rename-out", rename(W("keep.txt"), "/tmp/stolen"));
	TRY("symlink", symlink("/etc/shadow", W("newlink")));
	TRY("link", link(W("keep.txt"), W2("hard")));
	TRY("mkfifo", mkfifo(W("fifo"), 0644));
	/* A link the host directory has is followed by the guest, from the
	 * guest's root: what it creates lands in guest memory (its own /etc),
	 * not on the host. */
	TRY("create-through-abs-link", open(W("escape_dir/planted"), O_WRONLY | O_CREAT, 0644));
	TRY("create-over-link", open(W("escape_abs"), O_WRONLY | O_CREAT | O_EXCL, 0644));
	/* The read-only mount beside it. */
	snprintf(q, sizeof q, "%s/new.txt", r);
	TRY("ro-create", open(q, O_WRONLY | O_CREAT, 0644));
	snprintf(q, sizeof q, "%s/hello.txt", r);
	TRY("ro-write", open(q, O_WRONLY));
	TRY("ro-unlink", unlink(q));
	/* The tender's own checks, asked directly. */
	static char data[8] = "xx";
	static const char to_out[] = "../stolen";
#define RW(name, op, m, path, off, b, l) do { \
		static struct hostfs_args a; \
		a = (struct hostfs_args){op, m, (uint64_t)(uintptr_t)(path), strlen(path), off, (uint64_t)(uintptr_t)(b), l, 0}; \
		hypercall(HC_HOSTFS, &a); \
		printf("%s %s\n", name, raw_ename(a.ret)); \
	} while (0)
	RW("raw-writable-0", OP_WRITABLE, 0, "", 0, 0, 0);
	RW("raw-writable-1", OP_WRITABLE, 1, "", 0, 0, 0);
	RW("raw-create-dotdot", OP_CREATE, 0, "../planted", 0644, 0, 1);
	RW("raw-create-abs", OP_CREATE, 0, "/planted", 0644, 0, 1);
	RW("raw-create-via-link", OP_CREATE, 0, "escape_dir/planted", 0644, 0, 1);
	RW("raw-create-on-link", OP_CREATE, 0, "escape_abs", 0644, 0, 0);
	RW("raw-write-link", OP_WRITE, 0, "escape_abs", 0, data, 2);
	RW("raw-truncate-link", OP_TRUNCATE, 0, "escape_abs", 0, 0, 0);
	RW("raw-unlink-dotdot", OP_UNLINK, 0, "..", 0, 0, 0);
	RW("raw-unlink-top", OP_UNLINK, 0, "", 0, 0, 0);
	RW("raw-unlink-via-link", OP_UNLINK, 0, "escape_dir/shadow", 0, 0, 0);
	RW("raw-mkdir-via-link", OP_MKDIR, 0, "escape_dir/x", 0755, 0, 0);
	RW("raw-rename-out", OP_RENAME, 0, "keep.txt", 0, to_out, sizeof to_out - 1);
	RW("raw-rename-via-link", OP_RENAME, 0, "keep.txt", 0, "escape_dir/x", 12);
	RW("raw-chmod-link", OP_CHMOD, 0, "escape_abs", 0777, 0, 0);
	RW("raw-write-ro", OP_WRITE, 1, "hello.txt", 0, data, 2);
	RW("raw-create-ro", OP_CREATE, 1, "planted", 0644, 0, 1);
	RW("raw-write-buf-outside", OP_WRITE, 0, "keep.txt", 0, (void *)(uintptr_t)0xfffffffffff000ull, 16);
	RW("raw-op-bad", 99, 0, "keep.txt", 0, 0, 0);
#undef RW
	if (strcmp(tender, "spt") == 0) {
		/* The guest making the host calls itself (spt shares the
		 * process): the writable clone's links resolve in the empty
		 * root, the read-only clone stays read-only. */
		long rr = raw_syscall4(SYS_mkdirat, 1000, (long)"escape_dir/x", 0755, 0);
		printf("sys-mkdirat-via-link %s\n", rr >= 0 ? "OK" : ename((int)-rr));
		rr = raw_syscall4(SYS_unlinkat, 1001, (long)"hello.txt", 0, 0);
		printf("sys-unlinkat-ro %s\n", rr >= 0 ? "OK" : ename((int)-rr));
		rr = raw_syscall4(SYS_mkdirat, 1000, (long)"/abs", 0755, 0);
		printf("sys-mkdirat-abs %s\n", rr >= 0 ? "OK" : ename((int)-rr));
	}
#undef W
#undef W2
}

static const char *res(long r)
{
	return r >= 0 ? "OK" : ename(errno);
}

static void files(const char *ro, const char *rw, const char *tender)
{
	char buf[256], other[512], dir[512];
	struct stat st;
	int fd = open(ro, O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
	buf[n > 0 ? n : 0] = 0;
	printf("ro-read %s %s", res(n), buf);
	if (fstat(fd, &st) == 0)
		printf("ro-stat mode %o size %lld\n", st.st_mode, (long long)st.st_size);
	char *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
	printf("ro-mmap %s %.10s\n", m == MAP_FAILED ? ename(errno) : "OK", m == MAP_FAILED ? "" : m);
	close(fd);
	printf("ro-open-write %s\n", res(open(ro, O_WRONLY)));
	printf("ro-open-rdwr %s\n", res(open(ro, O_RDWR)));
	printf("ro-open-trunc %s\n", res(open(ro, O_RDONLY | O_TRUNC)));
	printf("ro-chmod %s\n", res(chmod(ro, 0777)));
	printf("ro-truncate %s\n", res(truncate(ro, 0)));
	printf("ro-unlink %s\n", res(unlink(ro)));
	snprintf(other, sizeof other, "%s.moved", ro);
	printf("ro-rename-away %s\n", res(rename(ro, other)));
	int t = open("/tmp/over", O_CREAT | O_WRONLY, 0644);
	close(t);
	printf("ro-rename-over %s\n", res(rename("/tmp/over", ro)));
	snprintf(other, sizeof other, "%s/x", ro);
	printf("ro-beneath %s\n", res(open(other, O_RDONLY)));
	printf("ro-mkdir-beneath %s\n", res(mkdir(other, 0755)));
	/* The file is listed in its directory under its name. */
	snprintf(dir, sizeof dir, "%s", ro);
	char *slash = strrchr(dir, '/');
	const char *name = slash + 1;
	*slash = 0;
	DIR *d = opendir(*dir ? dir : "/");
	int listed = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		listed |= strcmp(e->d_name, name) == 0;
	if (d)
		closedir(d);
	printf("ro-listed %d\n", listed);

	fd = open(rw, O_RDWR);
	printf("rw-open %s\n", res(fd));
	n = pwrite(fd, "GUEST", 5, 0);
	printf("rw-pwrite %s %zd\n", res(n), n);
	printf("rw-fsync %s\n", res(fsync(fd)));
	printf("rw-ftruncate %s\n", res(ftruncate(fd, 12)));
	close(fd);
	fd = open(rw, O_WRONLY | O_APPEND);
	n = write(fd, "+tail\n", 6);
	printf("rw-append %s %zd\n", res(n), n);
	close(fd);
	printf("rw-chmod %s\n", res(chmod(rw, 0640)));
	struct timeval tv[2] = {{1000000000, 0}, {1000000000, 0}};
	printf("rw-utimes %s\n", res(utimes(rw, tv)));
	if (stat(rw, &st) == 0)
		printf("rw-stat mode %o size %lld mtime %lld\n", st.st_mode, (long long)st.st_size, (long long)st.st_mtime);
	fd = open(rw, O_RDONLY);
	n = read(fd, buf, sizeof buf - 1);
	buf[n > 0 ? n : 0] = 0;
	close(fd);
	printf("rw-read-back %s", buf);
	printf("rw-unlink %s\n", res(unlink(rw)));
	snprintf(other, sizeof other, "%s.new", rw);
	printf("rw-rename-away %s\n", res(rename(rw, other)));
	snprintf(other, sizeof other, "%s/x", rw);
	printf("rw-symlink-beneath %s\n", res(symlink("/etc/shadow", other)));
	printf("rw-create-beneath %s\n", res(open(other, O_CREAT | O_WRONLY, 0644)));

	/* The tender asked directly, with paths a file mount has none of. */
	static char hb[8192];
#define RF(name, op, mount, path, off, b, l)                                                                       \
	do {                                                                                                       \
		static struct hostfs_args a;                                                                       \
		a = (struct hostfs_args){op, mount, (uint64_t)(uintptr_t)(path), strlen(path), off, (uint64_t)(uintptr_t)(b), l, 0}; \
		hypercall(HC_HOSTFS, &a);                                                                          \
		printf("%s %s", name, raw_ename(a.ret));                                                           \
		if (op == OP_WRITABLE && a.ret >= 0)                                                               \
			printf(" %lld", (long long)a.ret);                                                         \
		printf("\n");                                                                                      \
	} while (0)
	RF("raw-kind-ro", OP_WRITABLE, 0, "", 0, 0, 0);
	RF("raw-kind-rw", OP_WRITABLE, 1, "", 0, 0, 0);
	RF("raw-read-top", OP_READ, 0, "", 0, hb, sizeof hb);
	RF("raw-read-name", OP_READ, 0, "x", 0, hb, sizeof hb);
	RF("raw-read-dotdot", OP_READ, 0, "..", 0, hb, sizeof hb);
	RF("raw-read-abs", OP_READ, 0, "/etc/shadow", 0, hb, sizeof hb);
	RF("raw-stat-dotdot", OP_STAT, 1, "../shadow", 0, hb, sizeof hb);
	RF("raw-list", OP_LIST, 0, "", 0, hb, sizeof hb);
	RF("raw-readlink", OP_READLINK, 0, "", 0, hb, sizeof hb);
	RF("raw-write-ro", OP_WRITE, 0, "", 0, "x", 1);
	RF("raw-truncate-ro", OP_TRUNCATE, 0, "", 0, 0, 0);
	RF("raw-chmod-ro", OP_CHMOD, 0, "", 0777, 0, 0);
	RF("raw-write-name", OP_WRITE, 1, "../../etc/passwd", 0, "x", 1);
	RF("raw-create", OP_CREATE, 1, "planted", 0644, 0, 1);
	RF("raw-unlink", OP_UNLINK, 1, "", 0, 0, 0);
	RF("raw-mkdir", OP_MKDIR, 1, "d", 0755, 0, 0);
	RF("raw-rename", OP_RENAME, 1, "", 0, "x", 1);
	RF("raw-write-buf-outside", OP_WRITE, 1, "", 0, (void *)(uintptr_t)0xfffffffffff000ull, 16);
	char *area = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	RF("raw-map-name", OP_MAP, 0, "x", 0, area, 4096);
	RF("raw-map-top", OP_MAP, 1, "", 0, area, 4096);
	printf("raw-map-shows %.5s\n", area);
#undef RF
	if (strcmp(tender, "spt") == 0) {
		/* The guest making host calls on the mounts' descriptors
		 * itself (shoal-spt MOUNT_FD0 = 1000, 1001): nothing beneath a
		 * file, and the read-only one stays read-only. */
		struct {
			uint64_t flags, mode, resolve;
		} how = {O_RDONLY, 0, 0};
		long r = raw_syscall4(437, 1000, (long)"../../../etc/shadow", (long)&how, 24);
		printf("sys-openat2-beneath %s\n", r >= 0 ? "OK" : ename((int)-r));
		r = raw_syscall4(SYS_pwrite64, 1000, (long)"x", 1, 0);
		printf("sys-pwrite-ro %s\n", r >= 0 ? "OK" : ename((int)-r));
		r = raw_syscall4(SYS_fchmod, 1000, 0777, 0, 0);
		printf("sys-fchmod-ro %s\n", r >= 0 ? "OK" : ename((int)-r));
		r = raw_syscall4(SYS_utimensat, 1000, 0, 0, 0);
		printf("sys-futimens-ro %s\n", r >= 0 ? "OK" : ename((int)-r));
		r = raw_syscall4(SYS_mkdirat, 1001, (long)"x", 0755, 0);
		printf("sys-mkdirat-rw %s\n", r >= 0 ? "OK" : ename((int)-r));
		r = raw_syscall4(SYS_unlinkat, 1001, (long)"", 0, 0);
		printf("sys-unlinkat-rw %s\n", r >= 0 ? "OK" : ename((int)-r));
	}
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: mount tree|hostile|raw DIR [tender] | rw WDIR RDIR [tender] | files ROFILE RWFILE [tender]\n");
		return 2;
	}
	if (strcmp(argv[1], "tree") == 0) {
		tree(argv[2], ".");
	} else if (strcmp(argv[1], "hostile") == 0) {
		hostile(argv[2]);
	} else if (strcmp(argv[1], "rw") == 0 && argc > 3) {
		rw(argv[2], argv[3], argc > 4 ? argv[4] : "");
	} else if (strcmp(argv[1], "raw") == 0) {
		raw(argc > 3 ? argv[3] : "");
	} else if (strcmp(argv[1], "files") == 0 && argc > 3) {
		files(argv[2], argv[3], argc > 4 ? argv[4] : "");
	} else {
		return 2;
	}
	return 0;
}
