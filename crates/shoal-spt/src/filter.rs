//! The seccomp-BPF allow-list: the only system calls a running guest (and
//! the tender code it calls into) can make.
//!
//! This is reviewed data: one entry per system call, with who needs it and
//! the argument checks. Anything else traps (`SECCOMP_RET_TRAP`): spt's
//! SIGSYS handler records the call's number for the parent's message and
//! then lets the kernel kill the process with SIGSYS, or, in a
//! single-process instance, writes the message itself and exits with 159
//! (see `crate::signals`).
//! A system call of another architecture (`int 0x80`, i386 `AUDIT_ARCH`)
//! kills the process at once (`SECCOMP_RET_KILL_PROCESS`, seccompiler's
//! architecture check); x32 numbers (bit 30 set) match no entry and trap.
//!
//! | system call | arguments allowed | who needs it |
//! |---|---|---|
//! | `write` (1) | fd (32-bit) == 1 or fd == 2 | console hypercall; the tender's own messages |
//! | `exit_group` (231) | any | halt and fault hypercalls; the tender stopping an instance |
//! | `clock_nanosleep` (230) | clock (32-bit) == `CLOCK_MONOTONIC` (1) and flags (32-bit) == 0 (relative) | poll hypercall (the only way a guest blocks) |
//! | `restart_syscall` (219) | none (it has none) | the kernel, not spt: a `clock_nanosleep` interrupted by a stop (SIGSTOP/SIGTSTP and SIGCONT, a cgroup freeze, a debugger attaching) is resumed through it; it can only continue the interrupted, already allowed call with its saved arguments |
//! | `read` (0) | fd (32-bit) == 0 | `ConsoleRead` hypercall: the instance's stdin (a hostile guest reads the input it was given anyway) |
//! | `ppoll` (271) | any | `NetPoll` hypercall: an idle instance waits here for stdin (and host sockets); polling fds 0-2 tells it nothing it does not know, every other fd is its own socket |
//! | `mprotect` (10) | `heap_start <= addr`, `addr + len <= mem_size` (a ladder of rules, below), prot only `PROT_READ`/`PROT_WRITE` bits, or (an unmodified executable's instance only) `PROT_EXEC` too | `Protect` hypercall (the kernel's `mprotect`: guard pages, `PROT_NONE`; in an executable's instance, `PROT_EXEC` for the libraries `ld.so` maps and for JIT code, whose `syscall`s syscall user dispatch sends to the kernel) |
//! | `mmap` (9) | fd (32-bit) == the alias memory file ([`GuestRange::alias_fd`]), flags (32-bit) == `MAP_SHARED \| MAP_FIXED`, prot only `PROT_READ`/`PROT_WRITE` bits, `heap_start <= addr` and `heap_start <= offset`, `addr + len <= mem_size` and `offset + len <= mem_size` (a ladder of rules, below); or flags == `MAP_PRIVATE \| MAP_ANONYMOUS \| MAP_FIXED \| MAP_NORESERVE`, prot as before, `heap_start <= addr`, `addr + len <= mem_size` | `Alias` hypercall (`crate::protect::alias`: a shared file mapping shows the file's pages; pages leaving it get fresh private memory) |
//! | `madvise` (28) | advice (32-bit) == `MADV_DONTNEED` (4), `heap_start <= addr`, `addr + len <= mem_size` (the `mprotect` ladder) | `Release` hypercall (`crate::protect::release`: the host memory behind pages the guest kernel freed or the program discarded goes back to the host); once before the guest runs, the tender's own clearing of the guest stack pages it installed the filter from (`crate::child`) |
//! | `setitimer` (38) | which (32-bit) == `ITIMER_REAL` (0) | `Preempt` hypercall and the tick handler (`crate::preempt`): the preemption tick, `SIGALRM`, armed while the guest has more than one runnable thread, or (at the hang watchdog's period) while a gated call into a rebootable component is in progress. A hostile guest can set the period of this process's own `SIGALRM` (and so interrupt itself as often as it likes, which costs only its own CPU time, as a spin loop would) or stop it (and so lose its own preemption); the handler redirects only guest code, inside guest memory |
//! | `rt_sigreturn` (15) | none (it takes none) | the return of the handler of the signals handed to the guest (SIGTERM, SIGHUP: `crate::signals::on_forwarded`) and of the preemption tick (`crate::preempt::on_tick`); a guest calling it itself can only load a register frame and signal mask of its choosing from its own stack — registers it controls anyway; the kernel checks the segment selectors, and seccomp still applies to everything after |
//!
//! **Why `mprotect` is safe to allow.** The tender makes the call in the
//! `Protect` handler (`crate::protect`), which checks the request; but the
//! guest shares the process and could make it directly, so the filter
//! itself bounds it: the range must lie in the guest's free memory and main
//! stack, `[heap_start, mem_size)`, above the image's code and read-only
//! data, the archive and the boot-info page (which keep their protection),
//! and the protection can hold no `PROT_EXEC` (nor `PROT_GROWSDOWN`/`UP`,
//! `PROT_SEM`), so nothing the guest can write ever becomes executable and
//! the tender's own mappings (outside guest memory) are never reached. The
//! one exception is an unmodified executable's instance, whose libraries
//! (mapped by `ld.so`) and run-time code (a JIT's, with W^X flips or
//! read-write-execute) may hold `PROT_EXEC` in that range. That gives a
//! hostile guest nothing it did not have: its image is arbitrary code
//! already; a `syscall` instruction anywhere in guest memory raises SIGSYS
//! through syscall user dispatch (set before the filter, for every address
//! below `mem_size`) and so reaches only the guest kernel; and a host call
//! the guest makes by jumping into tender code still passes this filter.
//! seccomp compares
//! each argument with constants and cannot add `addr + len`, so the upper
//! bound is a ladder: a call starting at distance `d` below `mem_size`
//! (`2^j < d <= 2^(j+1)`) may cover at most `2^j` bytes (one rule per `j`,
//! about 30), which keeps `addr + len <= mem_size`; the handler splits
//! requests into such pieces. Letting the guest call the host `mprotect`
//! unchecked (the alternative) would let it make the tender's read-only
//! data writable; a hypercall alone would not help, because the filter
//! cannot tell the tender's call from the guest's.
//!
//! **Why `mmap` of the alias file is safe to allow.** The alias file is a
//! memory file whose offset `x` holds guest address `x`'s page once the
//! kernel has made that page aliasable; nothing else is in it. The rules
//! let a call only map it, shared and at a fixed address, over the guest's
//! free memory and stack (`[heap_start, mem_size)`, the same range as
//! `mprotect`), from offsets in that same range, never executable: a guest
//! calling it itself can make one of its pages show another of its pages,
//! which it could read and write anyway, or give a range of those pages
//! fresh zeroed private memory (what it could do by storing zeros). It
//! cannot reach the image's code,
//! the archive, the boot-info page or any tender mapping, nor make memory
//! executable, nor map any other descriptor. seccomp cannot add, so the
//! bounds are a ladder again: rule `j` allows `len <= 2^j` when both
//! `addr` and `offset` are at most `mem_size - 2^j`; the handler splits
//! requests into such pieces. The guest could also pass the descriptor to
//! the socket calls allowed on descriptors from 3 up (below): they fail on
//! a memory file, and `close` would only break its own shared mappings.
//!
//! **Why `madvise(MADV_DONTNEED)` is safe to allow.** Over the same range
//! as `mprotect` (the same ladder of rules) and with that one advice
//! value, a guest calling it itself can only make its own free memory and
//! stack read as zero again (private anonymous pages; what it could do by
//! storing zeros) or, over pages that show the alias file, drop their
//! mapping until the next touch maps the same file page back (nothing
//! changes). It cannot reach the image, the archive, the boot-info page or
//! any tender mapping, and no other advice (`MADV_DONTFORK`,
//! `MADV_HWPOISON`, `MADV_MERGEABLE`, …) passes. The cost it can cause is
//! the host page faults of touching the pages again: its own CPU time.
//!
//! An instance with read-only host directories (`--mount`; docs/architecture.md
//! "Both tenders: read-only host directories") also gets:
//!
//! | system call | arguments allowed | who needs it | what a hostile guest can do with it |
//! |---|---|---|---|
//! | `openat2` (437) | dirfd (32-bit) in `[MOUNT_FD0, MOUNT_FD0 + mounts)` (`crate::MOUNT_FD0` = 1000), size == 24 | `HostFs` hypercall (`shoal_hostcall::hostfs`): one file beneath a mount, `RESOLVE_BENEATH` and no links | open, for reading, files of the mounted directories: each descriptor is a detached read-only `nosuid`/`nodev` clone of one (`crate::confine::jail_mounts`), where `..` at the top stays there and nothing can be written (`EROFS`); an absolute path or a link resolves in the empty root (`ENOENT`); Landlock grants reading beneath the clones and nothing else |
//! | `fstat` (5), `pread64` (17), `getdents64` (217), `readlinkat` (267), `close` (3) | fd >= 3 | `HostFs` hypercall: attributes, bytes, entries or link target of what it opened, then closing it | read what it could open that way, or (`readlinkat` with an absolute path) read links of its empty root; on sockets and the alias file these fail or read its own memory; `close` only breaks its own instance |
//! | `mmap` (9) | fd (32-bit) >= 3, flags (32-bit) == `MAP_PRIVATE \| MAP_FIXED`, prot `PROT_READ` (with `PROT_EXEC` too in an unmodified executable's instance), `heap_start <= addr`, `addr + len <= mem_size` (the alias ladder) | `HostFs` hypercall `HOSTFS_MAP`: a library's pages are the host's page cache of the mounted file, shared by every instance, copied on a write | map privately, over its own free memory, what it holds a descriptor of: a mounted file (which it can read anyway), the alias file (a copy of its own pages), a socket or the watch set (`ENODEV`, or a TCP socket's empty zero-copy area); never writable, never outside `[heap_start, mem_size)`, never a host file it could not open |
//!
//! An instance with networking (listening sockets handed over with
//! `--publish`/`--listen-fd`, `--net-outbound` or `--net-bind-any`;
//! docs/design.md "Networking") also gets,
//! on descriptors from 3 up only (every one of which is a guest socket: the
//! instance closed all others before the guest's first instruction):
//!
//! | system call | arguments allowed | who needs it | what a hostile guest can do with it |
//! |---|---|---|---|
//! | `sendto` (44), `recvfrom` (45) | fd >= 3; without outbound, `sendto`'s flags (32-bit) without `MSG_FASTOPEN` | `Net` hypercall: data on guest sockets | send and receive on its own connections; no TCP Fast Open connect (which Landlock's connect rule does not see) without outbound. The address of a `sendto` is not checked (seccomp cannot read it), which is why without outbound the instance holds no UDP socket: its UDP ports are relayed by the waiting parent (`crate::relay`), and an addressed send on a TCP socket ignores the address |
//! | `shutdown` (48), `close` (3), `listen` (50) | fd >= 3 | `Net` hypercall | end or resize its own sockets |
//! | `getsockname` (51), `getpeername` (52), `getsockopt` (55) | fd >= 3 | `Net` hypercall | read options and addresses of its own sockets |
//! | `setsockopt` (54) | fd >= 3, and level (32-bit) != `SOL_SOCKET` or option (32-bit) neither `SO_REUSEADDR` nor `SO_REUSEPORT` | `Net` hypercall (which answers address reuse itself: `crate::net`) | set options of its own sockets; options that need privilege (`SO_BINDTODEVICE`, `IP_TRANSPARENT`, …) fail for want of capabilities; no sharing of a port another process bound |
//! | `accept4` (288) | 3 <= fd < 3 + listeners, flags include `SOCK_NONBLOCK` (any fd >= 3 with outbound or bind-any) | `Net` hypercall | take connections from the ports it was given (or bound) |
//! | `recvmsg` (47), `sendmsg` (46) | fd >= 3, `sendmsg`'s flags (32-bit) without `MSG_FASTOPEN`; only without outbound with a UDP port or `--net-bind-any` (a relay, `crate::relay`) | `Net` hypercall on a relayed UDP socket: a frame is the sender's or destination's address and the datagram, in two buffers | what `recvfrom`/`sendto` do on its own sockets; on a relay, frames to the parent, which sends only replies to recent senders; no descriptor is ever sent to the instance but on the bind channel |
//! | `recvmsg` (47) | fd == the bind channel (3 + listeners); `--net-bind-any` with outbound | `Net` hypercall `BIND_NEW`: the socket the parent bound comes back with `SCM_RIGHTS` (`crate::net`) | ask the parent for sockets bound to any port of its network namespace with the caller's rights, which is what `--net-bind-any` gives the guest anyway; it receives nothing else there |
//! | `socket` (41) | domain `AF_INET` or `AF_INET6`, type includes `SOCK_NONBLOCK` and is `SOCK_STREAM` with protocol 0 or `IPPROTO_TCP` or `SOCK_DGRAM` with 0 or `IPPROTO_UDP`; outbound only | `Net` hypercall | make TCP/UDP sockets (not `IPPROTO_MPTCP`, whose ports Landlock's TCP rules do not cover) |
//! | `bind` (49), `connect` (42) | fd >= 3; outbound only | `Net` hypercall | bind and connect where Landlock allows (TCP: no bind but port 0, connect to any port; UDP is not covered by Landlock: with outbound on, any UDP destination) |
//! | `epoll_ctl` (233) | epfd == the watch set's descriptor (`3 + listeners` + 1 with `--net-bind-any` + 1 for the alias file, `crate::net::watch_fd`), op == `EPOLL_CTL_ADD` | `Net` hypercall: `socket` and `accept` register the new socket in the watch set | add its own descriptors (sockets, stdio) to the watch set: the reports name descriptor numbers it already has, and the guest kernel ignores numbers it does not know. No `MOD`/`DEL` (closing a socket removes it) |
//! | `epoll_pwait2` (441) | epfd == the watch set's descriptor | `NetPoll` hypercall: waiting for the sockets whose readiness rose | learn which of its own sockets are ready; sleep (as in `ppoll`). Like `close` on that descriptor (allowed, fd >= 3), it can only break its own instance's waiting |
//!
//! The per-request calls of a server (`recvfrom`, `sendto`, `epoll_pwait2`)
//! are checked first by a short hand-written prefix with the same checks
//! (`with_hot_path`): the table above is still what is allowed.
//!
//! Eleven system calls without networking; Solo5's spt allows seven to nine because it also has
//! block and network devices. Not needed and so not allowed: `exit` (glibc's `_exit` uses
//! `exit_group`), `clock_gettime` (the guest reads the TSC; glibc's
//! `clock_gettime` goes through the vDSO without a system call anyway).

