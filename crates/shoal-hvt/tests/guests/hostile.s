# Hypercalls with hostile arguments, chosen with --defsym CASE=n. Cases
# whose call returns halt with the low byte of its ret.
.include "common.inc"
.text
.globl _start
_start:
    mov r12, rdi                        # boot info
    sub rsp, 64
.if CASE == 1                           # argument address beyond memory
    mov eax, 0xfffffff0
    mov dx, HC_BASE + HC_CONSOLE
    out dx, eax
.elseif CASE == 2                       # argument at mem_size - 4
    mov rax, [r12 + 16]                 # BootInfo.mem_size
    sub eax, 4
    mov dx, HC_BASE + HC_CONSOLE
    out dx, eax
.elseif CASE == 3                       # buffer + length overflow
    mov qword ptr [rsp], 1
    mov rax, 0xfffffffffffffff0
    mov [rsp + 8], rax
    mov qword ptr [rsp + 16], 0x20
    hcall HC_CONSOLE
    mov rax, [rsp + 24]
    halt_reg rax
.elseif CASE == 4                       # stream 99
    print 99, _start, 4
    halt_reg rax
.elseif CASE == 5                       # poll with a device set
    mov qword ptr [rsp], 0
    mov qword ptr [rsp + 8], 1
    mov qword ptr [rsp + 24], 0
    hcall HC_POLL
    mov rax, [rsp + 24]
    halt_reg rax
.elseif CASE == 6                       # poll: sleep 20 ms
    mov qword ptr [rsp], 20000000
    mov qword ptr [rsp + 8], 0
    mov qword ptr [rsp + 24], -1
    hcall HC_POLL
    mov rax, [rsp + 24]
    add rax, 42
    halt_reg rax
.elseif CASE == 7                       # fault report below guest memory
    xor eax, eax
    mov dx, HC_BASE + HC_FAULT
    out dx, eax
.elseif CASE == 8                       # halt with an argument in tender-private memory
    mov eax, 0x3000
    mov dx, HC_BASE + HC_HALT
    out dx, eax
.elseif CASE == 9                       # console buffer in tender-private memory
    mov qword ptr [rsp], 1
    mov qword ptr [rsp + 8], 0x1000
    mov qword ptr [rsp + 16], 16
    hcall HC_CONSOLE
    mov rax, [rsp + 24]
    halt_reg rax
.elseif CASE == 10                      # huge length
    mov qword ptr [rsp], 1
    lea rax, [rip + _start]
    mov [rsp + 8], rax
    mov rax, 0x10000000000
    mov [rsp + 16], rax
    hcall HC_CONSOLE
    mov rax, [rsp + 24]
    halt_reg rax
.elseif CASE == 11                      # read from a hypercall port
    mov dx, HC_BASE + HC_CONSOLE
    in eax, dx
.elseif CASE == 12                      # 16-bit write to a hypercall port
    mov eax, esp
    mov dx, HC_BASE + HC_CONSOLE
    out dx, ax
.elseif CASE == 13                      # halt status beyond 8 bits
    mov rax, 0x1234
    halt_reg rax
.elseif CASE == 14                      # a fault report of the guest's own
    mov qword ptr [rsp], 99
    mov qword ptr [rsp + 8], 1
    mov qword ptr [rsp + 16], 2
    mov qword ptr [rsp + 24], 3
    mov qword ptr [rsp + 32], 4
    hcall HC_FAULT
.elseif CASE == 15                      # a port the bitmap allows that is no hypercall
    mov eax, esp                        # (0x514: the bitmap allows the three
    mov dx, HC_BASE + 20                # ports above the last hypercall, 19, for
    out dx, al                          # its 32-bit writes)
.elseif CASE == 16                      # poll forever with nothing to wait for
    mov rax, -1
    mov [rsp], rax
    mov qword ptr [rsp + 8], 0
    hcall HC_POLL
.elseif CASE == 17                      # console write whose results would land in the code
    print 1, msg, 4                     # (first show that console writes work)
    lea rax, [rip + _start]
    mov dx, HC_BASE + HC_CONSOLE
    out dx, eax
    mov rax, [rip + _start + 24]        # the ret slot, in case the VMM wrote it
    halt_reg rax
.elseif CASE == 18                      # poll whose results would land in read-only data
    lea rax, [rip + ro_poll]
    mov dx, HC_BASE + HC_POLL
    out dx, eax
.elseif CASE == 19                      # poll whose results would land in the boot-info page
    mov eax, r12d
    mov dx, HC_BASE + HC_POLL
    out dx, eax
.elseif CASE == 20                      # a forged CPU exception: the stub's report address
    mov eax, 0x3fc8                     # (FAULT_REPORT_ADDR), written from CPL 3
    mov dx, HC_BASE + HC_FAULT
    out dx, eax
forged_fault_after:
.endif
    halt_imm 0

msg: .ascii "ok!\n"

.section .rodata
# A poll argument structure (timeout 20 ms) in read-only data.
ro_poll: .quad 20000000, 0, 0, 0
