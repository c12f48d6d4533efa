/* shoal: replaces musl's src/process/x86_64/vfork.s, which makes the vfork
 * `syscall` from assembly (the parent's return address must survive the
 * shared stack).  shoal has no vfork; like musl's generic
 * src/process/vfork.c this is fork(2) through the kernel (the shoal kernel
 * answers SYS_fork with -ENOSYS, so vfork() returns -1 with errno ENOSYS). */
#define _GNU_SOURCE
#include <unistd.h>
#include "syscall.h"

pid_t vfork(void)
{
	return syscall(SYS_fork);
}
