//! The `/proc` and `/sys` files programs and language runtimes read to
//! size themselves, synthesized from the instance's own limits: one CPU
//! (the instance has one vCPU) and the memory the kernel manages.
//!
//! Files whose content is fixed for the instance's life are written once
//! at boot ([`populate`]): `/proc/cpuinfo`, `/proc/self/auxv` (copied
//! from the initial stack the tender wrote), `/proc/self/exe` (a symbolic
//! link to the path the program was started as), `/proc/self/cgroup`,
//! `/proc/self/mountinfo`, `/proc/1` (a link to `self`), `/sys/devices/system/cpu/{online,possible,present}`,
//! `/sys/kernel/mm/transparent_hugepage/{hpage_pmd_size,enabled}` and the
//! cgroup v2 files `/sys/fs/cgroup/{cpu.max,memory.max}`, which the Go
//! runtime (1.25+) reads to pick `GOMAXPROCS` (a quota of one CPU) and
//! libuv to size the heap, and `/proc/sys/vm/overcommit_memory` (`0`,
//! Linux's heuristic: reserved address space costs nothing until it is
//! written, as here), which V8 reads at start. Files that change are regenerated each time
//! one is opened ([`Gen`]): `/proc/meminfo` and `/proc/stat` (the memory
//! free now, the CPU time used), `/proc/self/maps` (the image's segments,
//! the program's mappings and break, the main stack), `/proc/self/stat`
//! and `/proc/self/statm` (the process's CPU time, threads and memory:
//! libuv's `uv_resident_set_memory`, behind Node's
//! `process.memoryUsage()`, reads the resident size there),
//! `/proc/self/status` (ids and capabilities as component `user` answers,
//! `Seccomp`, which container checks grep for). A name the root file
//! system already has is left alone.

use alloc::vec::Vec;
use core::fmt::Write;
use shoal_ramfs::{FileType, Fs, Ino};

/// A file regenerated when opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gen {
    /// `/proc/meminfo`.
    Meminfo,
    /// `/proc/stat`.
    Stat,
    /// `/proc/self/maps`.
    Maps,
    /// `/proc/self/stat`.
    SelfStat,
    /// `/proc/self/statm`.
    Statm,
    /// `/proc/self/status`.
    Status,
}

/// A file: its directory's path from the root, its name, and more.
type Named<T> = (&'static [&'static [u8]], &'static [u8], T);

/// Each regenerated file.
const GENERATED: [Named<Gen>; 6] = [
    (&[b"proc"], b"meminfo", Gen::Meminfo),
    (&[b"proc"], b"stat", Gen::Stat),
    (&[b"proc", b"self"], b"maps", Gen::Maps),
    (&[b"proc", b"self"], b"stat", Gen::SelfStat),
    (&[b"proc", b"self"], b"statm", Gen::Statm),
    (&[b"proc", b"self"], b"status", Gen::Status),
];

/// The page size of a transparent huge page on x86-64 (2 MiB).
const HPAGE_PMD_SIZE: &[u8] = b"2097152\n";
/// The CPU list of a machine with one CPU.
const ONE_CPU: &[u8] = b"0\n";
/// A process in the root of the cgroup v2 hierarchy.
const CGROUP: &[u8] = b"0::/\n";
/// The CPU quota of one CPU: 100 ms per 100 ms period.
const CPU_MAX: &[u8] = b"100000 100000\n";
/// The mounts the instance shows: its root, `/proc`, `/sys` and the
/// cgroup v2 hierarchy at `/sys/fs/cgroup`.
const MOUNTINFO: &[u8] = b"1 0 0:1 / / rw,relatime - rootfs rootfs rw\n\
2 1 0:2 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n\
3 1 0:3 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro\n\
4 3 0:4 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n";

