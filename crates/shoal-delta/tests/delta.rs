//! End-to-end tests of the Δ-versioner: small C libraries in several
//! versions, compiled with the host gcc, turned into base + deltas, linked
//! natively with a generated trampoline table and run.

use shoal_delta::{make_deltas, make_deltas_with, trampoline_asm, DeltaError, DeltaOptions, DeltaSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("shoal-delta-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(cmd: &mut Command) -> String {
    let o = cmd.output().expect("spawn");
    assert!(o.status.success(), "{cmd:?} failed:\n{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn cc(src: &str, out: &Path, extra: &[&str]) -> PathBuf {
    run(Command::new("gcc").args(["-O2", "-c", "-ffunction-sections", "-fdata-sections", "-fno-pie"]).args(extra).arg(fixture(src)).arg("-o").arg(out));
    out.to_path_buf()
}

fn versions(dir: &Path, srcs: &[&str]) -> Vec<(String, PathBuf)> {
    srcs.iter().enumerate().map(|(i, s)| (format!("v{}", i + 1), cc(s, &dir.join(format!("lib{}.o", i + 1)), &[]))).collect()
}

/// Link `objs` (newest first) + main + the trampoline table for `tpl`.
fn link(dir: &Path, tag: &str, main: &str, objs: &[PathBuf], tpl: &[String], script: Option<&Path>) -> PathBuf {
    let s = dir.join(format!("tpl-{tag}.s"));
    std::fs::write(&s, trampoline_asm(tpl)).unwrap();
    let exe = dir.join(format!("prog-{tag}"));
    let mut c = Command::new("gcc");
    c.args(["-no-pie", "-O2", "-o"]).arg(&exe).arg(fixture(main)).args(objs).arg(&s);
    if let Some(sc) = script {
        c.arg(format!("-Wl,-T,{}", sc.display()));
    }
    run(&mut c);
    exe
}

fn direct(dir: &Path, tag: &str, main: &str, obj: &Path) -> String {
    let exe = dir.join(format!("direct-{tag}"));
    run(Command::new("gcc").args(["-no-pie", "-O2", "-o"]).arg(&exe).arg(fixture(main)).arg(obj));
    run(&mut Command::new(&exe))
}

fn image(dir: &Path, set: &DeltaSet, j: usize, main: &str, script: Option<&Path>) -> PathBuf {
    link(dir, &format!("v{j}"), main, &set.objects_for(j), &set.trampolines_for(j), script)
}

#[test]
fn weak_first_definition_wins() {
    // Rule 2's premise: GNU ld keeps the first weak definition it meets.
    let d = tmpdir("weak");
    let a = cc("weak_a.c", &d.join("a.o"), &[]);
    let b = cc("weak_b.c", &d.join("b.o"), &[]);
    for (objs, want) in [([&a, &b], "1"), ([&b, &a], "2")] {
        let exe = d.join("w");
        run(Command::new("gcc").args(["-no-pie", "-o"]).arg(&exe).arg(fixture("weak_main.c")).args(objs));
        assert_eq!(run(&mut Command::new(&exe)).trim(), want, "first weak definition in link order must win");
    }
}

#[test]
fn newest_version_behaviour_for_every_version() {
    let d = tmpdir("lib");
    let ins = versions(&d, &["lib_v1.c", "lib_v2.c", "lib_v3.c"]);
    let set = make_deltas(&ins, &d.join("out")).unwrap();
    assert_eq!(set.deltas.len(), 2);
    for j in 1..=3 {
        let want = direct(&d, &format!("{j}"), "main.c", &ins[j - 1].1);
        let got = run(&mut Command::new(image(&d, &set, j, "main.c", None)));
        assert_eq!(got, want, "image of version {j} must behave like version {j}");
    }
    let d2 = &set.deltas[0];
    let d3 = &set.deltas[1];
    let has = |v: &Vec<String>, n: &str| v.iter().any(|x| x == n);
    // v2: new functions, renamed function, modified static, changed string.
    assert!(has(&d2.new_functions, "added"), "{d2:?}");
    assert!(has(&d2.new_functions, "new_name"), "{d2:?}");
    assert!(has(&d2.modified_functions, "greet"), "{d2:?}");
    assert!(has(&d2.modified_functions, "run"), "{d2:?}");
    assert!(d2.modified_functions.iter().any(|f| f.contains("helper")) || d2.modified_functions.contains(&"compute".into()), "{d2:?}");
    // v3: only a constant table changed, and the switch.
    assert!(has(&d3.modified_functions, "sw"), "{d3:?}");
    assert!(d3.copied_data.iter().any(|x| x.contains("table__v3")), "{d3:?}");
    // Unchanged functions are in no delta.
    for dd in &set.deltas {
        for f in ["unchanged", "count"] {
            assert!(!has(&dd.new_functions, f) && !has(&dd.modified_functions, f), "{f} in delta {}", dd.index);
        }
        assert!(!dd.modified_functions.contains(&"removed_later".into()));
    }
    assert!(set.exported_functions.contains(&"run".into()));
    assert!(set.trampolines.iter().any(|t| t.contains("helper")) || set.trampolines.contains(&"compute".into()));
    let json = std::fs::read_to_string(&set.manifest).unwrap();
    assert!(json.contains("\"deltas\"") && json.contains("table__v3"));
}

#[test]
fn strings_and_constants_compared_by_content() {
    let d = tmpdir("str");
    let ins = versions(&d, &["strings_v1.c", "strings_v2.c"]);
    let set = make_deltas(&ins, &d.join("out")).unwrap();
    let want = direct(&d, "2", "strings_main.c", &ins[1].1);
    assert_eq!(run(&mut Command::new(image(&d, &set, 2, "strings_main.c", None))), want);
    let want1 = direct(&d, "1", "strings_main.c", &ins[0].1);
    assert_eq!(run(&mut Command::new(image(&d, &set, 1, "strings_main.c", None))), want1);
    let dl = &set.deltas[0];
    // msg's table of strings changed; msglen only calls msg; scale reads a
    // changed .rodata.cst8 constant.
    assert!(dl.modified_functions.contains(&"msg".into()), "{dl:?}");
    assert!(dl.modified_functions.contains(&"scale".into()), "{dl:?}");
    assert!(!dl.modified_functions.contains(&"msglen".into()), "{dl:?}");
}

#[test]
fn versioned_flags_keep_a_change_in_its_function() {
    // With plain -O2 the changed helper is inlined into both callers, which
    // both land in the delta; with VERSIONED_CFLAGS only the helper does,
    // and the image still behaves like version 2.
    let d = tmpdir("inline");
    let srcs = ["inline_v1.c", "inline_v2.c"];
    let plain: Vec<(String, PathBuf)> = srcs.iter().enumerate().map(|(i, s)| (format!("v{}", i + 1), cc(s, &d.join(format!("plain{i}.o")), &[]))).collect();
    let set = make_deltas(&plain, &d.join("plain")).unwrap();
    let mut modified = set.deltas[0].modified_functions.clone();
    modified.sort();
    assert_eq!(modified, ["area", "perimeter"], "{:?}", set.deltas[0]);

    let versioned: Vec<(String, PathBuf)> = srcs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let out = d.join(format!("versioned{i}.o"));
            (format!("v{}", i + 1), cc(s, &out, shoal_delta::VERSIONED_CFLAGS))
        })
        .collect();
    let set = make_deltas(&versioned, &d.join("versioned")).unwrap();
    let dl = &set.deltas[0];
    assert_eq!(dl.modified_functions.len(), 1, "{dl:?}");
    assert!(dl.modified_functions[0].ends_with("_scale"), "{dl:?}");
    assert!(dl.new_functions.is_empty(), "{dl:?}");
    let want = direct(&d, "inline2", "inline_main.c", &versioned[1].1);
    assert_eq!(want, "54 62\n");
    assert_eq!(run(&mut Command::new(image(&d, &set, 2, "inline_main.c", None))), want);
    let want1 = direct(&d, "inline1", "inline_main.c", &versioned[0].1);
    assert_eq!(run(&mut Command::new(image(&d, &set, 1, "inline_main.c", None))), want1);
}

