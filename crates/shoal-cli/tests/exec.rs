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
    let o = Command::new(go)
        .args(["build", "-o"])
        .arg(&exe)
        .arg(&src)
        .env("CGO_ENABLED", "0")
        .env("GOCACHE", dir.path().join("gocache"))
        .env("GO111MODULE", "off")
        .output()
        .unwrap();
    assert!(o.status.success(), "go build: {}", stderr(&o));
    matches_native(&exe, &["a", "b"], 3);
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
