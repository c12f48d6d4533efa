/* Vector registers across system calls: Linux keeps xmm0-15 (and the
 * upper ymm halves) unchanged across `syscall`, and compiled code may keep
 * values in them across an inline one. Fills every xmm register with a
 * pattern, makes system calls through a `mov eax, NR; syscall` pair (a
 * site shoal rewrites) and one that writes (the kernel's own code copies
 * with SSE), and checks that every register still holds its pattern.
 * Prints what it checked; exit 0 when all match, 1 otherwise.
 * Built with `gcc -static -O2` by crates/shoal-cli/tests/exec.rs. */
#include <stdio.h>
#include <string.h>

typedef unsigned char v16[16];

static long sys3(long nr, long a, long b, long c)
{
	long ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c)
			 : "rcx", "r11", "memory");
	return ret;
}

/* Loads in[0..16] into xmm0-15, makes system call NR (a constant, so the
 * site is the `mov eax, imm32; syscall` pair shoal rewrites into a jump),
 * stores xmm0-15 into out. */
#define AROUND(NR, a, b, c, in, out) ({ \
	long ret_; \
	__asm__ volatile( \
		"movdqu 0(%[in]), %%xmm0\n movdqu 16(%[in]), %%xmm1\n" \
		"movdqu 32(%[in]), %%xmm2\n movdqu 48(%[in]), %%xmm3\n" \
		"movdqu 64(%[in]), %%xmm4\n movdqu 80(%[in]), %%xmm5\n" \
		"movdqu 96(%[in]), %%xmm6\n movdqu 112(%[in]), %%xmm7\n" \
		"movdqu 128(%[in]), %%xmm8\n movdqu 144(%[in]), %%xmm9\n" \
		"movdqu 160(%[in]), %%xmm10\n movdqu 176(%[in]), %%xmm11\n" \
		"movdqu 192(%[in]), %%xmm12\n movdqu 208(%[in]), %%xmm13\n" \
		"movdqu 224(%[in]), %%xmm14\n movdqu 240(%[in]), %%xmm15\n" \
		"mov %[nr], %%eax\n" \
		"syscall\n" \
		"movdqu %%xmm0, 0(%[out])\n movdqu %%xmm1, 16(%[out])\n" \
		"movdqu %%xmm2, 32(%[out])\n movdqu %%xmm3, 48(%[out])\n" \
		"movdqu %%xmm4, 64(%[out])\n movdqu %%xmm5, 80(%[out])\n" \
		"movdqu %%xmm6, 96(%[out])\n movdqu %%xmm7, 112(%[out])\n" \
		"movdqu %%xmm8, 128(%[out])\n movdqu %%xmm9, 144(%[out])\n" \
		"movdqu %%xmm10, 160(%[out])\n movdqu %%xmm11, 176(%[out])\n" \
		"movdqu %%xmm12, 192(%[out])\n movdqu %%xmm13, 208(%[out])\n" \
		"movdqu %%xmm14, 224(%[out])\n movdqu %%xmm15, 240(%[out])\n" \
		: "=a"(ret_) \
		: [nr] "i"(NR), "D"(a), "S"(b), "d"(c), [in] "r"(in), [out] "r"(out) \
		: "rcx", "r11", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", \
		  "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"); \
	ret_; })

int main(void)
{
	static v16 in[16], out[16];
	static char buf[4096];
	int bad = 0;
	for (int r = 0; r < 16; r++)
		for (int i = 0; i < 16; i++)
			in[r][i] = (unsigned char)(0x11 * r + i + 1);
	memset(buf, 'x', sizeof buf);
	/* getpid and gettid (light calls: shoal answers them without saving
	 * the vector registers, and its code for them must touch none), a 4 KiB write to /dev/null, a clock read, uname, getrandom
	 * and a read of /proc/self/maps (the kernel's code for the last three
	 * uses SSE: its formatting and its random generator). */
	long fd = sys3(2 /* open */, (long)"/dev/null", 1 /* O_WRONLY */, 0);
	long maps = sys3(2 /* open */, (long)"/proc/self/maps", 0 /* O_RDONLY */, 0);
	for (int k = 0; k < 7; k++) {
		static const char *names[] = { "getpid", "write", "clock_gettime", "uname", "getrandom", "read /proc/self/maps", "gettid" };
		long ret;
		memset(out, 0, sizeof out);
		if (k == 0)
			ret = AROUND(39, 0, 0, 0, in, out);
		else if (k == 1)
			ret = AROUND(1, fd, (long)buf, (long)sizeof buf, in, out);
		else if (k == 2)
			ret = AROUND(228, 1 /* CLOCK_MONOTONIC */, (long)buf, 0, in, out);
		else if (k == 3)
			ret = AROUND(63, (long)buf, 0, 0, in, out);
		else if (k == 4)
			ret = AROUND(318, (long)buf, 256, 0, in, out);
		else if (k == 5)
			ret = AROUND(0, maps, (long)buf, (long)sizeof buf, in, out);
		else
			ret = AROUND(186, 0, 0, 0, in, out);
		int same = memcmp(in, out, sizeof in) == 0;
		printf("%s: %s\n", names[k], ret < 0 ? "failed" : same ? "xmm0-15 kept" : "xmm changed");
		bad |= ret < 0 || !same;
	}
	return bad;
}
