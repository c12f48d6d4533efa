/* vdso: the vDSO as a static glibc program finds it, natively and on
 * shoal. Looks up the five clock functions in the object AT_SYSINFO_EHDR
 * points at as dlvsym does (DT_HASH or DT_GNU_HASH, the symbol version
 * LINUX_2.6 through DT_VERSYM/DT_VERDEF), calls them directly and
 * compares with the system calls and with the host's clock (argv[1]: the
 * host's time in seconds when the test started).
 *
 *   vdso HOST_SECONDS -> one line per check, the same natively and on
 *                        shoal; status 0 when all hold
 */
#include <elf.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef long (*cgt_fn)(long, struct timespec *);
typedef long (*gtod_fn)(struct timeval *, void *);
typedef long (*time_fn)(long *);
typedef long (*getcpu_fn)(unsigned *, unsigned *, void *);

static uintptr_t base, bias;
static const Elf64_Sym *symtab;
static const char *strtab;
static const Elf64_Word *hash;
static const uint32_t *gnuhash;
static const Elf64_Versym *versym;
static const Elf64_Verdef *verdef;

static int parse(void)
{
	base = getauxval(AT_SYSINFO_EHDR);
	if (!base)
		return -1;
	const Elf64_Ehdr *eh = (const void *)base;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_type != ET_DYN)
		return -1;
	const Elf64_Phdr *ph = (const void *)(base + eh->e_phoff);
	const Elf64_Dyn *dyn = NULL;
	int load = 0;
	for (int i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type == PT_LOAD && !load) {
			bias = base + ph[i].p_offset - ph[i].p_vaddr;
			load = 1;
		} else if (ph[i].p_type == PT_DYNAMIC)
			dyn = (const void *)(base + ph[i].p_offset);
	}
	if (!load || !dyn)
		return -1;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		const void *p = (const void *)(bias + dyn->d_un.d_ptr);
		switch (dyn->d_tag) {
		case DT_SYMTAB: symtab = p; break;
		case DT_STRTAB: strtab = p; break;
		case DT_HASH: hash = p; break;
		case DT_GNU_HASH: gnuhash = p; break;
		case DT_VERSYM: versym = p; break;
		case DT_VERDEF: verdef = p; break;
		}
	}
	return symtab && strtab && (hash || gnuhash) && versym && verdef ? 0 : -1;
}

static uint32_t gnu_hash(const char *s)
{
	uint32_t h = 5381;
	for (; *s; s++)
		h = h * 33 + (unsigned char)*s;
	return h;
}

/* The version index of `name` in DT_VERDEF, or -1. */
static int version_index(const char *name)
{
	const Elf64_Verdef *d = verdef;
	for (;;) {
		const Elf64_Verdaux *a = (const void *)((const char *)d + d->vd_aux);
		if (!(d->vd_flags & VER_FLG_BASE) && !strcmp(strtab + a->vda_name, name))
			return d->vd_ndx & 0x7fff;
		if (!d->vd_next)
			return -1;
		d = (const void *)((const char *)d + d->vd_next);
	}
}

static int matches(uint32_t i, const char *name, int ver)
{
	const Elf64_Sym *s = &symtab[i];
	int type = ELF64_ST_TYPE(s->st_info), bind = ELF64_ST_BIND(s->st_info);
	return (type == STT_FUNC || type == STT_NOTYPE) && (bind == STB_GLOBAL || bind == STB_WEAK) && s->st_shndx != SHN_UNDEF &&
	       !strcmp(strtab + s->st_name, name) && (versym[i] & 0x7fff) == ver;
}

