//! spt against a hand-made guest (tests/guest/guest.s): the real kernel and
//! libc are not needed to check the tender's side of the ABI. The guest's
//! behaviour is chosen by its argc (see the table in guest.s).

use shoal_spt::{run, RunConfig, SptError, EXIT_SIGSYS, EXIT_STOPPED};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Command;

const MEM: u64 = 8 << 20;

fn tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("spt-tests")
}

/// Assembles and links the guest as `name`: `text_flags` 5 (R+X) or 7
/// (R+W+X), `abi` the version in its ABI note.
fn build(name: &str, text_flags: u32, abi: u32) -> PathBuf {
    let dir = tmp();
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest");
    let script = std::fs::read_to_string(src.join("guest.ld")).unwrap().replace("TEXT_FLAGS", &text_flags.to_string());
    let ld_script = dir.join(format!("{name}.ld"));
    std::fs::write(&ld_script, script).unwrap();
    let obj = dir.join(format!("{name}.o"));
    let img = dir.join(format!("{name}.img"));
    let st = Command::new("as").arg("--defsym").arg(format!("ABI={abi}")).arg("-o").arg(&obj).arg(src.join("guest.s")).status().expect("run `as` (binutils)");
    assert!(st.success());
    let st = Command::new("ld")
        .args(["--build-id=none", "-static", "-nostdlib", "-T"])
        .arg(&ld_script)
        .arg("-o")
        .arg(&img)
        .arg(&obj)
        .output()
        .expect("run `ld` (binutils)");
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
    img
}

#[derive(Debug)]
struct Outcome {
    status: i32,
    stdout: String,
    stderr: String,
}

/// Runs `img` with `argc` arguments; console output goes to files.
fn run_guest(name: &str, img: &Path, argc: usize) -> Result<Outcome, SptError> {
    let dir = tmp();
    let out_path = dir.join(format!("{name}.stdout"));
    let err_path = dir.join(format!("{name}.stderr"));
    let mut cfg = RunConfig::new(img, MEM);
    cfg.argv = (0..argc).map(|i| OsString::from(if i == 0 { "guest".to_string() } else { format!("arg{i}") })).collect();
    cfg.env = vec![OsString::from("HOME=/")];
    cfg.stdout = Some(OwnedFd::from(std::fs::File::create(&out_path).unwrap()));
    cfg.stderr = Some(OwnedFd::from(std::fs::File::create(&err_path).unwrap()));
    let status = run(&cfg)?;
    drop(cfg);
    Ok(Outcome { status, stdout: std::fs::read_to_string(&out_path).unwrap(), stderr: std::fs::read_to_string(&err_path).unwrap() })
}

fn guest(name: &str, argc: usize) -> Outcome {
    let img = build(name, 5, shoal_abi::ABI_VERSION);
    run_guest(name, &img, argc).unwrap()
}

#[test]
fn hello_and_halt_status() {
    let o = guest("hello", 1);
    assert_eq!(o.stderr, "");
    assert_eq!(o.stdout, "hello\nguest\n");
    assert_eq!(o.status, 7);
}

#[test]
fn raw_syscall_is_killed() {
    let o = guest("syscall", 2);
    assert_eq!(o.status, EXIT_SIGSYS);
    assert_eq!(o.stderr, "shoal: the guest made a system call that the spt sandbox forbids and was killed (system call 39, getpid)\n");
}

#[test]
fn wild_console_buffer_is_efault() {
    assert_eq!(guest("wildbuf", 3).status, (-libc::EFAULT) & 0xff);
    assert_eq!(guest("lenoverflow", 10).status, (-libc::EFAULT) & 0xff);
}

#[test]
fn bad_stream_and_device_are_einval() {
    assert_eq!(guest("badstream", 4).status, (-libc::EINVAL) & 0xff);
    assert_eq!(guest("polldev", 11).status, (-libc::EINVAL) & 0xff);
}

