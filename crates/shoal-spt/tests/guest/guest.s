# A hand-made shoal "image" for spt's tests: no kernel, no libc, just the
# entry convention (rdi = boot info, rsp = initial process stack) and the
# hypercall entry from the boot info. What it does depends on argc:
#
#  1  console write "hello\n", then argv[0] and "\n"; checks the boot info
#     magic, rsp alignment, bss zeroing, FS base and callee-saved registers
#     across a hypercall; halt(7)
#  2  a raw `syscall` (getpid)                  -> killed, 159
#  3  console write with a wild buffer          -> halt(ret = -EFAULT) = 242
#  4  console write to stream 3                 -> halt(ret = -EINVAL) = 234
#  5  halt with its argument pointer at 0x8     -> invalid hypercall, 255
#  6  load from address 0x8                     -> SIGSEGV, 139
#  7  poll 1 ms, then poll forever, no devices  -> blocked forever, 255
#  8  hypercall number 99                       -> invalid hypercall, 255
#  9  console write with its argument in code   -> invalid hypercall, 255
# 10  console write, buffer length overflows    -> halt(-EFAULT) = 242
# 11  poll with a device in the wait set        -> halt(-EINVAL) = 234
# 12  fault hypercall (page fault report)       -> 255
# 13  store into its own code                   -> SIGSEGV, 139
# 14  net batch of none and a 1 µs net poll (the hypercalls answered
#     without the FS base switch): FS base and callee-saved registers
#     survive; then a net batch of too many   -> halt(-EINVAL) = 234
# 15  net with its argument pointer at 0x8      -> invalid hypercall, 255
# 16  net poll forever with nothing to wait for -> blocked forever, 255
# 17  protect the stack page holding its own argument structure read-only
#                                               -> invalid hypercall, 255
#
# Assembled with `as` (--defsym ABI=N changes the ABI note) and linked with
# guest.ld (whose text segment flags the test substitutes).

        .intel_syntax noprefix
        .ifndef ABI
        .set ABI, 1
        .endif

        .section .note.shoal,"",@note
        .balign 8
        .ascii "SHOALABI"
        .long ABI
        .long 0

        .section .rodata
hello:  .ascii "hello\n"
nl:     .ascii "\n"

        .section .data
marker: .quad 0x1234

        .section .bss
        .balign 8
zeroes: .skip 8192

        .text
        .globl _start
_start:
        mov r15, rdi                    # boot info
        mov r14, [r15 + 72]             # BootInfo::hypercall_entry
        mov r13, rsp                    # initial stack: argc at [r13]
        sub rsp, 64                     # argument area at [rsp], keeps alignment
        mov rax, [r13]
        cmp rax, 1
        je mode_hello
        cmp rax, 2
        je mode_syscall
        cmp rax, 3
        je mode_wild_buf
        cmp rax, 4
        je mode_bad_stream
        cmp rax, 5
        je mode_bad_arg
        cmp rax, 6
        je mode_segv
        cmp rax, 7
        je mode_poll
        cmp rax, 8
        je mode_unknown
        cmp rax, 9
        je mode_arg_in_code
        cmp rax, 10
        je mode_len_overflow
        cmp rax, 11
        je mode_poll_device
        cmp rax, 12
        je mode_fault
        cmp rax, 13
        je mode_write_code
        cmp rax, 14
        je mode_net_fast
        cmp rax, 15
        je mode_net_bad_arg
        cmp rax, 16
        je mode_net_poll_forever
        cmp rax, 17
        je mode_protect_own_args
        mov eax, 100
        jmp halt_rax

# console(stream = rdi, buf = rsi, len = rdx) -> rax = ret; clobbers rdi, rsi
console:
        sub rsp, 40                     # 32-byte args + keep 16-byte alignment
        mov [rsp], rdi
        mov [rsp + 8], rsi
        mov [rsp + 16], rdx
        mov qword ptr [rsp + 24], 0
        mov edi, 1
        mov rsi, rsp
        call r14
        mov rax, [rsp + 24]
        add rsp, 40
        ret

# halt(status = rax)
halt_rax:
        and rsp, -16
        mov [rsp], rax
        mov edi, 2
        mov rsi, rsp
        call r14
        ud2

fail:   mov eax, 99
        jmp halt_rax

mode_hello:
        mov rax, 0x3149424c414f4853     # "SHOALBI1"
        cmp [r15], rax
        jne fail
        test r13, 15
        jnz fail
        cmp qword ptr [zeroes + 4096], 0
        jne fail
        cmp qword ptr [marker], 0x1234
        jne fail
        # FS base and callee-saved registers survive a hypercall.
        mov rax, 0x12345000
        wrfsbase rax
        mov rbx, 0x1111
        mov rbp, 0x2222
        mov r12, 0x3333
        mov edi, 1
        lea rsi, [hello]
        mov edx, 6
        call console
        cmp rax, 6
        jne fail
        rdfsbase rax
        cmp rax, 0x12345000
        jne fail
        cmp rbx, 0x1111
        jne fail
        cmp rbp, 0x2222
        jne fail
        cmp r12, 0x3333
        jne fail
        # argv[0] and a newline.
        mov rsi, [r13 + 8]
        xor edx, edx
