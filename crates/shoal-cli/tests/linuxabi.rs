//! The Linux process ABI that unmodified executables rely on, checked
//! with C programs built by `shoal cc` against the same source built as a
//! native static musl program, on spt and hvt (hvt skips visibly without
//! /dev/kvm): real-time signals queued with their own siginfo,
//! `rt_sigtimedwait` and `signalfd`, Linux's signal frames, the files
//! runtimes read to size themselves, and the scheduling, memory and
//! process-control calls they make.

mod common;
use common::*;

/// sched_getaffinity/sched_setaffinity, getrandom's flags, prctl,
/// madvise, mincore, membarrier, and the /proc and /sys files (cpu
/// online, cpuinfo, meminfo, stat, transparent huge pages, the cgroup v2
/// quota, /proc/self/{exe,auxv,maps,fd}) agree with what the system calls
/// say, as on Linux.
#[test]
fn sizing_files_and_calls_agree_with_the_system_calls() {
    matches_native("linux_sizing.c");
}

/// fork, vfork, execve and execveat give ENOSYS (each reported once on
/// stderr, as every unimplemented call is) and the program goes on.
#[test]
fn fork_and_exec_give_enosys() {
    let dir = scratch();
    let image = build_image(&test_app("linux_nofork.c"), dir.path(), &[]);
    let want_out = "fork: -1 Function not implemented\nvfork: -1 Function not implemented\nexecve: -1 Function not implemented\n\
execveat: -1 Function not implemented\nfork(): -1 Function not implemented\nposix_spawn: Function not implemented\nstill running\n";
    let want_err = "shoal: unsupported system call 57 (fork), returning ENOSYS\nshoal: unsupported system call 58 (vfork), returning ENOSYS\n\
shoal: unsupported system call 59 (execve), returning ENOSYS\nshoal: unsupported system call 322 (execveat), returning ENOSYS\n";
    for tender in tenders() {
        let o = output(shoal_run(tender).arg(&image));
        assert_eq!(stdout(&o), want_out, "{tender}: stderr {}", stderr(&o));
        assert_eq!(stderr(&o), want_err, "{tender}");
        assert_eq!(o.status.code(), Some(0), "{tender}");
    }
}

/// A blocked SIGRTMIN+1 sent 100 times (sigqueue, kill, raise) runs its
/// handler 100 times once unblocked, each with its own siginfo, a
/// thread's own signals first as on Linux; a standard signal sent three
/// times runs once; sigtimedwait, sigwaitinfo and sigwait take queued
/// signals, wait for one from another thread, time out and poll.
#[test]
fn real_time_signals_are_queued_and_waited_for() {
    matches_native("linux_rtsig.c");
}

/// Handlers get Linux's x86-64 rt_sigframe: the return address is
/// sa_restorer, the ucontext_t (uc_flags, uc_stack, uc_sigmask, the
/// segment word, fpstate to an fxsave area) and the siginfo_t lie where
/// Linux puts them; a handler's change of the interrupted registers takes
/// effect; SA_NODEFER, SA_RESETHAND and SA_ONSTACK behave as on Linux.
#[test]
fn signal_frames_are_laid_out_as_linux_lays_them_out() {
    matches_native("linux_sigframe.c");
}

/// signalfd and signalfd4 read blocked pending signals as
/// signalfd_siginfo records (queued real-time signals once per send, with
/// their values), are readable for poll and epoll, block until another
/// thread's signal comes, take a new mask, and give Linux's errors.
#[test]
fn signalfd_reads_pending_signals() {
    matches_native("linux_signalfd.c");
}

/// sched_get_priority_max/min per policy, getpriority/setpriority (as
/// root: both ways, clamped, Linux's errors) and times(), as natively.
#[test]
fn priorities_and_times_match_native() {
    matches_native("linux_prio.c");
}

/// A shared mapping of 256 MiB of a sparse file is ENOMEM (shoal shows at
/// most 128 MiB of file pages at once; Linux maps it) and leaves nothing
/// behind: fresh anonymous memory where it would have been takes a write
/// on every page (CPython's test_mmap crashed on a read-only page
/// there), and a 16 MiB shared mapping of the file reads as natively.
#[test]
fn a_refused_large_shared_mapping_leaves_memory_usable() {
    let dir = scratch();
    let src = test_app("sys_bigshared.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = build_native(&src, dir.path(), &[]);
    let n = output(&mut std::process::Command::new(&native));
    assert!(n.status.success(), "native: {}", stderr(&n));
    let (first, rest) = stdout(&n).split_once('\n').map(|(a, b)| (a.to_string(), b.to_string())).unwrap();
    assert_eq!(first, "shared 256 MiB: mapped", "native");
    let rest = rest.strip_prefix("last bytes: end\n").unwrap_or(&rest).to_string();
    for t in tenders() {
        let s = output(shoal_run(t).args(["--mem", "512M"]).arg(&image));
        assert_eq!(stdout(&s), format!("shared 256 MiB: Out of memory\n{rest}"), "{t}: stderr {}", stderr(&s));
        assert_eq!((s.status.code(), stderr(&s)), (Some(0), String::new()), "{t}");
    }
}

/// F_GETPIPE_SZ / F_SETPIPE_SZ: rounding, a write bounded by the size,
/// EBUSY, EINVAL and EBADF, as natively.
#[test]
fn pipe_sizes_match_native() {
    matches_native("linux_pipesz.c");
}

/// setresuid, setreuid, their gid kin, setfsuid/setfsgid and setgroups
/// in an instance whose identity is fixed: own ids and -1 succeed,
/// others EPERM (root included: natively root would change them);
/// setgroups checks as Linux (EPERM for a user that is not root first,
/// then EINVAL, EFAULT) and lets root keep the empty list.
#[test]
fn identity_changes_follow_the_fixed_identity() {
    let dir = scratch();
    let image = build_image(&test_app("linux_ids.c"), dir.path(), &[]);
    let calls = |own_u: &str, own_g: &str, groups: [&str; 4]| {
        format!(
            "ids {own_u} {own_g}\nsetresuid own: 0 -\nsetresuid -1: 0 -\nsetresuid other: -1 Operation not permitted\n\
setresgid own: 0 -\nsetresgid other: -1 Operation not permitted\nsetreuid own: 0 -\nsetreuid other: -1 Operation not permitted\n\
setregid own: 0 -\nsetregid other: -1 Operation not permitted\nsetfsuid: {own_u} -\nsetfsgid: {own_g} -\n\
setgroups empty: {}\nsetgroups one: {}\nsetgroups too many: {}\nsetgroups bad list: {}\n",
            groups[0], groups[1], groups[2], groups[3]
        )
    };
    let eperm = "-1 Operation not permitted";
    let root = calls("0", "0", ["0 -", eperm, "-1 Invalid argument", "-1 Bad address"]);
    let user = calls("1000", "100", [eperm; 4]);
    for t in tenders() {
        for (args, want) in [(&[][..], &root), (&["--user", "1000:100"][..], &user)] {
            let s = output(shoal_run(t).args(args).arg(&image));
            assert_eq!(stdout(&s), *want, "{t} {args:?}: stderr {}", stderr(&s));
            assert_eq!((s.status.code(), stderr(&s)), (Some(0), String::new()), "{t} {args:?}");
        }
    }
}
