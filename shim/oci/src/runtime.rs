//! The runtime's commands (runc's contract): `create` verifies and forks the container's
//! process, `init` waits for `start` and execs `germline run`, `run` is `create` and `start`
//! (in the foreground: waiting for the container and removing it), and `state`, `kill`,
//! `delete`, `pause`, `resume` behave as runc's; `list`, `ps`, `events`, `features` and `spec`
//! are in `info.rs`. See the crate documentation and docs/engines.md.

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::{Config, NonGermline, Overrides};
use germline_sys::{cgroup, mountinfo, paths, procfs};

use crate::error::{Error, Result};
use crate::host;
use crate::info;
use crate::spec::{EngineSpec, Network};
use crate::state::{self, State};
use crate::trust::{check_trust, trust_note, verify};

/// The global flags every command sees (runc's `--root`, and our `--config`).
#[derive(Debug, Clone)]
pub struct Globals {
    /// Where container state lives (runc: /run/runc).
    pub root: PathBuf,
    /// The node configuration (default $GERMLINE_RUNTIME_CONFIG, else
    /// /etc/germline/runtime.toml).
    pub config: Option<PathBuf>,
}

/// One runtime command, as parsed from runc's command line.
#[derive(Debug, Clone)]
pub enum Cmd {
    /// Verify the bundle's release and prepare its container; it waits for `start`.
    Create {
        bundle: PathBuf,
        pid_file: Option<PathBuf>,
        /// Whether the engine asked for a terminal (`--console-socket`): refused.
        console_socket: bool,
        id: String,
    },
    /// Start the created container.
    Start { id: String },
    /// `create` then `start`; in the foreground (without `detach`) it forwards signals to the
    /// container's process, waits for it, removes the container (unless `keep`) and exits
    /// with its status.
    Run {
        bundle: PathBuf,
        pid_file: Option<PathBuf>,
        console_socket: bool,
        detach: bool,
        keep: bool,
        id: String,
    },
    /// The containers under `--root` (runc's table, or JSON with `json`; ids only with
    /// `quiet`).
    List { format: String, quiet: bool },
    /// The container's processes: its pids as JSON, or `ps`'s table (run with `ps_options`,
    /// default `-ef`) cut to them.
    Ps {
        format: String,
        id: String,
        ps_options: Vec<String>,
    },
    /// Resource statistics as runc's JSON events: once with `stats`, else every `interval`
    /// seconds while the container runs.
    Events {
        id: String,
        interval: u32,
        stats: bool,
    },
    /// The runtime-spec features document (JSON).
    Features,
    /// Writes a template `config.json` into `bundle` (default `.`).
    Spec {
        bundle: Option<PathBuf>,
        rootless: bool,
    },
    /// A runc command germline-runtime does not do, with the reason.
    Unsupported {
        command: &'static str,
        reason: &'static str,
    },
    /// Print the container's state as runc does (JSON).
    State { id: String },
    /// Send a signal (default TERM) to the container's process.
    Kill { id: String, signal: Option<String> },
    /// Remove a stopped container (with `force`, kill it first).
    Delete { force: bool, id: String },
    /// Freeze the container's front end and broker.
    Pause { id: String },
    /// Thaw them.
    Resume { id: String },
    /// Refused: a germline container runs only its signed release.
    Exec,
    /// The container's process (internal): waits for `start`, then execs `germline run`.
    Init { id: String },
    /// An OCI hook; only `precreate`.
    Hook {
        stage: String,
        require_release: bool,
        exit_status: bool,
    },
}

/// runc-style logging: messages to `--log` (text or JSON lines) and errors to stderr.
#[derive(Debug)]
pub struct Log {
    /// `--log`: append messages to this file (podman and conmon read errors from it).
    pub file: Option<PathBuf>,
    /// `--log-format json`.
    pub json: bool,
}

impl Log {
    /// Appends one line at `level` to the log file, if there is one.
    pub fn write(&self, level: &str, msg: &str) {
        let Some(p) = &self.file else { return };
        let time = jiff::Timestamp::now().to_string();
        let line = if self.json {
            serde_json::json!({"level": level, "msg": msg, "time": time}).to_string()
        } else {
            format!("time=\"{time}\" level={level} msg={msg:?}")
        };
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
        {
            let _ = writeln!(f, "{line}");
        }
    }

