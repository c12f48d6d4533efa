//! The file/memory layer: device files, pipes, poll/select, file-backed
//! mmap, statfs, owners, sendfile… (`apps/tests/devices.c`) print what the
//! same source prints as a native static musl program. The program prints
//! nothing that legitimately differs (inode numbers, file-system sizes),
//! and works in a scratch directory given as its argument.

mod common;
use common::*;
use std::process::{Command, Stdio};

#[test]
fn devices_pipes_and_mappings_match_native() {
    let dir = scratch();
    let src = app("tests/devices.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &[]);
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let n = output(Command::new(&native).arg(&work).stdin(Stdio::null()));
    assert!(n.status.success(), "native run failed: {}", stderr(&n));
    assert!(!stdout(&n).contains("FAIL"), "native run: {}", stdout(&n));
    // With an empty root, and with an archive root (the devices are added
    // on top of it).
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/motd"), "hi\n").unwrap();
    for tender in tenders() {
        for fs in [None, Some(&root)] {
            let mut cmd = shoal_run(tender);
            if let Some(r) = fs {
                cmd.arg("--fs").arg(r);
            }
            let s = output(cmd.arg(&image).args(["--", "/tmp"]));
            assert_eq!(stdout(&s), stdout(&n), "{tender} fs={fs:?}: shoal stderr: {}", stderr(&s));
            assert_eq!(stderr(&s), "", "{tender} fs={fs:?}");
            assert_eq!(s.status.code(), Some(0), "{tender} fs={fs:?}");
        }
    }
}

/// A root file system without /etc/passwd, /etc/group and /etc/hosts gets
/// shoal's defaults (root and nobody, nogroup, localhost), so that a
/// server started as root finds `nobody` (nginx's default user); files
/// the root brings are its own and are not replaced.
#[test]
fn etc_defaults_for_a_root_without_them_and_the_root_s_own_files_win() {
    let dir = scratch();
    let image = build_image(&app("tests/etc_defaults.c"), dir.path(), &[]);
    let defaults =
        "user root: uid 0 gid 0 home /root\nuser nobody: uid 65534 gid 65534 home /nonexistent\nuser www-data: none\ngroup 65534: nogroup\nlocalhost: found\n";
    // A root with an /etc of its own but none of the four files.
    let bare = dir.path().join("bare");
    std::fs::create_dir_all(bare.join("etc")).unwrap();
    std::fs::write(bare.join("etc/motd"), "hi\n").unwrap();
    // A root with its own passwd (and no group: that one is still added).
    let own = dir.path().join("own");
    std::fs::create_dir_all(own.join("etc")).unwrap();
    std::fs::write(own.join("etc/passwd"), "root:x:0:0:root:/srv:/bin/sh\nwww-data:x:33:33:www:/var/www:/bin/false\n").unwrap();
    let owned = "user root: uid 0 gid 0 home /srv\nuser nobody: none\nuser www-data: uid 33 gid 33 home /var/www\ngroup 65534: nogroup\nlocalhost: found\n";
    for tender in tenders() {
        for (fs, want) in [(None, defaults), (Some(&bare), defaults), (Some(&own), owned)] {
            let mut cmd = shoal_run(tender);
            if let Some(r) = fs {
                cmd.arg("--fs").arg(r);
            }
            let s = output(cmd.arg(&image));
            assert_eq!(stdout(&s), want, "{tender} fs={fs:?}: {}", stderr(&s));
            assert_eq!(s.status.code(), Some(0), "{tender} fs={fs:?}");
        }
    }
}
