/* shoal: replaces musl's src/thread/x86_64/__set_thread_area.s, which sets
 * the thread pointer (%fs base) with a `syscall` instruction
 * (arch_prctl(ARCH_SET_FS, p)).  In a shoal image that is a call into the
 * kernel, which sets the %fs base itself (wrfsbase) and remembers it for the
 * current shoal thread.
 *
 * This runs before TLS exists (from __init_tp), so it must not use TLS or the
 * stack protector; musl's Makefile already builds every %/__set_thread_area.o
 * with -fno-stack-protector. */
#include "pthread_impl.h"
#include "syscall.h"

#define ARCH_SET_FS 0x1002

int __set_thread_area(void *p)
{
	return __syscall(SYS_arch_prctl, ARCH_SET_FS, p);
}