    /// A warning: to stderr and to the log file.
    pub fn warn(&self, msg: &str) {
        eprintln!("germline-runtime: {msg}");
        self.write("warning", msg);
    }
}

/// Runs one command; `Ok` carries the exit status (0, or the container's for a foreground
/// `run`).
pub fn run(cli: &Globals, cmd: &Cmd, log: &Log) -> Result<u8> {
    let root = &cli.root;
    // Commands about a container handed to runc go to runc.
    let id = match cmd {
        Cmd::Start { id }
        | Cmd::State { id }
        | Cmd::Kill { id, .. }
        | Cmd::Delete { id, .. }
        | Cmd::Pause { id }
        | Cmd::Resume { id }
        | Cmd::Ps { id, .. }
        | Cmd::Events { id, .. } => Some(id.as_str()),
        _ => None,
    };
    if let Some(id) = id {
        state::check_id(id)?;
        if state::handoff_marker(root, id).exists() {
            return to_runc(cli, id, matches!(cmd, Cmd::Delete { .. })).map(|()| 0);
        }
    }
    match cmd {
        Cmd::Create {
            bundle,
            pid_file,
            console_socket,
            id,
        } => create(cli, log, bundle, pid_file.as_deref(), *console_socket, id).map(|_| 0),
        Cmd::Run {
            bundle,
            pid_file,
            console_socket,
            detach,
            keep,
            id,
        } => run_container(
            cli,
            log,
            bundle,
            pid_file.as_deref(),
            *console_socket,
            *detach,
            *keep,
            id,
        ),
        Cmd::Start { id } => start(root, id).map(|()| 0),
        Cmd::State { id } => {
            let s = State::load(root, id)?;
            info::print_json(&s.to_runc_json(root)?).map(|()| 0)
        }
        Cmd::List { format, quiet } => info::list(cli, format, *quiet).map(|()| 0),
        Cmd::Ps {
            format,
            id,
            ps_options,
        } => info::ps(root, id, format, ps_options).map(|()| 0),
        Cmd::Events {
            id,
            interval,
            stats,
        } => info::events(root, id, *interval, *stats).map(|()| 0),
        Cmd::Features => info::print_json(&info::features()?).map(|()| 0),
        Cmd::Spec { bundle, rootless } => info::spec(bundle.as_deref(), *rootless).map(|()| 0),
        Cmd::Unsupported { command, reason } => Err(Error::Unsupported { command, reason }),
        other => run_other(cli, log, other).map(|()| 0),
    }
}

/// The commands that print nothing and return no status.
fn run_other(cli: &Globals, log: &Log, cmd: &Cmd) -> Result<()> {
    let root = &cli.root;
    match cmd {
        Cmd::Kill { id, signal } => {
            let sig = parse_signal(signal.as_deref().unwrap_or("TERM"))?;
            let s = State::load(root, id)?;
            if !s.alive() {
                return Err(Error::NotRunning(id.clone()));
            }
            host::kill(s.pid, sig)
        }
        Cmd::Delete { id, force } => delete(root, id, *force),
        Cmd::Pause { id } => pause(root, id, true),
        Cmd::Resume { id } => pause(root, id, false),
        Cmd::Exec => Err(Error::ExecUnsupported),
        Cmd::Init { id } => init(cli, id),
        Cmd::Hook {
            stage,
            require_release,
            exit_status,
        } => {
            if stage != "precreate" {
                return Err(Error::HookStage(stage.clone()));
            }
            hook_precreate(cli, log, *require_release, *exit_status)
        }
        // Handled by `run`.
        Cmd::Create { .. }
        | Cmd::Run { .. }
        | Cmd::Start { .. }
        | Cmd::State { .. }
        | Cmd::List { .. }
        | Cmd::Ps { .. }
        | Cmd::Events { .. }
        | Cmd::Features
        | Cmd::Spec { .. }
        | Cmd::Unsupported { .. } => Ok(()),
    }
}

