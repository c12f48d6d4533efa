//! System V IPC within the instance: shared memory (`shmget`, `shmat`,
//! `shmdt`, `shmctl`), semaphore sets (`semget`, `semop`, `semtimedop`,
//! `semctl`) and message queues (`msgget`, `msgsnd`, `msgrcv`, `msgctl`),
//! with Linux's keys, flags, limits, errors and structure layouts.
//!
//! An instance is one process, so the objects are shared between its
//! threads; they live as long as the instance unless removed
//! (`IPC_RMID`). The program is root and owns every object, so permission
//! bits are kept and reported but deny nothing (as for root on Linux).
//!
//! **Shared memory.** A segment is zeroed anonymous memory from `mm`,
//! taken at `shmget`. There is one address space and no page aliasing, so
//! every attach of a segment returns the segment's one address (Linux
//! would map it again elsewhere); what programs rely on — all attaches see
//! the same bytes — holds. `shmat` at another address than the segment's
//! is `EINVAL`. A removed segment goes when its last attach is detached.
//!
//! **Waiting.** `semop` that cannot proceed and `msgsnd`/`msgrcv` on a
//! full or empty queue block the calling thread on one kernel wait queue
//! (`shoal_sched::wait_key`); every change wakes all waiters, which retry
//! (an operation is all-or-nothing, so a retry is safe). A signal ends the
//! wait with `EINTR`, `semtimedop`'s timeout with `EAGAIN`, the removal of
//! the object with `EIDRM`. `SEM_UNDO` is accepted: its adjustments would
//! apply when the process exits, which ends the instance and with it every
//! observer.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use shoal_plat::{umem, Args, Errno, SysResult};

const IPC_PRIVATE: i32 = 0;
const IPC_CREAT: u32 = 0o1000;
const IPC_EXCL: u32 = 0o2000;
const IPC_NOWAIT: u32 = 0o4000;
const IPC_RMID: i32 = 0;
const IPC_SET: i32 = 1;
const IPC_STAT: i32 = 2;
/// musl and glibc may add `IPC_64` to a `*ctl` command.
const IPC_64: i32 = 0x100;
/// Linux's `SHM_DEST` mode bit: removed, waiting for the last detach.
const SHM_DEST: u32 = 0o1000;
const SHM_RND: u32 = 0o20000;
const SHMLBA: u64 = 4096;
/// Linux's `SHMMAX` default (`ULONG_MAX - 2^24`).
const SHMMAX: u64 = u64::MAX - (1 << 24);
const SEMMSL: i32 = 32000;
const SEMOPM: usize = 500;
const SEMVMX: i32 = 32767;
const GETPID: i32 = 11;
const GETVAL: i32 = 12;
const GETALL: i32 = 13;
const GETNCNT: i32 = 14;
const GETZCNT: i32 = 15;
const SETVAL: i32 = 16;
const SETALL: i32 = 17;
const MSGMAX: u64 = 8192;
const MSGMNB: u64 = 16384;
const MSG_NOERROR: u32 = 0o10000;
const MSG_EXCEPT: u32 = 0o20000;
const MSG_COPY: u32 = 0o40000;
/// Most objects of one kind (`IPCMNI`'s default).
const MAX_IDS: usize = 32000;
/// Ids are `seq * SEQ_MULTIPLIER + index`, as on Linux.
const SEQ_MULTIPLIER: i32 = 32768;

/// The kernel wait queue of every IPC wait ("ipc").
const WAIT_KEY: u64 = shoal_sched::KERNEL_KEY | 0x6970_6300;

/// `struct ipc64_perm` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IpcPerm {
    /// The key (`IPC_PRIVATE` once removed).
    pub key: i32,
    /// Owner.
    pub uid: u32,
    /// Owner's group.
    pub gid: u32,
    /// Creator.
    pub cuid: u32,
    /// Creator's group.
    pub cgid: u32,
    /// Permission bits (and `SHM_DEST`).
    pub mode: u32,
    /// Slot sequence number.
    pub seq: u16,
    /// Padding.
    pub pad: [u16; 3],
    /// Unused.
    pub unused: [u64; 2],
}

/// `struct shmid64_ds` (112 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ShmidDs {
    /// Ownership and permissions.
    pub perm: IpcPerm,
    /// Size in bytes.
    pub segsz: u64,
    /// Last attach, detach, change (seconds).
    pub times: [i64; 3],
    /// Creator, last attacher/detacher.
    pub pids: [i32; 2],
    /// Attaches.
    pub nattch: u64,
    /// Unused.
    pub unused: [u64; 2],
}

/// `struct semid64_ds` (104 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SemidDs {
    /// Ownership and permissions.
    pub perm: IpcPerm,
    /// Last semop.
    pub otime: i64,
    /// Unused.
    pub unused1: u64,
    /// Last change.
    pub ctime: i64,
    /// Unused.
    pub unused2: u64,
    /// Semaphores in the set.
    pub nsems: u64,
    /// Unused.
    pub unused: [u64; 2],
}

