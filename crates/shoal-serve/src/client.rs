//! `shoal fn`: deploy, list, remove, follow and invoke functions through
//! a running `shoal serve` (its HTTP API; `--gateway`/`SHOAL_GATEWAY`:
//! `http://HOST:PORT` or `HOST:PORT`), authenticated
//! with the gateway's token: `--token`/`SHOAL_TOKEN`, or for a gateway on
//! loopback the `token` file of its state directory (`--state`, default
//! the gateway's default), which this user can read when it is the
//! gateway's. The file's token is never sent to another host.

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use clap::Subcommand;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;

/// The `shoal fn` subcommands.
// One value per command line: Deploy's size costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum FnCmd {
    /// Deploy (or update) a function: `shoal fn deploy NAME IMAGE [--backend spt|hvt|process|runc|runsc] …`,
    /// or `shoal fn deploy NAME --runtime node HANDLER.js` (`--runtime python HANDLER.py`).
    Deploy {
        /// The function's name.
        name: String,
        /// The image (a shoal image; the native static build for process, runc, runsc); with
        /// --runtime, the handler file.
        image: PathBuf,
        /// spt (default), hvt, process, runc or runsc.
        #[arg(long)]
        backend: Option<String>,
        /// node or python: IMAGE is a handler file whose `handle(req)` the host's interpreter
        /// (/usr/bin/node, /usr/bin/python3.11) serves.
        #[arg(long)]
        runtime: Option<String>,
        /// Guest memory for spt/hvt (e.g. 256M).
        #[arg(long)]
        memory: Option<String>,
        /// Requests one instance serves at once (default 1; say more only
        /// if the function serves several connections at once).
        #[arg(long)]
        concurrency: Option<u32>,
        /// The most instances at once.
        #[arg(long)]
        max_instances: Option<u32>,
        /// Requests that may wait for an instance (beyond: 429).
        #[arg(long)]
        queue: Option<u32>,
        /// Milliseconds an instance has to answer (beyond: 504).
        #[arg(long)]
        timeout_ms: Option<u64>,
        /// Milliseconds an idle instance is kept.
        #[arg(long)]
        keep_warm_ms: Option<u64>,
        /// Root file system directory of the instances.
        #[arg(long)]
        fs: Option<PathBuf>,
        /// spt/hvt memory mode: copy (default; pool for an executable of 32 MiB or more on spt), ksm or pool.
        #[arg(long = "mem-mode")]
        mem_mode: Option<String>,
        /// spt: cold starts as copies of a template booted at deploy
        /// (true, the default) or by exec (false).
        #[arg(long)]
        template: Option<bool>,
        /// spt/hvt template: where it stops, `listen` (the default: the
        /// program's first wait for a connection) or `explicit` (its first
        /// write to /dev/shoal/ready).
        #[arg(long)]
        ready: Option<String>,
        /// Requests one instance serves before it is stopped (0, the
        /// default: no limit; 1: every request on a fresh instance).
        #[arg(long)]
        requests_per_instance: Option<u64>,
        /// An environment variable KEY=VALUE (repeatable).
        #[arg(long = "env", short = 'e', value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// A host directory or file served live at GUEST in the instances,
        /// read-only (`ro`) or writable (`rw`), as `shoal run --mount`
        /// (repeatable; the gateway takes HOST only beneath its
        /// --allow-path directories).
        #[arg(long = "mount", value_name = "HOST:GUEST:ro|rw")]
        mount: Vec<String>,
        /// Send the image to the gateway (`POST /images`) instead of naming
        /// its path: for a gateway on another machine or another user's.
        #[arg(long)]
        upload: bool,
    },
    /// List the deployed functions.
    Ls,
    /// Remove functions (their instances are stopped).
    Rm {
        /// The functions' names.
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Print a function's instance output; `-f` keeps following it.
    Logs {
        /// The function's name.
        name: String,
        /// Keep printing new lines as they come.
        #[arg(short, long)]
        follow: bool,
    },
    /// Invoke a function and print its answer.
    Invoke {
        /// The function's name.
        name: String,
        /// Path and query after /fn/NAME (e.g. "/?n=20").
        #[arg(long, default_value = "/")]
        path: String,
        /// The request body; `@FILE` reads it from FILE (then the method is POST).
        #[arg(long)]
        data: Option<String>,
        /// The HTTP method (GET, or POST with --data).
        #[arg(long, short = 'X')]
        method: Option<String>,
    },
}

