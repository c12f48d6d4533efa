//! The instance process: `shoal-spt`, exec'd by the front end
//! ([`crate::run`], [`crate::run_in_place`]) with no environment but one fixed variable (malloc tunables) and
//! no arguments, so that the process the guest shares its address space
//! with holds nothing of the host it must not see (no environment, no
//! caller's argv, no host paths, no heap of the caller's command line).
//!
//! It reads the boot spec ([`crate::spec`]) and the descriptors next to
//! it, checks the image again from its descriptor, plans the same layout,
//! confines itself ([`crate::confine`]) and enters the guest through the
//! same code as before ([`crate::child`]). A failure prints one `shoal: …`
//! line and exits with [`crate::EXIT_TENDER_FAILED`].

use crate::net::{NetPolicy, FIRST_SOCKET_FD};
use crate::spec::{self, Spec};
use crate::{child, confine, filter, hypercall, sys, SptError, EXIT_TENDER_FAILED};
use shoal_abi::TenderKind;
use shoal_loader::pool::{PoolMap, PoolPlan};
use shoal_loader::{plan, BootParams, Clock, Image};
use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// Why the instance process could not start the guest.
#[derive(Debug, thiserror::Error)]
enum InstanceError {
    #[error("cannot read the boot spec: {0}")]
    Read(std::io::Error),
    #[error(transparent)]
    Spec(#[from] spec::SpecError),
    #[error(transparent)]
    Spt(#[from] SptError),
    #[error(transparent)]
    Confine(#[from] confine::ConfineError),
    #[error("the file-system archive passed to the instance is not a sealed file of the announced size: {0}")]
    Archive(std::io::Error),
    #[error("cannot map the report page: {0}")]
    Report(std::io::Error),
    #[error("more UDP ports than an instance relays ({max})", max = crate::net::MAX_RELAYS)]
    TooManyRelays,
}

/// Runs the instance; never returns. The `shoal-spt` binary's `main`.
pub fn main() -> ! {
    sys::lean_malloc();
    match boot() {
        Ok(never) => match never {},
        Err(e) => {
            hypercall::say(format_args!("{e}"));
            sys::exit(EXIT_TENDER_FAILED)
        }
    }
}

/// Takes ownership of descriptor `fd`, which the front end placed there.
fn owned(fd: i32) -> OwnedFd {
    // SAFETY: the front end put exactly these descriptors at these numbers
    // before exec (`crate::front`), and nothing else in this process owns
    // them.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn read_fd(fd: i32, max: u64) -> Result<Vec<u8>, InstanceError> {
    let mut out = Vec::new();
    std::fs::File::from(owned(fd)).take(max).read_to_end(&mut out).map_err(InstanceError::Read)?;
    Ok(out)
}

/// The archive's descriptor, checked to be what the front end made: a
/// memfd of `len` bytes sealed against any change ([`sys::ARCHIVE_SEALS`]),
/// so that mapping it privately into guest memory is as good as a copy.
fn sealed_archive(len: u64) -> Result<OwnedFd, InstanceError> {
    use std::os::fd::AsRawFd;
    let fd = owned(spec::ARCHIVE_FD);
    let seals = sys::seals(fd.as_raw_fd()).map_err(InstanceError::Archive)?;
    let size = std::fs::File::from(fd.try_clone().map_err(InstanceError::Archive)?).metadata().map_err(InstanceError::Archive)?.len();
    if seals & sys::ARCHIVE_SEALS != sys::ARCHIVE_SEALS || size != len {
        return Err(InstanceError::Archive(std::io::Error::from_raw_os_error(libc::EINVAL)));
    }
    Ok(fd)
}

fn boot() -> Result<std::convert::Infallible, InstanceError> {
    let mut spec = Spec::decode(&read_fd(spec::SPEC_FD, spec::MAX_SPEC as u64 + 1)?)?;
    sys::start_timing(spec.timing_t0_ns);
    sys::start_step("instance: exec'd, boot spec read");
    let name = PathBuf::from(OsString::from_vec(spec.image_name.clone()));
    let image = Image::from_file(std::fs::File::from(owned(spec::IMAGE_FD)), &name).map_err(SptError::from)?;
    // Judged while this process still has the caller's user (before it
    // drops root below): whose the image file is.
    let file_maps = if spec.pool.is_empty() { child::file_maps(&image) } else { Vec::new() };
    let archive = if spec.archive_len > 0 { Some(sealed_archive(spec.archive_len)?) } else { None };
    let argv: Vec<OsString> = spec.argv.iter().cloned().map(OsString::from_vec).collect();
    let env: Vec<OsString> = spec.env.iter().cloned().map(OsString::from_vec).collect();
    let layout = plan(&image, spec.mem_size, spec.archive_len, &argv, &env).map_err(SptError::from)?;
    sys::start_step("instance: image checked again, layout planned");
    let entry = hypercall::entry as unsafe extern "C" fn(u64, u64) as usize as u64;
    let params = BootParams::new(TenderKind::Spt, entry, Clock { tsc_hz: spec.tsc_hz, ..Clock::default() }).map_err(SptError::from)?;
    let pool = (!spec.pool.is_empty()).then(|| {
        let mut p = PoolPlan::default();
        for (i, e) in spec.pool.iter().enumerate() {
            p.files.push(owned(spec::POOL_FD0 + i as i32));
            p.maps.push(PoolMap { file: i, addr: e.addr, len: e.len, exec: e.exec });
            p.bytes += e.len;
        }
        p
    });
    let pool_ranges = pool.as_ref().map(PoolPlan::ranges).unwrap_or_default();
    // Listening sockets come after the pool files; the last step moves
    // them down to FIRST_SOCKET_FD.. and the boot info names them there.
    let listen_fd0 = spec::POOL_FD0 + spec.pool.len() as i32;
    let udp_port = |l: &shoal_abi::Listener| l.sock_type == libc::SOCK_DGRAM as u32;
    let policy = NetPolicy {
        listeners: spec.listeners.len() as u32,
        outbound: spec.outbound,
        bind_any: spec.bind_any,
        relay: !spec.outbound && (spec.bind_any || spec.listeners.iter().any(udp_port)),
    };
    let mut params = params;
    for (i, l) in spec.listeners.iter().enumerate().take(shoal_abi::MAX_LISTENERS) {
        params.listeners[i] = shoal_abi::Listener { handle: i64::from(FIRST_SOCKET_FD) + i as i64, ..*l };
    }
    params.listener_count = spec.listeners.len() as u64;
    params.net_flags = if spec.outbound { shoal_abi::NET_OUTBOUND } else { 0 } | if spec.bind_any { shoal_abi::NET_BIND_ANY } else { 0 };
    params.inject = spec.inject;
    params.rejuvenate_ns = spec.rejuvenate_ns;
    params.watchdog_ns = spec.watchdog_ns;
    params.recover_flags = spec.recover_flags;
    params.cwd = shoal_loader::boot_cwd(&spec.cwd);
    [params.uid, params.gid] = spec.guest_ids;
    params.hostname = shoal_loader::boot_hostname(&spec.hostname);
    params.syscall_errno = shoal_loader::boot_syscall_errno(&spec.syscall_errno);
    crate::net::install(policy);
    // Without outbound a UDP port is the instance's end of a relay
    // (crate::relay), at the descriptor the last step moves it to; its
    // address, as the guest's kernel reports it, is the guest's port.
    for (i, l) in spec.listeners.iter().enumerate() {
        if policy.relay && udp_port(l) {
            let family = if l.family == libc::AF_INET6 as u32 { libc::AF_INET6 } else { libc::AF_INET };
            let mut local = [0u8; crate::relay::ADDR];
            local[..2].copy_from_slice(&(family as u16).to_ne_bytes());
            local[2..4].copy_from_slice(&(l.port as u16).to_be_bytes());
            let len = if family == libc::AF_INET6 { 28 } else { 16 };
            crate::net::relay_add(FIRST_SOCKET_FD + i as i32, &local[..len]).map_err(|_| InstanceError::TooManyRelays)?;
        }
    }
    // The alias file comes right after the listening sockets and the bind
    // channel once the last step has closed everything else (crate::child).
    // The mounts' descriptors follow the listening sockets and the bind
    // channel or a template's control channel (crate::front places them
    // so); the last step moves them to MOUNT_FD0.. (crate::child).
    let mount_fd0 = listen_fd0 + spec.listeners.len() as i32 + i32::from(spec.bind_any) + i32::from(spec.template);
    let mount_count = spec.mounts.len().min(shoal_hostcall::hostfs::MAX_MOUNTS);
    let mut mounts = shoal_hostcall::hostfs::Mounts::default();
    for (i, m) in spec.mounts.iter().take(mount_count).enumerate() {
        // A single-file mount's descriptor is the (open) file itself.
        let file = confine::is_regular(mount_fd0 + i as i32);
        mounts.push(crate::MOUNT_FD0 + i as i32, m, spec.writable_mounts & (1 << i) != 0, file);
    }
    let run_time_code = image.exec_entry().is_some();
    let guest = filter::GuestRange {
        heap_start: layout.heap_start,
        mem_size: layout.mem_size,
        alias_fd: policy.alias_fd(),
        run_time_code,
        mounts: mount_count as u32,
        writable: mounts.any_writable(),
    };
    // The program compiled ahead by a prepared function (`shoal serve`)
    // if it was compiled for exactly this instance's layout and network;
    // otherwise (and for `shoal run`) compiled here.
    let filter = match filter::from_bytes(&spec.filter) {
        // A template's filter allows what making copies needs, and each
        // copy stacks the second filter that takes it away (crate::template).
        _ if spec.template => {
            crate::template::install(
                policy,
                filter::copy_program(guest).map_err(SptError::from)?,
                run_time_code.then_some(layout.mem_size),
                spec.ready_explicit,
            );
            filter::template_program(policy, guest).map_err(SptError::from)?
        }
        Some(p) if spec.filter_key == filter::key(policy, guest) => {
            sys::start_step("instance: seccomp filter taken from the spec (compiled ahead for this layout)");
            p
        }
        _ => {
            let p = filter::program(policy, guest).map_err(SptError::from)?;
            sys::start_step("instance: seccomp filter built");
            p
        }
    };
    // Its bytes are in `filter` now; the heap copy need not outlive boot.
    drop(core::mem::take(&mut spec.filter));
    let report = if spec.supervised {
        let fd = owned(spec::REPORT_FD);
        let volume = if spec.volume_max > 0 { crate::VOLUME_HEADER as u64 + spec.volume_max } else { 0 };
        let len = usize::try_from(shoal_abi::PAGE_SIZE + volume).map_err(|_| InstanceError::Report(std::io::Error::from_raw_os_error(libc::EFBIG)))?;
        let p = sys::mmap_shared_fd(&fd, len).map_err(InstanceError::Report)?;
        if volume > 0 {
            // After the report page: the area the VolumeSave hypercall fills.
            crate::hypercall::install_volume(p.cast::<u8>().wrapping_add(shoal_abi::PAGE_SIZE as usize), spec.volume_max);
            params.volume_path[..spec.volume_path.len()].copy_from_slice(&spec.volume_path);
            params.volume_max = spec.volume_max;
        }
        Some(p.cast())
    } else {
        None
    };
    // A server instance holds one host descriptor per connection: allow
    // as many as the hard limit (what servers do for themselves natively).
    sys::raise_nofile();
    let mount_fds: Vec<i32> = (0..mount_count as i32).map(|i| mount_fd0 + i).collect();
    if !mount_fds.is_empty() {
        if !confine::is_root() {
            return Err(SptError::MountNeedsRoot.into());
        }
        confine::jail_mounts(&mount_fds, spec.writable_mounts)?;
    }
    // With a writable mount the instance runs as the guest's own user
    // (`--user`, when not root), so what it makes there is that user's and
    // the host's permission checks are that user's (docs/architecture.md).
    let writer = mounts.any_writable() && spec.guest_ids[0] != 0;
    let ids = if writer { (spec.guest_ids[0], spec.guest_ids[1]) } else { (spec.uid, spec.uid) };
    let writable_fds: Vec<i32> = mount_fds.iter().enumerate().filter(|(i, _)| spec.writable_mounts & (1 << i) != 0).map(|(_, &fd)| fd).collect();
    // A single-file mount's file is open already (crate::confine): the
    // instance opens nothing by name there, so Landlock grants nothing.
    let dir_fds: Vec<i32> = mount_fds.iter().enumerate().filter(|&(i, _)| !mounts.is_file(i)).map(|(_, &fd)| fd).collect();
    crate::hypercall::install_mounts(mounts);
    if confine::is_root() {
        confine::drop_root((spec.supervised || spec.parent_pidfd).then_some(spec::PARENT_FD), ids)?;
    }
    crate::landlock::restrict(policy, &dir_fds, &writable_fds).map_err(SptError::from)?;
    sys::start_step("instance: confined (namespaces, root, Landlock)");
    let mode = spec.mode;
    let listeners = (listen_fd0, spec.listeners.len() as i32 + i32::from(spec.bind_any));
    // A template's control channel follows the listening sockets.
    let control = spec.template.then_some(listen_fd0 + listeners.1);
    // Everything needed is copied out of the spec: its heap goes now.
    drop(spec);
    let prepared = child::Prepared {
        image,
        layout,
        archive: archive.as_ref(),
        argv,
        env,
        params,
        filter,
        report,
        mode,
        pool,
        pool_ranges,
        file_maps,
        // The bind channel (--net-bind-any) follows the listening sockets
        // and moves with them: it lands at `policy.channel_fd()`.
        listeners,
        mounts: (mount_fd0, mount_count as i32),
        control,
        net: policy,
    };
    child::start(prepared)
}