/// `struct msqid64_ds` (120 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MsqidDs {
    /// Ownership and permissions.
    pub perm: IpcPerm,
    /// Last send, receive, change.
    pub times: [i64; 3],
    /// Bytes queued.
    pub cbytes: u64,
    /// Messages queued.
    pub qnum: u64,
    /// Most bytes the queue holds.
    pub qbytes: u64,
    /// Last sender, receiver.
    pub pids: [i32; 2],
    /// Unused.
    pub unused: [u64; 2],
}

#[derive(Clone, PartialEq, Eq)]
struct Shm {
    addr: u64,
    size: u64,
    nattch: u64,
    times: [i64; 3],
    lpid: i32,
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Sem {
    val: i32,
    pid: i32,
    ncnt: u32,
    zcnt: u32,
}

#[derive(Clone, PartialEq, Eq)]
struct SemSet {
    sems: Vec<Sem>,
    otime: i64,
}

#[derive(Clone, PartialEq, Eq)]
struct Msq {
    msgs: VecDeque<(i64, Vec<u8>)>,
    cbytes: u64,
    qbytes: u64,
    times: [i64; 2],
    pids: [i32; 2],
}

#[derive(Clone, PartialEq, Eq)]
struct Obj<T> {
    perm: IpcPerm,
    ctime: i64,
    body: T,
}

/// The objects of one kind, by index; a slot's sequence number makes a
/// stale id invalid.
#[derive(Clone, PartialEq, Eq)]
struct Table<T> {
    slots: Vec<Option<Obj<T>>>,
    seqs: Vec<u16>,
}

impl<T> Table<T> {
    const fn new() -> Self {
        Table { slots: Vec::new(), seqs: Vec::new() }
    }

    fn index(&self, id: i32) -> Result<usize, Errno> {
        if id < 0 {
            return Err(Errno::EINVAL);
        }
        let (idx, seq) = ((id % SEQ_MULTIPLIER) as usize, (id / SEQ_MULTIPLIER) as u16);
        match self.slots.get(idx) {
            Some(Some(_)) if self.seqs[idx] == seq => Ok(idx),
            _ => Err(Errno::EINVAL),
        }
    }

    fn get(&mut self, id: i32) -> Result<&mut Obj<T>, Errno> {
        let i = self.index(id)?;
        self.slots[i].as_mut().ok_or(Errno::EINVAL)
    }

    /// `*get(key, …, flags)`: the id of the object with `key`, or of a new
    /// one `make` builds (`IPC_PRIVATE` always makes one). `check` vets an
    /// existing object against the request.
    fn lookup(&mut self, key: i32, flags: u32, make: impl FnOnce() -> Result<T, Errno>, check: impl FnOnce(&T) -> Result<(), Errno>) -> SysResult {
        if key != IPC_PRIVATE {
            let found = self.slots.iter().position(|s| s.as_ref().is_some_and(|o| o.perm.key == key));
            if let Some(i) = found {
                if flags & IPC_CREAT != 0 && flags & IPC_EXCL != 0 {
                    return Err(Errno::EEXIST);
                }
                if let Some(o) = &self.slots[i] {
                    check(&o.body)?;
                }
                return Ok(self.id_of(i) as u64);
            }
            if flags & IPC_CREAT == 0 {
                return Err(Errno::ENOENT);
            }
        }
        let i = match self.slots.iter().position(|s| s.is_none()) {
            Some(i) => i,
            None if self.slots.len() < MAX_IDS => {
                self.slots.push(None);
                self.seqs.push(0);
                self.slots.len() - 1
            }
            None => return Err(Errno::ENOSPC),
        };
        let body = make()?;
        let perm = IpcPerm { key, mode: flags & 0o777, seq: self.seqs[i], ..IpcPerm::default() };
        self.slots[i] = Some(Obj { perm, ctime: now(), body });
        Ok(self.id_of(i) as u64)
    }

    fn id_of(&self, i: usize) -> i32 {
        self.seqs[i] as i32 * SEQ_MULTIPLIER + i as i32
    }

    /// Frees slot `id`; its next object gets another sequence number.
    fn remove(&mut self, id: i32) -> Result<Obj<T>, Errno> {
        let i = self.index(id)?;
        self.seqs[i] = (self.seqs[i] + 1) % (i32::MAX / SEQ_MULTIPLIER) as u16;
        self.slots[i].take().ok_or(Errno::EINVAL)
    }
}

/// The System V IPC objects of the process (module `heal` keeps a copy).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Ipc {
    shm: Table<Shm>,
    sem: Table<SemSet>,
    msg: Table<Msq>,
}

// A `ZeroGlobal`: `Ipc::new()` holds `Vec::new()`s (dangling, non-null
// pointers), which put process's `.data` on a page of its own.
static IPC: shoal_plat::ZeroGlobal<Ipc> = shoal_plat::ZeroGlobal::new();

