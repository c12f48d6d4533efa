//! Unit tests of the system calls, run on the host: user memory is host
//! memory (the host build of `umem` accepts any non-null pointer).

use super::abi::*;
use super::*;
use shoal_plat::Args;
use std::ffi::CString;

/// `Ready` hypercalls the test tender answered.
static READY_CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The tender's hypercall function, as the test tender: console writes
/// succeed (and are dropped), stdin is empty (end of input, always
/// readable), nothing else is expected.
extern "C" fn test_hypercall(nr: u64, arg: u64) {
    use shoal_abi::Hypercall;
    match Hypercall::from_nr(nr) {
        Some(Hypercall::ConsoleWrite) => {
            // SAFETY: plat passes the address of a live ConsoleWriteArgs
            // for a console write.
            let a = unsafe { &mut *(arg as *mut shoal_abi::ConsoleWriteArgs) };
            a.ret = a.len as i64;
        }
        Some(Hypercall::ConsoleRead) => {
            // SAFETY: as above, a live ConsoleReadArgs.
            let a = unsafe { &mut *(arg as *mut shoal_abi::ConsoleReadArgs) };
            a.ret = 0;
        }
        Some(Hypercall::NetPoll) => {
            // SAFETY: as above, a live NetPollArgs naming `nfds` entries.
            let a = unsafe { &mut *(arg as *mut shoal_abi::NetPollArgs) };
            // SAFETY: plat passes a live array of `nfds` entries.
            let fds = unsafe { std::slice::from_raw_parts_mut(a.fds as *mut shoal_abi::NetPollFd, a.nfds as usize) };
            for f in fds.iter_mut() {
                assert_eq!(f.handle, shoal_abi::STDIN_HANDLE, "only stdin is polled here");
                f.revents = 1;
            }
            a.ret = a.nfds as i64;
        }
        // Booting registers the host-signal word (the tests raise no signal).
        Some(Hypercall::SignalWord) => {
            // SAFETY: plat passes a live SignalWordArgs.
            let a = unsafe { &mut *(arg as *mut shoal_abi::SignalWordArgs) };
            a.ret = 0;
        }
        // The ready device: counted (the test tender is no template).
        Some(Hypercall::Ready) => {
            READY_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // SAFETY: plat passes a live ReadyArgs.
            let a = unsafe { &mut *(arg as *mut shoal_abi::ReadyArgs) };
            a.ret = 0;
        }
        // Booting asks for read-only host directories: none here.
        Some(Hypercall::HostFs) => {
            // SAFETY: plat passes a live HostFsArgs.
            let a = unsafe { &mut *(arg as *mut shoal_abi::HostFsArgs) };
            a.ret = -38; // ENOSYS
        }
        _ => panic!("unexpected hypercall {nr}"),
    }
}

/// Boots `plat` once: application memory is all of the host's address
/// space above the boot-info page, hypercalls go to [`test_hypercall`].
pub(crate) fn boot_plat() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let mut bi: shoal_abi::BootInfo = shoal_plat::boot::info();
        bi.magic = shoal_abi::BOOT_INFO_MAGIC;
        bi.abi_version = shoal_abi::ABI_VERSION;
        bi.mem_size = u64::MAX;
        bi.hypercall_entry = test_hypercall as extern "C" fn(u64, u64) as usize as u64;
        // SAFETY: `bi` is a readable BootInfo on this stack frame.
        unsafe { shoal_plat::boot::init(&bi) }.unwrap();
    });
}

fn vfs() -> Vfs {
    boot_plat();
    Vfs::new(empty_root())
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn p(s: &CString) -> u64 {
    s.as_ptr() as u64
}

fn args(v: &[u64]) -> Args {
    let mut a = [0u64; 6];
    a[..v.len()].copy_from_slice(v);
    Args(a)
}

const FDCWD: u64 = AT_FDCWD as i64 as u64;

fn open(v: &mut Vfs, path: &str, flags: u32, mode: u32) -> Result<i32, Errno> {
    let s = c(path);
    v.openat(&args(&[FDCWD, p(&s), flags as u64, mode as u64])).map(|fd| fd as i32)
}

fn write(v: &mut Vfs, fd: i32, data: &[u8]) -> Result<u64, Errno> {
    v.write(&args(&[fd as u64, data.as_ptr() as u64, data.len() as u64]))
}

fn read(v: &mut Vfs, fd: i32, n: usize) -> Result<Vec<u8>, Errno> {
    let mut b = vec![0u8; n];
    let r = v.read(&args(&[fd as u64, b.as_mut_ptr() as u64, n as u64]))?;
    b.truncate(r as usize);
    Ok(b)
}

fn lseek(v: &mut Vfs, fd: i32, off: i64, wh: u32) -> Result<u64, Errno> {
    v.lseek(&args(&[fd as u64, off as u64, wh as u64]))
}

fn stat(v: &mut Vfs, path: &str, flags: u32) -> Result<Stat, Errno> {
    let s = c(path);
    let mut st = Stat::default();
    v.newfstatat(&args(&[FDCWD, p(&s), &mut st as *mut Stat as u64, flags as u64]))?;
    Ok(st)
}

fn mkdir(v: &mut Vfs, path: &str) -> Result<u64, Errno> {
    let s = c(path);
    v.mkdir(&args(&[p(&s), 0o755]))
}

fn symlink(v: &mut Vfs, target: &str, path: &str) -> Result<u64, Errno> {
    let (t, s) = (c(target), c(path));
    v.symlink(&args(&[p(&t), p(&s)]))
}

fn unlink(v: &mut Vfs, path: &str) -> Result<u64, Errno> {
    let s = c(path);
    v.unlink(&args(&[p(&s)]))
}

fn rename(v: &mut Vfs, a: &str, b: &str, flags: u32) -> Result<u64, Errno> {
    let (x, y) = (c(a), c(b));
    v.renameat2(&args(&[FDCWD, p(&x), FDCWD, p(&y), flags as u64]))
}

fn getcwd(v: &mut Vfs) -> String {
    let mut b = [0u8; 256];
    let n = v.getcwd(&args(&[b.as_mut_ptr() as u64, 256])).unwrap() as usize;
    String::from_utf8(b[..n - 1].to_vec()).unwrap()
}

fn chdir(v: &mut Vfs, path: &str) -> Result<u64, Errno> {
    let s = c(path);
    v.chdir(&args(&[p(&s)]))
}

/// Lists a directory with getdents64 in chunks of `bufsize` bytes.
fn list(v: &mut Vfs, fd: i32, bufsize: usize) -> Vec<(String, u8)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; bufsize];
    loop {
        let n = v.getdents64(&args(&[fd as u64, buf.as_mut_ptr() as u64, bufsize as u64])).unwrap() as usize;
        if n == 0 {
            return out;
        }
        let mut off = 0;
        while off < n {
            let reclen = u16::from_le_bytes([buf[off + 16], buf[off + 17]]) as usize;
            let dtype = buf[off + 18];
            let name = &buf[off + 19..off + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap()];
            out.push((String::from_utf8(name.to_vec()).unwrap(), dtype));
            off += reclen;
        }
    }
}

#[test]
fn standard_streams() {
    let mut v = vfs();
    assert_eq!(read(&mut v, 0, 10).unwrap(), b"");
    assert_eq!(write(&mut v, 0, b"x"), Err(Errno::EBADF));
    assert_eq!(read(&mut v, 1, 10), Err(Errno::EBADF));
    assert_eq!(write(&mut v, 1, b"").unwrap(), 0);
    assert_eq!(lseek(&mut v, 1, 0, SEEK_CUR), Err(Errno::ESPIPE));
    let mut st = Stat::default();
    v.fstat(&args(&[1, &mut st as *mut Stat as u64])).unwrap();
    assert_eq!(st.st_mode & 0o170000, 0o010000);
    // TCGETS and TIOCGWINSZ: not a terminal.
    let mut ws = [0u16; 4];
    assert_eq!(v.ioctl(&args(&[1, 0x5413, ws.as_mut_ptr() as u64])), Err(Errno::ENOTTY));
    assert_eq!(v.ioctl(&args(&[0, 0x5401, ws.as_mut_ptr() as u64])), Err(Errno::ENOTTY));
    assert_eq!(v.ioctl(&args(&[99, 0x5401, 0])), Err(Errno::EBADF));
    assert_eq!(v.fsync(&args(&[1])), Err(Errno::EINVAL));
}

#[test]
fn create_write_read_and_access_modes() {
    let mut v = vfs();
    let fd = open(&mut v, "/tmp/f", O_CREAT | O_RDWR, 0o666).unwrap();
    assert_eq!(fd, 3);
    assert_eq!(write(&mut v, fd, b"hello world").unwrap(), 11);
    assert_eq!(lseek(&mut v, fd, 6, SEEK_SET).unwrap(), 6);
    assert_eq!(read(&mut v, fd, 100).unwrap(), b"world");
    assert_eq!(read(&mut v, fd, 100).unwrap(), b"");
    let st = stat(&mut v, "/tmp/f", 0).unwrap();
    assert_eq!(st.st_mode, 0o100644); // umask 022
    assert_eq!(st.st_size, 11);
    assert_eq!(st.st_nlink, 1);
    assert_eq!(open(&mut v, "/tmp/f", O_CREAT | O_EXCL | O_RDWR, 0o666), Err(Errno::EEXIST));
    let ro = open(&mut v, "/tmp/f", O_RDONLY, 0).unwrap();
    assert_eq!(write(&mut v, ro, b"x"), Err(Errno::EBADF));
    let wo = open(&mut v, "/tmp/f", O_WRONLY, 0).unwrap();
    assert_eq!(read(&mut v, wo, 1), Err(Errno::EBADF));
    assert_eq!(open(&mut v, "/tmp", O_WRONLY, 0), Err(Errno::EISDIR));
    assert_eq!(open(&mut v, "/tmp", O_RDONLY | O_CREAT, 0o666), Err(Errno::EISDIR));
    let d = open(&mut v, "/tmp", O_RDONLY, 0).unwrap();
    assert_eq!(read(&mut v, d, 1), Err(Errno::EISDIR));
    assert_eq!(open(&mut v, "/tmp/f", O_RDONLY | O_DIRECTORY, 0), Err(Errno::ENOTDIR));
    assert_eq!(open(&mut v, "/tmp/f/", O_RDONLY, 0), Err(Errno::ENOTDIR));
    assert_eq!(open(&mut v, "/tmp/f/x", O_RDONLY, 0), Err(Errno::ENOTDIR));
    assert_eq!(open(&mut v, "/nope/x", O_CREAT | O_RDWR, 0o666), Err(Errno::ENOENT));
    assert_eq!(open(&mut v, "/tmp/new/", O_CREAT | O_RDWR, 0o666), Err(Errno::EISDIR));
    // O_TRUNC.
    let t = open(&mut v, "/tmp/f", O_WRONLY | O_TRUNC, 0).unwrap();
    assert_eq!(stat(&mut v, "/tmp/f", 0).unwrap().st_size, 0);
    // Bad pointers are EFAULT, not a crash.
    assert_eq!(v.write(&args(&[t as u64, 0, 5])), Err(Errno::EFAULT));
    assert_eq!(v.openat(&args(&[FDCWD, 0, 0, 0])), Err(Errno::EFAULT));
    // Path too long.
    let long = "/".to_string() + &"a/".repeat(2100);
    assert_eq!(open(&mut v, &long, O_RDONLY, 0), Err(Errno::ENAMETOOLONG));
    let longname = format!("/tmp/{}", "n".repeat(256));
    assert_eq!(open(&mut v, &longname, O_CREAT | O_RDWR, 0o666), Err(Errno::ENAMETOOLONG));
}

