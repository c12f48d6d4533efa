//! What the experiments read about processes and the machine from /proc:
//! process trees, CPU time, proportional and resident set sizes, and the
//! machine's memory. Every reader returns 0 (or nothing) for a process
//! that has gone: a sample taken while an instance exits is a smaller
//! number, not an error.

use std::collections::HashMap;

/// Every process's children, from the parent field of /proc/*/stat.
pub fn children_map() -> HashMap<u32, Vec<u32>> {
    let mut m: HashMap<u32, Vec<u32>> = HashMap::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return m;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(ppid) = stat_fields(pid).and_then(|f| f.get(1).and_then(|p| p.parse().ok())) {
            m.entry(ppid).or_default().push(pid);
        }
    }
    m
}

/// `root` and its descendants in `kids` (from [`children_map`]; one map
/// serves many roots sampled at the same moment).
pub fn descendants(kids: &HashMap<u32, Vec<u32>>, root: u32) -> Vec<u32> {
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        if let Some(k) = kids.get(&out[i]) {
            out.extend(k);
        }
        i += 1;
    }
    out
}

/// `root` and its descendants now.
pub fn tree(root: u32) -> Vec<u32> {
    descendants(&children_map(), root)
}

/// CPU time in nanoseconds that `root` and its descendants have run so
/// far, every thread counted (`/proc/PID/task/TID/schedstat`'s first
/// field): what a start cost, whatever the load made it wait.
pub fn tree_cpu_ns(root: u32) -> u64 {
    let mut ns = 0;
    for pid in tree(root) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for t in tasks.flatten() {
            let s = std::fs::read_to_string(t.path().join("schedstat")).unwrap_or_default();
            ns += s.split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    ns
}

/// The fields of /proc/PID/stat after the command name (state first).
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Whether `pid` exists and is neither a zombie nor dead.
pub fn alive(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|s| s != "Z" && s != "X"))
}

/// Clock ticks per second of /proc's tick counts.
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf only reads a configuration value.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64
}

/// CPU time (ns) of `pid`'s threads (schedstat run time, ns resolution),
/// without its reaped children's.
pub fn threads_cpu_ns(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| rd.flatten().filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok()?.split_whitespace().next()?.parse::<u64>().ok()).sum())
        .unwrap_or(0)
}

/// Host CPU time (ns) spent by `pids`: each thread's run time, plus the
/// CPU time of their reaped children (cutime + cstime, clock ticks).
pub fn cpu_ns(pids: &[u32]) -> u64 {
    let tck = clock_ticks();
    let mut total = 0u64;
    for &pid in pids {
        total += threads_cpu_ns(pid);
        if let Some(f) = stat_fields(pid) {
            let ticks: u64 = [13, 14].iter().filter_map(|&i| f.get(i).and_then(|v| v.parse::<u64>().ok())).sum();
            total += ticks * 1_000_000_000 / tck;
        }
    }
    total
}

/// CPU time (user + system, seconds) of this process's children that have
/// ended and been waited for, their own waited-for children included.
pub fn children_cpu() -> f64 {
    // SAFETY: getrusage writes the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN cannot fail with a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(u.ru_utime) + s(u.ru_stime)
}

/// A "Key:   N kB" value of a /proc file's text.
fn kib_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok())
}

/// Proportional set size (KiB) of `pid`, from smaps_rollup.
pub fn pss_kib(pid: u32) -> u64 {
    kib_field(&std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default(), "Pss:").unwrap_or(0)
}

/// (total PSS, PSS of mappings of files under `dir`) of `pid` in KiB, from
/// smaps (per mapping: what the library pool's files account for).
pub fn pss_split_kib(pid: u32, dir: Option<&str>) -> (u64, u64) {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/smaps")) else { return (0, 0) };
    let (mut total, mut under) = (0, 0);
    let mut in_dir = false;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Pss:") {
            let kib: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            total += kib;
            if in_dir {
                under += kib;
            }
        } else if line.split_whitespace().next().is_some_and(|f| f.contains('-') && !f.ends_with(':')) {
            in_dir = dir.is_some_and(|d| line.contains(d));
        }
    }
    (total, under)
}