/// Counts the calls that may have changed the IPC objects (module `heal`
/// copies them when it moved, not comparing them before every call).
static IPC_CHANGES: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// [`IPC_CHANGES`] now (module `heal`'s fast path).
pub(crate) fn changes() -> u64 {
    IPC_CHANGES.load(core::sync::atomic::Ordering::Relaxed)
}

/// The IPC objects, for a call that may change them (counted).
fn with_ipc<R>(f: impl FnOnce(&mut Ipc) -> R) -> R {
    IPC_CHANGES.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    crate::heal::changed();
    IPC.with(f)
}

impl Default for Ipc {
    fn default() -> Self {
        Ipc::new()
    }
}

impl Ipc {
    pub(crate) const fn new() -> Ipc {
        Ipc { shm: Table::new(), sem: Table::new(), msg: Table::new() }
    }

    /// Bytes on the heap (for the log's memory report).
    pub(crate) fn heap_bytes(&self) -> usize {
        let msgs: usize = self.msg.slots.iter().flatten().map(|o| o.body.msgs.iter().map(|(_, m)| m.len() + 32).sum::<usize>()).sum();
        let sems: usize = self.sem.slots.iter().flatten().map(|o| o.body.sems.len() * core::mem::size_of::<Sem>()).sum();
        msgs + sems + (self.shm.slots.len() + self.sem.slots.len() + self.msg.slots.len()) * 96
    }
}

/// Copies the IPC objects into `copy` if they may have changed since the
/// copy (`seen`: [`IPC_CHANGES`] then; module `heal`); `None` if they are
/// in use.
pub(crate) fn copy_if_changed(copy: &mut Ipc, seen: &mut u64) -> Option<bool> {
    let n = IPC_CHANGES.load(core::sync::atomic::Ordering::Relaxed);
    if n == *seen {
        return Some(false);
    }
    IPC.try_with(|i| {
        copy.clone_from(i);
        *seen = n;
        true
    })
}

/// Frees the IPC objects (module `heal`, before a rejuvenation).
pub(crate) fn clear() {
    let old = IPC.try_with(core::mem::take);
    IPC_CHANGES.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    crate::heal::changed();
    drop(old);
}

/// Installs `ipc` after a reboot (module `heal`). The value the restored
/// snapshot left points at heap objects since changed or freed: it is
/// overwritten, never dropped.
pub(crate) fn install(ipc: Ipc) {
    IPC.with(|i| {
        // SAFETY: `i` is the valid, exclusive reference `with` gives;
        // writing without dropping the old value only leaks it.
        unsafe { core::ptr::write(i, ipc) }
    });
}

#[cfg(not(test))]
fn now() -> i64 {
    (shoal_time::realtime_ns() / 1_000_000_000) as i64
}

#[cfg(test)]
fn now() -> i64 {
    1_700_000_000
}

const PID: i32 = crate::PID as i32;

/// Memory for a segment of `size` bytes (rounded up to pages).
#[cfg(not(test))]
fn alloc_segment(size: u64) -> Result<u64, Errno> {
    shoal_mm::map_anon(size)
}

#[cfg(not(test))]
fn free_segment(addr: u64, size: u64) {
    let _ = shoal_mm::unmap(addr, size);
}

#[cfg(test)]
fn alloc_segment(size: u64) -> Result<u64, Errno> {
    let v = alloc::vec![0u8; size as usize].leak();
    Ok(v.as_mut_ptr() as u64)
}

#[cfg(test)]
fn free_segment(_addr: u64, _size: u64) {}

/// Sets the owner and mode from `IPC_SET`'s structure.
fn set_perm(p: &mut IpcPerm, new: &IpcPerm) {
    p.uid = new.uid;
    p.gid = new.gid;
    p.mode = (p.mode & !0o777) | (new.mode & 0o777);
}

/// Waits for a change to any IPC object; `Ok`: retry. A timeout is
/// `EAGAIN` (what `semtimedop` answers), a signal `EINTR`.
fn wait(deadline: Option<u64>) -> Result<(), Errno> {
    match shoal_sched::wait_key(WAIT_KEY, deadline) {
        Ok(()) => Ok(()),
        Err(Errno::ETIMEDOUT) => Err(Errno::EAGAIN),
        Err(e) => Err(e),
    }
}

fn wake() {
    shoal_sched::wake_key(WAIT_KEY);
}

// ---- shared memory -----------------------------------------------------

/// `shmget(key, size, flags)`.
pub fn shmget(a: &Args) -> SysResult {
    let (key, size, flags) = (a.int(0), a.u(1), a.uint(2));
    with_ipc(|t| {
        t.shm.lookup(
            key,
            flags,
            || {
                if size == 0 || size > SHMMAX {
                    return Err(Errno::EINVAL);
                }
                let addr = alloc_segment(size)?;
                Ok(Shm { addr, size, nattch: 0, times: [0, 0, 0], lpid: 0 })
            },
            |s| if size > s.size { Err(Errno::EINVAL) } else { Ok(()) },
        )
    })
}

