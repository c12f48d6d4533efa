//! Linux x86-64 constants and structure layouts of the file-system calls.

#![allow(missing_docs)]

/// `dirfd` meaning "the working directory".
pub const AT_FDCWD: i32 = -100;
pub const AT_SYMLINK_NOFOLLOW: u32 = 0x100;
pub const AT_REMOVEDIR: u32 = 0x200;
pub const AT_EACCESS: u32 = 0x200;
pub const AT_SYMLINK_FOLLOW: u32 = 0x400;
pub const AT_NO_AUTOMOUNT: u32 = 0x800;
pub const AT_EMPTY_PATH: u32 = 0x1000;
pub const AT_STATX_SYNC_TYPE: u32 = 0x6000;

pub const O_ACCMODE: u32 = 3;
pub const O_RDONLY: u32 = 0;
pub const O_WRONLY: u32 = 1;
pub const O_RDWR: u32 = 2;
pub const O_CREAT: u32 = 0o100;
pub const O_EXCL: u32 = 0o200;
pub const O_NOCTTY: u32 = 0o400;
pub const O_TRUNC: u32 = 0o1000;
pub const O_APPEND: u32 = 0o2000;
pub const O_NONBLOCK: u32 = 0o4000;
pub const O_DSYNC: u32 = 0o10000;
pub const O_ASYNC: u32 = 0o20000;
pub const O_DIRECT: u32 = 0o40000;
pub const O_LARGEFILE: u32 = 0o100000;
pub const O_DIRECTORY: u32 = 0o200000;
pub const O_NOFOLLOW: u32 = 0o400000;
pub const O_NOATIME: u32 = 0o1000000;
pub const O_CLOEXEC: u32 = 0o2000000;
pub const O_SYNC: u32 = 0o4010000;
pub const O_PATH: u32 = 0o10000000;
pub const O_TMPFILE_BIT: u32 = 0o20000000;

pub const F_DUPFD: i32 = 0;
pub const F_GETFD: i32 = 1;
pub const F_SETFD: i32 = 2;
pub const F_GETFL: i32 = 3;
pub const F_SETFL: i32 = 4;
pub const F_GETLK: i32 = 5;
pub const F_SETLK: i32 = 6;
pub const F_SETLKW: i32 = 7;
pub const F_SETOWN: i32 = 8;
pub const F_GETOWN: i32 = 9;
pub const F_OFD_GETLK: i32 = 36;
pub const F_OFD_SETLK: i32 = 37;
pub const F_OFD_SETLKW: i32 = 38;
pub const F_DUPFD_CLOEXEC: i32 = 1030;
pub const F_SETPIPE_SZ: i32 = 1031;
pub const F_GETPIPE_SZ: i32 = 1032;
pub const FD_CLOEXEC: u64 = 1;
pub const F_RDLCK: i16 = 0;
pub const F_WRLCK: i16 = 1;
pub const F_UNLCK: i16 = 2;

pub const SEEK_SET: u32 = 0;
pub const SEEK_CUR: u32 = 1;
pub const SEEK_END: u32 = 2;
pub const SEEK_DATA: u32 = 3;
pub const SEEK_HOLE: u32 = 4;

pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;
pub const RENAME_WHITEOUT: u32 = 4;

pub const UTIME_NOW: i64 = (1 << 30) - 1;
pub const UTIME_OMIT: i64 = (1 << 30) - 2;

pub const F_OK: u32 = 0;
pub const X_OK: u32 = 1;
pub const W_OK: u32 = 2;
pub const R_OK: u32 = 4;

pub const FIONREAD: u32 = 0x541B;
pub const FIONBIO: u32 = 0x5421;
pub const FIONCLEX: u32 = 0x5450;
pub const FIOCLEX: u32 = 0x5451;

/// Most iovecs in one `readv`/`writev`.
pub const IOV_MAX: usize = 1024;
/// Longest path, including its NUL.
pub const PATH_MAX: usize = 4096;
/// Most bytes one read or write transfers (Linux's `MAX_RW_COUNT`).
pub const MAX_RW_COUNT: usize = 0x7fff_f000;
/// Symbolic links followed in one resolution before `ELOOP`.
pub const MAXSYMLINKS: u32 = 40;

pub const STATX_TYPE: u32 = 0x1;
pub const STATX_BASIC_STATS: u32 = 0x7ff;
pub const STATX_BTIME: u32 = 0x800;
pub const STATX_RESERVED: u32 = 0x8000_0000;

/// `struct stat` of x86-64 Linux (144 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    pub st_dev: u64,
    pub st_ino: u64,
    pub st_nlink: u64,
    pub st_mode: u32,
    pub st_uid: u32,
    pub st_gid: u32,
    pub pad0: u32,
    pub st_rdev: u64,
    pub st_size: i64,
    pub st_blksize: i64,
    pub st_blocks: i64,
    pub st_atime: i64,
    pub st_atime_nsec: i64,
    pub st_mtime: i64,
    pub st_mtime_nsec: i64,
    pub st_ctime: i64,
    pub st_ctime_nsec: i64,
    pub reserved: [i64; 3],
}

