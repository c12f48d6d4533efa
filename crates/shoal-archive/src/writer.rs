//! Packs a host directory into an archive (the tender side of `--fs`).

use crate::{Kind, ENTRY_LEN, HEADER_LEN, MAGIC, VERSION};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why a directory could not be packed.
#[derive(Debug)]
pub enum PackError {
    /// The directory (or something in it) could not be read.
    Io(PathBuf, std::io::Error),
    /// The path is not a directory.
    NotADirectory(PathBuf),
    /// A file is neither a regular file, a directory nor a symlink.
    Unsupported(PathBuf),
    /// The archive would exceed the format's limits.
    TooLarge,
}

impl std::fmt::Display for PackError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PackError::Io(p, e) => write!(f, "cannot read {}: {e}", p.display()),
            PackError::NotADirectory(p) => write!(f, "{} is not a directory", p.display()),
            PackError::Unsupported(p) => {
                write!(f, "{} is not a regular file, directory or symlink", p.display())
            }
            PackError::TooLarge => write!(f, "the directory is too large to pack"),
        }
    }
}

impl std::error::Error for PackError {}

struct Item {
    path: Vec<u8>,
    kind: Kind,
    mode: u32,
    data: Vec<u8>,
}

fn walk(root: &Path, rel: &Path, out: &mut Vec<Item>) -> Result<(), PackError> {
    let dir = root.join(rel);
    let rd = std::fs::read_dir(&dir).map_err(|e| PackError::Io(dir.clone(), e))?;
    for ent in rd {
        let ent = ent.map_err(|e| PackError::Io(dir.clone(), e))?;
        let rel_path = rel.join(ent.file_name());
        let full = root.join(&rel_path);
        let meta = std::fs::symlink_metadata(&full).map_err(|e| PackError::Io(full.clone(), e))?;
        let mode = meta.permissions().mode() & 0o7777;
        let path = rel_path.as_os_str().as_bytes().to_vec();
        let ft = meta.file_type();
        if ft.is_dir() {
            out.push(Item { path, kind: Kind::Dir, mode, data: Vec::new() });
            walk(root, &rel_path, out)?;
        } else if ft.is_file() {
            let data = std::fs::read(&full).map_err(|e| PackError::Io(full.clone(), e))?;
            out.push(Item { path, kind: Kind::File, mode, data });
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&full).map_err(|e| PackError::Io(full.clone(), e))?;
            let data = target.as_os_str().as_bytes().to_vec();
            out.push(Item { path, kind: Kind::Symlink, mode: 0o777, data });
        } else {
            return Err(PackError::Unsupported(full));
        }
    }
    Ok(())
}

/// Packs the directory `root` (recursively; symlinks are stored, not
/// followed) into archive bytes.
pub fn pack_dir(root: &Path) -> Result<Vec<u8>, PackError> {
    let meta = std::fs::metadata(root).map_err(|e| PackError::Io(root.to_path_buf(), e))?;
    if !meta.is_dir() {
        return Err(PackError::NotADirectory(root.to_path_buf()));
    }
    let mut items = Vec::new();
    walk(root, Path::new(""), &mut items)?;
    items.sort_by(|a, b| a.path.cmp(&b.path));
    let count = u32::try_from(items.len()).map_err(|_| PackError::TooLarge)?;
    let strings_off = HEADER_LEN + items.len() * ENTRY_LEN;
    let strings_len: usize = items.iter().map(|i| i.path.len()).sum();
    let mut data_off = (strings_off + strings_len + 7) & !7;
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&(strings_off as u64).to_le_bytes());
    out.extend_from_slice(&(strings_len as u64).to_le_bytes());
    let mut path_off = 0usize;
    let mut data_offs = Vec::with_capacity(items.len());
    for it in &items {
        let plen = u32::try_from(it.path.len()).map_err(|_| PackError::TooLarge)?;
        let poff = u32::try_from(path_off).map_err(|_| PackError::TooLarge)?;
        let doff = if it.kind == Kind::Dir { 0 } else { data_off };
        out.extend_from_slice(&poff.to_le_bytes());
        out.extend_from_slice(&plen.to_le_bytes());
        out.extend_from_slice(&it.kind.to_u32().to_le_bytes());
        out.extend_from_slice(&it.mode.to_le_bytes());
        out.extend_from_slice(&(doff as u64).to_le_bytes());
        out.extend_from_slice(&(it.data.len() as u64).to_le_bytes());
        path_off += it.path.len();
        data_offs.push(doff);
        if it.kind != Kind::Dir {
            data_off = (data_off + it.data.len() + 7) & !7;
        }
    }
    for it in &items {
        out.extend_from_slice(&it.path);
    }
    for (it, &doff) in items.iter().zip(&data_offs) {
        if it.kind == Kind::Dir {
            continue;
        }
        out.resize(doff, 0);
        out.extend_from_slice(&it.data);
    }
    let end = (out.len() + 7) & !7;
    out.resize(end, 0);
    Ok(out)
}
