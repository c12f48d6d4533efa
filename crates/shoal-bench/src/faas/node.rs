//! The `node` experiment of `shoal bench faas`: seed 002's Node.js
//! functions (apps/functions/node, served by the Node.js function runtime:
//! the host's /usr/bin/node with apps/functions/runtime/bootstrap.js) on
//! every backend, beside the C and Go ones of the other experiments:
//!
//! - cold start of the no-op (and of the Python runtime's no-op), `--repeat`
//!   times, each on a freshly deployed function (Fig. 3b);
//! - warm calls of the no-op (`--requests`, at most 200), and `--repeat`
//!   warm fib(35), matmul 1024², alloc 50 MiB and fileread 50 MiB on one
//!   kept instance (Figs. 8–10, 13; the paper ran these in Go only;
//!   matmul is 512² here: V8's 1024² took 8–15 s a call on this host,
//!   against Go's 1 s, which kept every run of the suite minutes longer);
//! - the static 50 MiB file with 4 clients (Fig. 12);
//! - a burst: the largest `--bursts` size of concurrent first requests to
//!   the no-op, each to a function of its own (one instance each), as the
//!   burst experiment does for C and the go experiment for Go (Fig. 4: the
//!   paper's only Node.js numbers are for bursts of 100);
//! - HTTP: `hey` on the no-op at 1 and up to 50 clients, straight to the
//!   instance and through the gateway (Fig. 11).

use super::{fire, note_failure, one_cold, say, Ctx, Outcome, Paper, Row, COLD_TIMEOUT_MS, FIB_N, REQUEST_TIMEOUT};
use crate::load::run_hey;
use crate::stats::{fixed, stats};
use crate::table;
use anyhow::Result;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// The host's interpreters the runtimes run (Debian's, by path).
const NODE: &str = "/usr/bin/node";
const PYTHON: &str = "/usr/bin/python3.11";

/// Deploy settings of runtime function `file` (`node/NAME.js` or
/// `python/NAME.py` under the built functions) on `backend`, with `extra`
/// on top.
fn settings(dir: &Path, runtime: &str, file: &str, backend: &str, extra: Value) -> Value {
    let mut v = json!({"runtime": runtime, "handler": dir.join(file), "backend": backend,
        "keep_warm_ms": 3_600_000u64, "timeout_ms": REQUEST_TIMEOUT.as_millis() as u64, "memory": "512M"});
    if file.ends_with("static.js") || file.ends_with("fileread.js") {
        v["fs"] = json!(dir.join("fs"));
    }
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    v
}

/// Why the experiment cannot run here, if it cannot.
fn missing(dir: &Path) -> Option<String> {
    if !Path::new(NODE).is_file() {
        return Some(format!("{NODE} is not installed (Debian's nodejs package)"));
    }
    let want = ["node/noop.js", "node/fib.js", "node/matmul.js", "node/alloc.js", "node/fileread.js", "node/static.js"];
    want.iter().find(|f| !dir.join(f).is_file()).map(|f| format!("apps/functions/build.sh did not copy {} (the Node.js handlers)", dir.join(f).display()))
}

