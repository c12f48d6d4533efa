//! Helpers shared by the integration tests: build C programs with
//! `shoal cc` and natively with `musl-gcc -static`, run them, compare.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `shoal` binary under test.
pub fn shoal() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shoal"))
}

/// The repository root.
pub fn home() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// A C source under `apps/`.
pub fn app(name: &str) -> PathBuf {
    home().join("apps").join(name)
}

/// A fresh scratch directory.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("shoal-test-").tempdir().unwrap()
}

/// Builds `src` as a shoal image `dir/NAME` with `shoal cc`.
pub fn build_image(src: &Path, dir: &Path, extra: &[&str]) -> PathBuf {
    let stem = src.file_stem().unwrap().to_string_lossy().to_string();
    let out = dir.join(&stem);
    let o = shoal().arg("cc").args(["-O2"]).args(extra).arg(src).arg("-o").arg(&out).output().unwrap();
    assert!(o.status.success(), "shoal cc {} failed: {}", src.display(), String::from_utf8_lossy(&o.stderr));
    assert!(out.is_file());
    out
}

/// Builds `src` as a native static musl program `dir/NAME.native`.
pub fn build_native(src: &Path, dir: &Path, extra: &[&str]) -> PathBuf {
    let stem = src.file_stem().unwrap().to_string_lossy().to_string();
    let out = dir.join(format!("{stem}.native"));
    let o = Command::new("musl-gcc").args(["-static", "-O2"]).args(extra).arg(src).arg("-o").arg(&out).output().unwrap();
    assert!(o.status.success(), "musl-gcc {} failed: {}", src.display(), String::from_utf8_lossy(&o.stderr));
    out
}

/// Runs `cmd` and returns its output.
pub fn output(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

/// stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// Asserts that shoal failed the way bad input must fail: a non-zero
/// status, exactly one line on stderr starting with `shoal:` and
/// containing `needle`, and no panic.
pub fn assert_clean_error(o: &Output, needle: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "expected failure, got success; stderr: {err}");
    assert!(!err.contains("panicked"), "shoal panicked: {err}");
    assert_eq!(err.lines().count(), 1, "expected one line of error, got: {err}");
    assert!(err.starts_with("shoal: "), "error not prefixed with `shoal:`: {err}");
    assert!(err.contains(needle), "error `{err}` does not mention `{needle}`");
}

/// The tenders to test on: spt always; hvt when /dev/kvm can be opened
/// read-write, otherwise a visible skip of the hvt column (a failure when
/// SHOAL_REQUIRE names kvm).
pub fn tenders() -> Vec<&'static str> {
    match shoal_testkit::probe("kvm") {
        Ok(()) => vec!["spt", "hvt"],
        Err(why) => {
            shoal_testkit::skip("kvm", &format!("the hvt column: {why}"));
            vec!["spt"]
        }
    }
}

/// `shoal run --tender T` plus the rest.
pub fn shoal_run(tender: &str) -> Command {
    let mut c = shoal();
    c.args(["run", "--tender", tender]);
    c
}

/// An image that makes a raw `syscall` instruction (getpid, harmless even
/// if it got through, so a test of it only measures the sandbox) after
/// printing `before`.
#[allow(dead_code)]
pub fn raw_syscall_image(dir: &Path) -> PathBuf {
    let src = dir.join("rawsyscall.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(void){ long r; printf(\"before\\n\"); fflush(stdout);\n\
         __asm__ volatile(\"syscall\" : \"=a\"(r) : \"a\"(39L) : \"rcx\",\"r11\",\"memory\");\n\
         printf(\"after %ld\\n\", r); return 0; }\n",
    )
    .unwrap();
    build_image(&src, dir, &[])
}

/// A test program under `apps/tests/`.
pub fn test_app(name: &str) -> PathBuf {
    home().join("apps/tests").join(name)
}

/// Builds `apps/tests/NAME` with `shoal cc` and natively, runs both, and
/// asserts that shoal prints the same stdout, nothing on stderr and exits
/// 0, on every tender.
pub fn matches_native(name: &str) {
    matches_native_with(name, &[]);
}

/// [`matches_native`] with extra `shoal run` options.
pub fn matches_native_with(name: &str, run_args: &[&str]) {
    let dir = scratch();
    let src = test_app(name);
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &["-lpthread"]);
    let n = output(&mut Command::new(&native));
    assert!(n.status.success(), "native {name} failed: {}", stdout(&n));
    for tender in tenders() {
        let s = output(shoal_run(tender).args(run_args).arg(&image));
        assert_eq!(stdout(&s), stdout(&n), "{tender} {name}: shoal stderr: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(0), "{tender} {name}: shoal stderr: {}", stderr(&s));
        assert_eq!(stderr(&s), "", "{tender} {name}: shoal printed on stderr");
    }
}
