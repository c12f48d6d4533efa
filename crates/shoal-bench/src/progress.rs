//! Progress of an experiment that runs longer than a few seconds: a bar on
//! stderr (indicatif) while stderr is a terminal. When it is not (a log
//! file, a test), no bar is drawn and the experiment's messages are plain
//! lines, as they always were. [`say`] prints a message above the bar
//! that is being drawn, if any, so that the two do not garble each other.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Mutex;

/// The bar being drawn now, for [`say`].
static ACTIVE: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// A progress bar of a known number of steps; it disappears when dropped.
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    /// A bar of `total` steps labelled `label` ("bench faas"), drawn only
    /// when stderr is a terminal and `quiet` is false (`--json` runs whose
    /// messages are for people say nothing either).
    pub fn new(label: &str, total: u64, quiet: bool) -> Progress {
        if quiet || !std::io::stderr().is_terminal() {
            return Progress { bar: ProgressBar::hidden() };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        // The template is a constant that parses; the default style otherwise.
        if let Ok(style) = ProgressStyle::with_template("{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}") {
            bar.set_style(style);
        }
        bar.set_prefix(label.to_string());
        if let Ok(mut active) = ACTIVE.lock() {
            *active = Some(bar.clone());
        }
        Progress { bar }
    }

    /// Adds `n` steps (work that turned out to be there).
    pub fn grow(&self, n: u64) {
        self.bar.inc_length(n);
    }

    /// Shows what runs now beside the bar.
    pub fn doing(&self, what: &str) {
        self.bar.set_message(what.to_string());
    }

    /// One step done.
    pub fn step(&self) {
        self.bar.inc(1);
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
        if let Ok(mut active) = ACTIVE.lock() {
            *active = None;
        }
    }
}

/// A message line on stderr, above the bar being drawn if there is one.
pub fn say(line: &str) {
    let bar = ACTIVE.lock().ok().and_then(|a| a.clone());
    match bar {
        Some(bar) => bar.println(line),
        None => eprintln!("{line}"),
    }
}
