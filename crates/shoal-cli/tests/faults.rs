//! CPU faults of the program delivered as Linux signals to its own
//! handler, on every tender, for an unmodified executable and a `shoal cc`
//! image alike, compared with a native run: apps/exec/faults.c (SIGSEGV
//! with `si_addr`, `trapno` and `err`, SIGFPE, SIGTRAP left by
//! `siglongjmp`; SIGILL resumed by moving rip; then a default-action
//! SIGSEGV that ends the instance with 139 and the crash line) and
//! apps/exec/go/nilpanic.go (nil-pointer, nil-map and divide panics
//! recovered with defer/recover).

mod common;

use common::*;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Command;

/// The Go toolchain: on PATH or where the Go distribution installs it.
fn go() -> Option<PathBuf> {
    shoal_testkit::program("go").ok().or_else(|| Some(PathBuf::from("/usr/local/go/bin/go")).filter(|p| p.is_file()))
}

#[test]
fn c_fault_handlers_match_native() {
    let dir = scratch();
    let src = home().join("apps/exec/faults.c");
    let exe = dir.path().join("faults");
    let o = Command::new("gcc").args(["-static", "-O2"]).arg(&src).arg("-o").arg(&exe).output().unwrap();
    assert!(o.status.success(), "gcc -static: {}", stderr(&o));
    let img = dir.path().join("faults.img");
    let o = output(shoal().args(["cc", "-O2", "-o"]).arg(&img).arg(&src));
    assert!(o.status.success(), "shoal cc: {}", stderr(&o));
    let n = output(&mut Command::new(&exe));
    assert_eq!(n.status.signal(), Some(11), "native: killed by the last SIGSEGV");
    let want = stdout(&n);
    assert_eq!(want.lines().count(), 6, "native output: {want}");
    for t in tenders() {
        for prog in [&exe, &img] {
            let s = output(shoal_run(t).arg(prog));
            assert_eq!(stdout(&s), want, "{t} {}: stderr: {}", prog.display(), stderr(&s));
            assert_eq!(s.status.code(), Some(139), "{t} {}: stderr: {}", prog.display(), stderr(&s));
            let err = stderr(&s);
            assert_eq!(err.lines().count(), 1, "{t} {}: {err}", prog.display());
            assert!(err.starts_with("shoal: the guest crashed: SIGSEGV (invalid memory access at 0x0, rip 0x"), "{t} {}: {err}", prog.display());
        }
    }
}

#[test]
fn go_recovers_a_nil_pointer_panic_as_natively() {
    let Some(go) = go() else {
        shoal_testkit::skip("go", "Go is not installed (not on PATH, not in /usr/local/go)");
        return;
    };
    let dir = scratch();
    let exe = dir.path().join("nilpanic");
    let o = shoal_testkit::go_build(&go).arg("-o").arg(&exe).arg(home().join("apps/exec/go/nilpanic.go")).output().unwrap();
    assert!(o.status.success(), "go build: {}", stderr(&o));
    let n = output(&mut Command::new(&exe));
    assert_eq!(n.status.code(), Some(0), "native: {}", stderr(&n));
    assert!(stdout(&n).contains("recovered: runtime error: invalid memory address or nil pointer dereference"), "{}", stdout(&n));
    for t in tenders() {
        let s = output(shoal_run(t).arg(&exe));
        assert_eq!(stdout(&s), stdout(&n), "{t}: stderr: {}", stderr(&s));
        assert_eq!(stderr(&s), stderr(&n), "{t}");
        assert_eq!(s.status.code(), Some(0), "{t}");
    }
}
