//! Unmodified Linux executables (`shoal run EXECUTABLE`): programs built
//! here with `gcc -static` (glibc), `rustc -C target-feature=+crt-static`
//! and `CGO_ENABLED=0 go build` from the
//! sources in apps/exec/, run natively and on each tender, compared by
//! output and exit status; hostile ELF files refused with one line and
//! status 125.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds apps/exec/NAME.c with `gcc -static` (or `extra`'s `-static-pie`)
/// into `dir`.
fn gcc_static(name: &str, dir: &Path, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let src = home().join("apps/exec").join(format!("{name}.c"));
    let link = if extra.contains(&"-static-pie") { "-O2" } else { "-static" };
    let o = Command::new("gcc").args([link, "-O2"]).args(extra).arg(&src).arg("-o").arg(&out).output().unwrap();
    assert!(o.status.success(), "gcc -static {}: {}", src.display(), stderr(&o));
    out
}

/// A Go toolchain 1.22 or newer: on PATH or where the Go distribution
/// installs it.
fn go() -> Option<PathBuf> {
    shoal_testkit::go_toolchain().ok()
}

/// Runs `exe` natively and on every tender with `args` and GREETING=hi
/// (natively with only that variable), and asserts the same stdout and
/// exit status (`status`) and nothing from shoal on stderr.
fn matches_native(exe: &Path, args: &[&str], status: i32) {
    let n = output(Command::new(exe).args(args).env_clear().env("GREETING", "hi"));
    assert_eq!(n.status.code(), Some(status), "native {}: {}", exe.display(), stderr(&n));
    for t in tenders() {
        let s = output(shoal_run(t).args(["-e", "GREETING=hi"]).arg(exe).arg("--").args(args));
        assert_eq!(stdout(&s), stdout(&n), "{t} {}: stderr: {}", exe.display(), stderr(&s));
        assert_eq!(s.status.code(), Some(status), "{t} {}: stderr: {}", exe.display(), stderr(&s));
        assert_eq!(stderr(&s), stderr(&n), "{t} {}: stderr differs", exe.display());
    }
}

#[test]
fn glibc_static_threads_match_native() {
    let dir = scratch();
    let exe = gcc_static("threads", dir.path(), &["-pthread"]);
    matches_native(&exe, &["one", "two words"], 7);
}

#[test]
fn auxiliary_vector_matches_native() {
    let dir = scratch();
    let exe = gcc_static("auxv", dir.path(), &[]);
    matches_native(&exe, &[], 0);
}

/// xmm0-15 hold their values across rewritten system-call sites, as
/// Linux keeps them (the kernel's own code uses SSE).
#[test]
fn vector_registers_survive_system_calls_as_natively() {
    let dir = scratch();
    let exe = gcc_static("vecregs", dir.path(), &[]);
    matches_native(&exe, &[], 0);
}

