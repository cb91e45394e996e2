//! `germline release pack --from pypi:NAME[==VERSION]` (issue 27): one command from a PyPI
//! name to a signed release.
//!
//! The steps, each shown as it runs ([`progress`]):
//! 1. [`source`]: pip installs the package and its dependencies into the rootfs's
//!    `/usr/lib/python3/dist-packages` (wheels cached under `/var/tmp/germline-pack`);
//! 2. [`rootfs`]: the host's Debian Python runtime beside them, as `bundles/build.sh` makes it,
//!    the shared libraries `ldd` names, and deterministic `.pyc` files;
//!    then the publisher's `--rootfs-hook` on the rootfs and its `--germline-owned` paths
//!    checked against it ([`publisher`]);
//! 3. [`probe`]: the server started once in a germline (the real sandbox, no network, no
//!    data) to list its tools: the bootstrap's SDK probe refuses here what it cannot run;
//! 4. [`draft`]: the manifest, every tool with the destinations the publisher gave by flag
//!    (none otherwise: never guessed), written beside the release for review;
//! 5. `germline_release::release::pack_with`: rootfs digest, OCI bundle and image, signature;
//!    then `--germline-owned` applied to the bundle (ownership is not in the digest).

pub mod draft;
pub mod memory;
pub mod npm;
pub mod probe;
pub mod progress;
pub mod publisher;
pub mod rootfs;
pub mod source;

use std::path::{Path, PathBuf};

use clap::Args;

pub use source::PyPiSpec;

/// The cache of pip's downloads and wheels (kept between packs: a second pack of the same
/// server downloads nothing).
pub const DEFAULT_CACHE: &str = "/var/tmp/germline-pack";