/// `shmat(id, addr, flags)`: the segment's one address (see the module
/// documentation).
pub fn shmat(a: &Args) -> SysResult {
    let (id, addr, flags) = (a.int(0), a.u(1), a.uint(2));
    with_ipc(|t| {
        // A removed segment that is still attached can be attached again
        // by its id, as on Linux.
        let o = t.shm.get(id)?;
        if addr != 0 {
            let want = if flags & SHM_RND != 0 { addr & !(SHMLBA - 1) } else { addr };
            if want % SHMLBA != 0 || want != o.body.addr {
                return Err(Errno::EINVAL);
            }
        }
        o.body.nattch += 1;
        o.body.times[0] = now();
        o.body.lpid = PID;
        Ok(o.body.addr)
    })
}

/// `shmdt(addr)`: detaches the segment attached at `addr`; a removed one
/// goes with its last attach.
pub fn shmdt(a: &Args) -> SysResult {
    let addr = a.u(0);
    let gone = with_ipc(|t| {
        let i = t.shm.slots.iter().position(|s| s.as_ref().is_some_and(|o| o.body.addr == addr && o.body.nattch > 0));
        let Some(i) = i else { return Err(Errno::EINVAL) };
        let id = t.shm.id_of(i);
        let o = t.shm.get(id)?;
        o.body.nattch -= 1;
        o.body.times[1] = now();
        o.body.lpid = PID;
        if o.body.nattch == 0 && o.perm.mode & SHM_DEST != 0 {
            return t.shm.remove(id).map(|o| Some((o.body.addr, o.body.size)));
        }
        Ok(None)
    })?;
    if let Some((addr, size)) = gone {
        free_segment(addr, size);
    }
    Ok(0)
}

/// `shmctl(id, cmd, buf)`: `IPC_STAT`, `IPC_SET`, `IPC_RMID`.
pub fn shmctl(a: &Args) -> SysResult {
    let (id, cmd, buf) = (a.int(0), a.int(1) & !IPC_64, a.u(2));
    let gone = with_ipc(|t| -> Result<Option<(u64, u64)>, Errno> {
        let o = t.shm.get(id)?;
        match cmd {
            IPC_STAT => {
                let b = &o.body;
                let ds =
                    ShmidDs { perm: o.perm, segsz: b.size, times: [b.times[0], b.times[1], o.ctime], pids: [PID, b.lpid], nattch: b.nattch, unused: [0; 2] };
                umem::write(buf, ds)?;
                Ok(None)
            }
            IPC_SET => {
                let ds: ShmidDs = umem::read(buf)?;
                set_perm(&mut o.perm, &ds.perm);
                o.ctime = now();
                Ok(None)
            }
            IPC_RMID => {
                if o.body.nattch > 0 {
                    o.perm.mode |= SHM_DEST;
                    o.perm.key = IPC_PRIVATE;
                    return Ok(None);
                }
                t.shm.remove(id).map(|o| Some((o.body.addr, o.body.size)))
            }
            _ => Err(Errno::EINVAL),
        }
    })?;
    if let Some((addr, size)) = gone {
        free_segment(addr, size);
    }
    Ok(0)
}

// ---- semaphores --------------------------------------------------------

/// `semget(key, nsems, flags)`.
pub fn semget(a: &Args) -> SysResult {
    let (key, n, flags) = (a.int(0), a.int(1), a.uint(2));
    if !(0..=SEMMSL).contains(&n) {
        return Err(Errno::EINVAL);
    }
    with_ipc(|t| {
        t.sem.lookup(
            key,
            flags,
            || {
                if n == 0 {
                    return Err(Errno::EINVAL);
                }
                Ok(SemSet { sems: alloc::vec![Sem::default(); n as usize], otime: 0 })
            },
            |s| if n as usize > s.sems.len() { Err(Errno::EINVAL) } else { Ok(()) },
        )
    })
}

/// One `struct sembuf`.
#[derive(Clone, Copy, Debug)]
struct SemBuf {
    num: u16,
    op: i16,
    flg: i16,
}

fn read_sops(addr: u64, n: usize) -> Result<Vec<SemBuf>, Errno> {
    let bytes = umem::slice(addr, n.checked_mul(6).ok_or(Errno::E2BIG)?)?;
    Ok(bytes
        .chunks_exact(6)
        .map(|c| SemBuf { num: u16::from_ne_bytes([c[0], c[1]]), op: i16::from_ne_bytes([c[2], c[3]]), flg: i16::from_ne_bytes([c[4], c[5]]) })
        .collect())
}

/// What trying a `semop` now gives.
enum Try {
    Done,
    /// Operation `k` would wait (for a value of zero if `zero`).
    Wait(usize, bool),
}

