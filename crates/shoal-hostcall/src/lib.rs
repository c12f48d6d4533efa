//! The host side of guest requests that spt and hvt serve the same way.
//!
//! Everything here sits on the trust boundary: the words it reads are the
//! guest's, written by a kernel that may be hostile. Each tender supplies
//! only what differs between a process and a virtual machine (how a timer
//! is set, how the interrupted guest's registers are reached); the
//! decisions are made once, here, so the two tenders cannot drift apart.
//!
//! - [`preempt`]: preemption ticks and the hang watchdog.
//! - [`net`]: the `Net` hypercall's batch, bounds and socket checks.
//! - [`hostfs`]: the `HostFs` hypercall: read-only host directories.
#![deny(missing_docs)]

pub mod hostfs;
pub mod net;
pub mod preempt;
