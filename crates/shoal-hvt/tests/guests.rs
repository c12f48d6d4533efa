//! Hand-made guests (tests/guests/*.s) run on the hvt tender.
//!
//! Each guest is assembled with `as` and linked with `ld` at 0x100000 by
//! the test itself. Without a usable `/dev/kvm` every test skips through
//! shoal_testkit (a failure when SHOAL_REQUIRE names kvm).

use shoal_hvt::{Console, Outcome, Refusal, RunConfig, Timings};
use std::path::{Path, PathBuf};
use std::process::Command;

const MEM: u64 = 16 << 20;

fn kvm_usable() -> bool {
    match shoal_hvt::vm::check_kvm() {
        Ok(()) => true,
        Err(e) => {
            shoal_testkit::skip("kvm", &format!("/dev/kvm not usable: {e}"));
            false
        }
    }
}

/// Assembles and links tests/guests/NAME.s with `CASE=case`; returns the
/// image path.
fn guest(name: &str, case: u32) -> PathBuf {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guests");
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hvt-guests");
    std::fs::create_dir_all(&out_dir).unwrap();
    let obj = out_dir.join(format!("{name}-{case}.o"));
    let img = out_dir.join(format!("{name}-{case}"));
    let st = Command::new("as")
        .arg("--defsym")
        .arg(format!("ABI_VERSION={}", shoal_abi::ABI_VERSION))
        .arg("--defsym")
        .arg(format!("CASE={case}"))
        .arg("-I")
        .arg(&src_dir)
        .arg(src_dir.join(format!("{name}.s")))
        .arg("-o")
        .arg(&obj)
        .status()
        .expect("run as");
    assert!(st.success(), "as failed for {name} case {case}");
    // -Ttext-segment puts the ELF headers' segment at 0x100000 too, so that
    // no segment lies below the image base (plain -Ttext would put it at
    // 0xff000, which the loader refuses).
    let st = Command::new("ld").args(["-Ttext-segment=0x100000", "--build-id=none", "-static", "-o"]).arg(&img).arg(&obj).status().expect("run ld");
    assert!(st.success(), "ld failed for {name} case {case}");
    img
}

struct Run {
    outcome: Outcome,
    timings: Timings,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn run_image(image: PathBuf) -> Run {
    let mut cfg = RunConfig::new(image, MEM);
    cfg.argv = vec!["guest".into()];
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    let (outcome, timings) = shoal_hvt::run_with_console(&cfg, &mut Console { stdout: &mut stdout, stderr: &mut stderr }).unwrap();
    if let Some(m) = outcome.message() {
        eprintln!("shoal: {m}");
    }
    Run { outcome, timings, stdout, stderr }
}

fn report(name: &str, t: &Timings) {
    // Straight to stderr so that it shows without --nocapture.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "{name}: prepare {:?}, VM created {:?}, ready {:?}, first byte {:?}, exit {:?}, {} exits",
        t.prepare,
        t.vm_created,
        t.vm_ready,
        t.first_output,
        t.exit,
        t.exits
    );
}

#[test]
fn hello_prints_and_halts_with_7() {
    if !kvm_usable() {
        return;
    }
    let r = run_image(guest("hello", 0));
    report("hello", &r.timings);
    assert_eq!(String::from_utf8_lossy(&r.stdout), "hello from hvt\n");
    assert_eq!(String::from_utf8_lossy(&r.stderr), "to stderr\n");
    assert!(matches!(r.outcome, Outcome::Exit(7)), "{:?}", r.outcome);
    assert_eq!(r.outcome.status(), 7);
    assert!(r.timings.first_output.is_some());
}

#[test]
fn cpu_features_run_at_cpl3() {
    if !kvm_usable() {
        return;
    }
    let before = shoal_loader::tsc::rdtsc();
    let r = run_image(guest("features", 0));
    let after = shoal_loader::tsc::rdtsc();
    assert!(matches!(r.outcome, Outcome::Exit(0)), "{:?}", r.outcome);
    assert_eq!(r.stdout.len(), 24);
    let q = |i: usize| u64::from_le_bytes(r.stdout[i * 8..i * 8 + 8].try_into().unwrap());
    let (tsc, fsbase, xcr0) = (q(0), q(1), q(2));
    eprintln!("guest tsc {tsc}, host before {before} after {after}; fsbase {fsbase:#x}; xcr0 {xcr0:#x}");
    assert!(tsc >= before && tsc <= after, "guest TSC {tsc} not within host [{before}, {after}]");
    assert_eq!(fsbase, 0x1234_5678_9000);
    assert_eq!(xcr0 & 3, 3);
}