use crate::net::{NetPolicy, FIRST_SOCKET_FD};
use seccompiler::{BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule};
use std::collections::BTreeMap;

/// Why the filter could not be built (a bug in this file, never the
/// guest's fault).
pub type FilterError = seccompiler::BackendError;

fn eq32(arg: u8, value: u64) -> Result<SeccompCondition, FilterError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
}

fn fd_at_least(min: i32) -> Result<SeccompCondition, FilterError> {
    SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ge, min as u64)
}

fn has_bits(arg: u8, bits: u64) -> Result<SeccompCondition, FilterError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(bits), bits)
}

/// The guest memory the `mprotect` rules allow: `[heap_start, mem_size)`
/// (page aligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestRange {
    /// First address the guest may protect.
    pub heap_start: u64,
    /// End of guest memory.
    pub mem_size: u64,
    /// The descriptor of the alias memory file (`crate::protect`).
    pub alias_fd: i32,
    /// How many read-only host directories (`--mount`) the instance has,
    /// at descriptors [`crate::MOUNT_FD0`]`..`.
    pub mounts: u32,
    /// Some mount is writable (`:rw`): the calls that change files are
    /// allowed too (Landlock and the mount clones confine them).
    pub writable: bool,
    /// The guest is an unmodified executable, which may make its pages
    /// executable (`PROT_EXEC` with any of read and write) for the
    /// libraries `ld.so` maps and code it makes at run time.
    pub run_time_code: bool,
}

/// The allow-list of an instance without networking (see [`rules_for`]).
pub fn rules(g: GuestRange) -> Result<BTreeMap<i64, Vec<SeccompRule>>, FilterError> {
    rules_for(NetPolicy::default(), g)
}

fn qword(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, FilterError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Qword, op, value)
}

/// The `mprotect` ladder (module docs): one rule per distance class below
/// `mem_size`, each also bounded below by `heap_start` and refusing every
/// protection bit but `PROT_READ | PROT_WRITE`, and also `PROT_EXEC` for
/// an executable's instance ([`GuestRange::run_time_code`]: the libraries
/// `ld.so` maps and JIT code, inside guest memory only).
fn mprotect_rules(g: GuestRange) -> Result<Vec<SeccompRule>, FilterError> {
    let refused = if g.run_time_code { 0xffff_fff8 } else { 0xffff_fffc };
    ladder(g, || SeccompCondition::new(2, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(refused), 0))
}

/// The ladder of `[addr, addr + len)` rules inside `[heap_start,
/// mem_size)` (module docs), each with the third argument's check `third`.
fn ladder(g: GuestRange, third: impl Fn() -> Result<SeccompCondition, FilterError>) -> Result<Vec<SeccompRule>, FilterError> {
    let page = shoal_abi::PAGE_SIZE;
    let prot_ok = third;
    let mut rules = Vec::new();
    if g.mem_size < g.heap_start + page {
        return Ok(rules);
    }
    // The last page: d == one page.
    rules.push(SeccompRule::new(vec![
        qword(0, SeccompCmpOp::Ge, (g.mem_size - page).max(g.heap_start))?,
        qword(0, SeccompCmpOp::Lt, g.mem_size)?,
        qword(1, SeccompCmpOp::Le, page)?,
        prot_ok()?,
    ])?);
    // 2^j < d <= 2^(j+1): addr in [mem_size - 2^(j+1), mem_size - 2^j), len <= 2^j.
    for j in 12..63u32 {
        let step = 1u64 << j;
        let hi = g.mem_size.saturating_sub(step);
        if hi <= g.heap_start {
            break;
        }
        let lo = g.mem_size.saturating_sub(step << 1).max(g.heap_start);
        rules.push(SeccompRule::new(vec![qword(0, SeccompCmpOp::Ge, lo)?, qword(0, SeccompCmpOp::Lt, hi)?, qword(1, SeccompCmpOp::Le, step)?, prot_ok()?])?);
    }
    Ok(rules)
}

/// The `madvise` rules (module docs): the `mprotect` ladder, with the
/// advice `MADV_DONTNEED` instead of a protection.
fn release_rules(g: GuestRange) -> Result<Vec<SeccompRule>, FilterError> {
    ladder(g, || eq32(2, libc::MADV_DONTNEED as u64))
}

