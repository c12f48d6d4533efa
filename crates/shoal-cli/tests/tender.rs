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

/// A guest whose argv[1] picks how it ends: an exit status, a wild
/// pointer, an illegal instruction, a write to its own code, a forbidden
/// system call, or a long sleep.
fn endings_image(dir: &std::path::Path) -> std::path::PathBuf {
    let src = dir.join("endings.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\nint main(int argc, char **argv) {\n\
         printf(\"start %s\\n\", argv[1]); fflush(stdout);\n\
         if (!strcmp(argv[1], \"exit\")) return 42;\n\
         if (!strcmp(argv[1], \"wild\")) { volatile int *p = (int *)0x7; return *p; }\n\
         if (!strcmp(argv[1], \"ud2\")) { __builtin_trap(); }\n\
         if (!strcmp(argv[1], \"code\")) { volatile unsigned char *c = (unsigned char *)(void *)main; c[0] = 0xc3; }\n\
         if (!strcmp(argv[1], \"syscall\")) { long r; __asm__ volatile(\"syscall\" : \"=a\"(r) : \"a\"(39L) : \"rcx\",\"r11\",\"memory\"); }\n\
         if (!strcmp(argv[1], \"sleep\")) sleep(30);\n\
         printf(\"survived\\n\"); return 0; }\n",
    )
    .unwrap();
    build_image(&src, dir, &[])
}

#[test]
fn single_process_ends_like_the_supervised_tender() {
    let dir = scratch();
    let image = endings_image(dir.path());
    for (what, status) in [("exit", 42), ("wild", 139), ("ud2", 132), ("code", 139), ("syscall", 159)] {
        let single = output(tender().arg("--single-process").arg(&image).args(["--", what]));
        let supervised = output(tender().arg(&image).args(["--", what]));
        assert_eq!(single.status.code(), Some(status), "{what}: stderr: {}", stderr(&single));
        assert_eq!(supervised.status.code(), Some(status), "{what}: stderr: {}", stderr(&supervised));
        assert_eq!(stdout(&single), format!("start {what}\n"), "{what}");
        assert_eq!(stdout(&single), stdout(&supervised), "{what}");
        // The same message, word for word (the crash addresses too: the
        // image is at fixed addresses).
        assert_eq!(stderr(&single), stderr(&supervised), "{what}");
        if status != 42 {
            assert!(stderr(&single).starts_with("shoal: ") && stderr(&single).lines().count() == 1, "{what}: {}", stderr(&single));
        }
    }
    let o = output(shoal_run("spt").arg("--single-process").arg(&image).args(["--", "syscall"]));
    assert_eq!(o.status.code(), Some(159), "shoal run --single-process: {}", stderr(&o));
}

#[test]
fn single_process_is_the_instance_itself() {
    use std::io::BufRead;
    let dir = scratch();
    let image = endings_image(dir.path());
    let mut child = tender()
        .arg("--single-process")
        .arg(&image)
        .args(["--", "sleep"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "start sleep\n");
    // The process we started runs the guest under the filter, and has no
    // child of its own.
    let pid = child.id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(status.lines().any(|l| l == "Seccomp:\t2"), "not sandboxed:\n{status}");
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap();
    assert_eq!(children.trim(), "", "a single-process instance has children");
    child.kill().unwrap();
    let st = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), Some(libc::SIGKILL));
}

