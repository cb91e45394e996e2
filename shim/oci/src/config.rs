//! The node's configuration of `germline-runtime` (`/etc/germline/runtime.toml`): where the
//! pinned keys, the deployer's policy and the `germline` binary are. The engine's `config.json`
//! never decides any of these.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use germline_sys::paths;

use crate::error::{Error, Result};

/// Default location of the node configuration.
pub const DEFAULT_CONFIG: &str = paths::RUNTIME_CONFIG;
/// Environment variable naming another configuration file (for tests and odd layouts).
pub const CONFIG_ENV: &str = "GERMLINE_RUNTIME_CONFIG";

/// What to do with a bundle that is not a germline release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NonGermline {
    /// Refuse it at `create` (the default: this runtime runs signed releases only).
    Refuse,
    /// Hand it, and every later command about it, to runc.
    Runc,
}

/// What to do with engine settings germline does not take from `config.json` (`-e`, `-v`,
/// `--network host`, `--cap-add`, `--privileged`, a command).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Overrides {
    /// Run without them and say which were ignored (the default).
    Ignore,
    /// Refuse the container at `create`, naming them.
    Refuse,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    policy: Option<PathBuf>,
    keys: Option<Vec<PathBuf>>,
    germline: Option<PathBuf>,
    mode: Option<String>,
    pool: Option<usize>,
    state_dir: Option<PathBuf>,
    audit: Option<PathBuf>,
    broker: Option<PathBuf>,
    non_germline: Option<NonGermline>,
    runc: Option<PathBuf>,
    overrides: Option<Overrides>,
    http_token_file: Option<PathBuf>,
    tuf: Option<TufFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TufFile {
    repo: Option<PathBuf>,
    root: Option<PathBuf>,
    state: Option<PathBuf>,
    required: Option<bool>,
}

/// The node's trust metadata (`[tuf]`): a local copy of the publishers' TUF repository, the
/// pinned root it is loaded from, and the rollback state `create` consults and updates (the
/// same checks and state as `germline release verify --tuf-repo --tuf-root --state`).
#[derive(Debug, Clone)]
pub struct Tuf {
    /// The repository copy: `metadata/` and `targets/` (default `/etc/germline/tuf`).
    pub repo: PathBuf,
    /// The pinned root.json (default `/etc/germline/tuf-root.json`).
    pub root: PathBuf,
    /// Rollback state: tough's datastore and the highest version seen per release name
    /// (default `/var/lib/germline/release-state`, `germline release verify`'s default).
    pub state: PathBuf,
    /// Without metadata on the node, refuse every release (the default), or, if `false`,
    /// verify with the pinned keys and check only the signed version against the state.
    pub required: bool,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from (or the default path, if absent).
    pub source: PathBuf,
    pub policy: PathBuf,
    /// The publishers' pinned public keys; a release must verify under one of them.
    pub keys: Vec<PathBuf>,
    pub germline: PathBuf,
    pub mode: String,
    pub pool: usize,
    pub state_dir: PathBuf,
    pub audit: Option<PathBuf>,
    pub broker: Option<PathBuf>,
    pub non_germline: NonGermline,
    pub runc: PathBuf,
    pub overrides: Overrides,
    /// The bearer token of a container's Streamable HTTP endpoint (`dev.germline.mcp/listen`);
    /// without it `germline serve` makes one in `/run/germline/serve-PID/token`.
    pub http_token_file: Option<PathBuf>,
    pub tuf: Tuf,
}

fn resolve(base: &Path, p: PathBuf) -> PathBuf {
    if p.is_absolute() {
        p
    } else {
        base.join(p)
    }
}

/// The `germline` binary beside this one, else the one on the usual path.
fn default_germline() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            let p = dir.join("germline");
            if p.is_file() {
                return p;
            }
        }
    }
    PathBuf::from("/usr/local/bin/germline")
}

/// Every `*.pub` in `dir`, sorted (the default key set: `/etc/germline/keys/`).
fn keys_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "pub"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

