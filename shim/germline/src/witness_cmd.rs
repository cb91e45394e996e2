//! `germline witness`: verify a witness record offline, list records and dampening states
//! (docs/evidence.md).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use germline_engine::builder::RuntimeBuilder;
use germline_engine::runtime::Mode;
use germline_engine::sidecar::Sidecar;
use germline_sys::paths;

#[derive(Debug, Args)]
pub struct WitnessArgs {
    #[command(subcommand)]
    cmd: WitnessCmd,
}

#[derive(Debug, Subcommand)]
enum WitnessCmd {
    /// Check a record's signature and re-run its probe and control in a fresh germline; print
    /// the verdict (exit 1 if it differs from the recorded one).
    Verify {
        /// The record file (`<evidence>/witnesses/<clearance>/*.json`).
        record: PathBuf,
        /// The signed release the record names.
        #[arg(long)]
        release: PathBuf,
        /// The release publisher's public key.
        #[arg(long)]
        key: PathBuf,
        /// The deployment key's public half that signed the record.
        #[arg(long)]
        witness_key: PathBuf,
        /// The record's items, named by SHA-256 (`<stem>.items/` beside `<stem>.json`).
        #[arg(long)]
        items: PathBuf,
        /// Re-runs per side (default: the record's).
        #[arg(long)]
        tries: Option<usize>,
        /// The maxima an image layout release is read under (docs/release.md).
        #[command(flatten)]
        limits: germline_release::untrusted::LimitArgs,
        /// Print the result as JSON (and a failure as a JSON object on stderr).
        #[arg(long)]
        json: bool,
    },
    /// Every witness record and each release's dampening state.
    List {
        /// The evidence directory of `germline run`.
        #[arg(long, default_value = paths::BROKER_EVIDENCE)]
        evidence: PathBuf,
        /// Print the result as JSON (and a failure as a JSON object on stderr).
        #[arg(long)]
        json: bool,
    },
}

impl WitnessArgs {
    /// Whether `--json` was given (for the error's form).
    pub fn json(&self) -> bool {
        match &self.cmd {
            WitnessCmd::Verify { json, .. } | WitnessCmd::List { json, .. } => *json,
        }
    }
}

/// `Ok(false)`: the re-run disagrees with the record; an error keeps its typed source.
pub fn run(a: &WitnessArgs) -> Result<bool, Box<dyn std::error::Error>> {
    match &a.cmd {
        WitnessCmd::Verify {
            record,
            release,
            key,
            witness_key,
            items,
            tries,
            limits,
            json,
        } => {
            let (check, release) = germline_engine::evidence::OfflineCheck::prepare(
                &germline_engine::evidence::VerifyInput {
                    record,
                    witness_key,
                    release,
                    release_key: key,
                    items,
                    tries: *tries,
                    limits: limits.limits(),
                },
            )?;
            // A germline and a broker of this process's own re-run the record (dropped before
            // the check, whose directory holds the broker's policy and state).
            let broker = Sidecar::start(&check.sidecar())?;
            let mut rt = RuntimeBuilder::new(Mode::Germline, release, broker)
                .reaper(check.reaper())
                .build()?;
            let v = check.verify(&mut rt);
            rt.stop();
            drop(rt);
            let v = v?;
            let agrees = v["agrees"] == serde_json::Value::Bool(true);
            crate::output::emit(*json, &v, || {
                format!(
                    "{}: {} of {} to {}: re-run {} (recorded {}): {}",
                    record.display(),
                    s(&v["tool"]),
                    s(&v["release"]),
                    s(&v["destination"]),
                    s(&v["verdict_name"]),
                    s(&v["recorded_verdict"]),
                    if agrees { "agrees" } else { "DIFFERS" }
                )
            });
            Ok(agrees)
        }
        WitnessCmd::List { evidence, json } => {
            let v = germline_engine::evidence::list(evidence)?;
            crate::output::emit(*json, &v, || list_text(evidence, &v));
            Ok(true)
        }
    }
}

/// A JSON value as text: a string without its quotes, anything else as JSON.
fn s(v: &serde_json::Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

/// `witness list` for a person: one line per record, pending trigger and release.
fn list_text(evidence: &std::path::Path, v: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let empty = Vec::new();
    let arr = |k: &str| v[k].as_array().unwrap_or(&empty).clone();
    let (records, pending) = (arr("witnesses"), arr("pending"));
    let mut t = format!(
        "{}: {} witness record{}, {} pending\n",
        evidence.display(),
        records.len(),
        if records.len() == 1 { "" } else { "s" },
        pending.len()
    );
    for r in &records {
        if r.get("error").is_some() {
            let _ = writeln!(t, "  {}: unreadable: {}", s(&r["path"]), s(&r["error"]));
            continue;
        }
        let _ = writeln!(
            t,
            "  {} {} -> {}: verdict {} ({} tries) {}",
            s(&r["release"]),
            s(&r["tool"]),
            s(&r["destination"]),
            s(&r["verdict"]),
            s(&r["tries"]),
            s(&r["path"])
        );
    }
    for p in &pending {
        let _ = writeln!(
            t,
            "  pending: {} {} -> {} since {}",
            s(&p["release"]),
            s(&p["tool"]),
            s(&p["destination"]),
            s(&p["since"])
        );
    }
    if let Some(d) = v["dampening"].as_object() {
        for (release, st) in d {
            let _ = writeln!(
                t,
                "  dampening {release}: penalty {} ({}), admitted {}, refused {}, last {}",
                s(&st["penalty"]),
                if st["suppressed"] == serde_json::Value::Bool(true) {
                    "suppressed"
                } else {
                    "not suppressed"
                },
                s(&st["admitted"]),
                s(&st["refused"]),
                s(&st["last"])
            );
        }
    }
    t
}
