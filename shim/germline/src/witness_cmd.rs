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
    },
    /// Every witness record and each release's dampening state.
    List {
        /// The evidence directory of `germline run`.
        #[arg(long, default_value = paths::BROKER_EVIDENCE)]
        evidence: PathBuf,
    },
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
            println!("{v}");
            Ok(v["agrees"] == serde_json::Value::Bool(true))
        }
        WitnessCmd::List { evidence } => {
            let v = germline_engine::evidence::list(evidence)?;
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
            );
            Ok(true)
        }
    }
}