/// Whether `gateway` (a URL) names this machine's loopback.
fn is_loopback(gateway: &str) -> bool {
    let Ok(uri) = gateway.parse::<hyper::Uri>() else { return false };
    let Some(host) = uri.host() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The token to send: the one given, else (loopback only) the gateway's
/// `token` file, if this user can read it.
fn find_token(gateway: &str, token: Option<String>, state: Option<PathBuf>) -> Option<String> {
    if let Some(t) = token.filter(|t| !t.trim().is_empty()) {
        return Some(t.trim().to_string());
    }
    if !is_loopback(gateway) {
        return None;
    }
    let dir = state.or_else(|| crate::spec::default_state_dir().ok())?;
    crate::auth::read_token(&dir)
}

/// `--gateway`/`SHOAL_GATEWAY` as the URL requests are made to (no
/// trailing `/`): `http://HOST:PORT`, or `HOST:PORT` (`localhost`
/// included), which means the same over http.
fn gateway_url(gateway: &str) -> Result<String> {
    let g = gateway.trim().trim_end_matches('/');
    let url = if g.contains("://") { g.to_string() } else { format!("http://{g}") };
    let uri: hyper::Uri = url.parse().map_err(|_| anyhow!("--gateway {gateway}: expected http://HOST:PORT, HOST:PORT or localhost:PORT"))?;
    anyhow::ensure!(uri.scheme_str() == Some("http"), "--gateway {gateway}: only http:// is supported (the gateway speaks plain HTTP)");
    anyhow::ensure!(uri.host().is_some_and(|h| !h.is_empty()), "--gateway {gateway}: no host: expected http://HOST:PORT, HOST:PORT or localhost:PORT");
    anyhow::ensure!(
        uri.path_and_query().is_none_or(|p| p.as_str() == "/"),
        "--gateway {gateway}: give the gateway's address only, without a path (e.g. http://127.0.0.1:8640)"
    );
    Ok(url)
}

/// Runs a `shoal fn` subcommand against `gateway`.
pub fn run(gateway: &str, token: Option<String>, state: Option<PathBuf>, cmd: FnCmd) -> Result<i32> {
    let gw = gateway_url(gateway)?;
    let token = find_token(&gw, token, state);
    let auth = token.as_deref().map(|t| format!("Bearer {t}"));
    let auth = auth.as_deref();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        match cmd {
            FnCmd::Deploy {
                name,
                image,
                backend,
                runtime,
                memory,
                concurrency,
                max_instances,
                queue,
                timeout_ms,
                keep_warm_ms,
                fs,
                mem_mode,
                template,
                ready,
                requests_per_instance,
                env,
                mount,
                upload,
            } => {
                let abs = |p: PathBuf| std::path::absolute(&p).with_context(|| format!("cannot resolve {}", p.display()));
                if runtime.is_some() && upload {
                    bail!("--upload sends an image; a --runtime function's handler is read by the gateway from its path");
                }
                let image = if let Some(rt) = &runtime {
                    let mut body = json!({ "runtime": rt });
                    body["handler"] = json!(abs(image)?);
                    body
                } else if upload {
                    let bytes = std::fs::read(&image).with_context(|| format!("cannot read the image {}", image.display()))?;
                    let (status, b) = call(&gw, auth, "POST", "/images", Some(("application/octet-stream", bytes))).await?;
                    let v = api_ok(status, &b)?;
                    json!({ "image": v["image"].as_str().ok_or_else(|| anyhow!("the gateway's answer to the upload names no image"))? })
                } else {
                    json!({ "image": abs(image)? })
                };
                let mut body = image;
                let mut set = |k: &str, v: Value| {
                    if !v.is_null() {
                        body[k] = v;
                    }
                };
                set("backend", json!(backend));
                set("memory", json!(memory));
                set("concurrency", json!(concurrency));
                set("max_instances", json!(max_instances));
                set("queue", json!(queue));
                set("timeout_ms", json!(timeout_ms));
                set("keep_warm_ms", json!(keep_warm_ms));
                set("mem_mode", json!(mem_mode));
                set("template", json!(template));
                set("ready", json!(ready));
                set("requests_per_instance", json!(requests_per_instance));
                if let Some(fs) = fs {
                    set("fs", json!(abs(fs)?));
                }
                if !mount.is_empty() {
                    let mut mounts = Vec::new();
                    for m in mount {
                        // HOST is named to the gateway as an absolute path
                        // (it resolves nothing against its own directory).
                        let (host, rest) = m
                            .split_once(':')
                            .filter(|(h, r)| !h.is_empty() && r.contains(':'))
                            .ok_or_else(|| anyhow!("--mount {m}: expected HOST:GUEST:ro|rw"))?;
                        mounts.push(json!(format!("{}:{rest}", abs(PathBuf::from(host))?.display())));
                    }
                    set("mounts", Value::Array(mounts));
                }
                if !env.is_empty() {
                    let mut m = serde_json::Map::new();
                    for e in env {
                        let (k, v) = e.split_once('=').ok_or_else(|| anyhow!("-e {e}: expected KEY=VALUE"))?;
                        m.insert(k.into(), json!(v));
                    }
                    set("env", Value::Object(m));
                }
                let (status, b) =
                    call(&gw, auth, "PUT", &format!("/functions/{}", segment(&name)), Some(("application/json", body.to_string().into_bytes()))).await?;
                let v = api_ok(status, &b)?;
                let what = match (v["runtime"].as_str(), v["handler"].as_str()) {
                    (Some(rt), Some(h)) => format!("{rt} runtime, handler {h}"),
                    _ => format!("image {}", v["executable"].as_str().or(v["image"].as_str()).unwrap_or("?")),
                };
                println!("{} {} ({}, {what})", if status == 201 { "deployed" } else { "updated" }, name, v["backend"].as_str().unwrap_or("?"));
                if status != 201 {
                    // A deploy replaces the function's settings whole.
                    println!("(settings not given on this command line are back to their defaults: see `shoal fn ls`)");
                }
                Ok(0)
            }
            FnCmd::Ls => {
                let (status, b) = call(&gw, auth, "GET", "/functions", None).await?;
                let v = api_ok(status, &b)?;
                println!("{:<20} {:<8} {:>5} {:>5} {:>9} {:>10} {:>7} {:>4}  IMAGE", "NAME", "BACKEND", "CONC", "MAX", "TIMEOUT", "KEEP-WARM", "MEMORY", "ENV");
                for f in v.as_array().into_iter().flatten() {
                    println!(
                        "{:<20} {:<8} {:>5} {:>5} {:>7}ms {:>8}ms {:>7} {:>4}  {}",
                        f["name"].as_str().unwrap_or(""),
                        f["backend"].as_str().unwrap_or(""),
                        f["concurrency"].to_string(),
                        f["max_instances"].to_string(),
                        f["timeout_ms"].to_string(),
                        f["keep_warm_ms"].to_string(),
                        f["memory"].as_str().unwrap_or("-"),
                        // How many variables; their values may be secrets.
                        f["env"].as_object().map_or(0, |m| m.len()),
                        f["handler"].as_str().or(f["executable"].as_str()).or(f["image"].as_str()).unwrap_or("")
                    );
                }
                Ok(0)
            }
            FnCmd::Rm { names } => {
                // Each in turn; the first refusal ends the command.
                for name in names {
                    let (status, b) = call(&gw, auth, "DELETE", &format!("/functions/{}", segment(&name)), None).await?;
                    api_ok(status, &b)?;
                    println!("removed {name}");
                }
                Ok(0)
            }
            FnCmd::Logs { name, follow } => {
                let path = format!("/functions/{}/logs{}", segment(&name), if follow { "?follow=1" } else { "" });
                let resp = send(&gw, auth, "GET", &path, None).await?;
                let status = resp.status().as_u16();
                if status != 200 {
                    let b = resp.into_body().collect().await?.to_bytes();
                    api_ok(status, &b)?;
                    bail!("the gateway answered {status}");
                }
                let mut body = resp.into_body();
                let mut pending = Vec::new();
                let mut out = std::io::stdout();
                while let Some(frame) = body.frame().await {
                    if let Ok(data) = frame?.into_data() {
                        pending.extend_from_slice(&data);
                        while let Some(i) = pending.iter().position(|&c| c == b'\n') {
                            let line: Vec<u8> = pending.drain(..=i).collect();
                            if let Ok(l) = serde_json::from_slice::<Value>(&line) {
                                writeln!(
                                    out,
                                    "{} instance {} {}: {}",
                                    rfc3339(l["time"].as_f64().unwrap_or(0.0)),
                                    l["instance"],
                                    l["stream"].as_str().unwrap_or(""),
                                    l["line"].as_str().unwrap_or("")
                                )?;
                            }
                        }
                        out.flush()?;
                    }
                }
                Ok(0)
            }
            FnCmd::Invoke { name, path, data, method } => {
                let body = match data {
                    Some(d) => Some(match d.strip_prefix('@') {
                        Some(file) => std::fs::read(file).with_context(|| format!("cannot read {file}"))?,
                        None => d.into_bytes(),
                    }),
                    None => None,
                };
                let method = method.unwrap_or_else(|| if body.is_some() { "POST".into() } else { "GET".into() });
                let path = if path.starts_with('/') { path } else { format!("/{path}") };
                let (status, b) = call(&gw, auth, &method, &format!("/fn/{}{path}", segment(&name)), body.map(|b| ("application/octet-stream", b))).await?;
                if !(200..300).contains(&status) {
                    if let Ok(v) = serde_json::from_slice::<Value>(&b) {
                        if let Some(e) = v["error"].as_str() {
                            bail!("the gateway answered {status}: {e}");
                        }
                    }
                    bail!("the function answered {status}: {}", String::from_utf8_lossy(&b).trim());
                }
                std::io::stdout().write_all(&b)?;
                Ok(0)
            }
        }
    })
}