#[test]
fn append_and_sparse_writes() {
    let mut v = vfs();
    let a = open(&mut v, "/tmp/log", O_CREAT | O_WRONLY | O_APPEND, 0o644).unwrap();
    let b = open(&mut v, "/tmp/log", O_WRONLY, 0).unwrap();
    write(&mut v, a, b"one").unwrap();
    write(&mut v, b, b"XY").unwrap(); // at offset 0 of its own description
    lseek(&mut v, a, 0, SEEK_SET).unwrap();
    write(&mut v, a, b"two").unwrap(); // O_APPEND: at the end regardless
    let r = open(&mut v, "/tmp/log", O_RDONLY, 0).unwrap();
    assert_eq!(read(&mut v, r, 100).unwrap(), b"XYetwo");
    // F_GETFL/F_SETFL toggle O_APPEND.
    let fl = v.fcntl(&args(&[b as u64, F_GETFL as u64])).unwrap() as u32;
    assert_eq!(fl & O_ACCMODE, O_WRONLY);
    assert_eq!(fl & O_APPEND, 0);
    v.fcntl(&args(&[b as u64, F_SETFL as u64, (O_APPEND | O_RDWR) as u64])).unwrap();
    let fl = v.fcntl(&args(&[b as u64, F_GETFL as u64])).unwrap() as u32;
    assert_eq!(fl & (O_APPEND | O_ACCMODE), O_APPEND | O_WRONLY);
    // Sparse: write far past the end, the gap reads as zeros.
    let s = open(&mut v, "/tmp/sparse", O_CREAT | O_RDWR, 0o644).unwrap();
    let data = b"end";
    v.pwrite64(&args(&[s as u64, data.as_ptr() as u64, 3, 1 << 20])).unwrap();
    let st = stat(&mut v, "/tmp/sparse", 0).unwrap();
    assert_eq!(st.st_size, (1 << 20) + 3);
    assert_eq!(st.st_blocks, 8);
    let mut buf = [9u8; 16];
    v.pread64(&args(&[s as u64, buf.as_mut_ptr() as u64, 16, 4096])).unwrap();
    assert_eq!(buf, [0; 16]);
    assert_eq!(lseek(&mut v, s, 0, SEEK_CUR).unwrap(), 0); // pread/pwrite keep the offset
    assert_eq!(v.pread64(&args(&[s as u64, buf.as_mut_ptr() as u64, 1, u64::MAX])), Err(Errno::EINVAL));
    // ftruncate grows with zeros and shrinks.
    v.ftruncate(&args(&[s as u64, 10])).unwrap();
    assert_eq!(lseek(&mut v, s, 0, SEEK_END).unwrap(), 10);
    v.ftruncate(&args(&[s as u64, 20])).unwrap();
    assert_eq!(v.pread64(&args(&[s as u64, buf.as_mut_ptr() as u64, 16, 4])).unwrap(), 16);
    assert_eq!(buf, [0; 16]);
    assert_eq!(v.ftruncate(&args(&[r as u64, 0])), Err(Errno::EINVAL));
    assert_eq!(v.ftruncate(&args(&[s as u64, u64::MAX])), Err(Errno::EINVAL));
}

#[test]
fn readv_writev() {
    let mut v = vfs();
    let fd = open(&mut v, "/tmp/v", O_CREAT | O_RDWR, 0o644).unwrap();
    let (x, y) = (b"abc".to_vec(), b"defg".to_vec());
    let iov = [x.as_ptr() as u64, 3, y.as_ptr() as u64, 4];
    assert_eq!(v.writev(&args(&[fd as u64, iov.as_ptr() as u64, 2])).unwrap(), 7);
    lseek(&mut v, fd, 0, SEEK_SET).unwrap();
    let (mut p1, mut p2) = ([0u8; 2], [0u8; 10]);
    let iov = [p1.as_mut_ptr() as u64, 2, p2.as_mut_ptr() as u64, 10];
    assert_eq!(v.readv(&args(&[fd as u64, iov.as_ptr() as u64, 2])).unwrap(), 7);
    assert_eq!(&p1, b"ab");
    assert_eq!(&p2[..5], b"cdefg");
    assert_eq!(v.readv(&args(&[fd as u64, iov.as_ptr() as u64, 1025])), Err(Errno::EINVAL));
    let bad = [0u64, 5];
    assert_eq!(v.writev(&args(&[fd as u64, bad.as_ptr() as u64, 1])), Err(Errno::EFAULT));
    // Console writev: one call.
    let iov = [x.as_ptr() as u64, 0];
    assert_eq!(v.writev(&args(&[1, iov.as_ptr() as u64, 1])).unwrap(), 0);
}

#[test]
fn dup_shares_offset_and_flags_but_not_cloexec() {
    let mut v = vfs();
    let fd = open(&mut v, "/tmp/d", O_CREAT | O_RDWR | O_CLOEXEC, 0o644).unwrap();
    write(&mut v, fd, b"0123456789").unwrap();
    lseek(&mut v, fd, 2, SEEK_SET).unwrap();
    let d = v.dup(&args(&[fd as u64])).unwrap() as i32;
    assert_eq!(read(&mut v, d, 3).unwrap(), b"234");
    assert_eq!(lseek(&mut v, fd, 0, SEEK_CUR).unwrap(), 5);
    assert_eq!(v.fcntl(&args(&[fd as u64, F_GETFD as u64])).unwrap(), FD_CLOEXEC);
    assert_eq!(v.fcntl(&args(&[d as u64, F_GETFD as u64])).unwrap(), 0);
    v.fcntl(&args(&[d as u64, F_SETFL as u64, O_NONBLOCK as u64])).unwrap();
    assert_ne!(v.fcntl(&args(&[fd as u64, F_GETFL as u64])).unwrap() as u32 & O_NONBLOCK, 0);
    // dup2 over stdout: writes go to the file.
    assert_eq!(v.dup2(&args(&[fd as u64, 1])).unwrap(), 1);
    lseek(&mut v, 1, 0, SEEK_END).unwrap();
    write(&mut v, 1, b"!").unwrap();
    assert_eq!(stat(&mut v, "/tmp/d", 0).unwrap().st_size, 11);
    assert_eq!(v.dup2(&args(&[fd as u64, fd as u64])).unwrap(), fd as u64);
    assert_eq!(v.dup3(&args(&[fd as u64, fd as u64, 0])), Err(Errno::EINVAL));
    assert_eq!(v.dup3(&args(&[fd as u64, 50, O_CLOEXEC as u64])).unwrap(), 50);
    assert_eq!(v.fcntl(&args(&[50, F_GETFD as u64])).unwrap(), FD_CLOEXEC);
    assert_eq!(v.fcntl(&args(&[fd as u64, F_DUPFD as u64, 40])).unwrap(), 40);
    assert_eq!(v.fcntl(&args(&[fd as u64, F_DUPFD_CLOEXEC as u64, 1024])), Err(Errno::EINVAL));
    assert_eq!(v.dup2(&args(&[fd as u64, 1024])), Err(Errno::EBADF));
    assert_eq!(v.dup(&args(&[77])), Err(Errno::EBADF));
    v.close(&args(&[fd as u64])).unwrap();
    assert_eq!(v.close(&args(&[fd as u64])), Err(Errno::EBADF));
    // All of fd, d, 1, 40 and 50 share one offset: now at the end.
    assert_eq!(read(&mut v, d, 100).unwrap(), b"");
    lseek(&mut v, d, 5, SEEK_SET).unwrap();
    assert_eq!(lseek(&mut v, 40, 0, SEEK_CUR).unwrap(), 5);
    assert_eq!(read(&mut v, d, 100).unwrap(), b"56789!");
    // Exhaust the table.
    let mut n = 0;
    while v.dup(&args(&[0])).is_ok() {
        n += 1;
    }
    assert_eq!(v.open_fds(), crate::DEFAULT_NOFILE, "the soft limit an instance starts with");
    assert!(n > 1000);
    assert_eq!(v.dup(&args(&[0])), Err(Errno::EMFILE));
    assert_eq!(open(&mut v, "/tmp/d", O_RDONLY, 0), Err(Errno::EMFILE));
    // A server raises its soft limit to the hard one: the table grows to it.
    v.set_limits(MAX_FDS as u64, u64::MAX);
    while v.dup(&args(&[0])).is_ok() {}
    assert_eq!(v.open_fds(), MAX_FDS);
    assert_eq!(v.dup2(&args(&[0, MAX_FDS as u64])), Err(Errno::EBADF));
    v.set_limits(crate::DEFAULT_NOFILE as u64, u64::MAX);
}

fn lk(v: &mut Vfs, fd: i32, cmd: i32, ty: i16, start: i64, len: i64) -> Result<Flock, Errno> {
    let mut fl = Flock { l_type: ty, l_whence: 0, l_start: start, l_len: len, l_pid: 0 };
    v.fcntl(&args(&[fd as u64, cmd as u64, &mut fl as *mut Flock as u64]))?;
    Ok(fl)
}

