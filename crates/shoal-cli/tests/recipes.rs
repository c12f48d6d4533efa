//! `shoal recipe`: SQLite speedtest1, Lua, PCRE2 grep and matmul built from
//! Debian source packages (recipes/*.json) run on shoal and print what the
//! native static musl programs built from the same sources print (timings
//! masked), on small inputs, on every tender (`hvt` when /dev/kvm is usable).
//!
//! The first build of a recipe fetches its Debian source package and
//! compiles it (SQLite's amalgamation takes about a minute per side);
//! `scripts/setup` does that ahead of time (`shoal recipe fetch`), so these
//! tests find everything in the cache and only link the images.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Builds recipe `name` into `dir`: (image, native program).
fn build_recipe(name: &str, dir: &Path) -> (PathBuf, PathBuf) {
    let image = dir.join(format!("{name}.img"));
    let native = dir.join(format!("{name}.native"));
    let o = output(shoal().args(["recipe", "build", name, "-o"]).arg(&image).arg("--native").arg(&native));
    assert!(o.status.success(), "shoal recipe build {name} failed: {}", stderr(&o));
    assert!(image.is_file() && native.is_file());
    (image, native)
}

/// speedtest1's `0.123s` timings become `#s` (what `shoal_toolchain::recipe::mask_timings` does).
fn mask(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let masked: Vec<String> = line
            .split(' ')
            .map(|w| {
                let t = w.strip_suffix('s').unwrap_or("");
                let timing = !t.is_empty() && t.contains('.') && t.chars().all(|c| c.is_ascii_digit() || c == '.') && !t.starts_with('.') && !t.ends_with('.');
                if timing {
                    "#s".to_string()
                } else {
                    w.to_string()
                }
            })
            .collect();
        out.push_str(&masked.join(" "));
        out.push('\n');
    }
    out
}

fn assert_same(name: &str, tender: &str, s: &Output, n: &Output) {
    assert!(n.status.success(), "native {name} failed: {}", stderr(n));
    assert_eq!(s.status.code(), Some(0), "{name} on shoal {tender} failed: {}", stderr(s));
    assert_eq!(mask(&stdout(s)), mask(&stdout(n)), "{name} on {tender}: outputs differ; shoal stderr: {}", stderr(s));
}

/// The library version the image's manifest records (`shoal inspect`).
fn library_version(image: &Path, lib: &str) -> Option<String> {
    let o = output(shoal().arg("inspect").arg(image));
    assert!(o.status.success(), "shoal inspect failed: {}", stderr(&o));
    stdout(&o).lines().find_map(|l| {
        let mut w = l.split_whitespace();
        (w.next() == Some(lib)).then(|| w.next().unwrap_or("").to_string())
    })
}