/// Looks up or creates the directory at `path` below the root.
fn dir_at(fs: &mut Fs, path: &[&[u8]]) -> Option<Ino> {
    let mut d = fs.root();
    for name in path {
        d = match fs.lookup(d, name) {
            Ok(i) if fs.file_type(i).ok()? == FileType::Directory => i,
            Ok(_) => return None,
            Err(_) => fs.mkdir(d, name, 0o555).ok()?,
        };
    }
    Some(d)
}

/// Adds a read-only file with `data` (borrowed, so it stays in the image's
/// pooled read-only data) unless the name exists.
fn add_static(fs: &mut Fs, dir: &[&[u8]], name: &[u8], data: &'static [u8]) {
    if let Some(d) = dir_at(fs, dir) {
        if fs.lookup(d, name).is_err() {
            let _ = fs.create_file_static(d, name, 0o444, data);
        }
    }
}

/// Adds a read-only file with `data` (copied) unless the name exists.
fn add_owned(fs: &mut Fs, dir: &[&[u8]], name: &[u8], data: &[u8]) {
    if let Some(d) = dir_at(fs, dir) {
        if fs.lookup(d, name).is_err() {
            if let Ok(i) = fs.create_file(d, name, 0o444) {
                let _ = fs.write(i, 0, data);
            }
        }
    }
}

/// A `Write` into a byte vector.
struct Buf(Vec<u8>);

impl Write for Buf {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Adds the files (see the module docs).
pub fn populate(fs: &mut Fs) {
    add_static(fs, &[b"sys", b"devices", b"system", b"cpu"], b"online", ONE_CPU);
    add_static(fs, &[b"sys", b"devices", b"system", b"cpu"], b"possible", ONE_CPU);
    add_static(fs, &[b"sys", b"devices", b"system", b"cpu"], b"present", ONE_CPU);
    dir_at(fs, &[b"sys", b"devices", b"system", b"cpu", b"cpu0"]);
    add_static(fs, &[b"sys", b"kernel", b"mm", b"transparent_hugepage"], b"hpage_pmd_size", HPAGE_PMD_SIZE);
    add_static(fs, &[b"sys", b"kernel", b"mm", b"transparent_hugepage"], b"enabled", b"always [madvise] never\n");
    add_static(fs, &[b"sys", b"fs", b"cgroup"], b"cpu.max", CPU_MAX);
    let mut mem = Buf(Vec::new());
    let _ = writeln!(mem, "{}", shoal_mm::stats().0);
    add_owned(fs, &[b"sys", b"fs", b"cgroup"], b"memory.max", &mem.0);
    add_static(fs, &[b"proc", b"sys", b"vm"], b"overcommit_memory", b"0\n");
    add_static(fs, &[b"proc", b"self"], b"cgroup", CGROUP);
    add_static(fs, &[b"proc", b"self"], b"mountinfo", MOUNTINFO);
    add_owned(fs, &[b"proc"], b"cpuinfo", &cpuinfo());
    // `/proc/1`, the program's own pid, is `self`: busybox `top` and `ps`
    // list the numeric names in `/proc` (critest's default container runs
    // `top`, which exits "no process info in /proc" without one).
    if let Some(d) = dir_at(fs, &[b"proc"]) {
        if fs.lookup(d, b"1").is_err() {
            let _ = fs.symlink(d, b"1", b"self");
        }
    }
    let (auxv, exe) = initial_stack();
    add_owned(fs, &[b"proc", b"self"], b"auxv", &auxv);
    if let Some(d) = dir_at(fs, &[b"proc", b"self"]) {
        if fs.lookup(d, b"exe").is_err() && !exe.is_empty() {
            let _ = fs.symlink(d, b"exe", &exe);
        }
    }
    for (dir, name, _) in GENERATED {
        if let Some(d) = dir_at(fs, dir) {
            if fs.lookup(d, name).is_err() {
                let _ = fs.create_file(d, name, 0o444);
            }
        }
    }
}

/// The regenerated files of `fs` by inode (looked up by path, so a
/// rebuilt `Vfs` finds them again).
pub fn generated(fs: &Fs) -> Vec<(Ino, Gen)> {
    let mut v = Vec::new();
    'files: for (dir, name, g) in GENERATED {
        let mut d = fs.root();
        for n in dir {
            match fs.lookup(d, n) {
                Ok(i) => d = i,
                Err(_) => continue 'files,
            }
        }
        if let Ok(i) = fs.lookup(d, name) {
            if fs.file_type(i) == Ok(FileType::Regular) {
                v.push((i, g));
            }
        }
    }
    v
}

