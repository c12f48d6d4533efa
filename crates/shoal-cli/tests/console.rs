//! Console output on both tenders against the native program
//! (apps/tests/console_order.c): hvt buffers stdout in the guest to save
//! VM exits (kernel `plat::console`), and none of that may show — the bytes,
//! their order against stderr and against the program's waiting, and what
//! a crashing program printed last are those of Linux. How much faster it
//! is lives in a bench, never here.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn images(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let src = home().join("apps/tests/console_order.c");
    (build_image(&src, dir, &[]), build_native(&src, dir, &[]))
}

/// 20,000 short writes into a file (where nothing flushes at newlines):
/// every line there, in order, as natively.
#[test]
fn many_short_writes_arrive_whole_and_in_order() {
    let dir = scratch();
    let (image, native) = images(dir.path());
    let n = output(Command::new(&native).args(["lines", "20000"]));
    assert!(n.status.success());
    for tender in tenders() {
        let file = dir.path().join(format!("out-{tender}"));
        let s = output(shoal().args(["run", "--tender", tender]).arg(&image).args(["--", "lines", "20000"]).stdout(std::fs::File::create(&file).unwrap()));
        assert_eq!(s.status.code(), Some(0), "{tender}: {}", stderr(&s));
        assert!(std::fs::read(&file).unwrap() == n.stdout, "{tender}: the output differs from the native program's");
    }
}

/// stdout and stderr into one file, then a crash: the lines keep the
/// native order, and what was written to stdout just before the crash is
/// there, before the tender's report.
#[test]
fn stdout_and_stderr_keep_their_order_through_a_crash() {
    let dir = scratch();
    let (image, _) = images(dir.path());
    let expected = "one (stdout)\ntwo (stderr)\nthree (stdout)\n";
    for tender in tenders() {
        let file = dir.path().join(format!("both-{tender}"));
        let f = std::fs::File::create(&file).unwrap();
        let s = output(shoal().args(["run", "--tender", tender]).arg(&image).args(["--", "crash"]).stdout(f.try_clone().unwrap()).stderr(f));
        assert_eq!(s.status.code(), Some(139), "{tender}");
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.starts_with(expected), "{tender}: {text:?}");
        let report = &text[expected.len()..];
        assert!(report.starts_with("shoal: ") && report.lines().count() == 1, "{tender}: one report after the output: {report:?}");
    }
}

/// A program that prints and then waits for input has printed by the
/// time it waits: the reader sees "ready" before it sends anything.
#[test]
fn output_comes_out_before_the_program_waits() {
    let dir = scratch();
    let (image, _) = images(dir.path());
    for tender in tenders() {
        let mut child = shoal()
            .args(["run", "--tender", tender])
            .arg(&image)
            .args(["--", "wait"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // A bound on the wait: kill the instance if "ready" never comes.
        let watchdog = std::thread::spawn(move || {
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(50));
                if std::fs::metadata(format!("/proc/{pid}")).is_err() {
                    return;
                }
            }
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        });
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n", "{tender}: nothing came out before the program waited for input");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"hello\n").unwrap();
        drop(stdin);
        line.clear();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "got: hello\n", "{tender}");
        assert!(child.wait().unwrap().success(), "{tender}");
        watchdog.join().unwrap();
    }
}

/// A reader that goes away (`shoal run IMG | head -1`): the program's next
/// write fails with `EPIPE` and its kernel raises `SIGPIPE`, on hvt as on
/// spt (hvt's VMM used to die of the signal itself, silently), so the
/// instance ends with status 141 and one line saying why; a program that
/// ignores `SIGPIPE` sees `EPIPE` and goes on.
#[test]
fn a_reader_that_goes_away_ends_the_program_by_sigpipe_on_both_tenders() {
    let dir = scratch();
    let src = dir.path().join("yes.c");
    std::fs::write(
        &src,
        "#include <errno.h>\n#include <signal.h>\n#include <stdio.h>\n#include <string.h>\n#include <unistd.h>\n\
         int main(int c, char **v){ if (c > 1) signal(SIGPIPE, SIG_IGN);\n\
         for (int i = 0; i < 10000000; i++) if (write(1, \"line\\n\", 5) < 0) { fprintf(stderr, \"write: %s\\n\", strerror(errno)); return 3; }\n\
         return 0; }\n",
    )
    .unwrap();
    let image = build_image(&src, dir.path(), &[]);
    for tender in tenders() {
        for (args, status, err) in [(&[][..], 141, "shoal: killed by signal 13\n"), (&["ignore"][..], 3, "write: Broken pipe\n")] {
            let mut child =
                shoal().args(["run", "--tender", tender]).arg(&image).arg("--").args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
            // Read one line, then close the pipe, as `head -1` does.
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
            assert_eq!(line, "line\n", "{tender}");
            let o = child.wait_with_output().unwrap();
            assert_eq!((o.status.code(), stderr(&o).as_str()), (Some(status), err), "{tender} {args:?}");
        }
    }
}

/// A program that prints a line into a pipe and then computes for 1.5 s
/// without a system call that leaves the instance: the reader has the
/// line within 100 ms, on hvt too (its stdout buffer holds lines for a
/// pipe for at most about 10 ms, then a wake tick writes them out), and
/// the last line comes at the end. Measured as the gap between the two
/// lines' arrivals, which is 1.5 s less the first line's delay.
#[test]
fn a_line_printed_before_a_long_computation_reaches_a_pipe_reader_at_once() {
    let dir = scratch();
    let src = dir.path().join("ready_compute.c");
    std::fs::write(
        &src,
        "#include <time.h>\n#include <unistd.h>\n\
         static long long ms(void){ struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1000LL + t.tv_nsec / 1000000; }\n\
         int main(void){ long long t0 = ms(); write(1, \"ready\\n\", 6);\n\
         volatile unsigned long x = 0; while (ms() - t0 < 1500) for (int i = 0; i < 100000; i++) x += i;\n\
         write(1, \"done\\n\", 5); return 0; }\n",
    )
    .unwrap();
    let image = build_image(&src, dir.path(), &[]);
    for tender in tenders() {
        let mut child = shoal().args(["run", "--tender", tender]).arg(&image).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let first = Instant::now();
        assert_eq!(line, "ready\n", "{tender}");
        line.clear();
        out.read_line(&mut line).unwrap();
        let gap = first.elapsed();
        assert_eq!(line, "done\n", "{tender}");
        let o = child.wait_with_output().unwrap();
        assert_eq!((o.status.code(), stderr(&o).as_str()), (Some(0), ""), "{tender}");
        assert!(gap >= Duration::from_millis(1400), "{tender}: the first line came {} ms late", 1500u128.saturating_sub(gap.as_millis()));
    }
}

/// 200,000 short lines into a pipe (where hvt writes out at most every
/// 10 ms or when its buffer fills): every byte there, in order, as the
/// native program wrote them.
#[test]
fn many_short_lines_into_a_pipe_arrive_whole_and_in_order() {
    let dir = scratch();
    let (image, native) = images(dir.path());
    let n = output(Command::new(&native).args(["lines", "200000"]));
    assert!(n.status.success());
    for tender in tenders() {
        let s = output(shoal().args(["run", "--tender", tender]).arg(&image).args(["--", "lines", "200000"]));
        assert_eq!(s.status.code(), Some(0), "{tender}: {}", stderr(&s));
        assert_eq!(s.stdout.len(), n.stdout.len(), "{tender}");
        assert!(s.stdout == n.stdout, "{tender}: the output differs from the native program's");
    }
}
