//! The file operations mm uses for file-backed mappings
//! (`shoal_mm::file`).

use shoal_mm::file::{FileOps, Mappable};
use shoal_plat::Errno;
use shoal_ramfs::FileType;

use crate::abi::O_APPEND;
use crate::dev::Device;
use crate::Target;

fn get(fd: i32, shared_write: bool) -> Result<Mappable, Errno> {
    crate::with(|v| {
        let o = v.ofd(v.ofd_of(fd)?);
        if o.is_path() {
            return Err(Errno::EBADF);
        }
        match o.target {
            Target::Node(ino) if shoal_hostfs::is_host(ino) => {
                // A mounted file: only private mappings (mm maps the
                // host's pages through `map_host`, or copies the file in
                // through `read_at`); the descriptor is read-only.
                if !o.readable() || shared_write {
                    return Err(Errno::EACCES);
                }
                if v.ftype(ino)? != FileType::Regular {
                    return Err(Errno::ENODEV);
                }
                Ok(Mappable::File(ino))
            }
            Target::Node(ino) if v.fs.file_type(ino)? == FileType::Regular => {
                if !o.readable() || (shared_write && (!o.writable() || o.flags & O_APPEND != 0)) {
                    return Err(Errno::EACCES);
                }
                v.fs.get_ref(ino);
                Ok(Mappable::File(ino))
            }
            Target::Dev(_, Device::Zero) => Ok(Mappable::Zero),
            _ if !o.readable() => Err(Errno::EACCES),
            _ => Err(Errno::ENODEV),
        }
    })
}

fn retain(ino: u64) {
    if !shoal_hostfs::is_host(ino) {
        crate::with(|v| v.fs.get_ref(ino))
    }
}

fn release(ino: u64) {
    if !shoal_hostfs::is_host(ino) {
        crate::with(|v| v.fs.put_ref(ino))
    }
}

fn read_at(ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
    if shoal_hostfs::is_host(ino) {
        return shoal_hostfs::read(ino, off, buf);
    }
    crate::with(|v| v.fs.read(ino, off, buf))
}

fn size(ino: u64) -> Result<u64, Errno> {
    if shoal_hostfs::is_host(ino) {
        return Ok(shoal_hostfs::stat(ino)?.size);
    }
    crate::with(|v| v.fs.size(ino))
}

fn page(ino: u64, off: u64) -> Result<Option<(u64, bool)>, Errno> {
    if shoal_hostfs::is_host(ino) {
        // A shared mapping of a mounted file would need the host's pages
        // (not served: module `host`).
        return Err(Errno::ENODEV);
    }
    crate::with(|v| v.fs.page_addr(ino, off))
}

fn handed_out(ino: u64, off: u64) {
    crate::with(|v| v.fs.page_handed_out(ino, off))
}

fn map_host(ino: u64, off: u64, addr: u64, len: u64, exec: bool) -> Result<u64, Errno> {
    if !shoal_hostfs::is_host(ino) {
        return Err(Errno::ENODEV);
    }
    shoal_hostfs::map(ino, off, addr, len, exec)
}

/// The table registered with mm at boot.
pub static OPS: FileOps = FileOps { get, retain, release, read_at, size, page, handed_out, map_host, unmap_host: shoal_hostfs::unmap };
