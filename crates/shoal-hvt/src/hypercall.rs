//! The hypercall handlers. Every argument is hostile: the argument
//! structure and every buffer it names are read and written only through
//! `shoal_loader::GuestMemory`, which checks (without overflow) that the
//! whole range lies in guest memory.

use crate::x86;
use shoal_abi::{
    ConsoleWriteArgs, FaultArgs, HaltArgs, Hypercall, PollArgs, CONSOLE_STDERR, CONSOLE_STDOUT, HYPERCALL_PORT_BASE,
};
use shoal_loader::{GuestAddr, GuestMemory, MemError};
use std::io::Write;
use std::time::Duration;
use vm_memory::Bytes;

/// Where console output goes (the process's stdout/stderr, or buffers in
/// tests).
pub struct Console<'a> {
    /// Stream 1.
    pub stdout: &'a mut dyn Write,
    /// Stream 2.
    pub stderr: &'a mut dyn Write,
}

/// What the run loop does after a hypercall.
#[derive(Debug)]
pub enum Action {
    /// Resume the guest.
    Continue,
    /// The guest halted with this status.
    Halt(i64),
    /// A fault report: from the CPL-0 stub (`cpu`) or the guest itself.
    Fault {
        /// The report.
        report: FaultArgs,
        /// Whether the stub sent it (a CPU exception).
        cpu: bool,
    },
    /// The guest polled with no deadline and nothing to wait for.
    BlockedForever,
    /// The guest broke the hypercall protocol; stop it.
    Refused(Refusal),
}

/// Ways a guest can break the hypercall protocol.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A port write that is not a 32-bit `out dx, eax`.
    #[error("it wrote {size} bytes to hypercall port {port:#x}; hypercalls are 32-bit port writes")]
    BadSize {
        /// The port.
        port: u16,
        /// Bytes written.
        size: usize,
    },
    /// A port that is not a hypercall.
    #[error("it wrote to I/O port {0:#x}, which is not a hypercall port")]
    UnknownPort(u16),
    /// A port read.
    #[error("it read I/O port {0:#x}; hvt hypercalls are port writes")]
    PortRead(u16),
    /// The argument structure does not lie in guest memory.
    #[error("its {call:?} argument structure is outside guest memory: {source}")]
    BadArgs {
        /// The hypercall.
        call: Hypercall,
        /// The range check that failed.
        source: MemError,
    },
}

const EFAULT: i64 = -(libc::EFAULT as i64);
const EINVAL: i64 = -(libc::EINVAL as i64);

