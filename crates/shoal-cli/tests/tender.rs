//! The lean `shoal-tender` command runs images exactly as `shoal run` does:
//! same output, same exit statuses, one-line errors for bad input.

mod common;
use common::*;
use std::process::Command;

fn tender() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shoal-tender"))
}

#[test]
fn runs_like_shoal_run() {
    let dir = scratch();
    let image = build_image(&app("hello.c"), dir.path(), &[]);
    for t in tenders() {
        let lean = output(tender().args(["--tender", t, "--mem=32M"]).arg(&image).args(["--", "a b", "c"]));
        let full = output(shoal_run(t).args(["--mem", "32M"]).arg(&image).args(["--", "a b", "c"]));
        assert_eq!(lean.status.code(), full.status.code(), "{t}: {}", stderr(&lean));
        assert_eq!(stdout(&lean), stdout(&full), "{t}");
        assert!(!stdout(&lean).is_empty(), "{t}: no output");
    }
}

#[test]
fn forbidden_host_syscall_gives_the_same_status() {
    let dir = scratch();
    let image = raw_syscall_image(dir.path());
    let o = output(tender().arg(&image));
    assert_eq!(stdout(&o), "before\n");
    assert_eq!(o.status.code(), Some(159), "stderr: {}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

#[test]
fn bad_input_is_one_line_and_status_125() {
    let dir = scratch();
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"not an image").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--bogus".into(), "img".into()], "unknown option --bogus"),
        (vec!["--mem".into(), "12Q".into(), "img".into()], "--mem 12Q is not a size"),
        (vec!["--tender".into(), "xen".into(), "img".into()], "--tender xen"),
        (vec![], "no image given"),
        (vec!["/nonexistent/image".into()], "/nonexistent/image"),
        (vec![junk.display().to_string()], "junk"),
    ];
    for (args, needle) in cases {
        let o = output(tender().args(&args));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(125), "{args:?}: {err}");
        assert!(!err.contains("panicked") && err.lines().count() == 1, "{args:?}: {err}");
        assert!(err.starts_with("shoal-tender: ") && err.contains(needle), "{args:?}: `{err}` lacks `{needle}`");
    }
    let help = output(tender().arg("--help"));
    assert!(help.status.success() && stdout(&help).starts_with("usage: shoal-tender"));
}