fn fault(case: u32) -> (shoal_abi::FaultArgs, bool, i32, String) {
    let r = run_image(guest("fault", case));
    let msg = r.outcome.message().unwrap_or_default();
    let status = r.outcome.status();
    match r.outcome {
        Outcome::Fault { report, syscall, cpu: true, .. } => (report, syscall, status, msg),
        o => panic!("case {case}: expected a fault, got {o:?}"),
    }
}

#[test]
fn wild_pointer_is_a_page_fault() {
    if !kvm_usable() {
        return;
    }
    let (f, _, status, msg) = fault(1);
    assert_eq!(f.vector, 14);
    assert_eq!(f.cr2, 0xdead0000);
    assert!(f.rip > 0x100000 && f.rip < 0x102000, "rip {:#x}", f.rip);
    assert_eq!(f.error_code & 1, 0, "not present");
    assert!(f.rsp > MEM - (1 << 20) && f.rsp < MEM);
    assert_eq!(status, 139);
    assert!(msg.starts_with("guest fault: page fault (vector 14, error 0x4) at rip 0x"), "{msg}");
    assert!(msg.contains("cr2 0xdead0000"), "{msg}");
}

#[test]
fn ud2_is_an_invalid_opcode() {
    if !kvm_usable() {
        return;
    }
    let (f, syscall, status, msg) = fault(2);
    assert_eq!(f.vector, 6);
    assert!(!syscall);
    assert_eq!(status, 132);
    assert!(msg.contains("invalid opcode"), "{msg}");
}

#[test]
fn writing_own_code_faults() {
    if !kvm_usable() {
        return;
    }
    let (f, _, status, msg) = fault(3);
    assert_eq!(f.vector, 14);
    assert_eq!(f.error_code & 7, 7, "present, write, user");
    assert_eq!(f.cr2 & !0xfff, f.rip & !0xfff);
    assert_eq!(status, 139);
    assert!(msg.ends_with("write to the image's code, which is read-only"), "{msg}");
}

#[test]
fn syscall_instruction_is_refused() {
    if !kvm_usable() {
        return;
    }
    let (f, syscall, status, msg) = fault(4);
    assert_eq!(f.vector, 6);
    assert!(syscall);
    assert_eq!(status, 159);
    assert!(msg.contains("`syscall`"), "{msg}");
}

#[test]
fn tender_private_memory_is_out_of_reach() {
    if !kvm_usable() {
        return;
    }
    let (f, _, _, msg) = fault(5);
    assert_eq!((f.vector, f.cr2, f.error_code & 3), (14, 0x4000, 3));
    assert!(msg.ends_with("access to tender-private memory"), "{msg}");
    let (f, _, _, _) = fault(11);
    assert_eq!((f.vector, f.cr2, f.error_code & 1), (14, 0, 0));
}

#[test]
fn other_exceptions_are_reported() {
    if !kvm_usable() {
        return;
    }
    // Stack is not executable: instruction fetch, present.
    let (f, _, _, msg) = fault(6);
    assert_eq!((f.vector, f.error_code & 0x11), (14, 0x11), "{msg}");
    assert_eq!(f.cr2, f.rip);
    // hlt at CPL 3, an unknown port: general protection.
    for case in [7, 10] {
        let (f, _, status, msg) = fault(case);
        assert_eq!((f.vector, status), (13, 139), "case {case}: {msg}");
    }
    let (f, _, status, _) = fault(8);
    assert_eq!((f.vector, status), (3, 133));
    let (f, _, status, _) = fault(9);
    assert_eq!((f.vector, status), (0, 136));
}

fn hostile(case: u32) -> Run {
    run_image(guest("hostile", case))
}

