//! Component recovery (`kernel/recover`): a panic
//! injected into a stateless kernel component (`shoal run --inject
//! COMPONENT:panic@N`, which also overwrites the component's memory before
//! panicking), or a wild write there (`wild-write`), reboots that
//! component alone and the program goes on with correct results, and so
//! does a hang there (`hang`: the call spins until the tender's watchdog,
//! `--watchdog MS`, stops it); so does a fault in a stateful component
//! (vfs, ramfs, process, net), whose state is rebuilt from its log; a
//! component that cannot be rebooted yet (mm), and a fault in the
//! application, still end the instance as before, and a long computation
//! in the application is not a hang; and a guest whose kernel never
//! returns (a hang with `--watchdog off`) is still stopped by SIGTERM from
//! the host (`--stop-timeout`, or a second signal). The program is
//! `apps/tests/recover.c`. Every test runs on each tender
//! `common::tenders()` finds (hvt with a visible skip otherwise).

mod common;
use common::*;

const ROUNDS: &str = "300";

/// The reboot lines in `err` for `component`: each must have the form
/// `shoal: rebooted COMPONENT in T µs (replayed 0 calls)` for a stateless
/// component.
fn reboot_lines(err: &str, component: &str) -> usize {
    let lines = reboots(err, component);
    for (replayed, log) in &lines {
        assert!(*replayed == 0 && log.is_none(), "a stateless component replays nothing: {err}");
    }
    lines.len()
}

/// The reboot lines in `err` for `component`, as (calls replayed, log
/// bytes): `shoal: rebooted COMPONENT in T µs (replayed N calls)`, with
/// `, log B bytes` before the `)` for a component with a log.
fn reboots(err: &str, component: &str) -> Vec<(u64, Option<u64>)> {
    let prefix = format!("shoal: rebooted {component} in ");
    err.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| {
            let (t, tail) = rest.split_once(' ').unwrap();
            assert!(t.parse::<f64>().is_ok(), "reboot time `{t}` is not a number");
            let inner = tail.strip_prefix("µs (replayed ").and_then(|r| r.strip_suffix(")")).unwrap_or_else(|| panic!("reboot line `{rest}`"));
            let (n, log) = match inner.split_once(" calls, log ") {
                Some((n, b)) => (n, Some(b.strip_suffix(" bytes").unwrap().parse().unwrap())),
                None => (inner.strip_suffix(" calls").unwrap(), None),
            };
            (n.parse().unwrap(), log)
        })
        .collect()
}

#[test]
fn an_injected_panic_reboots_a_stateless_component_and_the_program_goes_on() {
    let dir = scratch();
    let image = build_image(&test_app("recover.c"), dir.path(), &[]);
    for t in tenders() {
        for component in ["time", "sysinfo", "user"] {
            // Early, and well into the run.
            for at in ["1", "150"] {
                let o = output(shoal_run(t).arg("--inject").arg(format!("{component}:panic@{at}")).arg(&image).args(["--", ROUNDS]));
                let err = stderr(&o);
                assert_eq!(o.status.code(), Some(0), "{t} {component}@{at}: {err}");
                assert_eq!(stdout(&o), format!("ok {ROUNDS} rounds\n"), "{t} {component}@{at}: {err}");
                assert!(
                    err.contains(&format!("shoal: kernel panic in {component}: "))
                        && err.contains(&format!("injected fault: panic at call {at} into {component}")),
                    "{t} {component}@{at}: {err}"
                );
                assert_eq!(reboot_lines(&err, component), 1, "{t} {component}@{at}: {err}");
                assert!(!err.contains("panicked at") || err.matches("panicked at").count() == 1, "{t} {component}@{at}: {err}");
            }
        }
    }
}

/// A wild write (a write outside guest memory) inside a stateless
/// component: the tender hands the fault back to the kernel
/// (`Hypercall::FaultHandler`; spt: the SIGSEGV, hvt: the page fault the
/// CPL-0 stub reports), which reboots the component.
#[test]
fn an_injected_wild_write_reboots_the_component() {
    let dir = scratch();
    let image = build_image(&test_app("recover.c"), dir.path(), &[]);
    for t in tenders() {
        for component in ["time", "sysinfo", "user"] {
            let o = output(shoal_run(t).arg("--inject").arg(format!("{component}:wild-write@20")).arg(&image).args(["--", ROUNDS]));
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(0), "{t} {component}: {err}");
            assert_eq!(stdout(&o), format!("ok {ROUNDS} rounds\n"), "{t} {component}: {err}");
            assert!(err.contains(&format!("shoal: fault in {component}: SIGSEGV (invalid memory access at 0x8, rip ")), "{t} {component}: {err}");
            assert_eq!(reboot_lines(&err, component), 1, "{t} {component}: {err}");
        }
        // A component that cannot be rebooted yet: the usual crash.
        // (mm's first call is the stack of `threads`' second thread.)
        let o = output(shoal_run(t).args(["--inject", "mm:wild-write@1"]).arg(&image).args(["--", "threads", "10"]));
        assert_eq!(o.status.code(), Some(139), "{t}: {}", stderr(&o));
        assert_eq!(stdout(&o), "", "{t}");
        assert_eq!(reboot_lines(&stderr(&o), "mm"), 0, "{t}: {}", stderr(&o));
    }
}

