//! How big the FPU/SSE/AVX state save must be, computed from what the CPU
//! really runs with.
//!
//! The preemption entry (`shoal_syscall::preempt`) saves a thread's
//! extended state with `xsave` and every component XCR0 enables. The area
//! must hold exactly those components in the standard (non-compacted)
//! format. CPUID leaf 0xD sub-leaf 0 EBX is meant to give that size, but it
//! cannot be trusted everywhere: on the nested paravirtual KVM of some AMD
//! hosts, the VMM's XCR0 (x87, SSE, AVX) is not applied and guest code runs
//! with the host's XCR0 (0xe7: AVX-512's opmask and ZMM state as well), so
//! EBX says 832 while `xsave` writes 2,432 bytes. [`save_area`] therefore
//! reads XCR0 itself (`xgetbv`) and adds up the offset and size of every
//! enabled component from its own sub-leaf; EBX and ECX (the size for all
//! the components the CPU supports) are used only as lower bounds, and ECX
//! stands in for a component no sub-leaf describes. The kernel checks the
//! result once at boot with a canary after the area
//! (`shoal_syscall::preempt::init`).
//!
//! The computation is a pure function of XCR0 and the leaf's values, so
//! the unit tests feed it the values of real CPUs and of the host they run
//! on.

/// Bytes `fxsave` writes (the legacy region alone).
pub const FXSAVE_SIZE: u32 = 512;

/// The legacy region and the XSAVE header: the smallest `xsave` area.
pub const XSAVE_MIN_SIZE: u32 = 576;

/// The largest area the kernel accepts. Today's largest layout (x87
/// through AMX tile data) needs about 11 KiB; a CPUID that claims more is
/// not believed, and the area comes off the interrupted thread's stack.
pub const XSAVE_MAX_SIZE: u32 = 16 * 1024;

/// One CPUID result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cpuid {
    /// EAX.
    pub eax: u32,
    /// EBX.
    pub ebx: u32,
    /// ECX.
    pub ecx: u32,
    /// EDX.
    pub edx: u32,
}

/// How the preemption entry saves the extended state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaveArea {
    /// The OS did not enable XSAVE: `fxsave`, 512 bytes.
    Fxsave,
    /// `xsave` with every component of `xcr0`, into `size` bytes (a
    /// multiple of 64).
    Xsave {
        /// Bytes of the area.
        size: u32,
        /// The XCR0 the size was computed for.
        xcr0: u64,
    },
}

impl SaveArea {
    /// Bytes of the area.
    pub fn size(self) -> u32 {
        match self {
            SaveArea::Fxsave => FXSAVE_SIZE,
            SaveArea::Xsave { size, .. } => size,
        }
    }
}

/// Why the save area cannot be sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XsaveError {
    /// XCR0 enables a component that no CPUID sub-leaf describes, and the
    /// leaf gives no maximum size to stand in for it.
    Undescribed {
        /// The component (bit of XCR0).
        component: u32,
        /// XCR0 as read.
        xcr0: u64,
    },
    /// The computed size is beyond [`XSAVE_MAX_SIZE`].
    TooLarge {
        /// The computed size.
        size: u64,
        /// XCR0 as read.
        xcr0: u64,
    },
}

impl core::fmt::Display for XsaveError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            XsaveError::Undescribed { component, xcr0 } => write!(
                f,
                "XCR0 is {xcr0:#x}, but CPUID leaf 0xd describes neither state component {component} nor a maximum size, so the FPU save area cannot be sized"
            ),
            XsaveError::TooLarge { size, xcr0 } => {
                write!(f, "XCR0 is {xcr0:#x} and CPUID leaf 0xd asks for a {size}-byte FPU save area, more than the {XSAVE_MAX_SIZE} bytes the kernel accepts")
            }
        }
    }
}