/* dlvsym(vdso, name, "LINUX_2.6"). */
static void *lookup(const char *name)
{
	int ver = version_index("LINUX_2.6");
	if (ver < 0)
		return NULL;
	if (hash) {
		uint32_t nbucket = hash[0];
		const Elf64_Word *bucket = hash + 2, *chain = bucket + nbucket;
		uint32_t h = 0;
		for (const unsigned char *c = (const void *)name; *c; c++) {
			h = (h << 4) + *c;
			uint32_t g = h & 0xf0000000;
			if (g)
				h ^= g >> 24;
			h &= ~g;
		}
		for (uint32_t i = bucket[h % nbucket]; i; i = chain[i])
			if (matches(i, name, ver))
				return (void *)(bias + symtab[i].st_value);
		return NULL;
	}
	uint32_t nbucket = gnuhash[0], symoff = gnuhash[1], bloom = gnuhash[2];
	const uint32_t *bucket = gnuhash + 4 + bloom * 2, *chain = bucket + nbucket;
	uint32_t h = gnu_hash(name);
	for (uint32_t i = bucket[h % nbucket]; i; i++) {
		if ((chain[i - symoff] | 1) == (h | 1) && matches(i, name, ver))
			return (void *)(bias + symtab[i].st_value);
		if (chain[i - symoff] & 1)
			break;
	}
	return NULL;
}