/// Why a pack from PyPI failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("--from {0:?}: expected pypi:NAME[==VERSION] or npm:NAME[@VERSION]")]
    Spec(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{command} failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{0}")]
    Entry(String),
    #[error("{0}")]
    Version(String),
    #[error("the server did not start in the germline: {0}")]
    Probe(String),
    #[error("--state {0:?}: expected NAME, NAME/ or FLAG=NAME (NAME of [A-Za-z0-9._-])")]
    State(String),
    #[error("--probe-call {0}: expected TOOL or TOOL=JSON (the arguments, an object) of a tool the server lists")]
    ProbeCall(String),
    #[error("--destination {0:?}: expected TOOL=HOST")]
    Destination(String),
    #[error("--destination {tool}={host}: the server has no tool {tool:?} (it lists: {tools})")]
    UnknownTool {
        tool: String,
        host: String,
        tools: String,
    },
    /// `--rootfs-hook` failed or could not run ([`publisher`]).
    #[error("--rootfs-hook {0}")]
    Hook(String),
    /// A `--germline-owned` path refused, or the pack not run as root ([`publisher`]).
    #[error("{0}")]
    Owned(String),
    #[error(transparent)]
    Release(#[from] germline_release::error::Error),
}

impl Error {
    pub(crate) fn io(what: impl std::fmt::Display, source: std::io::Error) -> Error {
        Error::Io {
            what: what.to_string(),
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The flags of `germline release pack` that only `--from` uses.
#[derive(Debug, Clone, Args, Default)]
pub struct FromArgs {
    /// Build the rootfs from PyPI (`pypi:NAME` or `pypi:NAME==VERSION`) or npm (`npm:NAME` or
    /// `npm:NAME@VERSION`, issue 28); then --manifest is where the draft manifest is written,
    /// default `<out>.manifest.json`.
    #[arg(
        long = "from",
        value_name = "pypi:NAME[==VERSION] | npm:NAME[@VERSION]"
    )]
    pub from: Option<String>,
    /// More requirements pip (or npm) installs beside the package (e.g. `mcp==1.26.0`);
    /// repeatable.
    #[arg(long = "with", value_name = "REQUIREMENT", requires = "from")]
    pub with: Vec<String>,
    /// A destination the publisher declares for a tool, `TOOL=HOST`; repeatable. A tool without
    /// one gets none (no network): destinations are never guessed.
    #[arg(long = "destination", value_name = "TOOL=HOST", requires = "from")]
    pub destinations: Vec<String>,
    /// The entry point, `module:function` or `-m module` (default: the package's console
    /// script named like it, or its only one); with `npm:`, `BIN [ARGS...]`, a `bin` of the
    /// package or a file of it (default: the `bin` named like it, or its only one).
    #[arg(long, requires = "from", allow_hyphen_values = true)]
    pub entry: Option<String>,
    /// A host file or directory the server needs besides Python (a program it runs, e.g.
    /// `/usr/bin/git`), copied to the same path in the rootfs with the libraries `ldd` names;
    /// repeatable.
    #[arg(long = "include", value_name = "HOST_PATH", requires = "from")]
    pub include: Vec<PathBuf>,
    /// State the server keeps in files between calls (issue 27), kept by germline per (release,
    /// user, horizon): `NAME` (a file at /run/state/NAME), `NAME/` (a directory), or
    /// `FLAG=NAME` for a file the entry takes by a flag (`--state=--db-path=db.sqlite`: the
    /// entry gets `--db-path /run/state/db.sqlite`); repeatable.
    #[arg(
        long = "state",
        value_name = "[FLAG=]NAME[/]",
        requires = "from",
        allow_hyphen_values = true
    )]
    pub state: Vec<String>,
    /// A call the probe makes to see whether the server keeps state in memory between calls
    /// (issue 27): `TOOL=JSON` (its arguments) or `TOOL`; repeatable. It runs twice in one
    /// copy and once in a fresh one, and the resources are read after it; a difference is
    /// printed as a warning (docs/servers.md, "State in memory"). Data-free: no items, no
    /// network.
    #[arg(long = "probe-call", value_name = "TOOL[=JSON]", requires = "from")]
    pub probe_calls: Vec<String>,
    /// The publisher's script run on the rootfs once the packages and runtime are in, as
    /// `SCRIPT ROOTFS` (an executable; its output is shown only if it fails). What it writes is
    /// probed, digested and signed with the rest; its failure stops the pack (the script, its
    /// exit status, its stderr's end) and no release is written. Example:
    /// bundles/servers/mcp-server-git/rootfs-hook (the public repository its warm calls read).
    #[arg(long = "rootfs-hook", value_name = "SCRIPT", requires = "from")]
    pub rootfs_hook: Option<PathBuf>,
    /// A rootfs path owned, recursively, by the germline's root (host uid and gid 2100000) in
    /// the bundle written, applied after the hook; repeatable; needs root. For what refuses
    /// files another user owns, such as git ("dubious ownership"). Absolute, no `..`, present
    /// in the rootfs, no symbolic link on the way. Ownership is not in the rootfs digest nor
    /// signed (docs/release.md, "Germline-owned paths"). Also with --rootfs and --from-image.
    #[arg(long = "germline-owned", value_name = "ROOTFS_PATH")]
    pub germline_owned: Vec<String>,
    /// Where pip keeps its downloads and wheels between packs.
    #[arg(long, default_value = DEFAULT_CACHE, requires = "from")]
    pub cache: PathBuf,
    /// The host's Python whose runtime goes into the rootfs (Debian's python3.11).
    #[arg(long, default_value = rootfs::DEFAULT_PYTHON, requires = "from")]
    pub python: PathBuf,
    /// With `npm:`: the host's Node.js whose `node` goes into the rootfs.
    #[arg(long, default_value = npm::runtime::DEFAULT_NODE, requires = "from")]
    pub node: PathBuf,
    /// With `npm:NAME@VERSION`: install the package from this tarball (`npm pack`'s output)
    /// instead of the registry; its dependencies still come from the registry. For packages
    /// that are not published, such as the Node corpus (bundles/build-corpus-node.sh).
    #[arg(long = "npm-tarball", value_name = "TGZ", requires = "from")]
    pub npm_tarball: Option<PathBuf>,
}

/// What a pack from PyPI asks for.
#[derive(Debug)]
pub struct PackFrom {
    pub spec: PyPiSpec,
    pub with: Vec<String>,
    pub destinations: Vec<(String, String)>,
    pub entry: Option<String>,
    pub include: Vec<PathBuf>,
    /// The declared state paths (`--state`).
    pub state: Vec<germline_release::manifest::StatePath>,
    /// `--probe-call`s ([`memory`]).
    pub probe_calls: Vec<memory::ProbeCall>,
    /// `--rootfs-hook`, absolute ([`publisher`]).
    pub rootfs_hook: Option<PathBuf>,
    /// `--germline-owned`, relative to the rootfs ([`publisher`]).
    pub germline_owned: Vec<PathBuf>,
    pub cache: PathBuf,
    pub python: PathBuf,
    /// Where the draft manifest is written.
    pub manifest_out: PathBuf,
    pub key: Option<germline_release::keys::SigningKey>,
    pub out: PathBuf,
    pub image: Option<PathBuf>,
    pub limits: germline_release::untrusted::Limits,
    /// Draw the steps on stderr ([`progress`]); `from_args` sets it when stderr is a terminal,
    /// and `germline` clears it for `--quiet` and `--json`.
    pub progress: bool,
}