#[test]
fn record_locks_conflict_between_owners_and_go_on_close() {
    let mut v = vfs();
    let a = open(&mut v, "/tmp/db", O_CREAT | O_RDWR, 0o644).unwrap();
    let b = open(&mut v, "/tmp/db", O_RDWR, 0).unwrap();
    // POSIX locks belong to the process: never in conflict with each other.
    lk(&mut v, a, F_SETLK, F_WRLCK, 0, 100).unwrap();
    lk(&mut v, b, F_SETLK, F_WRLCK, 50, 10).unwrap();
    assert_eq!(lk(&mut v, b, F_GETLK, F_WRLCK, 0, 0).unwrap().l_type, F_UNLCK);
    // ... but with an OFD lock of another description they are.
    assert_eq!(lk(&mut v, b, F_OFD_SETLK, F_RDLCK, 10, 1), Err(Errno::EAGAIN));
    let g = lk(&mut v, b, F_OFD_GETLK, F_RDLCK, 120, 0).unwrap();
    assert_eq!(g.l_type, F_UNLCK);
    // Unlocking the middle splits the range.
    lk(&mut v, a, F_SETLK, F_UNLCK, 10, 10).unwrap();
    let g = lk(&mut v, b, F_OFD_GETLK, F_WRLCK, 5, 0).unwrap();
    assert_eq!((g.l_type, g.l_start, g.l_len, g.l_pid), (F_WRLCK, 0, 10, 1));
    lk(&mut v, b, F_OFD_SETLK, F_WRLCK, 10, 10).unwrap();
    let g = lk(&mut v, b, F_OFD_GETLK, F_WRLCK, 12, 1).unwrap();
    assert_eq!(g.l_type, F_UNLCK, "own OFD lock does not conflict");
    let g = lk(&mut v, a, F_GETLK, F_RDLCK, 0, 0).unwrap();
    assert_eq!((g.l_type, g.l_start, g.l_len, g.l_pid), (F_WRLCK, 10, 10, -1));
    // Any close of the file drops the process's POSIX locks.
    assert_eq!(lk(&mut v, a, F_OFD_GETLK, F_WRLCK, 0, 10).unwrap().l_type, F_WRLCK);
    let c = open(&mut v, "/tmp/db", O_RDONLY, 0).unwrap();
    v.close_fd(c).unwrap();
    assert_eq!(lk(&mut v, a, F_OFD_GETLK, F_WRLCK, 0, 10).unwrap().l_type, F_UNLCK);
    lk(&mut v, b, F_OFD_SETLK, F_WRLCK, 0, 0).unwrap();
    // An OFD lock lives until its description's last descriptor closes.
    let d = v.dup(&args(&[b as u64])).unwrap() as i32;
    v.close_fd(b).unwrap();
    assert_eq!(lk(&mut v, a, F_SETLK, F_RDLCK, 500, 1), Err(Errno::EAGAIN));
    v.close_fd(d).unwrap();
    lk(&mut v, a, F_SETLK, F_RDLCK, 500, 1).unwrap();
    // Argument checks.
    let ro = open(&mut v, "/tmp/db", O_RDONLY, 0).unwrap();
    assert_eq!(lk(&mut v, ro, F_SETLKW, F_WRLCK, 0, 1), Err(Errno::EBADF));
    assert_eq!(lk(&mut v, a, F_GETLK, F_UNLCK, 0, 1), Err(Errno::EINVAL));
    assert_eq!(lk(&mut v, a, F_SETLK, F_RDLCK, -5, 1), Err(Errno::EINVAL));
    let mut fl = Flock { l_type: F_RDLCK, l_whence: 0, l_start: 0, l_len: 1, l_pid: 7 };
    assert_eq!(v.fcntl(&args(&[a as u64, F_OFD_SETLK as u64, &mut fl as *mut Flock as u64])), Err(Errno::EINVAL));
    assert_eq!(v.fcntl(&args(&[a as u64, F_SETLK as u64, 0])), Err(Errno::EFAULT));
}

#[test]
fn flock_conflicts_between_descriptions() {
    let mut v = vfs();
    let a = open(&mut v, "/tmp/f", O_CREAT | O_RDWR, 0o644).unwrap();
    let b = open(&mut v, "/tmp/f", O_RDONLY, 0).unwrap();
    let fl = |v: &mut Vfs, fd: i32, op: u64| v.flock(&args(&[fd as u64, op]));
    fl(&mut v, a, 1).unwrap();
    fl(&mut v, b, 1).unwrap();
    assert_eq!(fl(&mut v, a, 2 | 4), Err(Errno::EAGAIN), "upgrade against a shared lock");
    // The failed conversion dropped a's lock, as on Linux.
    fl(&mut v, b, 2 | 4).unwrap();
    assert_eq!(fl(&mut v, a, 1 | 4), Err(Errno::EAGAIN));
    let d = v.dup(&args(&[b as u64])).unwrap() as i32;
    v.close_fd(b).unwrap();
    assert_eq!(fl(&mut v, a, 1 | 4), Err(Errno::EAGAIN), "the dup keeps it");
    v.close_fd(d).unwrap();
    fl(&mut v, a, 2 | 4).unwrap();
    fl(&mut v, a, 8).unwrap();
    assert_eq!(fl(&mut v, a, 3), Err(Errno::EINVAL));
    // flock and record locks do not interact.
    fl(&mut v, a, 2).unwrap();
    lk(&mut v, a, F_OFD_SETLK, F_WRLCK, 0, 0).unwrap();
}

#[test]
fn path_resolution() {
    let mut v = vfs();
    mkdir(&mut v, "/a").unwrap();
    mkdir(&mut v, "/a/b").unwrap();
    let fd = open(&mut v, "/a/b/f", O_CREAT | O_WRONLY, 0o644).unwrap();
    write(&mut v, fd, b"F").unwrap();
    symlink(&mut v, "b", "/a/lb").unwrap(); // relative to /a
    symlink(&mut v, "/a/b/f", "/abs").unwrap();
    symlink(&mut v, "lb/f", "/a/lf").unwrap();
    symlink(&mut v, "missing", "/dangling").unwrap();
    symlink(&mut v, "loop2", "/loop1").unwrap();
    symlink(&mut v, "loop1", "/loop2").unwrap();
    let ino = stat(&mut v, "/a/b/f", 0).unwrap().st_ino;
    for p in ["/a/b/f", "//a///b/f", "/a/./b/../b/f", "/a/lb/f", "/abs", "/a/lf", "/../../a/b/f", "/a/lb/../b/f"] {
        assert_eq!(stat(&mut v, p, 0).unwrap().st_ino, ino, "{p}");
    }
    // lstat and AT_SYMLINK_NOFOLLOW see the link; a trailing slash follows it.
    assert_eq!(stat(&mut v, "/abs", AT_SYMLINK_NOFOLLOW).unwrap().st_mode & 0o170000, 0o120000);
    assert_eq!(stat(&mut v, "/a/lb/", AT_SYMLINK_NOFOLLOW).unwrap().st_mode & 0o170000, 0o040000);
    assert_eq!(stat(&mut v, "/abs/", 0), Err(Errno::ENOTDIR));
    assert_eq!(stat(&mut v, "/a/b/f/..", 0), Err(Errno::ENOTDIR));
    assert_eq!(stat(&mut v, "/dangling", 0), Err(Errno::ENOENT));
    assert!(stat(&mut v, "/dangling", AT_SYMLINK_NOFOLLOW).is_ok());
    assert_eq!(stat(&mut v, "/loop1", 0), Err(Errno::ELOOP));
    assert_eq!(stat(&mut v, "", 0), Err(Errno::ENOENT));
    assert_eq!(open(&mut v, "/abs", O_RDONLY | O_NOFOLLOW, 0), Err(Errno::ELOOP));
    // O_PATH|O_NOFOLLOW opens the link itself.
    let l = open(&mut v, "/abs", O_PATH | O_NOFOLLOW, 0).unwrap();
    let mut buf = [0u8; 64];
    let e = c("");
    let n = v.readlinkat(&args(&[l as u64, p(&e), buf.as_mut_ptr() as u64, 64])).unwrap();
    assert_eq!(&buf[..n as usize], b"/a/b/f");
    assert_eq!(read(&mut v, l, 1), Err(Errno::EBADF));
    // 40 links are fine, 41 are ELOOP.
    symlink(&mut v, "/a/b/f", "/l0").unwrap();
    for i in 1..=41 {
        symlink(&mut v, &format!("/l{}", i - 1), &format!("/l{i}")).unwrap();
    }
    assert!(stat(&mut v, "/l39", 0).is_ok());
    assert_eq!(stat(&mut v, "/l40", 0), Err(Errno::ELOOP));
    // O_CREAT through a dangling link creates its target.
    let fd = open(&mut v, "/dangling", O_CREAT | O_WRONLY, 0o600).unwrap();
    assert!(fd > 2);
    assert!(stat(&mut v, "/missing", 0).is_ok());
    assert_eq!(open(&mut v, "/dangling", O_CREAT | O_EXCL | O_WRONLY, 0o600), Err(Errno::EEXIST));
    // Relative paths, chdir, getcwd, dirfd.
    chdir(&mut v, "/a/lb").unwrap();
    assert_eq!(getcwd(&mut v), "/a/b");
    assert_eq!(stat(&mut v, "f", 0).unwrap().st_ino, ino);
    assert_eq!(stat(&mut v, "../b/./f", 0).unwrap().st_ino, ino);
    let dfd = open(&mut v, "/a", O_RDONLY | O_DIRECTORY, 0).unwrap();
    let (rel, mut st) = (c("b/f"), Stat::default());
    v.newfstatat(&args(&[dfd as u64, p(&rel), &mut st as *mut Stat as u64, 0])).unwrap();
    assert_eq!(st.st_ino, ino);
    let ffd = open(&mut v, "/a/b/f", O_RDONLY, 0).unwrap();
    assert_eq!(v.newfstatat(&args(&[ffd as u64, p(&rel), &mut st as *mut Stat as u64, 0])), Err(Errno::ENOTDIR));
    // AT_EMPTY_PATH.
    v.newfstatat(&args(&[ffd as u64, p(&e), &mut st as *mut Stat as u64, AT_EMPTY_PATH as u64])).unwrap();
    assert_eq!(st.st_ino, ino);
    assert_eq!(v.newfstatat(&args(&[ffd as u64, p(&e), &mut st as *mut Stat as u64, 0])), Err(Errno::ENOENT));
    v.fchdir(&args(&[dfd as u64])).unwrap();
    assert_eq!(getcwd(&mut v), "/a");
    assert_eq!(v.fchdir(&args(&[ffd as u64])), Err(Errno::ENOTDIR));
    // A removed working directory.
    mkdir(&mut v, "/gone").unwrap();
    chdir(&mut v, "/gone").unwrap();
    let s = c("/gone");
    v.rmdir(&args(&[p(&s)])).unwrap();
    let mut b = [0u8; 64];
    assert_eq!(v.getcwd(&args(&[b.as_mut_ptr() as u64, 64])), Err(Errno::ENOENT));
    assert_eq!(open(&mut v, "x", O_CREAT | O_RDWR, 0o644), Err(Errno::ENOENT));
    chdir(&mut v, "..").unwrap();
    assert_eq!(getcwd(&mut v), "/");
    assert_eq!(v.getcwd(&args(&[b.as_mut_ptr() as u64, 1])), Err(Errno::ERANGE));
}