/// The signals a foreground `run` passes on to the container's process (runc passes every
/// signal but SIGCHLD, SIGWINCH and SIGURG; these are the ones a shell or a supervisor sends).
const FORWARDED: [i32; 6] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// `run`: `create` and `start`. In the foreground the container's process is this process's
/// child: signals sent to `germline-runtime run` reach it, its exit status is returned, and the
/// container is removed afterwards (as `delete` would) unless `keep`.
#[allow(clippy::too_many_arguments)]
fn run_container(
    cli: &Globals,
    log: &Log,
    bundle: &Path,
    pid_file: Option<&Path>,
    console: bool,
    detach: bool,
    keep: bool,
    id: &str,
) -> Result<u8> {
    let root = &cli.root;
    if !detach {
        // Before the container's process exists, so that no signal is lost in between; that
        // process starts with an empty mask (std::process::Command resets it).
        germline_sys::sys::block_signals(&FORWARDED).map_err(Error::sys("blocking signals"))?;
    }
    let mut child = match create(cli, log, bundle, pid_file, console, id)? {
        Created::Germline(child) => child,
        // runc ran the whole `run` (this command line, handed on), and removed its container
        // unless it was kept or detached: so goes our record of it.
        Created::HandedToRunc => {
            if !detach && !keep {
                let _ = std::fs::remove_dir_all(state::dir(root, id));
            }
            return Ok(0);
        }
    };
    if let Err(e) = start(root, id) {
        if !detach {
            let _ = delete(root, id, true);
        }
        return Err(e);
    }
    if detach {
        // The container's process outlives us, as after `create` and `start`.
        return Ok(0);
    }
    let pid = child.id() as i32;
    std::thread::spawn(move || {
        while let Ok(sig) = germline_sys::sys::wait_signal(&FORWARDED) {
            let _ = germline_sys::sys::kill(pid, sig);
        }
    });
    let status = child
        .wait()
        .map_err(Error::sys("waiting for the container"))?;
    if !keep {
        delete(root, id, true)?;
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        // A shell's convention, as runc's: 128 + the signal.
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        (None, None) => 1,
    })
}

/// The runc command line for a handed-off container: this one's arguments with our own
/// global flags replaced by runc's state root.
fn runc_args(root: &Path) -> Vec<String> {
    let mut out = vec![
        "--root".to_string(),
        state::runc_root(root).display().to_string(),
    ];
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        if a == "--root" || a == "--config" {
            it.next();
        } else if a.starts_with("--root=") || a.starts_with("--config=") {
        } else {
            out.push(a);
        }
    }
    out
}

fn to_runc(cli: &Globals, id: &str, deleting: bool) -> Result<()> {
    let cfg = Config::load(cli.config.as_deref())?;
    let status = Command::new(&cfg.runc)
        .args(runc_args(&cli.root))
        .status()
        .map_err(Error::io(&cfg.runc))?;
    if deleting && status.success() {
        let _ = std::fs::remove_dir_all(state::dir(&cli.root, id));
    }
    if status.success() {
        Ok(())
    } else {
        Err(Error::Runc(status))
    }
}

fn parse_signal(s: &str) -> Result<i32> {
    if let Ok(n) = s.parse::<i32>() {
        if (1..=64).contains(&n) {
            return Ok(n);
        }
    }
    let upper = s.to_ascii_uppercase();
    let name = upper.trim_start_matches("SIG");
    let n = match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        "WINCH" => libc::SIGWINCH,
        _ => return Err(Error::UnknownSignal(s.to_string())),
    };
    Ok(n)
}

/// Whether `rootfs` carries a germline release (its signed manifest).
fn is_germline_release(rootfs: &Path) -> bool {
    std::fs::symlink_metadata(rootfs.join(".germline/manifest.json"))
        .map(|m| m.is_file())
        .unwrap_or(false)
}

/// The directory to verify for the engine's rootfs: an overlay's one lower directory (the image
/// layer as the engine unpacked it: engines write into the upper layer before the runtime
/// runs, podman adds /etc/mtab), else the rootfs itself.
fn image_layer(rootfs: &Path) -> Result<PathBuf> {
    match mountinfo::overlay_lowerdirs(rootfs) {
        Some(l) if l.len() == 1 => Ok(l[0].clone()),
        Some(l) => Err(Error::ImageLayers {
            rootfs: rootfs.to_path_buf(),
            layers: l.len(),
        }),
        None => Ok(rootfs.to_path_buf()),
    }
}

/// Where a refusing precreate hook points `root.path`: a path below `/proc`, where nothing can
/// be created, so no runtime finds a rootfs there; the runtime's error (runc: `invalid rootfs:
/// stat PATH: no such file or directory`) then carries the reason into podman's output, which
/// is the only channel podman 4.3 leaves a precreate hook (it discards the hook's stderr, and
/// its stdout when it exits non-zero).
const REFUSED_ROOT: &str = "/proc/germline-precreate-refused: ";

