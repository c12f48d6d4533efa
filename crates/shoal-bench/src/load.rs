//! Load generation and HTTP: the bench's own small HTTP/1.1 client (one
//! request per connection, timed as a client sees it), running `hey` and
//! reading its summary, and reading the summaries of wrk and
//! redis-benchmark.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A load generator's output could not be read, or a request failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// hey printed something without a line the bench needs.
    #[error("hey's output has no {0} line: it is not the summary hey prints")]
    HeyMissing(&'static str),
    /// A line hey printed could not be read.
    #[error("hey's output has an unreadable {what} line: {line:?}")]
    HeyBadLine { what: &'static str, line: String },
    /// A request failed on the wire.
    #[error("{method} {path} on the gateway failed: {source}")]
    Http { method: String, path: String, source: std::io::Error },
    /// The answer was not HTTP.
    #[error("{method} {path}: the gateway's answer is not HTTP: {line:?}")]
    NotHttp { method: String, path: String, line: String },
    /// No port could be had on loopback.
    #[error("cannot find a free port on 127.0.0.1: {0}")]
    NoPort(std::io::Error),
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> Result<u16, LoadError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(LoadError::NoPort)?;
    Ok(l.local_addr().map_err(LoadError::NoPort)?.port())
}

// ---------------------------------------------------------------------- hey

/// What one `hey` run reports.
#[derive(Clone, Debug, PartialEq)]
pub struct HeyResult {
    /// Wall time of the whole run.
    pub total_s: f64,
    /// hey's own rate: every request, failed ones included.
    pub hey_rps: f64,
    /// Mean latency (NaN if nothing was answered).
    pub average_s: f64,
    /// Latency percentiles hey prints (50% and 99%), if any.
    pub p50_s: Option<f64>,
    pub p99_s: Option<f64>,
    /// Answers per HTTP status.
    pub statuses: BTreeMap<u16, u64>,
    /// Requests that got no answer (connection errors, timeouts).
    pub errors: u64,
}

impl HeyResult {
    /// Answers with a 2xx status.
    pub fn ok(&self) -> u64 {
        self.statuses.iter().filter(|(s, _)| (200..300).contains(*s)).map(|(_, n)| n).sum()
    }

    /// Successful requests per second (hey's Requests/sec counts failures too).
    pub fn ok_rps(&self) -> f64 {
        if self.total_s > 0.0 {
            self.ok() as f64 / self.total_s
        } else {
            f64::NAN
        }
    }
}

/// Reads "  Name:\t1.234 secs"-like values.
fn hey_value(line: &str) -> Option<f64> {
    let v = line.split_once(':')?.1.split_whitespace().next()?;
    v.parse().ok()
}

/// A "[N]\tREST" line of hey's distributions: (N, REST).
fn hey_bracket(line: &str) -> Option<(u64, &str)> {
    let l = line.trim_start();
    let rest = l.strip_prefix('[')?;
    let (n, rest) = rest.split_once(']')?;
    Some((n.trim().parse().ok()?, rest.trim()))
}

/// Parses the summary `hey` prints.
pub fn parse_hey(text: &str) -> Result<HeyResult, LoadError> {
    #[derive(PartialEq)]
    enum Sec {
        Other,
        Latency,
        Status,
        Errors,
    }
    let (mut total, mut rps, mut avg) = (None, None, None);
    let (mut p50, mut p99) = (None, None);
    let mut statuses = BTreeMap::new();
    let mut errors = 0;
    let mut sec = Sec::Other;
    for line in text.lines() {
        let t = line.trim();
        if !line.starts_with([' ', '\t']) && !t.is_empty() {
            sec = match t {
                "Latency distribution:" => Sec::Latency,
                "Status code distribution:" => Sec::Status,
                "Error distribution:" => Sec::Errors,
                _ => Sec::Other,
            };
            continue;
        }
        let bad = |what| LoadError::HeyBadLine { what, line: line.to_string() };
        match sec {
            Sec::Other if t.starts_with("Total:") => total = Some(hey_value(t).ok_or_else(|| bad("Total"))?),
            Sec::Other if t.starts_with("Requests/sec:") => rps = Some(hey_value(t).ok_or_else(|| bad("Requests/sec"))?),
            // "NaN" when nothing was answered; parse() reads it as NaN.
            Sec::Other if t.starts_with("Average:") => avg = Some(hey_value(t).ok_or_else(|| bad("Average"))?),
            Sec::Latency if !t.is_empty() => {
                let (pct, rest) = t.split_once("% in ").ok_or_else(|| bad("latency distribution"))?;
                let v: f64 = rest.split_whitespace().next().and_then(|v| v.parse().ok()).ok_or_else(|| bad("latency distribution"))?;
                match pct.trim() {
                    "50" => p50 = Some(v),
                    "99" => p99 = Some(v),
                    _ => {}
                }
            }
            Sec::Status if !t.is_empty() => {
                let (code, rest) = hey_bracket(t).ok_or_else(|| bad("status code"))?;
                let n: u64 = rest.split_whitespace().next().and_then(|v| v.parse().ok()).ok_or_else(|| bad("status code"))?;
                let code = u16::try_from(code).map_err(|_| bad("status code"))?;
                *statuses.entry(code).or_insert(0) += n;
            }
            Sec::Errors if !t.is_empty() => errors += hey_bracket(t).ok_or_else(|| bad("error distribution"))?.0,
            _ => {}
        }
    }
    Ok(HeyResult {
        total_s: total.ok_or(LoadError::HeyMissing("Total"))?,
        hey_rps: rps.ok_or(LoadError::HeyMissing("Requests/sec"))?,
        average_s: avg.ok_or(LoadError::HeyMissing("Average"))?,
        p50_s: p50,
        p99_s: p99,
        statuses,
        errors,
    })
}

/// Runs `hey -n N -c CLIENTS URL` (inside the network namespace at `netns`
/// if given, through nsenter), at most 600 s, and reads its summary.
pub fn run_hey(n: usize, clients: usize, url: &str, netns: Option<&str>) -> Result<HeyResult, String> {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={ns}")).arg("hey");
            c
        }
        None => Command::new("hey"),
    };
    let mut child = cmd
        .args(["-n", &n.to_string(), "-c", &clients.to_string(), "-t", "30", url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run hey: {e}"))?;
    let mut out = child.stdout.take().ok_or("no stdout of hey")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if t0.elapsed() > Duration::from_secs(600) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("hey ran for more than 600 s and was stopped".into());
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(format!("cannot wait for hey: {e}")),
        }
    };
    let text = reader.join().unwrap_or_default();
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        return Err(format!("hey failed ({status}): {}", err.trim()));
    }
    parse_hey(&text).map_err(|e| e.to_string())
}