/// The `mmap` ladder for the alias file (module docs): rule `j` allows a
/// length up to `2^j` when `addr` and the offset both lie in
/// `[heap_start, mem_size - 2^j]`; always the alias file, shared and fixed,
/// never executable.
fn alias_rules(g: GuestRange) -> Result<Vec<SeccompRule>, FilterError> {
    let mut rules = Vec::new();
    for j in 12..63u32 {
        let step = 1u64 << j;
        let Some(top) = g.mem_size.checked_sub(step) else { break };
        if top < g.heap_start {
            break;
        }
        rules.push(SeccompRule::new(vec![
            qword(0, SeccompCmpOp::Ge, g.heap_start)?,
            qword(0, SeccompCmpOp::Le, top)?,
            qword(1, SeccompCmpOp::Le, step)?,
            SeccompCondition::new(2, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(0xffff_fffc), 0)?,
            eq32(3, (libc::MAP_SHARED | libc::MAP_FIXED) as u64)?,
            eq32(4, g.alias_fd as u32 as u64)?,
            qword(5, SeccompCmpOp::Ge, g.heap_start)?,
            qword(5, SeccompCmpOp::Le, top)?,
        ])?);
        // Giving pages their own memory back: fresh private anonymous
        // memory over the same range (any descriptor and offset: ignored).
        rules.push(SeccompRule::new(vec![
            qword(0, SeccompCmpOp::Ge, g.heap_start)?,
            qword(0, SeccompCmpOp::Le, top)?,
            qword(1, SeccompCmpOp::Le, step)?,
            SeccompCondition::new(2, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(0xffff_fffc), 0)?,
            eq32(3, (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE) as u64)?,
        ])?);
    }
    Ok(rules)
}

/// The `mmap` ladder for mounted files (module docs): rule `j` allows a
/// length up to `2^j` when `addr` lies in `[heap_start, mem_size - 2^j]`;
/// always private and fixed, from a descriptor of 3 up, `PROT_READ` (and
/// `PROT_EXEC` in an executable's instance), never writable.
fn file_map_rules(g: GuestRange) -> Result<Vec<SeccompRule>, FilterError> {
    let refused = if g.run_time_code { 0xffff_fffa } else { 0xffff_fffe };
    let mut rules = Vec::new();
    for j in 12..63u32 {
        let step = 1u64 << j;
        let Some(top) = g.mem_size.checked_sub(step) else { break };
        if top < g.heap_start {
            break;
        }
        rules.push(SeccompRule::new(vec![
            qword(0, SeccompCmpOp::Ge, g.heap_start)?,
            qword(0, SeccompCmpOp::Le, top)?,
            qword(1, SeccompCmpOp::Le, step)?,
            SeccompCondition::new(2, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(refused), 0)?,
            eq32(3, (libc::MAP_PRIVATE | libc::MAP_FIXED) as u64)?,
            SeccompCondition::new(4, SeccompCmpArgLen::Dword, SeccompCmpOp::Ge, FIRST_SOCKET_FD as u64)?,
        ])?);
    }
    Ok(rules)
}

/// The `HostFs` hypercall's calls (module docs, "Read-only host
/// directories"): opens beneath the mounts' descriptors only, and reading
/// what was opened.
fn mount_rules(r: &mut BTreeMap<i64, Vec<SeccompRule>>, g: GuestRange) -> Result<(), FilterError> {
    let mounts = g.mounts;
    // A mounted file's pages mapped privately over the guest's free
    // memory (module docs): the alias ladder's range, from a descriptor
    // of 3 up, read-only (and executable in an executable's instance).
    r.entry(libc::SYS_mmap).or_default().extend(file_map_rules(g)?);
    let below = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Lt, crate::MOUNT_FD0 as u64 + u64::from(mounts))?;
    // openat2 beneath a mount's directory (a detached read-only clone, or
    // a directory Landlock allows only reading beneath), `struct open_how`
    // of Linux 5.6's size.
    r.insert(libc::SYS_openat2, vec![SeccompRule::new(vec![fd_at_least(crate::MOUNT_FD0)?, below, qword(3, SeccompCmpOp::Eq, 24)?])?]);
    // What HostFs does with the descriptor it opened: attributes, a
    // regular file's bytes, a directory's entries, a link's target, close.
    for nr in [libc::SYS_fstat, libc::SYS_pread64, libc::SYS_getdents64, libc::SYS_readlinkat, libc::SYS_close] {
        r.insert(nr, vec![SeccompRule::new(vec![fd_at_least(FIRST_SOCKET_FD)?])?]);
    }
    Ok(())
}

/// The `HostFs` calls of a writable mount (module docs): each on a
/// descriptor HostFs opened beneath a mount (a file, or the parent
/// directory of one plain name). The guest can make them itself on any of
/// its descriptors: only the writable mounts' clones are writable, and
/// Landlock grants writing beneath those alone.
fn write_rules(r: &mut BTreeMap<i64, Vec<SeccompRule>>) -> Result<(), FilterError> {
    for nr in [libc::SYS_pwrite64, libc::SYS_ftruncate, libc::SYS_fsync, libc::SYS_fchmod] {
        r.insert(nr, vec![SeccompRule::new(vec![fd_at_least(FIRST_SOCKET_FD)?])?]);
    }
    // The *at calls on a real directory descriptor, never AT_FDCWD (whose
    // 32-bit value passes `fd >= 3`; the empty root would stop it anyway).
    let dirfd = |arg: u8| -> Result<Vec<SeccompCondition>, FilterError> {
        Ok(vec![
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Ge, FIRST_SOCKET_FD as u64)?,
            SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Lt, 1 << 31)?,
        ])
    };
    for nr in [libc::SYS_mkdirat, libc::SYS_unlinkat, libc::SYS_utimensat] {
        r.insert(nr, vec![SeccompRule::new(dirfd(0)?)?]);
    }
    r.insert(libc::SYS_renameat2, vec![SeccompRule::new([dirfd(0)?, dirfd(2)?].concat())?]);
    Ok(())
}

/// The allow-list as seccompiler rules: system call number → alternatives
/// (each alternative a conjunction of argument checks; none: any
/// arguments). An instance with networking (`net.any()`) also gets the
/// socket calls of the table in the module docs.
pub fn rules_for(net: NetPolicy, g: GuestRange) -> Result<BTreeMap<i64, Vec<SeccompRule>>, FilterError> {
    let mut r = BTreeMap::new();
    // ConsoleRead: the instance's stdin, nothing else.
    r.insert(libc::SYS_read, vec![SeccompRule::new(vec![eq32(0, 0)?])?]);
    // NetPoll: where an idle instance waits for stdin and host sockets.
    r.insert(libc::SYS_ppoll, vec![]);
    // Protect: the guest's free memory and stack (executable for a Linux
    // executable's libraries and JIT code; module docs).
    r.insert(libc::SYS_mprotect, mprotect_rules(g)?);
    // Alias: shared file mappings show the file's pages (guest memory
    // only, from the alias file only, never executable).
    r.insert(libc::SYS_mmap, alias_rules(g)?);
    // Release: freed guest memory goes back to the host (guest memory
    // only, MADV_DONTNEED only).
    r.insert(libc::SYS_madvise, release_rules(g)?);
    // Console hypercall and the tender's messages: stdout and stderr only.
    r.insert(libc::SYS_write, vec![SeccompRule::new(vec![eq32(0, 1)?])?, SeccompRule::new(vec![eq32(0, 2)?])?]);
    // Halt and fault hypercalls, and the tender stopping the instance.
    r.insert(libc::SYS_exit_group, vec![]);
    // Poll hypercall: a relative sleep on the monotonic clock.
    r.insert(libc::SYS_clock_nanosleep, vec![SeccompRule::new(vec![eq32(0, libc::CLOCK_MONOTONIC as u64)?, eq32(1, 0)?])?]);
    // The kernel resumes a sleep interrupted by a stop and continue with
    // restart_syscall; without it a stopped and continued instance dies.
    r.insert(libc::SYS_restart_syscall, vec![]);
    // The forwarded signals' handler returns (the crash and SIGSYS
    // handlers never do).
    r.insert(libc::SYS_rt_sigreturn, vec![]);
    // Preempt hypercall and the tick handler: the preemption tick is this
    // process's ITIMER_REAL (SIGALRM), nothing else.
    r.insert(libc::SYS_setitimer, vec![SeccompRule::new(vec![eq32(0, libc::ITIMER_REAL as u64)?])?]);
    if g.mounts > 0 {
        mount_rules(&mut r, g)?;
    }
    if g.writable {
        write_rules(&mut r)?;
    }
    if !net.any() {
        return Ok(r);
    }
    let first = FIRST_SOCKET_FD;
    // Data and control calls on guest sockets: every descriptor from
    // FIRST_SOCKET_FD up is one (the instance holds nothing else there).
    for nr in [libc::SYS_recvfrom, libc::SYS_listen, libc::SYS_shutdown, libc::SYS_close, libc::SYS_getsockopt, libc::SYS_getsockname, libc::SYS_getpeername] {
        r.insert(nr, vec![SeccompRule::new(vec![fd_at_least(first)?])?]);
    }
    if g.mounts > 0 {
        // close is the mounts' rule too (the same descriptors).
        r.insert(libc::SYS_close, vec![SeccompRule::new(vec![fd_at_least(first)?])?]);
    }
    // sendto: without outbound, never MSG_FASTOPEN (a send that connects,
    // which Landlock's connect rule does not see).
    let mut send = vec![fd_at_least(first)?];
    if !net.outbound {
        send.push(SeccompCondition::new(3, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(libc::MSG_FASTOPEN as u64), 0)?);
    }
    r.insert(libc::SYS_sendto, vec![SeccompRule::new(send)?]);
    // setsockopt: anything but address reuse at SOL_SOCKET (SO_REUSEADDR
    // shares a UDP port another process bound; SO_REUSEPORT joins a port
    // group of this user). The handler answers those without the call.
    let level = |op, v| SeccompCondition::new(1, SeccompCmpArgLen::Dword, op, v);
    let name_ne = |v: i32| SeccompCondition::new(2, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, v as u64);
    r.insert(
        libc::SYS_setsockopt,
        vec![
            SeccompRule::new(vec![fd_at_least(first)?, level(SeccompCmpOp::Ne, libc::SOL_SOCKET as u64)?])?,
            SeccompRule::new(vec![
                fd_at_least(first)?,
                level(SeccompCmpOp::Eq, libc::SOL_SOCKET as u64)?,
                name_ne(libc::SO_REUSEADDR)?,
                name_ne(libc::SO_REUSEPORT)?,
            ])?,
        ],
    );
    // accept4, non-blocking only: on the handed-over listening sockets, or
    // with outbound on, on any guest socket.
    let nonblock = has_bits(3, libc::SOCK_NONBLOCK as u64)?;
    let accept = if net.outbound || net.bind_any {
        SeccompRule::new(vec![fd_at_least(first)?, nonblock])?
    } else {
        let below = SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Lt, (first as u64) + u64::from(net.listeners))?;
        SeccompRule::new(vec![fd_at_least(first)?, below, nonblock])?
    };
    r.insert(libc::SYS_accept4, vec![accept]);
    if net.relay {
        // Relayed UDP sockets (crate::relay): a frame is a header and the
        // datagram, received and sent with two buffers each. On every guest
        // socket, as recvfrom and sendto are (what they do there is what
        // those do; no descriptor is ever sent to the instance but on the
        // bind channel); sendmsg, like sendto, never with MSG_FASTOPEN
        // (relays exist only without outbound).
        r.insert(libc::SYS_recvmsg, vec![SeccompRule::new(vec![fd_at_least(first)?])?]);
        r.insert(
            libc::SYS_sendmsg,
            vec![SeccompRule::new(vec![
                fd_at_least(first)?,
                SeccompCondition::new(2, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(libc::MSG_FASTOPEN as u64), 0)?,
            ])?],
        );
    } else if let Some(channel) = net.channel_fd() {
        // BIND_NEW: the socket the parent bound arrives by SCM_RIGHTS on the
        // bind channel, and there only (requests go out with sendto).
        r.insert(libc::SYS_recvmsg, vec![SeccompRule::new(vec![eq32(0, channel as u64)?])?]);
    }
    if net.outbound {
        // Sockets of its own, IPv4 and IPv6, non-blocking, TCP or UDP and
        // no other protocol (IPPROTO_MPTCP's ports are outside Landlock's
        // TCP rules); what bind and connect may reach is Landlock's
        // decision: see crate::landlock.
        let mut socket = Vec::new();
        for domain in [libc::AF_INET, libc::AF_INET6] {
            for (ty, proto) in [(libc::SOCK_STREAM, 0), (libc::SOCK_STREAM, libc::IPPROTO_TCP), (libc::SOCK_DGRAM, 0), (libc::SOCK_DGRAM, libc::IPPROTO_UDP)] {
                socket.push(SeccompRule::new(vec![
                    eq32(0, domain as u64)?,
                    has_bits(1, libc::SOCK_NONBLOCK as u64)?,
                    SeccompCondition::new(1, SeccompCmpArgLen::Dword, SeccompCmpOp::MaskedEq(0xf), ty as u64)?,
                    eq32(2, proto as u64)?,
                ])?);
            }
        }
        r.insert(libc::SYS_socket, socket);
        r.insert(libc::SYS_bind, vec![SeccompRule::new(vec![fd_at_least(first)?])?]);
        r.insert(libc::SYS_connect, vec![SeccompRule::new(vec![fd_at_least(first)?])?]);
    }
    // The watch set (crate::net::open_watch): registering new sockets and
    // waiting for reports, on the one descriptor it is pinned to.
    let watch = crate::net::watch_fd(&net) as u64;
    r.insert(libc::SYS_epoll_ctl, vec![SeccompRule::new(vec![eq32(0, watch)?, eq32(1, libc::EPOLL_CTL_ADD as u64)?])?]);
    r.insert(libc::SYS_epoll_pwait2, vec![SeccompRule::new(vec![eq32(0, watch)?])?]);
    Ok(r)
}