/// podman's `precreate` hook: verifies before podman creates anything with the runtime, so a
/// tampered or unsigned release is refused whatever the runtime (runc included). A refusal
/// writes the configuration back with `root.path` = `REFUSED_ROOT` + the reason and exits 0
/// (so the reason reaches podman's output through the runtime's error), or, with
/// `--exit-status`, exits 1 with the reason in `--log` only.
fn hook_precreate(
    cli: &Globals,
    log: &Log,
    require_release: bool,
    exit_status: bool,
) -> Result<()> {
    const MAX: u64 = 4 << 20;
    let mut text = String::new();
    std::io::stdin()
        .take(MAX + 1)
        .read_to_string(&mut text)
        .map_err(|e| Error::sys("reading config.json from stdin")(e).hook())?;
    if text.len() as u64 > MAX {
        return Err(Error::StdinTooLarge.hook());
    }
    let mut v: serde_json::Value = serde_json::from_str(&text).map_err(|source| {
        Error::NotJson {
            file: "config.json on stdin".into(),
            source,
        }
        .hook()
    })?;
    let out = match precreate_decide(cli, log, require_release, &v) {
        // The configuration goes back unchanged: this hook only decides.
        Ok(()) => text,
        Err(e) if exit_status => return Err(e),
        Err(e) => {
            let msg = e.to_string();
            log.write("error", &msg);
            let reason: String = msg
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect();
            let Some(root) = v.get_mut("root").and_then(|r| r.as_object_mut()) else {
                return Err(Error::NoRootToMark(Box::new(e)));
            };
            root.insert("path".into(), format!("{REFUSED_ROOT}{reason}").into());
            serde_json::to_string(&v).map_err(|source| Error::MarkRefused {
                refusal: Box::new(e),
                source,
            })?
        }
    };
    std::io::stdout()
        .write_all(out.as_bytes())
        .map_err(|e| Error::sys("writing config.json")(e).hook())
}