/// SHOAL_DEBUG_START prints each start step of an spt instance, front end
/// and instance process, in order of time, and nothing without it. The
/// seccomp program compiled at the first start is kept in the cache
/// (`SHOAL_CACHE/filter/BUILD/KEY`, a check word and the records) and the
/// next start's instance takes it; a damaged file is compiled again and
/// replaced.
#[test]
fn start_steps_are_printed_on_request_only() {
    let dir = scratch();
    let image = build_image(&app("hello.c"), dir.path(), &[]);
    let cache = dir.path().join("cache");
    let run = |timed: bool| {
        let mut c = tender();
        c.env("SHOAL_CACHE", &cache).args(["--tender", "spt", "--mem=32M"]).arg(&image);
        if timed {
            c.env("SHOAL_DEBUG_START", "1");
        }
        output(&mut c)
    };
    let plain = run(false);
    assert!(plain.status.success() && !stderr(&plain).contains("shoal: start:"), "{}", stderr(&plain));
    let builds: Vec<_> = std::fs::read_dir(cache.join("filter")).unwrap().flatten().collect();
    let programs: Vec<_> = std::fs::read_dir(builds[0].path()).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!((builds.len(), programs.len()), (1, 1), "{programs:?}");
    let stored = std::fs::read(&programs[0]).unwrap();
    assert!(stored.len() > 8 && (stored.len() - 8).is_multiple_of(8), "{} bytes", stored.len());
    let mut damaged = stored.clone();
    *damaged.last_mut().unwrap() ^= 1;
    std::fs::write(&programs[0], &damaged).unwrap();
    let again = run(false);
    assert_eq!((again.status.code(), stdout(&again)), (plain.status.code(), stdout(&plain)), "{}", stderr(&again));
    assert_eq!(std::fs::read(&programs[0]).unwrap(), stored, "the damaged program was not compiled again");
    let timed = run(true);
    assert!(stderr(&timed).contains("instance: seccomp filter taken from the spec"), "{}", stderr(&timed));
    assert!(timed.status.success(), "{}", stderr(&timed));
    assert_eq!(stdout(&timed), stdout(&plain), "the guest's output changed");
    let steps: Vec<(f64, String)> = stderr(&timed)
        .lines()
        .filter_map(|l| l.strip_prefix("shoal: start: "))
        .map(|l| {
            let (ms, what) = l.split_once(" ms ").expect("MS ms STEP");
            (ms.parse::<f64>().expect("a number of ms"), what.to_string())
        })
        .collect();
    let names: Vec<&str> = steps.iter().map(|(_, w)| w.as_str()).collect();
    for want in [
        "front: image checked",
        "instance: exec'd, boot spec read",
        "instance: segments loaded",
        "instance: handlers installed (the filter and the guest next)",
    ] {
        assert!(names.contains(&want), "no step `{want}` in {names:?}");
    }
    assert!(steps.windows(2).all(|w| w[0].0 <= w[1].0), "steps out of order: {steps:?}");
}

/// A static Linux executable given to the lean tender runs as it does
/// under `shoal run` (the instance image built around it, cached, with
/// argv[0] the path given) and as it does natively: same output and
/// status on every tender. Without the kernel image (another cache) it is
/// one line and 125.
#[test]
fn runs_a_static_executable_like_shoal_run_and_natively() {
    let dir = scratch();
    let exe = dir.path().join("threads");
    let o = output(Command::new("gcc").args(["-static", "-O2", "-pthread"]).arg(home().join("apps/exec/threads.c")).arg("-o").arg(&exe));
    assert!(o.status.success(), "gcc -static: {}", stderr(&o));
    let native = output(Command::new(&exe).args(["one", "two words"]).env_clear().env("GREETING", "hi"));
    assert_eq!(native.status.code(), Some(7), "{}", stderr(&native));
    for t in tenders() {
        // shoal run first: it builds the kernel image the tender needs.
        let full = output(shoal_run(t).args(["-e", "GREETING=hi"]).arg(&exe).args(["--", "one", "two words"]));
        let lean = output(tender().args(["--tender", t, "-e", "GREETING=hi"]).arg(&exe).args(["--", "one", "two words"]));
        assert_eq!(full.status.code(), Some(7), "{t}: {}", stderr(&full));
        assert_eq!(lean.status.code(), Some(7), "{t}: {}", stderr(&lean));
        assert_eq!(stdout(&lean), stdout(&native), "{t}");
        assert_eq!(stdout(&full), stdout(&native), "{t}");
        assert_eq!(stderr(&lean), "", "{t}");
    }
    let o = output(tender().env("SHOAL_CACHE", dir.path().join("empty-cache")).arg(&exe));
    assert_eq!(o.status.code(), Some(125));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).starts_with(&format!("shoal-tender: {} is a Linux executable, which runs on shoal's kernel image", exe.display())), "{}", stderr(&o));
}