fn assert_refused(case: u32, want: fn(&Refusal) -> bool) {
    let r = hostile(case);
    match &r.outcome {
        Outcome::Refused(x) if want(x) => assert_eq!(r.outcome.status(), shoal_hvt::EXIT_STOPPED),
        o => panic!("case {case}: expected a refusal, got {o:?}"),
    }
}

#[test]
fn hostile_hypercall_arguments() {
    if !kvm_usable() {
        return;
    }
    let efault = (-(libc::EFAULT as i64) & 0xff) as i32;
    let einval = (-(libc::EINVAL as i64) & 0xff) as i32;
    assert_refused(1, |r| matches!(r, Refusal::BadArgs { call: shoal_abi::Hypercall::ConsoleWrite, .. }));
    assert_refused(2, |r| matches!(r, Refusal::BadArgs { .. }));
    let status = |case| {
        let r = hostile(case);
        assert!(r.stdout.is_empty() && r.stderr.is_empty(), "case {case} wrote");
        match r.outcome {
            Outcome::Exit(s) => s,
            o => panic!("case {case}: expected an exit, got {o:?}"),
        }
    };
    assert_eq!(status(3), efault, "buffer + length overflow");
    assert_eq!(status(4), einval, "stream 99");
    assert_eq!(status(5), einval, "wait_set non-zero");
    assert_eq!(status(9), efault, "buffer in tender-private memory");
    assert_eq!(status(10), efault, "huge length");
    assert_eq!(status(13), 0x34, "status masked to 8 bits");
    // A fault report the guest writes itself is forged, wherever it points.
    assert_refused(7, |r| matches!(r, Refusal::ForgedFault { arg: 0, cpl: 3, .. }));
    assert_refused(8, |r| matches!(r, Refusal::BadArgs { call: shoal_abi::Hypercall::Halt, .. }));
    assert_refused(11, |r| matches!(r, Refusal::PortRead(_)));
    assert_refused(12, |r| matches!(r, Refusal::BadSize { size: 2, .. }));
    assert_refused(15, |r| matches!(r, Refusal::UnknownPort(0x514)));
    assert_refused(14, |r| matches!(r, Refusal::ForgedFault { cpl: 3, .. }));
    let r = hostile(16);
    assert!(matches!(r.outcome, Outcome::BlockedForever), "{:?}", r.outcome);
    assert_eq!(r.outcome.status(), shoal_hvt::EXIT_STOPPED);
}

/// The address of symbol `name` in the image of guest NAME-CASE (`nm`).
fn symbol(image: &Path, name: &str) -> u64 {
    let out = Command::new("nm").arg(image).output().expect("run nm");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.ends_with(&format!(" {name}"))).unwrap_or_else(|| panic!("no {name} in {text}"));
    u64::from_str_radix(line.split(' ').next().unwrap(), 16).unwrap()
}

fn read_only_refusal(call: &str, addr: u64) -> String {
    format!(
        "the guest made an invalid hypercall: its {call} argument structure [{addr:#x}, +0x20) is outside writable guest memory \
         (the image's code or read-only data, the archive or the boot-info page), where the results would be written"
    )
}

/// The VMM writes results through its own mapping, which
/// the guest's page tables do not protect; an argument structure in the
/// code, read-only data or the boot-info page must be refused before the
/// call does anything (spt's `args(.., write = true)`).
#[test]
fn hvt_hypercall_result_into_code_is_refused() {
    if !kvm_usable() {
        return;
    }
    let image = guest("hostile", 17);
    let start = symbol(&image, "_start");
    let r = run_image(image);
    assert_eq!(String::from_utf8_lossy(&r.stdout), "ok!\n", "console writes work, and the refused one wrote nothing");
    assert!(
        matches!(r.outcome, Outcome::Refused(Refusal::ReadOnlyArgs { call: shoal_abi::Hypercall::ConsoleWrite, addr, len: 32 }) if addr == start),
        "{:?}",
        r.outcome
    );
    assert_eq!(r.outcome.status(), 255);
    assert_eq!(r.outcome.message().unwrap(), read_only_refusal("ConsoleWrite", start));

    let image = guest("hostile", 18);
    let ro = symbol(&image, "ro_poll");
    let r = run_image(image);
    assert_eq!(r.outcome.status(), 255, "{:?}", r.outcome);
    assert_eq!(r.outcome.message().unwrap(), read_only_refusal("Poll", ro));
    // Refused before sleeping the 20 ms it asked for.
    assert!(r.timings.exit - r.timings.vm_ready < std::time::Duration::from_millis(20), "{:?}", r.timings);

    let r = hostile(19);
    assert_eq!(r.outcome.status(), 255, "{:?}", r.outcome);
    assert_eq!(r.outcome.message().unwrap(), read_only_refusal("Poll", shoal_abi::BOOT_INFO_ADDR));
}