#[test]
fn mkdir_rmdir_unlink_errors() {
    let mut v = vfs();
    mkdir(&mut v, "/d").unwrap();
    assert_eq!(mkdir(&mut v, "/d"), Err(Errno::EEXIST));
    assert_eq!(mkdir(&mut v, "/d/"), Err(Errno::EEXIST));
    mkdir(&mut v, "/d/e/").unwrap();
    assert_eq!(mkdir(&mut v, "/"), Err(Errno::EEXIST));
    assert_eq!(mkdir(&mut v, "/x/y"), Err(Errno::ENOENT));
    let s = c("/d");
    assert_eq!(v.rmdir(&args(&[p(&s)])), Err(Errno::ENOTEMPTY));
    assert_eq!(unlink(&mut v, "/d"), Err(Errno::EISDIR));
    let root = c("/");
    assert_eq!(v.rmdir(&args(&[p(&root)])), Err(Errno::EBUSY));
    let dot = c("/d/e/.");
    assert_eq!(v.rmdir(&args(&[p(&dot)])), Err(Errno::EINVAL));
    open(&mut v, "/d/f", O_CREAT | O_RDWR, 0o644).unwrap();
    assert_eq!(unlink(&mut v, "/d/f/"), Err(Errno::ENOTDIR));
    let f = c("/d/f");
    assert_eq!(v.rmdir(&args(&[p(&f)])), Err(Errno::ENOTDIR));
    let rel = c("e");
    let dfd = open(&mut v, "/d", O_RDONLY, 0).unwrap();
    assert_eq!(v.unlinkat(&args(&[dfd as u64, p(&rel), 0])), Err(Errno::EISDIR));
    assert_eq!(v.unlinkat(&args(&[dfd as u64, p(&rel), 1])), Err(Errno::EINVAL));
    v.unlinkat(&args(&[dfd as u64, p(&rel), AT_REMOVEDIR as u64])).unwrap();
    unlink(&mut v, "/d/f").unwrap();
    assert_eq!(unlink(&mut v, "/d/f"), Err(Errno::ENOENT));
    v.rmdir(&args(&[p(&s)])).unwrap();
    assert_eq!(stat(&mut v, "/d", 0), Err(Errno::ENOENT));
    // Umask applies to mkdir.
    v.umask(&args(&[0o077])).unwrap();
    mkdir(&mut v, "/m").unwrap();
    assert_eq!(stat(&mut v, "/m", 0).unwrap().st_mode, 0o040700);
    assert_eq!(v.umask(&args(&[0o022])).unwrap(), 0o077);
    // An unlinked open file keeps its contents.
    let fd = open(&mut v, "/tmp/u", O_CREAT | O_RDWR, 0o644).unwrap();
    write(&mut v, fd, b"still here").unwrap();
    unlink(&mut v, "/tmp/u").unwrap();
    lseek(&mut v, fd, 0, SEEK_SET).unwrap();
    assert_eq!(read(&mut v, fd, 100).unwrap(), b"still here");
    let mut st = Stat::default();
    v.fstat(&args(&[fd as u64, &mut st as *mut Stat as u64])).unwrap();
    assert_eq!(st.st_nlink, 0);
    let before = v.fs().inode_count();
    v.close(&args(&[fd as u64])).unwrap();
    assert_eq!(v.fs().inode_count(), before - 1);
}

#[test]
fn rename_through_syscalls() {
    let mut v = vfs();
    let fd = open(&mut v, "/tmp/a", O_CREAT | O_RDWR, 0o644).unwrap();
    write(&mut v, fd, b"A").unwrap();
    open(&mut v, "/tmp/b", O_CREAT | O_RDWR, 0o644).unwrap();
    mkdir(&mut v, "/tmp/d").unwrap();
    rename(&mut v, "/tmp/a", "/tmp/b", 0).unwrap();
    assert_eq!(stat(&mut v, "/tmp/a", 0), Err(Errno::ENOENT));
    assert_eq!(stat(&mut v, "/tmp/b", 0).unwrap().st_size, 1);
    assert_eq!(rename(&mut v, "/tmp/b", "/tmp/d", 0), Err(Errno::EISDIR));
    assert_eq!(rename(&mut v, "/tmp/b", "/tmp/c/", 0), Err(Errno::ENOTDIR));
    assert_eq!(rename(&mut v, "/tmp/d", "/tmp/d/sub", 0), Err(Errno::EINVAL));
    assert_eq!(rename(&mut v, "/tmp/.", "/tmp/x", 0), Err(Errno::EBUSY));
    assert_eq!(rename(&mut v, "/tmp/nope", "/tmp/x", 0), Err(Errno::ENOENT));
    open(&mut v, "/tmp/c", O_CREAT | O_RDWR, 0o644).unwrap();
    assert_eq!(rename(&mut v, "/tmp/b", "/tmp/c", RENAME_NOREPLACE), Err(Errno::EEXIST));
    rename(&mut v, "/tmp/b", "/tmp/c", RENAME_EXCHANGE).unwrap();
    assert_eq!(stat(&mut v, "/tmp/c", 0).unwrap().st_size, 1);
    assert_eq!(stat(&mut v, "/tmp/b", 0).unwrap().st_size, 0);
    assert_eq!(rename(&mut v, "/tmp/b", "/tmp/c", 3), Err(Errno::EINVAL));
    rename(&mut v, "/tmp/d/", "/e", 0).unwrap();
    assert_eq!(stat(&mut v, "/e", 0).unwrap().st_mode & 0o170000, 0o040000);
    // The open description follows the file across renames.
    rename(&mut v, "/tmp/c", "/e/z", 0).unwrap();
    lseek(&mut v, fd, 0, SEEK_SET).unwrap();
    assert_eq!(read(&mut v, fd, 10).unwrap(), b"A");
}

#[test]
fn getdents_lists_and_survives_changes() {
    let mut v = vfs();
    mkdir(&mut v, "/g").unwrap();
    for i in 0..20 {
        open(&mut v, &format!("/g/file{i:02}"), O_CREAT | O_RDWR, 0o644).unwrap();
    }
    mkdir(&mut v, "/g/sub").unwrap();
    symlink(&mut v, "x", "/g/ln").unwrap();
    let fd = open(&mut v, "/g", O_RDONLY | O_DIRECTORY, 0).unwrap();
    let all = list(&mut v, fd, 4096);
    assert_eq!(all.len(), 24);
    assert_eq!(all[0], (".".into(), 4));
    assert_eq!(all[1], ("..".into(), 4));
    assert!(all.contains(&("sub".into(), 4)));
    assert!(all.contains(&("ln".into(), 10)));
    assert!(all.contains(&("file07".into(), 8)));
    // Small buffers list the same thing.
    lseek(&mut v, fd, 0, SEEK_SET).unwrap();
    assert_eq!(list(&mut v, fd, 40), all);
    // Too small for one entry.
    lseek(&mut v, fd, 0, SEEK_SET).unwrap();
    let mut tiny = [0u8; 8];
    assert_eq!(v.getdents64(&args(&[fd as u64, tiny.as_mut_ptr() as u64, 8])), Err(Errno::EINVAL));
    // Read part, change the directory, read the rest: every entry that
    // existed throughout is seen exactly once.
    lseek(&mut v, fd, 0, SEEK_SET).unwrap();
    let mut buf = vec![0u8; 160];
    let n = v.getdents64(&args(&[fd as u64, buf.as_mut_ptr() as u64, 160])).unwrap();
    assert!(n > 0);
    let first = {
        let mut names = Vec::new();
        let mut off = 0;
        while off < n as usize {
            let reclen = u16::from_le_bytes([buf[off + 16], buf[off + 17]]) as usize;
            let name = &buf[off + 19..off + reclen];
            names.push(String::from_utf8(name[..name.iter().position(|&b| b == 0).unwrap()].to_vec()).unwrap());
            off += reclen;
        }
        names
    };
    for gone in ["file00", "file15"] {
        unlink(&mut v, &format!("/g/{gone}")).unwrap();
    }
    open(&mut v, "/g/zzz", O_CREAT | O_RDWR, 0o644).unwrap();
    let rest: Vec<String> = list(&mut v, fd, 160).into_iter().map(|e| e.0).collect();
    let mut seen: Vec<String> = first.iter().cloned().chain(rest.iter().cloned()).collect();
    seen.sort();
    let mut dedup = seen.clone();
    dedup.dedup();
    assert_eq!(seen, dedup, "no entry twice");
    for e in &all {
        if e.0 != "file15" && e.0 != "file00" {
            assert!(seen.contains(&e.0), "{} missing", e.0);
        }
    }
    assert!(!rest.contains(&"file15".to_string()));
    assert!(rest.contains(&"zzz".to_string()));
    let f = open(&mut v, "/g/file01", O_RDONLY, 0).unwrap();
    assert_eq!(v.getdents64(&args(&[f as u64, buf.as_mut_ptr() as u64, 160])), Err(Errno::ENOTDIR));
}

