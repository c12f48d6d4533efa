//! `shoal run --mount HOSTDIR:GUESTDIR:ro`: a host
//! directory served live and read-only. A C program (`apps/tests/mount.c`)
//! reads, stats, lists and maps a tree of files under a mount and prints
//! the same as when run natively on the host directory; a hostile one
//! cannot leave the mount (`..`, symbolic links relative and absolute,
//! `/proc` magic links), write through it or map what it should not, and
//! the hypercall itself refuses hostile paths and buffers — exact errnos,
//! the tender never crashes; bad flags are one `shoal:` line and 125.
//! A writable mount (`:rw`) takes the guest's creates, writes, renames and
//! removals, with the modes it asks and the owner of `--user`, and
//! nothing beyond it.
//! Every test runs on each tender `common::tenders()` finds; spt mounts
//! need root (a visible skip otherwise).

mod common;
use common::*;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A host directory with regular files (empty, small, larger than a few
/// pages), nested directories, relative symbolic links that stay inside,
/// and a FIFO.
fn benign_tree(root: &Path) {
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    std::fs::write(root.join("hello.txt"), "hello mount\n").unwrap();
    std::fs::write(root.join("empty"), "").unwrap();
    let big: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(root.join("sub/big.bin"), big).unwrap();
    std::fs::write(root.join("sub/deeper/d.txt"), "deep\n").unwrap();
    symlink("hello.txt", root.join("link_in")).unwrap();
    symlink("../hello.txt", root.join("sub/link_up")).unwrap();
    symlink("deeper", root.join("sub/link_dir")).unwrap();
}

/// [`benign_tree`] plus the ways out a hostile guest would try.
fn hostile_tree(root: &Path) {
    benign_tree(root);
    symlink("../../../../../../etc/shadow", root.join("escape_rel")).unwrap();
    symlink("/etc/shadow", root.join("escape_abs")).unwrap();
    symlink("/etc", root.join("escape_dir")).unwrap();
    symlink("/proc/self/root/etc/shadow", root.join("magic_root")).unwrap();
    symlink("/proc/self/fd/0", root.join("magic_fd")).unwrap();
    let fifo = std::ffi::CString::new(root.join("fifo").to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
}

/// The tenders a mount can run on here: spt needs root.
fn mount_tenders() -> Vec<&'static str> {
    let mut t = tenders();
    if let Err(why) = shoal_testkit::probe("root") {
        shoal_testkit::skip("root", &format!("--mount on spt: {why}"));
        t.retain(|&x| x != "spt");
    }
    t
}

fn images(dir: &Path) -> (PathBuf, PathBuf) {
    let src = test_app("mount.c");
    (build_image(&src, dir, &[]), build_native(&src, dir, &[]))
}

/// What the tree mode prints, without the owner (spt's instance runs in a
/// user namespace of its own, where the host's owners read as the
/// overflow id; see docs/architecture.md "Read-only host directories").
fn without_uid(s: &str) -> String {
    s.lines().map(|l| l.split(" uid ").next().unwrap_or(l)).collect::<Vec<_>>().join("\n")
}

#[test]
fn reads_stats_lists_and_maps_like_a_native_run() {
    let dir = scratch();
    let host = dir.path().join("host");
    benign_tree(&host);
    let (image, native) = images(dir.path());
    let n = output(Command::new(&native).args(["tree"]).arg(&host));
    assert!(n.status.success(), "native: {}", stderr(&n));
    assert!(stdout(&n).contains("./sub/big.bin mode 100644"), "{}", stdout(&n));
    for t in mount_tenders() {
        let o = output(shoal_run(t).arg("--mount").arg(format!("{}:/srv/data:ro", host.display())).arg(&image).args(["--", "tree", "/srv/data"]));
        assert_eq!(o.status.code(), Some(0), "{t}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{t}");
        assert_eq!(without_uid(&stdout(&o)), without_uid(&stdout(&n)), "{t}");
    }
}

#[test]
fn two_mounts_side_by_side_at_nested_guest_directories() {
    let dir = scratch();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    benign_tree(&a);
    std::fs::create_dir_all(&b).unwrap();
    std::fs::write(b.join("only-in-b"), "b\n").unwrap();
    let (image, native) = images(dir.path());
    let n = output(Command::new(&native).args(["tree"]).arg(&b));
    for t in mount_tenders() {
        let o = output(
            shoal_run(t).arg("--mount").arg(format!("{}:/a:ro", a.display())).arg("--mount").arg(format!("{}:/deep/er/b:ro", b.display())).arg(&image).args([
                "--",
                "tree",
                "/deep/er/b",
            ]),
        );
        assert_eq!(o.status.code(), Some(0), "{t}: {}", stderr(&o));
        assert_eq!(without_uid(&stdout(&o)), without_uid(&stdout(&n)), "{t}");
    }
}

/// What `mount hostile` prints on both tenders: every way out ends in
/// the guest's own root (which has no /etc/shadow), every write is
/// refused as a read-only mount refuses it on Linux.
const HOSTILE: &str = "\
dotdot ENOENT
dotdot-sub ENOENT
link-rel ENOENT
link-abs ENOENT
link-abs-dir ENOENT
link-magic ENOENT
link-magic-fd OK
openat-dotdot ENOENT
procfd-dotdot ENOENT
host-file ENOENT
fifo EACCES
open-wronly EROFS
open-rdwr EROFS
open-trunc EROFS
open-append EROFS
create EROFS
create-excl-existing EEXIST
creat-through-link OK
open-dir-write EISDIR
unlink EROFS
unlink-missing EROFS
mkdir EROFS
mkdir-existing EEXIST
rmdir EROFS
rmdir-mountpoint EBUSY
rename EROFS
rename-out EXDEV
symlink EROFS
link EXDEV
chmod EROFS
truncate EROFS
utimes EROFS
access-w EROFS
access-r OK
write-ro-fd EBADF
ftruncate-ro-fd EINVAL
fchmod EROFS
mmap-shared-write EACCES
mmap-dir ENODEV
mmap-badfd EBADF
mmap-opath EBADF
mmap-private-write OK hello
";

/// Every file of `dir` with its contents, to show nothing changed.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                stack.push(p.clone());
                v.push((p, Vec::new()));
            } else if md.is_file() {
                v.push((p.clone(), std::fs::read(&p).unwrap()));
            } else {
                v.push((p.clone(), std::fs::read_link(&p).map(|l| l.into_os_string().into_encoded_bytes()).unwrap_or_default()));
            }
        }
    }
    v.sort();
    v
}

