//! `germline-runtime`: an OCI runtime with runc's command-line contract (podman through conmon,
//! CRI-O, containerd's runc shim). runc's commands and flags are parsed by youki's liboci-cli
//! (its `StandardCmd`, `CommonCmd` and `GlobalOpts`), with germline's own `init`, `hook` and
//! `--config` beside them; this binary maps them onto the library, `germline-oci`, which says
//! what each command does. See docs/engines.md.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand};
use liboci_cli::{CommonCmd, GlobalOpts, StandardCmd};

use germline_oci::state::DEFAULT_ROOT;
use germline_oci::{Globals, Log};

#[derive(Debug, Parser)]
#[command(
    name = "germline-runtime",
    about = "OCI runtime (runc's CLI) that runs signed MCP tool releases under germline execution",
    disable_version_flag = true
)]
struct Cli {
    /// runc's global options (before the command, as runc takes them).
    #[command(flatten)]
    global: GlobalOpts,
    /// Accepted for runc compatibility (checkpointing is not supported).
    #[arg(long)]
    criu: Option<String>,
    /// Accepted for runc compatibility.
    #[arg(long)]
    rootless: Option<String>,
    /// The node configuration (default $GERMLINE_RUNTIME_CONFIG, else /etc/germline/runtime.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    #[command(flatten)]
    Standard(Box<StandardCmd>),
    #[command(flatten)]
    Common(Box<CommonCmd>),
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

/// What each command does here, where germline's differs from liboci-cli's description.
const ABOUT: [(&str, &str); 18] = [
    (
        "create",
        "Verify the bundle's release and prepare its container; it waits for `start`",
    ),
    (
        "start",
        "Start the created container: the release's tools are served on its stdio",
    ),
    ("state", "Print the container's state as runc does (JSON)"),
    (
        "kill",
        "Send a signal (default TERM) to the container's process",
    ),
    (
        "delete",
        "Remove a stopped container (with --force, kill it first); nothing of it is left",
    ),
    ("pause", "Freeze the container's front end and broker"),
    ("resume", "Thaw them"),
    (
        "exec",
        "Refused: a germline container runs only its signed release",
    ),
    (
        "run",
        "Create and start a container; in the foreground, wait for it and remove it",
    ),
    (
        "list",
        "List the containers under --root (table or --format json)",
    ),
    (
        "ps",
        "The container's processes: `ps -ef` lines (or --format json: pids)",
    ),
    (
        "events",
        "The container's resource statistics as JSON lines (--stats: once)",
    ),
    (
        "features",
        "The runtime-spec features document (JSON): what is taken from config.json",
    ),
    (
        "spec",
        "Write a template config.json (runc's) into the bundle",
    ),
    ("checkpointt", "Refused: checkpointing is not supported"),
    (
        "update",
        "Refused: the germline's and copies' limits come from the release and policy",
    ),
    ("init", "The container's process (internal)"),
    (
        "hook",
        "OCI hook `precreate`: refuse a release that does not verify, before any runtime runs",
    ),
];

/// The command line as clap parses it: liboci-cli's commands with germline's descriptions,
/// runc's `-v/--version` (the runtime's version and the OCI runtime-spec version), runc's
/// optional `kill` signal (TERM), and runc's `checkpoint` spelling beside liboci-cli's.
fn command() -> clap::Command {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let version = VERSION.get_or_init(germline_oci::version_text).as_str();
    let mut c = Cli::command()
        .version(version)
        .long_version(version)
        .arg(
            clap::Arg::new("version")
                .short('v')
                .long("version")
                .action(ArgAction::Version)
                .help("Print the runtime's version and the OCI runtime-spec version"),
        )
        .mut_arg("log", |a| {
            a.help("Append log messages to this file (podman and conmon read errors from it)")
        })
        .mut_arg("root", |a| {
            a.help(format!(
                "Where container state lives (runc: /run/runc) [default: {DEFAULT_ROOT}]"
            ))
        })
        .mut_arg("systemd_cgroup", |a| {
            a.help("Accepted for runc compatibility: a systemd `slice:prefix:name` cgroup is not joined")
        })
        .mut_arg("debug", |a| a.help("Accepted for runc compatibility"))
        .mut_subcommand("kill", |k| {
            k.mut_arg("signal", |a| a.required(false).default_value("TERM"))
        })
        // liboci-cli spells it `checkpointt`; runc's spelling is accepted, both are refused.
        .mut_subcommand("checkpointt", |k| k.alias("checkpoint").hide(true))
        .mut_arg("log_format", |a| a.help("`text` or `json` (runc's log line formats)"));
    for (name, about) in ABOUT {
        c = c.mut_subcommand(name, |s| s.about(about));
    }
    c
}

/// liboci-cli's commands as the library's; flags accepted only for runc compatibility are
/// dropped here.
fn to_library(cmd: Cmd) -> germline_oci::Cmd {
    use germline_oci::Cmd as O;
    match cmd {
        Cmd::Standard(s) => match *s {
            StandardCmd::Create(c) => O::Create {
                bundle: c.bundle,
                pid_file: c.pid_file,
                console_socket: c.console_socket.is_some(),
                id: c.container_id,
            },
            StandardCmd::Start(c) => O::Start { id: c.container_id },
            StandardCmd::State(c) => O::State { id: c.container_id },
            StandardCmd::Kill(c) => O::Kill {
                id: c.container_id,
                signal: Some(c.signal),
            },
            StandardCmd::Delete(c) => O::Delete {
                force: c.force,
                id: c.container_id,
            },
        },
        Cmd::Common(c) => match *c {
            CommonCmd::Run(r) => O::Run {
                bundle: r.bundle,
                pid_file: r.pid_file,
                console_socket: r.console_socket.is_some(),
                detach: r.detach,
                keep: r.keep,
                id: r.container_id,
            },
            CommonCmd::List(l) => O::List {
                format: l.format,
                quiet: l.quiet,
            },
            CommonCmd::Ps(p) => O::Ps {
                format: p.format,
                id: p.container_id,
                ps_options: p.ps_options,
            },
            CommonCmd::Events(e) => O::Events {
                id: e.container_id,
                interval: e.interval,
                stats: e.stats,
            },
            CommonCmd::Features(_) => O::Features,
            CommonCmd::Spec(s) => O::Spec {
                bundle: s.bundle,
                rootless: s.rootless,
            },
            CommonCmd::Pause(p) => O::Pause { id: p.container_id },
            CommonCmd::Resume(r) => O::Resume { id: r.container_id },
            CommonCmd::Exec(_) => O::Exec,
            CommonCmd::Checkpointt(_) => O::Unsupported {
                command: "checkpoint",
                reason: "a germline container's state is its signed release; nothing of a \
                         session is kept to restore",
            },
            CommonCmd::Update(_) => O::Unsupported {
                command: "update",
                reason: "the germline's and each copy's limits come from the signed release \
                         and the node's policy, not from the engine",
            },
        },
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

fn main() -> ExitCode {
    let cli = match Cli::from_arg_matches(&command().get_matches()) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let log = Log {
        file: cli.global.log,
        json: cli.global.log_format.as_deref() == Some("json"),
    };
    let globals = Globals {
        root: cli
            .global
            .root
            .unwrap_or_else(|| PathBuf::from(DEFAULT_ROOT)),
        config: cli.config,
    };
    match germline_oci::run(&globals, &to_library(cli.cmd), &log) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("germline-runtime: {e}");
            log.write("error", &e.to_string());
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        let m = command().try_get_matches_from(args)?;
        Cli::from_arg_matches(&m)
    }

    #[test]
    fn the_command_line_is_consistent() {
        command().debug_assert();
    }

    /// The command lines podman, conmon, containerd's runc shim and our containerd shim send.
    #[test]
    fn engines_command_lines_parse() {
        let c = parse(&[
            "germline-runtime",
            "--root",
            "/run/r",
            "--log",
            "/l.json",
            "--log-format",
            "json",
            "--systemd-cgroup",
            "--config",
            "/c.toml",
            "create",
            "--bundle",
            "/b",
            "--pid-file",
            "/p",
            "--no-pivot",
            "--console-socket",
            "/s",
            "--preserve-fds",
            "2",
            "id1",
        ])
        .expect("create");
        assert_eq!(
            c.global.root.as_deref(),
            Some(std::path::Path::new("/run/r"))
        );
        assert!(matches!(
            to_library(c.cmd),
            germline_oci::Cmd::Create { ref id, console_socket: true, .. } if id == "id1"
        ));
        let c = parse(&["germline-runtime", "kill", "--all", "id1", "KILL"]).expect("kill");
        assert!(matches!(
            to_library(c.cmd),
            germline_oci::Cmd::Kill { signal: Some(ref s), .. } if s == "KILL"
        ));
        // runc's default signal.
        let c = parse(&["germline-runtime", "kill", "id1"]).expect("kill without a signal");
        assert!(matches!(
            to_library(c.cmd),
            germline_oci::Cmd::Kill { signal: Some(ref s), .. } if s == "TERM"
        ));
        let c = parse(&["germline-runtime", "delete", "--force", "id1"]).expect("delete");
        assert!(matches!(
            to_library(c.cmd),
            germline_oci::Cmd::Delete { force: true, .. }
        ));
        let c = parse(&[
            "germline-runtime",
            "exec",
            "--process",
            "/p.json",
            "--detach",
            "--pid-file",
            "/p",
            "id1",
        ])
        .expect("exec");
        assert!(matches!(to_library(c.cmd), germline_oci::Cmd::Exec));
        let c = parse(&[
            "germline-runtime",
            "checkpoint",
            "--image-path",
            "/i",
            "id1",
        ])
        .expect("checkpoint");
        assert!(matches!(
            to_library(c.cmd),
            germline_oci::Cmd::Unsupported {
                command: "checkpoint",
                ..
            }
        ));
        for hook in [
            vec!["germline-runtime", "--log", "/l", "hook", "precreate"],
            vec!["germline-runtime", "hook", "precreate", "--exit-status"],
        ] {
            let c = parse(&hook).expect("hook");
            assert!(matches!(to_library(c.cmd), germline_oci::Cmd::Hook { .. }));
        }
        let c = parse(&["germline-runtime", "--root", "/r", "init", "id1"]).expect("init");
        assert!(matches!(to_library(c.cmd), germline_oci::Cmd::Init { .. }));
    }

    #[test]
    fn version_names_the_runtime_spec() {
        for flag in ["--version", "-v"] {
            let e = parse(&["germline-runtime", flag]).expect_err("prints the version");
            assert_eq!(e.kind(), clap::error::ErrorKind::DisplayVersion);
            assert_eq!(
                e.to_string(),
                format!(
                    "germline-runtime version {}\nspec: {}\n",
                    env!("CARGO_PKG_VERSION"),
                    germline_oci::OCI_VERSION
                )
            );
        }
    }
}
