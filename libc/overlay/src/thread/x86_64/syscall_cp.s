/* shoal: replaces musl's src/thread/x86_64/syscall_cp.s, the system call at
 * a pthread cancellation point, which uses a `syscall` instruction.
 *
 * long __syscall_cp_asm(volatile int *cancel, long nr,
 *                       long u, long v, long w, long x, long y, long z);
 * If *cancel is set it tail-calls __cancel() like upstream; otherwise it
 * tail-calls __shoal_syscall(nr, u, v, w, x, y, z).
 *
 * The labels __cp_begin, __cp_end and __cp_cancel are kept because
 * src/thread/pthread_cancel.c references them: its SIGCANCEL handler
 * redirects a thread interrupted between __cp_begin and __cp_end to
 * __cp_cancel.  shoal delivers signals at the end of system calls and,
 * with more than one runnable thread, at a preemption tick that lands in
 * program code: a SIGCANCEL taken between the labels is redirected as
 * upstream; otherwise checking *cancel before the call does the work.
 *
 * Argument shuffle (SysV): in  rdi=cancel rsi=nr rdx=u rcx=v r8=w r9=x
 * 8(%rsp)=y 16(%rsp)=z; out rdi=nr rsi=u rdx=v rcx=w r8=x r9=y 8(%rsp)=z.
 * Writing our own incoming stack-argument slot is allowed by the ABI (the
 * upstream code does it too); the return address at 0(%rsp) is reused by
 * the tail jump. */
	.section .text.__syscall_cp_asm,"ax",@progbits
	.global __cp_begin
	.hidden __cp_begin
	.global __cp_end
	.hidden __cp_end
	.global __cp_cancel
	.hidden __cp_cancel
	.hidden __cancel
	.global __syscall_cp_asm
	.hidden __syscall_cp_asm
	.type   __syscall_cp_asm,@function
__syscall_cp_asm:

__cp_begin:
	mov (%rdi),%eax
	test %eax,%eax
	jnz __cp_cancel
	mov %rsi,%rdi
	mov %rdx,%rsi
	mov %rcx,%rdx
	mov %r8,%rcx
	mov %r9,%r8
	mov 8(%rsp),%r9
	mov 16(%rsp),%rax
	mov %rax,8(%rsp)
	jmp __shoal_syscall
__cp_end:
	ud2
__cp_cancel:
	jmp __cancel
	.size __syscall_cp_asm,.-__syscall_cp_asm
	.section .note.GNU-stack,"",@progbits