/// The `node` experiment.
pub(super) fn node_functions(c: &Ctx) -> Result<Outcome> {
    let dir = c.fns.dir.as_path();
    if let Some(why) = missing(dir) {
        say(&format!("node: not measured: {why}"));
        return Ok(Outcome {
            json: json!({"unavailable": why}),
            table: format!("Node.js functions not measured: {why}.\n"),
            rows: vec![Row {
                what: "Cold start, Node.js no-op (ms, mean)".into(),
                paper: Paper { unikernel: "plot only (> 2× Linux VM)", runc: "plot only", gvisor: "plot only" },
                values: c.backends.iter().map(|&b| (b, "not run".to_string())).collect(),
            }],
            goals: vec![],
        });
    }
    let mut failures = Vec::new();
    let failures = &mut failures;
    let mut csv = Vec::new();
    // (what, backend) -> samples in ms.
    let mut res: BTreeMap<(String, &str), Vec<f64>> = BTreeMap::new();
    let one = json!({"concurrency": 1, "max_instances": 1, "timeout_ms": COLD_TIMEOUT_MS});
    let python = Path::new(PYTHON).is_file() && dir.join("python/noop.py").is_file();
    let mut colds = vec![("node-noop", "node", "node/noop.js")];
    if python {
        colds.push(("python-noop", "python", "python/noop.py"));
    }
    for rep in 0..c.o.repeat {
        for &(what, rt, file) in &colds {
            for &b in &c.backends {
                let name = format!("nc-{what}-{b}");
                match one_cold(c.gw, &name, &settings(dir, rt, file, b, one.clone())) {
                    Ok(dt) => {
                        res.entry((format!("cold {what}"), b)).or_default().push(dt * 1e3);
                        csv.push(format!("cold,{what},{b},{rep},{:.3},ms", dt * 1e3));
                    }
                    Err(e) => note_failure(failures, format!("node: cold start {what} on {b}, run {rep}: {e}")),
                }
                // spt and hvt start from a template by default: the same
                // cold start by exec beside it (interleaved, same load).
                if b == "spt" || b == "hvt" {
                    let mut exec = one.clone();
                    exec["template"] = json!(false);
                    match one_cold(c.gw, &name, &settings(dir, rt, file, b, exec)) {
                        Ok(dt) => {
                            res.entry((format!("cold {what}-exec"), b)).or_default().push(dt * 1e3);
                            csv.push(format!("cold,{what}-exec,{b},{rep},{:.3},ms", dt * 1e3));
                        }
                        Err(e) => note_failure(failures, format!("node: cold start {what} by exec on {b}, run {rep}: {e}")),
                    }
                }
            }
        }
    }
    for &(what, _, _) in &colds {
        for &b in &c.backends {
            c.gw.clear(&format!("nc-{what}-{b}"))?;
        }
    }
    // The burst of Node.js cold starts at the largest size asked (in s).
    let n = c.o.bursts.iter().copied().max().unwrap_or(0);
    let mut burst: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    if n > 0 {
        for &b in &c.backends {
            say(&format!("node: {n} concurrent Node.js cold starts on {b}"));
            let names: Vec<String> = (0..n).map(|i| format!("nb-{b}-{i}")).collect();
            let noop = settings(dir, "node", "node/noop.js", b, one.clone());
            for name in &names {
                c.gw.deploy(name, &noop)?;
            }
            let mut errs = 0;
            for (i, r) in fire(c.gw, &names).iter().enumerate() {
                match r {
                    Ok((dt, _)) => {
                        burst.entry(b).or_default().push(*dt);
                        csv.push(format!("burst{n},node-noop,{b},{i},{:.3},ms", dt * 1e3));
                    }
                    Err(e) => {
                        errs += 1;
                        if errs <= 3 {
                            note_failure(failures, format!("node: burst {n} on {b}, request {i}: {e}"));
                        }
                    }
                }
            }
            if errs > 3 {
                note_failure(failures, format!("node: burst {n} on {b}: {errs} requests failed in all"));
            }
            c.gw.clear_many(&names)?;
        }
    }
    // Warm: one instance kept, its first (cold) call not counted.
    let warm_calls = c.o.requests.clamp(1, 200);
    let warm: [(&str, &str, String, usize); 6] = [
        ("noop", "node/noop.js", "/".into(), warm_calls),
        ("fib", "node/fib.js", format!("/?n={FIB_N}"), c.o.repeat),
        ("matmul", "node/matmul.js", "/?n=512".into(), c.o.repeat),
        ("alloc", "node/alloc.js", "/?mb=50".into(), c.o.repeat),
        ("fileread", "node/fileread.js", "/".into(), c.o.repeat),
        ("static", "node/static.js", "/".into(), 0),
    ];
    for (what, file, rest, calls) in &warm {
        for &b in &c.backends {
            let name = format!("nw-{what}-{b}");
            // The no-op also takes the HTTP load: Node serves many connections at once.
            let conc = if *what == "noop" { 64 } else { 4 };
            if let Err(e) = c.gw.deploy_cold(&name, &settings(dir, "node", file, b, json!({"concurrency": conc, "max_instances": 1, "queue": 100_000}))) {
                note_failure(failures, format!("node: deploy {what} on {b}: {e:#}"));
                continue;
            }
            let first = c.gw.invoke(&name, rest, true);
            if !first.as_ref().is_ok_and(|r| r.status == 200) {
                let why = first.map(|r| format!("status {}: {}", r.status, r.text())).unwrap_or_else(|e| e.to_string());
                note_failure(failures, format!("node: {what} on {b}: the first call failed: {why}"));
                c.gw.clear(&name)?;
                continue;
            }
            for i in 0..*calls {
                let t0 = Instant::now();
                match c.gw.invoke(&name, rest, true) {
                    Ok(r) if r.status == 200 && !r.cold() => {
                        let ms = t0.elapsed().as_secs_f64() * 1e3;
                        res.entry((format!("warm {what}"), b)).or_default().push(ms);
                        csv.push(format!("warm,{what},{b},{i},{ms:.3},ms"));
                    }
                    Ok(r) => note_failure(failures, format!("node: {what} on {b}, call {i}: status {} (cold start: {})", r.status, r.cold())),
                    Err(e) => note_failure(failures, format!("node: {what} on {b}, call {i}: {e}")),
                }
            }
            if *what == "static" {
                match static_throughput(c, &name) {
                    Ok(mibs) => {
                        res.entry(("static".into(), b)).or_default().push(mibs);
                        csv.push(format!("static,static,{b},0,{mibs:.1},MiB/s"));
                    }
                    Err(e) => note_failure(failures, format!("node: static on {b}: {e} (the gateway's notes: {})", c.gw.gateway_notes(&name, 3))),
                }
            }
            if *what == "noop" {
                http_load(c, &name, b, &mut res, &mut csv, failures)?;
            }
            c.gw.clear(&name)?;
        }
    }
    let csv_path = c.o.out.join("node.csv");
    table::write_csv_lines(&csv_path, "what,function,backend,run,value,unit", &csv)?;
    let st = |w: &str, b: &str| res.get(&(w.to_string(), b)).map(|v| stats(v));
    let mut header = vec!["Node.js function".to_string()];
    header.extend(c.backends.iter().map(|b| b.to_string()));
    let mut keys: Vec<(String, String)> =
        vec![("cold start, no-op (ms)".into(), "cold node-noop".into()), ("cold start, no-op by exec (ms)".into(), "cold node-noop-exec".into())];
    if python {
        keys.push(("cold start, Python no-op (ms)".into(), "cold python-noop".into()));
        keys.push(("cold start, Python no-op by exec (ms)".into(), "cold python-noop-exec".into()));
    }
    keys.extend([
        ("warm no-op (ms)".to_string(), "warm noop".to_string()),
        (format!("warm fib({FIB_N}) (ms)"), "warm fib".into()),
        ("warm matmul 512² (ms)".into(), "warm matmul".into()),
        ("warm alloc 50 MiB (ms)".into(), "warm alloc".into()),
        ("warm fileread 50 MiB (ms)".into(), "warm fileread".into()),
    ]);
    let mut rows = Vec::new();
    for (label, k) in &keys {
        let mut r = vec![label.clone()];
        let none = |b: &str| if k.ends_with("-exec") && b != "spt" && b != "hvt" { "–" } else { "failed" };
        r.extend(c.backends.iter().map(|&b| st(k, b).map(|s| format!("{} (p95 {})", fixed(s.mean, 1), fixed(s.p95, 1))).unwrap_or_else(|| none(b).into())));
        rows.push(r);
    }
    let mut r = vec!["static 50 MiB, 4 clients (MiB/s)".to_string()];
    r.extend(c.backends.iter().map(|&b| st("static", b).map(|s| fixed(s.mean, 0)).unwrap_or_else(|| "failed".into())));
    rows.push(r);
    if n > 0 {
        let mut r = vec![format!("{n} concurrent cold starts, no-op (s, mean; max)")];
        r.extend(c.backends.iter().map(|&b| {
            burst
                .get(b)
                .map(|v| stats(v))
                .map(|s| format!("{} ({}; {} of {n} answered)", fixed(s.mean, 3), fixed(s.max, 3), s.n))
                .unwrap_or_else(|| "all failed".into())
        }));
        rows.push(r);
    }
    let levels = hey_levels(c);
    for &l in &levels {
        for via in ["direct", "gateway"] {
            let k = format!("http {via} {l}");
            let mut r = vec![format!("HTTP no-op, {l} clients, {via} (req/s)")];
            r.extend(c.backends.iter().map(|&b| st(&k, b).map(|s| fixed(s.mean, 0)).unwrap_or_else(|| "failed".into())));
            rows.push(r);
        }
    }
    let mut table = table::markdown(&header, &rows);
    table.push_str(&format!(
        "\nThe Node.js functions of apps/functions/node, each a handler served by the node runtime (Debian's /usr/bin/node, Node {}, with \
         apps/functions/runtime/bootstrap.js; spt and hvt run the unmodified executable with the host's /usr, /lib and /lib64 mounted read-only, \
         runc and runsc with them bind-mounted read-only, process runs it as it is). Means (p95) through shoal serve: {} cold starts per backend, \
         {warm_calls} warm no-op calls and {} of each workload on one kept instance (its first call not counted); HTTP: hey, {} requests per level, \
         2xx answers per second. On spt and hvt a cold start is a copy of the function's template (docs/serve.md); \"by exec\" is the same function deployed with \"template\": false, measured right after it.\n\
         Paper (Node.js): cold start and instructions plot only (Nanos and OSv more than twice the Linux microVM's); 100 concurrent cold starts Nanos and \
         OSv 3.6 s, Linux microVM 5.9 s, runc 6.4 s, gVisor 16.7 s (here: the burst row, at the largest --bursts size); the CPU, memory, network and file \
         workloads were Go only.\n",
        node_version(),
        c.o.repeat,
        c.o.repeat,
        c.o.requests
    ));
    let burst_json: serde_json::Map<String, Value> = burst.iter().map(|(b, v)| (b.to_string(), stats(v).json())).collect();
    let mut results = serde_json::Map::new();
    for ((k, b), v) in &res {
        let e = results.entry(k.replace(' ', "_")).or_insert_with(|| json!({}));
        e[*b] = stats(v).json();
    }
    let mean_row = |k: &str, digits: usize| -> BTreeMap<&'static str, String> {
        c.backends.iter().filter_map(|&b| st(k, b).map(|s| (b, fixed(s.mean, digits)))).collect()
    };
    let none = || Paper { unikernel: "– (Go only)", runc: "–", gvisor: "–" };
    let mut summary = vec![
        Row {
            what: "Cold start, Node.js no-op (ms, mean)".into(),
            paper: Paper { unikernel: "plot only (> 2× Linux VM)", runc: "plot only", gvisor: "plot only" },
            values: mean_row("cold node-noop", 1),
        },
        Row {
            what: "Warm call, Node.js no-op (ms, mean)".into(), paper: Paper { unikernel: "–", runc: "–", gvisor: "–" }, values: mean_row("warm noop", 1)
        },
        Row { what: format!("Node.js fib({FIB_N}) warm (ms)"), paper: none(), values: mean_row("warm fib", 1) },
        Row { what: "Node.js matmul 512² warm (ms)".into(), paper: none(), values: mean_row("warm matmul", 1) },
        Row { what: "Node.js alloc 50 MiB warm (ms)".into(), paper: none(), values: mean_row("warm alloc", 1) },
        Row { what: "Node.js fileread 50 MiB warm (ms)".into(), paper: none(), values: mean_row("warm fileread", 1) },
        Row { what: "Node.js static 50 MiB, 4 clients (MiB/s)".into(), paper: none(), values: mean_row("static", 0) },
    ];
    if let Some(&top) = levels.last() {
        summary.push(Row {
            what: format!("Node.js no-op req/s, {top} clients, direct"),
            paper: Paper { unikernel: "– (Go: 44,793 OSv)", runc: "–", gvisor: "–" },
            values: mean_row(&format!("http direct {top}"), 0),
        });
    }
    if n > 0 {
        summary.push(Row {
            what: format!("{n} concurrent Node.js cold starts (s, mean)"),
            paper: Paper { unikernel: "3.6 (100; Nanos, OSv)", runc: "6.4 (100)", gvisor: "16.7 (100)" },
            values: burst.iter().map(|(&b, v)| (b, fixed(stats(v).mean, 3))).collect(),
        });
    }
    if python {
        summary.push(Row {
            what: "Cold start, Python no-op (ms, mean)".into(),
            paper: Paper { unikernel: "–", runc: "–", gvisor: "–" },
            values: mean_row("cold python-noop", 1),
        });
    }
    Ok(Outcome {
        json: json!({"unit": "ms (static: MiB/s; http: req/s)", "runs": c.o.repeat, "warm_calls": warm_calls, "node": node_version(),
            "hey_requests": c.o.requests, "hey_levels": levels, "results": results,
            "burst": {"unit": "s", "concurrent": n, "results": burst_json}, "failures": failures.clone(), "csv": csv_path}),
        table,
        rows: summary,
        goals: vec![],
    })
}

