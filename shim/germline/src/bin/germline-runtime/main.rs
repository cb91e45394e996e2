//! `germline-runtime`: an OCI runtime with runc's command-line contract (podman through conmon,
//! CRI-O). This binary parses runc's command line and calls the library, `germline-oci`, which
//! says what each command does. See docs/engines.md.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use germline_oci::state::DEFAULT_ROOT;
use germline_oci::{Globals, Log};

#[derive(Debug, Parser)]
#[command(
    name = "germline-runtime",
    version,
    about = "OCI runtime (runc's CLI) that runs signed MCP tool releases under germline execution"
)]
struct Cli {
    /// Where container state lives (runc: /run/runc).
    #[arg(long, global = true, default_value = DEFAULT_ROOT)]
    root: PathBuf,
    /// Append log messages to this file (podman and conmon read errors from it).
    #[arg(long, global = true)]
    log: Option<PathBuf>,
    /// `text` or `json` (runc's formats).
    #[arg(long, global = true, default_value = "text")]
    log_format: String,
    /// Accepted for runc compatibility: a systemd `slice:prefix:name` cgroup is not joined.
    #[arg(long, global = true)]
    systemd_cgroup: bool,
    /// Accepted for runc compatibility.
    #[arg(long, global = true)]
    debug: bool,
    /// Accepted for runc compatibility (checkpointing is not supported).
    #[arg(long, global = true)]
    criu: Option<String>,
    /// Accepted for runc compatibility.
    #[arg(long, global = true)]
    rootless: Option<String>,
    /// The node configuration (default $GERMLINE_RUNTIME_CONFIG, else /etc/germline/runtime.toml).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Verify the bundle's release and prepare its container; it waits for `start`.
    Create {
        #[arg(long, short = 'b', default_value = ".")]
        bundle: PathBuf,
        #[arg(long)]
        pid_file: Option<PathBuf>,
        /// A terminal is refused: germline speaks MCP on plain stdio.
        #[arg(long)]
        console_socket: Option<PathBuf>,
        #[arg(long)]
        no_pivot: bool,
        #[arg(long)]
        no_new_keyring: bool,
        #[arg(long, default_value_t = 0)]
        preserve_fds: u32,
        id: String,
    },
    /// Start the created container: the release's tools are served on its stdio.
    Start { id: String },
    /// Print the container's state as runc does (JSON).
    State { id: String },
    /// Send a signal (default TERM) to the container's process.
    Kill {
        #[arg(long, short = 'a')]
        all: bool,
        id: String,
        signal: Option<String>,
    },
    /// Remove a stopped container (with --force, kill it first); nothing of it is left.
    Delete {
        #[arg(long, short = 'f')]
        force: bool,
        id: String,
    },
    /// Freeze the container's front end and broker.
    Pause { id: String },
    /// Thaw them.
    Resume { id: String },
    /// Refused: a germline container runs only its signed release.
    Exec {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The container's process (internal): waits for `start`, then execs `germline run`.
    #[command(hide = true)]
    Init { id: String },
    /// An OCI hook (hooks/germline-precreate.json): `hook precreate` reads the engine's
    /// proposed config.json on stdin and refuses a rootfs carrying a germline release that
    /// does not verify under the node's keys and trust metadata (by pointing `root.path` at a
    /// path below /proc naming the reason, or with `--exit-status` by exiting 1); otherwise
    /// it writes the config back unchanged.
    Hook {
        /// Only `precreate` (podman's extension stage).
        stage: String,
        /// Refuse a rootfs that is not a germline release too.
        #[arg(long)]
        require_release: bool,
        /// Refuse by exiting 1 (podman then prints only `exit status 1`; the reason is in
        /// `--log`) instead of pointing `root.path` at a path naming the reason.
        #[arg(long)]
        exit_status: bool,
    },
}

impl From<Cmd> for germline_oci::Cmd {
    /// Flags accepted only for runc compatibility are dropped here.
    fn from(c: Cmd) -> germline_oci::Cmd {
        use germline_oci::Cmd as O;
        match c {
            Cmd::Create {
                bundle,
                pid_file,
                console_socket,
                id,
                ..
            } => O::Create {
                bundle,
                pid_file,
                console_socket: console_socket.is_some(),
                id,
            },
            Cmd::Start { id } => O::Start { id },
            Cmd::State { id } => O::State { id },
            Cmd::Kill { id, signal, .. } => O::Kill { id, signal },
            Cmd::Delete { force, id } => O::Delete { force, id },
            Cmd::Pause { id } => O::Pause { id },
            Cmd::Resume { id } => O::Resume { id },
            Cmd::Exec { .. } => O::Exec,
            Cmd::Init { id } => O::Init { id },
            Cmd::Hook {
                stage,
                require_release,
                exit_status,
            } => O::Hook {
                stage,
                require_release,
                exit_status,
            },
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let log = Log {
        file: cli.log,
        json: cli.log_format == "json",
    };
    let globals = Globals {
        root: cli.root,
        config: cli.config,
    };
    match germline_oci::run(&globals, &cli.cmd.into(), &log) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("germline-runtime: {e}");
            log.write("error", &e.to_string());
            ExitCode::from(1)
        }
    }
}
