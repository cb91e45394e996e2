//! `germline run`: the command an MCP client starts.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use germline_policy::Policy;

use crate::release::Release;
use crate::runtime::{Mode, Runtime};
use crate::session::Session;
use crate::sidecar::{Sidecar, SidecarConfig};

#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// The deployer's policy: labels, clearances, destinations, argument rules.
    #[arg(long)]
    pub policy: PathBuf,
    /// The publisher's pinned public key (cosign `PUBLIC KEY` PEM).
    #[arg(long)]
    pub key: PathBuf,
    /// Which runtime serves the calls: germline execution, or a baseline for comparison.
    #[arg(long, value_enum, default_value = "germline")]
    pub mode: Mode,
    /// Use the broker already serving at this control socket instead of starting one.
    #[arg(long)]
    pub broker: Option<PathBuf>,
    /// Where a broker this command starts keeps its CA and slots.
    #[arg(long, default_value = "/var/lib/germline/broker")]
    pub state_dir: PathBuf,
    /// The broker's audit log (JSON lines).
    #[arg(long)]
    pub audit: Option<PathBuf>,
    /// Pre-forked, checked, data-free copies to keep ready (germline and nosplit modes).
    #[arg(long, default_value_t = 0)]
    pub pool: usize,
    /// Where results for the recipients a tool's manifest names go (`<recipient>.jsonl`,
    /// docs/run.md); without it they are not delivered.
    #[arg(long)]
    pub outbox: Option<PathBuf>,
    /// The signed release: an unpacked bundle (with rootfs/) or an OCI image layout.
    pub release: PathBuf,
}

/// Verifies the release, starts the broker (unless given) and the germline.
pub fn start_session(a: &RunArgs) -> Result<Session, String> {
    let policy = Arc::new(Policy::load(&a.policy).map_err(|e| e.to_string())?);
    let release = Release::load(&a.release, &a.key)?;
    let broker = Sidecar::start(&SidecarConfig {
        existing: a.broker.clone(),
        policy: a.policy.clone(),
        state_dir: a.state_dir.clone(),
        audit: a.audit.clone(),
    })?;
    let outbox = a.outbox.as_deref().map(check_outbox).transpose()?;
    let mut runtime = Runtime::start(a.mode, release, broker, a.pool)?;
    runtime.outbox = outbox;
    Ok(Session::new(runtime, policy))
}

/// `--outbox DIR` must be an existing directory.
pub fn check_outbox(dir: &std::path::Path) -> Result<PathBuf, String> {
    if dir.is_dir() {
        Ok(dir.to_path_buf())
    } else {
        Err(format!(
            "--outbox {}: expected an existing directory for the recipients' results",
            dir.display()
        ))
    }
}

/// `germline run`.
pub fn run(a: &RunArgs) -> Result<(), String> {
    let sigfd = crate::stdio::stop_signals().map_err(|e| format!("signals: {e}"))?;
    crate::sweep::at_start("run");
    let mut session = start_session(a)?;
    eprintln!(
        "germline run: {} ({}) in mode {}, broker {}",
        session.runtime.release.label(),
        session.runtime.release.digest,
        session.runtime.mode.name(),
        session.runtime.broker.socket().display()
    );
    let why = crate::stdio::serve(&mut session, sigfd);
    session.runtime.stop();
    eprintln!("germline run: {why}; stopped after {} calls", session.calls);
    Ok(())
}
