//! A function prepared once for many instances (`shoal serve`): the front
//! end's work of [`crate::run`] that depends only on the image and the
//! settings, done at deploy and kept, so that a cold start is one `clone`
//! and one `exec` of the instance program instead of an `exec` of the
//! front end (`shoal-tender`), its checks and then the instance's `exec`.
//!
//! [`Prepared::new`] checks the image (FSGSBASE, memory size, the image
//! itself, the layout), packs the root file system into a sealed memfd
//! that every instance maps privately (it can never change), reads the TSC
//! frequency, opens and verifies the pool files (mode `pool`), opens the
//! instance program and, as root, the shared empty network namespace.
//!
//! [`Prepared::spawn`] starts one instance from it exactly as the front
//! end's supervised start does (`crate::front`): the same `clone` (as root
//! into new PID, mount and IPC namespaces), the same hand-over (the empty
//! network namespace entered, descriptors moved to their numbers, every
//! other one closed, parent-death signal, `execveat` of the instance
//! program with one fixed environment variable), and so the same instance
//! process: it checks the image again, drops to `nobody` in an empty root
//! and a new user namespace, applies Landlock, `no_new_privs` and the
//! seccomp filter (`crate::instance`). What differs from [`crate::run`] is
//! only that no front end waits: the caller is the instance's parent (it
//! passes a pidfd of itself, as the front end does, so that the instance
//! sees a parent that died while it dropped its credentials) and the
//! instance reports its own end (the statuses and messages of
//! [`crate::run_in_place`]).

use crate::front::{self, Handover};
use crate::net::NetPolicy;
use crate::{confine, filter, instance_program, spec, sys, SptError};
use shoal_loader::pool::PoolPlan;
use shoal_loader::{plan, Image, RunConfig};
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// A compiled seccomp program and its key (`filter::key`).
type CompiledFilter = ([u64; 6], std::sync::Arc<Vec<u8>>);

/// One function's image and settings, checked and ready to start
/// instances from (see the module docs). Dropping it closes the image,
/// the archive's memfd and the pool files.
pub struct Prepared {
    image: Image,
    /// The same open file the check read (pread only: instances can share it).
    image_fd: OwnedFd,
    archive: Option<OwnedFd>,
    archive_len: u64,
    pool: Option<PoolPlan>,
    program: PathBuf,
    program_fd: OwnedFd,
    netns: Option<OwnedFd>,
    /// The `O_PATH` descriptors of `--mount`'s host directories.
    mounts: Vec<OwnedFd>,
    root: bool,
    /// Everything of the boot spec but the per-instance environment and
    /// listening sockets.
    spec: spec::Spec,
    argv: Vec<OsString>,
    env: Vec<OsString>,
    mem_size: u64,
    /// The seccomp program last compiled for an instance, with its key
    /// (`filter::key`): every instance of a function with the same number
    /// of listening sockets and the same layout has the same program.
    filter: std::sync::Mutex<Option<CompiledFilter>>,
    /// [`crate::START_TIMING_ENV`] was set when the function was
    /// prepared: each instance prints its start's steps (from the spawn).
    timing: bool,
    /// A warning to show once (the pool could not serve the image and the
    /// function falls back to mode copy).
    pub warning: Option<String>,
}

/// What one instance gets of its own.
pub struct InstanceIo<'a> {
    /// Its stdin (e.g. `/dev/null`).
    pub stdin: &'a OwnedFd,
    /// Where the guest's stdout goes.
    pub stdout: &'a OwnedFd,
    /// Where the guest's stderr and the instance's messages go.
    pub stderr: &'a OwnedFd,
    /// Listening sockets handed over (as `--listen-fd` does).
    pub listeners: &'a [OwnedFd],
    /// `KEY=VALUE` strings added to the guest's environment.
    pub env: &'a [OsString],
    /// The uid (and gid) a root-started instance runs as, claimed by the
    /// caller (`shoal_loader::uids`), which holds it until it has reaped
    /// the instance; `None`: `nobody`.
    pub uid: Option<u32>,
}

fn sys_err(what: &'static str) -> impl Fn(std::io::Error) -> SptError {
    move |source| SptError::Sys { what, source }
}