#[test]
fn a_hostile_guest_cannot_leave_the_mount_or_write_through_it() {
    let dir = scratch();
    let host = dir.path().join("host");
    hostile_tree(&host);
    let before = snapshot(&host);
    let (image, _) = images(dir.path());
    for t in mount_tenders() {
        let o = output(shoal_run(t).arg("--mount").arg(format!("{}:/m:ro", host.display())).arg(&image).args(["--", "hostile", "/m"]));
        assert_eq!(o.status.code(), Some(0), "{t}: {}", stderr(&o));
        assert_eq!(stdout(&o), HOSTILE, "{t}");
        assert_eq!(snapshot(&host), before, "{t}: the host directory changed");
    }
}

/// What `mount raw` prints on both tenders: the tender's own checks.
const RAW: &str = "\
raw-read-ok OK
raw-dotdot EXDEV
raw-inner-dotdot OK
raw-absolute EXDEV
raw-link-rel ELOOP
raw-link-abs ELOOP
raw-link-dir ELOOP
raw-link-magic ELOOP
raw-list-link ENOTDIR
raw-fifo EINVAL
raw-dir-read EISDIR
raw-buf-code EFAULT
raw-buf-outside EFAULT
raw-buf-low EFAULT
raw-buf-wrap OK
raw-list-tiny EINVAL
raw-path-outside EFAULT
raw-path-long ENAMETOOLONG
raw-path-nul EINVAL
raw-mount-99 EINVAL
raw-mount-huge EINVAL
raw-op-bad EINVAL
raw-mount-name-99 ENOENT
raw-map-ok OK 4096
raw-map-shows hello mount then 0
raw-unmap-ok OK
raw-unmap-zero 0 0
raw-map-big-tail OK 4096
raw-map-past-end OK 0
raw-map-code EFAULT
raw-map-low EFAULT
raw-map-outside EFAULT
raw-map-wrap EFAULT
raw-map-unaligned EINVAL
raw-map-odd-len EINVAL
raw-map-empty EINVAL
raw-map-odd-off EINVAL
raw-map-dotdot EXDEV
raw-map-link ELOOP
raw-map-dir EISDIR
raw-map-fifo EINVAL
raw-map-exec EINVAL
raw-unmap-code EFAULT
raw-unmap-exec EINVAL
raw-unmap-prot EINVAL
raw-unmap-back OK
";

