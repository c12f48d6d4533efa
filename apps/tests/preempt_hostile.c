/* A hostile guest and the Preempt hypercall: the
 * program makes the hypercall itself (spt: through the entry in the boot
 * info; hvt: the port, IOPL 3) with bad arguments, which the tender
 * refuses with an error, then registers an area of its own whose entry is
 * one of its own functions and claims two runnable threads. The tick then
 * redirects the program into that function: a guest that lies in the area
 * redirects only itself, and the tender goes on. */
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

/* shoal_abi: BOOT_INFO_ADDR, BootInfo::hypercall_entry's offset,
 * HYPERCALL_PORT_BASE, Hypercall::Preempt, PreemptArgs. */
#define BOOT_INFO 0x10000UL
#define ENTRY_OFFSET 72
#define PORT_BASE 0x500
#define PREEMPT 12
#define OUTSIDE 0x7ff000000000UL

struct preempt_args {
	uint64_t op, area, entry, tick_ns;
	int64_t ret;
};

static volatile uint64_t area[8] __attribute__((aligned(8)));

static long preempt(uint64_t op, uint64_t at, uint64_t entry, uint64_t tick)
{
	struct preempt_args a = {op, at, entry, tick, 1};
	uint64_t call = *(volatile uint64_t *)(BOOT_INFO + ENTRY_OFFSET);
	if (call)
		((void (*)(uint64_t, uint64_t))call)(PREEMPT, (uint64_t)&a);
	else
		__asm__ volatile("out %%eax, %%dx" : : "a"((unsigned)(uintptr_t)&a), "d"(PORT_BASE + PREEMPT) : "memory");
	return a.ret;
}

/* Entered by the tender's redirect, at whatever stack alignment the spin
 * loop had: only raw system calls. */
static void hijacked(void)
{
	static const char m[] = "the tick redirected the program into its own code\n";
	write(1, m, sizeof m - 1);
	_exit(0);
}

int main(void)
{
	uint64_t own = (uint64_t)(uintptr_t)area, fn = (uint64_t)(uintptr_t)hijacked;
	printf("area outside guest memory: %ld\n", preempt(0, OUTSIDE, fn, 0));
	printf("entry outside guest memory: %ld\n", preempt(0, own, OUTSIDE, 0));
	printf("misaligned area: %ld\n", preempt(0, own + 4, fn, 0));
	printf("unknown operation: %ld\n", preempt(7, own, fn, 0));
	printf("own area: %ld\n", preempt(0, own, fn, 0));
	area[3] = 2; /* runnable: a lie */
	printf("arm with a zero period: %ld\n", preempt(1, 0, 0, 0));
	fflush(stdout);
	for (;;)
		area[0] = 0; /* in_kernel: never */
}