/// Handles a write of `data` to I/O port `port`.
pub fn handle_out(port: u16, data: &[u8], mem: &GuestMemory, private: &vm_memory::GuestRegionMmap<()>, console: &mut Console<'_>, wrote: &mut bool) -> Action {
    let Some(nr) = port.checked_sub(HYPERCALL_PORT_BASE) else {
        return Action::Refused(Refusal::UnknownPort(port));
    };
    let Some(call) = Hypercall::from_nr(u64::from(nr)) else {
        return Action::Refused(Refusal::UnknownPort(port));
    };
    let Ok(bytes) = <[u8; 4]>::try_from(data) else {
        return Action::Refused(Refusal::BadSize { port, size: data.len() });
    };
    let arg = GuestAddr(u64::from(u32::from_le_bytes(bytes)));
    let refuse = |source| Action::Refused(Refusal::BadArgs { call, source });
    match call {
        Hypercall::ConsoleWrite => {
            let mut a: ConsoleWriteArgs = match mem.read_obj(arg) {
                Ok(a) => a,
                Err(e) => return refuse(e),
            };
            a.ret = console_write(mem, &a, console, wrote);
            match mem.write_obj(arg, &a) {
                Ok(()) => Action::Continue,
                Err(e) => refuse(e),
            }
        }
        Hypercall::Halt => match mem.read_obj::<HaltArgs>(arg) {
            Ok(a) => Action::Halt(a.status),
            Err(e) => refuse(e),
        },
        Hypercall::Poll => {
            let mut a: PollArgs = match mem.read_obj(arg) {
                Ok(a) => a,
                Err(e) => return refuse(e),
            };
            if a.wait_set != 0 {
                // No devices exist yet.
                a.ret = EINVAL;
            } else if a.timeout_ns == u64::MAX {
                // Nothing could ever wake it (spt does the same).
                return Action::BlockedForever;
            } else {
                // Block here: an idle guest costs no CPU.
                if a.timeout_ns > 0 {
                    std::thread::sleep(Duration::from_nanos(a.timeout_ns));
                }
                a.ret = 0;
            }
            a.ready_set = 0;
            match mem.write_obj(arg, &a) {
                Ok(()) => Action::Continue,
                Err(e) => refuse(e),
            }
        }
        // Host-socket passthrough is not built on hvt yet: the guest's
        // socket calls fail with ENOSYS instead of pretending.
        Hypercall::Net => {
            let mut a: shoal_abi::NetArgs = match mem.read_obj(arg) {
                Ok(a) => a,
                Err(e) => return refuse(e),
            };
            a.ret = -i64::from(libc::ENOSYS);
            match mem.write_obj(arg, &a) {
                Ok(()) => Action::Continue,
                Err(e) => refuse(e),
            }
        }
        Hypercall::NetPoll => {
            let mut a: shoal_abi::NetPollArgs = match mem.read_obj(arg) {
                Ok(a) => a,
                Err(e) => return refuse(e),
            };
            a.ret = -i64::from(libc::ENOSYS);
            match mem.write_obj(arg, &a) {
                Ok(()) => Action::Continue,
                Err(e) => refuse(e),
            }
        }
        Hypercall::Fault => {
            // The CPL-0 stub reports from its own stack in tender-private
            // memory; a guest may also report a fault of its own.
            if arg.0 == x86::FAULT_REPORT_ADDR {
                let mut raw = [0u8; core::mem::size_of::<FaultArgs>()];
                if private.read_slice(&mut raw, vm_memory::MemoryRegionAddress(arg.0)).is_ok() {
                    let q = |i: usize| {
                        let mut w = [0u8; 8];
                        w.copy_from_slice(&raw[i * 8..i * 8 + 8]);
                        u64::from_le_bytes(w)
                    };
                    let report = FaultArgs { vector: q(0), error_code: q(1), rip: q(2), rsp: q(3), cr2: q(4) };
                    return Action::Fault { report, cpu: true };
                }
            }
            match mem.read_obj::<FaultArgs>(arg) {
                Ok(report) => Action::Fault { report, cpu: false },
                Err(e) => refuse(e),
            }
        }
    }
}

fn console_write(mem: &GuestMemory, a: &ConsoleWriteArgs, console: &mut Console<'_>, wrote: &mut bool) -> i64 {
    let out: &mut dyn Write = match a.stream {
        CONSOLE_STDOUT => &mut *console.stdout,
        CONSOLE_STDERR => &mut *console.stderr,
        _ => return EINVAL,
    };
    if !mem.contains(GuestAddr(a.buf), a.len) && a.len != 0 {
        return EFAULT;
    }
    let mut buf = [0u8; 16 * 1024];
    let mut done: u64 = 0;
    while done < a.len {
        let n = (a.len - done).min(buf.len() as u64);
        let chunk = &mut buf[..n as usize];
        // Checked above; checked again here (guest memory cannot shrink, but
        // the accessor is the one place that forms host pointers).
        if mem.read(GuestAddr(a.buf + done), chunk).is_err() {
            return EFAULT;
        }
        if let Err(e) = out.write_all(chunk) {
            return if done > 0 { done as i64 } else { -i64::from(e.raw_os_error().unwrap_or(libc::EIO)) };
        }
        *wrote = true;
        done += n;
    }
    let _ = out.flush();
    i64::try_from(done).unwrap_or(i64::MAX)
}