impl Config {
    /// Loads `path` (or `$GERMLINE_RUNTIME_CONFIG`, or the default). A missing default file
    /// means the defaults; a named file that is missing or malformed is an error.
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let env = std::env::var_os(CONFIG_ENV).map(PathBuf::from);
        let (source, required) = match (path, env) {
            (Some(p), _) => (p.to_path_buf(), true),
            (None, Some(p)) => (p, true),
            (None, None) => (PathBuf::from(DEFAULT_CONFIG), false),
        };
        let file = match std::fs::read_to_string(&source) {
            Ok(text) => toml::from_str::<File>(&text).map_err(|e| Error::Toml {
                path: source.clone(),
                source: e,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => File {
                policy: None,
                keys: None,
                germline: None,
                mode: None,
                pool: None,
                state_dir: None,
                audit: None,
                broker: None,
                non_germline: None,
                runc: None,
                overrides: None,
                http_token_file: None,
                tuf: None,
            },
            Err(e) => return Err(Error::io(&source)(e)),
        };
        let base = source
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"));
        let etc = Path::new(paths::ETC_DIR);
        let keys = match file.keys {
            Some(k) => k.into_iter().map(|p| resolve(&base, p)).collect(),
            None => keys_in(&etc.join("keys")),
        };
        let mode = file.mode.unwrap_or_else(|| "germline".into());
        const MODES: [&str; 6] = [
            "germline",
            "nosplit",
            "fresh-ifc",
            "confined-ifc",
            "sig-ifc",
            "sig-pin",
        ];
        if !MODES.contains(&mode.as_str()) {
            return Err(Error::Field {
                file: source.display().to_string(),
                field: "mode",
                message: format!(
                    "unknown mode {mode:?}, expected one of {}",
                    MODES.join(", ")
                ),
            });
        }
        let t = file.tuf.unwrap_or_default();
        let tuf = Tuf {
            repo: resolve(&base, t.repo.unwrap_or_else(|| etc.join("tuf"))),
            root: resolve(&base, t.root.unwrap_or_else(|| etc.join("tuf-root.json"))),
            state: resolve(
                &base,
                t.state
                    .unwrap_or_else(|| PathBuf::from(paths::RELEASE_STATE)),
            ),
            required: t.required.unwrap_or(true),
        };
        Ok(Config {
            tuf,
            policy: resolve(
                &base,
                file.policy.unwrap_or_else(|| etc.join("policy.toml")),
            ),
            keys,
            germline: file
                .germline
                .map(|p| resolve(&base, p))
                .unwrap_or_else(default_germline),
            mode,
            pool: file.pool.unwrap_or(0),
            state_dir: resolve(
                &base,
                file.state_dir
                    .unwrap_or_else(|| PathBuf::from(paths::BROKER_STATE)),
            ),
            audit: file.audit.map(|p| resolve(&base, p)),
            broker: file.broker.map(|p| resolve(&base, p)),
            non_germline: file.non_germline.unwrap_or(NonGermline::Refuse),
            runc: file.runc.unwrap_or_else(|| PathBuf::from("runc")),
            overrides: file.overrides.unwrap_or(Overrides::Ignore),
            http_token_file: file.http_token_file.map(|p| resolve(&base, p)),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_and_mode_are_named() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("runtime.toml");
        std::fs::write(&p, "polcy = \"x\"\n").expect("write");
        let e = Config::load(Some(&p)).expect_err("unknown field");
        assert!(e.to_string().contains("unknown field `polcy`"), "{e}");
        std::fs::write(&p, "mode = \"fast\"\n").expect("write");
        let e = Config::load(Some(&p)).expect_err("bad mode");
        assert!(e.to_string().contains("unknown mode \"fast\""), "{e}");
    }

    #[test]
    fn relative_paths_resolve_against_the_file() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("runtime.toml");
        std::fs::write(
            &p,
            "policy = \"policy.toml\"\nkeys = [\"k.pub\"]\nnon_germline = \"runc\"\n",
        )
        .expect("write");
        let c = Config::load(Some(&p)).expect("config");
        assert_eq!(c.policy, d.path().join("policy.toml"));
        assert_eq!(c.keys, vec![d.path().join("k.pub")]);
        assert_eq!(c.non_germline, NonGermline::Runc);
        assert_eq!(c.overrides, Overrides::Ignore);
    }

    #[test]
    fn the_shipped_example_loads() {
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/germline/runtime.toml");
        let c = Config::load(Some(&p)).expect("config/germline/runtime.toml");
        assert_eq!(c.policy, PathBuf::from("/etc/germline/policy.toml"));
        assert_eq!(c.non_germline, NonGermline::Refuse);
        assert_eq!(c.tuf.repo, PathBuf::from("/etc/germline/tuf"));
        assert_eq!(c.tuf.root, PathBuf::from("/etc/germline/tuf-root.json"));
        assert_eq!(
            c.tuf.state,
            PathBuf::from("/var/lib/germline/release-state")
        );
        assert!(c.tuf.required);
    }

    #[test]
    fn trust_metadata_is_required_unless_configured_otherwise() {
        let d = tempfile::tempdir().expect("tempdir");
        let p = d.path().join("runtime.toml");
        std::fs::write(&p, "").expect("write");
        assert!(Config::load(Some(&p)).expect("config").tuf.required);
        std::fs::write(
            &p,
            "[tuf]\nrequired = false\nrepo = \"tuf\"\nstate = \"st\"\n",
        )
        .expect("write");
        let c = Config::load(Some(&p)).expect("config");
        assert!(!c.tuf.required);
        assert_eq!(c.tuf.repo, d.path().join("tuf"));
        assert_eq!(c.tuf.state, d.path().join("st"));
        std::fs::write(&p, "[tuf]\nrequire = false\n").expect("write");
        let e = Config::load(Some(&p)).expect_err("unknown field");
        assert!(e.to_string().contains("unknown field `require`"), "{e}");
    }

    #[test]
    fn a_named_missing_file_is_an_error() {
        let e = Config::load(Some(Path::new("/nonexistent/runtime.toml"))).expect_err("missing");
        assert!(e.to_string().contains("/nonexistent/runtime.toml"), "{e}");
    }
}
