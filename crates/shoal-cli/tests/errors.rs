//! Bad input and hostile guests: a clear one-line error and a non-zero
//! status, never a panic or a hang.

mod common;
use common::*;

#[test]
fn forbidden_host_syscall_kills_the_guest() {
    let dir = scratch();
    let image = raw_syscall_image(dir.path());
    for tender in tenders() {
        let o = output(shoal_run(tender).arg(&image));
        assert_eq!(stdout(&o), "before\n", "{tender}: the guest went on after the syscall");
        assert_eq!(o.status.code(), Some(159), "{tender}: stderr: {}", stderr(&o));
        let err = stderr(&o);
        assert!(err.starts_with("shoal: ") && err.lines().count() == 1, "{tender}: unclear message: {err}");
        assert!(err.contains("syscall") || err.contains("system call"), "{tender}: unclear message: {err}");
    }
}

#[test]
fn missing_image() {
    let o = output(shoal().args(["run", "/nonexistent/image"]));
    assert_clean_error(&o, "/nonexistent/image");
    assert_eq!(o.status.code(), Some(125));
}

#[test]
fn non_elf_and_truncated_images() {
    let dir = scratch();
    let text = dir.path().join("text");
    std::fs::write(&text, "#!/bin/sh\necho not an image\n").unwrap();
    assert_clean_error(&output(shoal().arg("run").arg(&text)), &text.display().to_string());

    let image = build_image(&app("hello.c"), dir.path(), &[]);
    let bytes = std::fs::read(&image).unwrap();
    for cut in [10, 64, 200, bytes.len() / 2, bytes.len() - 1] {
        let t = dir.path().join(format!("trunc{cut}"));
        std::fs::write(&t, &bytes[..cut]).unwrap();
        let o = output(shoal().arg("run").arg(&t));
        assert_clean_error(&o, &t.display().to_string());
    }
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    assert_clean_error(&output(shoal().arg("run").arg(&empty)), "empty");
}

#[test]
fn image_for_another_abi_version_is_refused() {
    let dir = scratch();
    let image = build_image(&app("hello.c"), dir.path(), &[]);
    let mut bytes = std::fs::read(&image).unwrap();
    let magic = b"SHOALABI";
    let pos = bytes.windows(8).position(|w| w == magic).expect("no ABI note in the image");
    bytes[pos + 8] = bytes[pos + 8].wrapping_add(1);
    let other = dir.path().join("other-abi");
    std::fs::write(&other, &bytes).unwrap();
    let o = output(shoal().arg("run").arg(&other));
    assert_clean_error(&o, "ABI");
}

#[test]
fn memory_too_small_for_the_image() {
    let dir = scratch();
    let image = build_image(&app("hello.c"), dir.path(), &[]);
    let o = output(shoal().args(["run", "--mem", "1M"]).arg(&image));
    assert_clean_error(&o, "too small");
}

#[test]
fn missing_fs_directory_and_bad_flags() {
    let dir = scratch();
    let image = build_image(&app("hello.c"), dir.path(), &[]);
    let o = output(shoal().args(["run", "--fs", "/nonexistent/dir"]).arg(&image));
    assert_clean_error(&o, "/nonexistent/dir");
    let o = output(shoal().args(["run", "--mem", "lots"]).arg(&image));
    assert_clean_error(&o, "--mem");
    let o = output(shoal().args(["run", "-e", "NOEQUALS"]).arg(&image));
    assert_clean_error(&o, "KEY=VALUE");
}

#[test]
fn cc_reports_missing_sources_and_libraries() {
    let dir = scratch();
    let o = output(shoal().args(["cc", "-o"]).arg(dir.path().join("x")).arg("/nonexistent.c"));
    assert_clean_error(&o, "/nonexistent.c");
    let o = output(shoal().arg("cc").arg(app("hello.c")).arg("-o").arg(dir.path().join("y")).arg("-lnosuchlib"));
    assert_clean_error(&o, "-lnosuchlib");
}

