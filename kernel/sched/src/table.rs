//! The thread table: thread control blocks, the run queue, futex waiters
//! and deadlines. Pure data (no context switching, no clock), so it is
//! unit-tested on the host; `crate::run` drives it.
//!
//! Every container reserves room for every thread when a thread is created
//! ([`Table::spawn`]), so blocking, waking and yielding never allocate:
//! kernel-heap exhaustion can only make `clone` fail (`EAGAIN`), never a
//! later futex wait.

extern crate alloc;

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use shoal_plat::Errno;

/// The tid of the initial thread (Linux: the pid).
pub const MAIN_TID: u32 = 1;

/// What a blocked thread waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// A futex word at `addr`, woken by a wake whose bitset meets `bitset`.
    Futex {
        /// Address of the futex word.
        addr: u64,
        /// `FUTEX_WAIT_BITSET` mask (all ones for `FUTEX_WAIT`).
        bitset: u32,
    },
    /// Only its deadline (nanosleep) or a signal.
    Sleep,
    /// Only a signal (`pause`, `rt_sigsuspend`).
    Signal,
}

/// A thread's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// It owns the vCPU.
    Running,
    /// In the run queue.
    Runnable,
    /// Waiting; in the futex waiter list and/or the timer list.
    Blocked(Block),
}

/// Why a blocked thread was made runnable again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// By a futex wake (or it never blocked).
    Woken,
    /// Its deadline passed.
    TimedOut,
    /// A signal was sent to it.
    Interrupted,
}

/// A thread control block.
#[derive(Debug)]
pub struct Tcb {
    /// Thread id.
    pub tid: u32,
    /// Saved stack pointer while switched out (the callee-saved registers,
    /// FS base, MXCSR and x87 control word are on that stack).
    pub rsp: u64,
    /// State.
    pub state: State,
    /// Deadline (monotonic ns) of the current block, if any.
    pub deadline: Option<u64>,
    /// Why the last block ended.
    pub wake: Wake,
    /// `CLONE_CHILD_CLEARTID` / `set_tid_address`: cleared and woken at exit.
    pub clear_child_tid: u64,
    /// `set_robust_list` head.
    pub robust_list: u64,
    /// Blocked signals (bit sig-1).
    pub sig_mask: u64,
    /// Signals pending for this thread (bit sig-1).
    pub sig_pending: u64,
    /// The mask to restore once the signals a `ppoll`/`pselect6` ended
    /// for have been delivered (Linux's saved sigmask).
    pub saved_mask: Option<u64>,
    /// The thread's name (`prctl(PR_SET_NAME)`, `pthread_setname_np`): at
    /// most 15 bytes and a NUL, inherited from the creating thread.
    pub name: [u8; 16],
}

impl Tcb {
    fn new(tid: u32, rsp: u64, state: State) -> Tcb {
        Tcb {
            tid,
            rsp,
            state,
            deadline: None,
            wake: Wake::Woken,
            clear_child_tid: 0,
            robust_list: 0,
            sig_mask: 0,
            sig_pending: 0,
            saved_mask: None,
            name: [0; 16],
        }
    }
}

/// What the scheduler does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// Switch from `prev` (`None`: it has exited) to `next` (may equal
    /// `prev`: no switch).
    Run {
        /// The thread that gave up the vCPU, if it still exists.
        prev: Option<u32>,
        /// The thread to run.
        next: u32,
    },
    /// Nothing is runnable: block the vCPU until this deadline.
    Idle(u64),
    /// Nothing is runnable and no deadline is pending: nothing can ever
    /// wake any of these many threads.
    Deadlock(usize),
}