/// Sizes the save area for `xsave` with every component of `xcr0`.
/// `osxsave` is CPUID.1:ECX.OSXSAVE (without it, `fxsave`); `leaf_d(i)` is
/// CPUID leaf 0xD sub-leaf `i`.
pub fn save_area(osxsave: bool, xcr0: u64, leaf_d: impl Fn(u32) -> Cpuid) -> Result<SaveArea, XsaveError> {
    if !osxsave {
        return Ok(SaveArea::Fxsave);
    }
    let d0 = leaf_d(0);
    let mut size = u64::from(XSAVE_MIN_SIZE);
    let mut undescribed = None;
    // Components 0 and 1 (x87, SSE) live in the legacy region; XCR0 has
    // only user components, and bit 63 is reserved.
    for i in 2..63u32 {
        if xcr0 & (1 << i) == 0 {
            continue;
        }
        let s = leaf_d(i);
        if s.eax == 0 {
            undescribed.get_or_insert(i);
            continue;
        }
        size = size.max(u64::from(s.ebx) + u64::from(s.eax));
    }
    if let Some(component) = undescribed {
        // ECX is the size for every component the CPU supports, so it
        // covers the ones no sub-leaf describes (the boot check verifies).
        if d0.ecx < XSAVE_MIN_SIZE {
            return Err(XsaveError::Undescribed { component, xcr0 });
        }
        size = size.max(u64::from(d0.ecx));
    }
    // EBX is the CPU's own answer for its current XCR0: never go below it.
    size = size.max(u64::from(d0.ebx));
    let size = size.div_ceil(64) * 64;
    if size > u64::from(XSAVE_MAX_SIZE) {
        return Err(XsaveError::TooLarge { size, xcr0 });
    }
    Ok(SaveArea::Xsave { size: size as u32, xcr0 })
}

/// The save area for the CPU this runs on: reads CPUID and XCR0.
pub fn probe() -> Result<SaveArea, XsaveError> {
    use core::arch::x86_64::__cpuid_count;
    // CPUID exists on every x86-64 CPU, and leaf 1 always.
    let osxsave = __cpuid_count(1, 0).ecx & (1 << 27) != 0;
    let xcr0 = if osxsave { xgetbv0() } else { 0 };
    save_area(osxsave, xcr0, |sub| {
        let r = __cpuid_count(0xd, sub);
        Cpuid { eax: r.eax, ebx: r.ebx, ecx: r.ecx, edx: r.edx }
    })
}