#[test]
fn guest_crashes_are_reported_with_their_cause() {
    let dir = scratch();
    let src = dir.path().join("crash.c");
    // argv[1] picks the crash; each is a real bug a C program can have.
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <string.h>\nint main(int argc, char **argv) {\n\
         printf(\"start\\n\"); fflush(stdout);\n\
         if (!strcmp(argv[1], \"wild\")) { volatile int *p = (int *)0x7; return *p; }\n\
         if (!strcmp(argv[1], \"ud2\")) { __builtin_trap(); }\n\
         if (!strcmp(argv[1], \"code\")) { volatile unsigned char *c = (unsigned char *)(void *)main; c[0] = 0xc3; }\n\
         printf(\"survived\\n\"); return 0; }\n",
    )
    .unwrap();
    let image = build_image(&src, dir.path(), &[]);
    for tender in tenders() {
        for (what, status) in [("wild", 139), ("ud2", 132), ("code", 139)] {
            let o = output(shoal_run(tender).arg(&image).args(["--", what]));
            assert_eq!(stdout(&o), "start\n", "{tender} {what}: the guest went on");
            assert_eq!(o.status.code(), Some(status), "{tender} {what}: stderr: {}", stderr(&o));
            let err = stderr(&o);
            assert!(err.starts_with("shoal: ") && err.lines().count() == 1, "{tender} {what}: unclear message: {err}");
            assert!(err.contains("rip"), "{tender} {what}: no faulting instruction in: {err}");
            assert!(!err.contains("panicked"));
        }
    }
}

/// The mistakes a new user makes on `shoal run` and `shoal cc` get one
/// line that says what to do (each asserted whole): program arguments
/// without `--`, a directory for an image, a size without its unit, one
/// host port published twice, `shoal cc --help`/`--version`, a C++ source.
#[test]
fn newcomer_mistakes_get_a_line_that_says_what_to_do() {
    let dir = scratch();
    let image = build_image(&app("hello.c"), dir.path(), &[]);
    let line = |args: &[&std::ffi::OsStr]| {
        let o = output(shoal().args(args));
        assert!(!o.status.success() && !stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
        (o.status.code(), stderr(&o))
    };
    let img = image.as_os_str();
    let s = |x: &'static str| std::ffi::OsStr::new(x);
    assert_eq!(
        line(&[s("run"), img, s("arg1")]),
        (Some(2), "shoal: unexpected argument 'arg1': a program's arguments go after `--` (shoal run [OPTIONS] IMAGE -- arg1 ...)\n".to_string())
    );
    assert_eq!(line(&[s("run"), dir.path().as_os_str()]), (Some(125), format!("shoal: {} is a directory, not an image\n", dir.path().display())));
    assert_eq!(
        line(&[s("run"), s("--mem"), s("10"), img]),
        (Some(125), "shoal: --mem 10 is too small for any instance (at least 1M; a size without K, M or G is in bytes: did you mean 10M?)\n".to_string())
    );
    assert_eq!(
        line(&[s("run"), s("-p"), s("18096:8080"), s("-p"), s("18096:8081"), img]),
        (Some(125), "shoal: --publish 18096:8081: host port 127.0.0.1:18096 is published twice\n".to_string())
    );
    let cpp = dir.path().join("hi.cpp");
    std::fs::write(&cpp, "int main() { return 0; }\n").unwrap();
    assert_eq!(
        line(&[s("cc"), s("-o"), dir.path().join("hi").as_os_str(), cpp.as_os_str()]),
        (Some(125), format!("shoal: shoal cc: {}: C++ is not supported (shoal's libc has no C++ runtime); shoal cc compiles C\n", cpp.display()))
    );
    let help = output(shoal().args(["cc", "--help"]));
    assert!(help.status.success() && stdout(&help).starts_with("usage: shoal cc [GCC OPTIONS] FILE...\n"), "{}", stdout(&help));
    let version = output(shoal().args(["cc", "--version"]));
    let v = stdout(&version);
    assert!(version.status.success() && v.starts_with("shoal cc ") && v.lines().nth(1).is_some_and(|l| l.starts_with("gcc")), "{v}");
}

/// A manifest beside an image that is another image's (copied without
/// its image, or left from an older build): `shoal inspect` and a pool
/// run say so in one line, instead of describing the wrong image or
/// calling the pool tampered with.
#[test]
fn a_manifest_of_another_image_is_named_as_such() {
    let dir = scratch();
    let a = build_image(&app("hello.c"), dir.path(), &[]);
    let b_dir = dir.path().join("b");
    std::fs::create_dir_all(&b_dir).unwrap();
    let b = build_image(&test_app("sleep.c"), &b_dir, &["-lpthread"]);
    let manifest = |i: &std::path::Path| std::path::PathBuf::from(format!("{}.manifest.json", i.display()));
    std::fs::copy(manifest(&b), manifest(&a)).unwrap();
    let o = output(shoal().arg("inspect").arg(&a));
    assert_eq!(o.status.code(), Some(125));
    assert_eq!(
        stderr(&o),
        format!(
            "shoal: {} belongs to another image than {} (its image_sha256 differs): rebuild the image, or copy it together with its manifest\n",
            manifest(&a).display(),
            a.display()
        )
    );
    let pool = dir.path().join("pool");
    let o = output(shoal().args(["run", "--mem-mode", "pool"]).arg(&a).env("SHOAL_POOL_DIR", &pool));
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        format!("shoal: pool: the manifest beside {} belongs to another image (its image_sha256 differs): rebuild the image, or copy it together with its manifest\n", a.display())
    );
}
