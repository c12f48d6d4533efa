/* libsites: a shared library whose system calls shoal's kernel rewrites
 * on first use (kernel/syscall/src/patch.rs). lib_pair is a `mov eax, 39;
 * syscall` pair (getpid); lib_middle jumps straight to such a pair's
 * `syscall`, which must keep working once the pair is rewritten;
 * lib_read is read(2) as glibc's wrapper in a threaded program makes it:
 * the number set apart from the `syscall` (no pair), and the result
 * checked with `cmp rax, -4096` right after it, which the kernel rewrites
 * forward (`syscall` and check into a `jmp`); lib_site returns the
 * address of lib_pair's `mov` (0, 1: lib_middle's) or lib_read's
 * `syscall` (2), so the program can look at it. */
long lib_pair(void)
{
	long r;
	__asm__ volatile(".globl lib_pair_mov\nlib_pair_mov:\n\tmov $39, %%eax\n\tsyscall" : "=a"(r) : : "rcx", "r11", "memory");
	return r;
}

long lib_middle(void)
{
	long r;
	__asm__ volatile("mov $39, %%eax\n\tjmp 1f\n\t"
			 ".globl lib_middle_mov\nlib_middle_mov:\n\tmov $39, %%eax\n1:\tsyscall"
			 : "=a"(r) : : "rcx", "r11", "memory");
	return r;
}

long lib_read(int fd, void *buf, unsigned long n)
{
	long r;
	__asm__ volatile("xor %%eax, %%eax\n\t.globl lib_read_sys\nlib_read_sys:\n\tsyscall\n\t"
			 "cmp $-4096, %%rax\n\tjbe 1f\n\tmov $-1, %%rax\n1:"
			 : "=a"(r) : "D"((long)fd), "S"(buf), "d"(n) : "rcx", "r11", "memory", "cc");
	return r;
}

extern const unsigned char lib_pair_mov[], lib_middle_mov[], lib_read_sys[];

const unsigned char *lib_site(int which)
{
	return which == 2 ? lib_read_sys : which ? lib_middle_mov : lib_pair_mov;
}
