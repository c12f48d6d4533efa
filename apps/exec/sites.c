/* sites: system calls through a rewritten `mov eax, NR; syscall` pair,
 * through a jump straight to that pair's `syscall` (into the middle of the
 * rewritten site: the trap path), and through a `syscall` with no `mov`
 * before it (never rewritten). Each must give the same answer. */
#include <stdio.h>

static long pair(void)
{
	long r;
	__asm__ volatile("mov $39, %%eax\n\tsyscall" : "=a"(r) : : "rcx", "r11", "memory");
	return r;
}

static long middle(void)
{
	long r;
	__asm__ volatile("mov $39, %%eax\n\tjmp 1f\n\t"
			 "mov $39, %%eax\n1:\tsyscall"
			 : "=a"(r) : : "rcx", "r11", "memory");
	return r;
}

static long bare(long nr)
{
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "a"(nr) : "rcx", "r11", "memory");
	return r;
}

int main(void)
{
	long a = pair(), b = middle(), c = bare(39);
	printf("getpid agrees: %s\n", a > 0 && a == b && b == c ? "yes" : "no");
	/* rdi, rsi, rdx, r10, r8, r9 survive a trapped call (only rcx, r11 change). */
	long out;
	register long r10 __asm__("r10") = 0x1010;
	register long r8 __asm__("r8") = 0x0808;
	register long r9 __asm__("r9") = 0x0909;
	__asm__ volatile("syscall" : "=a"(out), "+r"(r10), "+r"(r8), "+r"(r9) : "a"(39L) : "rcx", "r11", "memory");
	printf("registers kept: %s\n", r10 == 0x1010 && r8 == 0x0808 && r9 == 0x0909 ? "yes" : "no");
	return 0;
}