/// All threads of the instance.
#[derive(Debug)]
pub struct Table {
    /// Sorted by tid (tids only grow, so pushing keeps the order). Boxed
    /// so that a TCB's `rsp` slot stays put while the vector changes: the
    /// context switch writes it through a raw pointer.
    #[allow(clippy::vec_box)]
    threads: Vec<Box<Tcb>>,
    current: u32,
    runq: VecDeque<u32>,
    /// Futex waiters in arrival order (FIFO wakes): `(tid, address)`, the
    /// address as in the thread's `Block::Futex`. Kept beside the tid so
    /// that a wake of an address nobody waits on (most wakes of kernel
    /// wait queues: net and vfs wake theirs at every change) compares a few
    /// numbers and looks no thread up.
    waiters: Vec<(u32, u64)>,
    /// `(deadline, tid)` of blocked threads with a deadline.
    timers: Vec<(u64, u32)>,
    next_tid: u32,
    /// Where the running thread's TCB was last found in `threads`: the
    /// running thread is looked up several times per system call (its
    /// signal mask and pending set), and a hint is checked before use, so
    /// a stale one costs only the search it would have saved.
    hint: usize,
}

impl Default for Table {
    fn default() -> Self {
        Table::new()
    }
}

impl Table {
    /// An empty table; the initial thread is added on first use.
    pub const fn new() -> Table {
        Table { threads: Vec::new(), current: MAIN_TID, runq: VecDeque::new(), waiters: Vec::new(), timers: Vec::new(), next_tid: MAIN_TID + 1, hint: 0 }
    }

    fn ensure_main(&mut self) {
        if self.threads.is_empty() && self.next_tid == MAIN_TID + 1 {
            self.threads.push(Box::new(Tcb::new(MAIN_TID, 0, State::Running)));
            self.next_tid = MAIN_TID + 1;
        }
    }

    fn index(&self, tid: u32) -> Option<usize> {
        if self.threads.get(self.hint).is_some_and(|t| t.tid == tid) {
            return Some(self.hint);
        }
        self.threads.binary_search_by_key(&tid, |t| t.tid).ok()
    }

    /// The running thread's tid.
    pub fn current(&mut self) -> u32 {
        self.ensure_main();
        self.current
    }

    /// Number of threads.
    pub fn len(&mut self) -> usize {
        self.ensure_main();
        self.threads.len()
    }

    /// Whether no thread exists (never, once used).
    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    /// The thread `tid`.
    pub fn get(&mut self, tid: u32) -> Option<&mut Tcb> {
        self.ensure_main();
        let i = self.index(tid)?;
        if tid == self.current {
            self.hint = i;
        }
        Some(&mut self.threads[i])
    }

    /// The thread a signal sent to the process (`sig_bit`: bit `sig - 1`)
    /// goes to, as Linux picks it: the running thread if it does not block
    /// the signal, else the first thread that does not, else the running
    /// thread (where it stays pending until unblocked).
    pub fn process_signal_target(&mut self, sig_bit: u64) -> u32 {
        let cur = self.current();
        if self.cur().sig_mask & sig_bit == 0 {
            return cur;
        }
        self.threads.iter().find(|t| t.sig_mask & sig_bit == 0).map_or(cur, |t| t.tid)
    }

    /// The running thread's TCB if the hint finds it: no search, no call
    /// (for [`crate::light_state`]).
    #[inline]
    pub fn cur_by_hint(&self) -> Option<&Tcb> {
        self.threads.get(self.hint).filter(|t| t.tid == self.current).map(|t| &**t)
    }

    /// The running thread: the hint first (it names the running thread
    /// after any `get` of it: every system call's way out asks).
    #[inline]
    pub fn cur(&mut self) -> &mut Tcb {
        if self.threads.get(self.hint).is_some_and(|t| t.tid == self.current) {
            return &mut self.threads[self.hint];
        }
        let c = self.current();
        self.get(c).expect("the running thread has a TCB")
    }

    /// Adds a runnable thread (at the back of the run queue) whose saved
    /// stack pointer is `rsp`. It inherits the creator's signal mask.
    /// `EAGAIN` when the tid space or the kernel heap is exhausted.
    pub fn spawn(&mut self, rsp: u64) -> Result<u32, Errno> {
        self.ensure_main();
        if self.next_tid >= i32::MAX as u32 {
            return Err(Errno::EAGAIN);
        }
        let n = self.threads.len() + 1;
        let fail = |_| Errno::EAGAIN;
        self.threads.try_reserve(1).map_err(fail)?;
        self.runq.try_reserve(n.saturating_sub(self.runq.len())).map_err(fail)?;
        self.waiters.try_reserve(n.saturating_sub(self.waiters.len())).map_err(fail)?;
        self.timers.try_reserve(n.saturating_sub(self.timers.len())).map_err(fail)?;
        let tid = self.next_tid;
        let mut tcb = try_box(Tcb::new(tid, rsp, State::Runnable))?;
        tcb.sig_mask = self.cur().sig_mask;
        tcb.name = self.cur().name;
        self.next_tid += 1;
        self.threads.push(tcb);
        self.runq.push_back(tid);
        Ok(tid)
    }