/// The content of a regenerated file now.
pub fn content(g: Gen) -> Vec<u8> {
    match g {
        Gen::Meminfo => meminfo(),
        Gen::Stat => stat(),
        Gen::Maps => maps(),
        Gen::SelfStat => self_stat(),
        Gen::Statm => statm(),
        Gen::Status => status(),
    }
}

/// The instance's one process id (shoal-process's `PID`).
const PID: u64 = 1;
/// The page size `/proc/self/stat{,m}` count in.
const PAGE: u64 = 4096;

/// The process's memory in pages: its mappings' address space (the
/// mappings, break and main stack of `/proc/self/maps`) and what is
/// resident (the memory mm has handed out, as `sysinfo` counts it; no
/// swap), at most the former.
fn pages() -> (u64, u64) {
    let mut size = 0;
    shoal_mm::for_each_mapping(|a, e, _, _| size += e.saturating_sub(a));
    let bi = shoal_plat::boot::info();
    size += bi.stack_top.saturating_sub(bi.stack_base);
    let (total, free) = shoal_mm::stats();
    let resident = total.saturating_sub(free) / PAGE;
    (size / PAGE, resident.min(size / PAGE).max(1))
}

/// `/proc/self/stat`: Linux's 52 fields, those an instance has filled
/// in (pid, name, state, CPU time in `USER_HZ` ticks, threads, start
/// time, virtual size in bytes, resident pages, the stack's start).
fn self_stat() -> Vec<u8> {
    let exe = initial_stack().1;
    let base = exe.rsplit(|&c| c == b'/').next().unwrap_or(&[]);
    let comm = core::str::from_utf8(&base[..base.len().min(15)]).unwrap_or("");
    let ticks = shoal_time::cpu_ns() / (1_000_000_000 / USER_HZ);
    let threads = shoal_sched::thread_count();
    let (size, resident) = pages();
    let stack = shoal_plat::boot::info().stack_top;
    let mut b = Buf(Vec::new());
    let _ = writeln!(
        b,
        "{PID} ({comm}) R 0 {PID} {PID} 0 -1 4194560 0 0 0 0 {ticks} 0 0 0 20 0 {threads} 0 0 {vsize} {resident} 18446744073709551615 \
         0 0 {stack} 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0",
        vsize = size * PAGE
    );
    b.0
}

/// `/proc/self/statm`: size, resident, shared, text, lib, data, dirty
/// pages (shared and text not told apart: 0; lib and dirty are always 0
/// since Linux 2.6).
fn statm() -> Vec<u8> {
    let (size, resident) = pages();
    let mut b = Buf(Vec::new());
    let _ = writeln!(b, "{size} {resident} 0 0 0 {size} 0");
    b.0
}

/// Root's capabilities: every one Linux 6.1 has (`CAP_LAST_CAP` 40), as
/// component `user`'s `capget` reports them.
const ALL_CAPS: u64 = (1 << 41) - 1;

