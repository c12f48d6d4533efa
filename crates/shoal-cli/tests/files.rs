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
