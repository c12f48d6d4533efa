/* shoal: replaces musl's src/thread/x86_64/clone.s, which creates the thread
 * with the clone `syscall` instruction and then, in the child, calls
 * func(arg) and exits with SYS_exit.
 *
 * In a shoal image threads are created by the kernel:
 *   int __shoal_clone(int (*func)(void *), void *stack, int flags, void *arg,
 *                     pid_t *ptid, void *tls, pid_t *ctid);
 * has __clone's arguments and return value (the new thread's tid, or a
 * negative errno; it returns only in the caller) and starts a thread that
 * runs func(arg) on `stack` and exits with its return value.
 *
 * __clone is variadic (posix_spawn passes only 4 arguments), so it is a tail
 * jump that forwards the argument registers and stack slot untouched rather
 * than C code reading va_args.  It gets its own section like the
 * -ffunction-sections C code. */
	.section .text.__clone,"ax",@progbits
	.global __clone
	.hidden __clone
	.type   __clone,@function
__clone:
	jmp __shoal_clone
	.size __clone,.-__clone
	.section .note.GNU-stack,"",@progbits
