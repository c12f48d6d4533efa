# What docs/design.md "Host facts" says runs natively at CPL 3 once the VMM set CPUID, CR4
# and XCR0: rdtsc, wrfsbase/rdfsbase, AVX (xgetbv shows XCR0). Writes one
# 24-byte record to stdout: rdtsc, rdfsbase after wrfsbase, XCR0.
.include "common.inc"
.text
.globl _start
_start:
    sub rsp, 128
    rdtsc
    shl rdx, 32
    or rax, rdx
    mov [rsp + 64], rax
    mov rax, 0x123456789000
    wrfsbase rax
    rdfsbase rax
    mov [rsp + 72], rax
    xor ecx, ecx
    xgetbv
    shl rdx, 32
    or rax, rdx
    mov [rsp + 80], rax
    vpxor ymm0, ymm0, ymm0
    vmovdqu [rsp + 96], ymm0
    mov qword ptr [rsp], 1
    lea rax, [rsp + 64]
    mov [rsp + 8], rax
    mov qword ptr [rsp + 16], 24
    hcall HC_CONSOLE
    halt_imm 0
