/* floor: the cheapest sandboxed start of an image this host allows, for
 * `shoal bench boot`'s floor rows (what any sandbox costs before shoal's own work). Built native and static with
 * musl, it does only what any spt-style sandbox must do before and around
 * a program's first output, and nothing of shoal's own work (no tender, no
 * boot spec, no guest kernel):
 *
 *   floor IMAGE FILTER_FILE [ns]
 *
 *   exec (this program, as the bench starts it), reserve 256 MiB of guest
 *   memory (shoal run's default; anonymous, MAP_NORESERVE, from 64 KiB, at
 *   the image's own addresses as spt's), read each PT_LOAD segment of IMAGE into it (each
 *   range populated with one MADV_POPULATE_WRITE first, as spt does),
 *   install the seccomp filter in FILTER_FILE (spt's own, written there by
 *   the bench: the kernel checks, caches and JIT-compiles as much), write
 *   "hello, world\n" to stdout and exit. With `ns` (root only) it first makes new mount, IPC
 *   and PID namespaces and does the rest in a forked child, which it waits
 *   for, as spt's supervised start does.
 *
 * Exit status: 0, or 1 with a one-line message on stderr. */
#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* From <linux/filter.h> and <linux/seccomp.h>, which musl-gcc's include
 * path does not have. */
struct sock_filter {
	unsigned short code;
	unsigned char jt, jf;
	unsigned int k;
};
struct sock_fprog {
	unsigned short len;
	struct sock_filter *filter;
};
#define BPF_LD 0x00
#define BPF_W 0x00
#define BPF_ABS 0x20
#define BPF_JMP 0x05
#define BPF_JEQ 0x10
#define BPF_K 0x00
#define BPF_RET 0x06
#define BPF_STMT(code, k) { (unsigned short)(code), 0, 0, k }
#define BPF_JUMP(code, k, jt, jf) { (unsigned short)(code), jt, jf, k }
#define SECCOMP_SET_MODE_FILTER 1
#define SECCOMP_RET_ALLOW 0x7fff0000u
#define SECCOMP_RET_TRAP 0x00030000u

#define GUEST_BASE 0x10000UL
#define GUEST_SIZE (256UL << 20) /* shoal run's default --mem */
#define MAX_FILTER 4096

static int fail(const char *what)
{
	fprintf(stderr, "floor: %s\n", what);
	return 1;
}

static int load(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("cannot open the image");
	Elf64_Ehdr eh;
	if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 64)
		return fail("not a 64-bit ELF image");
	Elf64_Phdr ph[64];
	size_t len = (size_t)eh.e_phnum * sizeof(Elf64_Phdr);
	if (pread(fd, ph, len, (off_t)eh.e_phoff) != (ssize_t)len)
		return fail("cannot read the program headers");
	void *mem = mmap((void *)GUEST_BASE, GUEST_SIZE - GUEST_BASE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (mem == MAP_FAILED)
		return fail("cannot reserve guest memory");
	for (int i = 0; i < eh.e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD || ph[i].p_filesz == 0)
			continue;
		if (ph[i].p_vaddr < GUEST_BASE || ph[i].p_vaddr + ph[i].p_memsz > GUEST_SIZE || ph[i].p_filesz > ph[i].p_memsz)
			return fail("a segment lies outside guest memory");
		unsigned long lo = ph[i].p_vaddr & ~0xfffUL, hi = (ph[i].p_vaddr + ph[i].p_filesz + 0xfff) & ~0xfffUL;
		madvise((void *)lo, hi - lo, 23 /* MADV_POPULATE_WRITE; best effort */);
		if (pread(fd, (void *)ph[i].p_vaddr, ph[i].p_filesz, (off_t)ph[i].p_offset) != (ssize_t)ph[i].p_filesz)
			return fail("cannot read a segment");
	}
	close(fd);
	return 0;
}

/* Installs the classic BPF program in file `path` (raw sock_filter
 * records, as `shoal bench boot` writes spt's own filter there). */
static int confine(const char *path)
{
	static struct sock_filter f[MAX_FILTER];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("cannot open the filter file");
	ssize_t n = read(fd, f, sizeof f);
	close(fd);
	if (n <= 0 || n % (ssize_t)sizeof f[0] != 0 || n == (ssize_t)sizeof f)
		return fail("the filter file is not a BPF program of 1..4095 instructions");
	struct sock_fprog prog = { .len = (unsigned short)(n / (ssize_t)sizeof f[0]), .filter = f };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
		return fail("cannot install the seccomp filter");
	return 0;
}

static int run(const char *image, const char *filter)
{
	if (load(image) || confine(filter))
		return 1;
	static const char hello[] = "hello, world\n";
	if (write(1, hello, sizeof hello - 1) != (ssize_t)(sizeof hello - 1))
		return 1;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3 || (argc == 4 && strcmp(argv[3], "ns") != 0) || argc > 4)
		return fail("usage: floor IMAGE FILTER_FILE [ns]");
	if (argc == 3)
		_exit(run(argv[1], argv[2]));
	if (unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID) != 0)
		return fail("cannot make namespaces (not root?)");
	pid_t pid = fork();
	if (pid < 0)
		return fail("cannot fork");
	if (pid == 0)
		_exit(run(argv[1], argv[2]));
	int status;
	if (waitpid(pid, &status, 0) != pid)
		return fail("cannot wait for the child");
	_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}
