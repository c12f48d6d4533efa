//! The hvt tender: runs a shoal image in a KVM virtual machine (DESIGN §3).
//!
//! The guest runs entirely at **CPL 3 with IOPL 3**, entered straight from
//! `KVM_SET_SREGS`: on the nested, paravirtual KVM shoal targets, CPL-3 code
//! runs at native speed while CPL-0 code is emulated, so the only CPL-0 code
//! is a tiny stub that turns CPU exceptions into a Fault hypercall. The VMM
//! writes, once, in tender-private low memory `[0, TENDER_PRIVATE_END)`:
//! identity page tables (image code read-only and executable, everything
//! else NX, the tender-private pages supervisor-only), a GDT, an IDT whose
//! 32 exception vectors lead to the stub, and a TSS whose RSP0 is the stub's
//! stack and whose I/O permission bitmap allows exactly the hypercall ports
//! (see [`x86`] for the map). There are no interrupts and no devices.
//!
//! Hypercalls are `out dx, eax` with `dx = HYPERCALL_PORT_BASE + nr` and
//! `eax` = the guest address of the argument structure; guest memory is
//! identity mapped, so guest-virtual = guest-physical = the addresses of
//! `shoal_abi`'s layout, as on spt.
//!
//! # Exit status
//!
//! Mirrors `shoal run` on spt (docs/architecture.md): the guest's Halt
//! status (low 8 bits); 128 + N when the instance was stopped the way a
//! process is killed by signal N — a CPU exception maps to the signal Linux
//! would send (page fault and general protection → SIGSEGV = 139, invalid
//! opcode → SIGILL = 132, divide error → SIGFPE = 136, …); a `syscall`
//! instruction and a hypercall the tender refuses → SIGSYS = 159, like a
//! forbidden host system call on spt; anything else that stops the vCPU
//! (triple fault, `hlt`, an internal KVM error) → SIGKILL = 137. Every such
//! stop prints one `shoal: …` line on stderr.
//!
//! # Protection keys
//!
//! This nested KVM does not enforce protection keys in guest page tables
//! (DESIGN §1), so hvt neither advertises PKU to the guest nor relies on
//! it: component isolation with keys is not available on hvt.
//!
//! # Dependencies
//!
//! - `kvm-ioctls`: safe wrappers for the KVM ioctls (create VM and vCPU,
//!   memory slot, CPUID, registers, XCRs, `KVM_RUN` and its exits).
//! - `kvm-bindings`: the KVM structures (`kvm_sregs`, `kvm_segment`,
//!   `kvm_cpuid_entry2`, `kvm_xcrs`, `kvm_device_attr`, …) those take.
//! - `vm-memory`: the anonymous, lazily backed (`MAP_NORESERVE`) guest
//!   memory mapping and bounds-checked writes of the tender-private tables.
//! - `vmm-sys-util`: the errno type of KVM errors, the FAM-struct wrapper
//!   the CPUID list is edited through, and the ioctl helpers for the one
//!   vCPU ioctl `kvm-ioctls` does not wrap on x86 (`KVM_SET_DEVICE_ATTR`,
//!   to give the guest the host's TSC).
//! - `shoal-loader`: image checks, layout, boot state, TSC calibration and
//!   the checked accessor every guest-controlled address goes through.
//! - `shoal-abi`, `shoal-archive`: the ABI and the `--fs` archive.
//! - `thiserror`: one error enum per module; `libc`: errno and signal
//!   numbers.
#![deny(missing_docs)]

mod hypercall;
pub mod vm;
pub mod x86;

pub use hypercall::{Console, Refusal};
pub use vm::KvmError;
pub use x86::SetupError;

use hypercall::Action;
use kvm_ioctls::VcpuExit;
use shoal_abi::{FaultArgs, TenderKind};
use shoal_loader::{BootParams, Clock, GuestMemory, Image, Layout};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What to run. The same shape as `shoal_spt::RunConfig`.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The image file.
    pub image: PathBuf,
    /// Guest memory size in bytes (a multiple of 4 KiB, at most 4 GiB).
    pub mem_size: u64,
    /// A directory to pack as the read-only root file-system archive.
    pub fs_dir: Option<PathBuf>,
    /// The program's arguments (`argv[0]` first).
    pub argv: Vec<String>,
    /// The program's environment (`KEY=VALUE`).
    pub env: Vec<String>,
}