/// The calls a template (`crate::template`) needs on top of
/// [`rules_for`] to make its copies; each copy takes them away again with
/// [`copy_program`] before its guest runs on. Table in
/// `crate::template`'s docs.
fn add_template_rules(r: &mut BTreeMap<i64, Vec<SeccompRule>>, net: NetPolicy, g: GuestRange) -> Result<(), FilterError> {
    let control = crate::template::CONTROL_FD as u64;
    // The copy: a plain fork whose child is the gateway's, not the
    // template's (CLONE_PARENT), and nothing else.
    r.insert(libc::SYS_clone, vec![SeccompRule::new(vec![qword(0, SeccompCmpOp::Eq, libc::CLONE_PARENT as u64)?])?]);
    // The copy's requests (and the descriptors each brings) arrive on the
    // control channel, and there only.
    r.entry(libc::SYS_recvmsg).or_default().push(SeccompRule::new(vec![eq32(0, control)?])?);
    // The copy puts its own descriptors at the numbers the guest and the
    // filter know: stdout, stderr, the listening sockets, the alias file,
    // the watch set.
    let mut targets = vec![1u64, 2];
    targets.extend((0..net.listeners).map(|i| (FIRST_SOCKET_FD as u32 + i) as u64));
    targets.push(g.alias_fd as u64);
    targets.push(crate::net::watch_fd(&net) as u64);
    let mut dup3 = Vec::new();
    for t in targets {
        dup3.push(SeccompRule::new(vec![eq32(1, t)?])?);
    }
    r.insert(libc::SYS_dup3, dup3);
    // The copy's second filter: SECCOMP_SET_MODE_FILTER without flags.
    r.insert(libc::SYS_seccomp, vec![SeccompRule::new(vec![eq32(0, 1)?, eq32(1, 0)?])?]);
    // The copy dies with the gateway (fork clears the parent-death signal).
    let mut prctl = vec![SeccompRule::new(vec![eq32(0, libc::PR_SET_PDEATHSIG as u64)?, qword(1, SeccompCmpOp::Eq, libc::SIGKILL as u64)?])?];
    // An executable's copy turns syscall user dispatch on again (fork
    // clears it; without it a `syscall` its rewriting left reaches this
    // filter, not the guest kernel): exactly the template's range, no
    // selector, which the template's guest already has.
    if g.run_time_code {
        let (from, len) = crate::child::dispatch_range(g.mem_size);
        prctl.push(SeccompRule::new(vec![
            eq32(0, crate::sys::PR_SET_SYSCALL_USER_DISPATCH as u64)?,
            qword(1, SeccompCmpOp::Eq, crate::sys::PR_SYS_DISPATCH_ON)?,
            qword(2, SeccompCmpOp::Eq, from)?,
            qword(3, SeccompCmpOp::Eq, len)?,
            qword(4, SeccompCmpOp::Eq, 0)?,
        ])?);
    }
    r.insert(libc::SYS_prctl, prctl);
    // The copy's own random seed goes into the boot-info page: made
    // writable for that one write and read-only again.
    let page = shoal_abi::PAGE_SIZE;
    for prot in [libc::PROT_READ, libc::PROT_READ | libc::PROT_WRITE] {
        r.entry(libc::SYS_mprotect).or_default().push(SeccompRule::new(vec![
            qword(0, SeccompCmpOp::Eq, shoal_abi::BOOT_INFO_ADDR)?,
            qword(1, SeccompCmpOp::Eq, page)?,
            eq32(2, prot as u64)?,
        ])?);
    }
    Ok(())
}

/// The template's filter: [`program`] plus what making copies needs
/// (`add_template_rules`).
pub fn template_program(net: NetPolicy, g: GuestRange) -> Result<BpfProgram, FilterError> {
    let mut rules = rules_for(net, g)?;
    add_template_rules(&mut rules, net, g)?;
    let filter = SeccompFilter::new(rules, SeccompAction::Trap, SeccompAction::Allow, seccompiler::TargetArch::x86_64)?;
    let prog: BpfProgram = filter.try_into()?;
    Ok(if net.any() { with_hot_path(prog, crate::net::watch_fd(&net) as u32) } else { prog })
}

/// The second filter each copy of a template stacks on the template's
/// before its guest runs on: it traps every call the template's filter
/// allows only for making copies (`add_template_rules`) — `clone` and the
/// other ways to make a process, `dup3`, `seccomp`, `prctl`, `recvmsg`
/// (the copy has no bind channel) and `mprotect` below `heap_start` —
/// and lets everything else through to the template's filter, which
/// still decides it. Filters stack: a call runs only if both allow it.
pub fn copy_program(g: GuestRange) -> Result<BpfProgram, FilterError> {
    let mut r: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for nr in [
        libc::SYS_clone,
        libc::SYS_clone3,
        libc::SYS_fork,
        libc::SYS_vfork,
        libc::SYS_dup3,
        libc::SYS_dup2,
        libc::SYS_seccomp,
        libc::SYS_prctl,
        libc::SYS_recvmsg,
    ] {
        r.insert(nr, vec![]);
    }
    r.insert(libc::SYS_mprotect, vec![SeccompRule::new(vec![qword(0, SeccompCmpOp::Lt, g.heap_start)?])?]);
    let filter = SeccompFilter::new(r, SeccompAction::Allow, SeccompAction::Trap, seccompiler::TargetArch::x86_64)?;
    filter.try_into()
}

/// Compiles the filter for an instance with network policy `net`. Done
/// before the point of no return, because it allocates.
pub fn program(net: NetPolicy, g: GuestRange) -> Result<BpfProgram, FilterError> {
    let prog = compiled(net, g)?;
    Ok(if net.any() { with_hot_path(prog, crate::net::watch_fd(&net) as u32) } else { prog })
}

/// seccompiler's program for [`rules_for`], without the hot path.
fn compiled(net: NetPolicy, g: GuestRange) -> Result<BpfProgram, FilterError> {
    let filter = SeccompFilter::new(rules_for(net, g)?, SeccompAction::Trap, SeccompAction::Allow, seccompiler::TargetArch::x86_64)?;
    filter.try_into()
}

