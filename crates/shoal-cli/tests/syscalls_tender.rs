//! System calls that need the tender, on spt and
//! on hvt (hvt skips visibly without /dev/kvm). Each test is named after
//! the item of the issue it checks.

mod common;
use common::*;
use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Runs `cmd` with stdin a pipe fed `chunks`, with a pause before each
/// chunk after the first, so that the program has to wait for input.
fn run_fed(cmd: &mut Command, chunks: &[&[u8]]) -> Output {
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let chunks: Vec<Vec<u8>> = chunks.iter().map(|c| c.to_vec()).collect();
    let feeder = std::thread::spawn(move || {
        for (i, c) in chunks.iter().enumerate() {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(200));
            }
            let _ = stdin.write_all(c);
        }
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

/// Item 6: standard input reaches the guest: a script piped in (arriving
/// in pieces, so reads and poll wait for it), and a file redirected in,
/// are read to end of input exactly as natively; `isatty(0)` is false for
/// a pipe, as natively.
#[test]
fn item6_stdin_reaches_the_guest() {
    let dir = scratch();
    let src = home().join("apps/tests/sys_stdin.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &[]);
    let chunks: &[&[u8]] = &[b"select 1;\n", b"select 'two', 2;\nthird line\n", b"no newline at the end"];
    let n = run_fed(&mut Command::new(&native), chunks);
    assert!(n.status.success());
    assert!(stdout(&n).contains("   3  third line"), "native: {}", stdout(&n));
    let file = dir.path().join("script.txt");
    std::fs::write(&file, chunks.concat()).unwrap();
    for tender in tenders() {
        let s = run_fed(shoal_run(tender).arg(&image), chunks);
        assert_eq!(stdout(&s), stdout(&n), "{tender}, piped: shoal stderr: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(0), "{tender}: {}", stderr(&s));
        assert_eq!(stderr(&s), "", "{tender}");
        let s = output(shoal_run(tender).arg(&image).stdin(std::fs::File::open(&file).unwrap()));
        let n = output(Command::new(&native).stdin(std::fs::File::open(&file).unwrap()));
        assert_eq!(stdout(&s), stdout(&n), "{tender}, from a file: shoal stderr: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(0), "{tender}: {}", stderr(&s));
    }
}

/// Builds `apps/tests/sys_mprotect.c` both ways.
fn mprotect_images(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let src = home().join("apps/tests/sys_mprotect.c");
    (build_image(&src, dir, &[]), build_native(&src, dir, &["-lpthread"]))
}

/// Asserts that the guest was stopped by a memory fault: status 139 and
/// the tender's crash report (spt: SIGSEGV; hvt: a page fault).
fn assert_faulted(tender: &str, what: &str, s: &Output) {
    let err = stderr(s);
    assert_eq!(s.status.code(), Some(139), "{tender} {what}: stdout {} stderr {err}", stdout(s));
    let report = if tender == "spt" { "SIGSEGV" } else { "page fault" };
    assert!(err.contains(report), "{tender} {what}: no {report} report: {err}");
}

/// Item 1: a thread whose stack overflows into musl's guard page is
/// stopped with a fault report (139), as natively (SIGSEGV), instead of
/// writing over the memory below its stack and going on.
#[test]
fn item1_stack_overflow_hits_the_guard_page() {
    let dir = scratch();
    let (image, native) = mprotect_images(dir.path());
    let n = output(Command::new(&native).arg("overflow"));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(n.status.signal(), Some(libc_sigsegv()), "native: {}", stdout(&n));
    for tender in tenders() {
        let s = output(shoal_run(tender).arg(&image).args(["--", "overflow"]));
        assert!(!stdout(&s).contains("survived"), "{tender}: the overflow went unnoticed");
        assert_faulted(tender, "overflow", &s);
    }
}

/// Item 1: PROT_NONE and read-only pages fault on access; protections
/// set back to read-write work and keep the contents.
#[test]
fn item1_mprotect_prot_none_and_back() {
    let dir = scratch();
    let (image, native) = mprotect_images(dir.path());
    let n = output(Command::new(&native).arg("prot"));
    assert!(n.status.success());
    for tender in tenders() {
        let s = output(shoal_run(tender).arg(&image).args(["--", "prot"]));
        assert_eq!(stdout(&s), stdout(&n), "{tender}: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(0), "{tender}: {}", stderr(&s));
        for mode in ["none", "readonly"] {
            let s = output(shoal_run(tender).arg(&image).args(["--", mode]));
            assert!(stdout(&s).ends_with("writes: c\n"), "{tender} {mode}: {}", stdout(&s));
            assert_faulted(tender, mode, &s);
        }
    }
}

/// Item 4: a shared file mapping keeps showing the file through
/// mprotect (read-only, PROT_NONE and back to read-write: hvt keeps the
/// page-table entry's target), a PROT_READ shared mapping faults on a
/// store, 40 KiB written to stdout from a shared mapping arrive (hvt's VMM
/// reads by guest-physical address: the kernel hands it a copy), and on spt the guest's own mmap of the alias file is bounded by
/// the sandbox (never executable, never over its code: killed, 159).
#[test]
fn item4_shared_mappings_keep_their_protection_and_the_sandbox_bounds_aliasing() {
    let dir = scratch();
    let src = home().join("apps/tests/sys_mapshared.c");
    let (image, native) = (build_image(&src, dir.path(), &[]), build_native(&src, dir.path(), &["-lpthread"]));
    let n = output(Command::new(&native).arg("protect"));
    assert!(n.status.success() && stdout(&n).contains("file sees store after mprotect"), "native: {}", stdout(&n));
    for tender in tenders() {
        let s = output(shoal_run(tender).arg(&image).args(["--", "protect"]));
        assert_eq!(stdout(&s), stdout(&n), "{tender}: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(0), "{tender}: {}", stderr(&s));
        let c = output(shoal_run(tender).arg(&image).args(["--", "console"]));
        assert!(c.status.success() && c.stdout == output(Command::new(&native).arg("console")).stdout, "{tender} console: {}", stderr(&c));
        let s = output(shoal_run(tender).arg(&image).args(["--", "rofault"]));
        assert_eq!(stdout(&s), "mapped read-only\n", "{tender}: {}", stderr(&s));
        assert_faulted(tender, "rofault", &s);
    }
    for mode in ["raw-exec", "raw-code"] {
        let s = output(shoal_run("spt").arg(&image).args(["--", mode]));
        assert_eq!(s.status.code(), Some(159), "{mode}: {} {}", stdout(&s), stderr(&s));
        assert!(stderr(&s).contains("(system call 9, mmap)"), "{mode}: {}", stderr(&s));
    }
}

/// SIGSEGV's number (11 on x86-64 Linux).
fn libc_sigsegv() -> i32 {
    11
}

/// `shoal run --tender T IMAGE -- ARGS` under `timeout 300`: a program
/// whose threads starve each other would otherwise hang the test (the
/// bound only turns a hang into a failure; nothing here is timed).
fn run_bounded(tender: &str, image: &std::path::Path, args: &[&str], stats: bool) -> Output {
    let mut c = Command::new("timeout");
    c.args(["300", env!("CARGO_BIN_EXE_shoal"), "run", "--tender", tender]).arg(image).arg("--").args(args);
    if stats {
        c.env("SHOAL_PREEMPT_STATS", "1");
    }
    output(&mut c)
}

/// The preemption ticks `shoal run` reported with `SHOAL_PREEMPT_STATS`.
fn ticks_reported(tender: &str, s: &Output) -> u64 {
    let err = stderr(s);
    let line = err.lines().find_map(|l| l.strip_prefix("shoal: preemption ticks: "));
    line.and_then(|n| n.trim().parse().ok()).unwrap_or_else(|| panic!("{tender}: no tick count: {err}"))
}

/// Item 7: threads that never block all make progress: two and three
/// threads spinning on shared counters while main spin-waits for them, a
/// watchdog spin-waiting for a flag that a computing thread sets, and an
/// asynchronous `pthread_cancel` of a thread looping without system calls,
/// and three threads computing with SSE and x87 while ticks switch between
/// them (exact results: every switch keeps the FPU state), a thread
/// spin-waiting for one that sleeps, and a lone thread computing until its
/// interval timer's `SIGALRM` handler sets a flag. The output is
/// the native program's; the ticks reached the instance.
#[test]
fn item7_two_busy_threads_both_make_progress() {
    let dir = scratch();
    let src = home().join("apps/tests/preempt.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &["-lpthread"]);
    for case in ["two", "three", "watchdog", "cancel", "fpu", "sleeper", "alarm"] {
        let n = output(Command::new(&native).arg(case));
        assert!(n.status.success(), "native {case}: {}", stdout(&n));
        for tender in tenders() {
            let s = run_bounded(tender, &image, &[case], true);
            assert_eq!(stdout(&s), stdout(&n), "{tender} {case}: shoal stderr: {}", stderr(&s));
            assert_eq!(s.status.code(), Some(0), "{tender} {case}: {}", stderr(&s));
            assert!(ticks_reported(tender, &s) > 0, "{tender} {case}: spinning threads switched without a tick?");
        }
    }
}

/// The FPU save of the preemption entry is sized for the XCR0 the CPU
/// really runs with (on an AMD host with AVX-512 the nested KVM runs guest
/// code with the host's XCR0, not the VMM's, and the save is three times
/// what CPUID's sub-leaf 0 says): three threads fill every vector register
/// that XCR0 enables (zmm0-31 and k1-7 with AVX-512) and spin while ticks
/// switch between them; every register comes back, and the instance does
/// not fault on its own stack.
#[test]
fn item7_preempted_threads_keep_every_vector_register_xcr0_enables() {
    let dir = scratch();
    let src = home().join("apps/tests/preempt.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &["-lpthread"]);
    let n = output(Command::new(&native).arg("xstate"));
    assert!(n.status.success(), "native: {}", stdout(&n));
    for tender in tenders() {
        let s = run_bounded(tender, &image, &["xstate"], true);
        assert_eq!(stdout(&s), stdout(&n), "{tender}: shoal stderr: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(0), "{tender}: {}", stderr(&s));
        assert!(ticks_reported(tender, &s) > 0, "{tender}: spinning threads switched without a tick?");
    }
}

/// Item 7, no cost while one thread runs alone: a program that computes
/// on one thread gets no preemption tick at all (the tick is armed only
/// while more than one thread is runnable).
#[test]
fn item7_a_single_thread_gets_no_ticks() {
    let dir = scratch();
    let src = home().join("apps/tests/preempt.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &["-lpthread"]);
    let n = output(Command::new(&native).arg("single"));
    for tender in tenders() {
        let s = run_bounded(tender, &image, &["single"], true);
        assert_eq!(stdout(&s), stdout(&n), "{tender}: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(0), "{tender}: {}", stderr(&s));
        assert_eq!(ticks_reported(tender, &s), 0, "{tender}: a lone thread was ticked");
    }
}

/// Item 7, hostile guests: the `Preempt` hypercall with an area or entry
/// outside guest memory, a misaligned area or an unknown operation is
/// refused with an error (EFAULT, EINVAL), a zero period is raised to the
/// minimum, and a program that registers an area of its own and lies in it
/// only redirects itself: the tender goes on and the program ends as it
/// chose.
#[test]
fn item7_a_lying_preempt_area_only_redirects_the_guest() {
    let dir = scratch();
    let image = build_image(&home().join("apps/tests/preempt_hostile.c"), dir.path(), &[]);
    let want = "area outside guest memory: -14\nentry outside guest memory: -22\nmisaligned area: -22\n\
                unknown operation: -22\nown area: 0\narm with a zero period: 0\n\
                the tick redirected the program into its own code\n";
    for tender in tenders() {
        let s = run_bounded(tender, &image, &[], false);
        assert_eq!(stdout(&s), want, "{tender}: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(0), "{tender}: {}", stderr(&s));
        assert_eq!(stderr(&s), "", "{tender}");
    }
}