/// `--rejuvenate-every`: the rebootable components are rebooted one by
/// one, in turn, while the program runs (here for at least 0.6 s, twelve
/// periods of 0.05 s, so at least six reboots are due whatever the
/// machine's speed), and its results stay right.
#[test]
fn rejuvenation_reboots_the_components_in_turn() {
    let dir = scratch();
    let image = build_image(&test_app("recover.c"), dir.path(), &[]);
    for t in tenders() {
        let o = output(shoal_run(t).args(["--rejuvenate-every", "0.05"]).arg(&image).args(["--", ROUNDS, "0.6"]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{t}: {err}");
        assert_eq!(stdout(&o), format!("ok {ROUNDS} rounds\n"), "{t}: {err}");
        let all = ["vfs", "ramfs", "time", "process", "sysinfo", "user", "net"];
        let counts: Vec<usize> = all.iter().map(|c| reboots(&err, c).len()).collect();
        assert!(counts.iter().all(|n| *n >= 1), "{t}: every component in turn: {counts:?}\n{err}");
        assert_eq!(counts.iter().sum::<usize>(), err.lines().count(), "{t}: only reboot lines: {err}");
        // In turn: vfs, ramfs, time, process, sysinfo, user, vfs, …
        let order: Vec<&str> = err.lines().map(|l| l.split(' ').nth(2).unwrap()).collect();
        for (i, c) in order.iter().enumerate() {
            assert_eq!(*c, all[i % all.len()], "{t}: {err}");
        }
    }
}

#[test]
fn without_an_injection_nothing_is_rebooted() {
    let dir = scratch();
    let image = build_image(&test_app("recover.c"), dir.path(), &[]);
    for t in tenders() {
        let o = output(shoal_run(t).arg(&image).args(["--", ROUNDS]));
        assert_eq!(o.status.code(), Some(0), "{t}: {}", stderr(&o));
        assert_eq!(stdout(&o), format!("ok {ROUNDS} rounds\n"));
        assert_eq!(stderr(&o), "", "{t}");
    }
}

#[test]
fn a_panic_in_a_component_not_rebootable_yet_ends_the_instance_naming_it() {
    let dir = scratch();
    let image = build_image(&test_app("recover.c"), dir.path(), &[]);
    for t in tenders() {
        // mm: its first call maps the stack of `threads`' second thread.
        let o = output(shoal_run(t).args(["--inject", "mm:panic@1"]).arg(&image).args(["--", "threads", "10"]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(134), "{t}: {err}");
        assert_eq!(stdout(&o), "", "{t}");
        assert!(err.contains("shoal: kernel panic in mm: "), "{t}: {err}");
        assert_eq!(reboot_lines(&err, "mm"), 0, "{t}: {err}");
    }
}

#[test]
fn a_fault_in_the_application_still_ends_the_instance() {
    let dir = scratch();
    let image = build_image(&test_app("recover.c"), dir.path(), &[]);
    for t in tenders() {
        let plain = output(shoal_run(t).arg(&image).args(["--", "crash"]));
        let injected = output(shoal_run(t).args(["--inject", "user:panic@1"]).arg(&image).args(["--", "crash"]));
        assert_eq!(plain.status.code(), Some(139), "{t}: {}", stderr(&plain));
        assert_eq!(injected.status.code(), Some(139), "{t}: {}", stderr(&injected));
        // The user component was rebooted (getuid answered 0), then the
        // application's own null write ended the instance as usual.
        assert_eq!(stdout(&plain), "uid 0\n");
        assert_eq!(stdout(&injected), "uid 0\n");
        assert_eq!(reboot_lines(&stderr(&injected), "user"), 1, "{t}: {}", stderr(&injected));
    }
}

#[test]
fn bad_inject_and_rejuvenate_flags_are_one_line_and_125() {
    let dir = scratch();
    let image = dir.path().join("none.img");
    for (spec, needle) in [
        ("time", "expected COMPONENT:KIND@N"),
        ("disk:panic@1", "unknown component (one of: plat, mm,"),
        ("time:segv@1", "fault kind `segv` is not supported"),
        ("time:panic@0", "N must be a call number"),
        ("every=0", "--rejuvenate-every 0: expected seconds"),
        ("every=soon", "--rejuvenate-every soon: expected seconds"),
        ("watchdog=0", "--watchdog 0: expected milliseconds"),
        ("watchdog=1.5", "--watchdog 1.5: expected milliseconds"),
        ("no-recover=time:panic@1", "--no-recover turns component recovery off; it cannot be used with --inject"),
    ] {
        let (flag, spec) = match spec.split_once('=') {
            Some(("every", v)) => ("--rejuvenate-every", v),
            Some(("watchdog", v)) => ("--watchdog", v),
            Some(("no-recover", v)) => ("--inject", v),
            _ => ("--inject", spec),
        };
        let extra: &[&str] = if needle.starts_with("--no-recover") { &["--no-recover"] } else { &[] };
        let o = output(shoal().args(["run", flag, spec]).args(extra).arg(&image));
        assert_eq!(o.status.code(), Some(125), "{spec}: {}", stderr(&o));
        assert_clean_error(&o, needle);
        let o = output(std::process::Command::new(env!("CARGO_BIN_EXE_shoal-tender")).args([flag, spec]).args(extra).arg(&image));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(125), "shoal-tender {spec}: {err}");
        assert!(!err.contains("panicked") && err.lines().count() == 1 && err.contains(needle), "{spec}: {err}");
    }
}

/// SQLite inserts into a database in ramfs, in many transactions, with a
/// panic or a wild write injected into vfs or ramfs (both rebuild their
/// state from the call log, `shoal_vfs::heal`): the shell finishes, the
/// database passes `PRAGMA integrity_check` and holds every committed row
/// (the same answers as a run without a fault), and the reboot line names
/// the component.
#[test]
fn sqlite_survives_a_reboot_of_vfs_or_ramfs() {
    use std::io::Write;
    let dir = scratch();
    let image = dir.path().join("sqlite-shell.img");
    let o = output(shoal().args(["recipe", "build", "sqlite-shell", "-o"]).arg(&image));
    assert!(o.status.success(), "{}", stderr(&o));
    let mut script = String::from(".open /tmp/rows.db\ncreate table t(a integer primary key, b text, c blob);\n");
    for i in 1..=150 {
        // Transactions of one and of several rows.
        if i % 10 == 0 {
            script +=
                &format!("begin; insert into t values ({i}, 'row {i}', zeroblob({})); insert into t values ({}, 'extra', x'ff'); commit;\n", i * 7, i + 1000);
        } else {
            script += &format!("insert into t values ({i}, printf('row %d', {i}), zeroblob({}));\n", i % 500);
        }
    }
    script += "select count(*), sum(a), sum(length(b)), sum(length(c)) from t;\nPRAGMA integrity_check;\n";
    let run = |cmd: &mut std::process::Command| {
        let mut child = cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    for t in tenders() {
        let plain = run(shoal_run(t).args(["-e", "HOME=/tmp"]).arg(&image));
        let want = stdout(&plain);
        assert!(want.starts_with("165|") && want.ends_with("\nok\n") && stderr(&plain).is_empty(), "{t}: {want} {}", stderr(&plain));
        for spec in ["vfs:panic@3", "vfs:panic@400", "vfs:wild-write@250", "ramfs:panic@5", "ramfs:panic@1500", "ramfs:wild-write@900"] {
            let o = run(shoal_run(t).args(["-e", "HOME=/tmp", "--inject", spec]).arg(&image));
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(0), "{t} {spec}: {err}");
            assert_eq!(stdout(&o), want, "{t} {spec}: {err}");
            let component = spec.split(':').next().unwrap();
            let lines = reboots(&err, component);
            assert_eq!(lines.len(), 1, "{t} {spec}: {err}");
            assert!(lines[0].1.is_some_and(|b| b > 0), "{t} {spec}: the log's size is reported: {err}");
        }
    }
}

/// What the program can observe of vfs and ramfs — descriptors, shared
/// offsets, status and close-on-exec flags, an unlinked open file, a
/// pipe's unread bytes, a renamed directory, contents, umask, working
/// directory — survives a reboot of either, early or late in the run
/// (`apps/tests/heal.c` checks it all after every round).
#[test]
fn descriptors_offsets_and_contents_survive_a_reboot() {
    let dir = scratch();
    let image = build_image(&test_app("heal.c"), dir.path(), &[]);
    for t in tenders() {
        for spec in ["vfs:panic@20", "vfs:panic@2500", "vfs:wild-write@1200", "ramfs:panic@40", "ramfs:panic@3000", "ramfs:wild-write@1500"] {
            let o = output(shoal_run(t).args(["--inject", spec]).arg(&image).args(["--", "300"]));
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(0), "{t} {spec}: {err}");
            assert_eq!(stdout(&o), "ok 300 rounds\n", "{t} {spec}: {err}");
            assert_eq!(reboots(&err, spec.split(':').next().unwrap()).len(), 1, "{t} {spec}: {err}");
        }
    }
}

/// Session-aware shrinking: 1,000,000 rounds of open/write/close of one
/// file leave a log the size of the state, not of the history. vfs and
/// ramfs are rebooted every 0.05 s meanwhile (each reboot replays the
/// log and reports its size), and the file's last contents are right.
#[test]
fn the_log_stays_bounded_under_a_million_open_write_close() {
    let dir = scratch();
    let image = build_image(&test_app("heal.c"), dir.path(), &[]);
    for t in tenders() {
        let o = output(shoal_run(t).args(["--rejuvenate-every", "0.05"]).arg(&image).args(["--", "loop", "1000000"]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{t}: {err}");
        assert_eq!(stdout(&o), "ok 1000000 loops\n", "{t}: {err}");
        let lines: Vec<_> = reboots(&err, "vfs").into_iter().chain(reboots(&err, "ramfs")).collect();
        assert!(lines.len() >= 2, "{t}: reboots of vfs and ramfs during the loop: {err}");
        for (replayed, log) in lines {
            let log = log.unwrap();
            assert!(log < 16 * 1024, "{t}: the log holds {log} bytes: {err}");
            assert!(replayed < 64, "{t}: {replayed} entries replayed: {err}");
        }
    }
}

/// process is rebooted from its log (`shoal_process::heal`): signal
/// handlers, ignored, blocked and pending signals, the alternate stack,
/// resource limits, a semaphore and a message queue survive a panic or a
/// wild write in it (`apps/tests/heal.c process` checks them every round),
/// and `recover.c`'s calls go on too.
#[test]
fn process_state_survives_a_reboot_of_process() {
    let dir = scratch();
    let heal = build_image(&test_app("heal.c"), dir.path(), &[]);
    let recover = build_image(&test_app("recover.c"), dir.path(), &[]);
    for t in tenders() {
        for spec in ["process:panic@5", "process:panic@1500", "process:wild-write@700"] {
            let o = output(shoal_run(t).args(["--inject", spec]).arg(&heal).args(["--", "process", "300"]));
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(0), "{t} {spec}: {err}");
            assert_eq!(stdout(&o), "ok 300 process rounds\n", "{t} {spec}: {err}");
            let lines = reboots(&err, "process");
            assert!(lines.len() == 1 && lines[0].1.is_some(), "{t} {spec}: {err}");
            let o = output(shoal_run(t).args(["--inject", spec]).arg(&recover).args(["--", ROUNDS]));
            assert_eq!(o.status.code(), Some(0), "{t} {spec}: {}", stderr(&o));
            assert_eq!(stdout(&o), format!("ok {ROUNDS} rounds\n"), "{t} {spec}");
        }
    }
}

/// net is rebooted from its log (`shoal_net::heal`): AF_UNIX pairs with
/// unread bytes, a queued datagram and a shut-down end, a socket option,
/// an eventfd counter, an armed timerfd and an epoll set with level- and
/// edge-triggered entries survive a panic, a wild write or a hang in it
/// (`apps/tests/heal.c net` checks them every round), early or late.
#[test]
fn epoll_eventfd_timerfd_and_unix_sockets_survive_a_reboot_of_net() {
    let dir = scratch();
    let image = build_image(&test_app("heal.c"), dir.path(), &[]);
    for t in tenders() {
        for spec in ["net:panic@5", "net:panic@2000", "net:wild-write@1000", "net:hang@1500"] {
            let o = output(shoal_run(t).args(["--watchdog", "100", "--inject", spec]).arg(&image).args(["--", "net", "300"]));
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(0), "{t} {spec}: {err}");
            assert_eq!(stdout(&o), "ok 300 net rounds\n", "{t} {spec}: {err}");
            let lines = reboots(&err, "net");
            assert!(lines.len() == 1 && lines[0].0 > 0 && lines[0].1.is_some(), "{t} {spec}: {err}");
        }
    }
}

/// The instance's loopback sockets are part of net's log: the TCP and UDP
/// echoes of `net_loopback.c` over 127.0.0.1 and ::1 (listeners, accepted
/// connections with unread bytes, queued datagrams, pending errors) print
/// what they print natively across a panic, a wild write or a hang in net
/// early, midway or late.
#[test]
fn loopback_sockets_survive_a_reboot_of_net() {
    let dir = scratch();
    let src = test_app("net_loopback.c");
    let image = build_image(&src, dir.path(), &[]);
    let native = output(&mut std::process::Command::new(build_native(&src, dir.path(), &[])));
    assert_eq!(native.status.code(), Some(0));
    for t in tenders() {
        for spec in ["net:panic@5", "net:panic@60", "net:panic@150", "net:wild-write@100", "net:hang@120"] {
            let o = output(shoal_run(t).args(["--watchdog", "100", "--inject", spec]).arg(&image));
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(0), "{t} {spec}: {err}");
            assert_eq!(stdout(&o), stdout(&native), "{t} {spec}: {err}");
            let lines = reboots(&err, "net");
            assert!(lines.len() == 1 && lines[0].0 > 0 && lines[0].1.is_some(), "{t} {spec}: {err}");
        }
    }
}