#[test]
fn stat_statx_access_chmod_utimens() {
    let mut v = vfs();
    let fd = open(&mut v, "/tmp/s", O_CREAT | O_RDWR, 0o640).unwrap();
    write(&mut v, fd, &[1u8; 5000]).unwrap();
    let s = c("/tmp/s");
    let mut sx = Statx::default();
    v.statx(&args(&[FDCWD, p(&s), 0, STATX_BASIC_STATS as u64, &mut sx as *mut Statx as u64])).unwrap();
    let st = stat(&mut v, "/tmp/s", 0).unwrap();
    assert_eq!(sx.stx_size, 5000);
    assert_eq!(sx.stx_ino, st.st_ino);
    assert_eq!(sx.stx_mode as u32, st.st_mode);
    assert_eq!(sx.stx_mtime.tv_sec, st.st_mtime);
    assert_eq!(sx.stx_mask & STATX_BASIC_STATS, STATX_BASIC_STATS);
    assert_eq!(st.st_blocks, 16);
    assert_eq!(st.st_blksize, 4096);
    assert_eq!(v.statx(&args(&[FDCWD, p(&s), 0x6000, 0, &mut sx as *mut Statx as u64])), Err(Errno::EINVAL));
    // access: root-like; X_OK needs an x bit.
    assert_eq!(v.access(&args(&[p(&s), (R_OK | W_OK) as u64])).unwrap(), 0);
    assert_eq!(v.access(&args(&[p(&s), X_OK as u64])), Err(Errno::EACCES));
    assert_eq!(v.access(&args(&[p(&s), 8])), Err(Errno::EINVAL));
    v.chmod(&args(&[p(&s), 0o755])).unwrap();
    assert_eq!(v.faccessat2(&args(&[FDCWD, p(&s), X_OK as u64, AT_EACCESS as u64])).unwrap(), 0);
    assert_eq!(stat(&mut v, "/tmp/s", 0).unwrap().st_mode, 0o100755);
    v.fchmod(&args(&[fd as u64, 0o600])).unwrap();
    assert_eq!(stat(&mut v, "/tmp/s", 0).unwrap().st_mode, 0o100600);
    let n = c("/tmp/none");
    assert_eq!(v.access(&args(&[p(&n), F_OK as u64])), Err(Errno::ENOENT));
    // utimensat: explicit, OMIT, NOW, futimens (NULL path).
    let ts: [i64; 4] = [100, 5, 200, UTIME_OMIT];
    v.utimensat(&args(&[FDCWD, p(&s), ts.as_ptr() as u64, 0])).unwrap();
    let st2 = stat(&mut v, "/tmp/s", 0).unwrap();
    assert_eq!((st2.st_atime, st2.st_atime_nsec), (100, 5));
    assert_eq!(st2.st_mtime, st.st_mtime);
    let ts: [i64; 4] = [0, UTIME_OMIT, 0, UTIME_NOW];
    v.utimensat(&args(&[fd as u64, 0, ts.as_ptr() as u64, 0])).unwrap();
    let st3 = stat(&mut v, "/tmp/s", 0).unwrap();
    assert_eq!(st3.st_atime, 100);
    assert!((st3.st_mtime, st3.st_mtime_nsec) >= (st2.st_mtime, st2.st_mtime_nsec));
    let bad: [i64; 4] = [0, 1_000_000_000, 0, 0];
    assert_eq!(v.utimensat(&args(&[FDCWD, p(&s), bad.as_ptr() as u64, 0])), Err(Errno::EINVAL));
    // FIONREAD on a file.
    lseek(&mut v, fd, 1000, SEEK_SET).unwrap();
    let mut avail = 0i32;
    v.ioctl(&args(&[fd as u64, FIONREAD as u64, &mut avail as *mut i32 as u64])).unwrap();
    assert_eq!(avail, 4000);
    assert_eq!(lseek(&mut v, fd, 10, SEEK_DATA).unwrap(), 10);
    assert_eq!(lseek(&mut v, fd, 10, SEEK_HOLE).unwrap(), 5000);
    assert_eq!(lseek(&mut v, fd, 6000, SEEK_DATA), Err(Errno::ENXIO));
    assert_eq!(lseek(&mut v, fd, -1, SEEK_SET), Err(Errno::EINVAL));
    // truncate by path.
    v.truncate(&args(&[p(&s), 3])).unwrap();
    assert_eq!(stat(&mut v, "/tmp/s", 0).unwrap().st_size, 3);
    let t = c("/tmp");
    assert_eq!(v.truncate(&args(&[p(&t), 0])), Err(Errno::EISDIR));
}

/// memfd_create: a nameless read-write file; flags and names checked as
/// Linux checks them (sealing is not supported: EINVAL).
#[test]
fn memfd_create_makes_a_nameless_file() {
    let mut v = vfs();
    let name = c("buf");
    let fd = v.memfd_create(&args(&[p(&name), 1])).unwrap() as i32;
    assert_eq!(write(&mut v, fd, b"in memory"), Ok(9));
    let mut b = [0u8; 2];
    assert_eq!(v.pread64(&args(&[fd as u64, b.as_mut_ptr() as u64, 2, 3])), Ok(2));
    assert_eq!(&b, b"me");
    let mut st = Stat::default();
    v.fstat(&args(&[fd as u64, &mut st as *mut Stat as u64])).unwrap();
    assert_eq!((st.st_mode, st.st_nlink, st.st_size), (0o100777, 0, 9));
    assert_eq!(v.fcntl(&args(&[fd as u64, F_GETFD as u64])), Ok(FD_CLOEXEC));
    assert_eq!(v.memfd_create(&args(&[p(&name), 2])), Err(Errno::EINVAL), "MFD_ALLOW_SEALING");
    assert_eq!(v.memfd_create(&args(&[p(&name), 4])), Err(Errno::EINVAL), "MFD_HUGETLB");
    assert_eq!(v.memfd_create(&args(&[p(&name), 0x100])), Err(Errno::EINVAL));
    assert_eq!(v.memfd_create(&args(&[0, 0])), Err(Errno::EFAULT));
    let long = c(&"n".repeat(250));
    assert_eq!(v.memfd_create(&args(&[p(&long), 0])), Err(Errno::EINVAL));
    let ok = c(&"n".repeat(249));
    let fd2 = v.memfd_create(&args(&[p(&ok), 0x10])).unwrap();
    assert_eq!(v.fcntl(&args(&[fd2, F_GETFD as u64])), Ok(0));
    assert_eq!(v.fcntl(&args(&[fd2, 1034])), Err(Errno::EINVAL), "F_GET_SEALS");
}

#[test]
fn tmpfile_and_hard_links() {
    let mut v = vfs();
    let fd = open(&mut v, "/tmp", O_TMPFILE_BIT | O_DIRECTORY | O_RDWR, 0o600).unwrap();
    write(&mut v, fd, b"anon").unwrap();
    let mut st = Stat::default();
    v.fstat(&args(&[fd as u64, &mut st as *mut Stat as u64])).unwrap();
    assert_eq!((st.st_nlink, st.st_size), (0, 4));
    let dfd = open(&mut v, "/tmp", O_RDONLY, 0).unwrap();
    assert_eq!(list(&mut v, dfd, 1024).len(), 2);
    let count = v.fs().inode_count();
    v.close(&args(&[fd as u64])).unwrap();
    assert_eq!(v.fs().inode_count(), count - 1);
    open(&mut v, "/tmp/h", O_CREAT | O_RDWR, 0o600).unwrap();
    let (a, b) = (c("/tmp/h"), c("/tmp/h2"));
    v.link(&args(&[p(&a), p(&b)])).unwrap();
    assert_eq!(stat(&mut v, "/tmp/h2", 0).unwrap().st_nlink, 2);
    assert_eq!(v.link(&args(&[p(&a), p(&b)])), Err(Errno::EEXIST));
    let t = c("/tmp");
    assert_eq!(v.link(&args(&[p(&t), p(&c("/t2"))])), Err(Errno::EPERM));
}

