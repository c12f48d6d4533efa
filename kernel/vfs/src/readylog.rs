//! The readiness log: which local sources of readiness may have become
//! newly ready, so that `epoll_wait` (in `net`) looks only at those
//! instead of asking every entry it watches.
//!
//! Every state change of a pipe or FIFO, an `AF_UNIX` socket or an eventfd
//! that can make one of its descriptors newly ready (the changes that move
//! its readiness generation on, `obj::Readiness::gen`) is noted here with a
//! *source* key: [`pipe_src`] for pipes (vfs), [`TAG_UNIX`] and
//! [`TAG_EVENT`] keys for `net`'s objects. A reader keeps the sequence
//! number it has read up to and asks [`since`] for the sources noted
//! after it. The log is a fixed ring of [`LOG_LEN`] notes (noting never
//! allocates); a reader that fell further behind is told so (`None`) and
//! must look at everything once. Host sockets have their own log in the
//! host backend (`net`'s `Backend::gains_since`).

use alloc::vec::Vec;
use shoal_plat::Global;

/// Notes the ring keeps.
pub const LOG_LEN: usize = 1024;

/// Source-key tag of a pipe or FIFO (its inode number below it).
pub const TAG_PIPE: u64 = 1 << 61;
/// Source-key tag of an `AF_UNIX` socket (`net`: its handle below it).
pub const TAG_UNIX: u64 = 2 << 61;
/// Source-key tag of an eventfd (`net`: its serial number below it).
pub const TAG_EVENT: u64 = 3 << 61;

/// The source key of pipe (or FIFO) `ino`.
pub fn pipe_src(ino: u64) -> u64 {
    TAG_PIPE | (ino & (TAG_PIPE - 1))
}

struct Log {
    /// Sequence number of the last note (0: none yet).
    seq: u64,
    /// Note `q` is at `ring[q % LOG_LEN]`: `(q, source)`.
    ring: [(u64, u64); LOG_LEN],
}

static LOG: Global<Log> = Global::new(Log { seq: 0, ring: [(0, 0); LOG_LEN] });

/// Notes that source `src` may have become newly ready.
pub fn note(src: u64) {
    LOG.with(|l| {
        l.seq += 1;
        let q = l.seq;
        l.ring[(q as usize) % LOG_LEN] = (q, src);
    })
}

/// The sequence number of the last note: a reader starting now reads from
/// here.
pub fn now() -> u64 {
    LOG.with(|l| l.seq)
}

/// `(now, sources)`: the sources noted after sequence number `after`
/// (oldest first, possibly repeated), or `None` if the ring no longer
/// holds all of them (look at everything).
pub fn since(after: u64) -> (u64, Option<Vec<u64>>) {
    let mut v = Vec::new();
    let (now, all) = since_into(after, &mut v);
    (now, all.then_some(v))
}

/// [`since`] into the caller's buffer (appended), so a reader that keeps
/// its buffer allocates nothing: `(now, false)` when the ring no longer
/// holds all of them. Out of line: net calls it (see `shoal_recover::log`).
#[inline(never)]
pub fn since_into(after: u64, out: &mut Vec<u64>) -> (u64, bool) {
    LOG.with(|l| {
        if after >= l.seq {
            return (l.seq, true);
        }
        if l.seq - after > LOG_LEN as u64 {
            return (l.seq, false);
        }
        out.extend((after + 1..=l.seq).map(|q| l.ring[(q as usize) % LOG_LEN].1));
        (l.seq, true)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_names_what_changed_and_says_when_it_forgot() {
        let start = now();
        note(pipe_src(7));
        note(TAG_UNIX | 3);
        let (q, got) = since(start);
        assert_eq!(got, Some(alloc::vec![pipe_src(7), TAG_UNIX | 3]));
        assert_eq!(since(q), (q, Some(Vec::new())));
        for i in 0..LOG_LEN as u64 + 1 {
            note(TAG_EVENT | i);
        }
        assert_eq!(since(q).1, None, "fell behind the ring");
        let (q2, got) = since(now() - 2);
        assert_eq!(got, Some(alloc::vec![TAG_EVENT | (LOG_LEN as u64 - 1), TAG_EVENT | LOG_LEN as u64]));
        assert_eq!(q2, now());
    }
}