/// spt's guest making the host calls itself (it shares the process): the
/// detached read-only clone and the empty root hold without
/// `RESOLVE_BENEATH`, and an `openat2` that is not beneath a mount's
/// descriptor is a forbidden system call.
const RAW_SPT: &str = "\
sys-openat2-dotdot ENOENT
sys-openat2-absolute ENOENT
sys-openat2-link-abs ENOENT
sys-openat2-create EROFS
sys-openat2-write EACCES
sys-mmap-mounted OK hello
";

#[test]
fn the_hypercall_refuses_hostile_paths_and_buffers() {
    let dir = scratch();
    let host = dir.path().join("host");
    hostile_tree(&host);
    let before = snapshot(&host);
    let (image, _) = images(dir.path());
    for t in mount_tenders() {
        let o = output(shoal_run(t).arg("--mount").arg(format!("{}:/m:ro", host.display())).arg(&image).args(["--", "raw", "/m", t]));
        if t == "spt" {
            assert_eq!(o.status.code(), Some(159), "{t}: {}", stderr(&o));
            assert_eq!(stdout(&o), format!("{RAW}{RAW_SPT}"), "{t}");
            // (The name is added where the system-call table knows it.)
            let e = stderr(&o);
            assert!(e.starts_with("shoal: the guest made a system call that the spt sandbox forbids and was killed (system call 437"), "{t}: {e}");
            assert_eq!(e.lines().count(), 1, "{t}: {e}");
        } else {
            assert_eq!(o.status.code(), Some(0), "{t}: {}", stderr(&o));
            assert_eq!(stdout(&o), RAW, "{t}");
        }
        assert_eq!(snapshot(&host), before, "{t}: the host directory changed");
    }
}

#[test]
fn without_the_mount_the_hypercall_is_enosys() {
    let dir = scratch();
    let (image, _) = images(dir.path());
    for t in tenders() {
        let o = output(shoal_run(t).arg(&image).args(["--", "raw", "/m", "none"]));
        assert_eq!(o.status.code(), Some(0), "{t}: {}", stderr(&o));
        assert!(stdout(&o).lines().all(|l| l.ends_with(" ENOSYS")), "{t}: {}", stdout(&o));
    }
}