impl Prepared {
    /// Checks and prepares `cfg` (its image, memory, memory mode, root
    /// file system, arguments and environment). `--volume`,
    /// `--net-bind-any`, published ports and listening sockets of `cfg`
    /// are not supported here (they need a waiting parent or belong to
    /// one instance): refused with `EINVAL`.
    pub fn new(cfg: &RunConfig) -> Result<Prepared, SptError> {
        if cfg.volume.is_some() {
            return Err(SptError::VolumeNeedsParent);
        }
        if cfg.net.bind_any {
            return Err(SptError::BindAnyNeedsParent);
        }
        if !cfg.net.publish.is_empty() || !cfg.net.listen_fds.is_empty() {
            return Err(SptError::Sys {
                what: "prepare a function with its own ports (listening sockets are given per instance)",
                source: std::io::Error::from_raw_os_error(libc::EINVAL),
            });
        }
        crate::check_host(cfg)?;
        let file = std::fs::File::open(&cfg.image).map_err(|e| shoal_loader::ImageError::Io { path: cfg.image.clone(), source: e })?;
        let image_fd = OwnedFd::from(file.try_clone().map_err(sys_err("keep the image open"))?);
        let image = Image::from_file(file, &cfg.image)?;
        let archive_bytes = shoal_loader::root_archive(cfg)?;
        plan(&image, cfg.mem_size, archive_bytes.len() as u64, &cfg.argv, &cfg.env)?;
        let archive = if archive_bytes.is_empty() { None } else { Some(front::memfd_sealed(c"shoal-archive", &archive_bytes)?) };
        let tsc_hz = shoal_loader::tsc::tsc_hz()?;
        let (pool, warning) = crate::prepare_pool(cfg, &image)?;
        let program = instance_program()?;
        let program_fd = OwnedFd::from(std::fs::File::open(&program).map_err(sys_err("open the instance program"))?);
        let root = confine::is_root();
        let mounts = crate::open_mounts(cfg)?;
        let netns =
            if root && !cfg.net.outbound { Some(confine::empty_netns().map_err(sys_err("open the instances' empty network namespace"))?) } else { None };
        let spec = spec::Spec {
            mem_size: cfg.mem_size,
            mode: crate::spec_mode(cfg, pool.as_ref()),
            tsc_hz,
            supervised: false,
            parent_pidfd: true,
            archive_len: archive_bytes.len() as u64,
            image_name: cfg.image.as_os_str().as_bytes().to_vec(),
            argv: cfg.argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
            env: Vec::new(),
            pool: crate::spec_pool(pool.as_ref()),
            outbound: cfg.net.outbound,
            bind_any: false,
            listeners: Vec::new(),
            volume_path: Vec::new(),
            volume_max: 0,
            mounts: cfg.mounts.iter().map(|m| m.guest.as_bytes().to_vec()).collect(),
            inject: cfg.inject.unwrap_or_default(),
            rejuvenate_ns: cfg.rejuvenate_ns,
            watchdog_ns: cfg.watchdog_ns,
            recover_flags: cfg.recover_flags(),
            timing_t0_ns: 0,
            filter: Vec::new(),
            filter_key: [0; 6],
            template: false,
            ready_explicit: false,
            uid: confine::NOBODY,
            cwd: cfg.cwd.clone(),
            guest_ids: [cfg.guest_uid, cfg.guest_gid],
            writable_mounts: crate::writable_mounts(&cfg.mounts),
            hostname: cfg.hostname.clone(),
            syscall_errno: cfg.syscall_errno.clone(),
        };
        Ok(Prepared {
            image,
            image_fd,
            archive,
            archive_len: archive_bytes.len() as u64,
            pool,
            program,
            program_fd,
            netns,
            mounts,
            root,
            spec,
            argv: cfg.argv.clone(),
            env: cfg.env.clone(),
            mem_size: cfg.mem_size,
            filter: std::sync::Mutex::new(None),
            timing: std::env::var_os(crate::START_TIMING_ENV).is_some(),
            warning,
        })
    }

    /// Starts one instance; returns its pid (a child of this process,
    /// which must reap it). The instance dies with the thread's process
    /// (`PR_SET_PDEATHSIG`). Everything that allocates happens before the
    /// `clone`; the child only makes async-signal-safe system calls
    /// (`Handover::exec_child`).
    pub fn spawn(&self, io: &InstanceIo<'_>) -> Result<libc::pid_t, SptError> {
        self.start(io, None)
    }

    /// Starts the function's template (`crate::template`): an instance
    /// like [`Prepared::spawn`]'s that stops at its ready point and then
    /// makes copies of itself on request ([`crate::Template::copy`]),
    /// each a child of this process. Not in a PID namespace of its own
    /// (its copies could not be this process's children: the first
    /// process of a PID namespace cannot `clone(CLONE_PARENT)`); its
    /// filter allows no signal, `ptrace` or `/proc`, so the host's PID
    /// namespace shows it nothing it can use. Wait for the ready point
    /// with [`crate::Template::wait_ready`].
    pub fn spawn_template(&self, io: &InstanceIo<'_>) -> Result<crate::Template, SptError> {
        self.spawn_template_at(io, shoal_abi::ReadyPoint::Listen)
    }

    /// [`Prepared::spawn_template`] with the ready point `ready`: at
    /// [`shoal_abi::ReadyPoint::Explicit`] the template stops at its
    /// program's first write to `/dev/shoal/ready` instead.
    pub fn spawn_template_at(&self, io: &InstanceIo<'_>, ready: shoal_abi::ReadyPoint) -> Result<crate::Template, SptError> {
        let (ours, theirs) = sys::seqpacket_pair().map_err(sys_err("make the template's control channel"))?;
        // Made inside a pids cgroup of its own that lets it be one process
        // (crate::template, "The bound on the template's extra rights").
        let pids = crate::template::PidsGroup::new().map_err(sys_err("make the template's pids cgroup"))?;
        let pid = match &pids {
            Some(g) => {
                g.enter().map_err(sys_err("enter the template's pids cgroup"))?;
                let started = self.start(io, Some((&theirs, ready)));
                let sealed = g.seal();
                let pid = started?;
                if let Err(e) = sealed {
                    // The child just made is not bounded as it must be:
                    // killed and reaped (errors change nothing here).
                    let _ = sys::kill(pid, libc::SIGKILL);
                    let _ = sys::waitpid(pid);
                    return Err(sys_err("limit the template's pids cgroup")(e));
                }
                pid
            }
            None => self.start(io, Some((&theirs, ready)))?,
        };
        drop(theirs);
        Ok(crate::Template::new(ours, pid, self.mem_size, pids, ready))
    }