/// `/proc/self/status`, Linux's fields for the instance's one process:
/// its name, ids (the `--user` the program sees), memory, threads and
/// capabilities (root's for uid 0, none for another user); `Seccomp` 2
/// (filter mode) when the program has a seccomp profile that the guest's
/// kernel applies (`BootInfo::syscall_errno`), else 0 (the tender's own
/// filter is on the instance, outside the program's view).
fn status() -> Vec<u8> {
    let exe = initial_stack().1;
    let base = exe.rsplit(|&c| c == b'/').next().unwrap_or(&[]);
    let name = core::str::from_utf8(&base[..base.len().min(15)]).unwrap_or("");
    let (uid, gid) = shoal_plat::boot::ids();
    let caps = if uid == 0 { ALL_CAPS } else { 0 };
    let (size, resident) = pages();
    let (vm, rss) = (size * PAGE / 1024, resident * PAGE / 1024);
    let threads = shoal_sched::thread_count();
    let (mode, filters) = if shoal_plat::boot::seccomp_on() { (2, 1) } else { (0, 0) };
    let mut b = Buf(Vec::new());
    let _ = write!(
        b,
        "Name:\t{name}\nUmask:\t0022\nState:\tR (running)\nTgid:\t{PID}\nNgid:\t0\nPid:\t{PID}\nPPid:\t0\nTracerPid:\t0\n\
Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{gid}\t{gid}\t{gid}\t{gid}\nFDSize:\t64\nGroups:\t\n\
VmPeak:\t{vm:8} kB\nVmSize:\t{vm:8} kB\nVmHWM:\t{rss:8} kB\nVmRSS:\t{rss:8} kB\nThreads:\t{threads}\n\
CapInh:\t0000000000000000\nCapPrm:\t{caps:016x}\nCapEff:\t{caps:016x}\nCapBnd:\t{caps:016x}\nCapAmb:\t0000000000000000\n\
NoNewPrivs:\t0\nSeccomp:\t{mode}\nSeccomp_filters:\t{filters}\nCpus_allowed:\t1\nCpus_allowed_list:\t0\n"
    );
    b.0
}

fn meminfo() -> Vec<u8> {
    let (total, free) = shoal_mm::stats();
    let (t, f) = (total / 1024, free / 1024);
    let mut b = Buf(Vec::new());
    let _ = write!(
        b,
        "MemTotal:       {t:8} kB\nMemFree:        {f:8} kB\nMemAvailable:   {f:8} kB\nBuffers:               0 kB\nCached:                0 kB\n\
SwapCached:            0 kB\nActive:         {a:8} kB\nInactive:              0 kB\nShmem:                 0 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n\
CommitLimit:    {t:8} kB\nCommitted_AS:   {a:8} kB\nHugePages_Total:       0\nHugePages_Free:        0\nHugepagesize:       2048 kB\n",
        a = t - f
    );
    b.0
}

/// Clock ticks per second of `/proc/stat` (`USER_HZ`, `AT_CLKTCK`).
const USER_HZ: u64 = 100;

fn stat() -> Vec<u8> {
    let busy = shoal_time::cpu_ns() / (1_000_000_000 / USER_HZ);
    let up = shoal_time::monotonic_ns() / (1_000_000_000 / USER_HZ);
    let idle = up.saturating_sub(busy);
    let btime = shoal_time::realtime_ns().saturating_sub(shoal_time::monotonic_ns()) / 1_000_000_000;
    let threads = shoal_sched::thread_count();
    let mut b = Buf(Vec::new());
    let _ = write!(
        b,
        "cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 {busy} 0 0 {idle} 0 0 0 0 0 0\nintr 0\nctxt 0\nbtime {btime}\nprocesses 1\nprocs_running {threads}\nprocs_blocked 0\nsoftirq 0 0 0 0 0 0 0 0 0 0 0\n"
    );
    b.0
}

