//! The example programs in `apps/` run as shoal images and print exactly
//! what the same source prints as a native static musl program.

mod common;
use common::*;
use std::process::Command;

#[test]
fn hello_prints_arguments_environment_and_status_like_native() {
    let dir = scratch();
    let src = app("hello.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &[]);
    for tender in tenders() {
        for args in [vec![], vec!["one", "two words", ""], vec!["xit"]] {
            let n = output(Command::new(&native).env_clear().env("GREETING", "hi").env("B", "two=2").args(&args));
            let s = output(shoal_run(tender).args(["-e", "B=two=2", "-e", "GREETING=hi"]).arg(&image).arg("--").args(&args));
            assert_eq!(stdout(&s), stdout(&n), "{tender}: stdout differs for {args:?}; shoal stderr: {}", stderr(&s));
            assert_eq!(stderr(&s), stderr(&n), "{tender}: stderr differs for {args:?}");
            assert_eq!(s.status.code(), n.status.code(), "{tender}: exit status differs for {args:?}");
        }
    }
}

#[test]
fn files_program_matches_native() {
    let dir = scratch();
    let src = app("files.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &[]);
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/input.txt"), "first line\nsecond line\n").unwrap();
    let n = output(Command::new(&native).arg(dir.path().join("work")).arg(root.join("etc/input.txt")));
    assert!(n.status.success());
    for tender in tenders() {
        let s = output(shoal_run(tender).arg("--fs").arg(&root).arg(&image).args(["--", "/work", "/etc/input.txt"]));
        assert_eq!(stdout(&s), stdout(&n), "{tender}: shoal stderr: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(0));
        assert!(stdout(&s).contains("  second line"));
    }
    // Writes stay in the instance's memory: the host directory is untouched.
    assert!(!root.join("work").exists());
    assert_eq!(std::fs::read_to_string(root.join("etc/input.txt")).unwrap(), "first line\nsecond line\n");
}

#[test]
fn malloc_program_matches_native() {
    let dir = scratch();
    let src = app("malloc.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &[]);
    let n = output(&mut Command::new(&native));
    assert!(n.status.success());
    for tender in tenders() {
        let s = output(shoal_run(tender).args(["--mem", "512M"]).arg(&image));
        assert_eq!(stdout(&s), stdout(&n), "{tender}: shoal stderr: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(0));
    }
}

#[test]
fn clock_program_matches_native() {
    let dir = scratch();
    let src = app("clock.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &[]);
    let n = output(&mut Command::new(&native));
    assert!(n.status.success());
    for tender in tenders() {
        let s = output(shoal_run(tender).arg(&image));
        assert_eq!(stdout(&s), stdout(&n), "{tender}: shoal stderr: {}", stderr(&s));
        assert!(!stdout(&s).contains(": no"), "{tender}: a clock check failed: {}", stdout(&s));
    }
}

#[test]
fn images_contain_no_syscall_instruction() {
    let dir = scratch();
    for name in ["hello.c", "files.c", "malloc.c", "clock.c"] {
        let image = build_image(&app(name), dir.path(), &[]);
        let o = output(Command::new("objdump").args(["-d", "--no-show-raw-insn"]).arg(&image));
        assert!(o.status.success());
        let text = stdout(&o);
        assert!(text.lines().count() > 1000, "objdump printed too little for {name}");
        for line in text.lines() {
            let insn = line.split('\t').nth(1).unwrap_or("").trim();
            let op = insn.split_whitespace().next().unwrap_or("");
            assert!(!matches!(op, "syscall" | "sysenter") && !insn.starts_with("int    $0x80"), "{name}: trapping instruction left in the image: {line}");
        }
    }
}

#[test]
fn manifest_lists_every_library_in_page_aligned_regions() {
    let dir = scratch();
    let image = build_image(&app("hello.c"), dir.path(), &[]);
    let m = shoal_manifest::Manifest::read(&shoal_manifest::Manifest::path_for(&image)).unwrap();
    let names: Vec<&str> = m.libraries.iter().map(|l| l.info.name.as_str()).collect();
    for want in ["plat", "mm", "vfs", "ramfs", "syscall", "libc", "app"] {
        assert!(names.contains(&want), "manifest lacks {want}: {names:?}");
    }
    let mut all = Vec::new();
    for l in &m.libraries {
        for r in &l.regions {
            assert_eq!(r.start % 4096, 0, "{} {:?} not page aligned", l.info.name, r.kind);
            all.push((r.start, r.end.div_ceil(4096) * 4096, l.info.name.clone()));
        }
    }
    all.sort();
    for w in all.windows(2) {
        assert!(w[0].1 <= w[1].0, "regions share a page: {:?} and {:?}", w[0], w[1]);
    }
    let inspect = output(shoal().arg("inspect").arg(&image));
    assert!(inspect.status.success());
    assert!(stdout(&inspect).contains("libc"));
}
