//! Progress of long commands on a terminal (indicatif), for every command of this binary to
//! reuse: `Progress::spinner("verifying ...")` for a step of unknown length,
//! `Progress::bar(n, "...")` for n steps. Drawn on stderr only when stderr is a terminal and
//! neither `--quiet` nor `--json` was given; otherwise nothing at all is written, so a pipe,
//! a log file or a script's captured stderr never holds a cursor escape or a half-drawn line.
//! The bar is cleared when dropped, so a command's result or error prints on a clean line.

use std::io::IsTerminal as _;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// When progress is shown: stderr is a terminal, and the user asked for neither quiet nor JSON.
pub fn wanted(quiet: bool, json: bool) -> bool {
    !quiet && !json && std::io::stderr().is_terminal()
}

/// One progress display (a spinner or a bar); hidden when not [`wanted`].
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
}

impl Progress {
    fn new(len: Option<u64>, shown: bool, template: &str) -> Progress {
        let target = if shown {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(len, target);
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style);
        }
        if shown {
            // A spinner that moves while a library call (that reports nothing) runs.
            bar.enable_steady_tick(Duration::from_millis(120));
        }
        Progress { bar }
    }

    /// A step of unknown length: a spinner, the message and the time elapsed.
    pub fn spinner(shown: bool, message: impl Into<String>) -> Progress {
        let p = Progress::new(None, shown, "{spinner} {msg} ({elapsed})");
        p.bar.set_message(message.into());
        p
    }

    /// `len` steps: a bar with the count and the time elapsed.
    pub fn bar(shown: bool, len: u64, message: impl Into<String>) -> Progress {
        let p = Progress::new(
            Some(len),
            shown,
            "{spinner} {msg} [{bar:30}] {pos}/{len} ({elapsed})",
        );
        p.bar.set_message(message.into());
        p
    }

    /// The current step's description.
    pub fn message(&self, message: impl Into<String>) {
        self.bar.set_message(message.into());
    }

    /// One step done.
    pub fn inc(&self) {
        self.bar.inc(1);
    }

    /// `done` of `total` steps.
    pub fn set(&self, done: u64, total: u64) {
        self.bar.set_length(total);
        self.bar.set_position(done);
    }

    /// Removes the display now (the result is about to print).
    pub fn clear(&self) {
        self.bar.finish_and_clear();
    }
}

/// A library's steps ([`germline_eval::progress::Progress`]) on the bar: the step's name as
/// the message, `done`/`total` as the position; cleared once every step is done.
impl germline_eval::progress::Progress for Progress {
    fn step(&self, what: &str, done: u64, total: u64) {
        self.set(done, total);
        if done >= total {
            self.clear();
        } else {
            self.message(what);
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
