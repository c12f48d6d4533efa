//! Unit tests of the file system (host only).

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};

static CLOCK: AtomicU64 = AtomicU64::new(1_700_000_000_000_000_000);

/// A test clock: every reading is one microsecond later.
fn clock() -> u64 {
    CLOCK.fetch_add(1000, Ordering::Relaxed)
}

fn archive() -> &'static [u8] {
    let dir = std::env::temp_dir().join(format!("shoal-ramfs-test-{}-{:?}", std::process::id(), std::thread::current().id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("etc/sub")).unwrap();
    std::fs::write(dir.join("etc/motd"), b"hello\n").unwrap();
    std::fs::write(dir.join("big"), vec![3u8; 10000]).unwrap();
    std::os::unix::fs::symlink("etc/motd", dir.join("link")).unwrap();
    let bytes = shoal_archive::pack_dir(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    Box::leak(bytes.into_boxed_slice())
}

fn names(fs: &Fs, dir: Ino) -> Vec<String> {
    let mut v = Vec::new();
    fs.readdir(dir, 0, |_, n, _, _| {
        v.push(String::from_utf8(n.to_vec()).unwrap());
        true
    })
    .unwrap();
    v
}

#[test]
fn loads_archive_without_copying() {
    let bytes = archive();
    let copy = bytes.to_vec();
    let mut fs = Fs::from_archive(bytes, clock).unwrap();
    let etc = fs.lookup(ROOT_INO, b"etc").unwrap();
    let motd = fs.lookup(etc, b"motd").unwrap();
    let a = fs.attr(motd).unwrap();
    assert_eq!(a.ftype, FileType::Regular);
    assert_eq!(a.size, 6);
    assert_eq!(fs.attr(etc).unwrap().nlink, 3);
    assert_eq!(fs.attr(ROOT_INO).unwrap().nlink, 3);
    let link = fs.lookup(ROOT_INO, b"link").unwrap();
    assert_eq!(fs.readlink(link).unwrap(), b"etc/motd");
    let big = fs.lookup(ROOT_INO, b"big").unwrap();
    assert_eq!(fs.file_data(big).unwrap().owned_pages(), 0);
    // The file's bytes are the archive's own bytes.
    let mut b = [0u8; 6];
    fs.read(motd, 0, &mut b).unwrap();
    assert_eq!(&b, b"hello\n");
    // Writing copies one page and never touches the archive.
    fs.write(big, 5000, b"zz").unwrap();
    assert_eq!(fs.file_data(big).unwrap().owned_pages(), 1);
    assert_eq!(fs.file_data(big).unwrap().base_pages(), 2);
    fs.write(motd, 0, b"J").unwrap();
    fs.truncate(motd, 3).unwrap();
    assert_eq!(bytes, &copy[..]);
    let mut b = [0u8; 8];
    assert_eq!(fs.read(motd, 0, &mut b).unwrap(), 3);
    assert_eq!(&b[..3], b"Jel");
    let mut b = vec![0u8; 10000];
    fs.read(big, 0, &mut b).unwrap();
    assert_eq!(&b[4999..5003], &[3, b'z', b'z', 3]);
}

#[test]
fn corrupt_archive_is_refused() {
    let mut b = archive().to_vec();
    b[0] ^= 1;
    assert!(Fs::from_archive(Box::leak(b.into_boxed_slice()), clock).is_err());
}

#[test]
fn create_unlink_and_errors() {
    let mut fs = Fs::new(clock);
    let f = fs.create_file(ROOT_INO, b"a", 0o644).unwrap();
    assert_eq!(fs.create_file(ROOT_INO, b"a", 0o644), Err(Errno::EEXIST));
    assert_eq!(fs.mkdir(ROOT_INO, b"a", 0o755), Err(Errno::EEXIST));
    assert_eq!(fs.lookup(f, b"x"), Err(Errno::ENOTDIR));
    assert_eq!(fs.lookup(ROOT_INO, b"nope"), Err(Errno::ENOENT));
    assert_eq!(fs.create_file(ROOT_INO, &[b'n'; 256], 0o644), Err(Errno::ENAMETOOLONG));
    let d = fs.mkdir(ROOT_INO, b"d", 0o755).unwrap();
    assert_eq!(fs.unlink(ROOT_INO, b"d"), Err(Errno::EISDIR));
    assert_eq!(fs.rmdir(ROOT_INO, b"a"), Err(Errno::ENOTDIR));
    fs.create_file(d, b"x", 0o600).unwrap();
    assert_eq!(fs.rmdir(ROOT_INO, b"d"), Err(Errno::ENOTEMPTY));
    fs.unlink(d, b"x").unwrap();
    fs.rmdir(ROOT_INO, b"d").unwrap();
    assert_eq!(fs.attr(ROOT_INO).unwrap().nlink, 2);
    assert_eq!(fs.attr(d), Err(Errno::ENOENT));
    // An open file outlives its name.
    fs.get_ref(f);
    fs.write(f, 0, b"data").unwrap();
    fs.unlink(ROOT_INO, b"a").unwrap();
    assert_eq!(fs.attr(f).unwrap().nlink, 0);
    let mut b = [0u8; 4];
    assert_eq!(fs.read(f, 0, &mut b).unwrap(), 4);
    fs.put_ref(f);
    assert_eq!(fs.attr(f), Err(Errno::ENOENT));
    assert_eq!(fs.inode_count(), 1);
}

#[test]
fn removed_directory_stays_usable_but_empty() {
    let mut fs = Fs::new(clock);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755).unwrap();
    fs.get_ref(d);
    fs.rmdir(ROOT_INO, b"d").unwrap();
    assert_eq!(fs.create_file(d, b"x", 0o644), Err(Errno::ENOENT));
    assert_eq!(fs.lookup(d, b"x"), Err(Errno::ENOENT));
    assert_eq!(fs.lookup(d, b"..").unwrap(), ROOT_INO);
    assert!(fs.readdir(d, 0, |_, _, _, _| true).is_err());
    fs.put_ref(d);
    assert_eq!(fs.inode_count(), 1);
}

