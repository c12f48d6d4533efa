//! The gateway's counters and histograms, written out as Prometheus text
//! (exposition format 0.0.4) by `GET /metrics`. Kept by hand: a handful of
//! series under one mutex do not need a metrics crate.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// Histogram bucket bounds, in seconds (cold starts and requests alike).
const BUCKETS: [f64; 14] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

#[derive(Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, secs: f64) {
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += secs;
    }

    fn write(&self, out: &mut String, name: &str, function: &str) {
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(out, "{name}_bucket{{function=\"{function}\",le=\"{b}\"}} {}", self.counts[i]);
        }
        let _ = writeln!(out, "{name}_bucket{{function=\"{function}\",le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{function=\"{function}\"}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{function=\"{function}\"}} {}", self.count);
    }
}

#[derive(Default)]
struct Inner {
    invocations: BTreeMap<(String, u16), u64>,
    cold_starts: BTreeMap<String, u64>,
    cold_start_seconds: BTreeMap<String, Histogram>,
    request_seconds: BTreeMap<String, Histogram>,
}

/// Everything counted since the gateway started.
#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

/// The gauges read from the dispatcher at scrape time, per function.
pub struct Gauges {
    /// Function name.
    pub function: String,
    /// Instances started that have not answered yet.
    pub starting: usize,
    /// Instances with no request in flight.
    pub warm: usize,
    /// Instances serving at least one request.
    pub busy: usize,
    /// Requests waiting for a free instance.
    pub queued: usize,
}

impl Metrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the counters
        // inconsistent enough to matter; keep serving them.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One invocation of `function` answered with `status` after `secs`.
    pub fn invocation(&self, function: &str, status: u16, secs: f64) {
        let mut m = self.lock();
        *m.invocations.entry((function.to_string(), status)).or_default() += 1;
        m.request_seconds.entry(function.to_string()).or_default().observe(secs);
    }

    /// Invocations answered so far, all functions and statuses.
    pub fn requests(&self) -> u64 {
        self.lock().invocations.values().sum()
    }

    /// An instance of `function` was started for a request.
    pub fn cold_start(&self, function: &str) {
        *self.lock().cold_starts.entry(function.to_string()).or_default() += 1;
    }

    /// A cold-started instance of `function` answered its first request
    /// `secs` after it was started (one that crashed first is not timed).
    pub fn cold_start_answered(&self, function: &str, secs: f64) {
        self.lock().cold_start_seconds.entry(function.to_string()).or_default().observe(secs);
    }

    /// The Prometheus text of every series.
    pub fn render(&self, gauges: &[Gauges]) -> String {
        let m = self.lock();
        let mut out = String::new();
        out.push_str("# HELP shoal_invocations_total Invocations answered, by function and HTTP status.\n# TYPE shoal_invocations_total counter\n");
        for ((f, s), n) in &m.invocations {
            let _ = writeln!(out, "shoal_invocations_total{{function=\"{f}\",status=\"{s}\"}} {n}");
        }
        out.push_str("# HELP shoal_cold_starts_total Instances started for a request.\n# TYPE shoal_cold_starts_total counter\n");
        for (f, n) in &m.cold_starts {
            let _ = writeln!(out, "shoal_cold_starts_total{{function=\"{f}\"}} {n}");
        }
        out.push_str("# HELP shoal_cold_start_duration_seconds From starting an instance to its first response head.\n# TYPE shoal_cold_start_duration_seconds histogram\n");
        for (f, h) in &m.cold_start_seconds {
            h.write(&mut out, "shoal_cold_start_duration_seconds", f);
        }
        out.push_str(
            "# HELP shoal_request_duration_seconds From receiving an invocation to the response head.\n# TYPE shoal_request_duration_seconds histogram\n",
        );
        for (f, h) in &m.request_seconds {
            h.write(&mut out, "shoal_request_duration_seconds", f);
        }
        out.push_str("# HELP shoal_instances Running instances, by function and state.\n# TYPE shoal_instances gauge\n");
        for g in gauges {
            for (state, n) in [("starting", g.starting), ("warm", g.warm), ("busy", g.busy)] {
                let _ = writeln!(out, "shoal_instances{{function=\"{}\",state=\"{state}\"}} {n}", g.function);
            }
        }
        out.push_str("# HELP shoal_queue_length Invocations waiting for a free instance.\n# TYPE shoal_queue_length gauge\n");
        for g in gauges {
            let _ = writeln!(out, "shoal_queue_length{{function=\"{}\"}} {}", g.function, g.queued);
        }
        out
    }
}