#[test]
fn recipe_list_shows_every_recipe() {
    let o = output(shoal().args(["recipe", "list"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let names: Vec<String> = stdout(&o).lines().filter_map(|l| l.split_whitespace().next().map(str::to_string)).collect();
    assert_eq!(names, ["lua", "lua-fn", "matmul", "nginx", "pcre2-grep", "redis", "sqlite-shell", "sqlite-speedtest1"]);
    assert!(stdout(&o).contains("sqlite3"), "the Debian source package is shown: {}", stdout(&o));
}

#[test]
fn unknown_recipes_and_missing_outputs_are_clean_errors() {
    assert_clean_error(&output(shoal().args(["recipe", "build", "no-such-recipe", "-o", "/tmp/x"])), "no recipe named `no-such-recipe`");
    assert_clean_error(&output(shoal().args(["recipe", "build", "lua"])), "-o IMAGE");
    let dir = scratch();
    assert_clean_error(&output(shoal().args(["recipe", "build", "matmul", "--lib-only"]).arg(dir.path())), "recipe matmul has no library");
}

#[test]
fn sqlite_speedtest1_matches_native() {
    let dir = scratch();
    let (image, native) = build_recipe("sqlite-speedtest1", dir.path());
    assert_eq!(library_version(&image, "sqlite").as_deref(), Some("3.40.1"));
    let n = output(Command::new(&native).args(["--size", "5"]).arg(dir.path().join("speedtest1.db")));
    for tender in tenders() {
        let s = output(shoal_run(tender).args(["--mem", "1G"]).arg(&image).args(["--", "--size", "5", "/tmp/speedtest1.db"]));
        assert_same("speedtest1", tender, &s, &n);
        let out = stdout(&s);
        assert!(out.contains("Speedtest1 for SQLite 3.40.1"), "{out}");
        assert!(out.contains("TOTAL"), "{out}");
        assert!(out.contains("PRAGMA integrity_check"), "{out}");
    }
}

#[test]
fn lua_sort_matches_native() {
    let dir = scratch();
    let (image, native) = build_recipe("lua", dir.path());
    assert_eq!(library_version(&image, "lua").as_deref(), Some("5.4.4"));
    let scripts = home().join("apps/recipes/lua");
    let n = output(Command::new(&native).arg(scripts.join("sort.lua")).args(["6", "16"]));
    for tender in tenders() {
        let s = output(shoal_run(tender).arg("--fs").arg(&scripts).arg(&image).args(["--", "/sort.lua", "6", "16"]));
        assert_same("lua sort.lua", tender, &s, &n);
        let out = stdout(&s);
        assert!(out.contains("sorted 2^6 = 64 integers") && out.contains("sorted 2^16 = 65536 integers"), "{out}");
    }
}

#[test]
fn pcre2_grep_matches_native() {
    let dir = scratch();
    let (image, native) = build_recipe("pcre2-grep", dir.path());
    assert_eq!(library_version(&image, "pcre2").as_deref(), Some("10.42"));
    let n = output(Command::new(&native).arg("256").arg(dir.path().join("text.txt")));
    for tender in tenders() {
        let s = output(shoal_run(tender).arg(&image).args(["--", "256", "/tmp/text.txt"]));
        assert_same("pcre2-count", tender, &s, &n);
        let out = stdout(&s);
        assert!(out.starts_with("text: 262144 bytes"), "{out}");
        assert_eq!(out.lines().filter(|l| l.contains(" matches ")).count(), 8, "{out}");
    }
}

#[test]
fn matmul_single_thread_matches_native() {
    let dir = scratch();
    let (image, native) = build_recipe("matmul", dir.path());
    let n = output(Command::new(&native).args(["120", "1"]).arg(dir.path().join("matmul.out")));
    for tender in tenders() {
        let s = output(shoal_run(tender).args(["--mem", "512M"]).arg(&image).args(["--", "120", "1", "/tmp/matmul.out"]));
        assert_same("matmul", tender, &s, &n);
        assert!(stdout(&s).contains("result file holds 115200 bytes"), "{}", stdout(&s));
    }
}

/// Needs threads in the kernel (cooperative on one vCPU).
#[test]
fn matmul_with_threads_matches_native() {
    let dir = scratch();
    let (image, native) = build_recipe("matmul", dir.path());
    let n = output(Command::new(&native).args(["150", "4"]).arg(dir.path().join("matmul.out")));
    for tender in tenders() {
        let s = output(shoal_run(tender).args(["--mem", "512M"]).arg(&image).args(["--", "150", "4", "/tmp/matmul.out"]));
        assert_same("matmul with 4 threads", tender, &s, &n);
    }
    // The product does not depend on the number of threads.
    let one = output(Command::new(&native).args(["150", "1"]).arg(dir.path().join("matmul1.out")));
    assert_eq!(stdout(&one), stdout(&n));
}

#[test]
fn a_library_alone_has_its_objects_and_version() {
    let dir = scratch();
    let out = dir.path().join("pcre2");
    let o = output(shoal().args(["recipe", "build", "pcre2-grep", "--lib-only"]).arg(&out));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(out.join("libpcre2.a").is_file());
    let meta = std::fs::read_to_string(out.join("library.json")).unwrap();
    assert!(meta.contains("\"version\": \"10.42\""), "{meta}");
    assert!(meta.contains("\"package\": \"pcre2\""), "{meta}");
    let objects: Vec<_> = std::fs::read_dir(out.join("obj")).unwrap().flatten().collect();
    assert_eq!(objects.len(), 27, "PCRE2's 27 sources of the 8-bit library");
    assert!(out.join("obj/pcre2_match.o").is_file());
    // The library links into an image with `shoal build`, its version recorded.
    let app = dir.path().join("pcre2-count.o");
    let gen = std::fs::read_to_string(out.join("library.json")).unwrap();
    let gen_dir = gen.split("\"gen_dir\": \"").nth(1).and_then(|r| r.split('"').next()).unwrap().to_string();
    let o = output(shoal().args(["cc", "-O2", "-c", "-DPCRE2_STATIC", "-I", &gen_dir]).arg(home().join("apps/recipes/pcre2-count.c")).arg("-o").arg(&app));
    assert!(o.status.success(), "{}", stderr(&o));
    let image = dir.path().join("grep.img");
    let o = output(shoal().arg("build").arg("-o").arg(&image).arg(format!("--lib=pcre2@10.42={}", out.join("libpcre2.a").display())).arg(&app));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(library_version(&image, "pcre2").as_deref(), Some("10.42"));
}

/// Issue "System calls that lie", item 6: a script piped to SQLite's own
/// shell reaches it through the tender's standard input, and the output is
/// the native shell's.
#[test]
fn item6_a_piped_script_reaches_the_sqlite_shell() {
    use std::io::Write;
    let dir = scratch();
    let (image, native) = build_recipe("sqlite-shell", dir.path());
    let script = "create table t(a, b);\ninsert into t values (1, 'one'), (2, 'two'), (3, 'three');\n\
                  select a, b, length(b) from t order by a desc;\nselect sum(a), group_concat(b, '+') from t;\n\
                  .mode csv\nselect * from t where a > 1;\n";
    let run = |cmd: &mut Command| {
        let mut child = cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let n = run(Command::new(&native).env("HOME", "/tmp"));
    assert!(n.status.success(), "native: {}", stderr(&n));
    assert!(stdout(&n).contains("3|three|5"), "{}", stdout(&n));
    for tender in tenders() {
        let s = run(shoal_run(tender).args(["-e", "HOME=/tmp"]).arg(&image));
        assert_eq!(stdout(&s), stdout(&n), "{tender}: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(0), "{tender}: {}", stderr(&s));
    }
}

/// Issue "System calls that lie", item 4: SQLite with memory-mapped I/O
/// (`PRAGMA mmap_size`: pages read through a shared mapping of the
/// database while they are written with pwrite) and WAL (its index is a
/// shared mapping of the -shm file), with two connections to the same
/// database in one process (the shell's `.connection`), each seeing the
/// other's commits, gives the native shell's output and clean integrity
/// checks. On main (copies of the file at mmap) the database ends up
/// "malformed".
#[test]
fn item4_sqlite_with_mmap_matches_native() {
    use std::io::Write;
    let dir = scratch();
    let (image, native) = build_recipe("sqlite-shell", dir.path());
    let script = |db: &str| {
        format!(
            ".open {db}\nPRAGMA mmap_size=268435456;\nPRAGMA journal_mode=WAL;\n\
             create table t(a integer primary key, b text, c blob);\n\
             with recursive n(i) as (select 1 union all select i+1 from n where i < 3000)\n\
             insert into t select i, printf('row %d', i), zeroblob(i % 300) from n;\n\
             .connection 1\n.open {db}\nPRAGMA mmap_size=268435456;\nselect count(*), max(b) from t;\n\
             update t set b = 'changed by 1' where a % 100 = 0;\ninsert into t values (5000, 'new from 1', x'01');\n\
             .connection 0\nselect count(*), count(*) filter (where b = 'changed by 1') from t;\n\
             select b from t where a in (100, 5000);\nupdate t set b = 'changed by 0' where a % 300 = 0;\n\
             create index tb on t(b);\ndelete from t where a % 11 = 0;\n\
             .connection 1\nselect count(*) filter (where b = 'changed by 0'), count(*) filter (where b = 'changed by 1') from t;\n\
             PRAGMA integrity_check;\n.connection 0\nPRAGMA wal_checkpoint(TRUNCATE);\n\
             with recursive n(i) as (select 6001 union all select i+1 from n where i < 9000)\n\
             insert into t select i, printf('row %d', i), zeroblob(i % 500) from n;\n\
             .connection 1\nselect count(*), sum(a), max(b), sum(length(c)) from t;\nPRAGMA integrity_check;\n\
             .connection 0\nPRAGMA integrity_check;\nPRAGMA mmap_size;\n"
        )
    };
    let run = |cmd: &mut Command, script: String| {
        let mut child = cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let n = run(Command::new(&native).env("HOME", "/tmp"), script(&dir.path().join("native.db").display().to_string()));
    assert!(n.status.success(), "native: {}", stderr(&n));
    assert!(stdout(&n).contains("wal\n") && stdout(&n).contains("new from 1\n") && stdout(&n).matches("ok\n").count() == 3, "{}", stdout(&n));
    for tender in tenders() {
        let s = run(shoal_run(tender).args(["-e", "HOME=/tmp"]).arg(&image), script("/tmp/item4.db"));
        assert_eq!(stdout(&s), stdout(&n), "{tender}: {}", stderr(&s));
        assert_eq!(s.status.code(), Some(0), "{tender}: {}", stderr(&s));
    }
}
