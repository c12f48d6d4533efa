//! The boot spec: what the front end (`shoal run`, `shoal-tender`, a
//! library caller of [`crate::run`]) hands to the instance process it
//! `exec`s, on descriptor [`SPEC_FD`], so that the instance starts from a
//! clean process image with no environment but one fixed variable (malloc tunables) and no arguments.
//!
//! It holds only what the guest gets anyway (its argv and environment, the
//! memory size) and what the tender needs to boot it; everything else is
//! a descriptor at a fixed number: the image file ([`IMAGE_FD`]), the
//! packed root file-system archive ([`ARCHIVE_FD`], a memfd: the front end
//! packs `--fs DIR`, so no host path crosses), the report page shared with
//! a waiting parent ([`REPORT_FD`]) and a pidfd of that parent
//! ([`PARENT_FD`]), the verified library-pool files ([`POOL_FD0`] on) and
//! the listening sockets after them, and with `--net-bind-any` the
//! instance's end of the bind channel after those (`crate::net`). Console output is already on fds 1 and 2.
//!
//! The front end is as trusted as the instance (same user, before any
//! guest code ran); the decoder still checks every length, so a truncated
//! or foreign descriptor 3 gives a clear error instead of a panic.

use shoal_loader::MemoryMode;

/// Descriptor of the spec in the instance process.
pub const SPEC_FD: i32 = 3;
/// Descriptor of the image file.
pub const IMAGE_FD: i32 = 4;
/// Descriptor of the packed archive (a memfd), if any.
pub const ARCHIVE_FD: i32 = 5;
/// Descriptor of the report page shared with the waiting parent, if any.
pub const REPORT_FD: i32 = 6;
/// Descriptor of a pidfd of the waiting parent, if any: the instance
/// checks through it that the parent still lives once it has re-armed its
/// parent-death signal (which a change of credentials clears).
pub const PARENT_FD: i32 = 7;
/// Descriptor of the first pool file; pool file `i` is at `POOL_FD0 + i`,
/// and listening socket `j` after them, at `POOL_FD0 + pool.len() + j`.
pub const POOL_FD0: i32 = 8;
/// Most pool files an instance maps (descriptors stay well below 1024).
pub const MAX_POOL_FILES: usize = 900;

const MAGIC: &[u8; 8] = b"SHOALSPT";
const VERSION: u32 = 12;
/// Largest spec accepted: argv and environment are bounded by the guest's
/// argument area (under 1 MiB), pool maps by [`MAX_POOL_FILES`].
pub const MAX_SPEC: usize = 4 << 20;

/// One pool file mapping (the file is at `POOL_FD0 + index`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolEntry {
    /// Guest address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Code (R+X) or rodata (R).
    pub exec: bool,
}