// ------------------------------------------------------- wrk, redis-benchmark

/// The number after `key` on wrk's output line that starts with it.
pub fn wrk_value(text: &str, key: &str) -> Option<f64> {
    text.lines().find_map(|l| l.trim().strip_prefix(key)).and_then(|v| v.split_whitespace().next()).and_then(|v| v.parse().ok())
}

/// The number of requests in wrk's `N requests in T, B read` line.
pub fn wrk_requests(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.trim().split_once(" requests in ").and_then(|(n, _)| n.trim().parse().ok()))
}

/// wrk's failed requests by kind: connect, read, write and timeout errors
/// (its `Socket errors:` line) and non-2xx or 3xx answers.
pub fn wrk_error_kinds(text: &str) -> [u64; 5] {
    let mut k = [0; 5];
    for l in text.lines().map(str::trim) {
        if let Some(rest) = l.strip_prefix("Socket errors:") {
            for part in rest.split(',') {
                let mut w = part.split_whitespace();
                let i = match w.next() {
                    Some("connect") => 0,
                    Some("read") => 1,
                    Some("write") => 2,
                    Some("timeout") => 3,
                    _ => continue,
                };
                k[i] += w.next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
            }
        }
        if let Some(rest) = l.strip_prefix("Non-2xx or 3xx responses:") {
            k[4] += rest.trim().parse::<u64>().unwrap_or(0);
        }
    }
    k
}

/// wrk's socket errors and non-2xx answers, summed.
pub fn wrk_errors(text: &str) -> u64 {
    wrk_error_kinds(text).iter().sum()
}

/// The requests per second of `op`'s row in redis-benchmark's --csv output.
pub fn redis_rps(csv: &str, op: &str) -> Option<f64> {
    csv.lines().find(|l| l.starts_with(&format!("\"{op}\","))).and_then(|l| l.split(',').nth(1)).and_then(|v| v.trim_matches('"').parse().ok())
}

// --------------------------------------------------------------- HTTP client

/// An HTTP answer (the body kept only when asked for).
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Body bytes received.
    pub bytes: u64,
}

impl Reply {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Whether the gateway says this answer came from a cold start.
    pub fn cold(&self) -> bool {
        self.header("x-shoal-cold-start") == Some("true")
    }

    /// The body as text, cut at 300 bytes (for error messages).
    pub fn text(&self) -> String {
        let s = String::from_utf8_lossy(&self.body);
        let s = s.trim();
        if s.len() > 300 {
            format!("{}…", &s[..s.floor_char_boundary(300)])
        } else {
            s.to_string()
        }
    }
}

