//! Creating the KVM virtual machine: guest memory, one vCPU, its CPUID,
//! control registers, XCR0, TSC and the CPL-3 entry state.

use crate::x86;
use kvm_bindings::{kvm_cpuid_entry2, kvm_segment, kvm_userspace_memory_region, kvm_xcrs, CpuId, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use shoal_loader::EntryState;
use vm_memory::{Bytes, GuestAddress, GuestRegionMmap, MmapRegion};
use vmm_sys_util::errno;

/// Why the virtual machine could not be created.
#[derive(Debug, thiserror::Error)]
pub enum KvmError {
    /// `/dev/kvm` cannot be opened (missing, no permission, no KVM).
    #[error("/dev/kvm is not usable ({0}), so the hvt tender cannot run here; use --tender spt")]
    Unavailable(errno::Error),
    /// The kernel's KVM API is too old or lacks a capability hvt needs.
    #[error("this host's KVM lacks {0}, which the hvt tender needs")]
    MissingCapability(&'static str),
    /// The host CPU lacks an instruction set the guest's kernel uses at
    /// CPL 3 (see [`check_host_cpu`]).
    #[error("this host's CPU lacks {0}, which the hvt guest's kernel uses; use --tender spt")]
    MissingCpuFeature(&'static str),
    /// A KVM call failed.
    #[error("KVM refused to {what}: {source}")]
    Ioctl {
        /// What the VMM was doing.
        what: &'static str,
        /// What KVM said.
        source: errno::Error,
    },
    /// The guest memory mapping could not be created.
    #[error("cannot map {size:#x} bytes of guest memory: {reason}")]
    Memory {
        /// The requested size.
        size: u64,
        /// What went wrong.
        reason: String,
    },
}

fn ioctl_err(what: &'static str) -> impl Fn(errno::Error) -> KvmError {
    move |source| KvmError::Ioctl { what, source }
}

/// Checks that `/dev/kvm` can be opened and speaks the stable API.
pub fn check_kvm() -> Result<(), KvmError> {
    let kvm = Kvm::new().map_err(KvmError::Unavailable)?;
    if kvm.get_api_version() != 12 {
        return Err(KvmError::MissingCapability("the stable KVM API (version 12)"));
    }
    Ok(())
}

/// Opens `/dev/kvm` and checks the API version and capabilities hvt needs.
fn open_kvm() -> Result<Kvm, KvmError> {
    let kvm = Kvm::new().map_err(KvmError::Unavailable)?;
    if kvm.get_api_version() != 12 {
        return Err(KvmError::MissingCapability("the stable KVM API (version 12)"));
    }
    for (cap, name) in
        [(kvm_ioctls::Cap::UserMemory, "user memory regions"), (kvm_ioctls::Cap::ExtCpuid, "KVM_SET_CPUID2"), (kvm_ioctls::Cap::Xcrs, "KVM_SET_XCRS")]
    {
        if !kvm.check_extension(cap) {
            return Err(KvmError::MissingCapability(name));
        }
    }
    Ok(kvm)
}

/// A VM with one vCPU and no memory yet ([`Vm::create_empty`]).
pub struct Empty {
    /// The vCPU (CPUID set, nothing else).
    pub vcpu: VcpuFd,
    /// The VM.
    pub vm: VmFd,
    /// `/dev/kvm`.
    pub kvm: Kvm,
}

impl Empty {
    /// Registers `memory` (at guest address 0) and `tables` (the
    /// page-table pool) with this VM, as [`Vm::create_with`] does.
    ///
    /// # Safety
    /// Both mappings must stay mapped, at the same addresses, for as long
    /// as the VM and its vCPU exist.
    pub unsafe fn register(&self, memory: &GuestRegionMmap<()>, tables: &GuestRegionMmap<()>) -> Result<(), KvmError> {
        use vm_memory::GuestMemoryRegion;
        let region = kvm_userspace_memory_region { slot: 0, flags: 0, guest_phys_addr: 0, memory_size: memory.len(), userspace_addr: memory.as_ptr() as u64 };
        // SAFETY: the caller keeps `memory` mapped for the VM's life.
        unsafe { self.vm.set_user_memory_region(region) }.map_err(ioctl_err("register guest memory"))?;
        let region = kvm_userspace_memory_region {
            slot: 1,
            flags: 0,
            guest_phys_addr: crate::protect::POOL_ADDR,
            memory_size: tables.len(),
            userspace_addr: tables.as_ptr() as u64,
        };
        // SAFETY: as above, for `tables`.
        unsafe { self.vm.set_user_memory_region(region) }.map_err(ioctl_err("register the page-table pool"))
    }
}

/// A created VM: its memory and its one vCPU, ready to run.
pub struct Vm {
    // Field order matters for drop order: the vCPU and VM file descriptors
    // are closed before the memory they reference is unmapped.
    /// The vCPU.
    pub vcpu: VcpuFd,
    pub(crate) _vm: VmFd,
    pub(crate) _kvm: Kvm,
    /// Guest memory: one anonymous, lazily backed mapping at GPA 0.
    pub memory: GuestRegionMmap<()>,
    /// The page-table pool (`crate::protect`): lazily backed, at
    /// `protect::POOL_ADDR`, mapped by no guest page table.
    pub tables: GuestRegionMmap<()>,
}

impl Vm {
    /// Opens `/dev/kvm` and creates a VM with `mem_size` bytes of memory at
    /// guest-physical address 0 and one vCPU (not yet set up).
    pub fn create(mem_size: u64) -> Result<Vm, KvmError> {
        Vm::create_with(mem_size, &mut |_| Ok(()))
    }

    /// Like [`Vm::create`], but calls `before_register` with the fresh
    /// guest memory mapping before it is registered with KVM (memory mode
    /// `pool` maps pool files over parts of it there).
    pub fn create_with(mem_size: u64, before_register: &mut dyn FnMut(&GuestRegionMmap<()>) -> Result<(), KvmError>) -> Result<Vm, KvmError> {
        let kvm = open_kvm()?;
        let vm = kvm.create_vm().map_err(ioctl_err("create a VM"))?;
        let size = usize::try_from(mem_size).map_err(|_| KvmError::Memory { size: mem_size, reason: "too large for this host".into() })?;
        let mapping = MmapRegion::<()>::new(size).map_err(|e| KvmError::Memory { size: mem_size, reason: e.to_string() })?;
        let memory = GuestRegionMmap::new(mapping, GuestAddress(0)).ok_or_else(|| KvmError::Memory { size: mem_size, reason: "the range overflows".into() })?;
        before_register(&memory)?;
        let region = kvm_userspace_memory_region { slot: 0, flags: 0, guest_phys_addr: 0, memory_size: mem_size, userspace_addr: memory.as_ptr() as u64 };
        // SAFETY: the region describes `memory`, a mapping of exactly
        // `mem_size` bytes owned by the returned `Vm`, which keeps it mapped
        // for as long as the VM (and its vCPU) exist: `memory` is declared
        // after `_vm` and `vcpu`, so it is dropped after them.
        unsafe { vm.set_user_memory_region(region) }.map_err(ioctl_err("register guest memory"))?;
        let pool = crate::protect::pool_size(mem_size);
        let tables = MmapRegion::<()>::new(pool as usize)
            .ok()
            .and_then(|m| GuestRegionMmap::new(m, GuestAddress(crate::protect::POOL_ADDR)))
            .ok_or_else(|| KvmError::Memory { size: pool, reason: "cannot map the page-table pool".into() })?;
        let region = kvm_userspace_memory_region {
            slot: 1,
            flags: 0,
            guest_phys_addr: crate::protect::POOL_ADDR,
            memory_size: pool,
            userspace_addr: tables.as_ptr() as u64,
        };
        // SAFETY: as above, for `tables`, which is declared after `_vm` and
        // `vcpu` too.
        unsafe { vm.set_user_memory_region(region) }.map_err(ioctl_err("register the page-table pool"))?;
        let vcpu = vm.create_vcpu(0).map_err(ioctl_err("create a vCPU"))?;
        let cpuid = guest_cpuid(&kvm)?;
        vcpu.set_cpuid2(&cpuid).map_err(ioctl_err("set the guest CPUID"))?;
        Ok(Vm { vcpu, _vm: vm, _kvm: kvm, memory, tables })
    }

    /// A VM and its vCPU (with the guest CPUID) made ahead, with no memory
    /// and no state yet: what a copy of a template takes (`crate::template`),
    /// so that KVM's VM creation is not on a request's path.
    pub fn create_empty() -> Result<Empty, KvmError> {
        let kvm = open_kvm()?;
        let vm = kvm.create_vm().map_err(ioctl_err("create a VM"))?;
        let vcpu = vm.create_vcpu(0).map_err(ioctl_err("create a vCPU"))?;
        let cpuid = guest_cpuid(&kvm)?;
        vcpu.set_cpuid2(&cpuid).map_err(ioctl_err("set the guest CPUID"))?;
        Ok(Empty { vcpu, vm, kvm })
    }

    /// Makes KVM forget every translation it built from the guest's page
    /// tables, after the VMM changed them (`crate::protect`). On a host
    /// that gives KVM no EPT (nested, as here) KVM shadows the guest's page
    /// tables and does not see the VMM's writes to them; deleting a memory
    /// slot makes it drop all shadow pages (KVM's default "zap all on slot
    /// deletion"), so the page-table pool's slot is deleted and added
    /// again, unchanged.
    pub fn forget_translations(&self) -> Result<(), KvmError> {
        let mut region = kvm_userspace_memory_region {
            slot: 1,
            flags: 0,
            guest_phys_addr: crate::protect::POOL_ADDR,
            memory_size: 0,
            userspace_addr: self.tables.as_ptr() as u64,
        };
        // SAFETY: deleting slot 1, then registering it again with the same
        // mapping, which `self` keeps alive as before.
        unsafe { self._vm.set_user_memory_region(region) }.map_err(ioctl_err("delete the page-table pool slot"))?;
        region.memory_size = vm_memory::GuestMemoryRegion::len(&self.tables);
        // SAFETY: as above.
        unsafe { self._vm.set_user_memory_region(region) }.map_err(ioctl_err("register the page-table pool"))
    }

    /// Makes KVM forget its translations of the guest-physical pages
    /// `[lo, hi)` only, after the VMM took access to them away
    /// (`crate::protect`). Changing the protection of the VMM's own
    /// mapping of those pages runs the host's MMU notifier, for which KVM
    /// drops every translation of them (its shadow entries included:
    /// whatever guest address maps them, at whatever level), as it does
    /// for memory the host reclaims; the guest's next access to them
    /// faults and KVM reads the new entries of its tables. Dropping the
    /// whole shadow ([`Vm::forget_translations`], a memory-slot deletion)
    /// cost 5 to 50 ms here, nested, per call: 1.7 s of `node -e 0`'s 2.9 s.
    /// The range must lie in guest memory; it is mapped read-only for the
    /// time of two `mprotect` calls, while no vCPU runs and nothing else
    /// in this process touches guest memory (the VMM is one thread).
    pub fn forget_pages(&self, lo: u64, hi: u64) -> Result<(), KvmError> {
        let len = vm_memory::GuestMemoryRegion::len(&self.memory);
        let bad = |reason: &str| KvmError::Memory { size: hi.saturating_sub(lo), reason: reason.into() };
        if lo >= hi || hi > len || !lo.is_multiple_of(4096) || !hi.is_multiple_of(4096) {
            return Err(bad("not a page-aligned range of guest memory"));
        }
        let (Ok(off), Ok(n)) = (usize::try_from(lo), usize::try_from(hi - lo)) else { return Err(bad("too large for this host")) };
        // SAFETY: [off, off + n) lies inside the guest memory mapping
        // (checked above), which is private anonymous read-write memory
        // that Rust holds no reference into across a VM exit's handling;
        // it is made read-only and then read-write again, as it was, with
        // no access to it in between.
        let r = unsafe {
            let at = self.memory.as_ptr().add(off).cast();
            if libc::mprotect(at, n, libc::PROT_READ) != 0 {
                -1
            } else {
                libc::mprotect(at, n, libc::PROT_READ | libc::PROT_WRITE)
            }
        };
        if r != 0 {
            return Err(bad(&format!("cannot change its protection to drop KVM's translations: {}", std::io::Error::last_os_error())));
        }
        Ok(())
    }

    /// Copies the tender-private structures to guest address 0.
    pub fn write_private(&self, bytes: &[u8]) -> Result<(), KvmError> {
        // Called once, on the fresh (all-zero) mapping: pages of the
        // buffer that are all zero (page-table room the guest's memory
        // size does not need) are left untouched, so they cost the host
        // nothing (16 pages are written for a 32 MiB guest otherwise).
        let page = shoal_abi::PAGE_SIZE as usize;
        for (i, chunk) in bytes.chunks(page).enumerate() {
            if chunk.iter().all(|&b| b == 0) {
                continue;
            }
            self.memory
                .write_slice(chunk, vm_memory::MemoryRegionAddress((i * page) as u64))
                .map_err(|e| KvmError::Memory { size: bytes.len() as u64, reason: e.to_string() })?;
        }
        Ok(())
    }

    /// Sets the vCPU's registers so that it starts at CPL 3 at `entry`.
    pub fn set_entry_state(&self, entry: &EntryState) -> Result<(), KvmError> {
        let mut sregs = self.vcpu.get_sregs().map_err(ioctl_err("read the special registers"))?;
        let (code, data) = user_segments();
        sregs.cs = code;
        sregs.ds = data;
        sregs.es = data;
        sregs.fs = data;
        sregs.gs = data;
        sregs.ss = data;
        sregs.tr = kvm_segment {
            base: x86::TSS_ADDR,
            limit: x86::TSS_LIMIT,
            selector: x86::TSS_SEL,
            type_: 0xb, // busy 64-bit TSS
            present: 1,
            dpl: 0,
            db: 0,
            s: 0,
            l: 0,
            g: 0,
            avl: 0,
            unusable: 0,
            padding: 0,
        };
        sregs.ldt = kvm_segment { selector: 0, type_: 0x2, present: 1, limit: 0xffff, s: 0, dpl: 0, db: 0, l: 0, g: 0, unusable: 1, ..sregs.tr };
        sregs.ldt.base = 0;
        sregs.gdt.base = x86::GDT_ADDR;
        sregs.gdt.limit = x86::GDT_LIMIT;
        sregs.idt.base = x86::IDT_ADDR;
        sregs.idt.limit = x86::IDT_LIMIT;
        sregs.cr0 = x86::CR0;
        sregs.cr3 = x86::PML4_ADDR;
        sregs.cr4 = x86::CR4;
        sregs.efer = x86::EFER;
        self.vcpu.set_sregs(&sregs).map_err(ioctl_err("set the special registers"))?;

        let mut xcrs = kvm_xcrs { nr_xcrs: 1, ..Default::default() };
        xcrs.xcrs[0].xcr = 0;
        xcrs.xcrs[0].value = xcr0();
        self.vcpu.set_xcrs(&xcrs).map_err(ioctl_err("set XCR0"))?;

        let mut fpu = self.vcpu.get_fpu().map_err(ioctl_err("read the FPU state"))?;
        fpu.fcw = 0x37f;
        fpu.mxcsr = 0x1f80;
        self.vcpu.set_fpu(&fpu).map_err(ioctl_err("set the FPU state"))?;

        // `syscall` must not reach any code: EFER.SCE is clear, so hardware
        // raises #UD; this nested KVM ignores SCE and jumps to LSTAR, so
        // LSTAR points at a page that is not present (see x86::SYSCALL_TRAP).
        let msrs = kvm_bindings::Msrs::from_entries(&[
            kvm_bindings::kvm_msr_entry { index: 0xc000_0082, data: x86::SYSCALL_TRAP, ..Default::default() }, // LSTAR
            kvm_bindings::kvm_msr_entry { index: 0xc000_0083, data: x86::SYSCALL_TRAP, ..Default::default() }, // CSTAR
            kvm_bindings::kvm_msr_entry { index: 0xc000_0081, data: 0, ..Default::default() },                 // STAR
        ])
        .map_err(|_| KvmError::MissingCapability("MSR lists"))?;
        let n = self.vcpu.set_msrs(&msrs).map_err(ioctl_err("set the syscall MSRs"))?;
        if n != 3 {
            return Err(KvmError::MissingCapability("writable syscall MSRs (LSTAR, CSTAR, STAR)"));
        }

        let regs = kvm_bindings::kvm_regs { rip: entry.rip, rsp: entry.rsp, rdi: entry.rdi, rflags: x86::RFLAGS, ..Default::default() };
        self.vcpu.set_regs(&regs).map_err(ioctl_err("set the registers"))?;
        Ok(())
    }

    /// Points `syscall` at `entry`, the kernel's system-call entry of an
    /// instance of a Linux executable (the trap path of the `syscall`
    /// instructions its rewriting left). This nested paravirtual KVM
    /// ignores EFER.SCE and continues at LSTAR at CPL 3 with rcx = the
    /// address after the instruction and r11 = the flags, exactly what
    /// the entry expects from a rewritten site: no exit, no emulated
    /// CPL-0 code. EFER.SCE stays clear, so on hardware virtualization a
    /// `syscall` still raises #UD and is reported as a guest fault.
    pub fn exec_syscall_entry(&self, entry: u64) -> Result<(), KvmError> {
        let msrs = kvm_bindings::Msrs::from_entries(&[
            kvm_bindings::kvm_msr_entry { index: 0xc000_0082, data: entry, ..Default::default() }, // LSTAR
        ])
        .map_err(|_| KvmError::MissingCapability("MSR lists"))?;
        let n = self.vcpu.set_msrs(&msrs).map_err(ioctl_err("set the syscall MSRs"))?;
        if n != 1 {
            return Err(KvmError::MissingCapability("a writable LSTAR"));
        }
        Ok(())
    }

    /// Resumes the vCPU at CPL 3 at `rip` with stack `rsp` and the first
    /// three C arguments `args` (rdi, rsi, rdx), keeping the FS and GS
    /// bases and every other register: how a fault is handed back to the
    /// guest's kernel (`crate::hand_back`).
    pub fn resume_at_cpl3(&self, rip: u64, rsp: u64, args: [u64; 3]) -> Result<(), KvmError> {
        let mut sregs = self.vcpu.get_sregs().map_err(ioctl_err("read the special registers"))?;
        (sregs.cs, sregs.ss) = user_segments();
        self.vcpu.set_sregs(&sregs).map_err(ioctl_err("set the special registers"))?;
        let mut regs = self.vcpu.get_regs().map_err(ioctl_err("read the registers"))?;
        regs.rip = rip;
        regs.rsp = rsp;
        regs.rdi = args[0];
        regs.rsi = args[1];
        regs.rdx = args[2];
        regs.rflags = x86::RFLAGS;
        self.vcpu.set_regs(&regs).map_err(ioctl_err("set the registers"))?;
        Ok(())
    }

    /// Makes the guest's TSC read like the host's, so that the calibration
    /// pair in the boot info (host TSC, host realtime) holds in the guest.
    pub fn sync_tsc(&self) -> Result<(), KvmError> {
        sync_tsc(&self.vcpu)
    }
}

/// [`Vm::sync_tsc`] for any vCPU (a template's copy's too).
pub fn sync_tsc(vcpu: &VcpuFd) -> Result<(), KvmError> {
    {
        // KVM_VCPU_TSC_CTRL / KVM_VCPU_TSC_OFFSET (Linux 5.16+): offset 0
        // makes the guest TSC equal to the TSC this process reads.
        vmm_sys_util::ioctl_iow_nr!(KVM_SET_DEVICE_ATTR, kvm_bindings::KVMIO, 0xe1, kvm_bindings::kvm_device_attr);
        let offset: u64 = 0;
        let attr = kvm_bindings::kvm_device_attr {
            flags: 0,
            group: kvm_bindings::KVM_VCPU_TSC_CTRL,
            attr: u64::from(kvm_bindings::KVM_VCPU_TSC_OFFSET),
            addr: &offset as *const u64 as u64,
        };
        // SAFETY: KVM_SET_DEVICE_ATTR on a vCPU fd reads one kvm_device_attr
        // and, for this group, one u64 at `addr`; both live across the call.
        let ret = unsafe { vmm_sys_util::ioctl::ioctl_with_ref(vcpu, KVM_SET_DEVICE_ATTR(), &attr) };
        if ret == 0 {
            return Ok(());
        }
        // Older KVM: write IA32_TSC with the host's value (off by the
        // ioctl's latency, a few microseconds).
        let msrs = kvm_bindings::Msrs::from_entries(&[kvm_bindings::kvm_msr_entry { index: 0x10, data: shoal_loader::tsc::rdtsc(), ..Default::default() }])
            .map_err(|_| KvmError::MissingCapability("a way to set the guest TSC"))?;
        match vcpu.set_msrs(&msrs) {
            Ok(1) => Ok(()),
            Ok(_) => Err(KvmError::MissingCapability("a writable IA32_TSC")),
            Err(e) => Err(KvmError::Ioctl { what: "set the guest TSC", source: e }),
        }
    }
}

/// XCR0 for the guest: x87 and SSE, plus AVX when the host enables it.
pub fn xcr0() -> u64 {
    guest_xcr0(host_xcr0())
}

/// The guest's XCR0 for a host XCR0 of `host`.
fn guest_xcr0(host: u64) -> u64 {
    3 | (host & 4)
}

/// The host's XCR0 (x87 and SSE only where the host OS did not enable
/// XSAVE).
pub fn host_xcr0() -> u64 {
    let leaf1 = core::arch::x86_64::__cpuid(1);
    let osxsave = leaf1.ecx & (1 << 27) != 0;
    if !osxsave {
        return 3;
    }
    // SAFETY: the host OS enabled XSAVE (CPUID.1:ECX.OSXSAVE), so xgetbv
    // with ECX = 0 is defined.
    unsafe { core::arch::x86_64::_xgetbv(0) }
}

/// The host CPU features the guest's kernel needs at CPL 3: FSGSBASE (it
/// switches thread pointers with `wrfsbase`, and CR4.FSGSBASE is set) and
/// XSAVE enabled by the host OS (CR4.OSXSAVE and XCR0 are set, and the
/// preemption entry saves with `xsave`). Every x86-64 CPU of the last ten
/// years has both; a host without them gets one sentence instead of a
/// refused `KVM_SET_SREGS` or a guest fault later.
pub fn check_host_cpu() -> Result<(), KvmError> {
    let h1 = core::arch::x86_64::__cpuid(1);
    if h1.ecx & (1 << 26) == 0 || h1.ecx & (1 << 27) == 0 {
        return Err(KvmError::MissingCpuFeature("XSAVE enabled by the host OS (CPUID.1:ECX.XSAVE and OSXSAVE)"));
    }
    let max = core::arch::x86_64::__cpuid(0).eax;
    if max < 7 || core::arch::x86_64::__cpuid_count(7, 0).ebx & 1 == 0 {
        return Err(KvmError::MissingCpuFeature("FSGSBASE (CPUID.7:EBX bit 0)"));
    }
    Ok(())
}

/// Name of the per-boot cache of the guest CPUID in the runtime directory.
const CPUID_CACHE: &str = "kvm-cpuid";

/// The guest CPUID ([`adjust_cpuid`] of what KVM supports), from a cache
/// kept per host boot and KVM module load in shoal's private runtime
/// directory (beside the TSC calibration, with the same checks), or asked
/// of KVM and cached. `KVM_GET_SUPPORTED_CPUID` runs the CPUID instruction
/// dozens of times in the host kernel, and on a nested host each one is a
/// VM exit (4-6 µs here): about 0.2 ms of every hvt start. The answer
/// cannot change while the KVM module stays loaded, which the key says
/// (boot id, and the inode of `/sys/module/kvm`, new at every load).
/// Whoever can write the cache (this user, root) could also run the
/// tender under a debugger; a file that does not parse is ignored.
fn guest_cpuid(kvm: &Kvm) -> Result<CpuId, KvmError> {
    let dir = shoal_loader::hostdir::runtime_dir().ok();
    let key = cpuid_cache_key();
    if let (Some(dir), Some(key)) = (&dir, &key) {
        let cached = shoal_loader::hostdir::read_owned(&dir.join(CPUID_CACHE), CPUID_CACHE_MAX).ok();
        if let Some(entries) = cached.as_deref().and_then(|b| decode_cpuid(b, key)) {
            if let Ok(c) = CpuId::from_entries(&entries) {
                return Ok(c);
            }
        }
    }
    // Not cached yet: the first start on this boot checks the host CPU
    // (a failed check caches nothing, so every start checks again).
    check_host_cpu()?;
    let mut cpuid = kvm.get_supported_cpuid(KVM_MAX_CPUID_ENTRIES).map_err(ioctl_err("list the supported CPUID"))?;
    adjust_cpuid(&mut cpuid);
    if let (Some(dir), Some(key)) = (&dir, &key) {
        // Best effort: a failure only means asking KVM again next time.
        let _ = shoal_loader::hostdir::write_atomic(dir, CPUID_CACHE, &encode_cpuid(key, cpuid.as_slice()), 0o600);
    }
    Ok(cpuid)
}

/// Largest cache file read: the key line and KVM_MAX_CPUID_ENTRIES entries.
const CPUID_CACHE_MAX: u64 = 256 + 40 * KVM_MAX_CPUID_ENTRIES as u64;

/// `BOOT_ID KVM_MODULE_INODE ADJUST_VERSION`, or `None` when either is unknown (then
/// nothing is cached).
fn cpuid_cache_key() -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let boot = shoal_loader::tsc::boot_id()?;
    let module = std::fs::metadata("/sys/module/kvm").ok()?.ino();
    Some(format!("{boot} {module} {CPUID_ADJUST_VERSION}"))
}

/// What [`adjust_cpuid`] does, as part of the cache key: a new version of
/// it must not read an older one's answer (version 2 copies the XSAVE
/// sub-leaf of every component the host enables).
const CPUID_ADJUST_VERSION: &str = "adjust-2";

/// The cache file: the key, a newline, then each entry as ten
/// little-endian 32-bit words (function, index, flags, eax, ebx, ecx, edx,
/// padding).
fn encode_cpuid(key: &str, entries: &[kvm_cpuid_entry2]) -> Vec<u8> {
    let mut out = format!("{key}\n").into_bytes();
    for e in entries {
        for w in [e.function, e.index, e.flags, e.eax, e.ebx, e.ecx, e.edx, e.padding[0], e.padding[1], e.padding[2]] {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    out
}

/// The entries of a cache file written for `key`; `None` for another key,
/// a truncated file, no entries or too many.
fn decode_cpuid(bytes: &[u8], key: &str) -> Option<Vec<kvm_cpuid_entry2>> {
    let nl = bytes.iter().position(|&b| b == b'\n')?;
    if &bytes[..nl] != key.as_bytes() {
        return None;
    }
    let body = &bytes[nl + 1..];
    if body.is_empty() || !body.len().is_multiple_of(40) || body.len() / 40 > KVM_MAX_CPUID_ENTRIES {
        return None;
    }
    let word = |c: &[u8], i: usize| u32::from_le_bytes([c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]]);
    Some(
        body.chunks_exact(40)
            .map(|c| kvm_cpuid_entry2 {
                function: word(c, 0),
                index: word(c, 1),
                flags: word(c, 2),
                eax: word(c, 3),
                ebx: word(c, 4),
                ecx: word(c, 5),
                edx: word(c, 6),
                padding: [word(c, 7), word(c, 8), word(c, 9)],
            })
            .collect(),
    )
}

/// The guest CPUID: what KVM supports, plus the features the host really
/// has that this nested KVM does not advertise but does run natively at
/// CPL 3 (docs/design.md "Host facts"): XSAVE, AVX, FSGSBASE, AVX2, and the XSAVE leaf 0xd.
/// PKU is left out on purpose: this KVM does not enforce protection keys.
fn adjust_cpuid(cpuid: &mut CpuId) {
    let host = |leaf: u32, sub: u32| core::arch::x86_64::__cpuid_count(leaf, sub);
    let h1 = host(1, 0);
    let h7 = host(7, 0);
    // Read once: what the guest is meant to get derives from it.
    let host_xcr0 = host_xcr0();
    let mask = guest_xcr0(host_xcr0);
    let avx_on = mask & 4 != 0;
    for e in cpuid.as_mut_slice() {
        match (e.function, e.index) {
            (1, _) => {
                // XSAVE (26); AVX (28) only when the host OS enabled it.
                e.ecx |= h1.ecx & (1 << 26);
                if avx_on {
                    e.ecx |= h1.ecx & (1 << 28);
                }
            }
            (7, 0) => {
                // FSGSBASE (0), AVX2 (5, needs AVX).
                e.ebx |= h7.ebx & 1;
                if avx_on {
                    e.ebx |= h7.ebx & (1 << 5);
                }
                // No PKU (ecx bit 3): keys are not enforced here.
                e.ecx &= !(1 << 3);
            }
            _ => {}
        }
    }
    // The XSAVE leaf, from the host. Sub-leaf 0 announces the XCR0 bits
    // the guest is meant to get; but on some nested KVMs (an AMD host with
    // AVX-512) the XCR0 set below is not applied and guest code runs with
    // the host's, so every component the host enables gets its sub-leaf
    // (size and offset): the guest kernel sizes its FPU save from the XCR0
    // it reads (`shoal_plat::xsave`), and needs them for that.
    let mut extra: Vec<kvm_cpuid_entry2> = Vec::new();
    let flags = kvm_bindings::KVM_CPUID_FLAG_SIGNIFCANT_INDEX;
    if h1.ecx & (1 << 26) != 0 {
        let d0 = host(0xd, 0);
        let d0 = kvm_cpuid_entry2 { function: 0xd, index: 0, flags, eax: d0.eax & mask as u32, ebx: d0.ebx, ecx: d0.ecx, edx: 0, padding: [0; 3] };
        let d1 = host(0xd, 1);
        // Only XSAVEOPT/XSAVEC/XGETBV1 (bits 0-2) of eax; no XSS features.
        let d1 = kvm_cpuid_entry2 { function: 0xd, index: 1, flags, eax: d1.eax & 0x7, ebx: 0, ecx: 0, edx: 0, padding: [0; 3] };
        let mut wanted = vec![d0, d1];
        for i in 2..63u32 {
            if host_xcr0 & (1 << i) != 0 {
                let d = host(0xd, i);
                // eax: size, ebx: offset; ecx bit 1 (64-byte alignment in
                // the compacted form) only; edx reserved.
                wanted.push(kvm_cpuid_entry2 { function: 0xd, index: i, flags, eax: d.eax, ebx: d.ebx, ecx: d.ecx & 2, edx: 0, padding: [0; 3] });
            }
        }
        for w in wanted {
            match cpuid.as_mut_slice().iter_mut().find(|e| e.function == 0xd && e.index == w.index) {
                Some(e) => *e = w,
                None => extra.push(w),
            }
        }
    }
    for e in extra {
        // A full list (KVM_MAX_CPUID_ENTRIES) just keeps KVM's leaves.
        let _ = cpuid.push(e);
    }
    // Leaf 0 must announce leaf 0xd if it is to be read.
    for e in cpuid.as_mut_slice() {
        if e.function == 0 && e.eax < 0xd {
            e.eax = 0xd;
        }
    }
}

/// Calls the set-up steps in order on a created VM.
pub fn prepare(vm: &Vm, private: &[u8], entry: &EntryState) -> Result<(), KvmError> {
    vm.write_private(private)?;
    vm.set_entry_state(entry)?;
    vm.sync_tsc()?;
    Ok(())
}

/// The flat CPL-3 segments the guest runs in: 64-bit code (`USER_CS`) and
/// data (`USER_DS`), base 0, limit 4 GiB, DPL 3 — at boot and whenever the
/// VMM sends the vCPU back to guest code.
fn user_segments() -> (kvm_segment, kvm_segment) {
    let code = kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector: x86::USER_CS,
        type_: 0xb, // execute/read, accessed
        present: 1,
        dpl: 3,
        db: 0,
        s: 1,
        l: 1,
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    };
    (code, kvm_segment { selector: x86::USER_DS, type_: 0x3, db: 1, l: 0, ..code })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_kvm_is_one_sentence() {
        let e = KvmError::Unavailable(errno::Error::new(libc::ENOENT));
        let m = e.to_string();
        assert!(m.starts_with("/dev/kvm is not usable ("), "{m}");
        assert!(m.contains("--tender spt") && !m.contains('\n'), "{m}");
    }

    #[test]
    fn the_cpuid_cache_reads_back_what_was_written_for_its_key_only() {
        let e = |function, index, eax| kvm_cpuid_entry2 { function, index, flags: 1, eax, ebx: 2, ecx: 3, edx: 4, padding: [0; 3] };
        let entries = [e(0, 0, 0xd), e(7, 0, 0x1234_5678), e(0xd, 1, u32::MAX)];
        let bytes = encode_cpuid("boot 42", &entries);
        let back = decode_cpuid(&bytes, "boot 42").unwrap();
        assert_eq!(back.len(), 3);
        for (a, b) in back.iter().zip(&entries) {
            assert_eq!((a.function, a.index, a.flags, a.eax, a.ebx, a.ecx, a.edx), (b.function, b.index, b.flags, b.eax, b.ebx, b.ecx, b.edx));
        }
        // Another boot or module load, a truncated file, no entries: ignored.
        assert!(decode_cpuid(&bytes, "boot 43").is_none());
        assert!(decode_cpuid(&bytes[..bytes.len() - 1], "boot 42").is_none());
        assert!(decode_cpuid(b"boot 42\n", "boot 42").is_none());
        assert!(decode_cpuid(b"no newline", "boot 42").is_none());
        let too_many = vec![e(1, 0, 0); KVM_MAX_CPUID_ENTRIES + 1];
        assert!(decode_cpuid(&encode_cpuid("k", &too_many), "k").is_none());
    }

    /// Every host these tests run on has what the guest needs (the check
    /// exists for hosts that do not), and the message is one sentence.
    #[test]
    fn this_host_cpu_passes_and_a_missing_feature_is_one_sentence() {
        check_host_cpu().unwrap();
        let m = KvmError::MissingCpuFeature("FSGSBASE (CPUID.7:EBX bit 0)").to_string();
        assert!(m.contains("FSGSBASE") && m.contains("--tender spt") && !m.contains('\n'), "{m}");
    }

    /// The guest sees the size and offset of every XSAVE component the host
    /// enables, beyond the XCR0 the VMM sets: on hosts where guest code
    /// runs with the host's XCR0, the guest kernel sizes its FPU save from
    /// these (`shoal_plat::xsave`).
    #[test]
    fn the_guest_cpuid_describes_every_component_the_host_enables() {
        let e = |function, index| kvm_cpuid_entry2 { function, index, ..Default::default() };
        let mut cpuid = CpuId::from_entries(&[e(0, 0), e(1, 0), e(7, 0)]).unwrap();
        adjust_cpuid(&mut cpuid);
        let host = host_xcr0();
        for i in 2..63u32 {
            if host & (1 << i) == 0 {
                continue;
            }
            let g = cpuid.as_slice().iter().find(|x| x.function == 0xd && x.index == i);
            let h = core::arch::x86_64::__cpuid_count(0xd, i);
            let g = g.unwrap_or_else(|| panic!("no sub-leaf {i} for host XCR0 {host:#x}"));
            assert_eq!((g.eax, g.ebx), (h.eax, h.ebx), "sub-leaf {i}");
        }
        let d0 = cpuid.as_slice().iter().find(|x| x.function == 0xd && x.index == 0).unwrap();
        assert_eq!(d0.ecx, core::arch::x86_64::__cpuid_count(0xd, 0).ecx, "the maximum size stands in for undescribed components");
        assert!(cpuid.as_slice().iter().any(|x| x.function == 0 && x.eax >= 0xd));
    }

    #[test]
    fn xcr0_has_x87_and_sse() {
        assert_eq!(xcr0() & 3, 3);
        assert_eq!(xcr0() & !7, 0);
    }
}