/// The boot spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    /// Guest memory size.
    pub mem_size: u64,
    /// Memory mode.
    pub mode: MemoryMode,
    /// TSC frequency measured (or cached) by the front end.
    pub tsc_hz: u64,
    /// Whether a parent waits (report page at [`REPORT_FD`] and its pidfd
    /// at [`PARENT_FD`]).
    pub supervised: bool,
    /// Without `supervised`: a pidfd of the parent is at [`PARENT_FD`]
    /// all the same (`shoal serve`'s gateway, which reaps the instance
    /// itself), so a parent that dies while the instance drops its
    /// credentials is still seen.
    pub parent_pidfd: bool,
    /// Size of the packed archive at [`ARCHIVE_FD`] (0: none).
    pub archive_len: u64,
    /// Name of the image for messages (what the caller called it).
    pub image_name: Vec<u8>,
    /// The guest's argv.
    pub argv: Vec<Vec<u8>>,
    /// The guest's environment.
    pub env: Vec<Vec<u8>>,
    /// Pool mappings, in the order of their descriptors.
    pub pool: Vec<PoolEntry>,
    /// Whether the guest may open sockets and connect out.
    pub outbound: bool,
    /// `--net-bind-any`: the bind channel to the parent follows the
    /// listening sockets.
    pub bind_any: bool,
    /// Listening sockets (port, type, family; `handle` unused), in the
    /// order of their descriptors.
    pub listeners: Vec<shoal_abi::Listener>,
    /// The volume's guest directory (`--volume`; empty: none).
    pub volume_path: Vec<u8>,
    /// Largest volume archive taken back: the report memfd holds
    /// [`crate::VOLUME_HEADER`] + this many bytes after its first page.
    pub volume_max: u64,
    /// The guest directories of the read-only host directories
    /// (`--mount`), whose `O_PATH` descriptors follow the listening
    /// sockets and the bind channel.
    pub mounts: Vec<Vec<u8>>,
    /// A fault to inject into a kernel component (`--inject`; all zero:
    /// none). Passed on to the kernel as is: the kernel checks it.
    pub inject: shoal_abi::Inject,
    /// Rejuvenation period in nanoseconds (`--rejuvenate-every`; 0: none).
    pub rejuvenate_ns: u64,
    /// The hang watchdog's limit in nanoseconds (`--watchdog`; 0: off).
    pub watchdog_ns: u64,
    /// `shoal_abi::RECOVER_OFF` for `--no-recover`.
    pub recover_flags: u64,
    /// `CLOCK_MONOTONIC` ns the front end's start steps count from, when
    /// [`crate::START_TIMING_ENV`] asked for them (0: the instance prints none).
    pub timing_t0_ns: u64,
    /// A seccomp program compiled ahead (`crate::Prepared`; empty: none),
    /// as `sock_filter` records, and what it was compiled for
    /// (`crate::filter::key`): the instance uses it only for that key.
    pub filter: Vec<u8>,
    /// The key of `filter`.
    pub filter_key: [u64; 6],
    /// A template (`crate::template`): the instance stops at its ready
    /// point and makes copies of itself when the parent asks, over the
    /// control channel that follows the listening sockets.
    pub template: bool,
    /// A template's ready point is the program's write to the ready
    /// device (`shoal_abi::ReadyPoint::Explicit`), not its first wait for
    /// a connection.
    pub ready_explicit: bool,
    /// The uid (and gid) a root-started instance drops to: one claimed
    /// from `--uid-range` by the process that waits for it
    /// (`shoal_loader::uids`), or `nobody`.
    pub uid: u32,
    /// The program's working directory (`--cwd`; empty: `/`).
    pub cwd: Vec<u8>,
    /// The uid and gid the program sees (`--user`).
    pub guest_ids: [u32; 2],
    /// Bit `i`: mount `i` is writable (`--mount HOSTDIR:GUESTDIR:rw`).
    pub writable_mounts: u64,
    /// The guest's host name (`--hostname`; empty: the default).
    pub hostname: Vec<u8>,
    /// The errno each of the program's system calls is refused with
    /// (`--seccomp-deny`; empty: none).
    pub syscall_errno: Vec<u8>,
}

/// Why a spec could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Not a spec, or of another version.
    #[error("descriptor 3 does not hold a boot spec of this version of shoal-spt (shoal-spt is started by shoal run and shoal-tender, not by hand)")]
    NotASpec,
    /// Cut short or with impossible lengths.
    #[error("the boot spec is truncated or corrupt")]
    Corrupt,
}

fn mode_code(m: MemoryMode) -> u8 {
    match m {
        MemoryMode::Copy => 0,
        MemoryMode::Ksm => 1,
        MemoryMode::Pool => 2,
    }
}