#[test]
fn hard_links() {
    let mut fs = Fs::new(clock);
    let f = fs.create_file(ROOT_INO, b"a", 0o644).unwrap();
    fs.link(ROOT_INO, b"b", f).unwrap();
    assert_eq!(fs.attr(f).unwrap().nlink, 2);
    let d = fs.mkdir(ROOT_INO, b"d", 0o755).unwrap();
    assert_eq!(fs.link(ROOT_INO, b"e", d), Err(Errno::EPERM));
    fs.unlink(ROOT_INO, b"a").unwrap();
    assert_eq!(fs.lookup(ROOT_INO, b"b").unwrap(), f);
    assert_eq!(fs.attr(f).unwrap().nlink, 1);
}

#[test]
fn rename_semantics() {
    let mut fs = Fs::new(clock);
    let r = ROOT_INO;
    let a = fs.create_file(r, b"a", 0o644).unwrap();
    let b = fs.create_file(r, b"b", 0o644).unwrap();
    let d = fs.mkdir(r, b"d", 0o755).unwrap();
    let e = fs.mkdir(r, b"e", 0o755).unwrap();
    let no = RenameFlags::default();
    // Over an existing file: the old target is gone.
    fs.rename(r, b"a", r, b"b", no).unwrap();
    assert_eq!(fs.lookup(r, b"b").unwrap(), a);
    assert_eq!(fs.lookup(r, b"a"), Err(Errno::ENOENT));
    assert_eq!(fs.attr(b), Err(Errno::ENOENT));
    // File over a directory and back.
    assert_eq!(fs.rename(r, b"b", r, b"d", no), Err(Errno::EISDIR));
    assert_eq!(fs.rename(r, b"d", r, b"b", no), Err(Errno::ENOTDIR));
    // A directory into itself.
    assert_eq!(fs.rename(r, b"d", d, b"x", no), Err(Errno::EINVAL));
    // Directory moves: link counts and `..` follow.
    fs.rename(r, b"e", d, b"e2", no).unwrap();
    assert_eq!(fs.attr(r).unwrap().nlink, 3);
    assert_eq!(fs.attr(d).unwrap().nlink, 3);
    assert_eq!(fs.lookup(e, b"..").unwrap(), d);
    // Over a non-empty directory, then over an empty one.
    let f = fs.mkdir(r, b"f", 0o755).unwrap();
    assert_eq!(fs.rename(r, b"f", r, b"d", no), Err(Errno::ENOTEMPTY));
    fs.rename(d, b"e2", r, b"f", no).unwrap();
    assert_eq!(fs.attr(f), Err(Errno::ENOENT));
    assert_eq!(fs.lookup(r, b"f").unwrap(), e);
    assert_eq!(fs.attr(d).unwrap().nlink, 2);
    assert_eq!(fs.attr(r).unwrap().nlink, 4);
    // NOREPLACE and EXCHANGE.
    let nr = RenameFlags { noreplace: true, exchange: false };
    assert_eq!(fs.rename(r, b"b", r, b"d", nr), Err(Errno::EEXIST));
    let ex = RenameFlags { noreplace: false, exchange: true };
    fs.rename(r, b"b", d, b"nothing", nr).unwrap();
    assert_eq!(fs.rename(r, b"f", r, b"b", ex), Err(Errno::ENOENT));
    fs.rename(r, b"f", d, b"nothing", ex).unwrap();
    assert_eq!(fs.lookup(r, b"f").unwrap(), a);
    assert_eq!(fs.lookup(d, b"nothing").unwrap(), e);
    assert_eq!(fs.lookup(e, b"..").unwrap(), d);
    assert_eq!(fs.attr(r).unwrap().nlink, 3);
    assert_eq!(fs.attr(d).unwrap().nlink, 3);
    // Same inode under two names: nothing happens.
    fs.link(r, b"g", a).unwrap();
    fs.rename(r, b"f", r, b"g", no).unwrap();
    assert_eq!(fs.lookup(r, b"f").unwrap(), a);
    assert_eq!(fs.rename(r, b".", r, b"x", no), Err(Errno::EBUSY));
}

