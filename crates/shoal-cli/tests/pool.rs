//! Memory mode `pool` (docs/design.md, "Memory and sharing"): two instances linked against different
//! versions of a library share the frames of their common libraries (the
//! kernel components, libc) through the library pool, which `copy` does
//! not; and a tampered pool file is refused.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LIB_V1: &str = "int versioned(int x) { return x + 1; }\n";
const LIB_V2: &str = "int helper(int x) { return x * 3; }\nint versioned(int x) { return helper(x) + 2; }\n";
const APP: &str = r#"
#include <stdio.h>
#include <time.h>
int versioned(int);
int main(void) {
    printf("ready %d\n", versioned(1));
    fflush(stdout);
    struct timespec s = {30, 0};
    nanosleep(&s, NULL);
    return 0;
}
"#;

fn cc_object(src: &str, name: &str, dir: &Path) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let o = dir.join(format!("{name}.o"));
    let out = output(shoal().args(["cc", "-O2", "-c"]).arg(&c).arg("-o").arg(&o));
    assert!(out.status.success(), "shoal cc {name}: {}", stderr(&out));
    o
}

/// Two images of the same app, one per version of library `ver`.
fn two_images(dir: &Path) -> [PathBuf; 2] {
    let app = cc_object(APP, "app", dir);
    let mut out = Vec::new();
    for (v, src) in [("1", LIB_V1), ("2", LIB_V2)] {
        let lib = cc_object(src, &format!("ver{v}"), dir);
        let image = dir.join(format!("app-v{v}"));
        let o = output(shoal().args(["build", "--layout", "aligned", "-o"]).arg(&image).arg("--lib").arg(format!("ver@{v}={}", lib.display())).arg(&app));
        assert!(o.status.success(), "shoal build: {}", stderr(&o));
        out.push(image);
    }
    [out[0].clone(), out[1].clone()]
}

fn pool_dir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("shoal-pool-test-").tempdir_in("/dev/shm").unwrap()
}

/// Starts an instance; returns once it printed `ready`.
fn start(image: &Path, mode: &str, pool: &Path) -> Child {
    let log = image.with_extension(format!("{mode}.log"));
    let f = std::fs::File::create(&log).unwrap();
    let child =
        shoal().args(["run", "--mem", "32M", "--mem-mode", mode]).arg(image).env("SHOAL_POOL_DIR", pool).stdout(f).stderr(Stdio::null()).spawn().unwrap();
    let t0 = Instant::now();
    while !std::fs::read_to_string(&log).unwrap_or_default().contains("ready") {
        assert!(t0.elapsed() < Duration::from_secs(10), "instance of {} ({mode}) did not start", image.display());
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// The spt child (the guest process) of a `shoal run`.
fn guest_pid(c: &Child) -> u32 {
    let kids = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", c.id())).unwrap();
    kids.split_whitespace().next().expect("no guest process").parse().unwrap()
}

/// (PSS of the guest's memory, Shared_Clean + Shared_Dirty of its pool
/// mappings, per pool file) in KiB.
fn guest_memory(pid: u32, pool: &Path) -> (u64, u64, Vec<(String, u64)>) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let (mut pss, mut shared) = (0, 0);
    let mut files = Vec::new();
    let (mut guest, mut in_pool, mut name) = (false, false, String::new());
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            let start = u64::from_str_radix(first.split('-').next().unwrap(), 16).unwrap_or(u64::MAX);
            guest = start < 1 << 32; // guest memory lies below 4 GiB on spt
            in_pool = line.contains(pool.to_str().unwrap());
            name = line.split_whitespace().last().unwrap_or("").to_string();
        } else if let Some(v) = line.strip_prefix("Pss:") {
            if guest {
                pss += v.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap();
            }
        } else if let Some(v) = line.strip_prefix("Shared_Clean:").or_else(|| line.strip_prefix("Shared_Dirty:")) {
            // tmpfs pages count as dirty: Shared_Dirty for /dev/shm files.
            let kib: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap();
            if in_pool {
                shared += kib;
                if kib > 0 {
                    files.push((name.rsplit('/').next().unwrap_or("").to_string(), kib));
                }
            }
        }
    }
    (pss, shared, files)
}

fn measure(images: &[PathBuf; 2], mode: &str, pool: &Path) -> (u64, u64, Vec<(String, u64)>) {
    let mut a = start(&images[0], mode, pool);
    let mut b = start(&images[1], mode, pool);
    let (pa, sa, fa) = guest_memory(guest_pid(&a), pool);
    let (pb, sb, _) = guest_memory(guest_pid(&b), pool);
    for c in [&mut a, &mut b] {
        let _ = c.kill();
        let _ = c.wait();
    }
    (pa + pb, sa.min(sb), fa)
}