impl PackFrom {
    /// From the command line's flags.
    pub fn from_args(
        a: &FromArgs,
        manifest_out: Option<&Path>,
        key: Option<germline_release::keys::SigningKey>,
        out: &Path,
        image: Option<&Path>,
        limits: germline_release::untrusted::Limits,
    ) -> Result<PackFrom> {
        let from = a.from.as_deref().unwrap_or_default();
        let destinations = a
            .destinations
            .iter()
            .map(|d| {
                d.split_once('=')
                    .filter(|(t, h)| !t.is_empty() && !h.is_empty())
                    .map(|(t, h)| (t.to_string(), h.to_string()))
                    .ok_or_else(|| Error::Destination(d.clone()))
            })
            .collect::<Result<Vec<_>>>()?;
        let manifest_out = manifest_out.map(Path::to_path_buf).unwrap_or_else(|| {
            let mut s = out.as_os_str().to_owned();
            s.push(".manifest.json");
            PathBuf::from(s)
        });
        Ok(PackFrom {
            spec: PyPiSpec::parse(from)?,
            with: a.with.clone(),
            destinations,
            entry: a.entry.clone(),
            include: a.include.clone(),
            state: a
                .state
                .iter()
                .map(String::as_str)
                .map(state_path)
                .collect::<Result<Vec<_>>>()?,
            probe_calls: a
                .probe_calls
                .iter()
                .map(|c| memory::ProbeCall::parse(c))
                .collect::<Result<Vec<_>>>()?,
            rootfs_hook: a
                .rootfs_hook
                .as_deref()
                .map(publisher::hook_path)
                .transpose()?,
            germline_owned: publisher::owned_paths(&a.germline_owned)?,
            cache: a.cache.clone(),
            python: a.python.clone(),
            manifest_out,
            key,
            out: out.to_path_buf(),
            image: image.map(Path::to_path_buf),
            limits,
            progress: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        })
    }
}

/// The last two steps of every `--from` pack: the draft manifest written where the publisher
/// reviews it, then the release packed from `root` (digest, bundle, signature with `--key`).
pub(crate) fn write_and_pack(
    p: &PackFrom,
    manifest: &serde_json::Value,
    root: PathBuf,
    bar: &mut progress::Steps,
) -> Result<germline_release::release::Packed> {
    let text = serde_json::to_string_pretty(manifest).unwrap_or_else(|_| manifest.to_string());
    std::fs::write(&p.manifest_out, text + "\n")
        .map_err(|e| Error::io(p.manifest_out.display(), e))?;
    bar.step(if p.key.is_some() {
        "release: digest, bundle, signature"
    } else {
        "release: digest, bundle (unsigned: no --key)"
    });
    let packed = germline_release::release::pack_with(
        &p.manifest_out,
        &germline_release::release::Source::RootfsDir(root),
        p.key.as_ref(),
        &p.out,
        p.image.as_deref(),
        &p.limits,
    )?;
    if !p.germline_owned.is_empty() {
        bar.step(&format!(
            "owned: {} to the germline's root (uid {})",
            publisher::describe(&p.germline_owned),
            germline_sandbox::germline::HOST_ID
        ));
        own_or_remove(&p.out, p.image.as_deref(), &p.germline_owned)?;
    }
    Ok(packed)
}

/// `--germline-owned` applied to the bundle just written at `out`; on failure the bundle and
/// the image are removed, so that a failed pack leaves no release.
pub fn own_or_remove(out: &Path, image: Option<&Path>, owned: &[PathBuf]) -> Result<()> {
    publisher::chown_owned(&out.join("rootfs"), owned)
        .map(|_| ())
        .inspect_err(|_| {
            for d in std::iter::once(out).chain(image) {
                let _ = std::fs::remove_dir_all(d);
            }
        })
}