#[test]
fn archive_root_copy_on_write() {
    let dir = std::env::temp_dir().join(format!("shoal-vfs-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("etc")).unwrap();
    std::fs::write(dir.join("etc/conf"), b"key=value\n").unwrap();
    std::os::unix::fs::symlink("etc/conf", dir.join("conf")).unwrap();
    let bytes: &'static [u8] = Box::leak(shoal_archive::pack_dir(&dir).unwrap().into_boxed_slice());
    std::fs::remove_dir_all(&dir).unwrap();
    let pristine = bytes.to_vec();
    boot_plat();
    let mut v = Vfs::new(shoal_ramfs::Fs::from_archive(bytes, clock).unwrap());
    let fd = open(&mut v, "/conf", O_RDWR, 0).unwrap();
    assert_eq!(read(&mut v, fd, 100).unwrap(), b"key=value\n");
    lseek(&mut v, fd, 4, SEEK_SET).unwrap();
    write(&mut v, fd, b"VALUE").unwrap();
    let r = open(&mut v, "/etc/conf", O_RDONLY, 0).unwrap();
    assert_eq!(read(&mut v, r, 100).unwrap(), b"key=VALUE\n");
    let t = open(&mut v, "/etc/conf", O_WRONLY | O_TRUNC, 0).unwrap();
    write(&mut v, t, b"new").unwrap();
    assert_eq!(stat(&mut v, "/conf", 0).unwrap().st_size, 3);
    assert_eq!(bytes, &pristine[..], "the archive is never written");
}

/// sendfile of a file still as the archive has it writes the archive's
/// bytes straight (no bounce buffer); a page written since comes from the
/// file's own copy; the file offset advances by what was sent.
#[test]
fn sendfile_from_the_archive_and_from_written_pages() {
    let dir = std::env::temp_dir().join(format!("shoal-vfs-sendfile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let data: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i % 251) as u8).collect();
    std::fs::write(dir.join("data"), &data).unwrap();
    let bytes: &'static [u8] = Box::leak(shoal_archive::pack_dir(&dir).unwrap().into_boxed_slice());
    std::fs::remove_dir_all(&dir).unwrap();
    boot_plat();
    let mut v = Vfs::new(shoal_ramfs::Fs::from_archive(bytes, clock).unwrap());
    let f = open(&mut v, "/data", O_RDWR, 0).unwrap();
    let out = open(&mut v, "/copy", O_CREAT | O_RDWR, 0o644).unwrap();
    // Straight from the archive, through the file's offset.
    assert_eq!(v.sendfile(&args(&[out as u64, f as u64, 0, 5000])), Ok(5000));
    assert_eq!(lseek(&mut v, f, 0, SEEK_CUR), Ok(5000));
    // Page 1 written: the rest comes partly from the copy, partly the archive.
    let w = open(&mut v, "/data", O_WRONLY, 0).unwrap();
    lseek(&mut v, w, 4096 + 10, SEEK_SET).unwrap();
    write(&mut v, w, b"XYZ").unwrap();
    let mut expect = data.clone();
    expect[4096 + 10..4096 + 13].copy_from_slice(b"XYZ");
    let mut off: i64 = 4000;
    assert_eq!(v.sendfile(&args(&[out as u64, f as u64, &mut off as *mut i64 as u64, 100_000])), Ok((data.len() - 4000) as u64));
    assert_eq!(off, data.len() as i64);
    assert_eq!(lseek(&mut v, f, 0, SEEK_CUR), Ok(5000), "an offset pointer leaves the file offset");
    lseek(&mut v, out, 0, SEEK_SET).unwrap();
    let mut got = data[..5000].to_vec();
    got.extend_from_slice(&expect[4000..]);
    assert_eq!(read(&mut v, out, 100_000).unwrap(), got);
}

fn pipe2(v: &mut Vfs, flags: u32) -> (i32, i32) {
    let mut fds = [0i32; 2];
    v.pipe2(&args(&[fds.as_mut_ptr() as u64, flags as u64])).unwrap();
    (fds[0], fds[1])
}

#[test]
fn devices_in_dev() {
    let mut v = vfs();
    let st = stat(&mut v, "/dev/null", 0).unwrap();
    assert_eq!(st.st_mode, 0o020666);
    assert_eq!(st.st_rdev, 0x103);
    assert_eq!(stat(&mut v, "/dev/urandom", 0).unwrap().st_rdev, 0x109);
    let null = open(&mut v, "/dev/null", O_RDWR, 0).unwrap();
    assert_eq!(read(&mut v, null, 10).unwrap(), b"");
    assert_eq!(write(&mut v, null, b"abc"), Ok(3));
    let zero = open(&mut v, "/dev/zero", O_RDONLY, 0).unwrap();
    assert_eq!(read(&mut v, zero, 5).unwrap(), [0; 5]);
    let full = open(&mut v, "/dev/full", O_WRONLY, 0).unwrap();
    assert_eq!(write(&mut v, full, b"x"), Err(Errno::ENOSPC));
    let r = open(&mut v, "/dev/random", O_RDONLY, 0).unwrap();
    let (a, b) = (read(&mut v, r, 16).unwrap(), read(&mut v, r, 16).unwrap());
    assert_ne!(a, b);
    // The standard streams and /dev/fd/N.
    let s = stat(&mut v, "/dev/stdout", 0).unwrap();
    assert_eq!(s.st_mode & 0o170000, 0o010000);
    assert_eq!(stat(&mut v, "/dev/stdin", AT_SYMLINK_NOFOLLOW).unwrap().st_mode & 0o170000, 0o120000);
    let out = open(&mut v, "/dev/stdout", O_WRONLY | O_CREAT | O_APPEND, 0o644).unwrap();
    assert_eq!(v.ofd(v.ofd_of(out).unwrap()).target, Target::Stdout);
    let f = open(&mut v, "/tmp/f", O_CREAT | O_RDWR, 0o644).unwrap();
    write(&mut v, f, b"data").unwrap();
    let again = open(&mut v, &format!("/dev/fd/{f}"), O_RDONLY, 0).unwrap();
    assert_eq!(read(&mut v, again, 10).unwrap(), b"data");
    assert_eq!(open(&mut v, "/dev/fd/77", O_RDONLY, 0), Err(Errno::ENOENT));
}

/// `/dev/shoal/ready` (docs/serve.md "The explicit ready point"): a
/// character device 240:0 anyone may write; each write with bytes is one
/// `Ready` hypercall and answers its length; reads end of file.
#[test]
fn the_ready_device_calls_the_tender_at_each_write() {
    let mut v = vfs();
    let st = stat(&mut v, "/dev/shoal/ready", 0).unwrap();
    assert_eq!((st.st_mode, st.st_rdev), (0o020666, (240 << 8) as u64));
    let fd = open(&mut v, "/dev/shoal/ready", O_WRONLY | O_CREAT | O_TRUNC, 0o644).unwrap();
    let before = READY_CALLS.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(write(&mut v, fd, b"ready\n"), Ok(6));
    assert_eq!(write(&mut v, fd, b"again"), Ok(5));
    assert_eq!(READY_CALLS.load(std::sync::atomic::Ordering::SeqCst) - before, 2);
    let r = open(&mut v, "/dev/shoal/ready", O_RDONLY, 0).unwrap();
    assert_eq!(read(&mut v, r, 10).unwrap(), b"");
}

#[test]
fn archive_root_gets_devices() {
    boot_plat();
    let dir = std::env::temp_dir().join(format!("shoal-vfs-dev-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("dev")).unwrap();
    std::fs::write(dir.join("dev/keep"), b"k").unwrap();
    let bytes: &'static [u8] = Box::leak(shoal_archive::pack_dir(&dir).unwrap().into_boxed_slice());
    std::fs::remove_dir_all(&dir).unwrap();
    let mut fs = Fs::from_archive(bytes, clock).unwrap();
    dev::populate(&mut fs);
    let mut v = Vfs::new(fs);
    assert!(stat(&mut v, "/dev/keep", 0).is_ok());
    assert_eq!(stat(&mut v, "/dev/zero", 0).unwrap().st_rdev, 0x105);
    assert!(stat(&mut v, "/proc/self/fd/0", 0).is_ok());
}

/// F_GETPIPE_SZ / F_SETPIPE_SZ as Linux: rounded up to a power of two of
/// pages, EBUSY below what the pipe holds, EINVAL past 2 GiB, and the
/// size bounds what a write puts in.
#[test]
fn pipe_sizes_are_set_as_linux_sets_them() {
    let mut v = vfs();
    let (r, w) = pipe2(&mut v, O_NONBLOCK);
    let fcntl = |v: &mut Vfs, fd: i32, cmd: i32, arg: u64| v.fcntl(&args(&[fd as u64, cmd as u64, arg]));
    assert_eq!(fcntl(&mut v, r, F_GETPIPE_SZ, 0), Ok(65536));
    assert_eq!(fcntl(&mut v, w, F_SETPIPE_SZ, 0), Ok(4096));
    assert_eq!(fcntl(&mut v, r, F_SETPIPE_SZ, 5000), Ok(8192));
    assert_eq!(fcntl(&mut v, r, F_GETPIPE_SZ, 0), Ok(8192));
    assert_eq!(write(&mut v, w, &[7u8; 10_000]), Ok(8192));
    assert_eq!(write(&mut v, w, b"y"), Err(Errno::EAGAIN));
    assert_eq!(fcntl(&mut v, w, F_SETPIPE_SZ, 4096), Err(Errno::EBUSY));
    assert_eq!(fcntl(&mut v, w, F_SETPIPE_SZ, (1 << 31) + 1), Err(Errno::EINVAL));
    assert_eq!(fcntl(&mut v, w, F_SETPIPE_SZ, 1 << 20), Ok(1 << 20));
    assert_eq!(write(&mut v, w, b"y"), Ok(1));
    let f = open(&mut v, "/pipesz", O_CREAT | O_RDWR, 0o600).unwrap();
    assert_eq!(fcntl(&mut v, f, F_GETPIPE_SZ, 0), Err(Errno::EBADF));
    assert_eq!(fcntl(&mut v, f, F_SETPIPE_SZ, 4096), Err(Errno::EBADF));
}

#[test]
fn pipes_buffer_eof_epipe_and_nonblocking() {
    let mut v = vfs();
    let (r, w) = pipe2(&mut v, O_NONBLOCK);
    assert_eq!(read(&mut v, r, 4), Err(Errno::EAGAIN));
    assert!(!v.would_block(r), "O_NONBLOCK: EAGAIN is the answer");
    assert_eq!(write(&mut v, w, b"hello"), Ok(5));
    assert_eq!(read(&mut v, r, 3).unwrap(), b"hel");
    assert_eq!(write(&mut v, r, b"x"), Err(Errno::EBADF));
    assert_eq!(lseek(&mut v, r, 0, SEEK_SET), Err(Errno::ESPIPE));
    let big = vec![1u8; 70_000];
    assert_eq!(write(&mut v, w, &big), Ok(65536 - 2));
    assert_eq!(write(&mut v, w, b"y"), Err(Errno::EAGAIN));
    let st = {
        let mut st = Stat::default();
        v.fstat(&args(&[r as u64, &mut st as *mut Stat as u64])).unwrap();
        st
    };
    assert_eq!(st.st_mode & 0o170000, 0o010000);
    assert_eq!(st.st_dev, PIPE_DEV);
    v.close_fd(w).unwrap();
    let mut total = 0;
    loop {
        let n = read(&mut v, r, 100_000).unwrap().len();
        if n == 0 {
            break;
        }
        total += n;
    }
    assert_eq!(total, 65536);
    v.close_fd(r).unwrap();
    assert!(v.pipes.is_empty());
    // No reader: EPIPE.
    let (r, w) = pipe2(&mut v, O_CLOEXEC);
    v.close_fd(r).unwrap();
    assert_eq!(write(&mut v, w, b"x"), Err(Errno::EPIPE));
    // Blocking descriptor, empty pipe with a writer: the entry point waits,
    // and with one thread that is a deadlock (EDEADLK).
    let (r, _w) = pipe2(&mut v, 0);
    assert_eq!(read(&mut v, r, 1), Err(Errno::EAGAIN));
    assert!(v.would_block(r));
    assert_eq!(crate::wait::block("test", None), Err(Errno::EDEADLK));
    assert_eq!(v.pipe2(&args(&[0, 0])), Err(Errno::EFAULT));
    assert_eq!(v.pipe2(&args(&[8, 1])), Err(Errno::EINVAL));
}

#[test]
fn named_fifos() {
    let mut v = vfs();
    let s = c("/tmp/fifo");
    v.mknod(&args(&[p(&s), 0o010644, 0])).unwrap();
    assert_eq!(stat(&mut v, "/tmp/fifo", 0).unwrap().st_mode, 0o010644);
    assert_eq!(open(&mut v, "/tmp/fifo", O_WRONLY | O_NONBLOCK, 0), Err(Errno::ENXIO));
    // A blocking reader's end is made at once (a writer's open sees it),
    // and the open then waits for a writer (`pipe::await_partner`).
    let b = open(&mut v, "/tmp/fifo", O_RDONLY, 0).unwrap();
    let (fd, ino, writer, seen) = crate::pipe::WAIT_PARTNER.with(|x| x.take()).expect("waits for a writer");
    assert_eq!((fd, writer), (b, true));
    assert!(!v.fifo_partner_came(ino, true, seen));
    // A non-blocking reader that has seen no writer is not hung up.
    let r = open(&mut v, "/tmp/fifo", O_RDONLY | O_NONBLOCK, 0).unwrap();
    assert_eq!(v.ofd_ready(v.ofd_of(r).unwrap()).unwrap().mask & crate::obj::EPOLLHUP, 0);
    let w = open(&mut v, "/tmp/fifo", O_WRONLY, 0).unwrap();
    assert!(crate::pipe::WAIT_PARTNER.with(|x| x.take()).is_none(), "a reader is there");
    assert!(v.fifo_partner_came(ino, true, seen));
    write(&mut v, w, b"abc").unwrap();
    assert_eq!(read(&mut v, r, 10).unwrap(), b"abc");
    v.close_fd(w).unwrap();
    assert_ne!(v.ofd_ready(v.ofd_of(r).unwrap()).unwrap().mask & crate::obj::EPOLLHUP, 0, "a writer came and went");
    // A socket's name: made by mknod too, never opened.
    let so = c("/tmp/sock");
    v.mknod(&args(&[p(&so), 0o140644, 0])).unwrap();
    assert_eq!(stat(&mut v, "/tmp/sock", 0).unwrap().st_mode, 0o140644);
    assert_eq!(open(&mut v, "/tmp/sock", O_RDONLY, 0), Err(Errno::ENXIO));
    assert_eq!(v.bind_socket_file(b"/tmp/sock"), Err(Errno(98)));
    let ino = v.bind_socket_file(b"/tmp/sock2").unwrap();
    assert_eq!(v.socket_file(b"/tmp/sock2"), Ok(ino));
    assert_eq!(v.socket_file(b"/tmp/fifo"), Err(Errno(111)));
    assert_eq!(v.socket_file(b"/tmp/none"), Err(Errno::ENOENT));
    let d = c("/tmp/dev");
    assert_eq!(v.mknod(&args(&[p(&d), 0o020644, 0x103])), Err(Errno::EPERM));
    assert_eq!(v.mknod(&args(&[p(&d), 0o100644, 0])), Ok(0));
    assert_eq!(v.mknod(&args(&[p(&d), 0o100644, 0])), Err(Errno::EEXIST));
}

#[test]
fn poll_and_select_readiness() {
    use crate::poll::*;
    let mut v = vfs();
    let (r, w) = pipe2(&mut v, 0);
    let f = open(&mut v, "/tmp/f", O_CREAT | O_RDWR, 0o644).unwrap();
    let mut fds = [
        PollFd { fd: r, events: POLLIN, revents: 0 },
        PollFd { fd: w, events: POLLOUT, revents: 0 },
        PollFd { fd: f, events: POLLIN | POLLOUT, revents: 0 },
        PollFd { fd: 0, events: POLLIN, revents: 0 },
        PollFd { fd: 1, events: POLLOUT, revents: 0 },
        PollFd { fd: 500, events: POLLIN, revents: 0 },
        PollFd { fd: -1, events: POLLIN, revents: 0 },
    ];
    assert_eq!(v.poll_scan(&mut fds), 5);
    assert_eq!(fds[0].revents, 0);
    assert_eq!(fds[1].revents, POLLOUT);
    assert_eq!(fds[2].revents, POLLIN | POLLOUT);
    assert_eq!(fds[3].revents, POLLIN);
    assert_eq!(fds[4].revents, POLLOUT);
    assert_eq!(fds[5].revents, POLLNVAL);
    assert_eq!(fds[6].revents, 0);
    write(&mut v, w, b"x").unwrap();
    v.close_fd(w).unwrap();
    assert_eq!(v.poll_scan(&mut fds[..1]), 1);
    assert_eq!(fds[0].revents, POLLIN | POLLHUP);
    let mut sets = [Some(vec![1u64 << r]), Some(vec![1u64 << f]), None];
    assert_eq!(v.select_scan(64, &mut sets), Ok(2));
    let mut bad = [Some(vec![1u64 << 40]), None, None];
    assert_eq!(v.select_scan(64, &mut bad), Err(Errno::EBADF));
}

#[test]
fn owners_statfs_times_and_space() {
    let mut v = vfs();
    let f = open(&mut v, "/tmp/o", O_CREAT | O_RDWR, 0o644).unwrap();
    let s = c("/tmp/o");
    v.fchmod(&args(&[f as u64, 0o6755])).unwrap();
    v.fchown(&args(&[f as u64, 1000, u32::MAX as u64])).unwrap();
    let st = stat(&mut v, "/tmp/o", 0).unwrap();
    assert_eq!((st.st_uid, st.st_gid, st.st_mode & 0o7777), (1000, 0, 0o755));
    v.chown(&args(&[p(&s), u32::MAX as u64, 9])).unwrap();
    assert_eq!(stat(&mut v, "/tmp/o", 0).unwrap().st_gid, 9);
    let mut sf = crate::more::Statfs::default();
    v.statfs(&args(&[p(&s), &mut sf as *mut _ as u64])).unwrap();
    assert_eq!(sf.f_type, crate::more::TMPFS_MAGIC);
    assert_eq!(sf.f_namelen, 255);
    v.fstatfs(&args(&[1, &mut sf as *mut _ as u64])).unwrap();
    assert_eq!(sf.f_type, crate::more::PIPEFS_MAGIC);
    let tv: [i64; 4] = [10, 1, 20, 2];
    v.utimes(&args(&[p(&s), tv.as_ptr() as u64])).unwrap();
    let st = stat(&mut v, "/tmp/o", 0).unwrap();
    assert_eq!((st.st_atime, st.st_atime_nsec, st.st_mtime, st.st_mtime_nsec), (10, 1000, 20, 2000));
    let bad: [i64; 4] = [10, 1_000_000, 20, 2];
    assert_eq!(v.utimes(&args(&[p(&s), bad.as_ptr() as u64])), Err(Errno::EINVAL));
    assert_eq!(v.fallocate(&args(&[f as u64, 0, 100, 900])), Ok(0));
    assert_eq!(stat(&mut v, "/tmp/o", 0).unwrap().st_size, 1000);
    assert_eq!(v.fallocate(&args(&[f as u64, 1, 0, 10])), Err(Errno::EOPNOTSUPP));
    assert_eq!(v.fallocate(&args(&[f as u64, 0, 0, 0])), Err(Errno::EINVAL));
    assert_eq!(v.fadvise64(&args(&[f as u64, 0, 0, 2])), Ok(0));
    assert_eq!(v.fadvise64(&args(&[0, 0, 0, 2])), Err(Errno::ESPIPE));
    assert_eq!(v.sync_file_range(&args(&[f as u64, 0, 0, 8])), Err(Errno::EINVAL));
    assert_eq!(v.syncfs(&args(&[f as u64])), Ok(0));
    assert_eq!(v.readahead(&args(&[f as u64, 0, 10])), Ok(0));
}

#[test]
fn vector_io_sendfile_and_copies() {
    let mut v = vfs();
    let f = open(&mut v, "/tmp/v", O_CREAT | O_RDWR, 0o644).unwrap();
    let (a, b) = (*b"abc", *b"defg");
    let iov: [u64; 4] = [a.as_ptr() as u64, 3, b.as_ptr() as u64, 4];
    assert_eq!(v.pwritev(&args(&[f as u64, iov.as_ptr() as u64, 2, 5])), Ok(7));
    assert_eq!(lseek(&mut v, f, 0, SEEK_CUR), Ok(0));
    let (mut x, mut y) = ([0u8; 3], [0u8; 4]);
    let iov: [u64; 4] = [x.as_mut_ptr() as u64, 3, y.as_mut_ptr() as u64, 4];
    assert_eq!(v.preadv2(&args(&[f as u64, iov.as_ptr() as u64, 2, 5, 0, 0])), Ok(7));
    assert_eq!((&x, &y), (b"abc", b"defg"));
    assert_eq!(v.preadv2(&args(&[f as u64, iov.as_ptr() as u64, 2, 5, 0, 0x200])), Err(Errno::EOPNOTSUPP));
    // sendfile file -> pipe, with an offset pointer.
    let (r, w) = pipe2(&mut v, 0);
    let mut off: i64 = 5;
    assert_eq!(v.sendfile(&args(&[w as u64, f as u64, &mut off as *mut i64 as u64, 4])), Ok(4));
    assert_eq!(off, 9);
    assert_eq!(read(&mut v, r, 10).unwrap(), b"abcd");
    assert_eq!(v.sendfile(&args(&[r as u64, f as u64, 0, 4])), Err(Errno::EBADF), "output not writable");
    assert_eq!(v.sendfile(&args(&[w as u64, r as u64, 0, 4])), Err(Errno::EINVAL));
    // copy_file_range between files.
    let g = open(&mut v, "/tmp/g", O_CREAT | O_RDWR, 0o644).unwrap();
    let mut o1: i64 = 8;
    assert_eq!(v.copy_file_range(&args(&[f as u64, &mut o1 as *mut i64 as u64, g as u64, 0, 100, 0])), Ok(4));
    assert_eq!(o1, 12);
    assert_eq!(lseek(&mut v, g, 0, SEEK_CUR), Ok(4));
    lseek(&mut v, g, 0, SEEK_SET).unwrap();
    assert_eq!(read(&mut v, g, 10).unwrap(), b"defg");
    // getdents (old format): d_type in the last byte of each record.
    let d = open(&mut v, "/dev", O_RDONLY | O_DIRECTORY, 0).unwrap();
    let mut buf = vec![0u8; 4096];
    let n = v.getdents(&args(&[d as u64, buf.as_mut_ptr() as u64, 4096])).unwrap() as usize;
    let mut off = 0;
    let mut found = false;
    while off < n {
        let reclen = u16::from_le_bytes([buf[off + 16], buf[off + 17]]) as usize;
        if &buf[off + 18..off + 23] == b"null\0" {
            assert_eq!(buf[off + reclen - 1], 2, "DT_CHR");
            found = true;
        }
        off += reclen;
    }
    assert!(found);
}

#[test]
fn file_ops_for_mm() {
    boot_plat();
    init();
    let fd = with(|v| open(v, "/tmp/m", O_CREAT | O_RDWR, 0o644)).unwrap();
    with(|v| write(v, fd, b"0123456789")).unwrap();
    let ops = &crate::mmap::OPS;
    let shoal_mm::file::Mappable::File(ino) = (ops.get)(fd, true).unwrap() else { panic!() };
    let mut b = [0u8; 4];
    assert_eq!((ops.read_at)(ino, 8, &mut b), Ok(2));
    assert_eq!((ops.size)(ino), Ok(10));
    // The page a shared mapping shows is the file's own storage.
    let Ok(Some((page, true))) = (ops.page)(ino, 5) else { panic!("first hand-out") };
    assert_eq!(page % 4096, 0);
    assert_eq!((ops.page)(ino, 0), Ok(Some((page, true))), "same page, not handed out yet");
    (ops.handed_out)(ino, 0);
    assert_eq!((ops.page)(ino, 0), Ok(Some((page, false))), "handed out before");
    assert_eq!((ops.page)(ino, 4096), Ok(None), "past the end");
    with(|v| lseek(v, fd, 3, 0)).unwrap();
    with(|v| write(v, fd, b"AB")).unwrap();
    // SAFETY: the file's page, which the file keeps.
    assert_eq!(unsafe { *((page + 3) as *const u8) }, b'A', "write lands in the page");
    (ops.release)(ino);
    let ro = with(|v| open(v, "/tmp/m", O_RDONLY, 0)).unwrap();
    assert_eq!((ops.get)(ro, true), Err(Errno::EACCES));
    assert_eq!((ops.get)(0, false), Err(Errno::ENODEV));
    let z = with(|v| open(v, "/dev/zero", O_RDONLY, 0)).unwrap();
    assert_eq!((ops.get)(z, false), Ok(shoal_mm::file::Mappable::Zero));
}

#[test]
fn writes_into_read_only_memory_are_efault() {
    // A system call asked to write into the image's code
    // or read-only data answers EFAULT (umem's read-only ranges), before it
    // has any effect.
    static mut RO: [u8; 0x100] = [0; 0x100];
    let mut v = vfs();
    let ro = core::ptr::addr_of_mut!(RO) as u64;
    // The boot-info page stays read-only too, as boot::init set it.
    let boot = (shoal_abi::BOOT_INFO_ADDR, shoal_abi::BOOT_INFO_ADDR + shoal_abi::PAGE_SIZE);
    shoal_plat::umem::set_read_only(&[boot, (ro, ro + 0x100)]);
    let fd = open(&mut v, "/tmp/efault", O_CREAT | O_RDWR, 0o666).unwrap();
    assert_eq!(write(&mut v, fd, b"data").unwrap(), 4);
    assert_eq!(lseek(&mut v, fd, 0, SEEK_SET).unwrap(), 0);
    assert_eq!(v.read(&args(&[fd as u64, ro, 4])), Err(Errno::EFAULT));
    assert_eq!(lseek(&mut v, fd, 0, SEEK_CUR).unwrap(), 0, "nothing was read");
    assert_eq!(v.fstat(&args(&[fd as u64, ro])), Err(Errno::EFAULT));
    // A pipe is not made at all: no descriptor leaks.
    assert_eq!(v.pipe2(&args(&[ro, 0])), Err(Errno::EFAULT));
    let next = open(&mut v, "/tmp/efault", O_RDONLY, 0).unwrap();
    assert_eq!(next, fd + 1);
    // Reading from read-only memory is fine (a write(2) of a constant).
    assert_eq!(v.write(&args(&[fd as u64, ro, 4])), Ok(4));
    // SAFETY: nothing wrote RO (every write was refused); a plain read.
    assert_eq!(unsafe { (*core::ptr::addr_of!(RO))[0] }, 0);
}

/// An empty root names the loopback addresses in /etc/hosts, so that
/// getaddrinfo("localhost") needs no name server.
#[test]
fn the_empty_root_has_an_etc_hosts_for_localhost() {
    let mut fs = super::empty_root();
    let root = fs.root();
    let etc = fs.lookup(root, b"etc").unwrap();
    let hosts = fs.lookup(etc, b"hosts").unwrap();
    let mut buf = [0u8; 128];
    let n = fs.read(hosts, 0, &mut buf).unwrap();
    assert_eq!(&buf[..n], super::DEFAULT_HOSTS);
    assert!(core::str::from_utf8(&buf[..n]).unwrap().contains("127.0.0.1\tlocalhost"));
}

/// An empty root has root and nobody in /etc/passwd and /etc/group (nginx
/// as root looks up "nobody"), an nsswitch.conf that reads them, and an
/// /etc/localtime link to UTC.
#[test]
fn the_empty_root_has_passwd_group_and_nsswitch() {
    let mut fs = super::empty_root();
    let root = fs.root();
    let etc = fs.lookup(root, b"etc").unwrap();
    let mut read = |name: &[u8]| {
        let ino = fs.lookup(etc, name).unwrap();
        let mut buf = [0u8; 256];
        let n = fs.read(ino, 0, &mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    };
    let passwd = read(b"passwd");
    assert!(passwd.lines().any(|l| l == "root:x:0:0:root:/root:/bin/sh"), "{passwd}");
    assert!(passwd.lines().any(|l| l.starts_with("nobody:x:65534:65534:")), "{passwd}");
    let group = read(b"group");
    assert!(group.lines().any(|l| l == "root:x:0:") && group.lines().any(|l| l == "nogroup:x:65534:"), "{group}");
    assert!(read(b"nsswitch.conf").lines().any(|l| l == "passwd: files"));
    let localtime = fs.lookup(etc, b"localtime").unwrap();
    assert_eq!(fs.readlink(localtime).unwrap(), b"/usr/share/zoneinfo/Etc/UTC");
}

#[test]
fn descriptor_and_file_size_limits() {
    let mut v = vfs();
    v.set_limits(5, 10);
    let a = open(&mut v, "/tmp/l", O_CREAT | O_RDWR, 0o644).unwrap();
    assert_eq!(open(&mut v, "/tmp/l", O_RDWR, 0), Ok(4));
    assert_eq!(open(&mut v, "/tmp/l", O_RDWR, 0), Err(Errno::EMFILE));
    assert_eq!(v.dup(&args(&[a as u64])), Err(Errno::EMFILE));
    assert_eq!(v.fcntl(&args(&[a as u64, F_DUPFD as u64, 5])), Err(Errno::EINVAL));
    assert_eq!(v.dup2(&args(&[a as u64, 7])), Err(Errno::EBADF));
    // RLIMIT_FSIZE: cut short at the limit, then EFBIG and SIGXFSZ due.
    assert_eq!(write(&mut v, a, &[7u8; 15]), Ok(10));
    assert!(!crate::take_xfsz());
    assert_eq!(write(&mut v, a, b"x"), Err(Errno::EFBIG));
    assert!(crate::take_xfsz());
    assert_eq!(v.ftruncate(&args(&[a as u64, 20])), Err(Errno::EFBIG));
    assert!(crate::take_xfsz());
    assert_eq!(v.ftruncate(&args(&[a as u64, 5])), Ok(0));
    assert_eq!(write(&mut v, 1, b""), Ok(0), "the console is not a regular file");
    v.set_limits(1024, u64::MAX);
    assert_eq!(write(&mut v, a, &[7u8; 15]), Ok(15));
}

#[test]
fn ppoll_applies_its_signal_mask() {
    use crate::poll::*;
    boot_plat();
    let (r, _w) = crate::with(|v| pipe2(v, 0));
    let usr1 = 1u64 << 9;
    let empty = 0u64;
    let zero = [0i64, 0];
    let mut pf = PollFd { fd: r, events: POLLIN, revents: 0 };
    let call = |pf: &mut PollFd, mask: &u64, size: u64| ppoll(&args(&[pf as *mut PollFd as u64, 1, zero.as_ptr() as u64, mask as *const u64 as u64, size]));
    // Blocked and pending; the empty mask lets it through: EINTR, and the
    // temporary mask stays until the syscall table delivered the signal.
    shoal_sched::set_sig_state(usr1, usr1);
    assert_eq!(call(&mut pf, &empty, 8), Err(Errno::EINTR));
    assert_eq!(shoal_sched::sig_state(), (0, usr1));
    assert_eq!(shoal_sched::take_saved_mask(), Some(usr1));
    // Still blocked by the temporary mask: the timeout, old mask back.
    shoal_sched::set_sig_state(0, usr1);
    assert_eq!(call(&mut pf, &usr1, 8), Ok(0));
    assert_eq!(shoal_sched::sig_state(), (0, usr1));
    assert_eq!(shoal_sched::take_saved_mask(), None);
    assert_eq!(call(&mut pf, &usr1, 4), Err(Errno::EINVAL));
    shoal_sched::set_sig_state(0, 0);
}

#[test]
fn pwritev2_rwf_flags() {
    use crate::more::*;
    let mut v = vfs();
    let f = open(&mut v, "/tmp/rwf", O_CREAT | O_RDWR, 0o644).unwrap();
    write(&mut v, f, b"0123456789").unwrap();
    let ab = *b"ab";
    let iov: [u64; 2] = [ab.as_ptr() as u64, 2];
    let pw = |v: &mut Vfs, fd: i32, pos: i64, fl: u32| v.pwritev2(&args(&[fd as u64, iov.as_ptr() as u64, 1, pos as u64, 0, fl as u64]));
    // RWF_APPEND: at the end whatever the offset; the offset stays.
    assert_eq!(pw(&mut v, f, 2, RWF_APPEND), Ok(2));
    assert_eq!(lseek(&mut v, f, 0, SEEK_CUR), Ok(10));
    assert_eq!(
        v.fs.size(match v.ofd(v.ofd_of(f).unwrap()).target {
            Target::Node(i) => i,
            _ => unreachable!(),
        }),
        Ok(12)
    );
    // At offset -1 (the description's): the offset moves to the end.
    assert_eq!(pw(&mut v, f, -1, RWF_APPEND), Ok(2));
    assert_eq!(lseek(&mut v, f, 0, SEEK_CUR), Ok(14));
    // HIPRI, DSYNC, SYNC, NOSIGNAL: nothing to do; plain positioned writes.
    for fl in [RWF_HIPRI, RWF_DSYNC, RWF_SYNC, RWF_NOSIGNAL] {
        assert_eq!(pw(&mut v, f, 0, fl), Ok(2));
    }
    // Not for tmpfs-like files, or unknown: EOPNOTSUPP; both appends: EINVAL.
    for fl in [RWF_NOWAIT, RWF_ATOMIC, RWF_DONTCACHE, 0x200] {
        assert_eq!(pw(&mut v, f, 0, fl), Err(Errno::EOPNOTSUPP), "flag {fl:#x}");
    }
    assert_eq!(pw(&mut v, f, 0, RWF_APPEND | RWF_NOAPPEND), Err(Errno::EINVAL));
    assert_eq!(pw(&mut v, f, -2, 0), Err(Errno::EINVAL));
    // RWF_NOAPPEND on an O_APPEND description writes at the offset given.
    let g = open(&mut v, "/tmp/rwf", O_RDWR | O_APPEND, 0).unwrap();
    assert_eq!(pw(&mut v, g, 4, RWF_NOAPPEND), Ok(2));
    let mut b = [0u8; 16];
    assert_eq!(v.pread64(&args(&[f as u64, b.as_mut_ptr() as u64, 16, 0])), Ok(14));
    assert_eq!(&b[..14], b"ab23ab6789abab");
    // RWF_NOWAIT on a pipe: EAGAIN instead of waiting.
    let (r, _w) = pipe2(&mut v, 0);
    let mut x = [0u8; 4];
    let riov: [u64; 2] = [x.as_mut_ptr() as u64, 4];
    assert_eq!(v.preadv2(&args(&[r as u64, riov.as_ptr() as u64, 1, u64::MAX, 0, RWF_NOWAIT as u64])), Err(Errno::EAGAIN));
    let ro = open(&mut v, "/tmp/rwf", O_RDONLY, 0).unwrap();
    assert_eq!(pw(&mut v, ro, 0, 0x200), Err(Errno::EBADF), "EBADF before the flags");
}

#[test]
fn dev_shm_is_a_sticky_world_writable_directory() {
    let mut v = vfs();
    let st = stat(&mut v, "/dev/shm", 0).unwrap();
    assert_eq!(st.st_mode, shoal_ramfs::S_IFDIR | 0o1777);
    let fd = open(&mut v, "/dev/shm/sem.x", O_CREAT | O_EXCL | O_RDWR, 0o600).unwrap();
    assert_eq!(write(&mut v, fd, b"abc"), Ok(3));
}