#[test]
fn instances_of_two_versions_share_common_library_frames() {
    if !shoal_testkit::need(&["shm"]) {
        return;
    }
    let dir = scratch();
    let images = two_images(dir.path());
    let pool = pool_dir();
    let list = || -> std::collections::BTreeSet<String> {
        std::fs::read_dir(pool.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
    };
    let mut after = Vec::new();
    for img in &images {
        let o = output(shoal().args(["pool", "add"]).arg(img).env("SHOAL_POOL_DIR", pool.path()));
        assert!(o.status.success(), "shoal pool add: {}", stderr(&o));
        after.push(list());
    }
    // A shell glob also names the manifests: each stands for its image, once.
    let manifest = format!("{}.manifest.json", images[0].display());
    let o = output(shoal().args(["pool", "add"]).arg(&images[0]).arg(&manifest).env("SHOAL_POOL_DIR", pool.path()));
    assert!(o.status.success(), "shoal pool add IMAGE MANIFEST: {}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 1, "{}", stdout(&o));
    let files = list();
    assert_eq!(files, after[1], "adding an image twice wrote new files");
    // Runs of pages of each library version and region kind: the second
    // image adds only its own version of `ver` and the app pages that call
    // into it (the `aligned` layout has no trampolines); the kernel's and
    // libc's files are the first image's.
    assert!(files.iter().any(|f| f.starts_with("ver@1-text-")) && files.iter().any(|f| f.starts_with("ver@2-text-")), "{files:?}");
    let added: Vec<&String> = after[1].difference(&after[0]).collect();
    assert!(added.iter().any(|f| f.starts_with("ver@2-")), "the second image added {added:?}");
    assert!(added.iter().all(|f| f.starts_with("ver@2-") || f.starts_with("app@")), "the second image added {added:?}");
    assert!(files.iter().any(|f| f.starts_with("libc@") && f.contains("-text-")), "{files:?}");
    assert!(files.iter().any(|f| f.starts_with("libc@") && f.contains("-rodata-")), "{files:?}");
    for f in &files {
        let md = std::fs::metadata(pool.path().join(f)).unwrap();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&md.permissions()) & 0o777, 0o444, "{f}");
    }

    let (copy_pss, copy_shared, _) = measure(&images, "copy", pool.path());
    let (pool_pss, pool_shared, pool_files) = measure(&images, "pool", pool.path());
    eprintln!("guest image PSS of 2 instances: copy {copy_pss} KiB, pool {pool_pss} KiB; pool frames shared: {pool_shared} KiB ({pool_files:?})");
    assert_eq!(copy_shared, 0);
    assert!(pool_shared > 0, "the pool mappings are not shared: {pool_files:?}");
    // The common libraries' frames are counted half in each instance.
    assert!(pool_pss < copy_pss, "pool {pool_pss} KiB is not below copy {copy_pss} KiB");
}

#[test]
fn a_tampered_pool_file_is_refused_unless_fallback_is_asked_for() {
    let dir = scratch();
    let images = two_images(dir.path());
    let pool = pool_dir();
    let o = output(shoal().args(["pool", "add"]).arg(&images[0]).env("SHOAL_POOL_DIR", pool.path()));
    assert!(o.status.success(), "{}", stderr(&o));
    let libc = std::fs::read_dir(pool.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("libc@") && p.to_string_lossy().contains("-text-"))
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&libc, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut bytes = std::fs::read(&libc).unwrap();
    bytes[10] ^= 0xff;
    std::fs::write(&libc, &bytes).unwrap();
    std::fs::set_permissions(&libc, std::fs::Permissions::from_mode(0o444)).unwrap();
    let run = |extra: &[&str]| {
        let mut c: Command = shoal();
        c.args(["run", "--mem", "32M", "--mem-mode", "pool"]).args(extra).arg(&images[0]).env("SHOAL_POOL_DIR", pool.path());
        c
    };
    // Refused: the app would sleep 30 s, so a refusal is what returns fast.
    let o = output(&mut run(&[]));
    assert_clean_error(&o, "has been tampered with");
    // Truncated.
    std::fs::set_permissions(&libc, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(&libc, &bytes[..4096]).unwrap();
    std::fs::set_permissions(&libc, std::fs::Permissions::from_mode(0o444)).unwrap();
    let o = output(&mut run(&[]));
    assert_clean_error(&o, "is truncated or corrupt");
    // With --pool-fallback it runs in copy mode, with a warning.
    let mut child = run(&["--pool-fallback"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    assert!(stdout(&o).contains("ready 2"), "{}", stdout(&o));
    assert!(stderr(&o).contains("falling back to memory mode copy"), "{}", stderr(&o));
}

/// An image is shipped without its debug information, which stays beside
/// it (`IMAGE.debug`, linked from the image), and a glob naming both (as
/// `shoal pool add out/*` does) names the image once.
#[test]
fn images_keep_their_debug_information_beside_them() {
    let dir = scratch();
    let [image, _] = two_images(dir.path());
    let debug = dir.path().join("app-v1.debug");
    let sections = |p: &Path| output(Command::new("readelf").arg("-S").arg(p)).stdout;
    let shipped = String::from_utf8_lossy(&sections(&image)).to_string();
    assert!(!shipped.contains(".debug_info"), "the image carries DWARF: {shipped}");
    assert!(shipped.contains(".gnu_debuglink"), "no link to the debug file: {shipped}");
    assert!(String::from_utf8_lossy(&sections(&debug)).contains(".debug_info"), "no DWARF beside the image");
    assert!(std::fs::metadata(&image).unwrap().len() < std::fs::metadata(&debug).unwrap().len(), "DWARF is most of a linked image");
    let pool = pool_dir();
    let manifest = format!("{}.manifest.json", image.display());
    let o = output(shoal().args(["pool", "add"]).arg(&image).arg(&debug).arg(&manifest).env("SHOAL_POOL_DIR", pool.path()));
    assert!(o.status.success(), "shoal pool add IMAGE IMAGE.debug MANIFEST: {}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 1, "{}", stdout(&o));
}
