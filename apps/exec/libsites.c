/* libsites: a shared library whose system calls shoal's kernel rewrites
 * on first use (kernel/syscall/src/patch.rs). lib_pair is a `mov eax, 39;
 * syscall` pair (getpid); lib_middle jumps straight to such a pair's
 * `syscall`, which must keep working once the pair is rewritten;
 * lib_site returns the address of lib_pair's `mov`, so the program can
 * look at it. */
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

extern const unsigned char lib_pair_mov[], lib_middle_mov[];

const unsigned char *lib_site(int which)
{
	return which ? lib_middle_mov : lib_pair_mov;
}