/// Applies `sops` to `set` all at once, or not at all.
fn sem_try(set: &mut SemSet, sops: &[SemBuf]) -> Result<Try, Errno> {
    let mut vals: Vec<i32> = set.sems.iter().map(|s| s.val).collect();
    for (k, s) in sops.iter().enumerate() {
        let v = &mut vals[s.num as usize];
        match s.op {
            0 if *v != 0 => return Ok(Try::Wait(k, true)),
            0 => {}
            op if op < 0 && *v + (op as i32) < 0 => return Ok(Try::Wait(k, false)),
            op => {
                if *v + op as i32 > SEMVMX {
                    return Err(Errno::ERANGE);
                }
                *v += op as i32;
            }
        }
    }
    for (k, s) in set.sems.iter_mut().enumerate() {
        s.val = vals[k];
    }
    for s in sops {
        set.sems[s.num as usize].pid = PID;
    }
    set.otime = now();
    Ok(Try::Done)
}

fn do_semop(id: i32, addr: u64, n: usize, deadline: Option<u64>) -> SysResult {
    if n == 0 {
        return Err(Errno::EINVAL);
    }
    if n > SEMOPM {
        return Err(Errno::E2BIG);
    }
    let sops = read_sops(addr, n)?;
    let mut waited = false;
    loop {
        let r = with_ipc(|t| {
            let set = match t.sem.get(id) {
                Ok(o) => &mut o.body,
                // Removed while this thread waited.
                Err(_) if waited => return Err(Errno::EIDRM),
                Err(e) => return Err(e),
            };
            if sops.iter().any(|s| s.num as usize >= set.sems.len()) {
                return Err(Errno::EFBIG);
            }
            match sem_try(set, &sops)? {
                Try::Done => Ok(None),
                Try::Wait(k, _) if sops[k].flg as u32 & IPC_NOWAIT != 0 => Err(Errno::EAGAIN),
                Try::Wait(k, zero) => {
                    let s = &mut set.sems[sops[k].num as usize];
                    if zero {
                        s.zcnt += 1;
                    } else {
                        s.ncnt += 1;
                    }
                    Ok(Some((sops[k].num as usize, zero)))
                }
            }
        })?;
        let Some((num, zero)) = r else {
            wake();
            return Ok(0);
        };
        let w = wait(deadline);
        waited = true;
        with_ipc(|t| {
            if let Ok(o) = t.sem.get(id) {
                if let Some(s) = o.body.sems.get_mut(num) {
                    if zero {
                        s.zcnt = s.zcnt.saturating_sub(1);
                    } else {
                        s.ncnt = s.ncnt.saturating_sub(1);
                    }
                }
            }
        });
        w?;
    }
}

/// `semop(id, sops, nsops)`.
pub fn semop(a: &Args) -> SysResult {
    do_semop(a.int(0), a.u(1), a.usize(2), None)
}

/// `semtimedop(id, sops, nsops, timeout)`: the timeout is relative;
/// expiry is `EAGAIN`.
pub fn semtimedop(a: &Args) -> SysResult {
    let deadline = if a.u(3) != 0 {
        let t: shoal_time::sys::Timespec = umem::read(a.u(3))?;
        Some(shoal_time::monotonic_ns().saturating_add(t.to_ns()?))
    } else {
        None
    };
    do_semop(a.int(0), a.u(1), a.usize(2), deadline)
}

/// `semctl(id, num, cmd, arg)`: `IPC_STAT`, `IPC_SET`, `IPC_RMID`,
/// `GETVAL`, `SETVAL`, `GETALL`, `SETALL`, `GETPID`, `GETNCNT`, `GETZCNT`.
pub fn semctl(a: &Args) -> SysResult {
    let (id, num, cmd, arg) = (a.int(0), a.int(1), a.int(2) & !IPC_64, a.u(3));
    let r = with_ipc(|t| {
        if cmd == IPC_RMID {
            t.sem.remove(id)?;
            return Ok(0);
        }
        let o = t.sem.get(id)?;
        let n = o.body.sems.len();
        let one = |num: i32| if num < 0 || num as usize >= n { Err(Errno::EINVAL) } else { Ok(num as usize) };
        match cmd {
            IPC_STAT => {
                let ds = SemidDs { perm: o.perm, otime: o.body.otime, ctime: o.ctime, nsems: n as u64, ..SemidDs::default() };
                umem::write(arg, ds)?;
                Ok(0)
            }
            IPC_SET => {
                let ds: SemidDs = umem::read(arg)?;
                set_perm(&mut o.perm, &ds.perm);
                o.ctime = now();
                Ok(0)
            }
            GETVAL => Ok(o.body.sems[one(num)?].val as u64),
            GETPID => Ok(o.body.sems[one(num)?].pid as u64),
            GETNCNT => Ok(o.body.sems[one(num)?].ncnt as u64),
            GETZCNT => Ok(o.body.sems[one(num)?].zcnt as u64),
            SETVAL => {
                let k = one(num)?;
                let v = arg as i32;
                if !(0..=SEMVMX).contains(&v) {
                    return Err(Errno::ERANGE);
                }
                o.body.sems[k].val = v;
                o.body.sems[k].pid = PID;
                o.ctime = now();
                Ok(0)
            }
            GETALL => {
                let out = umem::slice_mut(arg, 2 * n)?;
                for (k, s) in o.body.sems.iter().enumerate() {
                    out[2 * k..2 * k + 2].copy_from_slice(&(s.val as u16).to_ne_bytes());
                }
                Ok(0)
            }
            SETALL => {
                let inp = umem::slice(arg, 2 * n)?;
                let vals: Vec<i32> = inp.chunks_exact(2).map(|c| u16::from_ne_bytes([c[0], c[1]]) as i32).collect();
                if vals.iter().any(|&v| v > SEMVMX) {
                    return Err(Errno::ERANGE);
                }
                for (s, v) in o.body.sems.iter_mut().zip(vals) {
                    s.val = v;
                    s.pid = PID;
                }
                o.ctime = now();
                Ok(0)
            }
            _ => Err(Errno::EINVAL),
        }
    })?;
    // Values changed or the set went: waiters retry (or see EIDRM).
    if matches!(cmd, IPC_RMID | SETVAL | SETALL) {
        wake();
    }
    Ok(r)
}