/// One HTTP/1.1 request on its own connection (`Connection: close`), read
/// to the end: the time measured is the whole exchange, as a client sees it.
/// `token`: the gateway's, for its management API (invocations need none);
/// `keep`: keep the body (else it is only counted).
pub fn http(addr: SocketAddr, token: Option<&str>, method: &str, path: &str, body: Option<&[u8]>, keep: bool, timeout: Duration) -> Result<Reply, LoadError> {
    let wire = |source| LoadError::Http { method: method.into(), path: path.into(), source };
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(wire)?;
    s.set_read_timeout(Some(timeout)).map_err(wire)?;
    s.set_write_timeout(Some(timeout)).map_err(wire)?;
    let _ = s.set_nodelay(true);
    let b = body.unwrap_or_default();
    let ct = if body.is_some() { "Content-Type: application/json\r\n" } else { "" };
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{ct}{auth}Content-Length: {}\r\n\r\n", b.len());
    s.write_all(head.as_bytes()).and_then(|_| s.write_all(b)).map_err(wire)?;
    let mut r = BufReader::with_capacity(1 << 16, s);
    let mut line = String::new();
    r.read_line(&mut line).map_err(wire)?;
    let status = line.strip_prefix("HTTP/1.1 ").and_then(|l| l.get(..3)).and_then(|c| c.parse().ok()).ok_or_else(|| LoadError::NotHttp {
        method: method.into(),
        path: path.into(),
        line: line.trim().to_string(),
    })?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line).map_err(wire)? == 0 {
            break;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut body = Vec::new();
    let bytes = if keep { r.read_to_end(&mut body).map_err(wire)? as u64 } else { std::io::copy(&mut r, &mut std::io::sink()).map_err(wire)? };
    Ok(Reply { status, headers, body, bytes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hey_all_ok() {
        let h = parse_hey(include_str!("testdata/hey-200.txt")).unwrap();
        assert_eq!(h.statuses, BTreeMap::from([(200, 2000)]));
        assert_eq!((h.ok(), h.errors), (2000, 0));
        assert_eq!(h.total_s, 1.0079);
        assert_eq!(h.hey_rps, 1984.4124);
        assert_eq!(h.average_s, 0.0076);
        assert_eq!((h.p50_s, h.p99_s), (Some(0.0059), Some(0.0262)));
        assert!((h.ok_rps() - 2000.0 / 1.0079).abs() < 1e-9);
    }

    #[test]
    fn parses_hey_with_refusals() {
        let h = parse_hey(include_str!("testdata/hey-429.txt")).unwrap();
        assert_eq!(h.statuses, BTreeMap::from([(200, 118), (429, 882)]));
        assert_eq!(h.ok(), 118);
        assert_eq!(h.errors, 0);
        assert!(h.ok_rps() < h.hey_rps);
    }

    #[test]
    fn parses_hey_with_connection_errors_only() {
        let h = parse_hey(include_str!("testdata/hey-errors.txt")).unwrap();
        assert!(h.statuses.is_empty());
        assert_eq!(h.errors, 40);
        assert!(h.average_s.is_nan());
        assert_eq!((h.p50_s, h.p99_s), (None, None));
        // hey reports a rate although nothing was answered; the bench does not.
        assert!(h.hey_rps > 0.0);
        assert_eq!(h.ok_rps(), 0.0);
    }

    #[test]
    fn refuses_what_is_not_hey_output() {
        assert!(matches!(parse_hey("hello\n"), Err(LoadError::HeyMissing("Total"))));
        let bad = "Summary:\n  Total:\t1.0 secs\n  Average:\t0.1 secs\n  Requests/sec:\t10\n\nStatus code distribution:\n  [abc]\t3 responses\n";
        let e = parse_hey(bad).unwrap_err();
        assert!(e.to_string().contains("status code"), "{e}");
    }

    #[test]
    fn reads_wrk_and_redis_benchmark() {
        let wrk = "  1000 requests in 1.00s, 1.2MB read\n  Socket errors: connect 1, read 2, write 3, timeout 4\n  Non-2xx or 3xx responses: 5\nRequests/sec:   999.50\n";
        assert_eq!(wrk_requests(wrk), Some(1000));
        assert_eq!(wrk_error_kinds(wrk), [1, 2, 3, 4, 5]);
        assert_eq!(wrk_errors(wrk), 15);
        assert_eq!(wrk_value(wrk, "Requests/sec:"), Some(999.5));
        assert_eq!(redis_rps("\"SET\",\"12345.67\",\"0.1\"\n\"GET\",\"2.5\"\n", "GET"), Some(2.5));
        assert_eq!(redis_rps("", "GET"), None);
    }
}