    /// Blocks the running thread on `block` until woken or `deadline`.
    /// The caller then calls [`Table::pick`].
    pub fn block_current(&mut self, block: Block, deadline: Option<u64>) {
        let tid = self.current();
        let t = self.cur();
        t.state = State::Blocked(block);
        t.deadline = deadline;
        t.wake = Wake::Woken;
        if let Block::Futex { addr, .. } = block {
            self.waiters.push((tid, addr));
        }
        if let Some(d) = deadline {
            self.timers.push((d, tid));
        }
    }

    /// Puts the running thread at the back of the run queue.
    pub fn yield_current(&mut self) {
        let tid = self.current();
        self.cur().state = State::Runnable;
        self.runq.push_back(tid);
    }

    /// Makes blocked thread `tid` runnable, with reason `why`.
    fn unblock(&mut self, tid: u32, why: Wake) {
        let Some(i) = self.index(tid) else { return };
        let t = &mut self.threads[i];
        if !matches!(t.state, State::Blocked(_)) {
            return;
        }
        let was_futex = matches!(t.state, State::Blocked(Block::Futex { .. }));
        let deadline = t.deadline.take();
        t.state = State::Runnable;
        t.wake = why;
        if was_futex {
            self.waiters.retain(|&(w, _)| w != tid);
        }
        if let Some(d) = deadline {
            if let Some(p) = self.timers.iter().position(|&e| e == (d, tid)) {
                self.timers.swap_remove(p);
            }
        }
        self.runq.push_back(tid);
    }

    /// Wakes up to `n` waiters on `addr` whose bitset meets `bitset`, in
    /// arrival order; returns how many.
    pub fn wake(&mut self, addr: u64, n: u32, bitset: u32) -> u32 {
        let mut woken = 0u32;
        let mut i = 0;
        while i < self.waiters.len() && woken < n {
            let (tid, a) = self.waiters[i];
            if a != addr {
                i += 1;
                continue;
            }
            let hit = match self.index(tid).map(|j| self.threads[j].state) {
                Some(State::Blocked(Block::Futex { addr: a, bitset: b })) => a == addr && b & bitset != 0,
                _ => false,
            };
            if hit {
                self.unblock(tid, Wake::Woken); // removes waiters[i]
                woken += 1;
            } else {
                i += 1;
            }
        }
        woken
    }

    /// The first waiter (in arrival order) on `addr`, if any.
    pub fn first_waiter(&mut self, addr: u64) -> Option<u32> {
        self.waiters
            .iter()
            .filter(|&&(_, a)| a == addr)
            .map(|&(tid, _)| tid)
            .find(|&tid| matches!(self.index(tid).map(|j| self.threads[j].state), Some(State::Blocked(Block::Futex { addr: a, .. })) if a == addr))
    }

    /// Wakes blocked thread `tid` ([`Wake::Woken`]).
    pub fn wake_tid(&mut self, tid: u32) {
        self.unblock(tid, Wake::Woken);
    }

    /// `FUTEX_REQUEUE`: wakes up to `n_wake` waiters on `from`, then moves
    /// up to `n_move` of the rest to `to`; returns woken + moved.
    pub fn requeue(&mut self, from: u64, to: u64, n_wake: u32, n_move: u32) -> u32 {
        let woken = self.wake(from, n_wake, u32::MAX);
        let mut moved = 0;
        for k in 0..self.waiters.len() {
            if moved >= n_move {
                break;
            }
            let (tid, _) = self.waiters[k];
            if let Some(j) = self.index(tid) {
                if let State::Blocked(Block::Futex { addr, bitset }) = self.threads[j].state {
                    if addr == from {
                        self.threads[j].state = State::Blocked(Block::Futex { addr: to, bitset });
                        self.waiters[k].1 = to;
                        moved += 1;
                    }
                }
            }
        }
        woken + moved
    }

