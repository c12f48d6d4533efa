/* shoal: replaces musl's arch/x86_64/syscall_arch.h.
 *
 * In a shoal image the kernel is linked into the same static executable as
 * libc, so a system call is a plain function call instead of a `syscall`
 * instruction.  __shoal_syscall is defined by the shoal kernel (its
 * `syscall` component); it takes the Linux x86-64 system call number and six
 * arguments and returns the result or a negative errno, exactly like the raw
 * Linux system call, so the rest of musl (__syscall_ret, errno handling) is
 * unchanged.  Unused arguments are passed as 0.
 *
 * Differences from upstream:
 *  - no inline `syscall` instruction;
 *  - VDSO_USEFUL / VDSO_CGT_* / VDSO_GETCPU_* are not defined: a shoal image
 *    has no vDSO (no AT_SYSINFO_EHDR), so clock_gettime and sched_getcpu call
 *    straight into the kernel instead of first searching the auxv for one.
 * x86_64 needs no SYSCALL_NO_TLS (that is an i386-only vsyscall matter);
 * __SYSCALL_LL_E/O and IPC_64 are kept as upstream has them. */

#define __SYSCALL_LL_E(x) (x)
#define __SYSCALL_LL_O(x) (x)

/* Normal external linkage (not hidden): the definition is in the kernel. */
long __shoal_syscall(long, long, long, long, long, long, long);

static __inline long __syscall0(long n)
{
	return __shoal_syscall(n, 0, 0, 0, 0, 0, 0);
}

static __inline long __syscall1(long n, long a1)
{
	return __shoal_syscall(n, a1, 0, 0, 0, 0, 0);
}

static __inline long __syscall2(long n, long a1, long a2)
{
	return __shoal_syscall(n, a1, a2, 0, 0, 0, 0);
}

static __inline long __syscall3(long n, long a1, long a2, long a3)
{
	return __shoal_syscall(n, a1, a2, a3, 0, 0, 0);
}

static __inline long __syscall4(long n, long a1, long a2, long a3, long a4)
{
	return __shoal_syscall(n, a1, a2, a3, a4, 0, 0);
}

static __inline long __syscall5(long n, long a1, long a2, long a3, long a4, long a5)
{
	return __shoal_syscall(n, a1, a2, a3, a4, a5, 0);
}

static __inline long __syscall6(long n, long a1, long a2, long a3, long a4, long a5, long a6)
{
	return __shoal_syscall(n, a1, a2, a3, a4, a5, a6);
}

#define IPC_64 0
