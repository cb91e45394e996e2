//! `--json` for the research commands (`eval matrix`, `bench`, `run-bench`): each already
//! writes its result document (summary.json, bench.json or breakdown.json, run-bench.json);
//! with `--json` that document is printed on stdout, and everything the run prints for a
//! person (its tables, the harness's and children's lines) goes to stderr instead, so stdout
//! holds exactly one JSON document. The research crates keep their own output unchanged.

use std::io::Write as _;
use std::os::fd::{AsRawFd as _, RawFd};
use std::path::{Path, PathBuf};

use clap::Args;
use germline_sys::sys;

use crate::progress::{self, Progress};

type Error = Box<dyn std::error::Error>;

/// `germline eval` with `--json`.
#[derive(Debug, Args)]
pub struct EvalJson {
    #[command(flatten)]
    pub inner: germline_eval::matrix::EvalArgs,
    /// Print the run's summary.json on stdout (its progress lines go to stderr).
    #[arg(long, global = true)]
    pub json: bool,
}

/// `germline bench` with `--json`.
#[derive(Debug, Args)]
pub struct BenchJson {
    #[command(flatten)]
    pub inner: germline_eval::suite::SuiteArgs,
    /// Print bench.json (breakdown.json with --breakdown-only) on stdout; the tables go to
    /// stderr.
    #[arg(long)]
    pub json: bool,
}

/// `germline run-bench` with `--json`.
#[derive(Debug, Args)]
pub struct RunBenchJson {
    #[command(flatten)]
    pub inner: germline_eval::bench::BenchArgs,
    /// Print the --out document on stdout; the table goes to stderr.
    #[arg(long)]
    pub json: bool,
}

/// Runs `f` with this process's (and its children's) stdout sent to stderr, then puts
/// stdout back.
fn stdout_to_stderr<R>(f: impl FnOnce() -> R) -> Result<R, Error> {
    let out: RawFd = std::io::stdout().as_raw_fd();
    let _ = std::io::stdout().flush();
    let saved = sys::dup_above(out, 10)?;
    // Not inherited by the run's children: only this process puts it back.
    sys::set_cloexec(saved)?;
    let moved = sys::dup2(std::io::stderr().as_raw_fd(), out);
    let r = moved.as_ref().ok().map(|()| f());
    let _ = std::io::stdout().flush();
    let back = sys::dup2(saved, out);
    sys::close_raw(saved);
    moved?;
    back?;
    r.ok_or_else(|| "stdout was not redirected".into())
}

/// Runs the command; under `json`, prints the document at `result` afterwards.
fn run_json(json: bool, result: &Path, f: impl FnOnce() -> Result<(), Error>) -> Result<(), Error> {
    if !json {
        return f();
    }
    stdout_to_stderr(f)??;
    let bytes = std::fs::read(result).map_err(|e| format!("{}: {e}", result.display()))?;
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", result.display()))?;
    crate::output::print_json(&v);
    Ok(())
}

pub fn eval(a: &EvalJson) -> Result<(), Error> {
    run_json(a.json, &a.inner.summary_path(), || {
        germline_eval::matrix::run(&a.inner)
    })
}

/// `quiet`: the global `--quiet`. On a terminal the steps are a bar; otherwise a line each
/// on stderr, as before.
pub fn bench(a: &BenchJson, quiet: bool) -> Result<(), Error> {
    let file = if a.inner.breakdown_only {
        "breakdown.json"
    } else {
        "bench.json"
    };
    let result: PathBuf = a.inner.out.join(file);
    run_json(a.json, &result, || {
        if progress::wanted(quiet, a.json) {
            let bar = Progress::bar(true, 0, "bench");
            germline_eval::suite::run_with(&a.inner, &bar).map_err(Into::into)
        } else {
            germline_eval::suite::run(&a.inner).map_err(Into::into)
        }
    })
}

pub fn run_bench(a: &RunBenchJson) -> Result<(), Error> {
    run_json(a.json, &a.inner.out, || {
        germline_eval::bench::run(&a.inner).map_err(Into::into)
    })
}