/// `/proc/self/maps`: one line per region, as Linux formats it.
fn maps() -> Vec<u8> {
    let mut b = Buf(Vec::new());
    let line = |b: &mut Buf, start: u64, end: u64, prot: u32, name: &str| {
        let r = if prot & 1 != 0 { 'r' } else { '-' };
        let w = if prot & 2 != 0 { 'w' } else { '-' };
        let x = if prot & 4 != 0 { 'x' } else { '-' };
        let pad = if name.is_empty() { "" } else { "                          " };
        let _ = writeln!(b, "{start:08x}-{end:08x} {r}{w}{x}p 00000000 00:00 0{pad}{name}");
    };
    let mut regions: Vec<(u64, u64, u32, &str)> = Vec::new();
    let bi = shoal_plat::boot::info();
    // The image's segments are named by the program's path, as Linux
    // names an executable's.
    let exe = initial_stack().1;
    let exe = core::str::from_utf8(&exe).unwrap_or("");
    // The image's loadable segments (PF_X 1, PF_W 2, PF_R 4).
    for i in 0..bi.phnum.min(64) {
        let Some(at) = bi.phdr_addr.checked_add(i * 56) else { break };
        let Ok(ph) = shoal_plat::umem::read::<[u64; 7]>(at) else { break };
        let (ptype, flags, vaddr, memsz) = (ph[0] as u32, (ph[0] >> 32) as u32, ph[2], ph[5]);
        if ptype == 1 && memsz > 0 {
            let prot = (if flags & 4 != 0 { 1 } else { 0 }) | (if flags & 2 != 0 { 2 } else { 0 }) | (if flags & 1 != 0 { 4 } else { 0 });
            regions.push((vaddr & !0xfff, (vaddr + memsz + 0xfff) & !0xfff, prot, exe));
        }
    }
    shoal_mm::for_each_mapping(|a, e, p, brk| regions.push((a, e, p & 7, if brk { "[heap]" } else { "" })));
    if bi.stack_top > bi.stack_base {
        regions.push((bi.stack_base, bi.stack_top, 3, "[stack]"));
    }
    regions.sort_by_key(|r| r.0);
    for (a, e, p, n) in regions {
        line(&mut b, a, e, p, n);
    }
    b.0
}