#[test]
fn identical_version_gives_empty_delta() {
    let d = tmpdir("same");
    let ins = versions(&d, &["lib_v1.c", "lib_v1.c"]);
    let set = make_deltas(&ins, &d.join("out")).unwrap();
    let dl = &set.deltas[0];
    assert!(dl.new_functions.is_empty() && dl.modified_functions.is_empty() && dl.copied_data.is_empty(), "{dl:?}");
}

#[test]
fn base_pages_identical_across_images() {
    let d = tmpdir("pages");
    let ins = versions(&d, &["lib_v1.c", "lib_v2.c", "lib_v3.c"]);
    let set = make_deltas(&ins, &d.join("out")).unwrap();
    // Base, its data and the trampoline table at fixed addresses.
    let script = d.join("fixed.ld");
    std::fs::write(
        &script,
        "SECTIONS {\n  .shoal_base 0x10000000 : { *base.o(.text .text.*) }\n  .shoal_base_ro 0x10100000 : { *base.o(.rodata .rodata.*) }\n  .shoal_base_rw 0x10200000 : { *base.o(.data .data.* .bss .bss.*) }\n  .shoal_tpl 0x10300000 : { *(.text.shoal_tpl) }\n}\nINSERT BEFORE .text;\n",
    )
    .unwrap();
    let mut imgs = Vec::new();
    for j in [2, 3] {
        let exe = image(&d, &set, j, "main.c", Some(&script));
        let want = direct(&d, &format!("p{j}"), "main.c", &ins[j - 1].1);
        assert_eq!(run(&mut Command::new(&exe)), want);
        let mut secs = Vec::new();
        for s in [".shoal_base", ".shoal_base_ro"] {
            let bin = d.join(format!("sec{j}{s}"));
            run(Command::new("objcopy").args(["-O", "binary", "--only-section", s]).arg(&exe).arg(&bin));
            secs.push(std::fs::read(&bin).unwrap());
        }
        imgs.push(secs);
    }
    assert!(!imgs[0][0].is_empty());
    assert_eq!(imgs[0], imgs[1], "base.o's code and rodata bytes differ between the v2 and v3 images");
}

