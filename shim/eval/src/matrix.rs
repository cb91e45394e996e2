//! `germline eval matrix`: the security matrix of issue 7 (docs/security-matrix.md).
//!
//! The harness (test world, sinks, oracle, scripted sessions) is Python on the official MCP
//! client SDK and lives in the source tree under `tests/security/`; this command finds it, sets
//! up its venv and the signed corpus through `scripts/security-matrix.sh`, and runs it with this
//! very binary as the runtime under test, so the matrix always measures the `germline` a user
//! runs, not whatever happens to be in a target directory.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::{Args, Subcommand};

type Error = Box<dyn std::error::Error>;

#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(subcommand)]
    cmd: EvalCmd,
}

#[derive(Debug, Subcommand)]
enum EvalCmd {
    /// Run every corpus case under every runtime of --modes and write matrix.json, matrix.md
    /// (paper Fig. 3 / Table XI) and a PNG heatmap to --out.
    Matrix(MatrixArgs),
}

#[derive(Debug, Args)]
struct MatrixArgs {
    /// Runtimes, comma-separated (unprotected, sig-pin, sig-ifc, confined-ifc, fresh-ifc,
    /// nosplit, germline), or `all`.
    #[arg(long, visible_alias = "mode", default_value = "all")]
    modes: String,
    /// Trials; each trial generates a fresh test world with fresh canaries.
    #[arg(long, default_value_t = 3)]
    trials: u32,
    /// Output directory.
    #[arg(long, default_value = "/var/tmp/germline-matrix")]
    out: PathBuf,
    /// Number of the first trial, to run the trials of one matrix as separate invocations
    /// (each with its own --out) that --merge then combines.
    #[arg(long, default_value_t = 1)]
    first_trial: u32,
    /// Only combine the matrix.json of these directories (distinct trials, the same cases;
    /// each cell counts the runs it has) into --out, and write its table and heatmap.
    #[arg(long, num_args = 1.., value_name = "DIR")]
    merge: Vec<PathBuf>,
    /// Comma-separated globs over case names (docs-pool, xtool, docs-*, ...); the benign
    /// sessions always run.
    #[arg(long, default_value = "*")]
    cases: String,
    /// Which benign sessions run: `all` five servers', or only those of the servers the chosen
    /// cases use (`needed`): each attack run is attributed against its own servers' benign runs
    /// of the same mode, so `needed` gives the same attack cells with fewer runs.
    #[arg(long, value_parser = ["all", "needed"], default_value = "all")]
    benign: String,
    /// Which corpus: `python` (the five servers of bundles/corpus) or `node` (the documents
    /// server ported to Node, run as spawned copies: bundles/corpus-node, issue 28).
    #[arg(long, value_parser = ["python", "node"], default_value = "python")]
    corpus: String,
    /// Seconds allowed per run (all sessions of one case).
    #[arg(long)]
    run_timeout: Option<u32>,
    /// How each case's releases run a multi-group call's copies: one at a time (`sequential`,
    /// A1, the default) or `concurrent` (the policy's `[copies] concurrent` names them; issue
    /// 30, docs/policy.md "Concurrent copies").
    #[arg(long, value_parser = ["sequential", "concurrent"], default_value = "sequential")]
    copies: String,
    /// Copy matrix.md, matrix.png and summary.json into docs/security-matrix/ afterwards.
    #[arg(long)]
    update_docs: bool,
    /// The germline source tree that holds tests/security/ (default: $GERMLINE_ROOT, or the
    /// nearest ancestor of the current directory or of this binary that has it).
    #[arg(long)]
    root: Option<PathBuf>,
}

impl EvalArgs {
    /// The summary document the run writes (`OUT/summary.json`), which `--json` prints.
    pub fn summary_path(&self) -> PathBuf {
        match &self.cmd {
            EvalCmd::Matrix(m) => m.out.join("summary.json"),
        }
    }
}

pub fn run(args: &EvalArgs) -> Result<(), Error> {
    match &args.cmd {
        EvalCmd::Matrix(m) => matrix(m),
    }
}

const SCRIPT: &str = "scripts/security-matrix.sh";

fn matrix(a: &MatrixArgs) -> Result<(), Error> {
    if a.trials == 0 || a.first_trial == 0 {
        return Err("--trials and --first-trial: expected at least 1".into());
    }
    let root = find_root(a.root.as_deref())?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot locate this binary: {e}"))?;
    let mut cmd = Command::new("bash");
    cmd.arg(root.join(SCRIPT));
    if a.update_docs {
        cmd.arg("--update-docs");
    }
    cmd.arg("--modes")
        .arg(&a.modes)
        .arg("--trials")
        .arg(a.trials.to_string())
        .arg("--out")
        .arg(&a.out)
        .arg("--cases")
        .arg(&a.cases)
        .arg("--benign")
        .arg(&a.benign)
        .arg("--corpus")
        .arg(&a.corpus)
        .arg("--copies")
        .arg(&a.copies)
        .arg("--germline")
        .arg(&exe)
        .env("GERMLINE_ROOT", &root);
    if let Some(t) = a.run_timeout {
        cmd.arg("--run-timeout").arg(t.to_string());
    }
    if a.first_trial != 1 {
        cmd.arg("--first-trial").arg(a.first_trial.to_string());
    }
    if !a.merge.is_empty() {
        cmd.arg("--merge").args(&a.merge);
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start {}: {e}", root.join(SCRIPT).display()))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the security matrix failed ({status}); its output above says where").into())
    }
}

/// The source tree: explicit, then $GERMLINE_ROOT, then the nearest ancestor of the current
/// directory or of this binary with the harness in it.
fn find_root(explicit: Option<&Path>) -> Result<PathBuf, Error> {
    let has_harness =
        |p: &Path| p.join(SCRIPT).is_file() && p.join("tests/security/matrix.py").is_file();
    if let Some(p) = explicit {
        return if has_harness(p) {
            Ok(p.to_path_buf())
        } else {
            Err(format!(
                "--root {}: no {SCRIPT} and tests/security/matrix.py there",
                p.display()
            )
            .into())
        };
    }
    if let Some(p) = std::env::var_os("GERMLINE_ROOT").map(PathBuf::from) {
        return if has_harness(&p) {
            Ok(p)
        } else {
            Err(format!(
                "GERMLINE_ROOT={}: no {SCRIPT} and tests/security/matrix.py there",
                p.display()
            )
            .into())
        };
    }
    let starts = [std::env::current_dir().ok(), std::env::current_exe().ok()];
    for start in starts.into_iter().flatten() {
        if let Some(found) = start.ancestors().find(|p| has_harness(p)) {
            return Ok(found.to_path_buf());
        }
    }
    Err(format!(
        "cannot find the germline source tree (it holds {SCRIPT} and tests/security/); \
         run from inside it, or pass --root or set GERMLINE_ROOT"
    )
    .into())
}
