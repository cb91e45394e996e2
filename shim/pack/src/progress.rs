//! The steps of a pack on a terminal: an indicatif bar with the step's name and a spinner, on
//! stderr, drawn only when the caller says (`germline` does when stderr is a terminal and
//! neither `--quiet` nor `--json` was given: a pack in CI or piped prints nothing but its
//! result on stdout). Each step's time is kept either way ([`Steps::finish`]).

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A fixed number of named steps.
#[derive(Debug)]
pub struct Steps {
    bar: ProgressBar,
    current: Option<(&'static str, Instant)>,
    names: Vec<String>,
    times: Vec<(&'static str, f64)>,
}

impl Steps {
    /// `n` steps, drawn on stderr when `shown`.
    pub fn new(n: u64, shown: bool) -> Steps {
        let target = if shown {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(n), target);
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} [{pos}/{len}] {elapsed:>4} {wide_msg}")
        {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(120));
        Steps {
            bar,
            current: None,
            names: Vec::new(),
            times: Vec::new(),
        }
    }

    /// Ends the current step and starts the one described by `what`.
    pub fn step(&mut self, what: &str) {
        self.end_current();
        let name = step_name(what);
        self.names.push(what.to_string());
        self.current = Some((name, Instant::now()));
        self.bar.set_message(what.to_string());
    }

    fn end_current(&mut self) {
        if let Some((name, t0)) = self.current.take() {
            self.times.push((name, t0.elapsed().as_secs_f64()));
            self.bar.inc(1);
        }
    }

    /// Ends the last step; the seconds each step took, by the word before its `:`.
    pub fn finish(mut self) -> Vec<(&'static str, f64)> {
        self.end_current();
        self.bar.finish_and_clear();
        if !self.bar.is_hidden() {
            for ((_, s), what) in self.times.iter().zip(&self.names) {
                eprintln!("  {s:6.1}s  {what}");
            }
        }
        std::mem::take(&mut self.times)
    }
}

impl Drop for Steps {
    fn drop(&mut self) {
        // A failed pack leaves no half-drawn bar behind its error message.
        self.bar.finish_and_clear();
    }
}

/// The step's short name: the known word its description starts with.
fn step_name(what: &str) -> &'static str {
    const NAMES: [&str; 8] = [
        "pip", "npm", "rootfs", "hook", "probe", "manifest", "release", "owned",
    ];
    NAMES
        .into_iter()
        .find(|n| what.starts_with(n))
        .unwrap_or("step")
}