// ---- message queues ----------------------------------------------------

/// `msgget(key, flags)`.
pub fn msgget(a: &Args) -> SysResult {
    let (key, flags) = (a.int(0), a.uint(1));
    with_ipc(|t| t.msg.lookup(key, flags, || Ok(Msq { msgs: VecDeque::new(), cbytes: 0, qbytes: MSGMNB, times: [0, 0], pids: [0, 0] }), |_| Ok(())))
}

/// `msgsnd(id, msgp, size, flags)`: waits while the queue is full.
pub fn msgsnd(a: &Args) -> SysResult {
    let (id, p, size, flags) = (a.int(0), a.u(1), a.u(2), a.uint(3));
    if size > MSGMAX {
        return Err(Errno::EINVAL);
    }
    let mtype: i64 = umem::read(p)?;
    if mtype < 1 {
        return Err(Errno::EINVAL);
    }
    let text = umem::slice(p.checked_add(8).ok_or(Errno::EFAULT)?, size as usize)?.to_vec();
    let mut waited = false;
    loop {
        let sent = with_ipc(|t| {
            let q = match t.msg.get(id) {
                Ok(o) => &mut o.body,
                Err(_) if waited => return Err(Errno::EIDRM),
                Err(e) => return Err(e),
            };
            // Linux: the bytes, and the number of messages, stay within
            // msg_qbytes.
            if q.cbytes + size <= q.qbytes && (q.msgs.len() as u64) < q.qbytes {
                q.cbytes += size;
                q.msgs.push_back((mtype, text.clone()));
                q.times[0] = now();
                q.pids[0] = PID;
                return Ok(true);
            }
            if flags & IPC_NOWAIT != 0 {
                return Err(Errno::EAGAIN);
            }
            Ok(false)
        })?;
        if sent {
            wake();
            return Ok(0);
        }
        wait(None)?;
        waited = true;
    }
}

/// `msgrcv(id, msgp, size, type, flags)`: waits while no message matches.
pub fn msgrcv(a: &Args) -> SysResult {
    let (id, p, size, typ, flags) = (a.int(0), a.u(1), a.u(2), a.i(3), a.uint(4));
    if (size as i64) < 0 {
        return Err(Errno::EINVAL);
    }
    if flags & MSG_COPY != 0 {
        // Linux built without CONFIG_CHECKPOINT_RESTORE.
        return Err(Errno::ENOSYS);
    }
    let mut waited = false;
    loop {
        let got = with_ipc(|t| {
            let q = match t.msg.get(id) {
                Ok(o) => &mut o.body,
                Err(_) if waited => return Err(Errno::EIDRM),
                Err(e) => return Err(e),
            };
            let pick = if typ == 0 {
                if q.msgs.is_empty() {
                    None
                } else {
                    Some(0)
                }
            } else if typ > 0 {
                q.msgs.iter().position(|m| (m.0 == typ) != (flags & MSG_EXCEPT != 0))
            } else {
                // The lowest type not above |typ|, first of its kind.
                let lim = typ.unsigned_abs();
                let best = q.msgs.iter().filter(|m| m.0.unsigned_abs() <= lim).map(|m| m.0).min();
                best.and_then(|b| q.msgs.iter().position(|m| m.0 == b))
            };
            let Some(k) = pick else {
                return if flags & IPC_NOWAIT != 0 { Err(Errno::ENOMSG) } else { Ok(None) };
            };
            if q.msgs[k].1.len() as u64 > size && flags & MSG_NOERROR == 0 {
                return Err(Errno::E2BIG);
            }
            let n = (q.msgs[k].1.len() as u64).min(size) as usize;
            umem::write(p, q.msgs[k].0)?;
            umem::slice_mut(p.checked_add(8).ok_or(Errno::EFAULT)?, n)?.copy_from_slice(&q.msgs[k].1[..n]);
            let (_, m) = q.msgs.remove(k).ok_or(Errno::EINVAL)?;
            q.cbytes -= m.len() as u64;
            q.times[1] = now();
            q.pids[1] = PID;
            Ok(Some(n))
        })?;
        if let Some(n) = got {
            wake();
            return Ok(n as u64);
        }
        wait(None)?;
        waited = true;
    }
}