#[test]
fn bad_mount_flags_are_one_line_and_125() {
    let dir = scratch();
    let (image, _) = images(dir.path());
    let host = dir.path().display().to_string();
    let file = image.display().to_string();
    let cases: [(String, &str); 9] = [
        (format!("{host}:/:rw"), "the root mount (GUESTDIR /) is read-only"),
        (format!("{file}:/:ro"), "the root mount (GUESTDIR /) must be a directory"),
        ("/dev/null:/x:ro".into(), "--mount /dev/null: no such directory or regular file"),
        ("/nonexistent-shoal-dir:/x:ro".into(), "--mount /nonexistent-shoal-dir: no such directory"),
        (format!("{host}:/x"), "expected HOSTDIR:GUESTDIR:ro"),
        (format!("{host}:/x:wr"), "expected HOSTDIR:GUESTDIR:ro or HOSTDIR:GUESTDIR:rw"),
        (format!("{host}:x:ro"), "expected HOSTDIR:GUESTDIR:ro"),
        (format!("{host}://x:ro"), "must be / or an absolute path of ordinary names"),
        (format!("{host}:/a/../b:ro"), "must be / or an absolute path of ordinary names"),
    ];
    for t in ["spt", "hvt"] {
        for (spec, needle) in &cases {
            let o = output(shoal_run(t).arg("--mount").arg(spec).arg(&image));
            assert_eq!(o.status.code(), Some(125), "{t} {spec}: {}", stderr(&o));
            assert_clean_error(&o, needle);
        }
        let o = output(shoal_run(t).arg("--mount").arg(format!("{host}:/x:ro")).arg("--mount").arg(format!("{host}:/x:ro")).arg(&image));
        assert_eq!(o.status.code(), Some(125), "{t}");
        assert_clean_error(&o, "two mounts at /x");
    }
    // shoal-tender takes the same option from the same table.
    let tender = PathBuf::from(env!("CARGO_BIN_EXE_shoal-tender"));
    let o = output(Command::new(tender).arg("--mount").arg("/nonexistent-shoal-dir:/x:ro").arg(&image));
    assert_eq!(o.status.code(), Some(125));
    assert_eq!(stderr(&o), "shoal-tender: --mount /nonexistent-shoal-dir: no such directory or regular file\n");
}

/// What `mount rw /w /r` prints on both tenders.
const RW: &str = "\
create OK
write OK
pwrite OK
fsync OK
ftruncate-grow OK
ftruncate-back OK
mode 644 size 9
append OK
create-excl-existing EEXIST
read-back hello RW|more|
mkdir OK
dir-mode 750
mkdir-existing EEXIST
rename OK
rename-gone ENOENT
truncate OK
chmod OK
chmod-mode 600 size 5
utimes OK
mtime 1000000000
access-w OK
unlink OK
unlink-missing ENOENT
unlink-dir EISDIR
rmdir-full ENOTEMPTY
rmdir-empty OK
rmdir-file ENOTDIR
rename-noreplace EEXIST
rename-out EXDEV
symlink EPERM
link EPERM
mkfifo EPERM
create-through-abs-link OK
create-over-link EEXIST
ro-create EROFS
ro-write EROFS
ro-unlink EROFS
raw-writable-0 OK
raw-writable-1 OK
raw-create-dotdot EXDEV
raw-create-abs EXDEV
raw-create-via-link ELOOP
raw-create-on-link ELOOP
raw-write-link ELOOP
raw-truncate-link ELOOP
raw-unlink-dotdot EINVAL
raw-unlink-top EINVAL
raw-unlink-via-link ENOTDIR
raw-mkdir-via-link ENOTDIR
raw-rename-out EXDEV
raw-rename-via-link ENOTDIR
raw-chmod-link EOPNOTSUPP
raw-write-ro EROFS
raw-create-ro EROFS
raw-write-buf-outside EFAULT
raw-op-bad EINVAL
";

/// spt's guest making the writing calls itself.
const RW_SPT: &str = "\
sys-mkdirat-via-link ENOENT
sys-unlinkat-ro EROFS
sys-mkdirat-abs EROFS
";