static int64_t ns(struct timespec t)
{
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static volatile sig_atomic_t alarmed;

static void on_alarm(int sig)
{
	(void)sig;
	alarmed = 1;
}

static int failed;

static void check(const char *what, int ok)
{
	printf("%s: %s\n", what, ok ? "yes" : "no");
	if (!ok)
		failed = 1;
}

int main(int argc, char **argv)
{
	long host = argc > 1 ? atol(argv[1]) : 0;
	check("AT_SYSINFO_EHDR points at an ELF object with versioned symbols", parse() == 0);
	if (failed)
		return 1;
	const char *names[] = {"__vdso_clock_gettime", "__vdso_gettimeofday", "__vdso_time", "__vdso_getcpu", "__vdso_clock_getres"};
	void *fn[5];
	for (int i = 0; i < 5; i++) {
		fn[i] = lookup(names[i]);
		char line[80];
		snprintf(line, sizeof line, "%s@LINUX_2.6 resolves", names[i]);
		check(line, fn[i] != NULL);
	}
	if (failed)
		return 1;
	cgt_fn cgt = (cgt_fn)fn[0];
	gtod_fn gtod = (gtod_fn)fn[1];
	time_fn vtime = (time_fn)fn[2];
	getcpu_fn getcpu = (getcpu_fn)fn[3];
	cgt_fn getres = (cgt_fn)fn[4];

	/* Each clock read in the vDSO lies between two reads of the system
	 * call (the same clock), a few ms apart at most. */
	int clocks[] = {CLOCK_REALTIME, CLOCK_MONOTONIC, CLOCK_REALTIME_COARSE, CLOCK_MONOTONIC_COARSE, CLOCK_BOOTTIME, CLOCK_MONOTONIC_RAW};
	const char *cnames[] = {"REALTIME", "MONOTONIC", "REALTIME_COARSE", "MONOTONIC_COARSE", "BOOTTIME", "MONOTONIC_RAW"};
	for (int i = 0; i < 6; i++) {
		struct timespec a, v, b;
		int ok = 1;
		for (int k = 0; k < 100 && ok; k++) {
			ok = syscall(SYS_clock_gettime, clocks[i], &a) == 0 && cgt(clocks[i], &v) == 0 && syscall(SYS_clock_gettime, clocks[i], &b) == 0;
			/* Coarse clocks on Linux lag by up to a tick (4 ms). */
			int64_t slack = (clocks[i] == CLOCK_REALTIME_COARSE || clocks[i] == CLOCK_MONOTONIC_COARSE) ? 10000000 : 0;
			ok = ok && v.tv_nsec >= 0 && v.tv_nsec < 1000000000 && ns(v) + slack >= ns(a) && ns(v) <= ns(b) + slack && ns(b) - ns(a) < 50000000;
		}
		char line[96];
		snprintf(line, sizeof line, "clock_gettime(CLOCK_%s) agrees with the system call", cnames[i]);
		check(line, ok);
	}
	struct timespec now;
	cgt(CLOCK_REALTIME, &now);
	check("CLOCK_REALTIME agrees with the host's clock (within 30 s)", host > 0 && labs(now.tv_sec - host) <= 30);

	/* Monotonic: never backwards over many reads. */
	struct timespec prev, cur;
	cgt(CLOCK_MONOTONIC, &prev);
	int mono = 1;
	for (int k = 0; k < 200000; k++) {
		cgt(CLOCK_MONOTONIC, &cur);
		if (ns(cur) < ns(prev))
			mono = 0;
		prev = cur;
	}
	check("CLOCK_MONOTONIC never goes backwards (200000 reads)", mono);

	struct timeval tv;
	struct timespec ts;
	struct {
		int minuteswest, dsttime;
	} tz = {1, 1};
	int ok = gtod(&tv, &tz) == 0 && syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts) == 0;
	check("gettimeofday agrees with CLOCK_REALTIME", ok && tv.tv_usec >= 0 && tv.tv_usec < 1000000 &&
							       (int64_t)tv.tv_sec * 1000000 + tv.tv_usec <= ns(ts) / 1000 &&
							       ns(ts) / 1000 - ((int64_t)tv.tv_sec * 1000000 + tv.tv_usec) < 50000);
	check("gettimeofday with NULL arguments", gtod(NULL, NULL) == 0);
	long t1 = 0, t0 = vtime(&t1), t2 = syscall(SYS_time, NULL);
	check("time agrees with the system call", t0 == t1 && t0 <= t2 && t2 - t0 <= 1);
	check("time(NULL)", vtime(NULL) >= t0);
	unsigned cpu = 9999, node = 9999;
	check("getcpu", getcpu(&cpu, &node, NULL) == 0 && cpu < 4096 && node < 1024 && getcpu(NULL, NULL, NULL) == 0);
	struct timespec res = {-1, -1};
	check("clock_getres(CLOCK_MONOTONIC) at most 1 ms", getres(CLOCK_MONOTONIC, &res) == 0 && res.tv_sec == 0 && res.tv_nsec > 0 &&
								     res.tv_nsec <= 1000000);
	check("clock_getres(CLOCK_REALTIME, NULL)", getres(CLOCK_REALTIME, NULL) == 0);

	/* Other clocks and bad arguments: the system call's answers (the raw
	 * -errno, as a vDSO function gives it). */
	struct timespec cpu_a, cpu_b;
	check("clock_gettime(CLOCK_PROCESS_CPUTIME_ID)", cgt(CLOCK_PROCESS_CPUTIME_ID, &cpu_a) == 0 &&
							      syscall(SYS_clock_gettime, CLOCK_PROCESS_CPUTIME_ID, &cpu_b) == 0 && ns(cpu_a) <= ns(cpu_b));
	check("clock_gettime(CLOCK_TAI)", cgt(CLOCK_TAI, &ts) == 0 && labs(ts.tv_sec - now.tv_sec) < 100);
	check("clock_gettime(12345) is -EINVAL", cgt(12345, &ts) == -EINVAL);
	check("clock_gettime(-1) is -EINVAL", cgt(-1, &ts) == -EINVAL);
	check("clock_getres(12345) is -EINVAL", getres(12345, &res) == -EINVAL);

	/* libc's own clock_gettime and time agree with the vDSO's. */
	struct timespec l;
	clock_gettime(CLOCK_MONOTONIC, &l);
	cgt(CLOCK_MONOTONIC, &cur);
	check("libc clock_gettime agrees", ns(cur) >= ns(l) && ns(cur) - ns(l) < 50000000);

	/* A signal comes while the program only reads the clock. */
	signal(SIGALRM, on_alarm);
	struct itimerval it = {{0, 0}, {0, 20000}};
	setitimer(ITIMER_REAL, &it, NULL);
	struct timespec start;
	cgt(CLOCK_MONOTONIC, &start);
	do
		cgt(CLOCK_MONOTONIC, &cur);
	while (!alarmed && ns(cur) - ns(start) < 5000000000LL);
	check("SIGALRM arrives while the program spins on the vDSO", alarmed);
	return failed;
}