/// Reads XCR0. Only called when CPUID.1:ECX.OSXSAVE is set.
fn xgetbv0() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: `xgetbv` with ECX = 0 is defined at any privilege once the
    // OS set CR4.OSXSAVE, which CPUID.1:ECX.OSXSAVE reports (the caller
    // checked); it only reads a register.
    unsafe { core::arch::asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi, options(nomem, nostack, preserves_flags)) };
    (u64::from(hi) << 32) | u64::from(lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leaf 0xD as a table: sub-leaf 0, then (component, size, offset).
    fn leaf(d0: Cpuid, comps: &'static [(u32, u32, u32)]) -> impl Fn(u32) -> Cpuid {
        move |sub| {
            if sub == 0 {
                return d0;
            }
            comps.iter().find(|c| c.0 == sub).map_or(Cpuid::default(), |&(_, size, off)| Cpuid { eax: size, ebx: off, ..Cpuid::default() })
        }
    }

    /// AMD EPYC (Zen 4) as the nested KVM shows it to an hvt guest on the
    /// host where the fault was seen: XCR0 = 0xe7, EBX = 832 (KVM's answer
    /// for the XCR0 = 7 it believes in), ECX = 2432.
    const AMD_D0: Cpuid = Cpuid { eax: 0xe7, ebx: 832, ecx: 2432, edx: 0 };
    const AMD_COMPS: &[(u32, u32, u32)] = &[(2, 256, 576), (5, 64, 832), (6, 512, 896), (7, 1024, 1408), (9, 8, 2432)];

    #[test]
    fn amd_host_with_avx512_enabled_behind_the_vmm() {
        // Sub-leaves present (the VMM copies every one the host has).
        let a = save_area(true, 0xe7, leaf(AMD_D0, AMD_COMPS)).unwrap();
        assert_eq!(a, SaveArea::Xsave { size: 2432, xcr0: 0xe7 });
        // Sub-leaves 5-7 missing (an older VMM copied only 0-2): ECX
        // stands in, never EBX's 832.
        let a = save_area(true, 0xe7, leaf(AMD_D0, &[(2, 256, 576)])).unwrap();
        assert_eq!(a.size(), 2432);
    }

    #[test]
    fn intel_skylake_server_with_pkru() {
        // XCR0 = 0x2e7: x87, SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM, PKRU
        // (MPX's components 3 and 4 present in the layout, not enabled).
        let d0 = Cpuid { eax: 0x2ff, ebx: 2696, ecx: 2696, edx: 0 };
        let comps = &[(2, 256, 576), (3, 64, 960), (4, 64, 1024), (5, 64, 1088), (6, 512, 1152), (7, 1024, 1664), (9, 8, 2688)];
        let a = save_area(true, 0x2e7, leaf(d0, comps)).unwrap();
        // 2688 + 8, rounded up to 64.
        assert_eq!(a, SaveArea::Xsave { size: 2752, xcr0: 0x2e7 });
    }

    #[test]
    fn intel_client_avx_only() {
        let d0 = Cpuid { eax: 0x7, ebx: 832, ecx: 832, edx: 0 };
        let a = save_area(true, 0x7, leaf(d0, &[(2, 256, 576)])).unwrap();
        assert_eq!(a.size(), 832);
        // x87 and SSE only: the legacy region and the header.
        let a = save_area(true, 0x3, leaf(Cpuid { eax: 3, ebx: 576, ecx: 576, edx: 0 }, &[])).unwrap();
        assert_eq!(a.size(), XSAVE_MIN_SIZE);
    }

    #[test]
    fn without_osxsave_fxsave() {
        assert_eq!(save_area(false, 0, |_| Cpuid::default()), Ok(SaveArea::Fxsave));
        assert_eq!(SaveArea::Fxsave.size(), 512);
    }

    #[test]
    fn an_undescribed_component_without_a_maximum_is_an_error() {
        let d0 = Cpuid { eax: 0x7, ebx: 832, ecx: 0, edx: 0 };
        let e = save_area(true, 0xe7, leaf(d0, &[(2, 256, 576)])).unwrap_err();
        assert_eq!(e, XsaveError::Undescribed { component: 5, xcr0: 0xe7 });
        assert!(format!("{e}").contains("state component 5"));
    }

    #[test]
    fn an_absurd_size_is_refused() {
        let d0 = Cpuid { eax: 0x7, ebx: 832, ecx: 832, edx: 0 };
        let e = save_area(true, 0x7, leaf(d0, &[(2, 0x8000_0000, 0x8000_0000)])).unwrap_err();
        assert!(matches!(e, XsaveError::TooLarge { size, .. } if size == 1 << 32));
    }

    /// The computation against the CPU that runs the test: the host's
    /// CPUID.0xD.0.EBX is right for the host's XCR0 (Linux sets both), so
    /// the computed size must equal it rounded to 64, and an `xsave` of
    /// every enabled component must stay inside it.
    #[test]
    fn matches_the_running_cpu_and_xsave_stays_inside() {
        let area = probe().unwrap();
        let SaveArea::Xsave { size, xcr0 } = area else {
            return;
        };
        let ebx = core::arch::x86_64::__cpuid_count(0xd, 0).ebx;
        assert_eq!(size, ebx.div_ceil(64) * 64, "XCR0 {xcr0:#x}");
        // The area, then a canary, 64-byte aligned.
        let mut buf = vec![0xa5u8; size as usize + 64 + 256];
        let base = buf.as_mut_ptr() as usize;
        let start = base.div_ceil(64) * 64 - base;
        buf[start..start + 576].fill(0);
        let p = buf[start..].as_mut_ptr();
        // SAFETY: `p` is 64-byte aligned with `size + 256` writable bytes
        // behind it and a zeroed header; xsave writes only the area.
        unsafe { core::arch::asm!("xsave64 [{}]", in(reg) p, in("eax") u32::MAX, in("edx") u32::MAX, options(nostack)) };
        let after = &buf[start + size as usize..start + size as usize + 256];
        assert!(after.iter().all(|&b| b == 0xa5), "xsave wrote past {size} bytes (XCR0 {xcr0:#x})");
    }
}
