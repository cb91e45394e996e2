//! `germline broker serve` and `germline broker bench`.

use crate::output::outln;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Subcommand};
use germline_broker::{bench, control, Broker, BrokerConfig};
use germline_policy::Policy;
use germline_sys::paths;

type Error = Box<dyn std::error::Error>;

#[derive(Debug, Args)]
pub struct BrokerArgs {
    #[command(subcommand)]
    cmd: BrokerCmd,
}

#[derive(Debug, Subcommand)]
enum BrokerCmd {
    /// Run the broker sidecar: the only germline process with network access.
    Serve {
        /// The deployer's policy (destinations, pins, credentials).
        #[arg(long)]
        policy: PathBuf,
        /// Control socket for the shim (its directory is made root-only).
        #[arg(long, default_value = paths::BROKER_SOCKET)]
        socket: PathBuf,
        /// State directory: the deployment CA lives here, outside every container.
        #[arg(long, default_value = paths::BROKER_STATE)]
        state: PathBuf,
        /// JSON-lines audit log.
        #[arg(long)]
        audit: Option<PathBuf>,
        /// Slot store (SQLite). Default: <state>/slots.db.
        #[arg(long)]
        slots: Option<PathBuf>,
        /// Read the policy and its credential files with this user's permissions
        /// (UID:GID:GROUPS; set by `germline daemon`'s sessions, docs/daemon.md).
        #[arg(long, hide = true, value_name = "UID:GID:GROUPS")]
        read_as: Option<germline_sys::user::FsCreds>,
    },
    /// Measure the broker's added latency per delivered request against a direct request.
    Bench {
        #[arg(long, default_value_t = 2000)]
        requests: usize,
        /// Also write the figures as JSON here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print the figures as JSON on stdout (the document `--out` writes) instead of text.
        #[arg(long)]
        json: bool,
    },
}

impl BrokerArgs {
    /// `broker bench --json` (a failure is then a JSON object on stderr); `serve` is a server.
    pub fn json(&self) -> bool {
        matches!(self.cmd, BrokerCmd::Bench { json: true, .. })
    }
}

pub fn run(args: &BrokerArgs) -> Result<(), Error> {
    match &args.cmd {
        BrokerCmd::Serve {
            policy,
            socket,
            state,
            audit,
            slots,
            read_as,
        } => {
            let policy = Arc::new(match read_as {
                Some(c) => c.run(|| Policy::load(policy))??,
                None => Policy::load(policy)?,
            });
            let mut cfg = BrokerConfig::new(policy, state);
            cfg.audit_log = audit.clone();
            cfg.read_as = read_as.clone();
            cfg.slots = Some(slots.clone().unwrap_or_else(|| state.join("slots.db")));
            let broker = Arc::new(Broker::start(cfg)?);
            eprintln!(
                "germline broker: serving {} (CA {})",
                socket.display(),
                broker.ca_cert_path().display()
            );
            control::serve(broker, socket)?;
            Ok(())
        }
        BrokerCmd::Bench {
            requests,
            out,
            json,
        } => {
            let dir = tempfile::tempdir()?;
            let r = bench::run(*requests, dir.path())?;
            if let Some(path) = out {
                std::fs::write(path, serde_json::to_string_pretty(&r)?)?;
            }
            if *json {
                crate::output::print_json(&serde_json::to_value(&r)?);
                return Ok(());
            }
            outln!(
                "broker bench: {} requests per side, client in {}",
                r.requests,
                r.client
            );
            outln!(
                "  direct to sink:   p50 {:8.1} us   p99 {:8.1} us",
                r.direct_p50_us,
                r.direct_p99_us
            );
            outln!(
                "  through broker:   p50 {:8.1} us   p99 {:8.1} us",
                r.broker_p50_us,
                r.broker_p99_us
            );
            outln!(
                "  added by broker:  p50 {:8.1} us   p99 {:8.1} us",
                r.added_p50_us,
                r.added_p99_us
            );
            if let Some(path) = out {
                outln!("  written to {}", path.display());
            }
            Ok(())
        }
    }
}