/// `struct statx_timestamp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct StatxTimestamp {
    pub tv_sec: i64,
    pub tv_nsec: u32,
    pub reserved: i32,
}

/// `struct statx` (256 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Statx {
    pub stx_mask: u32,
    pub stx_blksize: u32,
    pub stx_attributes: u64,
    pub stx_nlink: u32,
    pub stx_uid: u32,
    pub stx_gid: u32,
    pub stx_mode: u16,
    pub spare0: u16,
    pub stx_ino: u64,
    pub stx_size: u64,
    pub stx_blocks: u64,
    pub stx_attributes_mask: u64,
    pub stx_atime: StatxTimestamp,
    pub stx_btime: StatxTimestamp,
    pub stx_ctime: StatxTimestamp,
    pub stx_mtime: StatxTimestamp,
    pub stx_rdev_major: u32,
    pub stx_rdev_minor: u32,
    pub stx_dev_major: u32,
    pub stx_dev_minor: u32,
    pub stx_mnt_id: u64,
    pub stx_dio_mem_align: u32,
    pub stx_dio_offset_align: u32,
    pub spare3: [u64; 12],
}

/// `struct flock` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flock {
    pub l_type: i16,
    pub l_whence: i16,
    pub l_start: i64,
    pub l_len: i64,
    pub l_pid: i32,
}

/// Offset of `d_name` in `struct linux_dirent64` (`d_ino` u64, `d_off`
/// i64, `d_reclen` u16, `d_type` u8).
pub const DIRENT64_NAME: usize = 19;

/// Appends one `struct linux_dirent64` to `out` if it fits in `cap` bytes
/// total; returns false if it does not.
pub fn push_dirent64(out: &mut alloc::vec::Vec<u8>, cap: usize, ino: u64, off: u64, dtype: u8, name: &[u8]) -> bool {
    let reclen = (DIRENT64_NAME + name.len() + 1 + 7) & !7;
    if out.len() + reclen > cap {
        return false;
    }
    out.extend_from_slice(&ino.to_le_bytes());
    out.extend_from_slice(&off.to_le_bytes());
    out.extend_from_slice(&(reclen as u16).to_le_bytes());
    out.push(dtype);
    out.extend_from_slice(name);
    out.resize(out.len() + reclen - DIRENT64_NAME - name.len(), 0);
    true
}

/// A directory-record encoder ([`push_dirent64`], [`push_dirent`]): appends
/// the record of (`d_ino`, `d_off`, `d_type`, name) to the buffer if it fits
/// in the capacity, else returns `false`.
pub type DirentEncoder = fn(&mut alloc::vec::Vec<u8>, usize, u64, u64, u8, &[u8]) -> bool;

/// Appends one `struct linux_dirent` (the old `getdents` record: `d_ino`,
/// `d_off`, `d_reclen`, the name, a NUL, and `d_type` in the last byte) if
/// it fits in `cap` bytes; `false` if it does not.
pub fn push_dirent(out: &mut alloc::vec::Vec<u8>, cap: usize, ino: u64, off: u64, dtype: u8, name: &[u8]) -> bool {
    let reclen = (18 + name.len() + 2 + 7) & !7;
    if out.len() + reclen > cap {
        return false;
    }
    out.extend_from_slice(&ino.to_le_bytes());
    out.extend_from_slice(&off.to_le_bytes());
    out.extend_from_slice(&(reclen as u16).to_le_bytes());
    out.extend_from_slice(name);
    out.resize(out.len() + reclen - 18 - name.len() - 1, 0);
    out.push(dtype);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_linux_x86_64() {
        assert_eq!(size_of::<Stat>(), 144);
        assert_eq!(offset_of!(Stat, st_mode), 24);
        assert_eq!(offset_of!(Stat, st_rdev), 40);
        assert_eq!(offset_of!(Stat, st_size), 48);
        assert_eq!(offset_of!(Stat, st_atime), 72);
        assert_eq!(offset_of!(Stat, st_ctime_nsec), 112);
        assert_eq!(size_of::<Statx>(), 256);
        assert_eq!(offset_of!(Statx, stx_mode), 28);
        assert_eq!(offset_of!(Statx, stx_ino), 32);
        assert_eq!(offset_of!(Statx, stx_atime), 64);
        assert_eq!(offset_of!(Statx, stx_mtime), 112);
        assert_eq!(offset_of!(Statx, stx_rdev_major), 128);
        assert_eq!(offset_of!(Statx, stx_mnt_id), 144);
        assert_eq!(size_of::<Flock>(), 32);
        assert_eq!(offset_of!(Flock, l_start), 8);
        assert_eq!(offset_of!(Flock, l_pid), 24);
    }

    #[test]
    fn dirent_records_are_aligned() {
        let mut v = alloc::vec::Vec::new();
        assert!(push_dirent64(&mut v, 100, 7, 3, 8, b"abcde"));
        assert_eq!(v.len(), 32);
        assert_eq!(u16::from_le_bytes([v[16], v[17]]), 32);
        assert_eq!(&v[19..25], b"abcde\0");
        assert!(!push_dirent64(&mut v, 40, 7, 3, 8, b"x"));
    }
}