    /// A signal for `tid`: if it is blocked, it wakes with
    /// [`Wake::Interrupted`]. Returns whether it was blocked.
    pub fn interrupt(&mut self, tid: u32) -> bool {
        let blocked = matches!(self.get(tid).map(|t| t.state), Some(State::Blocked(_)));
        if blocked {
            self.unblock(tid, Wake::Interrupted);
        }
        blocked
    }

    /// The earliest pending deadline.
    pub fn next_deadline(&self) -> Option<u64> {
        self.timers.iter().map(|&(d, _)| d).min()
    }

    /// Wakes every thread whose deadline is `<= now` ([`Wake::TimedOut`]),
    /// earliest first; returns how many.
    pub fn expire(&mut self, now: u64) -> usize {
        let mut n = 0;
        while let Some(&(_, tid)) = self.timers.iter().filter(|e| e.0 <= now).min() {
            self.unblock(tid, Wake::TimedOut);
            n += 1;
        }
        n
    }

    /// Removes the running thread (it has exited). The caller then calls
    /// [`Table::pick`], which reports `prev: None`.
    pub fn exit_current(&mut self) {
        let tid = self.current();
        if let Some(i) = self.index(tid) {
            self.threads.remove(i);
        }
        self.runq.retain(|&t| t != tid);
    }

    /// Chooses the next thread after the running one blocked, yielded or
    /// exited: the front of the run queue (round robin).
    pub fn pick(&mut self) -> Pick {
        let prev = self.current();
        let prev_alive = self.index(prev).is_some();
        if let Some(next) = self.runq.pop_front() {
            self.current = next;
            if let Some(t) = self.get(next) {
                t.state = State::Running;
            }
            return Pick::Run { prev: prev_alive.then_some(prev), next };
        }
        match self.next_deadline() {
            Some(d) => Pick::Idle(d),
            None => Pick::Deadlock(self.threads.len()),
        }
    }

    /// How many threads are runnable: the run queue and the running one
    /// (what the preemption tick looks at).
    pub fn runnable(&self) -> usize {
        if self.threads.is_empty() {
            // Only the main thread, not yet in the table: it runs.
            return 1;
        }
        let running = self.index(self.current).is_some_and(|i| self.threads[i].state == State::Running);
        self.runq.len() + usize::from(running)
    }

    /// Whether some blocked thread waits with a deadline.
    pub fn has_deadline(&self) -> bool {
        !self.timers.is_empty()
    }

    /// Whether some thread waits for nothing but a signal (`pause`).
    pub fn awaits_signal(&self) -> bool {
        self.threads.iter().any(|t| t.state == State::Blocked(Block::Signal))
    }

    /// Pointer to the saved-rsp slot of `tid` (stable: TCBs are boxed).
    pub fn rsp_slot(&mut self, tid: u32) -> Option<*mut u64> {
        self.get(tid).map(|t| &mut t.rsp as *mut u64)
    }

    /// Tids of all threads (for diagnostics and tests).
    pub fn tids(&self) -> impl Iterator<Item = u32> + '_ {
        self.threads.iter().map(|t| t.tid)
    }
}

