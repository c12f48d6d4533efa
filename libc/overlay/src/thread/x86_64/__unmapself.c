/* shoal: replaces musl's src/thread/x86_64/__unmapself.s, which munmaps the
 * exiting detached thread's own stack and then exits the thread, using two
 * `syscall` instructions and no stack in between.
 *
 * In a shoal image the kernel does both: __shoal_unmapself(base, size) (part
 * of the kernel's thread code) switches off the stack being freed, frees
 * [base, base+size), and exits the calling thread, honouring the thread's
 * CLONE_CHILD_CLEARTID address (musl's __thread_list_lock is released that
 * way) like SYS_exit does.  It never returns. */
#include "pthread_impl.h"

_Noreturn void __shoal_unmapself(void *base, size_t size);

void __unmapself(void *base, size_t size)
{
	__shoal_unmapself(base, size);
}
