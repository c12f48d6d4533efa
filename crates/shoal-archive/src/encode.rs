//! Builds archive bytes from a list of entries: shared by the host writer
//! (`pack_dir`, `--fs` and `--volume`) and the kernel, which packs a
//! volume's tree at exit (`shoal-ramfs`, `Fs::pack`). Needs only `alloc`.

use crate::{Kind, ENTRY_LEN, HEADER_LEN, MAGIC, VERSION};
use alloc::vec::Vec;

/// One entry to pack: a relative path ('/'-separated, no "." or ".."
/// parts), what it is, its permission bits and its contents (file data or
/// symlink target; empty for a directory).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// Path relative to the archive's root.
    pub path: Vec<u8>,
    /// What the entry is.
    pub kind: Kind,
    /// Permission bits (`0o7777` at most).
    pub mode: u32,
    /// Contents or link target.
    pub data: Vec<u8>,
}

/// The archive would exceed the format's 32-bit counts or offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLarge;

/// Sorts `items` by path and encodes them. The caller lists every parent
/// directory of an entry as an entry too (the reader refuses an archive
/// that lacks one).
pub fn encode(items: &mut [Item]) -> Result<Vec<u8>, TooLarge> {
    items.sort_by(|a, b| a.path.cmp(&b.path));
    let count = u32::try_from(items.len()).map_err(|_| TooLarge)?;
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
    for it in items.iter() {
        let plen = u32::try_from(it.path.len()).map_err(|_| TooLarge)?;
        let poff = u32::try_from(path_off).map_err(|_| TooLarge)?;
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
    for it in items.iter() {
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
