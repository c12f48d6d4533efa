//! Guests that point the kernel or the tender at memory they may not write,
//! built from C with `shoal cc` and run with
//! `shoal run` on each tender. Without a usable `/dev/kvm` the hvt parts
//! print a visible "skipped" line and pass.

mod common;

use common::*;
use std::path::PathBuf;

/// Builds apps/tests/NAME.c into a fresh scratch directory.
fn image(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = scratch();
    let img = build_image(&app(&format!("tests/{name}.c")), dir.path(), &[]);
    (dir, img)
}

/// Item 5: every system call asked to write into read-only memory (the
/// image's code and rodata, read-only and PROT_NONE mappings, unmapped
/// memory) answers EFAULT, as on Linux, instead of killing the instance
/// (spt: SIGSEGV in the kernel's copy; hvt: a page fault at CPL 3).
#[test]
fn read_into_rodata_is_efault() {
    let (_dir, img) = image("efault");
    let want = "read into rodata: EFAULT\n\
                read into code: EFAULT\n\
                clock_gettime(CLOCK_MONOTONIC) into rodata: EFAULT\n\
                clock_gettime(CLOCK_REALTIME) into code: EFAULT\n\
                fstat into rodata: EFAULT\n\
                pipe into rodata: EFAULT\n\
                socketpair into rodata: EFAULT\n\
                no descriptor leaked: yes\n\
                read into a PROT_READ mapping: EFAULT\n\
                read into a PROT_NONE mapping: EFAULT\n\
                read into unmapped memory: EFAULT\n\
                read into the stack: ok \"abc\"\n\
                rodata intact: yes\n\
                code intact: yes\n\
                clock_gettime into the stack: ok\n";
    for t in tenders() {
        let o = output(shoal_run(t).arg(&img));
        assert_eq!(stdout(&o), want, "{t}: stderr: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{t}");
        assert_eq!(o.status.code(), Some(0), "{t}");
    }
}

/// Whether hvt can run here; prints why not (visibly) when it cannot.
fn hvt_usable() -> bool {
    tenders().contains(&"hvt")
}

/// The address the program printed after `label `.
fn printed_addr(out: &str, label: &str) -> u64 {
    let line = out.lines().find_map(|l| l.strip_prefix(label)).unwrap_or_else(|| panic!("no `{label}` in {out:?}"));
    u64::from_str_radix(line.trim().trim_start_matches("0x"), 16).unwrap()
}

/// Item 3, through `shoal run`: a console write whose argument structure
/// (where the VMM writes the result) is the program's own code.
#[test]
fn shoal_run_hvt_refuses_hypercall_result_into_code() {
    if !hvt_usable() {
        return;
    }
    let (_dir, img) = image("hvt_forged");
    let o = output(shoal_run("hvt").arg(&img).args(["--", "code"]));
    let out = stdout(&o);
    let main = printed_addr(&out, "main ");
    assert!(!out.contains("still running"), "{out}");
    assert_eq!(o.status.code(), Some(255), "stderr: {}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!(
            "shoal: the guest made an invalid hypercall: its ConsoleWrite argument structure [{main:#x}, +0x20) is \
             outside writable guest memory (the image's code or read-only data, the archive or the boot-info page), \
             where the results would be written\n"
        )
    );
}

/// Item 3, through `shoal run`: a fault report written to the fault port
/// from CPL 3 is an invalid hypercall, not a CPU exception (which would be
/// `guest fault: …` with a signal status).
#[test]
fn shoal_run_hvt_refuses_forged_fault_report() {
    if !hvt_usable() {
        return;
    }
    let (_dir, img) = image("hvt_forged");
    let o = output(shoal_run("hvt").arg(&img).args(["--", "fault"]));
    let out = stdout(&o);
    let after = printed_addr(&out, "after ");
    assert!(!out.contains("still running"), "{out}");
    assert_eq!(o.status.code(), Some(255), "stderr: {}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!(
            "shoal: the guest made an invalid hypercall: it wrote a fault report (argument 0x3fc8) to the fault port \
             itself at CPL 3 (rip {after:#x}); only the exception stub reports CPU exceptions\n"
        )
    );
}
