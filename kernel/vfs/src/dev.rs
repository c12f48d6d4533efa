//! Special files: the character devices of `/dev`, the links to the
//! standard streams, and `/proc/self/fd`.

use shoal_plat::Errno;
use shoal_ramfs::{makedev, FileType, Fs, Ino};

/// What a character device does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// `/dev/null` (1, 3): reads end of file, writes vanish.
    Null,
    /// `/dev/zero` (1, 5): reads zeros, writes vanish.
    Zero,
    /// `/dev/full` (1, 7): reads zeros, writes fail with `ENOSPC`.
    Full,
    /// `/dev/random` (1, 8) and `/dev/urandom` (1, 9): the kernel's CSPRNG
    /// (never blocks: it is seeded at boot); writes are accepted and
    /// ignored (they would only add entropy).
    Random,
    /// `/dev/shoal/ready` (`shoal_abi::READY_DEVICE_PATH`): a write of any
    /// bytes is the program's explicit ready point (the `Ready`
    /// hypercall; docs/serve.md "The explicit ready point"); reads end of
    /// file.
    Ready,
}

/// The devices shoal provides: name, major, minor, what.
const DEVICES: [(&[u8], u32, u32, Device); 5] = [
    (b"null", 1, 3, Device::Null),
    (b"zero", 1, 5, Device::Zero),
    (b"full", 1, 7, Device::Full),
    (b"random", 1, 8, Device::Random),
    (b"urandom", 1, 9, Device::Random),
];

/// The device with number `rdev` (`ENXIO`: no such device, as Linux
/// answers opening a device node nobody drives).
pub fn device(rdev: u64) -> Result<Device, Errno> {
    if rdev == ready_rdev() {
        return Ok(Device::Ready);
    }
    DEVICES.iter().find(|d| makedev(d.1, d.2) == rdev).map(|d| d.3).ok_or(Errno::ENXIO)
}

/// The ready device's number.
fn ready_rdev() -> u64 {
    makedev(shoal_abi::READY_DEVICE_MAJOR, shoal_abi::READY_DEVICE_MINOR)
}

/// Looks up or creates directory `name` in `dir`.
fn dir_in(fs: &mut Fs, dir: Ino, name: &[u8], perm: u32) -> Option<Ino> {
    match fs.lookup(dir, name) {
        Ok(i) if fs.file_type(i).ok()? == FileType::Directory => Some(i),
        Ok(_) => None,
        Err(_) => fs.mkdir(dir, name, perm).ok(),
    }
}

/// Adds the special files to `fs` (names that exist are left alone),
/// and `/dev/shm` (mode 1777).
pub fn populate(fs: &mut Fs) {
    let root = fs.root();
    if let Some(dev) = dir_in(fs, root, b"dev", 0o755) {
        for (name, major, minor, _) in DEVICES {
            let _ = fs.mkchardev(dev, name, 0o666, makedev(major, minor));
        }
        for (name, target) in
            [(&b"stdin"[..], &b"/proc/self/fd/0"[..]), (b"stdout", b"/proc/self/fd/1"), (b"stderr", b"/proc/self/fd/2"), (b"fd", b"/proc/self/fd")]
        {
            let _ = fs.symlink(dev, name, target);
        }
        // POSIX shared memory and named semaphores (musl's shm_open and
        // sem_open) live in /dev/shm, memory-backed like the rest.
        dir_in(fs, dev, b"shm", 0o1777);
        // Writable by every user: saying "ready" gives a program nothing
        // but the end of its template's run (it never serves there).
        if let Some(shoal) = dir_in(fs, dev, b"shoal", 0o755) {
            let _ = fs.mkchardev(shoal, b"ready", 0o666, ready_rdev());
        }
    }
    if let Some(proc_) = dir_in(fs, root, b"proc", 0o555) {
        if let Some(me) = dir_in(fs, proc_, b"self", 0o555) {
            dir_in(fs, me, b"fd", 0o500);
        }
    }
    crate::procfs::populate(fs);
}

/// The inode of `/proc/self/fd`, if the root has one.
pub fn fd_dir(fs: &Fs) -> Option<Ino> {
    let p = fs.lookup(fs.root(), b"proc").ok()?;
    let s = fs.lookup(p, b"self").ok()?;
    let d = fs.lookup(s, b"fd").ok()?;
    (fs.file_type(d).ok()? == FileType::Directory).then_some(d)
}

impl crate::Vfs {
    /// Looks `name` up in directory `dir`; in `/proc/self/fd`, a number
    /// names what that descriptor refers to.
    pub(crate) fn lookup(&self, dir: Ino, name: &[u8]) -> Result<Ino, Errno> {
        if shoal_hostfs::is_host(dir) {
            return match name {
                b"." => Ok(dir),
                b".." => match shoal_hostfs::parent(dir)? {
                    Some(p) => self.mounted(p),
                    None => self.mount_parent(dir),
                },
                _ => match shoal_hostfs::lookup(dir, name) {
                    Err(Errno::ENOENT) => self.inner_at(dir, name).ok_or(Errno::ENOENT),
                    r => self.mounted(r?),
                },
            };
        }
        if Some(dir) == self.fd_dir && !name.is_empty() && name.iter().all(u8::is_ascii_digit) && name.len() < 8 {
            let fd: i32 = core::str::from_utf8(name).ok().and_then(|s| s.parse().ok()).ok_or(Errno::ENOENT)?;
            let t = self.ofd(self.ofd_of(fd).map_err(|_| Errno::ENOENT)?).target;
            return Ok(match t {
                crate::Target::Stdin => self.console[0],
                crate::Target::Stdout => self.console[1],
                crate::Target::Stderr => self.console[2],
                other => other.ino().ok_or(Errno::ENOENT)?,
            });
        }
        let ino = match self.fs.lookup(dir, name) {
            Err(Errno::ENOENT) if dir == self.fs.root() && self.root_mount.is_some() => return self.root_lookup(name),
            r => r?,
        };
        match self.mount_at(ino) {
            Some(m) => shoal_hostfs::root(m),
            None => Ok(ino),
        }
    }

    /// Reads from device `d`.
    pub(crate) fn dev_read(d: Device, buf: &mut [u8]) -> Result<usize, Errno> {
        match d {
            Device::Null | Device::Ready => Ok(0),
            Device::Zero | Device::Full => {
                buf.fill(0);
                Ok(buf.len())
            }
            Device::Random => {
                // Like Linux's urandom: large reads are served in full.
                shoal_sysinfo::fill_random(buf);
                Ok(buf.len())
            }
        }
    }

    /// Writes to device `d`.
    pub(crate) fn dev_write(d: Device, data: &[u8]) -> Result<usize, Errno> {
        match d {
            Device::Full => Err(Errno::ENOSPC),
            Device::Ready => {
                shoal_plat::hypercall::ready();
                Ok(data.len())
            }
            _ => Ok(data.len()),
        }
    }
}
