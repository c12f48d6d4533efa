/* MAP_SHARED file mappings are the file: stores through
 * one mapping are seen through every other mapping of the same file (from
 * another descriptor, at another offset, in another thread) and by read();
 * write()/pwrite() are seen by the mappings; ftruncate and growth behave as
 * on Linux inside the file (pages wholly past the end are never touched:
 * Linux raises SIGBUS there). No msync anywhere until the end. Prints the
 * same natively (the file in /tmp) and on shoal.
 *
 * argv[1], for the tender tests (tests/syscalls_tender.rs):
 *   protect    mprotect of a shared mapping keeps it the file's (read-only,
 *              PROT_NONE and back): prints, exits 0
 *   rofault    a store into a PROT_READ shared mapping: killed (SIGSEGV)
 *   console    40 KiB written to stdout straight from a shared mapping
 *              (hvt: more than the kernel buffers, so the VMM is handed
 *              the buffer: it must see the file's bytes)
 *   raw-exec   spt: the guest itself mmaps the alias file (fd 3)
 *              executable: the sandbox kills it (159)
 *   raw-code   spt: ... over its own code: killed (159) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PG 4096

static char path[64];
static char *a, *b;
static int fd;

static void show(const char *label, const char *p, size_t n)
{
	printf("%-40s ", label);
	for (size_t i = 0; i < n; i++)
		putchar(p[i] >= 32 && p[i] < 127 ? p[i] : '.');
	putchar('\n');
}

static void file_at(const char *label, off_t off, size_t n)
{
	char buf[64] = { 0 };
	ssize_t r = pread(fd, buf, n, off);
	printf("%-40s %zd ", label, r);
	show("", buf, r > 0 ? (size_t)r : 0);
}

static void *worker(void *arg)
{
	(void)arg;
	/* What main stored through a, seen through b here. */
	show("thread sees main's store via b", b + 500, 6);
	memcpy(a + 600, "thread", 6);
	pwrite(fd, "pw-thr", 6, 700);
	return NULL;
}

static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
	return r;
}