#[test]
fn out_of_range_hypercall_argument_stops_the_guest() {
    let o = guest("badarg", 5);
    assert_eq!(o.status, EXIT_STOPPED);
    assert!(o.stderr.starts_with("shoal: the guest made an invalid hypercall: halt (2)"), "{}", o.stderr);
    let o = guest("argincode", 9);
    assert_eq!(o.status, EXIT_STOPPED);
    assert!(o.stderr.contains("outside writable guest memory"), "{}", o.stderr);
    let o = guest("unknown", 8);
    assert_eq!(o.status, EXIT_STOPPED);
    assert!(o.stderr.contains("number 99 does not exist"), "{}", o.stderr);
    // Found by the dispatch fuzz target: a Protect that makes its
    // own argument structure read-only made the tender fault writing the
    // result (the instance died of SIGSEGV in the tender).
    let o = guest("protectownargs", 17);
    assert_eq!(o.status, EXIT_STOPPED, "{}", o.stderr);
    assert!(
        o.stderr.starts_with("shoal: the guest made an invalid hypercall: protect (8) would take write access from its own argument structure at 0x"),
        "{}",
        o.stderr
    );
}

/// `Net` and `NetPoll` are answered without switching to the tender's FS
/// base (`hypercall::fast`): the guest's FS base and callee-saved
/// registers survive them, their results come back, and a bad argument or
/// a wait for nothing still stops the guest with the full path's message.
#[test]
fn net_hypercalls_without_the_fs_switch() {
    assert_eq!(guest("netfast", 14).status, (-libc::EINVAL) & 0xff);
    let o = guest("netbadarg", 15);
    assert_eq!(o.status, EXIT_STOPPED);
    assert!(o.stderr.starts_with("shoal: the guest made an invalid hypercall: net (5)"), "{}", o.stderr);
    let o = guest("netpollforever", 16);
    assert_eq!(o.status, EXIT_STOPPED);
    assert_eq!(o.stderr, "shoal: the guest blocked forever with nothing to wake it\n");
}

#[test]
fn crash_is_reported() {
    let o = guest("segv", 6);
    assert_eq!(o.status, 128 + libc::SIGSEGV);
    assert!(o.stderr.starts_with("shoal: the guest crashed: SIGSEGV (invalid memory access at 0x8, rip 0x10"), "{}", o.stderr);
    let o = guest("writecode", 13);
    assert_eq!(o.status, 128 + libc::SIGSEGV);
    assert!(o.stderr.contains("at 0x100000"), "{}", o.stderr);
}

#[test]
fn poll_sleeps_and_blocking_forever_is_reported() {
    let t = std::time::Instant::now();
    let o = guest("poll", 7);
    assert!(t.elapsed() >= std::time::Duration::from_millis(1));
    assert_eq!(o.status, EXIT_STOPPED);
    assert_eq!(o.stderr, "shoal: the guest blocked forever with nothing to wake it\n");
}

#[test]
fn fault_hypercall_is_reported() {
    let o = guest("fault", 12);
    assert_eq!(o.status, EXIT_STOPPED);
    assert_eq!(o.stderr, "shoal: guest fault: vector 14 (#PF page fault) at rip 0x101234, rsp 0x7000, error code 0x2, address 0xbad\n");
}

#[test]
fn wrong_abi_version_is_refused_before_running() {
    let img = build("abi2", 5, shoal_abi::ABI_VERSION + 1);
    let e = run_guest("abi2", &img, 1).expect_err("refused").to_string();
    assert!(e.contains(&format!("was built for shoal ABI version {}, this tender speaks {}", shoal_abi::ABI_VERSION + 1, shoal_abi::ABI_VERSION)), "{e}");
}

#[test]
fn writable_code_is_refused() {
    let img = build("wx", 7, shoal_abi::ABI_VERSION);
    let e = run_guest("wx", &img, 1).expect_err("refused").to_string();
    assert!(e.contains("W+X"), "{e}");
}

#[test]
fn too_little_memory_is_refused() {
    let img = build("small", 5, shoal_abi::ABI_VERSION);
    let mut cfg = RunConfig::new(&img, 1 << 20);
    cfg.stdout = None;
    let e = run(&cfg).expect_err("refused").to_string();
    assert!(e.starts_with("--mem 1M is too small for image"), "{e}");
}

#[test]
fn archive_is_mapped() {
    let img = build("fs", 5, shoal_abi::ABI_VERSION);
    let dir = tmp().join("fsdir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("motd"), "hi").unwrap();
    let mut cfg = RunConfig::new(&img, MEM);
    cfg.fs = Some(shoal_spt::FsSource::Dir(dir));
    cfg.stdout = Some(OwnedFd::from(std::fs::File::create(tmp().join("fs.stdout")).unwrap()));
    assert_eq!(run(&cfg).unwrap(), 7);
    cfg.fs = Some(shoal_spt::FsSource::Packed(b"not an archive".to_vec()));
    assert!(run(&cfg).is_err());
}
