/* shoal: replaces musl's src/signal/x86_64/restore.s, the signal-return
 * trampoline (sa_restorer) that sigaction installs, which is a
 * `syscall` instruction calling rt_sigreturn.
 *
 * shoal's kernel calls a signal handler directly and the handler returns
 * to the kernel (kernel/process), so this is never reached; the symbol must
 * exist because sigaction() stores its address.  It still asks the kernel
 * for rt_sigreturn, as upstream does.  (On x86_64 musl's ksigaction.h
 * defines __restore as __restore_rt, so only this one symbol is needed.) */
#include "ksigaction.h"
#include "syscall.h"

void __restore_rt()
{
	__syscall(SYS_rt_sigreturn);
}