static int modes(const char *mode)
{
	char *p = mmap(NULL, 2 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	if (!strcmp(mode, "protect")) {
		memcpy(p + 10, "before", 6);
		mprotect(p, 2 * PG, PROT_READ);
		pwrite(fd, "RO", 2, 20);
		show("read-only sees pwrite", p + 20, 2);
		mprotect(p, PG, PROT_NONE);
		mprotect(p, 2 * PG, PROT_READ | PROT_WRITE);
		memcpy(p + 30, "after", 5);
		file_at("file sees store after mprotect", 30, 5);
		show("mapping keeps its data", p + 10, 6);
		return 0;
	}
	if (!strcmp(mode, "console")) {
		ftruncate(fd, 10 * PG);
		char *w = mmap(NULL, 10 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		for (int i = 0; i < 10 * PG; i++)
			w[i] = i % 64 == 63 ? '\n' : 'a' + (i / 64) % 26;
		return write(1, w, 10 * PG) == 10 * PG ? 0 : 1;
	}
	if (!strcmp(mode, "rofault")) {
		char *r = mmap(NULL, PG, PROT_READ, MAP_SHARED, fd, 0);
		printf("mapped read-only\n");
		fflush(stdout);
		r[0] = 'x';
		printf("the store went through\n");
		return 0;
	}
	/* The guest's own mmap of the alias file (descriptor 3 without
	 * listeners): never executable, never over its code. */
	long heap = (long)p & ~(long)(PG - 1);
	if (!strcmp(mode, "raw-exec"))
		printf("%ld\n", sys6(9, heap, PG, 7, 0x11, 3, heap + PG));
	else if (!strcmp(mode, "raw-code"))
		printf("%ld\n", sys6(9, (long)show & ~(long)(PG - 1), PG, 3, 0x11, 3, heap));
	return 0;
}

int main(int argc, char **argv)
{
	snprintf(path, sizeof path, "/tmp/mapshared-%d", (int)getpid());
	if (argc > 1) {
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
		ftruncate(fd, 2 * PG);
		int r = modes(argv[1]);
		unlink(path);
		return r;
	}
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ftruncate(fd, 2 * PG) != 0) {
		perror("setup");
		return 1;
	}
	int fd2 = open(path, O_RDWR);
	a = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	b = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd2, 0);
	char *c = mmap(NULL, PG, PROT_READ, MAP_SHARED, fd, PG);
	if (a == MAP_FAILED || b == MAP_FAILED || c == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	printf("distinct mappings %d\n", a != b && b != c);

	/* A store through a: seen through b and by read(), at once. */
	memcpy(a + 100, "hello", 5);
	show("b after store via a", b + 100, 5);
	file_at("pread after store via a", 100, 5);
	/* Through b, into the second page: seen through c (offset PG). */
	memcpy(b + PG + 10, "second", 6);
	show("c after store via b", c + 10, 6);
	show("a after store via b", a + PG + 10, 6);

	/* write() and pwrite() reach every mapping. */
	pwrite(fd, "PWRITE", 6, 200);
	show("a after pwrite", a + 200, 6);
	show("b after pwrite", b + 200, 6);
	lseek(fd2, PG + 20, SEEK_SET);
	write(fd2, "WRITE", 5);
	show("c after write", c + 20, 5);
	show("a after write", a + PG + 20, 5);

	/* Another thread: sees main's store, its own stores and pwrite are
	 * seen by main through the other mapping. */
	memcpy(a + 500, "main!!", 6);
	pthread_t t;
	pthread_create(&t, NULL, worker, NULL);
	pthread_join(t, NULL);
	show("main sees thread's store via b", b + 600, 6);
	show("main sees thread's pwrite via a", a + 700, 6);

	/* ftruncate inside the mapped range: the tail of the new last page
	 * reads as zero, data before it stays. */
	a[PG + 60] = 'Q';
	ftruncate(fd, PG + 50);
	printf("%-40s %d %d\n", "after shrink: byte 60 of page 1, size", a[PG + 60], (int)lseek(fd, 0, SEEK_END));
	show("after shrink: b keeps data", b + PG + 10, 6);
	/* Growing: the new page reads zero, then is shared again. */
	ftruncate(fd, 3 * PG);
	printf("%-40s %d %d\n", "after grow: page 2 byte, byte 60", a[2 * PG + 5], b[PG + 60]);
	a[2 * PG + 5] = 'Z';
	file_at("pread of store into grown page", 2 * PG + 5, 1);
	/* write() past the end grows the file into the mapping. */
	pwrite(fd, "EXTEND", 6, 3 * PG + 1);
	show("b sees file grown by pwrite", b + 3 * PG + 1, 6);

	/* mremap keeps the mapping shared. */
	char *m = mremap(b, 4 * PG, 8 * PG, MREMAP_MAYMOVE);
	if (m == MAP_FAILED) {
		perror("mremap");
		return 1;
	}
	show("remapped sees a's data", m + 100, 5);
	memcpy(m + 2 * PG + 100, "moved", 5);
	show("a sees store via remapped", a + 2 * PG + 100, 5);
	pwrite(fd, "again", 5, 3 * PG + 10);
	show("remapped sees pwrite", m + 3 * PG + 10, 5);

	/* munmap of one mapping leaves the others and the file alone. */
	munmap(m, 8 * PG);
	show("a after munmap of the other", a + 100, 5);
	file_at("file after munmap", 2 * PG + 100, 5);
	/* A read-only shared mapping follows the file too. */
	pwrite(fd, "RO-OK", 5, PG + 30);
	show("read-only mapping after pwrite", c + 30, 5);

	printf("%-40s %d\n", "msync", msync(a, 4 * PG, MS_SYNC));
	munmap(a, 4 * PG);
	munmap(c, PG);
	/* After every mapping is gone, the file holds what they stored. */
	file_at("file keeps mapped stores", 100, 5);
	file_at("file keeps thread's store", 600, 6);
	close(fd2);
	close(fd);
	unlink(path);
	return 0;
}