/// `msgctl(id, cmd, buf)`: `IPC_STAT`, `IPC_SET`, `IPC_RMID`.
pub fn msgctl(a: &Args) -> SysResult {
    let (id, cmd, buf) = (a.int(0), a.int(1) & !IPC_64, a.u(2));
    with_ipc(|t| {
        if cmd == IPC_RMID {
            return t.msg.remove(id).map(|_| ());
        }
        let o = t.msg.get(id)?;
        match cmd {
            IPC_STAT => {
                let q = &o.body;
                let ds = MsqidDs {
                    perm: o.perm,
                    times: [q.times[0], q.times[1], o.ctime],
                    cbytes: q.cbytes,
                    qnum: q.msgs.len() as u64,
                    qbytes: q.qbytes,
                    pids: q.pids,
                    unused: [0; 2],
                };
                umem::write(buf, ds)
            }
            IPC_SET => {
                let ds: MsqidDs = umem::read(buf)?;
                set_perm(&mut o.perm, &ds.perm);
                o.body.qbytes = ds.qbytes;
                o.ctime = now();
                Ok(())
            }
            _ => Err(Errno::EINVAL),
        }
    })?;
    if cmd != IPC_STAT {
        wake();
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[u64]) -> Args {
        let mut a = [0u64; 6];
        a[..v.len()].copy_from_slice(v);
        Args(a)
    }

    #[test]
    fn layouts() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        assert_eq!(core::mem::size_of::<IpcPerm>(), 48);
        assert_eq!(core::mem::size_of::<ShmidDs>(), 112);
        assert_eq!(core::mem::size_of::<SemidDs>(), 104);
        assert_eq!(core::mem::size_of::<MsqidDs>(), 120);
    }

    #[test]
    fn shared_memory() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        umem::set_bounds(1, u64::MAX);
        let id = shmget(&args(&[0x5107, 10000, (IPC_CREAT | 0o600) as u64])).unwrap();
        assert_eq!(shmget(&args(&[0x5107, 100, 0])), Ok(id), "by key");
        assert_eq!(shmget(&args(&[0x5107, 100, (IPC_CREAT | IPC_EXCL) as u64])), Err(Errno::EEXIST));
        assert_eq!(shmget(&args(&[0x5107, 20000, 0])), Err(Errno::EINVAL), "larger than the segment");
        assert_eq!(shmget(&args(&[0x5108, 100, 0])), Err(Errno::ENOENT));
        assert_eq!(shmget(&args(&[0, 0, IPC_CREAT as u64])), Err(Errno::EINVAL));
        let a = shmat(&args(&[id, 0, 0])).unwrap();
        let b = shmat(&args(&[id, 0, 0])).unwrap();
        assert_eq!(a, b, "one address per segment");
        // SAFETY: the segment is 10000 bytes of test memory.
        unsafe { *(a as *mut u32) = 7 };
        let mut ds = ShmidDs::default();
        let pd = &mut ds as *mut ShmidDs as u64;
        assert_eq!(shmctl(&args(&[id, IPC_STAT as u64, pd])), Ok(0));
        assert_eq!((ds.segsz, ds.nattch, ds.perm.mode, ds.perm.key), (10000, 2, 0o600, 0x5107));
        assert_eq!(shmctl(&args(&[id, IPC_RMID as u64, 0])), Ok(0));
        assert_eq!(shmget(&args(&[0x5107, 100, 0])), Err(Errno::ENOENT), "the key is gone");
        assert_eq!(shmdt(&args(&[a])), Ok(0));
        assert_eq!(shmctl(&args(&[id, IPC_STAT as u64, pd])), Ok(0), "attached: still there");
        assert_eq!(ds.perm.mode & SHM_DEST, SHM_DEST);
        assert_eq!(shmdt(&args(&[b])), Ok(0));
        assert_eq!(shmctl(&args(&[id, IPC_STAT as u64, pd])), Err(Errno::EINVAL), "last detach: gone");
        assert_eq!(shmdt(&args(&[b])), Err(Errno::EINVAL));
    }

    fn op(id: u64, ops: &[(u16, i16, i16)]) -> SysResult {
        let mut b = Vec::new();
        for &(n, o, f) in ops {
            b.extend_from_slice(&n.to_ne_bytes());
            b.extend_from_slice(&o.to_ne_bytes());
            b.extend_from_slice(&f.to_ne_bytes());
        }
        semop(&args(&[id, b.as_ptr() as u64, ops.len() as u64]))
    }

    #[test]
    fn semaphores() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        umem::set_bounds(1, u64::MAX);
        let nw = IPC_NOWAIT as i16;
        let id = semget(&args(&[0, 3, 0o600])).unwrap();
        assert_eq!(semctl(&args(&[id, 1, SETVAL as u64, 2])), Ok(0));
        assert_eq!(op(id, &[(1, -1, nw), (2, 1, 0)]), Ok(0));
        assert_eq!(semctl(&args(&[id, 1, GETVAL as u64])), Ok(1));
        // All or nothing: the second cannot, so the first does not happen.
        assert_eq!(op(id, &[(1, -1, 0), (0, -1, nw)]), Err(Errno::EAGAIN));
        assert_eq!(semctl(&args(&[id, 1, GETVAL as u64])), Ok(1));
        assert_eq!(op(id, &[(2, 0, nw)]), Err(Errno::EAGAIN), "wait-for-zero");
        assert_eq!(op(id, &[(3, 1, 0)]), Err(Errno::EFBIG));
        assert_eq!(op(id, &[]), Err(Errno::EINVAL));
        assert_eq!(op(id, &[(0, i16::MAX, 0), (0, 1, 0)]), Err(Errno::ERANGE));
        let mut all = [0u16; 3];
        assert_eq!(semctl(&args(&[id, 0, GETALL as u64, all.as_mut_ptr() as u64])), Ok(0));
        assert_eq!(all, [0, 1, 1]);
        let set = [5u16, 6, 7];
        assert_eq!(semctl(&args(&[id, 0, SETALL as u64, set.as_ptr() as u64])), Ok(0));
        assert_eq!(semctl(&args(&[id, 2, GETVAL as u64])), Ok(7));
        assert_eq!(semctl(&args(&[id, 2, GETPID as u64])), Ok(1));
        assert_eq!(semctl(&args(&[id, 5, GETVAL as u64])), Err(Errno::EINVAL));
        let mut ds = SemidDs::default();
        assert_eq!(semctl(&args(&[id, 0, (IPC_STAT | IPC_64) as u64, &mut ds as *mut SemidDs as u64])), Ok(0));
        assert_eq!(ds.nsems, 3);
        assert_eq!(semctl(&args(&[id, 0, IPC_RMID as u64])), Ok(0));
        assert_eq!(op(id, &[(0, 1, 0)]), Err(Errno::EINVAL));
    }

    #[test]
    fn message_queues() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        umem::set_bounds(1, u64::MAX);
        let nw = IPC_NOWAIT as u64;
        let id = msgget(&args(&[0x3e55, (IPC_CREAT | 0o644) as u64])).unwrap();
        let send = |ty: i64, text: &[u8]| {
            let mut b = ty.to_ne_bytes().to_vec();
            b.extend_from_slice(text);
            msgsnd(&args(&[id, b.as_ptr() as u64, text.len() as u64, nw]))
        };
        let recv = |ty: i64, size: usize, fl: u64| -> Result<(i64, Vec<u8>), Errno> {
            let mut b = vec![0u8; 8 + size];
            let n = msgrcv(&args(&[id, b.as_mut_ptr() as u64, size as u64, ty as u64, fl | nw]))? as usize;
            Ok((i64::from_ne_bytes(b[..8].try_into().unwrap()), b[8..8 + n].to_vec()))
        };
        send(3, b"three").unwrap();
        send(1, b"one").unwrap();
        send(2, b"two").unwrap();
        assert_eq!(send(0, b"x"), Err(Errno::EINVAL));
        assert_eq!(recv(2, 16, 0), Ok((2, b"two".to_vec())));
        assert_eq!(recv(-5, 16, 0), Ok((1, b"one".to_vec())), "lowest type first");
        assert_eq!(recv(0, 2, 0), Err(Errno::E2BIG));
        assert_eq!(recv(0, 2, MSG_NOERROR as u64), Ok((3, b"th".to_vec())));
        assert_eq!(recv(0, 16, 0), Err(Errno::ENOMSG));
        // Full: 16384 bytes.
        let big = vec![1u8; 8192];
        send(1, &big).unwrap();
        send(1, &big).unwrap();
        assert_eq!(send(1, b"x"), Err(Errno::EAGAIN));
        let mut ds = MsqidDs::default();
        assert_eq!(msgctl(&args(&[id, IPC_STAT as u64, &mut ds as *mut MsqidDs as u64])), Ok(0));
        assert_eq!((ds.qnum, ds.cbytes, ds.qbytes), (2, 16384, 16384));
        assert_eq!(msgctl(&args(&[id, IPC_RMID as u64, 0])), Ok(0));
        assert_eq!(send(1, b"x"), Err(Errno::EINVAL));
    }
}
