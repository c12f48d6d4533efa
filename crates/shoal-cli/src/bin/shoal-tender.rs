//! `shoal-tender [OPTIONS] IMAGE [-- ARGS...]`: runs one image (see the
//! library's documentation). Exit status: the guest's, or 125 with one
//! `shoal-tender: …` line when the image cannot be run.

use std::process::ExitCode;

fn main() -> ExitCode {
    // A tender writes the guest's console to stdout; when that is a closed
    // pipe it should stop like any command-line tool, not panic.
    // SAFETY: setting a signal disposition to SIG_DFL before any thread is
    // started has no memory-safety preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let result = shoal_tender::RunArgs::parse(std::env::args_os().skip(1)).map_err(|e| e.to_string()).and_then(|args| match args {
        None => {
            print!("{}", shoal_tender::usage());
            Ok(0)
        }
        Some(a) => shoal_tender::run(&a).map_err(|e| e.to_string()),
    });
    match result {
        Ok(status) => ExitCode::from((status & 0xff) as u8),
        Err(msg) => {
            eprintln!("shoal-tender: {}", msg.replace('\n', " "));
            ExitCode::from(125)
        }
    }
}