1:      cmp byte ptr [rsi + rdx], 0
        je 2f
        inc rdx
        jmp 1b
2:      mov edi, 1
        call console
        mov edi, 1
        lea rsi, [nl]
        mov edx, 1
        call console
        mov eax, 7
        jmp halt_rax

mode_syscall:
        mov eax, 39                     # getpid
        syscall
        mov eax, 98
        jmp halt_rax

mode_wild_buf:
        mov edi, 1
        mov rsi, 0xdead00000000
        mov edx, 10
        call console
        jmp halt_rax

mode_bad_stream:
        mov edi, 3
        lea rsi, [hello]
        mov edx, 6
        call console
        jmp halt_rax

mode_bad_arg:
        mov edi, 2
        mov esi, 8
        call r14
        mov eax, 98
        jmp halt_rax

mode_segv:
        mov rax, [8]
        mov eax, 98
        jmp halt_rax

mode_poll:
        mov qword ptr [rsp], 1000000    # timeout_ns
        mov qword ptr [rsp + 8], 0      # wait_set
        mov qword ptr [rsp + 24], -1    # ret (the tender sets 0)
        mov edi, 3
        mov rsi, rsp
        call r14
        cmp qword ptr [rsp + 24], 0
        jne fail
        mov qword ptr [rsp], -1         # no deadline
        mov edi, 3
        mov rsi, rsp
        call r14
        mov eax, 98
        jmp halt_rax

mode_unknown:
        mov edi, 99
        mov rsi, rsp
        call r14
        mov eax, 98
        jmp halt_rax

mode_arg_in_code:
        mov edi, 1
        lea rsi, [_start]
        call r14
        mov eax, 98
        jmp halt_rax

mode_len_overflow:
        mov edi, 1
        lea rsi, [hello]
        mov rdx, -1
        call console
        jmp halt_rax

mode_poll_device:
        mov qword ptr [rsp], 1000
        mov qword ptr [rsp + 8], 1
        mov edi, 3
        mov rsi, rsp
        call r14
        mov rax, [rsp + 24]
        jmp halt_rax

mode_fault:
        mov qword ptr [rsp], 14         # vector
        mov qword ptr [rsp + 8], 2      # error code
        mov qword ptr [rsp + 16], 0x101234  # rip
        mov qword ptr [rsp + 24], 0x7000    # rsp
        mov qword ptr [rsp + 32], 0xbad     # cr2
        mov edi, 4
        mov rsi, rsp
        call r14
        mov eax, 98
        jmp halt_rax

mode_write_code:
        mov byte ptr [_start], 0xcc
        mov eax, 98
        jmp halt_rax

mode_net_fast:
        mov rax, 0x12345000
        wrfsbase rax
        mov rbx, 0x1111
        mov rbp, 0x2222
        mov r12, 0x3333
        lea rax, [zeroes]
        mov [rsp], rax                  # ops
        mov qword ptr [rsp + 8], 0      # count
        mov qword ptr [rsp + 16], -1    # ret (the tender sets 0)
        mov edi, 5
        mov rsi, rsp
        call r14
        cmp qword ptr [rsp + 16], 0
        jne fail
        mov qword ptr [rsp], 0          # fds
        mov qword ptr [rsp + 8], 0      # nfds
        mov qword ptr [rsp + 16], 1000  # timeout_ns
        mov qword ptr [rsp + 24], -1    # ret (the tender sets 0)
        mov qword ptr [rsp + 32], 0     # events
        mov qword ptr [rsp + 40], 0     # max_events
        mov qword ptr [rsp + 48], -1    # nevents (the tender sets 0)
        mov edi, 6
        mov rsi, rsp
        call r14
        cmp qword ptr [rsp + 24], 0
        jne fail
        cmp qword ptr [rsp + 48], 0
        jne fail
        rdfsbase rax
        cmp rax, 0x12345000
        jne fail
        cmp rbx, 0x1111
        jne fail
        cmp rbp, 0x2222
        jne fail
        cmp r12, 0x3333
        jne fail
        mov qword ptr [rsp], 0
        mov qword ptr [rsp + 8], 100000 # count: more than NET_MAX_OPS
        mov edi, 5
        mov rsi, rsp
        call r14
        mov rax, [rsp + 16]
        jmp halt_rax

mode_net_bad_arg:
        mov edi, 5
        mov esi, 8
        call r14
        mov eax, 98
        jmp halt_rax

mode_protect_own_args:
        mov rax, rsp
        and rax, -4096
        mov [rsp], rax                  # addr: the page holding this structure
        mov qword ptr [rsp + 8], 4096   # len
        mov qword ptr [rsp + 16], 1     # PROT_READ
        mov qword ptr [rsp + 24], 0     # ret
        mov edi, 8
        mov rsi, rsp
        call r14
        mov eax, 98
        jmp halt_rax

mode_net_poll_forever:
        mov qword ptr [rsp], 0          # fds
        mov qword ptr [rsp + 8], 0      # nfds
        mov qword ptr [rsp + 16], -1    # no deadline
        mov qword ptr [rsp + 32], 0     # events
        mov qword ptr [rsp + 40], 0     # max_events
        mov edi, 6
        mov rsi, rsp
        call r14
        mov eax, 98
        jmp halt_rax