/// The JSON of a successful answer, or the gateway's error as an error.
fn api_ok(status: u16, body: &[u8]) -> Result<Value> {
    let v: Value = serde_json::from_slice(body).with_context(|| format!("the gateway answered {status} with something that is not JSON"))?;
    if !(200..300).contains(&status) {
        bail!("the gateway answered {status}: {}", v["error"].as_str().unwrap_or("(no message)"));
    }
    Ok(v)
}

async fn send(gw: &str, auth: Option<&str>, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> Result<hyper::Response<hyper::body::Incoming>> {
    let uri: hyper::Uri = format!("{gw}{path}").parse().with_context(|| format!("--gateway {gw}: cannot make a request URL with {path}"))?;
    let host = uri.host().ok_or_else(|| anyhow!("--gateway {gw}: no host"))?.to_string();
    let port = uri.port_u16().unwrap_or(80);
    let stream =
        tokio::net::TcpStream::connect((host.as_str(), port)).await.with_context(|| format!("cannot reach the gateway at {gw} (is `shoal serve` running?)"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut req = Request::builder().method(method).uri(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/")).header("host", format!("{host}:{port}"));
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let body = match body {
        Some((ct, b)) => {
            req = req.header("content-type", ct);
            Full::new(Bytes::from(b))
        }
        None => Full::new(Bytes::new()),
    };
    sender.send_request(req.body(body)?).await.with_context(|| format!("the gateway at {gw} did not answer"))
}

async fn call(gw: &str, auth: Option<&str>, method: &str, path: &str, body: Option<(&str, Vec<u8>)>) -> Result<(u16, Bytes)> {
    let resp = send(gw, auth, method, path, body).await?;
    let status = resp.status().as_u16();
    Ok((status, resp.into_body().collect().await?.to_bytes()))
}

/// `name` as one URL path segment: every byte but unreserved ones
/// percent-encoded, so that a name with `/` or `?` reaches the gateway as
/// that name (which answers 400 with what a name may hold) instead of as
/// another route.
fn segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A log line's time (seconds since the Unix epoch, as the gateway sends
/// it) as RFC 3339 in UTC with milliseconds; a time out of range prints as
/// the epoch.
fn rfc3339(secs: f64) -> String {
    let t = if secs.is_finite() && (0.0..1e12).contains(&secs) { std::time::Duration::from_secs_f64(secs) } else { std::time::Duration::ZERO };
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + t).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn gateway_addresses_are_urls() {
        let ok = |g: &str| super::gateway_url(g).unwrap();
        assert_eq!(ok("127.0.0.1:18640"), "http://127.0.0.1:18640");
        assert_eq!(ok("localhost:18640"), "http://localhost:18640");
        assert_eq!(ok("http://127.0.0.1:18640/"), "http://127.0.0.1:18640");
        assert_eq!(ok("[::1]:18640"), "http://[::1]:18640");
        let err = |g: &str| super::gateway_url(g).unwrap_err().to_string();
        assert_eq!(err("https://h:1"), "--gateway https://h:1: only http:// is supported (the gateway speaks plain HTTP)");
        assert_eq!(err("h:1/x"), "--gateway h:1/x: give the gateway's address only, without a path (e.g. http://127.0.0.1:8640)");
        assert_eq!(err("a b"), "--gateway a b: expected http://HOST:PORT, HOST:PORT or localhost:PORT");
    }

    #[test]
    fn log_times_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(super::rfc3339(0.0), "1970-01-01T00:00:00.000Z");
        // `date -u -d @1796526000.25 +%FT%T.%3NZ`
        assert_eq!(super::rfc3339(1_796_526_000.25), "2026-12-06T03:00:00.250Z");
        assert_eq!(super::rfc3339(f64::NAN), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(-5.0), "1970-01-01T00:00:00.000Z");
    }
}
