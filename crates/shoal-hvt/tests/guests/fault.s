# One CPU exception, chosen with --defsym CASE=n.
.include "common.inc"
.text
.globl _start
_start:
    sub rsp, 64
.if CASE == 1                           # wild pointer
    mov rax, 0xdead0000
    mov rax, [rax]
.elseif CASE == 2                       # invalid opcode
    ud2
.elseif CASE == 3                       # write to own code
    mov byte ptr [rip + _start], 0x90
.elseif CASE == 4                       # raw system call
    mov eax, 39
    syscall
.elseif CASE == 5                       # write to the page tables
    mov qword ptr [0x4000], 0
.elseif CASE == 6                       # jump to the (NX) stack
    mov byte ptr [rsp], 0xc3
    call rsp
.elseif CASE == 7                       # privileged instruction
    hlt
.elseif CASE == 8                       # breakpoint
    int3
.elseif CASE == 9                       # divide by zero
    xor ecx, ecx
    div ecx
.elseif CASE == 10                      # a port that is not a hypercall
    mov dx, 0x600
    out dx, eax
.elseif CASE == 11                      # read the null page
    mov rax, [0]
.endif
    halt_imm 0