/// `node --version` of the host's node.
fn node_version() -> String {
    std::process::Command::new(NODE)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().trim_start_matches('v').to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "?".into())
}

/// The client counts of the HTTP runs: 1 and `--max-clients` up to 50
/// (the other Node HTTP measurements' 50 connections).
fn hey_levels(c: &Ctx) -> Vec<usize> {
    let top = c.o.max_clients.min(50);
    if top > 1 {
        vec![1, top]
    } else {
        vec![1]
    }
}

/// 4 clients downloading the 50 MiB file through the gateway, 2 ×
/// `--repeat` downloads in all (at least 4): MiB/s.
fn static_throughput(c: &Ctx, name: &str) -> Result<f64, String> {
    let downloads = (2 * c.o.repeat).max(4).div_ceil(4) * 4;
    say(&format!("node: static: {downloads} downloads of 50 MiB by 4 clients ({name})"));
    super::static_downloads(c.gw.addr, name, downloads)
}

/// hey on the no-op `name` (its instance warm) at each level, straight to
/// the instance and through the gateway.
fn http_load(
    c: &Ctx,
    name: &str,
    b: &'static str,
    res: &mut BTreeMap<(String, &'static str), Vec<f64>>,
    csv: &mut Vec<String>,
    failures: &mut Vec<String>,
) -> Result<()> {
    if std::process::Command::new("hey").arg("-h").stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).status().is_err() {
        note_failure(failures, "node: HTTP not measured: hey is not installed (scripts/setup installs it)".into());
        return Ok(());
    }
    for l in hey_levels(c) {
        for via in ["direct", "gateway"] {
            let Some(inst) = c.gw.instances(name)?.into_iter().next() else {
                note_failure(failures, format!("node: HTTP {l} on {b}: no instance is running"));
                return Ok(());
            };
            let (url, ns) =
                if via == "direct" { (format!("http://{}/", inst.addr), inst.netns.clone()) } else { (format!("http://{}/fn/{name}/", c.gw.addr), None) };
            let n = c.o.requests.max(l);
            match run_hey(n, l, &url, ns.as_deref()) {
                Ok(h) => {
                    res.entry((format!("http {via} {l}"), b)).or_default().push(h.ok_rps());
                    csv.push(format!("http_{via}_{l},noop,{b},0,{:.1},req/s", h.ok_rps()));
                    if h.ok() < n as u64 {
                        note_failure(failures, format!("node: HTTP {l} clients on {b} {via}: {} of {n} requests failed", n as u64 - h.ok()));
                    }
                }
                Err(e) => note_failure(failures, format!("node: HTTP {l} clients on {b} {via}: {e}")),
            }
        }
    }
    Ok(())
}