/// The publisher's steps before the probe: `--rootfs-hook` on `root`, then the
/// `--germline-owned` paths checked against what it holds (applied to the bundle later,
/// [`write_and_pack`]).
pub(crate) fn publisher_steps(p: &PackFrom, root: &Path, bar: &mut progress::Steps) -> Result<()> {
    if let Some(hook) = &p.rootfs_hook {
        bar.step(&format!("hook: {} ROOTFS", hook.display()));
        publisher::run_hook(hook, root)?;
    }
    publisher::check_owned(root, &p.germline_owned)
}

/// How many steps a pack shows: `base`, the hook's and the ownership's.
pub(crate) fn step_count(p: &PackFrom, base: u64) -> u64 {
    base + u64::from(p.rootfs_hook.is_some()) + u64::from(!p.germline_owned.is_empty())
}

/// One `--state` value as a manifest's state path.
pub fn state_path(s: &str) -> Result<germline_release::manifest::StatePath> {
    use germline_release::manifest::{StateKind, StatePath, STATE_DIR};
    let (flag, rest) = match s.split_once('=') {
        Some((f, n)) if f.starts_with('-') && f.len() > 1 => (Some(f.to_string()), n),
        Some(_) => return Err(Error::State(s.to_string())),
        None => (None, s),
    };
    let (name, kind) = match rest.strip_suffix('/') {
        Some(n) => (n, StateKind::Dir),
        None => (rest, StateKind::File),
    };
    let ok = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !ok {
        return Err(Error::State(s.to_string()));
    }
    Ok(StatePath {
        path: format!("{STATE_DIR}/{name}"),
        kind,
        arg: flag,
    })
}

/// What [`pack_from`] made.
#[derive(Debug)]
pub struct Packed {
    pub release: germline_release::release::Packed,
    /// The draft manifest as written (the publisher reviews it; `germline release pack
    /// --manifest` it with `--from-image` or `--rootfs` after an edit).
    pub manifest_path: PathBuf,
    /// The tools the server listed in its germline.
    pub tools: Vec<String>,
    /// Every distribution pip installed, `(name, version)`.
    pub distributions: Vec<(String, String)>,
    /// Seconds per step, in order.
    pub steps: Vec<(&'static str, f64)>,
    /// What each `--probe-call` showed ([`memory`]).
    pub memory: Vec<memory::Finding>,
}

/// Packs `p.spec` from PyPI (see the module's documentation).
pub fn pack_from(p: &PackFrom) -> Result<Packed> {
    publisher::check_can_chown(&p.germline_owned)?;
    let mut bar = progress::Steps::new(step_count(p, 5), p.progress);
    let parent = p
        .out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let work = tempfile::Builder::new()
        .prefix(".germline-pack-")
        .tempdir_in(parent)
        .map_err(|e| Error::io(parent.display(), e))?;
    let root = work.path().join("rootfs");

    bar.step(&format!("pip: {}", p.spec));
    let installed = source::install(p, &root)?;

    bar.step("rootfs: Python runtime, shared libraries, .pyc");
    rootfs::python_runtime(&p.python, &root)?;
    rootfs::include(&root, &p.include)?;
    rootfs::compile(&p.python, &root)?;
    rootfs::extension_libraries(&root)?;
    publisher_steps(p, &root, &mut bar)?;

    bar.step("probe: listing the tools in a germline");
    let mut entry = source::entry(&installed, p.entry.as_deref())?;
    // A state path the entry takes by a flag: the flag and the path in the copy.
    for s in &p.state {
        if let Some(flag) = &s.arg {
            entry.push(flag.clone());
            entry.push(s.path.clone());
        }
    }
    let mut draft0 = draft::Draft::new(&installed, entry, &rootfs::python_version(&p.python)?)?;
    draft0.state = p.state.clone();
    let probed = probe::list_tools(&root, &draft0, &p.probe_calls)?;

    bar.step("manifest: drafting for review");
    let manifest = draft0.manifest(&probed.tools, &p.destinations)?;
    let release = write_and_pack(p, &manifest, root, &mut bar)?;
    let steps = bar.finish();
    Ok(Packed {
        release,
        manifest_path: p.manifest_out.clone(),
        tools: probed.tools.into_iter().map(|t| t.name).collect(),
        distributions: installed.distributions,
        steps,
        memory: probed.memory,
    })
}
