# Prints to both streams, checks the boot info, halts with 7.
.include "common.inc"
.section .rodata
msg: .ascii "hello from hvt\n"
.equ msg_len, . - msg
emsg: .ascii "to stderr\n"
.equ emsg_len, . - emsg
.text
.globl _start
_start:
    mov r12, rdi                        # boot info
    sub rsp, 64
    mov rax, 0x3149424c414f4853         # "SHOALBI1"
    cmp [r12], rax
    jne bad
    print 1, msg, msg_len
    cmp rax, msg_len
    jne bad
    print 2, emsg, emsg_len
    halt_imm 7
bad:
    halt_imm 1