/// `/proc/cpuinfo` for the one CPU, from `cpuid`.
fn cpuinfo() -> Vec<u8> {
    let id = |leaf: u32, sub: u32| {
        // cpuid only reads processor identification; both tenders let the
        // guest execute it.
        let r = core::arch::x86_64::__cpuid_count(leaf, sub);
        [r.eax, r.ebx, r.ecx, r.edx]
    };
    let v = id(0, 0);
    let mut vendor = [0u8; 12];
    for (i, w) in [v[1], v[3], v[2]].iter().enumerate() {
        vendor[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
    }
    let f = id(1, 0);
    let family = ((f[0] >> 8) & 0xf) + if (f[0] >> 8) & 0xf == 0xf { (f[0] >> 20) & 0xff } else { 0 };
    let model = ((f[0] >> 4) & 0xf) | if matches!((f[0] >> 8) & 0xf, 6 | 0xf) { ((f[0] >> 16) & 0xf) << 4 } else { 0 };
    let stepping = f[0] & 0xf;
    let mut name = [0u8; 48];
    if id(0x8000_0000, 0)[0] >= 0x8000_0004 {
        for k in 0..3u32 {
            let r = id(0x8000_0002 + k, 0);
            for (j, w) in r.iter().enumerate() {
                let o = (k as usize) * 16 + j * 4;
                name[o..o + 4].copy_from_slice(&w.to_le_bytes());
            }
        }
    }
    let name_len = name.iter().position(|&c| c == 0).unwrap_or(48);
    let name = core::str::from_utf8(&name[..name_len]).unwrap_or("").trim();
    let seven = if v[0] >= 7 { id(7, 0) } else { [0; 4] };
    let flags: [(bool, &str); 24] = [
        (f[3] & 1 != 0, "fpu"),
        (f[3] & (1 << 4) != 0, "tsc"),
        (f[3] & (1 << 8) != 0, "cx8"),
        (f[3] & (1 << 15) != 0, "cmov"),
        (f[3] & (1 << 23) != 0, "mmx"),
        (f[3] & (1 << 24) != 0, "fxsr"),
        (f[3] & (1 << 25) != 0, "sse"),
        (f[3] & (1 << 26) != 0, "sse2"),
        (f[2] & 1 != 0, "pni"),
        (f[2] & (1 << 1) != 0, "pclmulqdq"),
        (f[2] & (1 << 9) != 0, "ssse3"),
        (f[2] & (1 << 12) != 0, "fma"),
        (f[2] & (1 << 13) != 0, "cx16"),
        (f[2] & (1 << 19) != 0, "sse4_1"),
        (f[2] & (1 << 20) != 0, "sse4_2"),
        (f[2] & (1 << 22) != 0, "movbe"),
        (f[2] & (1 << 23) != 0, "popcnt"),
        (f[2] & (1 << 25) != 0, "aes"),
        (f[2] & (1 << 26) != 0, "xsave"),
        (f[2] & (1 << 28) != 0, "avx"),
        (f[2] & (1 << 30) != 0, "rdrand"),
        (seven[1] & 1 != 0, "fsgsbase"),
        (seven[1] & (1 << 5) != 0, "avx2"),
        (seven[1] & (1 << 8) != 0, "bmi2"),
    ];
    let mhz = shoal_plat::boot::info().tsc_hz / 1000;
    let mut b = Buf(Vec::new());
    let _ = write!(
        b,
        "processor\t: 0\nvendor_id\t: {}\ncpu family\t: {family}\nmodel\t\t: {model}\nmodel name\t: {name}\nstepping\t: {stepping}\n\
cpu MHz\t\t: {}.{:03}\nphysical id\t: 0\nsiblings\t: 1\ncore id\t\t: 0\ncpu cores\t: 1\napicid\t\t: 0\nfpu\t\t: yes\ncpuid level\t: {}\nflags\t\t:",
        core::str::from_utf8(&vendor).unwrap_or(""),
        mhz / 1000,
        mhz % 1000,
        v[0]
    );
    for (on, n) in flags {
        if on {
            let _ = write!(b, " {n}");
        }
    }
    let _ = write!(b, "\nclflush size\t: 64\ncache_alignment\t: 64\naddress sizes\t: 48 bits physical, 48 bits virtual\n\n");
    b.0
}

/// The auxiliary vector and the program's path (`AT_EXECFN`, else
/// `argv[0]`, made absolute) from the initial stack; empty without one
/// (unit tests).
fn initial_stack() -> (Vec<u8>, Vec<u8>) {
    use shoal_plat::umem::read;
    let sp = shoal_plat::boot::initial_sp();
    let (mut auxv, mut exe) = (Vec::new(), Vec::new());
    if sp == 0 {
        return (auxv, exe);
    }
    let word = |a: u64| read::<u64>(a).ok();
    let Some(argc) = word(sp) else { return (auxv, exe) };
    let argv0 = if argc > 0 { word(sp + 8).unwrap_or(0) } else { 0 };
    // Past argv's NULL, then envp to its NULL.
    let mut p = sp + 8 * (argc.min(1 << 20) + 2);
    for _ in 0..(1 << 20) {
        match word(p) {
            Some(0) | None => break,
            Some(_) => p += 8,
        }
    }
    p += 8;
    let mut execfn = 0;
    for _ in 0..64 {
        let (Some(k), Some(v)) = (word(p), word(p + 8)) else { break };
        auxv.extend_from_slice(&k.to_le_bytes());
        auxv.extend_from_slice(&v.to_le_bytes());
        p += 16;
        if k == 31 {
            execfn = v;
        }
        if k == 0 {
            break;
        }
    }
    let name = if execfn != 0 { execfn } else { argv0 };
    if name != 0 {
        for i in 0..4096u64 {
            match read::<u8>(name + i) {
                Ok(0) | Err(_) => break,
                Ok(c) => exe.push(c),
            }
        }
    }
    if !exe.is_empty() && exe[0] != b'/' {
        exe.insert(0, b'/');
    }
    (auxv, exe)
}
