//! CPython's own test suite (Debian's `libpython3.11-testsuite`, run with
//! Debian's `/usr/bin/python3.11`) on shoal beside native: the modules in
//! [`MODULES`] run in one interpreter per tender through
//! `apps/pysuite/run.py`, which prints every test that did not pass; each
//! test's outcome on spt and hvt must equal its native outcome, except
//! the differences [`KNOWN`] lists with their reasons (each of which must
//! still occur, so the list stays true). And `SCM_RIGHTS` between
//! `AF_UNIX` sockets inside the instance, from C and from Python, against
//! native output.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::process::Command;

const PYTHON: &str = "/usr/bin/python3.11";

/// The host's system directories, mounted read-only (as in dynexec.rs).
const SYSTEM: [&str; 6] = ["--mount", "/usr:/usr:ro", "--mount", "/lib:/lib:ro", "--mount", "/lib64:/lib64:ro"];

/// Modules that pass natively without network and run in seconds; the
/// whole list takes about 5 s of CPU per run (on spt; hvt runs
/// [`HVT_MODULES`]). (test_time is left out:
/// as root natively it sets the host's clock an hour back and forth.)
const MODULES: &[&str] = &[
    "test_string",
    "test_list",
    "test_dict",
    "test_operator",
    "test_bisect",
    "test_textwrap",
    "test_fnmatch",
    "test_shlex",
    "test_copy",
    "test_sort",
    "test_int",
    "test_float",
    "test_complex",
    "test_fractions",
    "test_contextlib",
    "test_dataclasses",
    "test_typing",
    "test_collections",
    "test_functools",
    "test_binascii",
    "test_ipaddress",
    "test_urlparse",
    "test_grammar",
    "test_types",
    "test_json",
    "test_re",
    "test_struct",
    "test_base64",
    "test_tempfile",
    "test_glob",
    "test_epoll",
    "test_posixpath",
    "test_shutil",
    "test_mmap",
];

/// What hvt runs (the suite's time budget): the modules that use the
/// file system, descriptors and epoll most, and every module with a
/// listed difference; spt runs all of [`MODULES`].
const HVT_MODULES: &[&str] = &[
    "test_textwrap",
    "test_fnmatch",
    "test_json",
    "test_re",
    "test_struct",
    "test_base64",
    "test_tempfile",
    "test_glob",
    "test_epoll",
    "test_posixpath",
    "test_shutil",
    "test_mmap",
];

/// Why a test's outcome differs on shoal (both tenders).
const FORK: &str = "starts a child process (subprocess, os.fork, os.spawn*): fork and execve are ENOSYS in an instance (DESIGN §9)";

/// The tests whose outcome on shoal differs from native, by id prefix,
/// with the outcome on shoal and why.
const KNOWN: &[(&str, &str, &str)] = &[
    ("test.test_json.test_tool.TestTool.", "error", FORK),
    ("test.test_re.ReTests.test_regression_gh94675", "error", FORK),
    ("test.test_struct.StructTest.test_struct_cleans_up_at_runtime_shutdown", "error", FORK),
    ("test.test_base64.TestMain.", "error", FORK),
    ("test.test_tempfile.TestMkstempInner.test_noinherit", "error", FORK),
    ("test.test_tempfile.TestRandomNameSequence.test_process_awareness", "error", FORK),
    ("test.test_tempfile.TestTemporaryDirectory.test_del_on_shutdown", "error", FORK),
    ("test.test_tempfile.TestTemporaryDirectory.test_exit_on_shutdown", "error", FORK),
    ("test.test_posixpath.PosixCommonTest.test_import", "error", FORK),
    ("test.test_shutil.TestArchives.test_", "error", FORK),
    // The instance's ramfs keeps no extended attributes: listxattr gives
    // none, setxattr EOPNOTSUPP, so these skip where natively they run.
    ("test.test_shutil.TestCopy.test_copy2_xattr", "skip", "no extended attributes in the instance's file system (EOPNOTSUPP)"),
    ("test.test_shutil.TestCopy.test_copyxattr", "skip", "no extended attributes in the instance's file system (EOPNOTSUPP)"),
    // Shared mappings of huge sparse files: 2 and 4 GiB are more than the
    // instance's address space (its --mem); 256 MiB is more than the
    // 128 MiB of file pages shoal shows in shared mappings at once
    // (mm::file::MAX_SHOWN_PAGES; the host's vm.max_map_count on spt).
    ("test.test_mmap.LargeMmapTests.test_around_2GB", "error", "maps 2 GiB shared: ENOMEM (more than the instance's memory)"),
    ("test.test_mmap.LargeMmapTests.test_around_4GB", "error", "maps 4 GiB shared: ENOMEM (more than the instance's memory)"),
    ("test.test_mmap.LargeMmapTests.test_large_offset", "error", "maps 256 MiB shared: ENOMEM (over the 128 MiB of shown file pages)"),
];

