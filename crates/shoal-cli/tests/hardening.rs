//! Issue "Harden the tenders", items 1, 2 and 4, as an attacker would try
//! them: what an spt instance process holds of the host (environment,
//! descriptors, host paths, privileges, namespaces), a stopped and
//! continued sleeper, and a symbolic link planted where shoal caches the
//! TSC calibration.

mod common;
use common::*;
use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A guest that sleeps `argv[1]` seconds and exits with 7.
fn snooze(dir: &Path) -> PathBuf {
    let src = dir.join("snooze.c");
    std::fs::write(&src, "#include <stdlib.h>\n#include <unistd.h>\nint main(int c, char **v) { sleep(c > 1 ? atoi(v[1]) : 5); return 7; }\n").unwrap();
    build_image(&src, dir, &[])
}

fn tender() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shoal-tender"))
}

/// The pid of the process that runs `shoal-spt` among `pid` and its
/// descendants, waiting up to 5 s for it to be set up (its seccomp filter
/// installed, so the guest runs).
fn instance_pid(pid: u32) -> u32 {
    let t0 = Instant::now();
    loop {
        let mut stack = vec![pid];
        while let Some(p) = stack.pop() {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            let status = std::fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
            if comm.trim() == "shoal-spt" && status.lines().any(|l| l.starts_with("Seccomp:") && l.ends_with('2')) {
                return p;
            }
            if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
                for t in tasks.flatten() {
                    let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
                    stack.extend(kids.split_whitespace().filter_map(|k| k.parse::<u32>().ok()));
                }
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "no running shoal-spt instance under pid {pid}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every readable mapping of `pid`, read through /proc/PID/mem, searched
/// for each needle. Returns the needles found, with the mapping.
fn search_memory(pid: u32, needles: &[&str]) -> Vec<String> {
    let maps = std::fs::File::open(format!("/proc/{pid}/maps")).unwrap();
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut found = Vec::new();
    let mut scanned = 0u64;
    for line in std::io::BufReader::new(maps).lines() {
        let line = line.unwrap();
        let mut f = line.split_whitespace();
        let (range, perms) = (f.next().unwrap(), f.next().unwrap());
        if !perms.starts_with('r') || line.ends_with("[vsyscall]") || line.ends_with("[vvar]") {
            continue;
        }
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (u64::from_str_radix(a, 16).unwrap(), u64::from_str_radix(b, 16).unwrap());
        // Guest memory is large and mostly untouched: read it in chunks,
        // skipping what cannot be read.
        let mut at = a;
        let mut buf = vec![0u8; 1 << 20];
        while at < b {
            let n = ((b - at) as usize).min(buf.len());
            if mem.seek(SeekFrom::Start(at)).is_ok() {
                if let Ok(k) = mem.read(&mut buf[..n]) {
                    scanned += k as u64;
                    for needle in needles {
                        if buf[..k].windows(needle.len()).any(|w| w == needle.as_bytes()) {
                            found.push(format!("{needle} in {line}"));
                        }
                    }
                }
            }
            at += n as u64;
        }
    }
    assert!(scanned > 0, "could not read any memory of pid {pid}");
    found
}

fn status_field(pid: u32, key: &str) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines().find_map(|l| l.strip_prefix(key).map(|v| v.trim().to_string())).unwrap_or_default()
}

/// Starts `cmd` with a secret in its environment, an inherited descriptor
/// (fd 9 through bash) and a secret in the --fs path; checks the instance
/// process holds none of it; kills it.
fn check_instance_holds_nothing_of_the_host(single_process: bool) {
    let dir = scratch();
    let img = snooze(dir.path());
    let secret = format!("shoal-secret-token-{}-{}", std::process::id(), single_process as u8);
    let fs_secret = format!("fsdir-secret-{}", std::process::id());
    let fs = dir.path().join(&fs_secret);
    std::fs::create_dir(&fs).unwrap();
    std::fs::write(fs.join("motd"), "hi").unwrap();
    let mut args = vec![env!("CARGO_BIN_EXE_shoal-tender").to_string()];
    if single_process {
        args.push("--single-process".into());
    }
    // What the guest is given is in its memory, of course: the scan must
    // find it (a check that the scan reads what it should).
    let visible = format!("guest-visible-marker-{}", std::process::id());
    args.extend([
        "-e".to_string(),
        format!("MARKER={visible}"),
        "--fs".to_string(),
        fs.display().to_string(),
        img.display().to_string(),
        "--".into(),
        // Long enough to outlive the memory scan on a loaded host (the
        // test kills it when done).
        "600".into(),
    ]);
    let script = format!("exec 9</etc/hostname; exec {}", args.iter().map(|a| format!("'{a}'")).collect::<Vec<_>>().join(" "));
    let mut child: Child =
        Command::new("bash").args(["-c", &script]).env("SHOAL_TEST_SECRET", &secret).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = instance_pid(child.id());
    if single_process {
        assert_eq!(pid, child.id(), "in place, the instance is the started process");
    }
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    let fd3 = std::fs::read_link(format!("/proc/{pid}/fd/3")).map(|p| p.display().to_string()).unwrap_or_default();
    let found = search_memory(pid, &[&secret, &fs_secret, "SHOAL_TEST_SECRET", &visible]);
    let root_view = shoal_testkit::probe("root").is_ok().then(|| {
        let ns = |p: String, n: &str| std::fs::read_link(format!("/proc/{p}/ns/{n}")).unwrap();
        let differs: Vec<(&str, bool)> =
            ["mnt", "pid", "ipc", "net", "user"].into_iter().map(|n| (n, ns(pid.to_string(), n) != ns("self".into(), n))).collect();
        let root_entries = std::fs::read_dir(format!("/proc/{pid}/root")).unwrap().count();
        (differs, root_entries, status_field(pid, "Uid:"), status_field(pid, "Gid:"), status_field(pid, "CapEff:"), status_field(pid, "CapBnd:"))
    });
    let _ = child.kill();
    let _ = child.wait();

    // One fixed variable (glibc's malloc tunables, shoal_spt::front), and
    // nothing of the caller's; or nothing at all once the instance has
    // given its initial stack back (shoal_spt's child module: environment
    // and argv lie there, and /proc reads them from there), which it does
    // just before entering the guest, so either can be seen here.
    assert!(
        environ.is_empty() || environ == b"GLIBC_TUNABLES=glibc.malloc.tcache_count=0\0",
        "the instance process has more environment than its malloc tunable: {:?}",
        String::from_utf8_lossy(&environ)
    );
    assert!(cmdline.is_empty() || cmdline == b"shoal-spt\0", "the instance's argv holds more than its name: {:?}", String::from_utf8_lossy(&cmdline));
    let mut fds = fds;
    fds.sort();
    // Besides the console: the alias memory file (guest pages that shared
    // file mappings show; crate shoal-spt's protect module), created by
    // the instance itself.
    assert_eq!(fds, ["0", "1", "2", "3"], "descriptors besides the console and the alias file are open in the instance");
    assert_eq!(fd3, "/memfd:shoal-alias (deleted)", "fd 3 is not the alias file");
    let (control, found): (Vec<String>, Vec<String>) = found.into_iter().partition(|f| f.starts_with(&visible));
    assert!(!control.is_empty(), "the memory scan did not even find the guest's own environment");
    assert!(found.is_empty(), "host secrets readable in the instance's memory: {found:?}");
    match root_view {
        None => shoal_testkit::skip("root", "the drop to nobody, the namespaces and the empty root (root-only confinement) are not checked"),
        Some((differs, root_entries, uid, gid, cap_eff, cap_bnd)) => {
            for (n, d) in differs {
                // In place, only children could enter a new PID namespace.
                if n == "pid" && single_process {
                    continue;
                }
                assert!(d, "the instance shares the {n} namespace with the host");
            }
            assert_eq!(root_entries, 0, "the instance's root directory is not empty");
            assert_eq!(uid.split_whitespace().collect::<Vec<_>>(), ["65534"; 4]);
            assert_eq!(gid.split_whitespace().collect::<Vec<_>>(), ["65534"; 4]);
            assert_eq!(cap_eff, "0000000000000000");
            assert_eq!(cap_bnd, "0000000000000000");
        }
    }
}

/// Item 2: the supervised spt instance holds nothing of the host.
#[test]
fn spt_instance_holds_no_host_environment_descriptors_or_paths() {
    check_instance_holds_nothing_of_the_host(false);
}

/// Item 2, for an instance that runs in place (`--single-process`).
#[test]
fn spt_single_process_instance_holds_no_host_environment_descriptors_or_paths() {
    check_instance_holds_nothing_of_the_host(true);
}

/// Item 4: a sleeping instance that is stopped and continued goes on and
/// exits normally: spt supervised and in place, and hvt.
#[test]
fn stopped_and_continued_sleeper_survives() {
    let dir = scratch();
    let img = snooze(dir.path());
    for single in [false, true] {
        let mut cmd = tender();
        if single {
            cmd.arg("--single-process");
        }
        let child = cmd.arg(&img).args(["--", "2"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let pid = instance_pid(child.id());
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: kill on a pid we started and have not reaped.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
        let o = child.wait_with_output().unwrap();
        assert_eq!(stderr(&o), "", "single-process {single}");
        assert_eq!(o.status.code(), Some(7), "single-process {single}: a stopped and continued sleeper must finish");
    }
    // hvt: the VMM process is stopped and continued while its guest sleeps.
    if tenders().contains(&"hvt") {
        let child = tender().args(["--tender", "hvt"]).arg(&img).args(["--", "2"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(500));
        // SAFETY: kill on a pid we started and have not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: as above.
        unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
        let o = child.wait_with_output().unwrap();
        assert_eq!((o.status.code(), stderr(&o).as_str()), (Some(7), ""), "hvt: a stopped and continued sleeper must finish");
    }
}

/// Item 1: a symbolic link planted where shoal keeps its runtime
/// directory, or where the TSC cache file goes, is never written through.
#[test]
fn tsc_cache_symlink_planted_is_not_followed() {
    let dir = scratch();
    let hello = build_image(&app("hello.c"), dir.path(), &[]);
    let victim_dir = dir.path().join("victim-dir");
    std::fs::create_dir(&victim_dir).unwrap();
    let victim = dir.path().join("victim-file");
    std::fs::write(&victim, "precious").unwrap();
    // The runtime directory itself is a link to another directory.
    let link = dir.path().join("rt-link");
    std::os::unix::fs::symlink(&victim_dir, &link).unwrap();
    let o = output(shoal().env("SHOAL_RUNTIME_DIR", &link).arg("run").arg(&hello));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&victim_dir).unwrap().count(), 0, "shoal wrote into the directory a planted link points at");
    // The runtime directory is ours, but its cache file is a link.
    let rt = dir.path().join("rt");
    std::fs::create_dir(&rt).unwrap();
    std::fs::set_permissions(&rt, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(&victim, rt.join("tsc")).unwrap();
    let o = output(shoal().env("SHOAL_RUNTIME_DIR", &rt).arg("run").arg(&hello));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious", "shoal wrote through a planted link");
    let meta = std::fs::symlink_metadata(rt.join("tsc")).unwrap();
    assert!(meta.file_type().is_file(), "the cache should have replaced the link with a file of its own");
    // A runtime directory others can read is refused too (nothing cached).
    let open = dir.path().join("rt-open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let o = output(shoal().env("SHOAL_RUNTIME_DIR", &open).arg("run").arg(&hello));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&open).unwrap().count(), 0);
}

/// The instance dies with the front end that waits for it, also after it
/// dropped to nobody (a change of credentials clears the parent-death
/// signal, which the instance arms again): no orphaned guest runs on.
#[test]
fn spt_instance_dies_with_its_front_end() {
    let dir = scratch();
    let img = snooze(dir.path());
    let mut child = tender().arg(&img).args(["--", "30"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let pid = instance_pid(child.id());
    let _ = child.kill();
    let _ = child.wait();
    let t0 = Instant::now();
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(')').next().and_then(|r| r.split_whitespace().next().map(String::from)));
        match state.as_deref() {
            None | Some("Z") | Some("X") => break,
            Some(_) if t0.elapsed() < Duration::from_secs(5) => std::thread::sleep(Duration::from_millis(20)),
            Some(s) => {
                // SAFETY: kill on the orphan this test made, to clean up.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                panic!("the instance (state {s}) outlived its front end by 5 s");
            }
        }
    }
}

/// The real uid and gid of `pid` (from /proc/PID/status).
fn ids_of(pid: u32) -> (u32, u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let id = |key: &str| -> u32 {
        let line = status.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("no {key} in /proc/{pid}/status"));
        line.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap()
    };
    (id("Uid:"), id("Gid:"))
}

/// `--uid-range` (finding 10 of the second security review: every
/// root-started instance shared `nobody`): two instances running at once
/// get two different uids of the range (and the same gids), read from
/// their processes; with the range full a third is one `shoal:` line and
/// status 125; the uid of an instance killed with SIGKILL is free again
/// and taken by the next one. Root only (a user's instance runs as that
/// user).
#[test]
fn instances_started_with_a_uid_range_run_as_uids_of_their_own() {
    if !shoal_testkit::need(&["root"]) {
        return;
    }
    let dir = scratch();
    let image = snooze(dir.path());
    // Two uids no other run of this test takes at the same time.
    let start = 3_000_000 + (std::process::id() % 100_000) * 2;
    let range = format!("{start}:2");
    let start_one = || -> (Child, u32) {
        let child = shoal().args(["run", "--uid-range", &range]).arg(&image).args(["--", "30"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let pid = instance_pid(child.id());
        (child, pid)
    };
    let (mut a, a_pid) = start_one();
    let (mut b, b_pid) = start_one();
    let (ua, ub) = (ids_of(a_pid), ids_of(b_pid));
    assert_eq!((ua.0, ub.0), (ua.1, ub.1), "each instance's gid is its uid");
    let mut got = [ua.0, ub.0];
    got.sort_unstable();
    assert_eq!(got, [start, start + 1], "the two instances' uids");
    let o = output(shoal().args(["run", "--uid-range", &range]).arg(&image).args(["--", "0"]));
    assert_clean_error(&o, &format!("--uid-range {range}: every uid of the range is in use by a running instance (2 of 2)"));
    assert_eq!(o.status.code(), Some(125));
    // SIGKILL to instance a (a crash): its waiting parent reports it and
    // ends, which frees its uid.
    // SAFETY: kill on a pid this test started (through shoal).
    unsafe { libc::kill(a_pid as i32, libc::SIGKILL) };
    let st = a.wait().unwrap();
    assert_eq!(st.code(), Some(128 + libc::SIGKILL), "the killed instance's status");
    let (mut c, c_pid) = start_one();
    assert_eq!(ids_of(c_pid).0, ua.0, "the freed uid is taken again");
    for p in [&mut b, &mut c] {
        let _ = p.kill();
        let _ = p.wait();
    }
}
