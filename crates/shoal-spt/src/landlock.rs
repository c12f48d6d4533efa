//! Landlock for the spt instance (docs/design.md "Networking"): the kernel-enforced half of
//! the network policy, which seccomp cannot express because it cannot
//! read a `sockaddr`. A guest shares the instance process and can make the
//! allowed socket calls directly, so the policy must hold against it, not
//! only in the tender's handlers.
//!
//! The instance restricts itself, right before the seccomp filter:
//!
//! - **files**: every file-system access right is handled and none is
//!   granted, but reading files and directories beneath the read-only
//!   host directories of `--mount` (their descriptors), and writing
//!   (files and directories: make, write, truncate, remove, rename)
//!   beneath the writable ones (`:rw`): the instance opens
//!   nothing else after boot (it reads its image, archive and pool files
//!   from descriptors it already holds);
//! - **TCP bind**: handled; with `--net-outbound` only port 0 (an
//!   ephemeral port for a client socket) is granted; published ports are
//!   bound by the front end before the instance exists, and the ports of
//!   `--net-bind-any` by the waiting parent when the guest asks
//!   (`crate::net`), never by the instance;
//! - **TCP connect**: handled with no port granted unless
//!   `--net-outbound` (then any port; spt has no address allow-list, which
//!   Landlock could not enforce: it knows ports, not addresses);
//! - **scopes**: abstract UNIX sockets and signals outside the instance's
//!   own Landlock domain are refused.
//!
//! UDP is outside what Landlock restricts: with `--net-outbound` a guest
//! may send UDP anywhere; without it the seccomp filter allows no
//! `socket` call at all, but a UDP socket it was handed (a published
//! `/udp` port, a `--net-bind-any` bind) can still send to any address.
//! Nor do the TCP rules cover `IPPROTO_MPTCP` sockets or a Fast Open send
//! (`MSG_FASTOPEN`, which connects without `connect`): the filter pins
//! `socket`'s protocol to TCP and UDP and refuses the flag without
//! outbound (`crate::filter`).
//!
//! On a kernel without Landlock network rules (before Linux 6.7) an
//! instance with networking is refused rather than run without them; one
//! without networking runs with what the kernel has (seccomp already
//! denies every socket and file call).

use crate::net::NetPolicy;
use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use std::os::fd::BorrowedFd;

/// Why Landlock could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    /// The ruleset could not be built or enforced.
    #[error("cannot restrict the instance with Landlock: {0}")]
    Ruleset(#[from] landlock::RulesetError),
    /// Networking was asked for, but the kernel cannot enforce the ports.
    #[error("this kernel cannot enforce the instance's network policy with Landlock (TCP port rules need Linux 6.7 or later); networking is refused")]
    NoNetworkRules,
}

/// Restricts this process as the module docs say.
/// `mounts`: the descriptors of the `--mount` directories, beneath which
/// reading is granted.
/// `writable`: those of them (`:rw`) beneath which writing is granted too.
pub fn restrict(net: NetPolicy, mounts: &[i32], writable: &[i32]) -> Result<(), LandlockError> {
    let abi = ABI::V6;
    let level = if net.any() { CompatLevel::HardRequirement } else { CompatLevel::BestEffort };
    let mut handled: landlock::BitFlags<AccessNet> = AccessNet::BindTcp.into();
    if !net.outbound {
        handled |= AccessNet::ConnectTcp;
    }
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))?
        .scope(Scope::from_all(abi))?
        .set_compatibility(level)
        .handle_access(handled)
        .map_err(|e| if net.any() { LandlockError::NoNetworkRules } else { e.into() })?;
    let mut created = ruleset.create()?;
    if net.outbound {
        created = created.add_rule(NetPort::new(0, AccessNet::BindTcp))?;
    }
    for &fd in mounts {
        // SAFETY: the instance holds `fd` open (a mount's directory) for
        // its whole life; the rule only reads it.
        let dir = unsafe { BorrowedFd::borrow_raw(fd) };
        let mut access = AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute;
        if writable.contains(&fd) {
            // Files and directories only: no devices, FIFOs, sockets or
            // links are made on a guest's behalf.
            access |=
                AccessFs::WriteFile | AccessFs::Truncate | AccessFs::MakeReg | AccessFs::MakeDir | AccessFs::RemoveFile | AccessFs::RemoveDir | AccessFs::Refer;
        }
        created = created.add_rule(PathBeneath::new(dir, access))?;
    }
    let status = created.restrict_self()?;
    if net.any() && status.ruleset == RulesetStatus::NotEnforced {
        return Err(LandlockError::NoNetworkRules);
    }
    Ok(())
}