/// The guest runs at CPL 3 with IOPL 3, so it can write
/// the fault port itself; only the CPL-0 exception stub's report is a CPU
/// exception. A forged one is an invalid hypercall (255), not a
/// `guest fault` with a signal status.
#[test]
fn hvt_forged_fault_report_is_refused() {
    if !kvm_usable() {
        return;
    }
    // Pointing at the stub's own report address, as the stub does.
    let image = guest("hostile", 20);
    let after = symbol(&image, "forged_fault_after");
    let r = run_image(image);
    assert!(matches!(r.outcome, Outcome::Refused(Refusal::ForgedFault { arg: 0x3fc8, cpl: 3, rip }) if rip == after), "{:?}", r.outcome);
    assert_eq!(r.outcome.status(), 255);
    assert_eq!(
        r.outcome.message().unwrap(),
        format!(
            "the guest made an invalid hypercall: it wrote a fault report (argument 0x3fc8) to the fault port itself \
             at CPL 3 (rip {after:#x}); only the exception stub reports CPU exceptions"
        )
    );
    // A made-up report of its own on its stack.
    let r = hostile(14);
    assert_eq!(r.outcome.status(), 255, "{:?}", r.outcome);
    let m = r.outcome.message().unwrap();
    assert!(m.starts_with("the guest made an invalid hypercall: it wrote a fault report (argument 0x"), "{m}");
    // Real exceptions still come from the stub.
    let (f, _, status, _) = fault(2);
    assert_eq!((f.vector, status), (6, 132));
}

#[test]
fn poll_sleeps_in_the_vmm() {
    if !kvm_usable() {
        return;
    }
    let cpu0 = cpu_time();
    let r = hostile(6);
    let cpu = cpu_time() - cpu0;
    assert!(matches!(r.outcome, Outcome::Exit(42)), "{:?}", r.outcome);
    let run = r.timings.exit - r.timings.vm_ready;
    eprintln!("poll 20 ms: run {run:?}, process CPU {cpu:?} (other tests may add to it)");
    assert!(run >= std::time::Duration::from_millis(20));
}

fn cpu_time() -> std::time::Duration {
    let mut ru: libc::rusage = unsafe_zeroed();
    // SAFETY: getrusage writes one rusage into the valid `ru`.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| std::time::Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn unsafe_zeroed() -> libc::rusage {
    // SAFETY: rusage is plain integers; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

#[test]
fn refuses_bad_configurations_before_kvm() {
    let mut o = Vec::new();
    let mut e = Vec::new();
    let cfg = RunConfig::new("/nonexistent", MEM);
    let err = shoal_hvt::run_with_console(&cfg, &mut Console { stdout: &mut o, stderr: &mut e }).unwrap_err();
    assert!(err.to_string().contains("/nonexistent"), "{err}");
    let cfg = RunConfig::new("/nonexistent", 8 << 30);
    let err = shoal_hvt::run_with_console(&cfg, &mut Console { stdout: &mut o, stderr: &mut e }).unwrap_err();
    assert!(err.to_string().contains("at most 4G"), "{err}");
    let mut cfg = RunConfig::new("/nonexistent", MEM);
    // Every memory mode is supported now (ksm, pool): the image is what fails.
    cfg.mode = shoal_hvt::MemoryMode::Pool;
    let err = shoal_hvt::run_with_console(&cfg, &mut Console { stdout: &mut o, stderr: &mut e }).unwrap_err();
    assert!(err.to_string().contains("/nonexistent"), "{err}");
}
