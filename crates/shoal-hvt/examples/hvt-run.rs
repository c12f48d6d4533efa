//! Runs a shoal image on the hvt tender until the CLI dispatches
//! `--tender hvt`: `hvt-run [--mem BYTES] [--fs DIR] [-e K=V]... IMAGE [ARGS...]`.
//! Prints the timings on stderr when `SHOAL_HVT_TIMINGS` is set.

use shoal_hvt::{Console, FsSource, RunConfig};
use std::path::PathBuf;

fn main() {
    let mut args = std::env::args().skip(1);
    let mut mem_size = 64 << 20;
    let mut fs_dir = None;
    let mut env = Vec::new();
    let mut image = None;
    let mut argv = Vec::new();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--mem" if image.is_none() => mem_size = args.next().and_then(|v| v.parse().ok()).unwrap_or(mem_size),
            "--fs" if image.is_none() => fs_dir = args.next().map(PathBuf::from),
            "-e" if image.is_none() => env.extend(args.next()),
            _ if image.is_none() => {
                argv.push(a.clone());
                image = Some(PathBuf::from(a));
            }
            _ => argv.push(a),
        }
    }
    let Some(image) = image else {
        eprintln!("usage: hvt-run [--mem BYTES] [--fs DIR] [-e K=V]... IMAGE [ARGS...]");
        std::process::exit(125);
    };
    let mut cfg = RunConfig::new(image, mem_size);
    cfg.fs = fs_dir.map(FsSource::Dir);
    cfg.argv = argv.into_iter().map(Into::into).collect();
    cfg.env = env.into_iter().map(Into::into).collect();
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    match shoal_hvt::run_with_console(&cfg, &mut Console { stdout: &mut out, stderr: &mut err }) {
        Ok((outcome, t)) => {
            if let Some(m) = outcome.message() {
                eprintln!("shoal: {m}");
            }
            if std::env::var_os("SHOAL_HVT_TIMINGS").is_some() {
                eprintln!(
                    "shoal: hvt timings: prepare {:?}, VM created {:?}, ready {:?}, first byte {:?}, exit {:?}, {} exits",
                    t.prepare, t.vm_created, t.vm_ready, t.first_output, t.exit, t.exits
                );
            }
            std::process::exit(outcome.status());
        }
        Err(e) => {
            eprintln!("shoal: {e}");
            std::process::exit(125);
        }
    }
}
