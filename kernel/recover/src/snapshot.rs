//! A rebootable component's post-initialisation memory (its data, then
//! its bss) as recover keeps it: only the stretches that are not all
//! zero.
//!
//! Right after initialisation most of a component's bss is still zero
//! (vfs's 16 KiB readiness log, process's signal table…), and a full copy
//! put all of it on the kernel heap again, written at boot in every
//! instance (about 20 KiB of an idle instance's private memory, which counts in the density of idle instances).
//! A restore writes the kept stretches back and zeroes the rest — only
//! where it is not zero already, so pages the component never touched stay
//! untouched after a reboot too.
//!
//! Encoding, per part (data, bss): the part's length (`u32`, little
//! endian), then runs `(offset u32, length u32, bytes)`, then
//! [`END`]. Runs are whole [`BLOCK`]s (the last one of a part may be
//! shorter), in increasing order, never adjacent.

use alloc::boxed::Box;
use alloc::vec::Vec;

/// Granularity of the zero test: a run keeps whole blocks of this many bytes.
pub const BLOCK: usize = 64;
/// Marks the end of a part's runs.
const END: u32 = u32::MAX;

/// The runs of `part` that are not all zero, as `(offset, length)`, in
/// increasing order, each a whole number of blocks (or up to the end).
fn runs(part: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut at = 0;
    core::iter::from_fn(move || {
        let zero = |off: usize| part[off..(off + BLOCK).min(part.len())].iter().all(|&b| b == 0);
        while at < part.len() && zero(at) {
            at += BLOCK;
        }
        if at >= part.len() {
            return None;
        }
        let start = at;
        while at < part.len() && !zero(at) {
            at += BLOCK;
        }
        let end = at.min(part.len());
        Some((start, end - start))
    })
}

/// Encodes `parts` (each shorter than 4 GiB); `None` if one is not.
/// Allocates exactly once, the encoded size (a larger buffer, even freed,
/// would leave kernel-heap pages written in every instance).
pub fn encode(parts: &[&[u8]]) -> Option<Box<[u8]>> {
    let mut size = 0;
    for p in parts {
        u32::try_from(p.len()).ok().filter(|&l| l != END)?;
        size += 8 + runs(p).map(|(_, l)| 8 + l).sum::<usize>();
    }
    let mut out = Vec::with_capacity(size);
    for p in parts {
        out.extend_from_slice(&(p.len() as u32).to_le_bytes());
        for (off, len) in runs(p) {
            out.extend_from_slice(&(off as u32).to_le_bytes());
            out.extend_from_slice(&(len as u32).to_le_bytes());
            out.extend_from_slice(&p[off..off + len]);
        }
        out.extend_from_slice(&END.to_le_bytes());
    }
    debug_assert_eq!(out.len(), size);
    Some(out.into_boxed_slice())
}

fn u32_at(snap: &[u8], at: usize) -> Option<usize> {
    let b = snap.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
}

/// Zeroes the blocks of `part[from..to]` that are not zero already.
fn clear(part: &mut [u8], from: usize, to: usize) {
    let mut at = from;
    while at < to {
        let end = (at + BLOCK).min(to);
        let block = &mut part[at..end];
        if block.iter().any(|&b| b != 0) {
            block.fill(0);
        }
        at = end;
    }
}

/// Makes `parts` what [`encode`] was given. `None` (and `parts` partly
/// restored) when `snap` does not describe parts of these lengths.
pub fn restore(snap: &[u8], parts: &mut [&mut [u8]]) -> Option<()> {
    let mut at = 0;
    for p in parts.iter_mut() {
        if u32_at(snap, at)? != p.len() {
            return None;
        }
        at += 4;
        let mut done = 0;
        loop {
            let off = u32_at(snap, at)?;
            at += 4;
            if off == END as usize {
                break;
            }
            let len = u32_at(snap, at)?;
            at += 4;
            let end = off.checked_add(len).filter(|&e| off >= done && e <= p.len())?;
            let bytes = snap.get(at..at + len)?;
            clear(p, done, off);
            p[off..end].copy_from_slice(bytes);
            at += len;
            done = end;
        }
        let len = p.len();
        clear(p, done, len);
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_what_is_not_zero_and_restores_everything() {
        let mut data = [0u8; 100];
        data[3] = 1;
        data[99] = 2;
        let mut bss = [0u8; 1000];
        bss[130] = 7;
        bss[200] = 8;
        bss[999] = 9;
        let snap = encode(&[&data, &bss]).expect("small parts");
        // data: blocks 0 and 1 (1 + 99 -> both); bss: blocks 2-3 (128..256),
        // block 15 (960..1000).
        assert_eq!(snap.len(), (4 + 8 + 100 + 4) + (4 + 8 + 128 + 8 + 40 + 4));
        let (want_data, want_bss) = (data, bss);
        data.fill(0xaa);
        bss[500] = 5;
        bss[130] = 0;
        let mut parts: [&mut [u8]; 2] = [&mut data, &mut bss];
        assert_eq!(restore(&snap, &mut parts), Some(()));
        assert_eq!(data, want_data);
        assert_eq!(bss, want_bss);
    }

    #[test]
    fn an_all_zero_part_costs_a_few_bytes() {
        let big = [0u8; 16400];
        let snap = encode(&[&[], &big]).expect("small parts");
        assert_eq!(snap.len(), 8 + 8);
        let mut other = [0u8; 16400];
        other[16399] = 1;
        let mut parts: [&mut [u8]; 2] = [&mut [], &mut other];
        assert_eq!(restore(&snap, &mut parts), Some(()));
        assert!(other.iter().all(|&b| b == 0));
    }

    #[test]
    fn a_snapshot_of_other_lengths_is_refused() {
        let snap = encode(&[&[1u8; 10]]).expect("small part");
        let mut wrong = [0u8; 11];
        assert_eq!(restore(&snap, &mut [&mut wrong]), None);
        assert_eq!(restore(&snap[..snap.len() - 2], &mut [&mut [0u8; 10]]), None);
    }
}