#[test]
fn readdir_positions_are_stable() {
    let mut fs = Fs::new(clock);
    for n in ["a", "b", "c", "d"] {
        fs.create_file(ROOT_INO, n.as_bytes(), 0o644).unwrap();
    }
    assert_eq!(names(&fs, ROOT_INO), [".", "..", "a", "b", "c", "d"]);
    // Read three entries, remember the position.
    let mut pos = 0;
    let mut seen = Vec::new();
    fs.readdir(ROOT_INO, 0, |next, n, _, _| {
        if seen.len() == 3 {
            return false;
        }
        seen.push(n.to_vec());
        pos = next;
        true
    })
    .unwrap();
    assert_eq!(seen, [b".".to_vec(), b"..".to_vec(), b"a".to_vec()]);
    // Remove one already seen and one not yet seen, add a new one.
    fs.unlink(ROOT_INO, b"a").unwrap();
    fs.unlink(ROOT_INO, b"c").unwrap();
    fs.create_file(ROOT_INO, b"e", 0o644).unwrap();
    let mut rest = Vec::new();
    fs.readdir(ROOT_INO, pos, |_, n, _, t| {
        assert_eq!(t, 8);
        rest.push(String::from_utf8(n.to_vec()).unwrap());
        true
    })
    .unwrap();
    assert_eq!(rest, ["b", "d", "e"]);
}