#[test]
fn merged_objects_and_namespace() {
    let d = tmpdir("merge");
    let a = cc("lib_v1.c", &d.join("a.o"), &[]);
    let b = cc("strings_v1.c", &d.join("b.o"), &[]);
    let m = d.join("m.o");
    shoal_delta::merge_objects(&[a, b], &m).unwrap();
    let ins = vec![("1".to_string(), m.clone()), ("2".to_string(), m)];
    let set = make_deltas_with(&ins, &d.join("out"), &DeltaOptions { namespace: Some("demo".into()) }).unwrap();
    let out = run(Command::new("nm").arg(&set.base));
    assert!(out.contains("__shoal_s_demo_lib_v1_c_helper"), "{out}");
}

fn expect_bad(ins: Vec<(String, PathBuf)>, needle: &str, file: &Path) {
    let d = tmpdir("badout");
    let e = make_deltas(&ins, &d).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains(&file.display().to_string()), "error does not name the file: {msg}");
    assert!(msg.contains(needle), "unexpected error: {msg}");
}

#[test]
fn refuses_bad_input() {
    let d = tmpdir("bad");
    let good = cc("lib_v1.c", &d.join("good.o"), &[]);
    // No function sections.
    let nofs = d.join("nofs.o");
    run(Command::new("gcc").args(["-O2", "-c", "-fno-pie"]).arg(fixture("nofs.c")).arg("-o").arg(&nofs));
    expect_bad(vec![("1".into(), good.clone()), ("2".into(), nofs.clone())], "-ffunction-sections", &nofs);
    // Not ELF.
    let txt = d.join("not.o");
    std::fs::write(&txt, b"hello, not an object\n").unwrap();
    expect_bad(vec![("1".into(), txt.clone())], "not an ELF", &txt);
    // Other architecture: 32-bit if multilib works, and a patched e_machine.
    let m32 = d.join("m32.o");
    if Command::new("gcc").args(["-m32", "-c", "-ffunction-sections"]).arg(fixture("nofs.c")).arg("-o").arg(&m32).status().map(|s| s.success()).unwrap_or(false)
    {
        expect_bad(vec![("1".into(), m32.clone())], "32-bit", &m32);
    }
    let arm = d.join("arm.o");
    let mut bytes = std::fs::read(&good).unwrap();
    bytes[18] = 183; // EM_AARCH64
    bytes[19] = 0;
    std::fs::write(&arm, &bytes).unwrap();
    expect_bad(vec![("1".into(), arm.clone())], "not x86-64", &arm);
    // Truncated.
    let tr = d.join("trunc.o");
    let bytes = std::fs::read(&good).unwrap();
    std::fs::write(&tr, &bytes[..bytes.len() / 3]).unwrap();
    expect_bad(vec![("1".into(), tr.clone())], "corrupt", &tr);
    // Duplicate labels.
    let e = make_deltas(&[("v1".into(), good.clone()), ("v1".into(), good)], &d.join("o")).unwrap_err();
    assert!(matches!(e, DeltaError::Usage(_)), "{e}");
}

#[test]
fn cli_entry_point() {
    let d = tmpdir("cli");
    let ins = versions(&d, &["lib_v1.c", "lib_v2.c"]);
    let args: Vec<String> = ["--versions", "a,b", "--out"]
        .iter()
        .map(|s| s.to_string())
        .chain([d.join("o").display().to_string()])
        .chain(ins.iter().map(|(_, p)| p.display().to_string()))
        .collect();
    let out = shoal_delta::cli_main(&args).unwrap();
    assert!(out.contains("delta-2.o"), "{out}");
    assert!(d.join("o/delta.json").exists());
    assert!(shoal_delta::cli_main(&["--out".into(), "x".into()]).is_err());
}