/// BPF opcodes of the hot path (classic BPF, linux/bpf_common.h):
/// `BPF_LD | BPF_W | BPF_ABS`, `BPF_JMP | BPF_JEQ | BPF_K`, `BPF_JMP |
/// BPF_JGE | BPF_K`, `BPF_JMP | BPF_JSET | BPF_K`, `BPF_RET | BPF_K`.
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
const BPF_JSET_K: u16 = 0x45;
const BPF_RET_K: u16 = 0x06;
/// `AUDIT_ARCH_X86_64` (linux/audit.h), what seccompiler's check compares.
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
/// Offsets in `struct seccomp_data`: the call number, the architecture,
/// the low 32 bits of the first argument (little-endian x86_64).
const DATA_NR: u32 = 0;
const DATA_ARCH: u32 = 4;
const DATA_ARG0_LO: u32 = 16;
/// The low 32 bits of the fourth argument (`sendto`'s flags).
const DATA_ARG3_LO: u32 = 40;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> seccompiler::sock_filter {
    seccompiler::sock_filter { code, jt, jf, k }
}

/// The three host calls a server makes per request (`recvfrom`, `sendto`,
/// `epoll_pwait2` on the watch set) checked first. seccompiler tests the
/// call numbers one after the other in numeric order (three instructions
/// per call that does not match), so these took 92–120 BPF instructions
/// each; with this prefix they take 8–9. The checks are exactly those of
/// [`rules_for`] (first argument's low 32 bits `>= FIRST_SOCKET_FD`, or
/// `== watch`; a `sendto` with `MSG_FASTOPEN` is left to seccompiler's
/// program, which allows it only with outbound); a call that fails them falls through to seccompiler's
/// program, which decides it as before (and traps it). Measured with
/// `examples/filter_cost.rs`: the filter's cost per call fell from about
/// 85 to 55 ns. The prefix goes right after seccompiler's architecture
/// check and its load of the call number, which it leaves loaded for the
/// rest; if seccompiler's program does not start that way (a new version),
/// the program is returned unchanged (the unit test catches that).
fn with_hot_path(prog: BpfProgram, watch: u32) -> BpfProgram {
    let starts_as_expected = prog.len() > 4
        && prog[0] == insn(BPF_LD_W_ABS, 0, 0, DATA_ARCH)
        && prog[1].code == BPF_JEQ_K
        && prog[1].k == AUDIT_ARCH_X86_64
        && prog[1].jt == 1
        && prog[1].jf == 0
        && prog[2].code == BPF_RET_K
        && prog[3] == insn(BPF_LD_W_ABS, 0, 0, DATA_NR);
    if !starts_as_expected {
        return prog;
    }
    let first = FIRST_SOCKET_FD as u32;
    let hot = [
        // 0: sendto → 3 (flags check), else 1.
        insn(BPF_JEQ_K, 2, 0, libc::SYS_sendto as u32),
        // 1: recvfrom → 5 (fd check), else 2.
        insn(BPF_JEQ_K, 3, 0, libc::SYS_recvfrom as u32),
        // 2: epoll_pwait2 → 7 (epfd check), else seccompiler's program (11).
        insn(BPF_JEQ_K, 4, 8, libc::SYS_epoll_pwait2 as u32),
        // 3-4: a sendto with MSG_FASTOPEN → reload (10): seccompiler's
        // program decides it (allowed only with outbound); else 5.
        insn(BPF_LD_W_ABS, 0, 0, DATA_ARG3_LO),
        insn(BPF_JSET_K, 5, 0, libc::MSG_FASTOPEN as u32),
        // 5-6: fd >= FIRST_SOCKET_FD → allow (9), else reload (10).
        insn(BPF_LD_W_ABS, 0, 0, DATA_ARG0_LO),
        insn(BPF_JGE_K, 2, 3, first),
        // 7-8: epfd == the watch set → allow (9), else reload (10).
        insn(BPF_LD_W_ABS, 0, 0, DATA_ARG0_LO),
        insn(BPF_JEQ_K, 0, 1, watch),
        // 9: allow.
        insn(BPF_RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
        // 10: the call number again, as seccompiler's program expects it.
        insn(BPF_LD_W_ABS, 0, 0, DATA_NR),
    ];
    // Every jump is relative and forward; nothing in prog[..4] jumps past
    // index 3, so inserting at 4 moves no target.
    let mut out = Vec::with_capacity(prog.len() + hot.len());
    out.extend_from_slice(&prog[..4]);
    out.extend_from_slice(&hot);
    out.extend_from_slice(&prog[4..]);
    out
}

/// The program spt installs in an instance without networking whose guest
/// memory ends at `mem_size` with free memory from `heap_start`, as raw
/// `sock_filter` records (8 bytes each, host byte order): what `shoal bench
/// boot`'s floor rows install, to measure what the host charges for the
/// filter alone.
pub fn plain_instance_bytes(heap_start: u64, mem_size: u64) -> Result<Vec<u8>, FilterError> {
    let net = NetPolicy::default();
    let prog = program(net, GuestRange { heap_start, mem_size, alias_fd: net.alias_fd(), run_time_code: false, mounts: 0, writable: false })?;
    Ok(to_bytes(&prog))
}

/// The program spt installs in a server instance: `listeners` listening
/// sockets handed over (`--publish`), no outbound networking, guest memory
/// as for [`plain_instance_bytes`]. What `examples/filter_cost.rs` installs
/// to measure what the filter adds to each of a server's host calls.
pub fn server_instance_bytes(listeners: u32, heap_start: u64, mem_size: u64) -> Result<Vec<u8>, FilterError> {
    let net = NetPolicy { listeners, outbound: false, bind_any: false, relay: false };
    let prog = program(net, GuestRange { heap_start, mem_size, alias_fd: net.alias_fd(), run_time_code: false, mounts: 0, writable: false })?;
    Ok(to_bytes(&prog))
}

/// The watch set's descriptor in a server instance with `listeners`
/// listening sockets (the one descriptor its epoll calls are pinned to).
pub fn server_watch_fd(listeners: u32) -> i32 {
    crate::net::watch_fd(&NetPolicy { listeners, outbound: false, bind_any: false, relay: false })
}

/// A program as raw `sock_filter` records (8 bytes each, host byte order).
pub(crate) fn to_bytes(prog: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(prog.len() * 8);
    for f in prog {
        out.extend_from_slice(&f.code.to_ne_bytes());
        out.push(f.jt);
        out.push(f.jf);
        out.extend_from_slice(&f.k.to_ne_bytes());
    }
    out
}

/// The program of [`to_bytes`]'s records (`None` if not whole records).
pub(crate) fn from_bytes(b: &[u8]) -> Option<BpfProgram> {
    if b.is_empty() || !b.len().is_multiple_of(8) {
        return None;
    }
    Some(
        b.chunks_exact(8)
            .map(|r| seccompiler::sock_filter { code: u16::from_ne_bytes([r[0], r[1]]), jt: r[2], jf: r[3], k: u32::from_ne_bytes([r[4], r[5], r[6], r[7]]) })
            .collect(),
    )
}

/// Everything [`program`] depends on, as numbers: a program compiled for
/// one key is the program for any input with the same key. `shoal serve`
/// compiles a function's filter once (`crate::Prepared`) and hands it to
/// each instance with its key; the instance uses it only if the key is the
/// one it computes itself, and compiles its own otherwise.
pub(crate) fn key(net: NetPolicy, g: GuestRange) -> [u64; 6] {
    let alias_and_code = g.alias_fd as u32 as u64 | u64::from(g.run_time_code) << 32 | u64::from(g.mounts) << 33 | u64::from(g.writable) << 40;
    [g.heap_start, g.mem_size, alias_and_code, u64::from(net.listeners), u64::from(net.outbound), u64::from(net.bind_any) | u64::from(net.relay) << 1]
}

/// Where compiled programs are kept between starts: `$SHOAL_CACHE/filter`,
/// by default `~/.cache/shoal/filter`, in a directory per build of the
/// command that compiled them.
fn disk_cache_dir() -> Option<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let cache = match std::env::var_os("SHOAL_CACHE") {
        Some(c) => std::path::PathBuf::from(c),
        None => std::path::PathBuf::from(std::env::var_os("HOME")?).join(".cache/shoal"),
    };
    // The rules are this build's code: a program is only taken by the
    // very build (path, inode, size and times of the executable) that
    // compiled it, so a rebuilt shoal never runs an older allow-list.
    let exe = std::env::current_exe().ok()?;
    let m = std::fs::metadata(&exe).ok()?;
    let build = format!("{}:{}:{}:{}:{}.{}:{}.{}", exe.display(), m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec());
    Some(cache.join("filter").join(format!("{:016x}", fnv(build.as_bytes()))))
}

/// FNV-1a: a file name and a check against a torn or damaged file, not a
/// defence (the cache is the user's own, like the instance images it
/// runs).
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| (h ^ u64::from(c)).wrapping_mul(0x100_0000_01b3))
}

/// Most programs kept per build; past it, a store empties the directory.
const DISK_CACHE_MAX: usize = 256;