#[test]
fn a_writable_mount_takes_the_guests_changes_and_nothing_else() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = scratch();
    let (image, _) = images(dir.path());
    let root = shoal_testkit::probe("root").is_ok();
    for t in mount_tenders() {
        let base = dir.path().join(t);
        let (w, r) = (base.join("w"), base.join("r"));
        hostile_tree(&r);
        std::fs::create_dir_all(w.join("empty")).unwrap();
        std::fs::write(w.join("gone.txt"), "bye\n").unwrap();
        std::fs::write(w.join("keep.txt"), "keep\n").unwrap();
        symlink("/etc", w.join("escape_dir")).unwrap();
        symlink("/etc/shadow", w.join("escape_abs")).unwrap();
        if root {
            // The guest's user owns the volume, as a pod's emptyDir for
            // its runAsUser; spt's instance runs as that user.
            for e in [&w, &w.join("empty"), &w.join("gone.txt"), &w.join("keep.txt")] {
                std::os::unix::fs::chown(e, Some(1000), Some(100)).unwrap();
            }
        }
        let before_r = snapshot(&r);
        let etc_before = std::fs::metadata("/etc").unwrap().mtime_nsec();
        let mut c = shoal_run(t);
        if root {
            c.args(["--user", "1000:100"]);
        }
        c.arg("--mount").arg(format!("{}:/w:rw", w.display())).arg("--mount").arg(format!("{}:/r:ro", r.display()));
        let o = output(c.arg(&image).args(["--", "rw", "/w", "/r", t]));
        assert_eq!(o.status.code(), Some(0), "{t}: {}", stderr(&o));
        let want = if t == "spt" { format!("{RW}{RW_SPT}") } else { RW.to_string() };
        assert_eq!(stdout(&o), want, "{t}");
        // On the host: exactly the guest's changes, with its modes and owner.
        let moved = w.join("d/moved.txt");
        assert_eq!(std::fs::read(&moved).unwrap(), b"hello", "{t}");
        let md = std::fs::metadata(&moved).unwrap();
        assert_eq!((md.permissions().mode() & 0o7777, md.mtime()), (0o600, 1_000_000_000), "{t}");
        assert_eq!(std::fs::metadata(w.join("d")).unwrap().permissions().mode() & 0o7777, 0o750, "{t}");
        if root {
            for p in [&moved, &w.join("d")] {
                let m = std::fs::metadata(p).unwrap();
                assert_eq!((m.uid(), m.gid()), (1000, 100), "{t}: {}", p.display());
            }
        }
        let mut names: Vec<String> = std::fs::read_dir(&w).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, ["d", "escape_abs", "escape_dir", "keep.txt"], "{t}");
        assert_eq!(std::fs::read(w.join("keep.txt")).unwrap(), b"keep\n", "{t}");
        assert_eq!(snapshot(&r), before_r, "{t}: the read-only mount changed");
        assert!(!base.join("stolen").exists() && !base.join("planted").exists(), "{t}");
        assert!(!Path::new("/etc/planted").exists() && !Path::new("/etc/x").exists(), "{t}");
        assert_eq!(std::fs::metadata("/etc").unwrap().mtime_nsec(), etc_before, "{t}: /etc changed");
    }
}