    fn start(&self, io: &InstanceIo<'_>, control: Option<(&OwnedFd, shoal_abi::ReadyPoint)>) -> Result<libc::pid_t, SptError> {
        // The instance's own variables first, as `shoal-tender -e` got
        // them first: they win over a function's variable of the same name.
        let mut env = io.env.to_vec();
        env.extend(self.env.iter().cloned());
        // Planned again for the errors the added variables may cause (an
        // argument area too small); the instance plans the same.
        let layout = plan(&self.image, self.mem_size, self.archive_len, &self.argv, &env)?;
        let mut listeners = Vec::with_capacity(io.listeners.len());
        for fd in io.listeners {
            listeners.push(shoal_loader::net::adopt_listen_fd(fd)?);
        }
        if listeners.len() > shoal_abi::MAX_LISTENERS {
            return Err(SptError::Net(shoal_loader::net::NetError::TooMany));
        }
        let mut spec = self.spec.clone();
        spec.env = env.iter().map(|a| a.as_bytes().to_vec()).collect();
        // The seccomp program the instance would compile (`crate::instance`:
        // same policy, same guest range), compiled once per function: the
        // instance checks the key and compiles its own if it differs.
        // A UDP socket without outbound needs a relay, which needs a
        // waiting parent (crate::relay); a function's instances have none.
        if !spec.outbound && listeners.iter().any(|l| l.sock_type == libc::SOCK_DGRAM as u32) {
            return Err(SptError::UdpNeedsParent);
        }
        let policy = NetPolicy { listeners: listeners.len() as u32, outbound: spec.outbound, bind_any: false, relay: false };
        let run_time_code = self.image.exec_entry().is_some();
        let guest = filter::GuestRange {
            heap_start: layout.heap_start,
            mem_size: layout.mem_size,
            alias_fd: policy.alias_fd(),
            run_time_code,
            mounts: self.mounts.len() as u32,
            writable: spec.writable_mounts != 0,
        };
        let key = filter::key(policy, guest);
        let program = {
            let mut cached = self.filter.lock().unwrap_or_else(|e| e.into_inner());
            match &*cached {
                Some((k, p)) if *k == key => p.clone(),
                _ => {
                    let p = std::sync::Arc::new(filter::to_bytes(&filter::program(policy, guest)?));
                    *cached = Some((key, p.clone()));
                    p
                }
            }
        };
        if self.timing {
            spec.timing_t0_ns = sys::monotonic_ns().max(1);
        }
        spec.uid = io.uid.unwrap_or(confine::NOBODY);
        if let Some((_, ready)) = control {
            // A template compiles its own filter (crate::template).
            spec.template = true;
            spec.ready_explicit = ready == shoal_abi::ReadyPoint::Explicit;
        } else {
            spec.filter = program.to_vec();
            spec.filter_key = key;
        }
        spec.listeners = listeners;
        let netns = match &self.netns {
            Some(ns) => Some(ns.try_clone().map_err(sys_err("pass the empty network namespace to the instance"))?),
            None => None,
        };
        let handover = Handover::new(front::Parts {
            program: &self.program,
            spec: &spec.encode(),
            image: self.image.path(),
            image_fd: Some(&self.image_fd),
            archive: &[],
            archive_fd: self.archive.as_ref(),
            program_fd: Some(&self.program_fd),
            stdin: Some(io.stdin),
            report: None,
            parent_pidfd: true,
            pool: self.pool.as_ref().map(|p| &p.files[..]).unwrap_or_default(),
            listeners: io.listeners,
            channel: control.map(|(c, _)| c),
            mounts: &self.mounts,
            stdout: Some(io.stdout),
            stderr: Some(io.stderr),
            netns,
        })?;
        // A template stays in this PID namespace (see spawn_template).
        let namespaces = match (self.root, control.is_some()) {
            (false, _) => 0,
            (true, false) => confine::CLONE_NAMESPACES,
            (true, true) => confine::CLONE_NAMESPACES & !libc::CLONE_NEWPID,
        };
        // SAFETY: the child runs only `Handover::exec_child`, which resets
        // the signal dispositions first, makes only async-signal-safe
        // system calls on its own stack, writes no memory of this
        // process's and ends in exec or _exit.
        unsafe { sys::spawn_with(namespaces, &|| handover.exec_child()) }.map_err(sys_err("start the instance process"))
    }
}