/// A light call (`getpid` from a rewritten site, answered without the
/// vector-register save) still passes its component's gate when the gate
/// has work: an injection into `process` at its 1000th call fires among
/// the program's 2000 rewritten getpids, and the program goes on.
#[test]
fn light_calls_pass_a_gate_with_work() {
    let dir = scratch();
    let exe = gcc_static("getpid", dir.path(), &[]);
    for t in tenders() {
        let o = output(shoal_run(t).args(["--inject", "process:panic@1000"]).arg(&exe).args(["--", "2000"]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{t}: {err}");
        assert!(err.contains("injected fault: panic at call 1000 into process"), "{t}: {err}");
        assert!(err.contains("shoal: rebooted process in "), "{t}: {err}");
        assert!(err.lines().last().is_some_and(|l| l.starts_with("pair=")), "{t}: {err}");
    }
}

/// A handler that makes system calls (re-entering the kernel from a
/// handler the kernel called) and one on an alternate stack.
#[test]
fn signal_handlers_match_native() {
    let dir = scratch();
    let exe = gcc_static("signals", dir.path(), &[]);
    matches_native(&exe, &[], 0);
}

#[test]
fn glibc_static_pie_matches_native() {
    let dir = scratch();
    let exe = gcc_static("threads", dir.path(), &["-static-pie", "-fPIE", "-pthread"]);
    let o = output(shoal().arg("inspect").arg(&exe));
    assert!(stdout(&o).contains("static-PIE executable, loaded at 0x400000"), "{}", stdout(&o));
    matches_native(&exe, &[], 7);
}

/// With `--mem-mode pool` the read-only pages of the built image (the
/// kernel's and the rewritten executable's) go to the pool at the first
/// start and come from it at every start; the program runs the same.
#[test]
fn executables_share_pages_through_the_pool() {
    if !shoal_testkit::need(&["shm"]) {
        return;
    }
    let dir = scratch();
    let pool = tempfile::Builder::new().prefix("shoal-exec-pool-").tempdir_in("/dev/shm").unwrap();
    let exe = gcc_static("threads", dir.path(), &["-pthread"]);
    let n = output(Command::new(&exe).env_clear());
    for t in tenders() {
        let s = output(shoal_run(t).args(["--mem-mode", "pool"]).arg(&exe).env("SHOAL_POOL_DIR", pool.path()));
        assert_eq!((stdout(&s), s.status.code()), (stdout(&n), Some(7)), "{t}: {}", stderr(&s));
    }
    let names: Vec<String> = std::fs::read_dir(pool.path()).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().any(|n| n.starts_with("exec@")), "no pool file of the executable: {names:?}");
}

/// A rewritten pair, a jump into the middle of one (its `syscall` kept:
/// the trap path) and a bare `syscall` all answer the same, and a trapped
/// call keeps every register but rcx and r11.
#[test]
fn rewritten_and_trapped_sites_agree() {
    let dir = scratch();
    let exe = gcc_static("sites", dir.path(), &[]);
    let o = output(shoal().arg("inspect").arg(&exe));
    let line = stdout(&o).lines().last().unwrap_or_default().to_string();
    let nums: Vec<u64> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
    assert!(nums.len() == 3 && nums[0] == nums[1] + nums[2] && nums[1] > 0 && nums[2] > 0, "inspect: {line}");
    for t in tenders() {
        let s = output(shoal_run(t).arg(&exe));
        assert_eq!(stdout(&s), "getpid agrees: yes\nregisters kept: yes\n", "{t}: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(0), "{t}: {}", stderr(&s));
    }
}

#[test]
fn rust_static_threads_match_native() {
    let dir = scratch();
    let exe = dir.path().join("channels");
    let src = home().join("apps/exec/rust/channels.rs");
    let o = Command::new("rustc").args(["-O", "-C", "target-feature=+crt-static", "-o"]).arg(&exe).arg(&src).output().unwrap();
    assert!(o.status.success(), "rustc: {}", stderr(&o));
    matches_native(&exe, &["x", "y"], 5);
}

#[test]
fn go_goroutines_match_native() {
    let Some(go) = go() else {
        shoal_testkit::skip("go-toolchain", "no Go 1.22 or newer (not on PATH, not in /usr/local/go/bin)");
        return;
    };
    let dir = scratch();
    let exe = dir.path().join("goroutines");
    let src = home().join("apps/exec/go/goroutines.go");
    let o = shoal_testkit::go_build(&go).arg("-o").arg(&exe).arg(&src).output().unwrap();
    assert!(o.status.success(), "go build: {}", stderr(&o));
    matches_native(&exe, &["a", "b"], 3);
}

/// The host's clock in seconds, for the clock tests' comparison.
fn host_seconds() -> String {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs().to_string()
}

/// shoal's vDSO as a static glibc program finds it: `AT_SYSINFO_EHDR`,
/// the five functions looked up as `dlvsym(…, "LINUX_2.6")` does, each
/// called directly and compared with the system calls, the host's clock
/// and (by the output) with the same program on Linux's own vDSO; the
/// monotonic clock never goes backwards, a signal arrives while the
/// program only reads the clock, other clocks and bad ids answer as the
/// system call does.
#[test]
fn the_vdso_resolves_and_agrees_with_the_clock_as_natively() {
    let dir = scratch();
    let exe = gcc_static("vdso", dir.path(), &[]);
    matches_native(&exe, &[&host_seconds()], 0);
}

/// The Go runtime's clocks (read through the vDSO when one is offered):
/// time.Now against the system call and the host, time.Since monotonic,
/// sleeps and timers measure what they should.
#[test]
fn go_clocks_agree_with_native() {
    let Some(go) = go() else {
        shoal_testkit::skip("go-toolchain", "no Go 1.22 or newer (not on PATH, not in /usr/local/go/bin)");
        return;
    };
    let dir = scratch();
    let exe = dir.path().join("clock");
    let o = shoal_testkit::go_build(&go).arg("-o").arg(&exe).arg(home().join("apps/exec/go/clock.go")).output().unwrap();
    assert!(o.status.success(), "go build: {}", stderr(&o));
    matches_native(&exe, &[&host_seconds()], 0);
}

/// Patches a copy of a static executable with `f` and asserts that
/// `shoal run` refuses it with status 125 and one `shoal:` line naming
/// `needle`, and `shoal inspect` the same way.
fn refused(exe: &Path, dir: &Path, name: &str, needle: &str, f: impl Fn(&mut Vec<u8>)) {
    let mut b = std::fs::read(exe).unwrap();
    f(&mut b);
    let bad = dir.join(name);
    std::fs::write(&bad, &b).unwrap();
    std::fs::set_permissions(&bad, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    for t in ["spt", "hvt"] {
        let o = output(shoal_run(t).arg(&bad));
        assert_clean_error(&o, needle);
        assert_eq!(o.status.code(), Some(125), "{t} {name}");
    }
    let o = output(shoal().arg("inspect").arg(&bad));
    assert_clean_error(&o, needle);
    assert_eq!(o.status.code(), Some(125), "inspect {name}");
}

fn u16_at(b: &[u8], at: usize) -> usize {
    u16::from_le_bytes([b[at], b[at + 1]]) as usize
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Offsets of the PT_LOAD program headers.
fn loads(b: &[u8]) -> Vec<usize> {
    let (phoff, phnum) = (u64_at(b, 32) as usize, u16_at(b, 56));
    (0..phnum).map(|i| phoff + i * 56).filter(|&p| u32::from_le_bytes(b[p..p + 4].try_into().unwrap()) == 1).collect()
}

#[test]
fn hostile_executables_are_refused() {
    let dir = scratch();
    let exe = gcc_static("sites", dir.path(), &[]);
    // Program header fields: p_offset +8, p_vaddr +16, p_filesz +32, p_memsz +40.
    refused(&exe, dir.path(), "overlap", "overlapping segments", |b| {
        let l = loads(b);
        let v = u64_at(b, l[0] + 16);
        let within = u64_at(b, l[1] + 16) & 0xfff;
        put_u64(b, l[1] + 16, v + within);
    });
    refused(&exe, dir.path(), "overshoal", "addresses shoal keeps for itself", |b| {
        for p in loads(b) {
            let v = u64_at(b, p + 16);
            put_u64(b, p + 16, v - 0x30_0000);
        }
    });
    refused(&exe, dir.path(), "absurd", "bytes of address space", |b| {
        let l = loads(b);
        put_u64(b, *l.last().unwrap() + 40, 1 << 40);
    });
    refused(&exe, dir.path(), "entry", "entry point", |b| put_u64(b, 24, 0x10));
    refused(&exe, dir.path(), "truncated", "outside the file", |b| {
        let l = loads(b);
        put_u64(b, l[1] + 32, 1 << 32);
        put_u64(b, l[1] + 40, 1 << 32);
    });
}

/// A dynamically linked executable starts its interpreter from the
/// instance's file system (tests/dynexec.rs); an instance whose root has
/// none stops with one line, status 127 (what a shell gives for a command
/// it cannot run).
#[test]
fn dynamically_linked_executables_without_their_interpreter_fail_in_one_line() {
    let dir = scratch();
    let out = dir.path().join("dyn");
    let o = Command::new("gcc").arg(home().join("apps/exec/sites.c")).arg("-o").arg(&out).output().unwrap();
    assert!(o.status.success(), "gcc: {}", stderr(&o));
    for t in tenders() {
        let o = output(shoal_run(t).arg(&out));
        assert_clean_error(&o, "cannot load the interpreter /lib64/ld-linux-x86-64.so.2 from the instance's file system (No such file or directory)");
        assert_eq!(o.status.code(), Some(127));
    }
}

/// A handler's changes to the FPU/SSE state in its frame (an xmm register
/// and MXCSR's rounding) take effect at `rt_sigreturn`, after a fault and
/// after a timer signal that interrupted a loop, for an executable and a
/// `shoal cc` image of the same source.
#[test]
fn signal_frame_fpstate_is_restored_as_natively() {
    let dir = scratch();
    let exe = gcc_static("sigfp", dir.path(), &[]);
    matches_native(&exe, &[], 0);
    let img = dir.path().join("sigfp.img");
    let o = output(shoal().args(["cc", "-O2", "-o"]).arg(&img).arg(home().join("apps/exec/sigfp.c")));
    assert!(o.status.success(), "shoal cc: {}", stderr(&o));
    let n = output(Command::new(&exe).env_clear());
    for t in tenders() {
        let s = output(shoal_run(t).arg(&img));
        assert_eq!((stdout(&s), s.status.code()), (stdout(&n), Some(0)), "{t}: {}", stderr(&s));
    }
}

/// 10,000 SIGSEGV handlers left with `siglongjmp` (half on an alternate
/// stack): nothing of them stays behind in the kernel.
#[test]
fn siglongjmp_out_of_fault_handlers_ten_thousand_times() {
    let dir = scratch();
    let exe = gcc_static("churn", dir.path(), &["-pthread"]);
    matches_native(&exe, &["longjmp"], 0);
}

/// 10,000 threads created and joined: each exited thread's kernel stack
/// is freed (kept, they ran out of memory after about 9,000 at the
/// default `--mem`).
#[test]
fn ten_thousand_threads_come_and_go() {
    let dir = scratch();
    let exe = gcc_static("churn", dir.path(), &["-pthread"]);
    matches_native(&exe, &["threads"], 0);
}

/// A second start of an unchanged executable finds its built image by
/// path, inode, size and times (without reading the file); a file
/// rewritten in place with the same size and its old modification time
/// (only its content and status-change time differ) is built again.
#[test]
fn a_changed_executable_is_built_again() {
    let dir = scratch();
    let build = |word: &str| {
        let src = dir.path().join(format!("{word}.c"));
        std::fs::write(&src, format!("#include <stdio.h>\nint main(void) {{ puts(\"{word}\"); return 0; }}\n")).unwrap();
        let out = dir.path().join(word);
        let o = Command::new("gcc").args(["-static", "-O2", "-o"]).arg(&out).arg(&src).output().unwrap();
        assert!(o.status.success(), "gcc: {}", stderr(&o));
        out
    };
    let (one, two) = (build("one"), build("two"));
    assert_eq!(std::fs::metadata(&one).unwrap().len(), std::fs::metadata(&two).unwrap().len(), "the two programs differ in size");
    let exe = dir.path().join("prog");
    let stamp = dir.path().join("stamp");
    std::fs::copy(&one, &exe).unwrap();
    std::fs::write(&stamp, "").unwrap();
    let touch = |at: &Path| assert!(Command::new("touch").arg("-r").arg(&stamp).arg(at).status().unwrap().success());
    touch(&exe);
    for want in ["one\n", "one\n"] {
        let s = output(shoal_run("spt").arg(&exe));
        assert_eq!((stdout(&s).as_str(), s.status.code()), (want, Some(0)), "{}", stderr(&s));
    }
    // Same inode, size and modification time; new content.
    std::fs::write(&exe, std::fs::read(&two).unwrap()).unwrap();
    touch(&exe);
    let s = output(shoal_run("spt").arg(&exe));
    assert_eq!((stdout(&s).as_str(), s.status.code()), ("two\n", Some(0)), "{}", stderr(&s));
}

/// The kernel images in the exec cache `dir` (`kernel-<SHA-256>.img`),
/// each with its inode.
fn kernel_images(dir: &Path) -> Vec<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().to_string(), e))
        .filter(|(n, _)| n.len() == 75 && n.starts_with("kernel-") && n.ends_with(".img"))
        .map(|(n, e)| (n, e.metadata().unwrap().ino()))
        .collect();
    v.sort();
    v
}

/// The exec cache is keyed by content: a kernel archive changed in a few
/// bytes (the default `/etc/hosts`'s `ip6-loopback` → `ip6-LOOPBACK`,
/// read-only data the kernel serves as the file) gets its own
/// kernel image and instance image and the program sees the change; the
/// same archive touched, or changed back, reuses the image built for that
/// content (same file, nothing linked again). Run in a source tree of its
/// own (`SHOAL_HOME`: links to this tree, with a kernel archive of its
/// own) and a cache of its own (`SHOAL_CACHE`: the shared sysroot
/// linked in).
#[test]
fn the_kernel_image_is_named_by_its_content() {
    let dir = scratch();
    let (tree, cache) = (dir.path().join("tree"), dir.path().join("cache"));
    let real_cache = PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/shoal");
    for (from, to, skip) in [(home(), &tree, "kernel"), (real_cache.clone(), &cache, "exec")] {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(&from).unwrap().flatten() {
            if e.file_name() != skip {
                std::os::unix::fs::symlink(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }
    let release = tree.join("kernel/target/release");
    std::fs::create_dir_all(&release).unwrap();
    std::os::unix::fs::symlink(home().join("kernel/Cargo.toml"), tree.join("kernel/Cargo.toml")).unwrap();
    let lib = release.join("libshoal_kernel.linkable.a");
    let original = std::fs::read(home().join("kernel/target/release/libshoal_kernel.linkable.a")).unwrap();
    let at = original.windows(12).position(|w| w == b"ip6-loopback").expect("the default /etc/hosts in the kernel archive");
    let mut changed = original.clone();
    changed[at + 4..at + 12].copy_from_slice(b"LOOPBACK");
    let src = dir.path().join("hosts.c");
    std::fs::write(&src, "#include <stdio.h>\nint main(void) { char b[256]; FILE *f = fopen(\"/etc/hosts\", \"r\"); while (f && fgets(b, sizeof b, f)) fputs(b, stdout); return 0; }\n").unwrap();
    let exe = dir.path().join("hosts");
    let o = Command::new("gcc").args(["-static", "-O2", "-o"]).arg(&exe).arg(&src).output().unwrap();
    assert!(o.status.success(), "gcc: {}", stderr(&o));
    let exec = cache.join("exec");
    let instance_images = || std::fs::read_dir(&exec).unwrap().flatten().filter(|e| e.file_name().len() == 68).count();
    let hosts = |last: &str| format!("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-{last}\n");
    let run = |want: &str| {
        let s = output(shoal_run("spt").env("SHOAL_HOME", &tree).env("SHOAL_CACHE", &cache).arg(&exe));
        assert_eq!((stdout(&s).as_str(), s.status.code()), (want, Some(0)), "{}", stderr(&s));
    };
    std::fs::write(&lib, &original).unwrap();
    run(&hosts("loopback"));
    let first = kernel_images(&exec);
    assert_eq!((first.len(), instance_images()), (1, 1), "{first:?}");
    // Touched (newer than the image, same bytes): nothing built again.
    let f = std::fs::File::options().write(true).open(&lib).unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5)).unwrap();
    drop(f);
    run(&hosts("loopback"));
    assert_eq!((kernel_images(&exec), instance_images()), (first.clone(), 1));
    // Another kernel: its own kernel image and instance image.
    std::fs::write(&lib, &changed).unwrap();
    run(&hosts("LOOPBACK"));
    let both = kernel_images(&exec);
    assert_eq!((both.len(), instance_images()), (2, 2), "{both:?}");
    assert!(both.contains(&first[0]));
    // Back to the first kernel: its image as it was.
    std::fs::write(&lib, &original).unwrap();
    run(&hosts("loopback"));
    assert_eq!((kernel_images(&exec), instance_images()), (both, 2));
    let link = std::fs::read_dir(&exec).unwrap().flatten().find(|e| e.file_type().unwrap().is_symlink()).expect("the tree's link to its kernel image");
    assert_eq!(std::fs::read_link(link.path()).unwrap(), PathBuf::from(&first[0].0));
}

/// Code the program makes at run time (written, then made read-execute,
/// as a JIT does) runs, and its raw `syscall`s take the trap path to the
/// kernel: getpid agrees with libc's; a raw `openat` of a host file finds
/// no such file in the instance, and raw and libc `connect`s to a host
/// listener on 127.0.0.1 reach the instance's own loopback, where nothing
/// listens — the host listener sees no connection. Natively the same
/// program opens the file and connects.
#[test]
fn run_time_code_takes_the_trap_path_and_never_reaches_the_host() {
    use std::net::TcpListener;
    let dir = scratch();
    let exe = gcc_static("jit", dir.path(), &[]);
    let secret = dir.path().join("host-secret");
    std::fs::write(&secret, "host only\n").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let args = [secret.to_str().unwrap(), port.as_str()];
    for t in tenders() {
        let s = output(shoal_run(t).arg(&exe).arg("--").args(args));
        let want = format!(
            "getpid from run-time code: agrees\nraw openat of the host file: No such file or directory\nraw connect to 127.0.0.1:{port}: Connection refused\nlibc connect to 127.0.0.1:{port}: Connection refused\n"
        );
        assert_eq!((stdout(&s), s.status.code()), (want, Some(0)), "{t}: {}", stderr(&s));
        assert!(matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "{t}: the host listener was reached");
    }
    let n = output(Command::new(&exe).args(args));
    let want = format!("getpid from run-time code: agrees\nraw openat of the host file: opened\nraw connect to 127.0.0.1:{port}: connected\nlibc connect to 127.0.0.1:{port}: connected\n");
    assert_eq!((stdout(&n), n.status.code()), (want, Some(0)), "native: {}", stderr(&n));
}