/// Each test's outcome (`skip`, `fail`, `error`, `xfail`, `xpass`; tests
/// that passed are absent) and each module's summary line, for the
/// modules in `only`.
fn outcomes(out: &str, only: &[&str]) -> (BTreeMap<String, String>, Vec<String>) {
    let mut tests = BTreeMap::new();
    let mut summary = Vec::new();
    for line in out.lines() {
        let mut w = line.splitn(3, ' ');
        match (w.next(), w.next(), w.next()) {
            (Some(kind @ ("skip" | "fail" | "error" | "xfail" | "xpass")), Some(module), Some(id)) if only.contains(&module) => {
                tests.insert(id.to_string(), kind.to_string());
            }
            (Some("skip" | "fail" | "error" | "xfail" | "xpass"), Some(_), Some(_)) => {}
            (Some(module), _, _) if only.contains(&module) => summary.push(line.to_string()),
            _ => {}
        }
    }
    (tests, summary)
}

/// The module and `ran=` of each summary line, sorted.
fn ran(lines: &[String]) -> Vec<String> {
    let mut v: Vec<String> =
        lines.iter().map(|l| l.split(' ').filter(|w| w.starts_with("test_") || w.starts_with("ran=")).collect::<Vec<_>>().join(" ")).collect();
    v.sort();
    v
}

#[test]
fn cpython_test_modules_match_native() {
    if !shoal_testkit::need(&["root", "python3.11", "python3.11-tests"]) {
        return;
    }
    let driver = home().join("apps/pysuite");
    let env = [("PATH", "/usr/bin:/bin"), ("LANG", "C.UTF-8")];
    let n = output(Command::new(PYTHON).arg(driver.join("run.py")).args(MODULES).env_clear().envs(env));
    assert!(n.status.success(), "native run: {}", stderr(&n));
    let native_out = stdout(&n);
    let mount = format!("{}:/pysuite:ro", driver.display());
    for t in tenders() {
        let modules = if t == "hvt" { HVT_MODULES } else { MODULES };
        let (native, nsum) = outcomes(&native_out, modules);
        assert_eq!(nsum.len(), modules.len(), "native summaries: {nsum:?}");
        let mut cmd = shoal_run(t);
        cmd.args(SYSTEM).args(["--mount", &mount, "--mem", "512M"]);
        for (k, v) in env {
            cmd.args(["-e", &format!("{k}={v}")]);
        }
        let s = output(cmd.args([PYTHON, "--", "/pysuite/run.py"]).args(modules));
        assert_eq!(s.status.code(), Some(0), "{t}: stderr: {}", stderr(&s));
        let (shoal, ssum) = outcomes(&stdout(&s), modules);
        assert_eq!(ran(&ssum), ran(&nsum), "{t}: tests run per module");
        let mut used = vec![false; KNOWN.len()];
        let mut unexplained = Vec::new();
        let ids: std::collections::BTreeSet<&String> = native.keys().chain(shoal.keys()).collect();
        for id in ids {
            let (nk, sk) = (native.get(id).map_or("ok", |k| k), shoal.get(id).map_or("ok", |k| k));
            if nk == sk {
                continue;
            }
            match KNOWN.iter().position(|(p, k, _)| id.starts_with(p) && *k == sk && nk == "ok") {
                Some(i) => used[i] = true,
                None => unexplained.push(format!("{id}: native {nk}, {t} {sk}")),
            }
        }
        assert!(unexplained.is_empty(), "{t}: unexplained differences:\n{}\nstderr: {}", unexplained.join("\n"), stderr(&s));
        let stale: Vec<_> = KNOWN.iter().zip(&used).filter(|(_, u)| !**u).map(|(k, _)| k.0).collect();
        assert!(stale.is_empty(), "{t}: listed differences that did not occur: {stale:?}");
        // The counts table of the README, one line per module.
        for (a, b) in nsum.iter().zip(&ssum) {
            eprintln!("pysuite {t}: native {a} | shoal {b}");
        }
    }
}

