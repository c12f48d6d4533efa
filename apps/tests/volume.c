/* The volume tests' program (tests/volume.rs; `shoal run --volume`).
 *
 *   volume count DIR    reads DIR/count (0 if absent), adds one, writes it
 *                       back; keeps DIR/runs/N for this run N and deletes
 *                       the previous run's file; prints DIR/seed if there.
 *   volume crash DIR    writes DIR/count = 999, then faults (NULL write):
 *                       the tender must keep the host directory unchanged.
 *   volume hostile CASE a hostile guest: hands the tender an archive of its
 *                       own with the VolumeSave hypercall, then halts with
 *                       the Halt hypercall itself (so the kernel's own save
 *                       never replaces it). CASE: slash, dotdot, below-link,
 *                       huge, escape-link (a valid archive whose symlink
 *                       points out of the volume).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void die(const char *what, const char *path)
{
	printf("%s %s: %s\n", what, path, strerror(errno));
	exit(1);
}

static int count(const char *dir)
{
	char path[512], buf[32] = { 0 };
	long n = 0;
	snprintf(path, sizeof path, "%s/seed", dir);
	FILE *f = fopen(path, "r");
	if (f) {
		char seed[64] = { 0 };
		if (fgets(seed, sizeof seed, f))
			printf("seed %s", seed);
		fclose(f);
	}
	snprintf(path, sizeof path, "%s/count", dir);
	f = fopen(path, "r");
	if (f) {
		if (fgets(buf, sizeof buf, f))
			n = strtol(buf, NULL, 10);
		fclose(f);
	}
	n++;
	f = fopen(path, "w");
	if (!f)
		die("open", path);
	fprintf(f, "%ld\n", n);
	if (fclose(f) != 0)
		die("close", path);
	snprintf(path, sizeof path, "%s/runs", dir);
	if (mkdir(path, 0755) != 0 && errno != EEXIST)
		die("mkdir", path);
	snprintf(path, sizeof path, "%s/runs/%ld", dir, n);
	f = fopen(path, "w");
	if (!f)
		die("open", path);
	fprintf(f, "run %ld\n", n);
	fclose(f);
	if (n > 1) {
		snprintf(path, sizeof path, "%s/runs/%ld", dir, n - 1);
		if (unlink(path) != 0)
			die("unlink", path);
	}
	printf("count %ld\n", n);
	return 0;
}

/* shoal_abi: Hypercall::{Halt, VolumeSave}; BootInfo::hypercall_entry. */
enum { HC_HALT = 2, HC_VOLUME_SAVE = 11 };

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

struct entry {
	const char *path;
	uint32_t kind; /* 1 file, 2 dir, 3 symlink */
	const char *data;
};

static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

/* The shoal-archive format (crates/shoal-archive), entries as given. */
static size_t build(const struct entry *e, int n, unsigned char *out)
{
	size_t strings_off = 32 + 32 * (size_t)n, strings_len = 0;
	for (int i = 0; i < n; i++)
		strings_len += strlen(e[i].path);
	size_t data = (strings_off + strings_len + 7) & ~(size_t)7, path = 0;
	memcpy(out, "SHOALFS1", 8);
	put32(out + 8, 1);
	put32(out + 12, n);
	put64(out + 16, strings_off);
	put64(out + 24, strings_len);
	for (int i = 0; i < n; i++) {
		unsigned char *r = out + 32 + 32 * i;
		size_t plen = strlen(e[i].path), dlen = e[i].data ? strlen(e[i].data) : 0;
		put32(r, path);
		put32(r + 4, plen);
		put32(r + 8, e[i].kind);
		put32(r + 12, e[i].kind == 3 ? 0777 : 0644);
		put64(r + 16, e[i].kind == 2 ? 0 : data);
		put64(r + 24, dlen);
		memcpy(out + strings_off + path, e[i].path, plen);
		path += plen;
		if (dlen)
			memcpy(out + data, e[i].data, dlen);
		if (e[i].kind != 2)
			data = (data + dlen + 7) & ~(size_t)7;
	}
	return data;
}

static int hostile(const char *what)
{
	static unsigned char buf[4096];
	struct { uint64_t addr, len; int64_t ret; } save = { (uint64_t)(uintptr_t)buf, 0, 0 };
	if (strcmp(what, "slash") == 0) {
		struct entry e[] = { { "x/passwd", 1, "owned\n" } };
		save.len = build(e, 1, buf);
	} else if (strcmp(what, "dotdot") == 0) {
		struct entry e[] = { { "..", 2, 0 }, { "../escaped", 1, "owned\n" } };
		save.len = build(e, 2, buf);
	} else if (strcmp(what, "below-link") == 0) {
		struct entry e[] = { { "out", 3, "/tmp" }, { "out/escaped", 1, "owned\n" } };
		save.len = build(e, 2, buf);
	} else if (strcmp(what, "huge") == 0) {
		struct entry e[] = { { "f", 1, "x" } };
		build(e, 1, buf);
		save.len = 1ull << 40;
	} else if (strcmp(what, "escape-link") == 0) {
		struct entry e[] = { { "esc", 3, ".." }, { "f", 1, "kept\n" } };
		save.len = build(e, 2, buf);
	} else {
		printf("unknown case %s\n", what);
		return 2;
	}
	hypercall(HC_VOLUME_SAVE, &save);
	/* stderr: hvt's kernel buffers stdout, and the Halt below is raw. */
	fprintf(stderr, "volume save: %ld\n", (long)save.ret);
	int64_t status = 0;
	hypercall(HC_HALT, &status);
	return 3; /* not reached */
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "count") == 0)
		return count(argv[2]);
	if (argc == 3 && strcmp(argv[1], "crash") == 0) {
		char path[512];
		snprintf(path, sizeof path, "%s/count", argv[2]);
		FILE *f = fopen(path, "w");
		if (!f)
			die("open", path);
		fprintf(f, "999\n");
		fclose(f);
		*(volatile int *)0 = 1;
		return 0;
	}
	if (argc == 3 && strcmp(argv[1], "hostile") == 0)
		return hostile(argv[2]);
	printf("usage: volume count|crash DIR, volume hostile CASE\n");
	return 2;
}