#[test]
fn times_move() {
    let mut fs = Fs::new(clock);
    let f = fs.create_file(ROOT_INO, b"a", 0o644).unwrap();
    let t0 = fs.attr(f).unwrap();
    fs.write(f, 0, b"x").unwrap();
    let t1 = fs.attr(f).unwrap();
    assert!(t1.mtime > t0.mtime && t1.ctime > t0.ctime);
    assert!(fs.attr(ROOT_INO).unwrap().mtime < t1.mtime);
    fs.set_times(f, Some(Timespec { sec: -5, nsec: 7 }), None).unwrap();
    let t2 = fs.attr(f).unwrap();
    assert_eq!(t2.atime, Timespec { sec: -5, nsec: 7 });
    assert_eq!(t2.mtime, t1.mtime);
    assert!(t2.ctime > t1.ctime);
}

/// A read moves the access time the way `relatime` does (only when it is
/// not newer than the modification and change times, or a day old), and
/// a read of what is not a regular file fails without moving it.
#[test]
fn reads_move_the_access_time_as_relatime_does() {
    let mut fs = Fs::new(clock);
    let f = fs.create_file(ROOT_INO, b"a", 0o644).unwrap();
    fs.write(f, 0, b"xyz").unwrap();
    let mut b = [0u8; 8];
    assert_eq!(fs.read(f, 1, &mut b).unwrap(), 2);
    assert_eq!(&b[..2], b"yz");
    let a1 = fs.attr(f).unwrap();
    assert!(a1.atime > a1.mtime, "the first read after a write moves it");
    assert_eq!(fs.read(f, 0, &mut b).unwrap(), 3);
    assert_eq!(fs.read(f, 3, &mut b).unwrap(), 0, "at the end");
    assert_eq!(fs.attr(f).unwrap().atime, a1.atime, "later reads do not");
    // A day later (the clock only moves forward, so other tests are
    // unaffected).
    CLOCK.fetch_add(24 * 3600 * 1_000_000_000, Ordering::Relaxed);
    fs.read(f, 0, &mut b).unwrap();
    assert!(fs.attr(f).unwrap().atime.sec >= a1.atime.sec + 24 * 3600, "a day-old access time moves");
    let d = fs.attr(ROOT_INO).unwrap();
    assert_eq!(fs.read(ROOT_INO, 0, &mut b), Err(Errno::EISDIR));
    assert_eq!(fs.read(ROOT_INO + 1000, 0, &mut b), Err(Errno::ENOENT));
    assert_eq!(fs.attr(ROOT_INO).unwrap().atime, d.atime);
}

#[test]
fn fifos_and_character_devices() {
    let mut fs = Fs::new(clock);
    let f = fs.mkfifo(ROOT_INO, b"p", 0o600).unwrap();
    let d = fs.mkchardev(ROOT_INO, b"null", 0o666, makedev(1, 3)).unwrap();
    assert_eq!(fs.attr(f).unwrap().mode, S_IFIFO | 0o600);
    let a = fs.attr(d).unwrap();
    assert_eq!((a.mode, a.rdev, a.size), (S_IFCHR | 0o666, 0x103, 0));
    assert_eq!(makedev(8, 1), 0x801);
    assert_eq!(makedev(0x1234, 0x56789), 0x0000_1000_5672_3489);
    assert_eq!(fs.read(d, 0, &mut [0; 4]), Err(Errno::EINVAL));
    assert_eq!(fs.mkfifo(ROOT_INO, b"p", 0o600), Err(Errno::EEXIST));
    let mut types = Vec::new();
    fs.readdir(ROOT_INO, 0, |_, _, _, t| {
        types.push(t);
        true
    })
    .unwrap();
    assert!(types.contains(&1) && types.contains(&2), "DT_FIFO and DT_CHR: {types:?}");
    let anon = fs.create_unnamed_fifo();
    assert!(fs.is_unlinked(anon));
    fs.put_ref(anon);
    assert!(fs.attr(anon).is_err(), "freed with its last reference");
}

