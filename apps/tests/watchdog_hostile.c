/* A hostile guest and the hang watchdog: the program makes the
 * hypercalls itself (spt: through the entry in the boot info; hvt: the
 * port, IOPL 3). It registers a preemption area and a fault entry of its
 * own, claims a gated call in progress in the area's watch words, asks
 * the tender to watch it (Preempt/PREEMPT_WATCH) and spins. The watchdog
 * then sends the program to its own fault entry with FAULT_HANG: a guest
 * that lies in the watch words only redirects itself, and the tender goes
 * on. Run with a short --watchdog. */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

/* shoal_abi: BOOT_INFO_ADDR, BootInfo::hypercall_entry's offset,
 * HYPERCALL_PORT_BASE, Hypercall::{Preempt, FaultHandler}, PREEMPT_*,
 * preempt_word::{WATCH, WATCH_SEQ}, FAULT_HANG. */
#define BOOT_INFO 0x10000UL
#define ENTRY_OFFSET 72
#define PORT_BASE 0x500
#define PREEMPT 12
#define FAULT_HANDLER 15
#define PREEMPT_REGISTER 0
#define PREEMPT_WATCH 2
#define FAULT_HANG 0x100

static void hypercall(uint64_t nr, void *args)
{
	uint64_t call = *(volatile uint64_t *)(BOOT_INFO + ENTRY_OFFSET);
	if (call)
		((void (*)(uint64_t, uint64_t))call)(nr, (uint64_t)(uintptr_t)args);
	else
		__asm__ volatile("out %%eax, %%dx" : : "a"((unsigned)(uintptr_t)args), "d"(PORT_BASE + nr) : "memory");
}

static volatile uint64_t area[8] __attribute__((aligned(8)));
static volatile uint64_t armed __attribute__((aligned(8)));

/* Entered by the tender's redirect: only raw system calls. */
static void entry(uint64_t sig, uint64_t addr, uint64_t rip)
{
	(void)addr;
	(void)rip;
	static const char yes[] = "the watchdog sent the program to its own fault entry with FAULT_HANG\n";
	static const char no[] = "the fault entry was entered with another value\n";
	if (sig == FAULT_HANG)
		write(1, yes, sizeof yes - 1);
	else
		write(1, no, sizeof no - 1);
	_exit(0);
}

static void spin(void)
{
	for (;;)
		area[0] = 1; /* in_kernel: claims to be in the kernel */
}

int main(void)
{
	struct {
		uint64_t op, area, entry, tick_ns;
		int64_t ret;
	} p = {PREEMPT_REGISTER, (uint64_t)(uintptr_t)area, (uint64_t)(uintptr_t)spin, 0, 1};
	hypercall(PREEMPT, &p);
	printf("own area: %ld\n", (long)p.ret);
	struct {
		uint64_t entry, armed;
		int64_t ret;
	} f = {(uint64_t)(uintptr_t)entry, (uint64_t)(uintptr_t)&armed, 1};
	hypercall(FAULT_HANDLER, &f);
	printf("own fault entry: %ld\n", (long)f.ret);
	fflush(stdout);
	armed = 1;
	area[3] = 1;  /* runnable: one thread, nothing to preempt */
	area[6] = 6;  /* watch: a call into `time`, a lie */
	area[7] = 42; /* watch_seq: never changes */
	p = (typeof(p)){PREEMPT_WATCH, 0, 0, 0, 1};
	hypercall(PREEMPT, &p);
	if (p.ret != 0) {
		printf("watch: %ld\n", (long)p.ret);
		return 1;
	}
	spin();
}