/// `AF_UNIX` descriptor passing inside the instance from C
/// (apps/exec/scmrights.c: datagram, stream and truncated control
/// buffers, `MSG_PEEK`, descriptors dropped with their socket), as a
/// shoal image and natively.
#[test]
fn scm_rights_from_c_matches_native() {
    let dir = scratch();
    let src = home().join("apps/exec/scmrights.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &[]);
    let n = output(&mut Command::new(&native));
    assert!(n.status.success(), "native: {}", stderr(&n));
    assert!(stdout(&n).contains("dropped: eof 0"), "native: {}", stdout(&n));
    for t in tenders() {
        let s = output(shoal_run(t).arg(&image));
        assert_eq!(stdout(&s), stdout(&n), "{t}: stderr: {}", stderr(&s));
        assert_eq!((s.status.code(), stderr(&s)), (Some(0), String::new()), "{t}");
    }
}

/// Python's `socket.send_fds`/`recv_fds` (which received no descriptor
/// before) and a short control buffer (`MSG_CTRUNC`), on the host's
/// python3.11, as natively.
#[test]
fn python_send_fds_matches_native() {
    if !shoal_testkit::need(&["root", "python3.11"]) {
        return;
    }
    let code = "import socket, os\n\
        a, b = socket.socketpair()\n\
        r, w = os.pipe()\n\
        socket.send_fds(a, [b'pipe'], [r, w])\n\
        msg, fds, flags, _ = socket.recv_fds(b, 16, 4)\n\
        print(msg, len(fds), flags)\n\
        os.write(fds[1], b'through the passed end')\n\
        print(os.read(r, 64))\n\
        socket.send_fds(a, [b'two'], [r, w])\n\
        msg, fds, flags, _ = socket.recv_fds(b, 16, 1)\n\
        print(msg, len(fds), flags & socket.MSG_CTRUNC != 0)\n\
        print(os.fstat(fds[0]).st_ino == os.fstat(r).st_ino)\n\
        raise SystemExit(4)";
    let n = output(Command::new(PYTHON).args(["-c", code]).env_clear());
    assert_eq!(n.status.code(), Some(4), "native: {}", stderr(&n));
    assert_eq!(stdout(&n), "b'pipe' 2 0\nb'through the passed end'\nb'two' 1 True\nTrue\n");
    for t in tenders() {
        let s = output(shoal_run(t).args(SYSTEM).args([PYTHON, "--", "-c", code]));
        assert_eq!(stdout(&s), stdout(&n), "{t}: stderr: {}", stderr(&s));
        assert_eq!((s.status.code(), stderr(&s)), (Some(4), String::new()), "{t}");
    }
}

/// memfd_create, getpriority/setpriority/nice, sched_get_priority_*,
/// times, F_GETPIPE_SZ/F_SETPIPE_SZ and the identity calls from Python
/// (apps/pysuite/calls.py), as natively, but sealing (not supported:
/// EINVAL).
#[test]
fn python_system_calls_match_native() {
    if !shoal_testkit::need(&["root", "python3.11"]) {
        return;
    }
    let dir = home().join("apps/pysuite");
    let n = output(Command::new(PYTHON).arg(dir.join("calls.py")).env_clear());
    assert!(n.status.success(), "native: {}", stderr(&n));
    let want = stdout(&n).replace("memfd sealing 4\n", "memfd sealing error EINVAL\n");
    assert!(want.contains("memfd sealing error EINVAL"), "native: {}", stdout(&n));
    let mount = format!("{}:/pysuite:ro", dir.display());
    for t in tenders() {
        let s = output(shoal_run(t).args(SYSTEM).args(["--mount", &mount, PYTHON, "--", "/pysuite/calls.py"]));
        assert_eq!(stdout(&s), want, "{t}: stderr: {}", stderr(&s));
        assert_eq!((s.status.code(), stderr(&s)), (Some(0), String::new()), "{t}");
    }
}