/// Single-file mounts (`--mount HOSTFILE:GUESTFILE:ro|rw`, what a
/// container engine gives every container as `/etc/hosts`): the read-only
/// one read, stat'd and mapped, never written; the writable one written,
/// truncated, appended to, its mode and times set; both refuse what Linux
/// refuses at a mount point (`EBUSY`, `ENOTDIR` beneath a file, `EROFS`);
/// the tender asked directly (and on spt the host calls made by the guest
/// itself) reaches that one file and nothing else.
#[test]
fn single_file_mounts_serve_one_file_each() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = scratch();
    let (image, _) = images(dir.path());
    for t in mount_tenders() {
        let base = dir.path().join(t);
        std::fs::create_dir_all(&base).unwrap();
        let (ro, rw) = (base.join("hosts"), base.join("rw.txt"));
        std::fs::write(&ro, "127.0.0.1\tpo\n").unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&rw, "rw old content\n").unwrap();
        std::fs::set_permissions(&rw, std::fs::Permissions::from_mode(0o644)).unwrap();
        let root = shoal_testkit::probe("root").is_ok();
        if root {
            // The guest's user owns the writable file, as a pod's file
            // volume for its runAsUser (spt's instance runs as that user).
            std::os::unix::fs::chown(&rw, Some(1000), Some(100)).unwrap();
        }
        let mut c = shoal_run(t);
        if root {
            c.args(["--user", "1000:100"]);
        }
        let o = output(
            c.arg("--mount").arg(format!("{}:/etc/hosts:ro", ro.display())).arg("--mount").arg(format!("{}:/data/rw.txt:rw", rw.display())).arg(&image).args([
                "--",
                "files",
                "/etc/hosts",
                "/data/rw.txt",
                t,
            ]),
        );
        assert_eq!(o.status.code(), Some(0), "{t}: {}", stderr(&o));
        let want = if t == "spt" { format!("{FILES}{FILES_SPT}") } else { FILES.to_string() };
        assert_eq!(stdout(&o), want, "{t}");
        assert_eq!(std::fs::read(&ro).unwrap(), b"127.0.0.1\tpo\n", "{t}");
        assert_eq!(std::fs::metadata(&ro).unwrap().permissions().mode() & 0o7777, 0o644, "{t}");
        assert_eq!(std::fs::read(&rw).unwrap(), b"GUESTd conte+tail\n", "{t}");
        let m = std::fs::metadata(&rw).unwrap();
        assert_eq!((m.permissions().mode() & 0o7777, m.mtime()), (0o640, 1_000_000_000), "{t}");
        let mut names: Vec<String> = std::fs::read_dir(&base).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(names, ["hosts", "rw.txt"], "{t}: nothing else made beside the files");
    }
}

/// What `mount files /etc/hosts /data/rw.txt` prints on both tenders.
const FILES: &str = "\
ro-read OK 127.0.0.1\tpo
ro-stat mode 100644 size 13
ro-mmap OK 127.0.0.1\t
ro-open-write EROFS
ro-open-rdwr EROFS
ro-open-trunc EROFS
ro-chmod EROFS
ro-truncate EROFS
ro-unlink EBUSY
ro-rename-away EBUSY
ro-rename-over EBUSY
ro-beneath ENOTDIR
ro-mkdir-beneath ENOTDIR
ro-listed 1
rw-open OK
rw-pwrite OK 5
rw-fsync OK
rw-ftruncate OK
rw-append OK 6
rw-chmod OK
rw-utimes OK
rw-stat mode 100640 size 18 mtime 1000000000
rw-read-back GUESTd conte+tail
rw-unlink EBUSY
rw-rename-away EBUSY
rw-symlink-beneath ENOTDIR
rw-create-beneath ENOTDIR
raw-kind-ro OK 2
raw-kind-rw OK 3
raw-read-top OK
raw-read-name ENOTDIR
raw-read-dotdot ENOTDIR
raw-read-abs ENOTDIR
raw-stat-dotdot ENOTDIR
raw-list ENOTDIR
raw-readlink EINVAL
raw-write-ro EROFS
raw-truncate-ro EROFS
raw-chmod-ro EROFS
raw-write-name ENOTDIR
raw-create ENOTDIR
raw-unlink ENOTDIR
raw-mkdir ENOTDIR
raw-rename ENOTDIR
raw-write-buf-outside EFAULT
raw-map-name ENOTDIR
raw-map-top OK
raw-map-shows GUEST
";

/// spt's guest making the host calls on the mounts' descriptors itself.
const FILES_SPT: &str = "\
sys-openat2-beneath ENOTDIR
sys-pwrite-ro EBADF
sys-fchmod-ro EROFS
sys-futimens-ro EROFS
sys-mkdirat-rw ENOTDIR
sys-unlinkat-rw ENOENT
";