/// A "Vm…:" value (KiB) of /proc/PID/status, e.g. `VmRSS:` or `VmPTE:`.
pub fn status_kib(pid: u32, key: &str) -> u64 {
    kib_field(&std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default(), key).unwrap_or(0)
}

/// Resident set size (KiB) of `pid` and its descendants together.
pub fn tree_rss_kib(pid: u32) -> u64 {
    tree(pid).into_iter().map(|p| status_kib(p, "VmRSS:")).sum()
}

/// A /proc/meminfo value in KiB (0 if absent).
pub fn meminfo_kib(key: &str) -> u64 {
    kib_field(&std::fs::read_to_string("/proc/meminfo").unwrap_or_default(), key).unwrap_or(0)
}

/// Memory in use on the machine (MemTotal − MemAvailable), KiB.
pub fn meminfo_used_kib() -> u64 {
    meminfo_kib("MemTotal:").saturating_sub(meminfo_kib("MemAvailable:"))
}

/// What a set of processes and the machine had done by some moment (see
/// [`Usage::since`]).
pub struct Usage {
    /// The processes' CPU time (schedstat run time of their threads), ns.
    cpu_ns: u64,
    /// The machine's busy time (/proc/stat: every CPU's time not idle or
    /// waiting for I/O), clock ticks.
    machine_ticks: u64,
    voluntary: u64,
    involuntary: u64,
    migrations: u64,
}

/// What a set of processes and the machine did between two [`Usage`]s.
pub struct CallUsage {
    /// CPU time of the processes.
    pub cpu_ms: f64,
    /// Busy time of all CPUs together (clock-tick resolution).
    pub machine_ms: f64,
    /// Context switches of the processes' threads: waits (voluntary) and
    /// preemptions by the host's scheduler (involuntary).
    pub voluntary: u64,
    pub involuntary: u64,
    /// Moves of the processes' threads to another CPU.
    pub migrations: u64,
}

impl Usage {
    /// The readings of `pids` and the machine now.
    pub fn now(pids: &[u32]) -> Usage {
        let mut u = Usage { cpu_ns: 0, machine_ticks: 0, voluntary: 0, involuntary: 0, migrations: 0 };
        for &pid in pids {
            let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            for t in rd.flatten() {
                let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
                u.cpu_ns += read("schedstat").split_whitespace().next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                let field = |text: &str, key: &str| -> u64 {
                    text.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim_start_matches([' ', '\t', ':']).trim().parse().ok()).unwrap_or(0)
                };
                let status = read("status");
                u.voluntary += field(&status, "voluntary_ctxt_switches");
                u.involuntary += field(&status, "nonvoluntary_ctxt_switches");
                u.migrations += field(&read("sched"), "se.nr_migrations");
            }
        }
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        if let Some(cpu) = stat.lines().next().and_then(|l| l.strip_prefix("cpu ")) {
            let v: Vec<u64> = cpu.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            // user nice system idle iowait irq softirq steal (guest time is
            // already in user).
            u.machine_ticks = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| v.get(i)).sum();
        }
        u
    }

    /// What happened from `before` to `self`.
    pub fn since(&self, before: &Usage) -> CallUsage {
        let tck = clock_ticks() as f64;
        CallUsage {
            cpu_ms: self.cpu_ns.saturating_sub(before.cpu_ns) as f64 / 1e6,
            machine_ms: self.machine_ticks.saturating_sub(before.machine_ticks) as f64 * 1e3 / tck,
            voluntary: self.voluntary.saturating_sub(before.voluntary),
            involuntary: self.involuntary.saturating_sub(before.involuntary),
            migrations: self.migrations.saturating_sub(before.migrations),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let t = tree(me);
        let found = t.contains(&child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(t[0], me);
        assert!(found, "{t:?}");
        assert!(pss_kib(me) > 0);
        assert!(pss_split_kib(me, None).0 > 0);
        assert!(status_kib(me, "VmRSS:") > 0);
        assert!(alive(me));
        assert!(meminfo_used_kib() > 0);
    }
}
