//! Memory the guest frees goes back to the host. A guest
//! maps and writes 64 MiB, then unmaps it, discards it with
//! `madvise(MADV_DONTNEED)`, or frees it through `malloc`; after each step
//! the resident set of the instance's processes (VmRSS in
//! /proc/PID/status, summed over `shoal run` and its descendants: the spt
//! instance, or the hvt VMM with its guest memory) must have dropped back.

mod common;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

/// VmRSS in KiB of `pid` and its descendants.
fn rss_kib(pid: u32) -> u64 {
    shoal_bench::sample::tree_rss_kib(pid)
}

#[test]
fn freed_guest_memory_leaves_the_host_resident_set() {
    let dir = scratch();
    let img = build_image(&test_app("mem_release.c"), dir.path(), &[]);
    for t in tenders() {
        let mut child = shoal_run(t).args(["--mem", "256M"]).arg(&img).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let pid = child.id();
        let mut input = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut at = |want: &str| {
            let line = lines.next().expect("the guest ended early").unwrap();
            assert_eq!(line, want, "{t}");
            rss_kib(pid)
        };
        let touched = at("touched");
        assert!(touched >= 64 << 10, "{t}: 64 MiB written, resident {touched} KiB");
        input.write_all(b"\n").unwrap();
        let unmapped = at("unmapped");
        input.write_all(b"\n").unwrap();
        let discarded = at("discarded");
        input.write_all(b"\n").unwrap();
        let freed = at("freed");
        input.write_all(b"\n").unwrap();
        at("done");
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{t}: {}", stderr(&out));
        eprintln!("{t}: resident KiB touched {touched}, unmapped {unmapped}, discarded {discarded}, freed {freed}");
        // Everything but RELEASE_LOW (1 MiB) of freed memory and what is not guest
        // data (the tender, the image) went back: at least 56 of the 64 MiB.
        for (what, kib) in [("munmap", unmapped), ("madvise(MADV_DONTNEED)", discarded), ("free", freed)] {
            assert!(kib + (56 << 10) <= touched, "{t}: after {what} still {kib} KiB resident (64 MiB written: {touched} KiB)");
        }
    }
}

#[test]
fn the_guests_own_madvise_is_bounded_by_the_sandbox() {
    // spt only: an hvt guest cannot make host system calls at all.
    let dir = scratch();
    let img = build_image(&test_app("mem_release.c"), dir.path(), &[]);
    let ok = output(shoal_run("spt").arg(&img).args(["--", "raw-ok"]));
    assert_eq!(stdout(&ok), "0 0\n", "MADV_DONTNEED on its own heap: allowed, the page reads as zero: {}", stderr(&ok));
    assert!(ok.status.success());
    for mode in ["raw-advice", "raw-code"] {
        let s = output(shoal_run("spt").arg(&img).args(["--", mode]));
        assert_eq!(s.status.code(), Some(159), "{mode}: {} {}", stdout(&s), stderr(&s));
        assert!(stderr(&s).contains("(system call 28, madvise)"), "{mode}: {}", stderr(&s));
    }
}

/// Resident KiB of `pid` and its descendants once it is at most `want`,
/// or the last reading after 10 s.
fn rss_falls_to(pid: u32, want: u64) -> u64 {
    let mut kib = rss_kib(pid);
    for _ in 0..100 {
        if kib <= want {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        kib = rss_kib(pid);
    }
    kib
}

/// The freed memory mm keeps resident for reuse (under 2 MiB)
/// goes back to the host when the instance idles: after a second of an
/// idle wait without a deadline (waiting for input), and at once before a
/// long sleep.
#[test]
fn an_idle_instance_gives_back_the_memory_its_program_freed() {
    let dir = scratch();
    let img = build_image(&test_app("mem_idle.c"), dir.path(), &[]);
    for t in tenders() {
        let mut child = shoal_run(t).args(["--mem", "64M"]).arg(&img).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let pid = child.id();
        let mut input = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut next = |want: &str| {
            let line = lines.next().expect("the guest ended early").unwrap();
            assert_eq!(line, want, "{t}");
        };
        next("touched");
        let touched = rss_kib(pid);
        input.write_all(b"\n").unwrap();
        next("unmapped");
        // 1 MiB written then unmapped: at least 768 KiB of it must leave.
        let idle = rss_falls_to(pid, touched - 768);
        assert!(idle + 768 <= touched, "{t}: idle after munmap, still {idle} KiB resident (with the 1 MiB written: {touched})");
        input.write_all(b"\n").unwrap();
        next("unmapped again");
        let again = rss_falls_to(pid, idle + 256);
        assert!(again <= idle + 256, "{t}: asleep after munmap, still {again} KiB resident ({idle} before the 1 MiB was written again)");
        next("slept");
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{t}: {}", stderr(&out));
        eprintln!("{t}: resident KiB touched {touched}, idle {idle}, asleep {again}");
    }
}

/// `pid` and its descendants.
fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let children = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            all.extend(children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()).flat_map(tree));
        }
    }
    all
}

/// A running spt instance has given back the initial stack the
/// kernel made for it at exec (its last steps run on the hypercall
/// handlers' stack, docs/architecture.md), and its guest runs on.
#[test]
fn a_running_spt_instance_holds_no_initial_stack() {
    let dir = scratch();
    let img = build_image(&test_app("mem_idle.c"), dir.path(), &[]);
    let mut child = shoal_run("spt").args(["--mem", "64M"]).arg(&img).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().expect("the guest ended early").unwrap(), "touched");
    let instances: Vec<u32> =
        tree(child.id()).into_iter().filter(|p| std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "shoal-spt")).collect();
    assert!(!instances.is_empty(), "no shoal-spt process under shoal run");
    let mut checked = 0;
    for p in &instances {
        match std::fs::read_to_string(format!("/proc/{p}/maps")) {
            Ok(maps) => {
                assert!(!maps.lines().any(|l| l.ends_with("[stack]")), "the instance {p} still maps its initial stack:\n{maps}");
                checked += 1;
            }
            // The instance is not dumpable: only root reads its maps.
            Err(e) if shoal_testkit::probe("root").is_err() => {
                shoal_testkit::skip("root", &format!("cannot read /proc/{p}/maps ({e}; the instance is not dumpable, root reads it)"))
            }
            Err(e) => panic!("root cannot read /proc/{p}/maps: {e}"),
        }
    }
    for _ in 0..2 {
        input.write_all(b"\n").unwrap();
    }
    drop(input);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert_eq!(rest, ["unmapped", "unmapped again", "slept"], "the guest runs on");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    eprintln!("checked {checked} of {} instance processes", instances.len());
}