#[test]
fn pack_holds_the_current_tree_below_a_directory() {
    let mut fs = Fs::from_archive(archive(), clock).unwrap();
    let etc = fs.lookup(ROOT_INO, b"etc").unwrap();
    // Changed, new, deleted and renamed entries, a symlink, a FIFO.
    let motd = fs.lookup(etc, b"motd").unwrap();
    fs.write(motd, 0, b"HELLO").unwrap();
    let f = fs.create_file(etc, b"count", 0o640).unwrap();
    fs.write(f, 0, b"3\n").unwrap();
    let d = fs.mkdir(etc, b"d", 0o700).unwrap();
    let g = fs.create_file(d, b"g", 0o644).unwrap();
    fs.write(g, 100_000, b"end").unwrap();
    fs.rmdir(etc, b"sub").unwrap();
    fs.rename(etc, b"count", etc, b"counter", RenameFlags::default()).unwrap();
    fs.symlink(d, b"up", b"../motd").unwrap();
    fs.mkfifo(d, b"pipe", 0o600).unwrap();
    let bytes = fs.pack(etc).unwrap();
    let a = Archive::parse(&bytes).unwrap();
    let list: Vec<(String, Kind, u32, usize)> = a.entries().map(|e| (String::from_utf8(e.path.to_vec()).unwrap(), e.kind, e.mode, e.data.len())).collect();
    let want = [
        ("counter", Kind::File, 0o640, 2),
        ("d", Kind::Dir, 0o700, 0),
        ("d/g", Kind::File, 0o644, 100_003),
        ("d/up", Kind::Symlink, 0o777, 7),
        ("motd", Kind::File, 0o644, 6),
    ];
    let want: Vec<(String, Kind, u32, usize)> = want.iter().map(|&(p, k, m, n)| (p.to_string(), k, m, n)).collect();
    assert_eq!(list, want);
    assert_eq!(a.find(b"motd").unwrap().data, b"HELLO\n");
    assert_eq!(a.find(b"counter").unwrap().data, b"3\n");
    assert_eq!(&a.find(b"d/g").unwrap().data[100_000..], b"end");
    assert_eq!(a.find(b"d/up").unwrap().data, b"../motd");
    // An empty directory packs to an empty archive; a file is no directory.
    let e = fs.mkdir(ROOT_INO, b"empty", 0o755).unwrap();
    assert!(Archive::parse(&fs.pack(e).unwrap()).unwrap().is_empty());
    assert_eq!(fs.pack(motd).unwrap_err(), Errno::ENOTDIR);
}

/// A file made from static bytes owns no page until written, and a write
/// copies the page without changing the borrowed bytes.
#[test]
fn a_static_file_borrows_its_bytes_until_written() {
    static HOSTS: &[u8] = b"127.0.0.1\tlocalhost\n";
    let mut fs = Fs::new(clock);
    let f = fs.create_file_static(ROOT_INO, b"hosts", 0o644, HOSTS).unwrap();
    assert_eq!(fs.file_data(f).unwrap().owned_pages(), 0);
    assert_eq!(fs.attr(f).unwrap().size, HOSTS.len() as u64);
    assert_eq!(fs.attr(f).unwrap().mode & 0o7777, 0o644);
    let mut b = [0u8; 64];
    assert_eq!(fs.read(f, 0, &mut b).unwrap(), HOSTS.len());
    assert_eq!(&b[..HOSTS.len()], HOSTS);
    fs.write(f, 0, b"10").unwrap();
    assert_eq!(fs.file_data(f).unwrap().owned_pages(), 1);
    assert_eq!(fs.read(f, 0, &mut b).unwrap(), HOSTS.len());
    assert_eq!(&b[..4], b"107.");
    assert_eq!(HOSTS, b"127.0.0.1\tlocalhost\n");
    assert_eq!(fs.create_file_static(ROOT_INO, b"hosts", 0o644, HOSTS), Err(Errno::EEXIST));
}
