//! The log's property test: random sequences of vfs and ramfs calls, the
//! state rebuilt from the log at random points (as a reboot does), and
//! what the program can observe compared — exactly right after the
//! rebuild, and (times aside) with a run that was never rebuilt at every
//! step after it.

use super::*;
use crate::abi::*;
use shoal_plat::{Args, Errno};
use std::ffi::CString;
use std::fmt::Write as _;

fn args(v: &[u64]) -> Args {
    let mut a = [0u64; 6];
    a[..v.len()].copy_from_slice(v);
    Args(a)
}

/// A state as the boot builds it, with the log started over it.
fn boot() -> (Vfs, Log) {
    crate::tests::boot_plat();
    record_clock();
    let mut v = Vfs::new(crate::empty_root());
    let log = Log::new(&mut v, take_clock());
    (v, log)
}

/// What a reboot does: the boot state built again with the boot's clock
/// readings, the log replayed over it.
fn rebuild(log: &mut Log) -> Vfs {
    replay_clock(core::mem::take(&mut log.boot_clock));
    let mut v = Vfs::new(crate::empty_root());
    log.boot_clock = take_clock();
    log.replay(&mut v, None).unwrap();
    v
}

/// Everything the program can observe: the tree (walked in directory
/// order, with every attribute and the contents), files reachable only
/// through descriptors, the descriptor table, the working directory,
/// umask, pipes and locks. `times`: include the file times.
fn observe(v: &Vfs, times: bool) -> String {
    let fs = &v.fs;
    let mut out = String::new();
    let node = |out: &mut String, ino: u64| {
        let a = fs.attr(ino).unwrap();
        let _ = write!(
            out,
            " ino {} mode {:o} nlink {} refs {:?} size {} blocks {} uid {} gid {}",
            a.ino,
            a.mode,
            a.nlink,
            fs.refs(ino),
            a.size,
            a.blocks,
            a.uid,
            a.gid
        );
        if times {
            let _ = write!(out, " {:?} {:?} {:?} {:?}", a.atime, a.mtime, a.ctime, a.btime);
        }
        if let Ok(d) = fs.file_data(ino) {
            let mut b = vec![0u8; d.size() as usize];
            d.read(0, &mut b);
            let _ = write!(out, " data {:?}", String::from_utf8_lossy(&b));
        }
        if let Ok(t) = fs.readlink(ino) {
            let _ = write!(out, " -> {:?}", String::from_utf8_lossy(t));
        }
    };
    let mut todo = vec![(String::from(""), fs.root())];
    while let Some((path, dir)) = todo.pop() {
        let mut entries = Vec::new();
        fs.readdir(dir, 0, |pos, name, ino, ty| {
            entries.push((pos, String::from_utf8_lossy(name).into_owned(), ino, ty));
            true
        })
        .unwrap();
        for (pos, name, ino, ty) in entries {
            if name == "." || name == ".." {
                continue;
            }
            let p = format!("{path}/{name}");
            let _ = write!(out, "\n{p} pos {pos} type {ty}");
            node(&mut out, ino);
            if ty == 4 {
                todo.push((p, ino));
            }
        }
    }
    for (fd, e) in v.fds.iter().enumerate() {
        let Some(e) = e else { continue };
        let o = v.ofds[e.ofd].as_ref().unwrap();
        let _ = write!(out, "\nfd {fd} {e:?} {o:?}");
        if let Some(ino) = o.target.ino() {
            node(&mut out, ino);
        }
    }
    let _ = write!(out, "\ncwd {} umask {:o} pipes {:?} locks {:?} next ino {}", v.cwd, v.umask, v.pipes, v.locks, v.fs.next_ino());
    out
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// "/etc/hosts" and "/home" exist at boot: removing them leaves a
// tombstone in the log (`Change::Freed` of a boot inode).
const PATHS: [&str; 8] = ["/tmp/a", "/tmp/b", "/tmp/d/c", "/tmp/d/e", "/x", "/tmp/d/sub/f", "a", "/etc/hosts"];
const DIRS: [&str; 4] = ["/tmp/d", "/tmp/d/sub", "/tmp/e", "/home"];

/// One random call (the same `r` state gives the same call on any
/// state), with its result.
fn step(v: &mut Vfs, r: &mut Rng) -> Result<u64, Errno> {
    let c = |s: &str| CString::new(s).unwrap();
    let path = c(PATHS[r.below(PATHS.len() as u64) as usize]);
    let path2 = c(PATHS[r.below(PATHS.len() as u64) as usize]);
    let dir = c(DIRS[r.below(DIRS.len() as u64) as usize]);
    let fd = r.below(9);
    let fd2 = r.below(9);
    let n = r.below(6000);
    let data: Vec<u8> = (0..n).map(|i| b'a' + ((i * 7 + n) % 26) as u8).collect();
    let at = AT_FDCWD as i64 as u64;
    let p = |s: &CString| s.as_ptr() as u64;
    match r.below(25) {
        0..=2 => {
            let flags =
                [O_RDWR | O_CREAT, O_WRONLY | O_CREAT | O_TRUNC, O_RDONLY, O_RDWR | O_APPEND | O_CREAT, O_RDWR | O_CREAT | O_CLOEXEC][r.below(5) as usize];
            v.openat(&args(&[at, p(&path), flags as u64, 0o640]))
        }
        3 | 4 => v.write(&args(&[fd, data.as_ptr() as u64, n])),
        5 => v.pwrite64(&args(&[fd, data.as_ptr() as u64, n, r.below(20000)])),
        6 => {
            let mut b = vec![0u8; n as usize];
            v.read(&args(&[fd, b.as_mut_ptr() as u64, n]))
        }
        7 => v.lseek(&args(&[fd, r.below(10000), r.below(3)])),
        8 => v.close(&args(&[fd])),
        9 => v.dup(&args(&[fd])),
        10 => v.dup2(&args(&[fd, fd2])),
        11 => v.unlink(&args(&[p(&path)])),
        12 => v.rename(&args(&[p(&path), p(&path2)])),
        13 => v.mkdir(&args(&[p(&dir), 0o750])),
        14 => v.rmdir(&args(&[p(&dir)])),
        15 => v.ftruncate(&args(&[fd, r.below(9000)])),
        16 => v.fchmod(&args(&[fd, r.below(0o1000)])),
        17 => {
            if r.below(2) == 0 {
                v.symlink(&args(&[p(&path), p(&path2)]))
            } else {
                v.link(&args(&[p(&path), p(&path2)]))
            }
        }
        18 => v.fcntl(&args(&[fd, [F_SETFL, F_SETFD][r.below(2) as usize] as u64, [(O_NONBLOCK | O_APPEND) as u64, 0, FD_CLOEXEC][r.below(3) as usize]])),
        19 => {
            let mut fds = [0i32; 2];
            v.pipe2(&args(&[fds.as_mut_ptr() as u64, 0]))?;
            v.write(&args(&[fds[1] as u64, data.as_ptr() as u64, n.min(3000)]))
        }
        20 => {
            v.umask(&args(&[r.below(0o777)]))?;
            v.chdir(&args(&[p(&dir)]))
        }
        21 => v.flock(&args(&[fd, [2 | 4, 1 | 4, 8][r.below(3) as usize]])), // LOCK_EX|NB, LOCK_SH|NB, LOCK_UN
        // Record locks, POSIX and OFD, over a few overlapping ranges;
        // sometimes two in one call.
        22 | 23 => {
            let lock = |v: &mut Vfs, r: &mut Rng| {
                let fl = Flock {
                    l_type: [F_RDLCK, F_WRLCK, F_UNLCK][r.below(3) as usize],
                    l_whence: 0,
                    l_start: r.below(8) as i64 * 100,
                    l_len: r.below(5) as i64 * 100,
                    l_pid: 0,
                };
                let cmd = [F_SETLK, F_OFD_SETLK][r.below(2) as usize];
                v.fcntl(&args(&[fd, cmd as u64, &fl as *const Flock as u64]))
            };
            let a = lock(v, r);
            if r.below(4) == 0 {
                lock(v, r)
            } else {
                a
            }
        }
        _ => {
            if r.below(2) == 0 {
                v.fchown(&args(&[fd, r.below(3), [r.below(3), u32::MAX as u64][r.below(2) as usize]]))
            } else {
                v.chmod(&args(&[p(&path), r.below(0o10000)]))
            }
        }
    }
}

/// Every inode image the log holds is what exporting the live inode
/// gives right now: the changes the log applies to its images without
/// exporting them (a write in place, a reference count, a directory
/// entry added or removed) leave them exactly as an export would —
/// checked after every call, where a rebuild at a random point would
/// catch a difference only if it lasted until then.
fn images_are_the_live_inodes(log: &Log, v: &Vfs, at: &str) {
    for (ino, e) in log.inodes.iter() {
        assert_eq!(e.image, v.fs.export(ino), "{at}: the log's image of inode {ino}");
    }
}

#[test]
fn replaying_the_log_rebuilds_exactly_the_state() {
    for seed in 1..=30u64 {
        let mut plain = boot().0;
        let (mut healed, mut log) = boot();
        let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let steps = 150 + r.below(150);
        let reboots: Vec<u64> = (0..3).map(|_| r.below(steps)).collect();
        for i in 0..steps {
            let state = r.next();
            let a = step(&mut plain, &mut Rng(state));
            let b = step(&mut healed, &mut Rng(state));
            // As `commit` does after every call: a call the quick check
            // calls quiet is not recorded, so a change it misses shows.
            if !changed_nothing(&log, &healed) {
                record_call(&mut log, &mut healed);
            }
            assert_eq!(a, b, "seed {seed} step {i}: the same call answers the same");
            images_are_the_live_inodes(&log, &healed, &format!("seed {seed} step {i}"));
            let mut flat = lock::Flat::default();
            healed.locks.flatten_into(&mut flat);
            assert_eq!(log.locks, flat, "seed {seed} step {i}: the log's copy of the locks");
            if reboots.contains(&i) {
                let before = observe(&healed, true);
                healed = rebuild(&mut log);
                assert_eq!(observe(&healed, true), before, "seed {seed}: rebuilt at step {i}");
            }
            assert_eq!(observe(&healed, false), observe(&plain, false), "seed {seed} step {i}");
        }
    }
}

/// Shrinking: closing a descriptor drops its entries, removing a file
/// made since boot drops its inode and its contents, so a loop of
/// open/write/close/unlink leaves the log as it found it.
#[test]
fn closed_sessions_and_removed_files_leave_nothing_in_the_log() {
    let (mut v, mut log) = boot();
    let name = CString::new("/tmp/session").unwrap();
    let at = AT_FDCWD as i64 as u64;
    let open = |v: &mut Vfs| v.openat(&args(&[at, name.as_ptr() as u64, (O_RDWR | O_CREAT) as u64, 0o600])).unwrap();
    // One round first: /tmp's entry is then in the log for good (its
    // times changed).
    // Recorded call by call, as in the loop, so the buffers of /tmp's
    // image and of the spare file handle have grown to what the loop
    // needs (its largest file: three pages).
    let fd = open(&mut v);
    log.record(&mut v);
    let most = vec![b'x'; 8999];
    v.write(&args(&[fd, most.as_ptr() as u64, most.len() as u64])).unwrap();
    log.record(&mut v);
    v.close(&args(&[fd])).unwrap();
    log.record(&mut v);
    v.unlink(&args(&[name.as_ptr() as u64])).unwrap();
    log.record(&mut v);
    let (bytes, entries) = (log.bytes(), log.entries());
    for i in 0..10_000u64 {
        let fd = open(&mut v);
        log.record(&mut v);
        let data = vec![b'x'; (i % 9000) as usize];
        v.write(&args(&[fd, data.as_ptr() as u64, data.len() as u64])).unwrap();
        log.record(&mut v);
        v.close(&args(&[fd])).unwrap();
        log.record(&mut v);
        v.unlink(&args(&[name.as_ptr() as u64])).unwrap();
        log.record(&mut v);
    }
    assert_eq!((log.bytes(), log.entries()), (bytes, entries));
    // Every call changed something, but the two empty writes (i = 0, 9000).
    assert_eq!(log.calls, 4 + 40_000 - 2);
}

/// The log's image of a written file is a second handle on the file's own
/// pages, not a copy: a file grown to 4 MiB costs the log a few bytes
/// per page, and the file rebuilt after a reboot has the same contents
/// in the very same pages (so shared mappings stay coherent).
#[test]
fn a_rebuilt_file_has_its_contents_in_the_same_pages_and_the_log_no_copy() {
    let (mut v, mut log) = boot();
    let name = CString::new("/tmp/big").unwrap();
    let at = AT_FDCWD as i64 as u64;
    let fd = v.openat(&args(&[at, name.as_ptr() as u64, (O_RDWR | O_CREAT) as u64, 0o600])).unwrap();
    log.record(&mut v);
    let empty = log.bytes();
    let chunk: Vec<u8> = (0..65536u32).map(|i| (i * 31 % 251) as u8).collect();
    for _ in 0..64 {
        assert_eq!(v.write(&args(&[fd, chunk.as_ptr() as u64, chunk.len() as u64])), Ok(chunk.len() as u64));
        log.record(&mut v);
    }
    let ino = v.ofds[v.fds[fd as usize].as_ref().unwrap().ofd].as_ref().unwrap().target.ino().unwrap();
    assert_eq!(v.fs.size(ino), Ok(4 << 20));
    let grown = log.bytes() - empty;
    // 1024 pages: their references, not their 4 MiB.
    assert!(grown <= 1024 * 64, "the log grew by {grown} bytes for a 4 MiB file");
    let pages: Vec<u64> = (0..1024u64).map(|p| v.fs.page_addr(ino, p * 4096).unwrap().unwrap().0).collect();
    let before = observe(&v, true);
    let mut v = rebuild(&mut log);
    assert_eq!(observe(&v, true), before);
    let after: Vec<u64> = (0..1024u64).map(|p| v.fs.page_addr(ino, p * 4096).unwrap().unwrap().0).collect();
    assert_eq!(after, pages, "the rebuilt file has the same pages");
}

/// A call that fails half-way through a write (the state is abandoned
/// before the log took the call in) leaves bytes in the file's pages and
/// may have grown the file; the rebuilt file has the logged size, zeros
/// past it, and the retried `O_APPEND` write lands where the first one
/// should have. A truncation that failed half-way loses no page: the log
/// still holds the pages it dropped.
#[test]
fn a_write_or_truncate_cut_short_by_a_failure_is_undone_to_the_logged_size() {
    let (mut v, mut log) = boot();
    let name = CString::new("/tmp/app").unwrap();
    let at = AT_FDCWD as i64 as u64;
    let fd = v.openat(&args(&[at, name.as_ptr() as u64, (O_RDWR | O_CREAT | O_APPEND) as u64, 0o600])).unwrap();
    let head = vec![b'h'; 5000];
    v.write(&args(&[fd, head.as_ptr() as u64, head.len() as u64])).unwrap();
    log.record(&mut v);
    let logged = observe(&v, true);
    // The failed call: its bytes reach the pages, the log never sees it.
    let tail = vec![b't'; 6000];
    v.write(&args(&[fd, tail.as_ptr() as u64, tail.len() as u64])).unwrap();
    let mut v = rebuild(&mut log);
    assert_eq!(observe(&v, true), logged, "the rebuilt file is the logged one");
    // The retry.
    v.write(&args(&[fd, tail.as_ptr() as u64, tail.len() as u64])).unwrap();
    log.record(&mut v);
    let ino = v.ofds[v.fds[fd as usize].as_ref().unwrap().ofd].as_ref().unwrap().target.ino().unwrap();
    let mut all = vec![0u8; 20000];
    let n = v.fs.file_data(ino).unwrap().read(0, &mut all);
    assert_eq!(n, 11000);
    assert!(all[..5000].iter().all(|&b| b == b'h') && all[5000..11000].iter().all(|&b| b == b't'));
    // A truncation cut short (at a page boundary: the tail of a partial
    // last page would be zeroed in place, see the module documentation).
    let logged = observe(&v, true);
    v.ftruncate(&args(&[fd, 4096])).unwrap();
    let v = rebuild(&mut log);
    assert_eq!(observe(&v, true), logged, "the pages the truncation dropped are back");
}

/// The log-shrink threshold (`--log-shrink`, VampOS's Table IV): closed
/// sessions' records wait until the threshold is reached, then go
/// together; at 1 (the default) they never wait; `never` keeps them all.
/// What a rebuild restores does not depend on it.
#[test]
fn closed_sessions_wait_for_the_shrink_threshold() {
    let name = CString::new("/tmp/t").unwrap();
    let at = AT_FDCWD as i64 as u64;
    let mut seen = Vec::new();
    for threshold in [1u32, 10, 100, u32::MAX] {
        let (mut v, mut log) = boot();
        log.shrink_at = threshold;
        let mut most = 0;
        for _ in 0..250 {
            let fd = v.openat(&args(&[at, name.as_ptr() as u64, (O_RDWR | O_CREAT) as u64, 0o600])).unwrap();
            log.record(&mut v);
            v.close(&args(&[fd])).unwrap();
            log.record(&mut v);
            most = most.max(log.closed.len());
        }
        let pending = log.closed.len();
        match threshold {
            1 => assert_eq!((most, log.shrinks), (0, 0)),
            u32::MAX => assert_eq!((pending, log.shrinks), (250, 0)),
            n => {
                assert_eq!(most, n as usize - 1, "dropped when the threshold is reached");
                assert_eq!(log.shrinks, 250 / n as u64);
                assert_eq!(pending, 250 % n as usize);
            }
        }
        let before = observe(&v, true);
        let v = rebuild(&mut log);
        assert_eq!(observe(&v, true), before);
        seen.push(log.bytes());
    }
    assert!(seen[0] < seen[1] && seen[1] < seen[2] && seen[2] < seen[3], "{seen:?}");
}

/// A page first handed to a shared mapping (a hole made the file's own)
/// is in the log's handle too: what the program stored through the
/// mapping is in the rebuilt file, in the same page.
#[test]
fn a_page_made_for_a_shared_mapping_survives_a_rebuild() {
    let (mut v, mut log) = boot();
    let name = CString::new("/tmp/mapped").unwrap();
    let at = AT_FDCWD as i64 as u64;
    let fd = v.openat(&args(&[at, name.as_ptr() as u64, (O_RDWR | O_CREAT) as u64, 0o600])).unwrap();
    v.ftruncate(&args(&[fd, 3 * 4096])).unwrap();
    log.record(&mut v);
    let ino = v.ofds[v.fds[fd as usize].as_ref().unwrap().ofd].as_ref().unwrap().target.ino().unwrap();
    let (page, _) = v.fs.page_addr(ino, 2 * 4096 + 5).unwrap().unwrap();
    log.record(&mut v);
    // SAFETY: the file's own page, as a shared mapping would map it.
    unsafe { *((page + 7) as *mut u8) = b'm' };
    let mut v = rebuild(&mut log);
    assert_eq!(v.fs.page_addr(ino, 2 * 4096).unwrap().unwrap().0, page, "the same page");
    let mut b = [0u8; 1];
    v.fs.file_data(ino).unwrap().read(2 * 4096 + 7, &mut b);
    assert_eq!(&b, b"m");
}