impl Spec {
    /// Serialises the spec.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(256);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&self.mem_size.to_le_bytes());
        b.push(mode_code(self.mode));
        b.push(u8::from(self.supervised));
        b.push(u8::from(self.parent_pidfd));
        b.extend_from_slice(&self.tsc_hz.to_le_bytes());
        b.extend_from_slice(&self.archive_len.to_le_bytes());
        let bytes = |b: &mut Vec<u8>, s: &[u8]| {
            b.extend_from_slice(&(s.len() as u64).to_le_bytes());
            b.extend_from_slice(s);
        };
        bytes(&mut b, &self.image_name);
        for list in [&self.argv, &self.env] {
            b.extend_from_slice(&(list.len() as u64).to_le_bytes());
            for s in list {
                bytes(&mut b, s);
            }
        }
        b.extend_from_slice(&(self.pool.len() as u64).to_le_bytes());
        for p in &self.pool {
            b.extend_from_slice(&p.addr.to_le_bytes());
            b.extend_from_slice(&p.len.to_le_bytes());
            b.push(u8::from(p.exec));
        }
        b.push(u8::from(self.outbound));
        b.push(u8::from(self.bind_any));
        b.extend_from_slice(&(self.listeners.len() as u64).to_le_bytes());
        for l in &self.listeners {
            b.extend_from_slice(&l.port.to_le_bytes());
            b.extend_from_slice(&l.sock_type.to_le_bytes());
            b.extend_from_slice(&l.family.to_le_bytes());
        }
        bytes(&mut b, &self.volume_path);
        b.extend_from_slice(&self.volume_max.to_le_bytes());
        b.extend_from_slice(&(self.mounts.len() as u64).to_le_bytes());
        for m in &self.mounts {
            bytes(&mut b, m);
        }
        b.extend_from_slice(&self.inject.component.to_le_bytes());
        b.extend_from_slice(&self.inject.kind.to_le_bytes());
        b.extend_from_slice(&self.inject.at.to_le_bytes());
        b.extend_from_slice(&self.rejuvenate_ns.to_le_bytes());
        b.extend_from_slice(&self.watchdog_ns.to_le_bytes());
        b.extend_from_slice(&self.recover_flags.to_le_bytes());
        b.extend_from_slice(&self.timing_t0_ns.to_le_bytes());
        bytes(&mut b, &self.filter);
        for k in self.filter_key {
            b.extend_from_slice(&k.to_le_bytes());
        }
        b.push(u8::from(self.template));
        b.push(u8::from(self.ready_explicit));
        b.extend_from_slice(&self.uid.to_le_bytes());
        bytes(&mut b, &self.cwd);
        b.extend_from_slice(&self.guest_ids[0].to_le_bytes());
        b.extend_from_slice(&self.guest_ids[1].to_le_bytes());
        b.extend_from_slice(&self.writable_mounts.to_le_bytes());
        bytes(&mut b, &self.hostname);
        bytes(&mut b, &self.syscall_errno);
        b
    }

    /// Parses a spec, checking every length.
    pub fn decode(data: &[u8]) -> Result<Spec, SpecError> {
        let mut r = Reader(data);
        if r.take(8).ok() != Some(&MAGIC[..]) || r.u32().ok() != Some(VERSION) {
            return Err(SpecError::NotASpec);
        }
        let mem_size = r.u64()?;
        let mode = match r.u8()? {
            0 => MemoryMode::Copy,
            1 => MemoryMode::Ksm,
            2 => MemoryMode::Pool,
            _ => return Err(SpecError::Corrupt),
        };
        let supervised = r.flag()?;
        let parent_pidfd = r.flag()?;
        let tsc_hz = r.u64()?;
        let archive_len = r.u64()?;
        let image_name = r.bytes()?.to_vec();
        let mut lists = [Vec::new(), Vec::new()];
        for list in &mut lists {
            let n = r.count(8)?;
            for _ in 0..n {
                list.push(r.bytes()?.to_vec());
            }
        }
        let [argv, env] = lists;
        let n = r.count(17)?;
        if n > MAX_POOL_FILES {
            return Err(SpecError::Corrupt);
        }
        let mut pool = Vec::with_capacity(n);
        for _ in 0..n {
            pool.push(PoolEntry { addr: r.u64()?, len: r.u64()?, exec: r.flag()? });
        }
        let outbound = r.flag()?;
        let bind_any = r.flag()?;
        let n = r.count(12)?;
        if n > shoal_abi::MAX_LISTENERS {
            return Err(SpecError::Corrupt);
        }
        let mut listeners = Vec::with_capacity(n);
        for _ in 0..n {
            listeners.push(shoal_abi::Listener { handle: -1, port: r.u32()?, sock_type: r.u32()?, family: r.u32()?, reserved: 0 });
        }
        let volume_path = r.bytes()?.to_vec();
        let volume_max = r.u64()?;
        let n = r.count(8)?;
        if n > shoal_loader::mount::MAX_MOUNTS {
            return Err(SpecError::Corrupt);
        }
        let mut mounts = Vec::with_capacity(n);
        for _ in 0..n {
            let m = r.bytes()?.to_vec();
            if m.len() > shoal_loader::mount::GUEST_PATH_MAX {
                return Err(SpecError::Corrupt);
            }
            mounts.push(m);
        }
        let inject = shoal_abi::Inject { component: r.u32()?, kind: r.u32()?, at: r.u64()? };
        let rejuvenate_ns = r.u64()?;
        let watchdog_ns = r.u64()?;
        let recover_flags = r.u64()?;
        let timing_t0_ns = r.u64()?;
        let filter = r.bytes()?.to_vec();
        let mut filter_key = [0u64; 6];
        for k in &mut filter_key {
            *k = r.u64()?;
        }
        let template = r.flag()?;
        let ready_explicit = r.flag()?;
        let uid = r.u32()?;
        let cwd = r.bytes()?.to_vec();
        let guest_ids = [r.u32()?, r.u32()?];
        let writable_mounts = r.u64()?;
        let hostname = r.bytes()?.to_vec();
        let syscall_errno = r.bytes()?.to_vec();
        if writable_mounts >> mounts.len() != 0 || hostname.len() > shoal_loader::HOSTNAME_MAX || syscall_errno.len() > shoal_loader::SECCOMP_CALLS {
            return Err(SpecError::Corrupt);
        }
        if volume_path.len() >= shoal_abi::VOLUME_PATH_MAX || cwd.len() >= shoal_abi::CWD_MAX || !r.0.is_empty() {
            return Err(SpecError::Corrupt);
        }
        Ok(Spec {
            mem_size,
            mode,
            tsc_hz,
            supervised,
            parent_pidfd,
            archive_len,
            image_name,
            argv,
            env,
            pool,
            outbound,
            bind_any,
            listeners,
            volume_path,
            volume_max,
            mounts,
            inject,
            rejuvenate_ns,
            watchdog_ns,
            recover_flags,
            timing_t0_ns,
            filter,
            filter_key,
            template,
            ready_explicit,
            uid,
            cwd,
            guest_ids,
            writable_mounts,
            hostname,
            syscall_errno,
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], SpecError> {
        if self.0.len() < n {
            return Err(SpecError::Corrupt);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, SpecError> {
        Ok(self.take(1)?[0])
    }
    fn flag(&mut self) -> Result<bool, SpecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(SpecError::Corrupt),
        }
    }
    fn u32(&mut self) -> Result<u32, SpecError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, SpecError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    /// A count of items of at least `min_item` bytes each: bounded by what
    /// is left, so a forged count cannot make the decoder allocate.
    fn count(&mut self, min_item: usize) -> Result<usize, SpecError> {
        let n = self.u64()?;
        match usize::try_from(n) {
            Ok(n) if n.checked_mul(min_item).is_some_and(|b| b <= self.0.len()) => Ok(n),
            _ => Err(SpecError::Corrupt),
        }
    }
    fn bytes(&mut self) -> Result<&'a [u8], SpecError> {
        let n = self.count(1)?;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Spec {
        Spec {
            mem_size: 64 << 20,
            mode: MemoryMode::Pool,
            tsc_hz: 2_000_000_000,
            supervised: true,
            parent_pidfd: false,
            archive_len: 4096,
            image_name: b"build/apps/hello".to_vec(),
            argv: vec![b"hello".to_vec(), b"".to_vec(), b"two".to_vec()],
            env: vec![b"A=1".to_vec()],
            pool: vec![PoolEntry { addr: 0x100000, len: 0x8000, exec: true }],
            outbound: true,
            bind_any: true,
            listeners: vec![shoal_abi::Listener { handle: -1, port: 80, sock_type: 1, family: 2, reserved: 0 }],
            volume_path: b"/data".to_vec(),
            volume_max: 64 << 20,
            mounts: vec![b"/usr".to_vec(), b"/opt/lib".to_vec()],
            inject: shoal_abi::Inject { component: 6, kind: shoal_abi::INJECT_PANIC, at: 3 },
            rejuvenate_ns: 500_000_000,
            watchdog_ns: 250_000_000,
            recover_flags: shoal_abi::RECOVER_OFF,
            timing_t0_ns: 7,
            filter: vec![1, 2, 3, 4, 5, 6, 7, 8],
            filter_key: [1, 2, 3, 4, 5, 6],
            template: true,
            ready_explicit: true,
            uid: 100_007,
            cwd: b"/srv/app".to_vec(),
            guest_ids: [1000, 100],
            writable_mounts: 0b10,
            hostname: b"web-1".to_vec(),
            syscall_errno: vec![0, 1, 0, 13],
        }
    }

    #[test]
    fn round_trips() {
        let s = sample();
        assert_eq!(Spec::decode(&s.encode()).unwrap(), s);
    }

    #[test]
    fn every_truncation_and_flip_is_an_error_not_a_panic() {
        let b = sample().encode();
        for n in 0..b.len() {
            assert!(Spec::decode(&b[..n]).is_err(), "prefix {n}");
        }
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0xff;
            let _ = Spec::decode(&c);
        }
        assert!(matches!(Spec::decode(b"not a spec at all"), Err(SpecError::NotASpec)));
        let mut long = b.clone();
        long.push(0);
        assert!(matches!(Spec::decode(&long), Err(SpecError::Corrupt)));
    }
}