/// Session-aware shrinking in net's log: 100,000 rounds of a socket pair,
/// an eventfd and an epoll instance opened, used and closed leave a log
/// the size of the live state; net is rebooted every so often meanwhile
/// (rejuvenation every 0.01 s: each reboot replays the log and reports
/// its size). net is seventh in the rotation: at 0.05 s its first turn
/// came at 0.35 s, and a CI run once ended the loop before it (0.43 s here).
#[test]
fn net_log_stays_bounded_under_many_socket_sessions() {
    let dir = scratch();
    let image = build_image(&test_app("heal.c"), dir.path(), &[]);
    for t in tenders() {
        let o = output(shoal_run(t).args(["--rejuvenate-every", "0.01"]).arg(&image).args(["--", "netloop", "100000"]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{t}: {err}");
        assert_eq!(stdout(&o), "ok 100000 net loops\n", "{t}: {err}");
        let lines = reboots(&err, "net");
        assert!(!lines.is_empty(), "{t}: net rebooted during the loop: {err}");
        for (replayed, log) in lines {
            let log = log.unwrap();
            assert!(log < 8 * 1024, "{t}: net's log holds {log} bytes: {err}");
            assert!(replayed <= 8, "{t}: {replayed} entries replayed: {err}");
        }
    }
}

/// The log holds no copy of file data — it shares the file's pages — so a
/// program fills a 64 MiB guest with a file as far with the log as
/// without it (before, the log's copy halved that, then gave up), with
/// nothing on stderr, and a reboot of vfs in the middle of the filling
/// keeps the file and the program going.
#[test]
fn the_log_shares_file_pages_so_files_fill_memory_as_without_it() {
    let dir = scratch();
    let image = build_image(&test_app("heal.c"), dir.path(), &[]);
    for t in tenders() {
        let written = |o: &std::process::Output| -> u32 {
            let out = stdout(o);
            assert!(out.ends_with(" MiB\ndone\n"), "{t}: {out} {}", stderr(o));
            out.strip_prefix("wrote ").and_then(|r| r.split(' ').next()).and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{t}: {out}"))
        };
        let o = output(shoal_run(t).args(["--mem", "64M"]).arg(&image).args(["--", "fill", "60"]));
        assert_eq!((o.status.code(), stderr(&o).as_str()), (Some(0), ""), "{t}");
        let plain = written(&o);
        let o = output(shoal_run(t).args(["--mem", "64M", "--recover-stateful"]).arg(&image).args(["--", "fill", "60"]));
        assert_eq!((o.status.code(), stderr(&o).as_str()), (Some(0), ""), "{t}");
        let logged = written(&o);
        // The log's page lists cost a few bytes per page: at most a MiB
        // less (rounding of the 1 MiB writes).
        assert!(logged + 1 >= plain && plain > 18, "{t}: {logged} MiB with the log, {plain} without");
        let o = output(shoal_run(t).args(["--mem", "64M", "--inject", "vfs:panic@40"]).arg(&image).args(["--", "fill", "60"]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{t}: {err}");
        assert_eq!(reboots(&err, "vfs").len(), 1, "{t}: {err}");
        assert!(written(&o) + 1 >= plain, "{t}: {}", stdout(&o));
    }
}

/// The ticks `SHOAL_PREEMPT_STATS` made the tender report: (preemption,
/// watchdog-only).
fn ticks(err: &str) -> (u64, u64) {
    let n =
        |prefix: &str| err.lines().find_map(|l| l.strip_prefix(prefix)).and_then(|n| n.trim().parse().ok()).unwrap_or_else(|| panic!("no `{prefix}`: {err}"));
    (n("shoal: preemption ticks: "), n("shoal: watchdog ticks: "))
}

/// A hang (`--inject COMPONENT:hang@N`: the N-th call spins forever) in a
/// stateless component: the tender's watchdog (here 100 ms) stops the call
/// on the preemption tick, the kernel reboots the component and retries
/// the call, and the program ends with correct results.
#[test]
fn an_injected_hang_is_stopped_by_the_watchdog_and_the_component_rebooted() {
    let dir = scratch();
    let image = build_image(&test_app("recover.c"), dir.path(), &[]);
    for t in tenders() {
        for component in ["time", "sysinfo", "user"] {
            let o = output(
                shoal_run(t)
                    .env("SHOAL_PREEMPT_STATS", "1")
                    .args(["--watchdog", "100", "--inject"])
                    .arg(format!("{component}:hang@20"))
                    .arg(&image)
                    .args(["--", ROUNDS]),
            );
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(0), "{t} {component}: {err}");
            assert_eq!(stdout(&o), format!("ok {ROUNDS} rounds\n"), "{t} {component}: {err}");
            assert!(
                err.contains(&format!("shoal: hang in {component}: a call ran longer than the watchdog's 100 ms (stopped at rip 0x")),
                "{t} {component}: {err}"
            );
            assert_eq!(reboot_lines(&err, component), 1, "{t} {component}: {err}");
            let (preempt, watch) = ticks(&err);
            assert_eq!(preempt, 0, "{t} {component}: one thread: no preemption tick: {err}");
            assert!(watch >= 1, "{t} {component}: the watchdog ticked: {err}");
        }
        // Beside a second, spinning thread the tick runs at the preemption
        // period (10 ms) and ages the hung call all the same; the tick
        // never switches threads inside the kernel, so the spinner waits.
        let o = output(
            shoal_run(t).env("SHOAL_PREEMPT_STATS", "1").args(["--watchdog", "100", "--inject", "time:hang@300"]).arg(&image).args(["--", "threads", "2000"]),
        );
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{t} threads: {err}");
        assert_eq!(stdout(&o), "threads ok 2000\n", "{t} threads: {err}");
        assert!(err.contains("shoal: hang in time: "), "{t} threads: {err}");
        assert_eq!(reboot_lines(&err, "time"), 1, "{t} threads: {err}");
        assert!(ticks(&err).0 >= 10, "{t} threads: 100 ms of 10 ms preemption ticks at least: {err}");
    }
}

/// A long computation in the application (no system call for longer than
/// the watchdog's limit) is not a hang: no call into a component is in
/// progress, nothing is rebooted, the program ends as it would natively,
/// and no tick reaches it beyond the one that finds nothing to watch.
#[test]
fn a_long_computation_in_the_application_is_not_a_hang() {
    let dir = scratch();
    let image = build_image(&test_app("recover.c"), dir.path(), &[]);
    for t in tenders() {
        let o = output(shoal_run(t).env("SHOAL_PREEMPT_STATS", "1").args(["--watchdog", "20"]).arg(&image).args(["--", "spin", "300"]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{t}: {err}");
        assert_eq!(stdout(&o), "spun 300\n", "{t}: {err}");
        assert!(!err.contains("rebooted") && !err.contains("hang in"), "{t}: {err}");
        let (preempt, watch) = ticks(&err);
        assert_eq!(preempt, 0, "{t}: {err}");
        assert!(watch <= 1, "{t}: at most the tick that disarms: {err}");
    }
}

/// Short gated calls only, in a run shorter than the default limit (1 s):
/// no tick at all, as before the watchdog (see also
/// `item7_a_single_thread_gets_no_ticks`). `--no-recover` runs the same
/// program without gates, with the same results.
#[test]
fn short_calls_get_no_ticks_and_no_recover_runs_without_gates() {
    let dir = scratch();
    let image = build_image(&test_app("recover.c"), dir.path(), &[]);
    for t in tenders() {
        let o = output(shoal_run(t).env("SHOAL_PREEMPT_STATS", "1").arg(&image).args(["--", "100"]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{t}: {err}");
        assert_eq!(stdout(&o), "ok 100 rounds\n", "{t}: {err}");
        assert_eq!(ticks(&err), (0, 0), "{t}: {err}");
        let o = output(shoal_run(t).arg("--no-recover").arg(&image).args(["--", ROUNDS]));
        assert_eq!(o.status.code(), Some(0), "{t}: {}", stderr(&o));
        assert_eq!(stdout(&o), format!("ok {ROUNDS} rounds\n"));
        assert_eq!(stderr(&o), "", "{t}");
    }
}

/// A hostile guest and the watchdog (`apps/tests/watchdog_hostile.c`):
/// it registers a preemption area and a fault entry of its own, lies in
/// the watch words (a call into `time` that never ends), asks the tender
/// to watch and spins. The watchdog sends it to its own fault entry with
/// `FAULT_HANG` — lying only redirects itself — and the tender goes on.
/// Under `timeout 300`: a tender that never redirected would hang the
/// test (the bound only turns that into a failure; nothing is timed).
#[test]
fn a_guest_lying_in_the_watch_words_only_redirects_itself() {
    let dir = scratch();
    let image = build_image(&home().join("apps/tests/watchdog_hostile.c"), dir.path(), &[]);
    for t in tenders() {
        let o = output(std::process::Command::new("timeout").args(["300", env!("CARGO_BIN_EXE_shoal"), "run", "--tender", t, "--watchdog", "50"]).arg(&image));
        assert_eq!(
            stdout(&o),
            "own area: 0\nown fault entry: 0\nthe watchdog sent the program to its own fault entry with FAULT_HANG\n",
            "{t}: {}",
            stderr(&o)
        );
        assert_eq!(o.status.code(), Some(0), "{t}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{t}");
    }
}

/// The SQLite script of `sqlite_survives_a_reboot_of_vfs_or_ramfs`
/// (150 statements, 165 rows in one- and several-row transactions, then
/// the totals and `PRAGMA integrity_check`), and a runner that feeds it
/// on stdin.
fn sqlite_script() -> String {
    let mut script = String::from(".open /tmp/rows.db\ncreate table t(a integer primary key, b text, c blob);\n");
    for i in 1..=150 {
        if i % 10 == 0 {
            script +=
                &format!("begin; insert into t values ({i}, 'row {i}', zeroblob({})); insert into t values ({}, 'extra', x'ff'); commit;\n", i * 7, i + 1000);
        } else {
            script += &format!("insert into t values ({i}, printf('row %d', {i}), zeroblob({}));\n", i % 500);
        }
    }
    script + "select count(*), sum(a), sum(length(b)), sum(length(c)) from t;\nPRAGMA integrity_check;\n"
}

fn run_with_stdin(cmd: &mut std::process::Command, input: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// Checks a run with `--inject SPEC` where SPEC is a hang: it ended well,
/// the watchdog named the component, and that component alone was
/// rebooted, once, replaying its log.
fn assert_hang_recovered(t: &str, spec: &str, o: &std::process::Output) {
    let err = stderr(o);
    let component = spec.split(':').next().unwrap();
    assert_eq!(o.status.code(), Some(0), "{t} {spec}: {err}");
    assert!(err.contains(&format!("shoal: hang in {component}: a call ran longer than the watchdog's 100 ms (stopped at rip 0x")), "{t} {spec}: {err}");
    let lines = reboots(&err, component);
    assert!(lines.len() == 1 && lines[0].1.is_some_and(|b| b > 0), "{t} {spec}: one reboot, with its log: {err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("shoal: rebooted ")).count(), 1, "{t} {spec}: only {component} rebooted: {err}");
}

/// A hang (`--inject COMPONENT:hang@N`) in a stateful component during
/// SQLite's inserts into a database in ramfs: the watchdog (100 ms)
/// stops the call, the component is rebooted from its log and the call
/// retried; the database passes `PRAGMA integrity_check` and holds every
/// committed row (the same answers as a run without a fault).
#[test]
fn sqlite_survives_a_hang_in_vfs_or_ramfs() {
    let dir = scratch();
    let image = dir.path().join("sqlite-shell.img");
    let o = output(shoal().args(["recipe", "build", "sqlite-shell", "-o"]).arg(&image));
    assert!(o.status.success(), "{}", stderr(&o));
    let script = sqlite_script();
    for t in tenders() {
        let plain = run_with_stdin(shoal_run(t).args(["-e", "HOME=/tmp"]).arg(&image), &script);
        let want = stdout(&plain);
        assert!(want.starts_with("165|") && want.ends_with("\nok\n"), "{t}: {want} {}", stderr(&plain));
        for spec in ["vfs:hang@3", "vfs:hang@400", "ramfs:hang@5", "ramfs:hang@1500"] {
            let o = run_with_stdin(shoal_run(t).args(["-e", "HOME=/tmp", "--watchdog", "100", "--inject", spec]).arg(&image), &script);
            assert_eq!(stdout(&o), want, "{t} {spec}: {}", stderr(&o));
            assert_hang_recovered(t, spec, &o);
        }
    }
}

/// A hang in vfs, ramfs or process during `apps/tests/heal.c`:
/// descriptors, offsets, contents, the pipe's bytes (and in process's
/// case signal state, limits and IPC objects) survive, as after a panic.
#[test]
fn a_hang_in_a_stateful_component_is_stopped_and_its_state_survives() {
    let dir = scratch();
    let image = build_image(&test_app("heal.c"), dir.path(), &[]);
    for t in tenders() {
        for spec in ["vfs:hang@20", "vfs:hang@2500", "ramfs:hang@40", "ramfs:hang@3000"] {
            let o = output(shoal_run(t).args(["--watchdog", "100", "--inject", spec]).arg(&image).args(["--", "300"]));
            assert_eq!(stdout(&o), "ok 300 rounds\n", "{t} {spec}: {}", stderr(&o));
            assert_hang_recovered(t, spec, &o);
        }
        // `rw`: after one open, vfs is reached only through net's read
        // and write, whose gate (net's) is not watched itself: the hang
        // is caught because entering vfs starts the watch. At 100: a
        // write; at 900: a read (each is two calls into vfs: net looks
        // the descriptor up, then hands it over).
        for spec in ["vfs:hang@100", "vfs:hang@900", "vfs:panic@901"] {
            let o = output(shoal_run(t).args(["--watchdog", "100", "--inject", spec]).arg(&image).args(["--", "rw", "300"]));
            assert_eq!(stdout(&o), "ok 300 rw\n", "{t} {spec}: {}", stderr(&o));
            if spec.contains("hang") {
                assert_hang_recovered(t, spec, &o);
            } else {
                assert_eq!(o.status.code(), Some(0), "{t} {spec}: {}", stderr(&o));
                assert_eq!(reboots(&stderr(&o), "vfs").len(), 1, "{t} {spec}: {}", stderr(&o));
            }
        }
        for spec in ["process:hang@5", "process:hang@1500"] {
            let o = output(shoal_run(t).args(["--watchdog", "100", "--inject", spec]).arg(&image).args(["--", "process", "300"]));
            assert_eq!(stdout(&o), "ok 300 process rounds\n", "{t} {spec}: {}", stderr(&o));
            assert_hang_recovered(t, spec, &o);
        }
    }
}

/// `--log-shrink N` keeps closed sessions' records until N are pending
/// (VampOS's threshold) and `--log-report` prints the log's size at exit;
/// bad values are one line and 125.
#[test]
fn log_shrink_threshold_and_log_report() {
    let dir = scratch();
    let image = build_image(&test_app("heal.c"), dir.path(), &[]);
    for t in tenders() {
        for (n, pending_max, shrinks_min) in [("1", 0, 0), ("100", 99, 9), ("never", 1000, 0)] {
            let o = output(shoal_run(t).args(["--log-shrink", n, "--log-report"]).arg(&image).args(["--", "loop", "1000"]));
            let err = stderr(&o);
            assert_eq!((o.status.code(), stdout(&o).as_str()), (Some(0), "ok 1000 loops\n"), "{t} {n}: {err}");
            let line = err.lines().find_map(|l| l.strip_prefix("shoal: recovery log at exit: vfs+ramfs ")).unwrap_or_else(|| panic!("{t} {n}: {err}"));
            let num = |after: &str| -> u64 {
                let i = line.find(after).unwrap_or_else(|| panic!("{line}"));
                line[..i].rsplit([' ', '(']).next().and_then(|w| w.parse().ok()).unwrap_or_else(|| panic!("{line}"))
            };
            let (pending, shrinks) = (num(" closed sessions pending"), num(" shrinks"));
            assert!(pending <= pending_max && shrinks >= shrinks_min, "{t} {n}: {line}");
            if n == "never" {
                assert!(pending >= 1000, "{t}: {line}");
            }
        }
    }
    for bad in [&["--log-shrink", "0"][..], &["--log-shrink", "x"], &["--no-recover", "--log-report"], &["--no-recover", "--log-shrink", "5"]] {
        let o = output(shoal_run("spt").args(bad).arg(&image));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(125), "{bad:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{bad:?}: {err}");
    }
}

/// Starts `recover ready 1000` with the kernel's time component spinning
/// forever in its 50th call (`--watchdog off --inject time:hang@50`: a
/// kernel that never returns) and `extra` options, and waits for
/// "ready" (the spin comes right after it).
fn spinning_kernel(t: &str, image: &std::path::Path, extra: &[&str]) -> (std::process::Child, std::io::BufReader<std::process::ChildStdout>) {
    use std::io::BufRead;
    use std::process::Stdio;
    let mut child = shoal_run(t)
        .args(["--watchdog", "off", "--inject", "time:hang@50"])
        .args(extra)
        .arg(image)
        .args(["--", "ready", "1000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n", "{t}");
    // The 50th clock call comes microseconds after "ready"; a signal that
    // came before it would be taken (and the program die of it without
    // the tender's line).
    std::thread::sleep(std::time::Duration::from_millis(300));
    (child, out)
}

/// Waits for `child` (under a generous bound that only detects a hang:
/// the child is killed and the test fails) and returns its status and
/// stderr.
fn finish(t: &str, mut child: std::process::Child) -> (Option<i32>, String) {
    use std::io::Read;
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > std::time::Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{t}: shoal run did not end within 120 s of SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (status.code(), err)
}

fn sigterm(child: &std::process::Child) {
    // SAFETY: kill on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
}

/// A guest whose kernel never returns (a hang with the watchdog off) does
/// not take a forwarded SIGTERM: after `--stop-timeout` (here 2 s) the
/// tender stops it itself, with one line saying why and the status of a
/// death by SIGTERM (143), on every tender. Nothing after "ready" reaches
/// stdout.
#[test]
fn sigterm_stops_a_guest_whose_kernel_does_not_return() {
    use std::io::Read;
    let dir = scratch();
    let image = build_image(&test_app("recover.c"), dir.path(), &[]);
    for t in tenders() {
        let (child, mut out) = spinning_kernel(t, &image, &["--stop-timeout", "2"]);
        sigterm(&child);
        let (code, err) = finish(t, child);
        assert_eq!(code, Some(143), "{t}: {err}");
        assert!(err.contains("shoal: the guest did not take SIGTERM within 2 s (its kernel is not returning); stopping it\n"), "{t}: {err}");
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "", "{t}");
    }
}

/// A second SIGTERM while the first is untaken stops such a guest at once
/// (as a second Ctrl-C or `docker stop` after its timeout would): with a
/// grace of an hour, the line names the second signal as the reason. The
/// status is that of the untaken signal: SIGHUP then SIGTERM ends with
/// 129.
#[test]
fn a_second_sigterm_stops_a_guest_whose_kernel_does_not_return_at_once() {
    let dir = scratch();
    let image = build_image(&test_app("recover.c"), dir.path(), &[]);
    for t in tenders() {
        for (first, status, name) in [(libc::SIGTERM, 143, "SIGTERM"), (libc::SIGHUP, 129, "SIGHUP")] {
            let (child, _out) = spinning_kernel(t, &image, &["--stop-timeout", "3600"]);
            // SAFETY: kill on our own child's pid.
            assert_eq!(unsafe { libc::kill(child.id() as i32, first) }, 0);
            std::thread::sleep(std::time::Duration::from_millis(300));
            sigterm(&child);
            let (code, err) = finish(t, child);
            assert_eq!(code, Some(status), "{t} {name}: {err}");
            let line = format!("shoal: the guest did not take {name} before a second signal came (its kernel is not returning); stopping it\n");
            assert!(err.contains(&line), "{t} {name}: {err}");
        }
    }
}

/// spt with `--single-process` has no waiting parent to time the grace:
/// there the second signal stops such a guest (the instance's own handler
/// finds the first still untaken, writes the line and exits with 143).
#[test]
fn a_second_sigterm_stops_a_single_process_instance_whose_kernel_does_not_return() {
    let dir = scratch();
    let image = build_image(&test_app("recover.c"), dir.path(), &[]);
    let (child, _out) = spinning_kernel("spt", &image, &["--single-process"]);
    sigterm(&child);
    std::thread::sleep(std::time::Duration::from_millis(300));
    sigterm(&child);
    let (code, err) = finish("spt --single-process", child);
    assert_eq!(code, Some(143), "{err}");
    assert!(err.contains("shoal: the guest did not take SIGTERM before a second signal came (its kernel is not returning); stopping it\n"), "{err}");
}

/// `--stop-timeout` takes whole seconds; anything else is a one-line error.
#[test]
fn stop_timeout_must_be_whole_seconds() {
    let dir = scratch();
    let image = build_image(&test_app("recover.c"), dir.path(), &[]);
    for bad in ["0", "1.5", "soon"] {
        let o = output(shoal_run("spt").args(["--stop-timeout", bad]).arg(&image));
        assert_clean_error(&o, &format!("--stop-timeout {bad}: expected whole seconds, 1 to 86400 (e.g. 5)"));
    }
}