/// [`program`] for `net` and `g` as [`to_bytes`] records, compiled once per
/// build of this command and key ([`key`]) and then read from the disk
/// cache: compiling took 0.8 ms of every `shoal run` (seccompiler, the
/// alias ladder), reading takes three system calls. A file is used only
/// if its check matches its records; anything wrong with the cache means
/// compiling here, as without it.
pub(crate) fn program_bytes_cached(net: NetPolicy, g: GuestRange) -> Result<Vec<u8>, FilterError> {
    let k = key(net, g);
    let name = k.iter().map(|w| format!("{w:016x}")).collect::<String>();
    let dir = disk_cache_dir();
    if let Some(b) = dir.as_ref().and_then(|d| std::fs::read(d.join(&name)).ok()) {
        if b.len() > 8 && b[..8] == fnv(&b[8..]).to_le_bytes() && from_bytes(&b[8..]).is_some() {
            return Ok(b[8..].to_vec());
        }
    }
    let prog = to_bytes(&program(net, g)?);
    if let Some(d) = dir {
        // Best effort, and by one rename: a concurrent start reads the
        // whole file or none.
        if std::fs::read_dir(&d).is_ok_and(|r| r.count() >= DISK_CACHE_MAX) {
            let _ = std::fs::remove_dir_all(&d);
        }
        let tmp = d.join(format!(".{name}.{}.tmp", std::process::id()));
        let mut file = fnv(&prog).to_le_bytes().to_vec();
        file.extend_from_slice(&prog);
        if std::fs::create_dir_all(&d).is_ok() && std::fs::write(&tmp, &file).is_ok() && std::fs::rename(&tmp, d.join(&name)).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    Ok(prog)
}

#[cfg(test)]
mod tests {
    use super::GuestRange;

    /// A program compiled ahead travels as bytes and comes back the same;
    /// the key changes with every input the program depends on.
    #[test]
    fn a_program_round_trips_through_bytes_and_its_key_names_its_inputs() {
        let net = crate::net::NetPolicy { listeners: 1, outbound: false, bind_any: false, relay: false };
        let g = GuestRange { heap_start: 0x40_0000, mem_size: 256 << 20, alias_fd: net.alias_fd(), run_time_code: false, mounts: 0, writable: false };
        let p = super::program(net, g).unwrap();
        assert_eq!(super::from_bytes(&super::to_bytes(&p)), Some(p));
        assert_eq!(super::from_bytes(&[1, 2, 3]), None);
        assert_eq!(super::from_bytes(&[]), None);
        let k = super::key(net, g);
        assert_ne!(k, super::key(net, GuestRange { heap_start: 0x40_1000, ..g }));
        assert_ne!(k, super::key(net, GuestRange { mem_size: 128 << 20, ..g }));
        assert_ne!(k, super::key(net, GuestRange { run_time_code: true, ..g }));
        assert_ne!(k, super::key(crate::net::NetPolicy { outbound: true, ..net }, g));
        assert_ne!(k, super::key(crate::net::NetPolicy { listeners: 2, ..net }, g));
        assert_ne!(k, super::key(crate::net::NetPolicy { bind_any: true, ..net }, g));
        assert_ne!(k, super::key(crate::net::NetPolicy { relay: true, ..net }, g));
    }

    const G: GuestRange = GuestRange { heap_start: 0x40_0000, mem_size: 256 << 20, alias_fd: 3, run_time_code: false, mounts: 0, writable: false };

    #[test]
    fn the_alias_ladder_stays_inside_guest_memory() {
        let rules = super::alias_rules(G).unwrap();
        assert!(rules.len() > 20 && rules.len() < 80, "{} rules", rules.len());
        // The pieces the handler makes are allowed by some rule.
        let mem = G.mem_size;
        for &(dst, src) in &[(mem - 4096, G.heap_start), (G.heap_start, mem - 8192), (0x123000 + G.heap_start, 0x800000)] {
            let n = crate::protect::alias_piece(dst, src, 1 << 30, mem);
            assert!(n >= 4096 && n.is_power_of_two());
            assert!(dst + n <= mem && src + n <= mem);
        }
    }

    #[test]
    fn allow_list_is_eleven_calls() {
        let r = super::rules(G).unwrap();
        let mut nrs: Vec<i64> = r.keys().copied().collect();
        nrs.sort_unstable();
        let mut want = vec![
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_mprotect,
            libc::SYS_mmap,
            libc::SYS_madvise,
            libc::SYS_restart_syscall,
            libc::SYS_clock_nanosleep,
            libc::SYS_exit_group,
            libc::SYS_ppoll,
            libc::SYS_rt_sigreturn,
            libc::SYS_setitimer,
        ];
        want.sort_unstable();
        assert_eq!(nrs, want);
        assert!(!super::program(super::NetPolicy::default(), G).unwrap().is_empty());
    }

    #[test]
    fn only_an_executable_may_ask_for_execute() {
        // The same ladder; only the protection bits it refuses differ.
        let plain = super::mprotect_rules(G).unwrap();
        let exec = super::mprotect_rules(GuestRange { run_time_code: true, ..G }).unwrap();
        assert_eq!(plain.len(), exec.len());
        assert_ne!(plain, exec);
    }

    #[test]
    fn madvise_is_the_mprotect_ladder_with_dontneed_only() {
        // One rule per rung of the mprotect ladder (whose bounds the next
        // test checks), each pinning the advice instead of a protection.
        let release = super::release_rules(G).unwrap();
        assert_eq!(release.len(), super::mprotect_rules(G).unwrap().len());
        let r = super::rules(G).unwrap();
        assert_eq!(r[&libc::SYS_madvise].len(), release.len());
    }

    #[test]
    fn the_mprotect_ladder_covers_the_guest_range_and_nothing_past_it() {
        // Each rule: [lo, hi) for addr and a maximum len; lo >= heap_start
        // and hi - 1 + len <= mem_size, and the rules tile [heap_start, mem_size).
        let rules = super::mprotect_rules(G).unwrap();
        assert!(rules.len() > 10 && rules.len() < 40, "{} rules", rules.len());
        let mut covered = G.mem_size;
        let mut addr = G.mem_size - shoal_abi::PAGE_SIZE;
        while addr >= G.heap_start {
            let max = crate::protect::max_len(addr, G.mem_size);
            assert!(addr + max <= G.mem_size);
            covered = covered.min(addr);
            addr -= shoal_abi::PAGE_SIZE;
        }
        assert_eq!(covered, G.heap_start);
    }

    #[test]
    fn networking_adds_only_socket_calls_on_guest_descriptors() {
        use super::NetPolicy;
        let inbound = super::rules_for(NetPolicy { listeners: 2, outbound: false, bind_any: false, relay: false }, G).unwrap();
        let mut extra: Vec<i64> = inbound.keys().copied().filter(|n| !super::rules(G).unwrap().contains_key(n)).collect();
        extra.sort_unstable();
        let mut want = vec![
            libc::SYS_close,
            libc::SYS_sendto,
            libc::SYS_recvfrom,
            libc::SYS_shutdown,
            libc::SYS_listen,
            libc::SYS_getsockname,
            libc::SYS_getpeername,
            libc::SYS_setsockopt,
            libc::SYS_getsockopt,
            libc::SYS_accept4,
            libc::SYS_epoll_ctl,
            libc::SYS_epoll_pwait2,
        ];
        want.sort_unstable();
        assert_eq!(extra, want);
        let out = super::rules_for(NetPolicy { listeners: 0, outbound: true, bind_any: false, relay: false }, G).unwrap();
        for nr in [libc::SYS_socket, libc::SYS_bind, libc::SYS_connect] {
            assert!(out.contains_key(&nr) && !inbound.contains_key(&nr));
        }
        assert!(!inbound.contains_key(&libc::SYS_recvmsg) && !out.contains_key(&libc::SYS_recvmsg));
        assert!(!super::program(NetPolicy { listeners: 1, outbound: true, bind_any: false, relay: false }, G).unwrap().is_empty());
        // --net-bind-any: the inbound calls, plus recvmsg on the channel
        // only; still no socket, bind or connect of the guest's own.
        let only_channel = super::rules_for(NetPolicy { listeners: 1, outbound: false, bind_any: true, relay: false }, G).unwrap();
        assert!(!only_channel.contains_key(&libc::SYS_sendmsg) && only_channel.contains_key(&libc::SYS_recvmsg));
        // Without outbound its UDP binds are relayed (crate::relay): also
        // recvmsg and sendmsg on guest sockets.
        let any = NetPolicy { listeners: 1, outbound: false, bind_any: true, relay: true };
        assert_eq!(any.channel_fd(), Some(4));
        let r = super::rules_for(any, G).unwrap();
        let mut extra: Vec<i64> = r.keys().copied().filter(|n| !super::rules(G).unwrap().contains_key(n)).collect();
        extra.sort_unstable();
        want.push(libc::SYS_recvmsg);
        want.push(libc::SYS_sendmsg);
        want.sort_unstable();
        assert_eq!(extra, want);
        assert!(!super::program(any, G).unwrap().is_empty());
    }
}

#[cfg(test)]
mod hot_path_tests {
    use super::{GuestRange, NetPolicy};
    use seccompiler::sock_filter;

    /// Runs a classic BPF seccomp program (the instructions seccompiler and
    /// the hot path emit) on `struct seccomp_data` of x86_64 call `nr` with
    /// `args`; returns the action and the instructions executed.
    fn run(prog: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> (u32, usize) {
        let word = |k: u32| -> u32 {
            match k {
                0 => nr,
                4 => arch,
                8 | 12 => 0,
                k if (16..64).contains(&k) && k % 4 == 0 => {
                    let a = args[((k - 16) / 8) as usize];
                    if k % 8 == 0 {
                        a as u32
                    } else {
                        (a >> 32) as u32
                    }
                }
                k => panic!("load of offset {k}"),
            }
        };
        let (mut pc, mut a, mut steps) = (0usize, 0u32, 0usize);
        loop {
            let i = &prog[pc];
            steps += 1;
            match i.code {
                0x20 => {
                    a = word(i.k);
                    pc += 1;
                }
                0x54 => {
                    a &= i.k;
                    pc += 1;
                }
                0x05 => pc += 1 + i.k as usize,
                0x06 => return (i.k, steps),
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let t = match i.code {
                        0x15 => a == i.k,
                        0x25 => a > i.k,
                        0x35 => a >= i.k,
                        _ => a & i.k != 0,
                    };
                    pc += 1 + if t { i.jt } else { i.jf } as usize;
                }
                c => panic!("opcode {c:#x} at {pc}"),
            }
        }
    }

    /// `mprotect` may make guest memory executable (libraries `ld.so`
    /// maps, JIT code: read, write and execute bits only), never memory
    /// below `heap_start` or past `mem_size`; `mmap` of the alias file
    /// stays never executable.
    #[test]
    fn exec_protection_is_guest_memory_only() {
        let x86 = super::AUDIT_ARCH_X86_64;
        let (allow, trap) = (libc::SECCOMP_RET_ALLOW, libc::SECCOMP_RET_TRAP);
        let g = GuestRange { heap_start: 0x100_0000, mem_size: 512 << 20, alias_fd: 3, run_time_code: true, mounts: 0, writable: false };
        let prog = super::program(NetPolicy::default(), g).unwrap();
        let act = |nr: i64, args: [u64; 6]| run(&prog, x86, nr as u32, args).0;
        let mp = libc::SYS_mprotect;
        // A shoal image's instance: never executable.
        let image = super::program(NetPolicy::default(), GuestRange { run_time_code: false, ..g }).unwrap();
        for prot in [4u64, 5, 6, 7] {
            assert_eq!(run(&image, x86, mp as u32, [g.heap_start, 0x1000, prot, 0, 0, 0]).0, trap, "image: prot {prot}");
        }
        for prot in [4u64, 5, 6, 7] {
            assert_eq!(act(mp, [g.heap_start, 0x1000, prot, 0, 0, 0]), allow, "prot {prot}");
            assert_eq!(act(mp, [g.mem_size - 0x1000, 0x1000, prot, 0, 0, 0]), allow, "prot {prot} on the last page");
            assert_eq!(act(mp, [g.heap_start - 0x1000, 0x1000, prot, 0, 0, 0]), trap, "prot {prot} over the image");
            assert_eq!(act(mp, [g.mem_size - 0x1000, 0x2000, prot, 0, 0, 0]), trap, "prot {prot} past guest memory");
            assert_eq!(act(mp, [g.mem_size, 0x1000, prot, 0, 0, 0]), trap, "prot {prot} on tender memory");
        }
        for prot in [8u64, 0x100_0000, 0x200_0000, 0x1_0000_0007] {
            let want = if prot >> 32 != 0 { allow } else { trap };
            assert_eq!(act(mp, [g.heap_start, 0x1000, prot, 0, 0, 0]), want, "prot {prot:#x} (the kernel reads 32 bits)");
        }
        let alias = [g.heap_start, 0x1000, 7, (libc::MAP_SHARED | libc::MAP_FIXED) as u64, 3, g.heap_start + 0x1000];
        assert_eq!(act(libc::SYS_mmap, alias), trap, "an executable alias");
    }

    /// With mounts, `mmap` of a descriptor from 3, private and fixed, over
    /// guest memory only, read-only (and executable only in an
    /// executable's instance), never writable or shared; without mounts
    /// not at all.
    #[test]
    fn mounted_files_map_privately_read_only_into_guest_memory_only() {
        let x86 = super::AUDIT_ARCH_X86_64;
        let (allow, trap) = (libc::SECCOMP_RET_ALLOW, libc::SECCOMP_RET_TRAP);
        let g = GuestRange { heap_start: 0x100_0000, mem_size: 512 << 20, alias_fd: 3, run_time_code: true, mounts: 1, writable: false };
        let prog = super::program(NetPolicy::default(), g).unwrap();
        let act = |p: &seccompiler::BpfProgram, args: [u64; 6]| run(p, x86, libc::SYS_mmap as u32, args).0;
        let fixed = (libc::MAP_PRIVATE | libc::MAP_FIXED) as u64;
        let at = |addr: u64, len: u64, prot: u64, flags: u64, fd: u64| [addr, len, prot, flags, fd, 0x7000];
        assert_eq!(act(&prog, at(g.heap_start, 0x10_0000, 1, fixed, 1005)), allow, "read-only");
        assert_eq!(act(&prog, at(g.mem_size - 0x1000, 0x1000, 5, fixed, 7)), allow, "read-execute, last page");
        assert_eq!(act(&prog, at(g.heap_start, 0x1000, 3, fixed, 7)), trap, "writable");
        assert_eq!(act(&prog, at(g.heap_start, 0x1000, 7, fixed, 7)), trap, "writable and executable");
        assert_eq!(act(&prog, at(g.heap_start, 0x1000, 1, (libc::MAP_SHARED | libc::MAP_FIXED) as u64, 7)), trap, "shared");
        assert_eq!(act(&prog, at(g.heap_start, 0x1000, 1, libc::MAP_PRIVATE as u64, 7)), trap, "not fixed");
        assert_eq!(act(&prog, at(g.heap_start, 0x1000, 1, fixed, 2)), trap, "stderr");
        assert_eq!(act(&prog, at(g.heap_start - 0x1000, 0x1000, 1, fixed, 7)), trap, "over the image");
        assert_eq!(act(&prog, at(g.mem_size - 0x1000, 0x2000, 1, fixed, 7)), trap, "past guest memory");
        assert_eq!(act(&prog, at(g.mem_size, 0x1000, 1, fixed, 7)), trap, "tender memory");
        let image = super::program(NetPolicy::default(), GuestRange { run_time_code: false, ..g }).unwrap();
        assert_eq!(act(&image, at(g.heap_start, 0x1000, 1, fixed, 7)), allow, "an image's instance: read-only");
        assert_eq!(act(&image, at(g.heap_start, 0x1000, 5, fixed, 7)), trap, "an image's instance: executable");
        let none = super::program(NetPolicy::default(), GuestRange { mounts: 0, ..g }).unwrap();
        assert_eq!(act(&none, at(g.heap_start, 0x1000, 1, fixed, 7)), trap, "without mounts");
    }

    /// Socket protocols are TCP and UDP only, address
    /// reuse options trap (the handler answers them), and `MSG_FASTOPEN`
    /// traps without outbound — in the program as installed.
    #[test]
    fn the_filter_pins_protocols_address_reuse_and_fast_open() {
        let x86 = super::AUDIT_ARCH_X86_64;
        let (allow, trap) = (libc::SECCOMP_RET_ALLOW, libc::SECCOMP_RET_TRAP);
        for outbound in [false, true] {
            let net = NetPolicy { listeners: 1, outbound, bind_any: !outbound, relay: !outbound };
            let g = GuestRange { heap_start: 0x100_0000, mem_size: 512 << 20, alias_fd: net.alias_fd(), run_time_code: false, mounts: 0, writable: false };
            let prog = super::program(net, g).unwrap();
            let act = |nr: i64, args: [u64; 6]| run(&prog, x86, nr as u32, args).0;
            let nb = libc::SOCK_NONBLOCK as u64;
            for (domain, ty, proto, ok) in [
                (libc::AF_INET, libc::SOCK_STREAM, 0, true),
                (libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_TCP, true),
                (libc::AF_INET6, libc::SOCK_DGRAM, 0, true),
                (libc::AF_INET6, libc::SOCK_DGRAM, libc::IPPROTO_UDP, true),
                (libc::AF_INET, libc::SOCK_STREAM, 262, false),
                (libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_UDP, false),
                (libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_ICMP, false),
                (libc::AF_INET, libc::SOCK_RAW, 0, false),
                (libc::AF_INET, libc::SOCK_SEQPACKET, 0, false),
            ] {
                let want = if ok && outbound { allow } else { trap };
                assert_eq!(act(libc::SYS_socket, [domain as u64, ty as u64 | nb, proto as u64, 0, 0, 0]), want, "{outbound} {domain}/{ty}/{proto}");
            }
            let one = |level: i32, name: i32| [3u64, level as u64, name as u64, 0x1000, 4, 0];
            assert_eq!(act(libc::SYS_setsockopt, one(libc::SOL_SOCKET, libc::SO_REUSEADDR)), trap);
            assert_eq!(act(libc::SYS_setsockopt, one(libc::SOL_SOCKET, libc::SO_REUSEPORT)), trap);
            assert_eq!(act(libc::SYS_setsockopt, one(libc::SOL_SOCKET, libc::SO_KEEPALIVE)), allow);
            assert_eq!(act(libc::SYS_setsockopt, one(libc::IPPROTO_TCP, libc::SO_REUSEADDR)), allow, "TCP_MAXSEG has SO_REUSEADDR's number");
            assert_eq!(act(libc::SYS_setsockopt, one(libc::IPPROTO_IPV6, libc::SO_REUSEPORT)), allow);
            let fast_open = [3u64, 0x1000, 1, (libc::MSG_FASTOPEN | libc::MSG_NOSIGNAL) as u64, 0x2000, 16];
            assert_eq!(act(libc::SYS_sendto, fast_open), if outbound { allow } else { trap });
            assert_eq!(act(libc::SYS_sendto, [3, 0x1000, 1, libc::MSG_NOSIGNAL as u64, 0x2000, 16]), allow);
            if !outbound {
                // A relay's frames (crate::relay): sendmsg as sendto.
                assert_eq!(act(libc::SYS_sendmsg, [3, 0x1000, (libc::MSG_FASTOPEN | libc::MSG_NOSIGNAL) as u64, 0, 0, 0]), trap);
                assert_eq!(act(libc::SYS_sendmsg, [3, 0x1000, libc::MSG_NOSIGNAL as u64, 0, 0, 0]), allow);
                assert_eq!(act(libc::SYS_sendmsg, [2, 0x1000, libc::MSG_NOSIGNAL as u64, 0, 0, 0]), trap);
                assert_eq!(act(libc::SYS_recvmsg, [3, 0x1000, 0, 0, 0, 0]), allow);
            }
        }
    }

    /// The hot path decides every call as seccompiler's program alone does
    /// (allowed, trapped, killed), and the three per-request calls take 9
    /// instructions at most instead of about a hundred.
    #[test]
    fn the_hot_path_decides_as_the_plain_program_and_is_short() {
        for net in [
            NetPolicy { listeners: 1, outbound: false, bind_any: false, relay: false },
            NetPolicy { listeners: 1, outbound: false, bind_any: true, relay: true },
            NetPolicy { listeners: 2, outbound: true, bind_any: true, relay: false },
        ] {
            let g = GuestRange { heap_start: 0x100_0000, mem_size: 512 << 20, alias_fd: net.alias_fd(), run_time_code: false, mounts: 0, writable: false };
            let plain = super::compiled(net, g).unwrap();
            let hot = super::program(net, g).unwrap();
            assert_eq!(hot.len(), plain.len() + 11, "the hot path was not inserted: seccompiler's program starts differently");
            let watch = crate::net::watch_fd(&net) as u64;
            let x86 = super::AUDIT_ARCH_X86_64;
            let (recv, send, wait) = (libc::SYS_recvfrom as u32, libc::SYS_sendto as u32, libc::SYS_epoll_pwait2 as u32);
            let mut cases: Vec<(u32, u32, [u64; 6])> = Vec::new();
            for nr in [recv, send, wait, libc::SYS_read as u32, libc::SYS_write as u32, libc::SYS_close as u32, libc::SYS_epoll_ctl as u32] {
                for a0 in [0u64, 1, 2, 3, 4, watch - 1, watch, watch + 1, 1000, 0xffff_ffff, (1 << 32) | 3, (1 << 32) | watch, 1 << 32] {
                    cases.push((x86, nr, [a0, 0, 64, 0, 0, 8]));
                    // With an argument pattern that passes the other rules' checks.
                    cases.push((x86, nr, [a0, watch, libc::EPOLL_CTL_ADD as u64, 0, 0, 0]));
                    // A send that connects (TCP Fast Open), and other flags.
                    cases.push((x86, nr, [a0, 0, 64, libc::MSG_FASTOPEN as u64, 0, 0]));
                    cases.push((x86, nr, [a0, 0, 64, (libc::MSG_FASTOPEN | libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) as u64, 0, 0]));
                    cases.push((x86, nr, [a0, 0, 64, (libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) as u64, 0, 0]));
                }
            }
            // x32 numbers, another architecture, calls never allowed.
            cases.push((x86, recv | 0x4000_0000, [3, 0, 0, 0, 0, 0]));
            cases.push((x86, wait | 0x4000_0000, [watch, 0, 0, 0, 0, 0]));
            cases.push((0x4000_0003, recv, [3, 0, 0, 0, 0, 0]));
            cases.push((0x4000_0003, wait, [watch, 0, 0, 0, 0, 0]));
            cases.push((x86, libc::SYS_execve as u32, [3, 0, 0, 0, 0, 0]));
            cases.push((x86, libc::SYS_mprotect as u32, [g.heap_start, 4096, 3, 0, 0, 0]));
            for (arch, nr, args) in cases {
                let (want, _) = run(&plain, arch, nr, args);
                let (got, _) = run(&hot, arch, nr, args);
                assert_eq!(got, want, "arch {arch:#x} nr {nr} args {args:x?}");
            }
            for (nr, a0) in [(recv, 3), (send, 7), (wait, watch)] {
                let (act, n_hot) = run(&hot, x86, nr, [a0, 0, 64, 0, 0, 8]);
                let (_, n_plain) = run(&plain, x86, nr, [a0, 0, 64, 0, 0, 8]);
                assert_eq!(act, libc::SECCOMP_RET_ALLOW);
                assert!(n_hot <= 9, "nr {nr}: {n_hot}");
                assert!(n_plain > 50, "nr {nr}: {n_plain}");
            }
        }
        // Without networking there is nothing to put first.
        let g = GuestRange { heap_start: 0x100_0000, mem_size: 512 << 20, alias_fd: 3, run_time_code: false, mounts: 0, writable: false };
        assert_eq!(super::program(NetPolicy::default(), g).unwrap(), super::compiled(NetPolicy::default(), g).unwrap());
    }

    /// An executable's template may turn syscall user dispatch on with
    /// exactly its own range (what its copies do after the fork); any
    /// other range, a selector, or an image's template is trapped, and a
    /// copy traps it too.
    #[test]
    fn only_an_executables_template_turns_dispatch_on_again_and_only_as_it_was() {
        let net = NetPolicy { listeners: 1, outbound: false, bind_any: false, relay: false };
        let g = GuestRange { heap_start: 0x100_0000, mem_size: 512 << 20, alias_fd: net.alias_fd(), run_time_code: true, mounts: 2, writable: false };
        let (from, len) = crate::child::dispatch_range(g.mem_size);
        let x86 = super::AUDIT_ARCH_X86_64;
        let (allow, trap) = (libc::SECCOMP_RET_ALLOW, libc::SECCOMP_RET_TRAP);
        let nr = libc::SYS_prctl as u32;
        let on = crate::sys::PR_SET_SYSCALL_USER_DISPATCH as u64;
        let tpl = super::template_program(net, g).unwrap();
        assert_eq!(run(&tpl, x86, nr, [on, 1, from, len, 0, 0]).0, allow);
        for args in [[on, 1, 0, len + from, 0, 0], [on, 1, from, len, 0x1000, 0], [on, 0, 0, 0, 0, 0], [on, 1, from + 4096, len - 4096, 0, 0]] {
            assert_eq!(run(&tpl, x86, nr, args).0, trap, "{args:x?}");
        }
        let copy = super::copy_program(g).unwrap();
        assert_eq!(run(&copy, x86, nr, [on, 1, from, len, 0, 0]).0, trap);
        let image = super::template_program(net, GuestRange { run_time_code: false, ..g }).unwrap();
        assert_eq!(run(&image, x86, nr, [on, 1, from, len, 0, 0]).0, trap);
    }

    /// A template's filter allows what making copies needs; a copy's
    /// second filter traps exactly those calls (and every other way to
    /// make a process) and lets the rest through to the template's, which
    /// still decides it: stacked, a call runs only if both allow it.
    #[test]
    fn a_copy_loses_what_only_its_template_may_do() {
        let net = NetPolicy { listeners: 1, outbound: false, bind_any: false, relay: false };
        let g = GuestRange { heap_start: 0x100_0000, mem_size: 512 << 20, alias_fd: net.alias_fd(), run_time_code: false, mounts: 0, writable: false };
        let tpl = super::template_program(net, g).unwrap();
        let copy = super::copy_program(g).unwrap();
        let plain = super::program(net, g).unwrap();
        let x86 = super::AUDIT_ARCH_X86_64;
        let (allow, trap) = (libc::SECCOMP_RET_ALLOW, libc::SECCOMP_RET_TRAP);
        let both = |nr: i64, args: [u64; 6]| -> (u32, u32, u32) {
            let (t, _) = run(&tpl, x86, nr as u32, args);
            let (c, _) = run(&copy, x86, nr as u32, args);
            let (p, _) = run(&plain, x86, nr as u32, args);
            (t, c, p)
        };
        let control = crate::template::CONTROL_FD as u64;
        let boot = shoal_abi::BOOT_INFO_ADDR;
        // Only the template: allowed there, trapped in a copy and in a plain instance.
        for (nr, args) in [
            (libc::SYS_clone, [libc::CLONE_PARENT as u64, 0, 0, 0, 0, 0]),
            (libc::SYS_recvmsg, [control, 0x1000, 0, 0, 0, 0]),
            (libc::SYS_dup3, [9, 3, 0, 0, 0, 0]),
            (libc::SYS_dup3, [9, 1, 0, 0, 0, 0]),
            (libc::SYS_seccomp, [1, 0, 0x1000, 0, 0, 0]),
            (libc::SYS_prctl, [libc::PR_SET_PDEATHSIG as u64, libc::SIGKILL as u64, 0, 0, 0, 0]),
            (libc::SYS_mprotect, [boot, 4096, (libc::PROT_READ | libc::PROT_WRITE) as u64, 0, 0, 0]),
        ] {
            let (t, c, p) = both(nr, args);
            assert_eq!((t, c, p), (allow, trap, trap), "nr {nr} {args:x?}");
        }
        // Not even the template: other clone flags, other targets, other options.
        for (nr, args) in [
            (libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]),
            (libc::SYS_clone, [(libc::CLONE_PARENT | libc::CLONE_VM) as u64, 0, 0, 0, 0, 0]),
            (libc::SYS_fork, [0; 6]),
            (libc::SYS_clone3, [0; 6]),
            (libc::SYS_recvmsg, [3, 0x1000, 0, 0, 0, 0]),
            (libc::SYS_dup3, [9, 0, 0, 0, 0, 0]),
            (libc::SYS_dup3, [9, 7, 0, 0, 0, 0]),
            (libc::SYS_seccomp, [1, 8, 0x1000, 0, 0, 0]),
            (libc::SYS_prctl, [libc::PR_SET_DUMPABLE as u64, 1, 0, 0, 0, 0]),
            (libc::SYS_mprotect, [boot, 4096, (libc::PROT_READ | libc::PROT_EXEC) as u64, 0, 0, 0]),
            (libc::SYS_mprotect, [boot + 4096, 4096, libc::PROT_READ as u64, 0, 0, 0]),
        ] {
            let (t, c, _) = both(nr, args);
            assert_eq!(t, trap, "nr {nr} {args:x?}");
            assert_ne!(c, allow, "nr {nr} {args:x?}");
        }
        // An instance's ordinary calls: both allow, as a plain instance does.
        for (nr, args) in [
            (libc::SYS_recvfrom, [4, 0x1000, 64, 0, 0, 0]),
            (libc::SYS_sendto, [4, 0x1000, 64, 0, 0, 0]),
            (libc::SYS_write, [1, 0x1000, 1, 0, 0, 0]),
            (libc::SYS_mprotect, [g.heap_start, 4096, libc::PROT_READ as u64, 0, 0, 0]),
        ] {
            assert_eq!(both(nr, args), (allow, allow, allow), "nr {nr} {args:x?}");
        }
    }
}