/// Why an image could not be run. Problems of the guest itself are not
/// errors: they end the run with a status ([`Outcome`]).
#[derive(Debug, thiserror::Error)]
pub enum HvtError {
    /// The image was refused.
    #[error(transparent)]
    Image(#[from] shoal_loader::ImageError),
    /// The memory layout could not be planned.
    #[error(transparent)]
    Layout(#[from] shoal_loader::LayoutError),
    /// More memory than hvt can give a guest.
    #[error("--mem {0} is too large for the hvt tender: hypercalls pass 32-bit addresses, so guest memory is at most 4G")]
    MemTooLarge(String),
    /// The `--fs` directory could not be packed.
    #[error("cannot pack the --fs directory: {0}")]
    Archive(#[from] shoal_archive::PackError),
    /// The clock calibration failed.
    #[error(transparent)]
    Tsc(#[from] shoal_loader::TscError),
    /// Guest memory could not be filled.
    #[error(transparent)]
    Boot(#[from] shoal_loader::BootError),
    /// The machine state could not be built.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// KVM failed.
    #[error(transparent)]
    Kvm(#[from] KvmError),
}

/// How long the phases of a run took, from the call of [`run_with_console`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    /// Image checks, layout and archive, before KVM is touched.
    pub prepare: Duration,
    /// Until the VM, its memory and vCPU exist and are set up.
    pub vm_ready: Duration,
    /// Until the first console byte was written, if any was.
    pub first_output: Option<Duration>,
    /// Until the guest stopped.
    pub exit: Duration,
    /// Number of VM exits handled.
    pub exits: u64,
}

/// How a guest run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The guest halted with this status (already masked to 8 bits).
    Exit(i32),
    /// The guest took a CPU exception.
    Fault {
        /// The stub's (or the guest's) report.
        report: FaultArgs,
        /// Whether the faulting instruction was `syscall`.
        syscall: bool,
    },
    /// The guest broke the hypercall protocol.
    Refused(Refusal),
    /// The vCPU stopped in a way a shoal guest never should.
    Stopped(String),
}

impl Outcome {
    /// The exit status `shoal run` reports (see the crate docs).
    pub fn status(&self) -> i32 {
        match self {
            Outcome::Exit(s) => *s,
            Outcome::Fault { syscall: true, .. } => 128 + libc::SIGSYS,
            Outcome::Fault { report, .. } => 128 + x86::vector_signal(report.vector),
            Outcome::Refused(_) => 128 + libc::SIGSYS,
            Outcome::Stopped(_) => 128 + libc::SIGKILL,
        }
    }

    /// The one-line message for stderr (without the `shoal: ` prefix), or
    /// `None` for a normal exit.
    pub fn message(&self) -> Option<String> {
        match self {
            Outcome::Exit(_) => None,
            Outcome::Fault { report: f, syscall } => {
                let mut m = format!(
                    "guest fault: {} (vector {}, error {:#x}) at rip {:#x}, rsp {:#x}, cr2 {:#x}",
                    x86::vector_name(f.vector),
                    f.vector,
                    f.error_code,
                    f.rip,
                    f.rsp,
                    f.cr2
                );
                if *syscall {
                    m.push_str(": the guest executed a `syscall` instruction; shoal images make no host system calls");
                } else if f.vector == 14 {
                    m.push_str(": ");
                    m.push_str(x86::page_fault_cause(f.error_code));
                }
                Some(m)
            }
            Outcome::Refused(r) => Some(format!("guest stopped: {r}")),
            Outcome::Stopped(s) => Some(format!("guest stopped: {s}")),
        }
    }
}

/// Runs the image described by `cfg` with the process's stdout and stderr
/// as console; returns the exit status (see the crate docs). A guest that
/// ends abnormally gets one `shoal: …` line on stderr.
pub fn run(cfg: &RunConfig) -> Result<i32, HvtError> {
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    let (outcome, _) = run_with_console(cfg, &mut Console { stdout: &mut out, stderr: &mut err })?;
    if let Some(m) = outcome.message() {
        eprintln!("shoal: {m}");
    }
    Ok(outcome.status())
}

/// What [`prepare`] produced: everything that can fail before KVM is
/// touched.
struct Prepared {
    image: Image,
    layout: Layout,
    archive: Vec<u8>,
    argv: Vec<OsString>,
    env: Vec<OsString>,
    params: BootParams,
    private: x86::Private,
}

fn prepare(cfg: &RunConfig) -> Result<Prepared, HvtError> {
    if cfg.mem_size > x86::MAX_MEM {
        return Err(HvtError::MemTooLarge(shoal_loader::format_size(cfg.mem_size)));
    }
    let image = Image::open(&cfg.image)?;
    let archive = match &cfg.fs_dir {
        Some(d) => shoal_archive::pack_dir(d)?,
        None => Vec::new(),
    };
    let argv: Vec<OsString> = cfg.argv.iter().map(OsString::from).collect();
    let env: Vec<OsString> = cfg.env.iter().map(OsString::from).collect();
    let layout = shoal_loader::plan(&image, cfg.mem_size, archive.len() as u64, &argv, &env)?;
    let regions: Vec<x86::Region> = image
        .segments()
        .iter()
        .map(|s| x86::Region {
            start: s.page_start(),
            end: s.page_end(),
            perm: if s.perms.exec {
                x86::PagePerm::UserRx
            } else if s.perms.write {
                x86::PagePerm::UserRw
            } else {
                x86::PagePerm::UserRo
            },
        })
        .collect();
    let private = x86::build(layout.mem_size, &regions, layout.image_start, layout.image_end)?;
    let hz = shoal_loader::tsc::tsc_hz()?;
    let params = BootParams::new(TenderKind::Hvt, 0, Clock::now(hz))?;
    Ok(Prepared { image, layout, archive, argv, env, params, private })
}

/// Runs the image described by `cfg`, writing the guest's console streams
/// to `console`; returns how the guest ended and how long it took. Does not
/// print anything itself.
pub fn run_with_console(cfg: &RunConfig, console: &mut Console<'_>) -> Result<(Outcome, Timings), HvtError> {
    let t0 = Instant::now();
    let mut p = prepare(cfg)?;
    let mut timings = Timings { prepare: t0.elapsed(), ..Timings::default() };

    let mut vm = vm::Vm::create(p.layout.mem_size)?;
    // SAFETY: `vm.memory` maps `mem_size` bytes for guest addresses
    // [0, mem_size) at `as_ptr()`; the view starts at guest address
    // GuestMemory::LOW (< mem_size, checked by x86::build), and lives in
    // this function only, while `vm` (which owns the mapping) is alive. The
    // mapping is anonymous memory no Rust reference points into.
    let mem = unsafe { GuestMemory::new(vm.memory.as_ptr().wrapping_add(GuestMemory::LOW as usize), p.layout.mem_size) };
    shoal_loader::load_segments(&mem, &p.image)?;
    shoal_loader::load_archive(&mem, &p.layout, &p.archive)?;
    // The clock pair as close to the first guest instruction as possible.
    p.params.clock = Clock::now(p.params.clock.tsc_hz);
    let entry = shoal_loader::write_boot_state(&mem, &p.image, &p.layout, &p.argv, &p.env, &p.params)?;
    vm::prepare(&vm, &p.private.bytes, &entry)?;
    timings.vm_ready = t0.elapsed();

    let mut wrote = false;
    let outcome = loop {
        let exit = match vm.vcpu.run() {
            Ok(e) => e,
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => continue,
            Err(e) => break Outcome::Stopped(format!("KVM_RUN failed: {e}")),
        };
        timings.exits += 1;
        let action = match exit {
            VcpuExit::IoOut(port, data) => {
                let a = hypercall::handle_out(port, data, &mem, &vm.memory, console, &mut wrote);
                if wrote && timings.first_output.is_none() {
                    timings.first_output = Some(t0.elapsed());
                }
                a
            }
            VcpuExit::IoIn(port, _) => Action::Refused(Refusal::PortRead(port)),
            VcpuExit::Hlt => break Outcome::Stopped("the vCPU executed `hlt`".into()),
            VcpuExit::Shutdown => {
                break Outcome::Stopped("the vCPU shut down (triple fault: an exception while reporting an exception)".into())
            }
            VcpuExit::MmioRead(addr, _) | VcpuExit::MmioWrite(addr, _) => {
                break Outcome::Stopped(format!("the guest accessed {addr:#x}, outside its memory"))
            }
            VcpuExit::InternalError => break Outcome::Stopped("KVM reported an internal error".into()),
            VcpuExit::FailEntry(reason, _) => {
                break Outcome::Stopped(format!("KVM could not enter the guest (hardware reason {reason:#x})"))
            }
            other => break Outcome::Stopped(format!("unexpected VM exit {other:?}")),
        };
        match action {
            Action::Continue => {}
            Action::Halt(status) => break Outcome::Exit((status & 0xff) as i32),
            Action::Fault(report) => {
                let syscall = report.vector == 6 && {
                    let mut insn = [0u8; 2];
                    mem.read(shoal_loader::GuestAddr(report.rip), &mut insn).is_ok() && insn == [0x0f, 0x05]
                };
                break Outcome::Fault { report, syscall };
            }
            Action::Refused(r) => break Outcome::Refused(r),
        }
    };
    timings.exit = t0.elapsed();
    Ok((outcome, timings))
}