fn try_box<T>(v: T) -> Result<Box<T>, Errno> {
    use core::alloc::Layout;
    let layout = Layout::new::<T>();
    // SAFETY: `T` is not zero-sized (a Tcb); the allocation is checked for
    // null before use and initialised with `write` before `Box` owns it;
    // `Box::from_raw` takes a pointer from the global allocator with `T`'s
    // layout, as `Box` itself allocates.
    unsafe {
        let p = alloc::alloc::alloc(layout) as *mut T;
        if p.is_null() {
            return Err(Errno::EAGAIN);
        }
        p.write(v);
        Ok(Box::from_raw(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn main_thread_exists_and_spawn_round_robin() {
        let mut t = Table::new();
        assert_eq!(t.current(), 1);
        assert_eq!(t.len(), 1);
        let a = t.spawn(100).unwrap();
        let b = t.spawn(200).unwrap();
        assert_eq!((a, b), (2, 3));
        assert_eq!(t.get(a).unwrap().state, State::Runnable);
        // Main yields: 2, 3, then main again.
        t.yield_current();
        assert_eq!(t.pick(), Pick::Run { prev: Some(1), next: 2 });
        t.yield_current();
        assert_eq!(t.pick(), Pick::Run { prev: Some(2), next: 3 });
        t.yield_current();
        assert_eq!(t.pick(), Pick::Run { prev: Some(3), next: 1 });
        assert_eq!(t.cur().state, State::Running);
        // Alone in the queue: yielding picks itself.
        let mut s = Table::new();
        s.yield_current();
        assert_eq!(s.pick(), Pick::Run { prev: Some(1), next: 1 });
    }

    #[test]
    fn a_process_signal_goes_to_a_thread_that_does_not_block_it() {
        let mut t = Table::new();
        let a = t.spawn(0).unwrap();
        let term = 1u64 << 14;
        assert_eq!(t.process_signal_target(term), 1, "the running thread first");
        t.cur().sig_mask = term;
        assert_eq!(t.process_signal_target(term), a, "else one that does not block it");
        t.get(a).unwrap().sig_mask = term;
        assert_eq!(t.process_signal_target(term), 1, "else pending on the running thread");
    }

    #[test]
    fn a_thread_in_pause_waits_only_for_a_signal() {
        let mut t = Table::new();
        let a = t.spawn(0).unwrap();
        assert!(!t.awaits_signal());
        t.block_current(Block::Signal, None);
        assert!(t.awaits_signal(), "main waits for a signal");
        assert_eq!(t.pick(), Pick::Run { prev: Some(1), next: a });
        t.block_current(Block::Futex { addr: 0x1000, bitset: u32::MAX }, None);
        assert_eq!(t.pick(), Pick::Deadlock(2), "nothing in the guest can wake either");
        assert_eq!(t.wake(0x1000, 1, u32::MAX), 1);
        assert!(t.awaits_signal(), "a futex wake does not end a pause");
        t.interrupt(1);
        assert!(!t.awaits_signal());
        assert_eq!(t.get(1).unwrap().wake, Wake::Interrupted);
    }

    #[test]
    fn runnable_counts_the_run_queue_and_the_running_thread() {
        let mut t = Table::new();
        assert_eq!(t.runnable(), 1, "the main thread alone");
        let b = t.spawn(0x2000).unwrap();
        assert_eq!(t.runnable(), 2);
        t.block_current(Block::Sleep, Some(10));
        assert_eq!(t.runnable(), 1, "main sleeps");
        assert_eq!(t.pick(), Pick::Run { prev: Some(MAIN_TID), next: b });
        assert_eq!(t.runnable(), 1, "b runs alone");
        t.yield_current();
        assert_eq!(t.runnable(), 1, "yielding keeps the count");
        assert_eq!(t.pick(), Pick::Run { prev: Some(b), next: b });
        t.expire(10);
        assert_eq!(t.runnable(), 2, "main woke");
        t.block_current(Block::Signal, None);
        assert_eq!(t.pick(), Pick::Run { prev: Some(b), next: MAIN_TID });
        t.block_current(Block::Sleep, Some(20));
        assert_eq!(t.runnable(), 0, "all blocked");
    }

    #[test]
    fn futex_fifo_bitset_and_count() {
        let mut t = Table::new();
        let a = t.spawn(0).unwrap();
        let b = t.spawn(0).unwrap();
        // main blocks on 0x1000; then a on 0x1000 with bitset 2; b on 0x2000.
        t.block_current(Block::Futex { addr: 0x1000, bitset: u32::MAX }, None);
        assert_eq!(t.pick(), Pick::Run { prev: Some(1), next: a });
        t.block_current(Block::Futex { addr: 0x1000, bitset: 2 }, None);
        assert_eq!(t.pick(), Pick::Run { prev: Some(a), next: b });
        t.block_current(Block::Futex { addr: 0x2000, bitset: u32::MAX }, None);
        assert_eq!(t.pick(), Pick::Deadlock(3));
        // Bitset 1 wakes only main.
        assert_eq!(t.wake(0x1000, 10, 1), 1);
        assert_eq!(t.get(1).unwrap().state, State::Runnable);
        assert_eq!(t.get(a).unwrap().state, State::Blocked(Block::Futex { addr: 0x1000, bitset: 2 }));
        assert_eq!(t.wake(0x1000, 0, u32::MAX), 0, "n = 0 wakes nobody");
        assert_eq!(t.wake(0x3000, 5, u32::MAX), 0);
        assert_eq!(t.pick(), Pick::Run { prev: Some(b), next: 1 });
        assert_eq!(t.cur().wake, Wake::Woken);
        // Requeue b... b is on 0x2000; requeue 0x1000 -> 0x2000 moves a.
        assert_eq!(t.requeue(0x1000, 0x2000, 0, 5), 1);
        assert_eq!(t.wake(0x1000, 5, u32::MAX), 0);
        // FIFO on 0x2000: a was queued before b? No: a blocked first.
        assert_eq!(t.wake(0x2000, 1, u32::MAX), 1);
        assert_eq!(t.get(a).unwrap().state, State::Runnable);
        assert_eq!(t.get(b).unwrap().state, State::Blocked(Block::Futex { addr: 0x2000, bitset: u32::MAX }));
        // The queue's addresses follow the requeue: b is the first (only)
        // waiter on 0x2000, nobody waits on 0x1000 any more.
        assert_eq!(t.first_waiter(0x2000), Some(b));
        assert_eq!(t.first_waiter(0x1000), None);
    }

    #[test]
    fn deadlines_idle_and_timeouts() {
        let mut t = Table::new();
        let a = t.spawn(0).unwrap();
        t.block_current(Block::Futex { addr: 8, bitset: u32::MAX }, Some(500));
        assert_eq!(t.pick(), Pick::Run { prev: Some(1), next: a });
        t.block_current(Block::Sleep, Some(300));
        assert_eq!(t.next_deadline(), Some(300));
        assert_eq!(t.pick(), Pick::Idle(300));
        assert_eq!(t.expire(299), 0);
        assert_eq!(t.expire(1000), 2);
        assert_eq!(t.next_deadline(), None);
        // Earliest deadline first.
        assert_eq!(t.pick(), Pick::Run { prev: Some(a), next: a });
        assert_eq!(t.cur().wake, Wake::TimedOut);
        assert_eq!(t.wake(8, 1, u32::MAX), 0, "a timed-out waiter left the futex queue");
        // A woken waiter's timer is gone.
        t.block_current(Block::Futex { addr: 16, bitset: u32::MAX }, Some(50));
        assert_eq!(t.pick(), Pick::Run { prev: Some(a), next: 1 });
        assert_eq!(t.wake(16, 1, u32::MAX), 1);
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn interrupt_and_exit() {
        let mut t = Table::new();
        let a = t.spawn(0).unwrap();
        assert!(!t.interrupt(a), "runnable: nothing to interrupt");
        t.block_current(Block::Sleep, Some(10_000));
        assert_eq!(t.pick(), Pick::Run { prev: Some(1), next: a });
        assert!(t.interrupt(1));
        assert_eq!(t.next_deadline(), None);
        t.exit_current();
        assert_eq!(t.len(), 1);
        assert_eq!(t.pick(), Pick::Run { prev: None, next: 1 });
        assert_eq!(t.cur().wake, Wake::Interrupted);
        assert!(t.rsp_slot(a).is_none());
        assert_eq!(t.tids().collect::<Vec<_>>(), vec![1]);
        // Tids are not reused.
        assert_eq!(t.spawn(0).unwrap(), 3);
    }

    #[test]
    fn signal_mask_is_inherited() {
        let mut t = Table::new();
        t.cur().sig_mask = 0b101;
        let a = t.spawn(0).unwrap();
        assert_eq!(t.get(a).unwrap().sig_mask, 0b101);
    }
}