/// The precreate hook's decision on the proposed `config.json` `v`.
fn precreate_decide(
    cli: &Globals,
    log: &Log,
    require_release: bool,
    v: &serde_json::Value,
) -> Result<()> {
    let cfg = Config::load(cli.config.as_deref()).map_err(Error::hook)?;
    let spec = EngineSpec::parse(v, Path::new("/"), "config.json (precreate hook stdin)")
        .map_err(Error::hook)?;
    if is_germline_release(&spec.rootfs) {
        let source = image_layer(&spec.rootfs).map_err(Error::hook)?;
        let dir = paths::precreate_dir(std::process::id());
        let rfs = dir.join("rootfs");
        std::fs::create_dir_all(&rfs).map_err(Error::io(&rfs))?;
        let r = host::bind_readonly(&source, &rfs).and_then(|()| verify(&dir, &cfg.keys, &cfg));
        while mountinfo::is_mount_point(&rfs) {
            if host::unmount(&rfs).is_err() {
                // Never remove files through a rootfs that is still mounted here.
                return Err(Error::CannotUnmount(rfs).hook());
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        let (key, verified) = r.map_err(Error::hook)?;
        let trust = check_trust(&cfg, &verified).map_err(Error::hook)?;
        log.write(
            "info",
            &format!(
                "precreate hook: release {}@{} ({}) verified under {}; {}",
                verified.manifest.name,
                verified.manifest.version,
                verified.rootfs_digest,
                key.display(),
                trust_note(&cfg, &trust)
            ),
        );
    } else if require_release {
        return Err(Error::ReleaseRequired(spec.rootfs).hook());
    }
    Ok(())
}

/// What `create` made.
#[derive(Debug)]
enum Created {
    /// A germline container: its process (our child, waiting for `start`).
    Germline(std::process::Child),
    /// Not a germline release: runc was given this command line.
    HandedToRunc,
}

fn create(
    cli: &Globals,
    log: &Log,
    bundle: &Path,
    pid_file: Option<&Path>,
    console: bool,
    id: &str,
) -> Result<Created> {
    let root = &cli.root;
    state::check_id(id)?;
    let cfg = Config::load(cli.config.as_deref())?;
    let bundle = std::fs::canonicalize(bundle).map_err(|e| Error::op("bundle", bundle, e))?;
    let mut spec = EngineSpec::load(&bundle)?;
    if let Some(reason) = spec
        .rootfs
        .to_str()
        .and_then(|p| p.strip_prefix(REFUSED_ROOT))
    {
        let reason = reason.strip_prefix("precreate hook: ").unwrap_or(reason);
        return Err(Error::RefusedByHook(reason.to_string()));
    }
    let sdir = state::dir(root, id);
    if sdir.exists() {
        return Err(Error::AlreadyExists(id.to_string()));
    }
    if !is_germline_release(&spec.rootfs) {
        if cfg.non_germline == NonGermline::Runc {
            std::fs::create_dir_all(&sdir).map_err(Error::io(&sdir))?;
            std::fs::write(state::handoff_marker(root, id), b"").map_err(Error::io(&sdir))?;
            log.write(
                "info",
                &format!("{id}: not a germline release, handed to runc"),
            );
            let r = to_runc(cli, id, false);
            if r.is_err() {
                let _ = std::fs::remove_dir_all(&sdir);
            }
            return r.map(|()| Created::HandedToRunc);
        }
        return Err(Error::NotRelease {
            bundle,
            rootfs: spec.rootfs,
            config: cfg.source,
        });
    }
    if console || spec.terminal {
        return Err(Error::Terminal);
    }
    std::fs::create_dir_all(root).map_err(Error::io(root))?;
    std::fs::create_dir(&sdir).map_err(Error::io(&sdir))?;
    // Traversable: the germline's unprivileged user (its own user namespace) binds the
    // rootfs below it. The state file holds nothing secret.
    let _ = std::fs::set_permissions(&sdir, std::fs::Permissions::from_mode(0o711));
    match prepare(cli, log, &cfg, &bundle, &mut spec, pid_file, id) {
        Ok(child) => Ok(Created::Germline(child)),
        Err(e) => {
            remove_state(root, id, None);
            Err(e)
        }
    }
}

fn prepare(
    cli: &Globals,
    log: &Log,
    cfg: &Config,
    bundle: &Path,
    spec: &mut EngineSpec,
    pid_file: Option<&Path>,
    id: &str,
) -> Result<std::process::Child> {
    let root = &cli.root;
    if let Network::Path(p) = &spec.network {
        host::check_netns(p)?;
    }
    let rel = state::release_dir(root, id);
    let rfs = rel.join("rootfs");
    for d in [
        Path::new(paths::RUNTIME_ROOT),
        Path::new(paths::RUNTIME_RELEASES),
        &rel,
    ] {
        std::fs::create_dir_all(d).map_err(Error::io(d))?;
        let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o711));
    }
    std::fs::create_dir_all(&rfs).map_err(Error::io(&rfs))?;
    // An engine writes into its overlay's upper layer before the runtime runs (podman adds
    // /etc/mtab): verify and run the image's own layer, its one lower directory.
    let source = image_layer(&spec.rootfs)?;
    host::bind_readonly(&source, &rfs)?;
    let (key, verified) = verify(&rel, &cfg.keys, cfg)?;
    let trust = check_trust(cfg, &verified)?;
    let m = &verified.manifest;
    // `-e` variables the deployer's policy names as a host's credential source become the
    // broker's environment (only the broker reads them; copies get the manifest's).
    let policy = germline_policy::Policy::load(&cfg.policy).map_err(|source| Error::Policy {
        config: cfg.source.clone(),
        source: Box::new(source),
    })?;
    let mut by_name: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    for (host, c) in policy.credentials() {
        if let germline_policy::policy::CredentialSource::Env(n) = &c.source {
            by_name.entry(n.clone()).or_default().push(host);
        }
    }
    let names = by_name.keys().cloned().collect();
    let credentials = spec.take_credentials(&names);
    for (k, _) in &credentials {
        let hosts = by_name.get(k).map(|h| h.join(", ")).unwrap_or_default();
        log.write(
            "info",
            &format!(
                "{id}: -e {k} is the broker's credential for {hosts} (the node policy's value_env)"
            ),
        );
    }
    let mut ignored = spec.ignored.clone();
    if !spec.args.is_empty() && spec.args != m.entry {
        ignored.push(format!(
            "the command {:?}: the germline runs the signed entry point {:?}",
            spec.args, m.entry
        ));
    }
    if !ignored.is_empty() {
        if cfg.overrides == Overrides::Refuse {
            return Err(Error::Overrides {
                config: cfg.source.clone(),
                ignored,
            });
        }
        for i in &ignored {
            log.warn(&format!("ignored {i}"));
        }
    }
    log.write(
        "info",
        &format!(
            "{id}: release {}@{} ({}) verified under {}; {}",
            m.name,
            m.version,
            verified.rootfs_digest,
            key.display(),
            trust_note(cfg, &trust)
        ),
    );
    host::mkfifo(&state::fifo(root, id))?;
    let mut st = State {
        id: id.to_string(),
        bundle: bundle.to_path_buf(),
        rootfs: spec.rootfs.clone(),
        created: jiff::Timestamp::now().to_string(),
        pid: 0,
        start_time: 0,
        key,
        cgroups: Vec::new(),
        paused: false,
        ignored: ignored.clone(),
        annotations: spec.annotations.clone(),
        network: spec.network.clone(),
        listen: spec.listen,
    };
    st.save(root)?;
    let exe = std::env::current_exe().map_err(Error::sys("own executable"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--root").arg(root);
    if let Some(c) = &cli.config {
        cmd.arg("--config").arg(c);
    }
    cmd.arg("init").arg(id);
    cmd.envs(credentials);
    // The container's stdio is this command's: the engine's pipes (conmon's, for podman).
    let child = cmd
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(Error::sys("cannot start the container's process"))?;
    let pid = child.id() as i32;
    st.pid = pid;
    st.start_time = procfs::start_time(pid).ok_or(Error::ExitedAtOnce)?;
    if let Some(cp) = &spec.cgroups_path {
        if cgroup::is_plain_path(cp) {
            st.cgroups = cgroup::join(cp, pid);
        } else {
            log.write(
                "info",
                &format!("{id}: cgroup {cp:?} is not a cgroupfs path; not joined"),
            );
        }
    }
    st.save(root)?;
    if let Some(p) = pid_file {
        let tmp = p.with_extension("germline-tmp");
        std::fs::write(&tmp, pid.to_string()).map_err(Error::io(&tmp))?;
        std::fs::rename(&tmp, p).map_err(Error::io(p))?;
    }
    // `create` drops it: the child outlives us, and the engine (conmon, a subreaper) reaps
    // it; a foreground `run` waits for it.
    Ok(child)
}

/// The container's process: waits on the exec fifo for `start`, then becomes `germline run`.
fn init(cli: &Globals, id: &str) -> Result<()> {
    let root = &cli.root;
    let st = State::load(root, id)?;
    let cfg = Config::load(cli.config.as_deref())?;
    // The engine's network namespace, entered before `start` as runc does: the front end
    // and the broker it starts live there (copies have their own, with only the broker's
    // endpoint), so the workload's network policy applies to what the broker delivers.
    match &st.network {
        Network::Host => {}
        Network::New => host::new_netns()?,
        Network::Path(p) => host::enter_netns(p)?,
    }
    {
        // Blocks until `start` opens the fifo for reading.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(state::fifo(root, id))
            .map_err(Error::sys("exec fifo"))?;
        f.write_all(b"0").map_err(Error::sys("exec fifo"))?;
    }
    for i in &st.ignored {
        eprintln!("germline-runtime: ignored {i}");
    }
    let mut cmd = Command::new(&cfg.germline);
    match st.listen {
        // `dev.germline.mcp/listen`: Streamable HTTP in the container's network namespace.
        Some(mut addr) => {
            // 0.0.0.0:PORT: the pod's own address (serve's DNS-rebinding guard accepts
            // `Host` naming a specific listen address, never an unspecified one).
            if addr.ip().is_unspecified() {
                addr.set_ip(host::first_address()?.into());
            }
            cmd.arg("serve").arg("--listen").arg(addr.to_string());
            if let Some(t) = &cfg.http_token_file {
                cmd.arg("--token-file").arg(t);
            }
        }
        None => {
            cmd.arg("run");
        }
    }
    cmd.arg("--policy")
        .arg(&cfg.policy)
        .arg("--key")
        .arg(&st.key)
        .arg("--mode")
        .arg(&cfg.mode)
        .arg("--pool")
        .arg(cfg.pool.to_string())
        .arg("--state-dir")
        .arg(&cfg.state_dir);
    if let Some(a) = &cfg.audit {
        cmd.arg("--audit").arg(a);
    }
    if let Some(b) = &cfg.broker {
        cmd.arg("--broker").arg(b);
    }
    cmd.arg(state::release_dir(root, id));
    let e = cmd.exec();
    Err(Error::op("cannot exec", &cfg.germline, e))
}

fn start(root: &Path, id: &str) -> Result<()> {
    let st = State::load(root, id)?;
    let fifo = state::fifo(root, id);
    if !fifo.exists() {
        return Err(Error::AlreadyStarted(id.to_string()));
    }
    if !st.alive() {
        return Err(Error::ProcessExited(id.to_string()));
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .map_err(Error::sys("exec fifo"))?;
    let t = Instant::now();
    let mut b = [0u8; 1];
    loop {
        match f.read(&mut b) {
            Ok(1) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(Error::sys("exec fifo")(e)),
        }
        if !st.alive() {
            return Err(Error::ExitedBeforeStart(id.to_string()));
        }
        if t.elapsed() > Duration::from_secs(10) {
            return Err(Error::StartTimeout(id.to_string()));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    std::fs::remove_file(&fifo).map_err(Error::io(&fifo))
}

fn pause(root: &Path, id: &str, frozen: bool) -> Result<()> {
    let mut st = State::load(root, id)?;
    if !st.alive() {
        return Err(Error::NotRunning(id.to_string()));
    }
    if !cgroup::freeze_dirs(&st.cgroups, frozen) {
        host::kill(st.pid, if frozen { libc::SIGSTOP } else { libc::SIGCONT })?;
    }
    st.paused = frozen;
    st.save(root)
}

fn delete(root: &Path, id: &str, force: bool) -> Result<()> {
    let st = match State::load(root, id) {
        Ok(s) => s,
        Err(_) if force && !state::dir(root, id).join("state.json").exists() => {
            // Nothing recorded (or a create that failed half way): remove what is there.
            remove_state(root, id, None);
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    let status = st.status(root);
    if st.alive() {
        if !force && status != "created" {
            return Err(Error::NotStopped {
                id: id.to_string(),
                status,
            });
        }
        cgroup::freeze_dirs(&st.cgroups, false);
        let _ = host::kill(st.pid, libc::SIGKILL);
        let _ = host::kill(st.pid, libc::SIGCONT);
        if !host::wait_gone(st.pid, st.start_time, Duration::from_secs(5)) {
            return Err(Error::DidNotDie {
                id: id.to_string(),
                pid: st.pid,
            });
        }
    }
    remove_state(root, id, Some(&st));
    Ok(())
}

/// Removes everything of a container: what a `germline run` killed with SIGKILL leaves (its
/// germlines' cgroups and processes, its run directories), the engine cgroups we joined, the
/// read-only bind of the rootfs and the state directory.
fn remove_state(root: &Path, id: &str, st: Option<&State>) {
    if let Some(st) = st {
        if let Some(pid) = u32::try_from(st.pid).ok().filter(|p| *p > 0) {
            host::destroy_cgroups(&cgroup::germline_run_cgroups(pid));
            let _ = std::fs::remove_dir_all(paths::session_dir(pid));
            let _ = std::fs::remove_dir_all(paths::serve_dir(pid));
            if let Ok(rd) = std::fs::read_dir(paths::RUN_DIR) {
                let prefix = paths::ca_dir_prefix(pid);
                for e in rd.flatten() {
                    if e.file_name().to_string_lossy().starts_with(&prefix) {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        host::destroy_cgroups(&st.cgroups);
    }
    let rfs = state::release_dir(root, id).join("rootfs");
    while mountinfo::is_mount_point(&rfs) {
        if host::unmount(&rfs).is_err() {
            // Never remove files through a rootfs that is still mounted here.
            return;
        }
    }
    let _ = std::fs::remove_dir_all(state::release_dir(root, id));
    let _ = std::fs::remove_dir_all(state::dir(root, id));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_number_and_name() {
        assert_eq!(parse_signal("15").ok(), Some(libc::SIGTERM));
        assert_eq!(parse_signal("TERM").ok(), Some(libc::SIGTERM));
        assert_eq!(parse_signal("SIGKILL").ok(), Some(libc::SIGKILL));
        assert_eq!(parse_signal("sigint").ok(), Some(libc::SIGINT));
        assert!(parse_signal("0").is_err());
        let e = parse_signal("BOGUS").expect_err("unknown name");
        assert_eq!(e.to_string(), "unknown signal \"BOGUS\"");
    }
}
