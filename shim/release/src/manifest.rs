//! The release manifest: what the publisher signs together with the code (paper Section VI,
//! first paragraph). It declares, per tool function, the destination hosts `D_f` that Plan
//! groups (Definition 2), or the rule "the host of argument `url`" (A5). Parsing is strict:
//! unknown fields are refused and every error names the file and the field path.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// The fixed place of the manifest and its signature inside a release's rootfs. Both are
/// excluded from the rootfs tree digest (the manifest pins the digest of everything else).
pub const GERMLINE_DIR: &str = ".germline";
/// `rootfs/.germline/manifest.json`.
pub const MANIFEST_PATH: &str = ".germline/manifest.json";
/// `rootfs/.germline/manifest.sigstore.json`: a sigstore bundle over the manifest's bytes.
pub const SIGNATURE_PATH: &str = ".germline/manifest.sigstore.json";
/// The only schema this version reads.
pub const SCHEMA: &str = "germline.release.manifest/v1";

/// A release manifest (docs/manifest.schema.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub schema: String,
    pub name: String,
    /// Semantic version; rollback protection compares these.
    pub version: String,
    pub language: Language,
    /// How copies are made (issue 28): absent means the language's default (Python forks,
    /// Node and native binaries spawn). A Python release that fails G1 may ask for `spawn`;
    /// the choice is signed, never made by the shim at run time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<Execution>,
    /// argv of the server inside the rootfs, e.g. `["python3", "-m", "mcp_server_time"]`.
    pub entry: Vec<String>,
    /// What the germline runs before its fork point (DESIGN.md: bootstrap).
    pub initialisation: Initialisation,
    /// Tool function name -> its declaration.
    pub tools: BTreeMap<String, Tool>,
    /// Absolute paths inside the rootfs the server may read (the Landlock allowlist).
    pub readable_paths: Vec<String>,
    /// Private tmpfs per copy, in MiB; 0 = none.
    #[serde(default)]
    pub scratch_mb: u32,
    /// Whether the publisher declares the server deterministic under twin inputs (SPEC: evidence).
    pub deterministic: bool,
    /// The pinned digest of the rootfs; `pack` fills it in, `verify` requires it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<RootfsPin>,
    /// State the server keeps in files between calls (issue 27): kept per (release, user,
    /// horizon) by the shim, a fresh writable copy of it in each copy at [`STATE_DIR`]
    /// (docs/policy.md "State in files").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state: Vec<StatePath>,
}

/// Where every state path lives inside a copy: each copy's own tmpfs, filled with its
/// horizon's state before the call and read back after it.
pub const STATE_DIR: &str = "/run/state";

/// Most state paths one release declares.
pub const MAX_STATE_PATHS: usize = 16;

/// One declared state path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatePath {
    /// The path inside the copy: `/run/state/NAME` (one component below [`STATE_DIR`]).
    pub path: String,
    /// A file (a SQLite database) or a directory.
    pub kind: StateKind,
    /// The entry's flag that takes this path (`--db-path`), when the entry passes it on its
    /// command line: then `entry` holds the flag followed by `path` (`pack --state` writes
    /// both). Documentation for the reviewer; the shim checks the pair is there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arg: Option<String>,
}

/// What a state path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateKind {
    File,
    Dir,
}

impl StatePath {
    /// The name below [`STATE_DIR`].
    pub fn name(&self) -> &str {
        self.path
            .strip_prefix(STATE_DIR)
            .and_then(|r| r.strip_prefix('/'))
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Python,
    Node,
    /// Any executable entry; `binary` (the word) is read as `native`.
    #[serde(alias = "binary")]
    Native,
}

/// Forked copies (from a germline) or spawned ones (fresh processes started ahead of the
/// call), docs/sandbox.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Execution {
    Fork,
    Spawn,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Initialisation {
    /// Modules (or files) the bootstrap imports before the fork point.
    pub imports: Vec<String>,
    /// Run one synthetic MCP session on public data before the fork point.
    #[serde(default)]
    pub warm: bool,
    /// `tools/call`s the warming session makes, on arguments written here (so public: they
    /// are part of the signed manifest), so that a copy's first call finds the tool's code
    /// paths warm. Needs `warm`. The publisher names only calls whose effects on the server's
    /// memory are harmless to share with every copy; the germline has no network.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warm_calls: Vec<WarmCall>,
}

/// One `tools/call` of the warming session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmCall {
    /// A tool the manifest declares.
    pub tool: String,
    /// Its arguments (a JSON object).
    #[serde(default = "empty_object")]
    pub arguments: serde_json::Value,
    /// Run it again in each forked pool copy while the copy waits for its call, off the call's
    /// path, so the pages it touches are the copy's own before the call (copy-on-write). The
    /// publisher's claim: running it again changes no answer a later call gives (a read of the
    /// public repository, not a counter). Absent: false, and the canonical bytes omit it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_pool: bool,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tool {
    /// `D_f`: the destination hosts this function may contact. Required: a missing list is an
    /// error, an empty list means "no network".
    pub destinations: Destinations,
    /// Consumers of the return value besides the agent (a mail recipient, a public post):
    /// part of `C` in Plan. Absent: the agent only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumers: Option<Consumers>,
    /// Declared flows (an extension of A5): which argument the function sends to which of its
    /// destinations. A call whose declared flow would carry an item to a host not cleared for
    /// it is refused before any copy runs, and no evidence is recorded against the release
    /// (docs/release.md, docs/evidence.md). Absent: none declared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flows: Vec<Flow>,
    /// The publisher's claim that the tool changes nothing it is given (MCP's `readOnlyHint`,
    /// which `germline release pack` copies into the draft for review): its copies get every
    /// directory item and workspace read-only, and no write of theirs is read back or
    /// committed (docs/policy.md, "Writes"). A write the tool tries fails in the copy
    /// (`EROFS`) instead of reaching the host. Absent: false, and the canonical bytes omit it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
}

/// "The value of argument `argument` is sent to `to`" (or to the host of argument
/// `to_host_of_argument`). Public metadata, signed with the code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flow {
    /// The top-level argument whose value (every file and value under it) is sent.
    pub argument: String,
    /// A host of the tool's `destinations.hosts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The tool's `destinations.host_of_argument`: the value goes to the host of that URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_host_of_argument: Option<String>,
}

/// Recipients of a tool's return value, as fixed names or "the value of argument `to`".
/// The names are public metadata (A5): germline refuses a call whose naming argument the
/// deployer's policy labels as anything but public.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Consumers {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// The argument whose value (a string, or a list of strings) names the recipients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub of_argument: Option<String>,
}

/// The prefix of the consumer names Plan gives the deployer's workspaces (`workspace:<dir>`,
/// `germline_policy::workspace`): no manifest recipient may take one.
pub const WORKSPACE_NAMES: &str = "workspace:";

/// A consumer name: what a policy's `[consumers]` table can list (no control characters, at
/// most 256 bytes, not empty).
pub fn valid_consumer(name: &str) -> bool {
    !name.is_empty() && name.len() <= 256 && !name.chars().any(char::is_control)
}

/// Either a fixed list of host names, or a rule deriving the host from an argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Destinations {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// "The host of argument `url`" (A5): the destination is the host of that argument's URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_of_argument: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootfsPin {
    /// `sha256:<hex>` of the tree digest (crate::digest).
    pub digest: String,
    /// Always `germline-tree-v1`.
    pub algorithm: String,
}

impl Manifest {
    /// Parses and validates manifest bytes; `file` names the source in errors.
    pub fn parse(bytes: &[u8], file: &str) -> Result<Manifest> {
        let de = &mut serde_json::Deserializer::from_slice(bytes);
        let manifest: Manifest = serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            Error::Manifest {
                file: file.to_string(),
                field: if field == "." {
                    "(top level)".into()
                } else {
                    field
                },
                message: e.into_inner().to_string(),
            }
        })?;
        manifest.validate(file)?;
        Ok(manifest)
    }

    /// The checks serde cannot express.
    pub fn validate(&self, file: &str) -> Result<()> {
        let err = |field: &str, message: String| Error::Manifest {
            file: file.to_string(),
            field: field.to_string(),
            message,
        };
        if self.schema != SCHEMA {
            return Err(err(
                "schema",
                format!("expected \"{SCHEMA}\", found {:?}", self.schema),
            ));
        }
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            || self.name.starts_with('.')
        {
            return Err(err(
                "name",
                format!(
                    "expected [A-Za-z0-9._-]+ not starting with '.', found {:?}",
                    self.name
                ),
            ));
        }
        semver::Version::parse(&self.version)
            .map_err(|e| err("version", format!("expected a semantic version: {e}")))?;
        if self.entry.is_empty() || self.entry.iter().any(String::is_empty) {
            return Err(err(
                "entry",
                "expected a non-empty argv of non-empty strings".into(),
            ));
        }
        if self.tools.is_empty() {
            return Err(err("tools", "expected at least one tool".into()));
        }
        for (i, w) in self.initialisation.warm_calls.iter().enumerate() {
            let field = format!("initialisation.warm_calls[{i}]");
            if !self.initialisation.warm {
                return Err(err(
                    &field,
                    "expected `warm: true` (warm calls run in the warming session)".into(),
                ));
            }
            if !self.tools.contains_key(&w.tool) {
                return Err(err(
                    &format!("{field}.tool"),
                    format!("expected a tool this manifest declares, found {:?}", w.tool),
                ));
            }
            if !w.arguments.is_object() {
                return Err(err(
                    &format!("{field}.arguments"),
                    "expected a JSON object".into(),
                ));
            }
        }
        for (tool, decl) in &self.tools {
            let field = format!("tools.{tool}.destinations");
            match (&decl.destinations.hosts, &decl.destinations.host_of_argument) {
                (Some(_), Some(_)) => {
                    return Err(err(&field, "expected either `hosts` or `host_of_argument`, not both".into()))
                }
                (None, None) => {
                    return Err(err(
                        &field,
                        "missing destination list: declare `hosts` (a list, [] for none) or `host_of_argument`".into(),
                    ))
                }
                (Some(hosts), None) => {
                    for (i, h) in hosts.iter().enumerate() {
                        germline_policy::names::check_host(h)
                            .map_err(|m| err(&format!("{field}.hosts[{i}]"), m))?;
                    }
                }
                (None, Some(arg)) if arg.is_empty() => {
                    return Err(err(&format!("{field}.host_of_argument"), "expected an argument name".into()))
                }
                (None, Some(_)) => {}
            }
            if let Some(c) = &decl.consumers {
                let field = format!("tools.{tool}.consumers");
                if c.names.is_empty() && c.of_argument.is_none() {
                    return Err(err(&field, "expected `names` or `of_argument`".into()));
                }
                if c.of_argument.as_deref() == Some("") {
                    return Err(err(
                        &format!("{field}.of_argument"),
                        "expected an argument name".into(),
                    ));
                }
                for (i, n) in c.names.iter().enumerate() {
                    if !valid_consumer(n) || n == "agent" {
                        return Err(err(
                            &format!("{field}.names[{i}]"),
                            format!("expected a consumer name other than \"agent\" (1-256 bytes, no control characters), found {n:?}"),
                        ));
                    }
                    // `workspace:<dir>` is the name Plan gives a deployer's workspace (policy
                    // `[workspaces]`): writes are committed to it, never delivered, so a
                    // recipient of that name would silently receive nothing.
                    if n.starts_with(WORKSPACE_NAMES) {
                        return Err(err(
                            &format!("{field}.names[{i}]"),
                            format!("expected a recipient, found {n:?}: names starting with {WORKSPACE_NAMES:?} are the deployer's workspaces (docs/policy.md \"Writes\"), which are written to, never delivered to"),
                        ));
                    }
                }
            }
        }
        for (tool, decl) in &self.tools {
            validate_flows(tool, decl).map_err(|(field, message)| err(&field, message))?;
        }
        for (i, p) in self.readable_paths.iter().enumerate() {
            if !p.starts_with('/') || p.split('/').any(|c| c == "..") {
                return Err(err(
                    &format!("readable_paths[{i}]"),
                    format!("expected an absolute path without `..`, found {p:?}"),
                ));
            }
        }
        self.validate_state()
            .map_err(|(field, message)| err(&field, message))?;
        if let Some(pin) = &self.rootfs {
            if pin.algorithm != crate::digest::ALGORITHM {
                return Err(err(
                    "rootfs.algorithm",
                    format!(
                        "expected \"{}\", found {:?}",
                        crate::digest::ALGORITHM,
                        pin.algorithm
                    ),
                ));
            }
            if !is_sha256_digest(&pin.digest) {
                return Err(err(
                    "rootfs.digest",
                    format!("expected sha256:<64 hex>, found {:?}", pin.digest),
                ));
            }
        }
        Ok(())
    }

    /// State paths: each one component below [`STATE_DIR`], a portable file name, declared
    /// once; one given by a flag appears in `entry` right after that flag.
    fn validate_state(&self) -> std::result::Result<(), (String, String)> {
        if self.state.len() > MAX_STATE_PATHS {
            return Err((
                "state".into(),
                format!(
                    "at most {MAX_STATE_PATHS} state paths, found {}",
                    self.state.len()
                ),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, s) in self.state.iter().enumerate() {
            let field = format!("state[{i}]");
            let name = s.name();
            let portable = !name.is_empty()
                && name.len() <= 128
                && !name.starts_with('.')
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if !portable {
                return Err((
                    format!("{field}.path"),
                    format!(
                        "expected {STATE_DIR}/NAME (NAME of [A-Za-z0-9._-], not starting with '.'), found {:?}",
                        s.path
                    ),
                ));
            }
            if !seen.insert(name) {
                return Err((
                    format!("{field}.path"),
                    format!("{:?} is declared twice", s.path),
                ));
            }
            if let Some(flag) = &s.arg {
                let passed = self
                    .entry
                    .windows(2)
                    .any(|w| &w[0] == flag && w[1] == s.path)
                    || self
                        .entry
                        .iter()
                        .any(|a| *a == format!("{flag}={}", s.path));
                if flag.is_empty() || !passed {
                    return Err((
                        format!("{field}.arg"),
                        format!("expected the entry to pass {flag:?} {:?}", s.path),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The parsed semantic version (validated by `parse`).
    pub fn semver(&self) -> Result<semver::Version> {
        semver::Version::parse(&self.version).map_err(|e| Error::Manifest {
            file: "manifest".into(),
            field: "version".into(),
            message: e.to_string(),
        })
    }

    /// Canonical bytes written into the rootfs (pretty, stable field order, trailing newline).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut v = serde_json::to_vec_pretty(self).map_err(|e| Error::Usage(e.to_string()))?;
        v.push(b'\n');
        Ok(v)
    }
}

/// The checks of one tool's `flows`: each names a non-empty argument once, and exactly one
/// destination the tool declares. `Err((field, message))`.
fn validate_flows(tool: &str, decl: &Tool) -> std::result::Result<(), (String, String)> {
    let mut seen = std::collections::BTreeSet::new();
    for (i, f) in decl.flows.iter().enumerate() {
        let field = format!("tools.{tool}.flows[{i}]");
        if f.argument.is_empty() || f.argument.chars().any(char::is_control) {
            return Err((
                format!("{field}.argument"),
                format!(
                    "expected an argument name (not empty, no control characters), found {:?}",
                    f.argument
                ),
            ));
        }
        let to =
            match (&f.to, &f.to_host_of_argument) {
                (Some(h), None) => {
                    let hosts = decl.destinations.hosts.as_deref().unwrap_or_default();
                    if !hosts.contains(h) {
                        return Err((
                            format!("{field}.to"),
                            format!(
                            "expected one of the tool's destinations.hosts {hosts:?}, found {h:?}"
                        ),
                        ));
                    }
                    h.clone()
                }
                (None, Some(a)) => {
                    let declared = decl.destinations.host_of_argument.as_deref();
                    if declared != Some(a.as_str()) {
                        return Err((
                            format!("{field}.to_host_of_argument"),
                            format!(
                            "expected the tool's destinations.host_of_argument ({}), found {a:?}",
                            declared.map_or("none declared".to_string(), |d| format!("{d:?}"))
                        ),
                        ));
                    }
                    format!("host of argument {a}")
                }
                _ => return Err((
                    field,
                    "expected exactly one of `to` (a destination host) or `to_host_of_argument`"
                        .into(),
                )),
            };
        if !seen.insert((f.argument.clone(), to)) {
            return Err((
                field,
                format!("flow of argument {:?} declared twice", f.argument),
            ));
        }
    }
    Ok(())
}

pub(crate) fn is_sha256_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> serde_json::Value {
        serde_json::json!({
            "schema": SCHEMA, "name": "mcp-server-fetch", "version": "2025.4.7",
            "language": "python", "entry": ["python3", "-m", "mcp_server_fetch"],
            "initialisation": {"imports": ["mcp_server_fetch.server"], "warm": true},
            "tools": {"fetch": {"destinations": {"host_of_argument": "url"}}},
            "readable_paths": ["/usr"], "deterministic": false
        })
    }

    fn parse(v: &serde_json::Value) -> Result<Manifest> {
        Manifest::parse(&serde_json::to_vec(v).expect("json"), "m.json")
    }

    #[test]
    fn accepts_a_valid_manifest() {
        let m = parse(&base()).expect("valid");
        assert_eq!(
            m.tools["fetch"].destinations.host_of_argument.as_deref(),
            Some("url")
        );
        assert_eq!(m.scratch_mb, 0);
    }

    #[test]
    fn state_paths_lie_below_the_state_dir_and_a_flag_passes_them() {
        let mut v = base();
        v["entry"] = serde_json::json!(["python3", "m:main", "--db-path", "/run/state/db.sqlite"]);
        v["state"] = serde_json::json!([
            {"path": "/run/state/db.sqlite", "kind": "file", "arg": "--db-path"},
            {"path": "/run/state/cache", "kind": "dir"}
        ]);
        let m = parse(&v).expect("valid");
        assert_eq!(m.state[0].name(), "db.sqlite");
        assert_eq!(m.state[1].kind, StateKind::Dir);
        for (path, arg, why) in [
            ("/data/db.sqlite", None, "expected /run/state/NAME"),
            ("/run/state/a/b", None, "expected /run/state/NAME"),
            ("/run/state/..", None, "expected /run/state/NAME"),
            ("/run/state/", None, "expected /run/state/NAME"),
            (
                "/run/state/db.sqlite",
                Some("--db"),
                "expected the entry to pass",
            ),
        ] {
            let mut w = v.clone();
            w["state"] = serde_json::json!([{"path": path, "kind": "file", "arg": arg}]);
            let e = parse(&w).expect_err(path).to_string();
            assert!(e.contains(why) && e.contains("state[0]"), "{path}: {e}");
        }
        let mut w = v.clone();
        w["state"][1]["path"] = serde_json::json!("/run/state/db.sqlite");
        let e = parse(&w).expect_err("twice").to_string();
        assert!(e.contains("declared twice"), "{e}");
    }

    #[test]
    fn consumers_are_fixed_names_or_an_argument_and_never_the_agent() {
        let mut v = base();
        v["tools"]["fetch"]["consumers"] = serde_json::json!({"of_argument": "to"});
        let m = parse(&v).expect("valid");
        let c = m.tools["fetch"].consumers.clone().expect("consumers");
        assert_eq!(c.of_argument.as_deref(), Some("to"));
        // Absent stays absent in the canonical bytes (older manifests keep their digest).
        let plain = parse(&base()).expect("valid");
        assert!(!String::from_utf8_lossy(&plain.to_bytes().expect("bytes")).contains("consumers"));
        for (bad, field) in [
            (serde_json::json!({}), "tools.fetch.consumers"),
            (
                serde_json::json!({"of_argument": ""}),
                "tools.fetch.consumers.of_argument",
            ),
            (
                serde_json::json!({"names": ["agent"]}),
                "tools.fetch.consumers.names[0]",
            ),
            (
                serde_json::json!({"names": ["mail", "workspace:/srv/repo"]}),
                "tools.fetch.consumers.names[1]",
            ),
        ] {
            let mut v = base();
            v["tools"]["fetch"]["consumers"] = bad;
            let e = parse(&v).expect_err("refused").to_string();
            assert!(e.contains(field), "{e}");
        }
    }

    #[test]
    fn read_only_is_a_boolean_absent_from_the_canonical_bytes_when_false() {
        let mut v = base();
        let m = parse(&v).expect("valid");
        assert!(!m.tools["fetch"].read_only);
        assert!(!String::from_utf8_lossy(&m.to_bytes().expect("bytes")).contains("read_only"));
        v["tools"]["fetch"]["read_only"] = serde_json::json!(true);
        let m = parse(&v).expect("valid");
        assert!(m.tools["fetch"].read_only);
        assert!(
            String::from_utf8_lossy(&m.to_bytes().expect("bytes")).contains("\"read_only\": true")
        );
        v["tools"]["fetch"]["read_only"] = serde_json::json!("yes");
        let e = parse(&v).expect_err("not a boolean").to_string();
        assert!(e.contains("read_only"), "{e}");
    }

    #[test]
    fn warm_calls_name_declared_tools_with_object_arguments_and_need_warm() {
        let mut v = base();
        v["initialisation"]["warm_calls"] =
            serde_json::json!([{"tool": "fetch", "arguments": {"url": "http://example.com/"}}]);
        let m = parse(&v).expect("valid");
        assert_eq!(m.initialisation.warm_calls[0].tool, "fetch");
        assert!(!m.initialisation.warm_calls[0].in_pool);
        assert!(!String::from_utf8_lossy(&m.to_bytes().expect("bytes")).contains("in_pool"));
        v["initialisation"]["warm_calls"][0]["in_pool"] = serde_json::json!(true);
        let m = parse(&v).expect("valid");
        assert!(m.initialisation.warm_calls[0].in_pool);
        assert!(
            String::from_utf8_lossy(&m.to_bytes().expect("bytes")).contains("\"in_pool\": true")
        );
        // Absent stays absent in the canonical bytes (older manifests keep their digest).
        let plain = parse(&base()).expect("valid");
        assert!(!String::from_utf8_lossy(&plain.to_bytes().expect("bytes")).contains("warm_calls"));
        for (calls, warm, field, says) in [
            (
                serde_json::json!([{"tool": "fecth"}]),
                true,
                "initialisation.warm_calls[0].tool",
                "\"fecth\"",
            ),
            (
                serde_json::json!([{"tool": "fetch", "arguments": [1]}]),
                true,
                "initialisation.warm_calls[0].arguments",
                "JSON object",
            ),
            (
                serde_json::json!([{"tool": "fetch"}]),
                false,
                "initialisation.warm_calls[0]",
                "warm: true",
            ),
        ] {
            let mut v = base();
            v["initialisation"]["warm_calls"] = calls;
            v["initialisation"]["warm"] = serde_json::json!(warm);
            let e = parse(&v).expect_err(field).to_string();
            assert!(
                e.contains(&format!("field `{field}`")) && e.contains(says),
                "{e}"
            );
        }
    }

    #[test]
    fn flows_name_an_argument_and_one_declared_destination() {
        let mut v = base();
        v["tools"]["ocr_pdf"] = serde_json::json!({
            "destinations": {"hosts": ["ocr.example"]},
            "flows": [{"argument": "file", "to": "ocr.example"}]});
        v["tools"]["fetch"]["flows"] =
            serde_json::json!([{"argument": "body", "to_host_of_argument": "url"}]);
        let m = parse(&v).expect("valid");
        assert_eq!(m.tools["ocr_pdf"].flows[0].argument, "file");
        assert_eq!(
            m.tools["ocr_pdf"].flows[0].to.as_deref(),
            Some("ocr.example")
        );
        // Absent stays absent in the canonical bytes (older manifests keep their digest).
        let plain = parse(&base()).expect("valid");
        assert!(!String::from_utf8_lossy(&plain.to_bytes().expect("bytes")).contains("flows"));
        for (tool, flows, field, says) in [
            (
                "ocr_pdf",
                serde_json::json!([{"argument": "file", "to": "blog.example"}]),
                "tools.ocr_pdf.flows[0].to",
                "\"blog.example\"",
            ),
            (
                "ocr_pdf",
                serde_json::json!([{"argument": "", "to": "ocr.example"}]),
                "tools.ocr_pdf.flows[0].argument",
                "argument name",
            ),
            (
                "ocr_pdf",
                serde_json::json!([{"argument": "file"}]),
                "tools.ocr_pdf.flows[0]",
                "exactly one of",
            ),
            (
                "ocr_pdf",
                serde_json::json!([{"argument": "file", "to": "ocr.example",
                                    "to_host_of_argument": "url"}]),
                "tools.ocr_pdf.flows[0]",
                "exactly one of",
            ),
            (
                "ocr_pdf",
                serde_json::json!([{"argument": "file", "to_host_of_argument": "url"}]),
                "tools.ocr_pdf.flows[0].to_host_of_argument",
                "none declared",
            ),
            (
                "fetch",
                serde_json::json!([{"argument": "body", "to_host_of_argument": "uri"}]),
                "tools.fetch.flows[0].to_host_of_argument",
                "\"uri\"",
            ),
            (
                "ocr_pdf",
                serde_json::json!([{"argument": "file", "to": "ocr.example"},
                                   {"argument": "file", "to": "ocr.example"}]),
                "tools.ocr_pdf.flows[1]",
                "declared twice",
            ),
            (
                "ocr_pdf",
                serde_json::json!([{"argument": "file", "host": "ocr.example"}]),
                "tools.ocr_pdf.flows[0]",
                "unknown field `host`",
            ),
        ] {
            let mut v = base();
            v["tools"]["ocr_pdf"] = serde_json::json!({
                "destinations": {"hosts": ["ocr.example"]}});
            v["tools"][tool]["flows"] = flows;
            let e = parse(&v).expect_err(field).to_string();
            assert!(
                e.contains(&format!("field `{field}")) && e.contains(says),
                "{field}: {e}"
            );
        }
    }

    #[test]
    fn unknown_field_is_named_with_its_path() {
        let mut v = base();
        v["tools"]["fetch"]["egress"] = serde_json::json!(true);
        let e = parse(&v).expect_err("unknown field").to_string();
        assert!(
            e.contains("m.json: field `tools.fetch.egress`: unknown field `egress`"),
            "{e}"
        );
    }

    #[test]
    fn missing_destination_list_is_refused() {
        let mut v = base();
        v["tools"]["fetch"] = serde_json::json!({});
        let e = parse(&v).expect_err("missing").to_string();
        assert!(
            e.contains("tools.fetch") && e.contains("missing field `destinations`"),
            "{e}"
        );
        v["tools"]["fetch"] = serde_json::json!({"destinations": {}});
        let e = parse(&v).expect_err("empty").to_string();
        assert!(
            e.contains("tools.fetch.destinations") && e.contains("missing destination list"),
            "{e}"
        );
    }

    #[test]
    fn bad_version_and_host_are_named() {
        let mut v = base();
        v["version"] = serde_json::json!("1.0");
        assert!(parse(&v)
            .expect_err("v")
            .to_string()
            .contains("field `version`"));
        let mut v = base();
        v["tools"]["fetch"]["destinations"] = serde_json::json!({"hosts": ["Example.COM"]});
        assert!(parse(&v)
            .expect_err("h")
            .to_string()
            .contains("tools.fetch.destinations.hosts[0]"));
    }

    /// A declared destination follows the policy's host-name rule (issue 25 item 9): an IP
    /// literal in any spelling, localhost or the broker's own names are never declared hosts.
    #[test]
    fn declared_hosts_follow_the_policy_host_rule() {
        for h in [
            "127.0.0.1",
            "2130706433",
            "0x7f.1",
            "127.1",
            "state.germline",
            "localhost",
            "api.localhost",
        ] {
            let mut v = base();
            v["tools"]["fetch"]["destinations"] = serde_json::json!({ "hosts": [h] });
            let e = parse(&v).expect_err(h).to_string();
            assert!(
                e.contains("tools.fetch.destinations.hosts[0]")
                    && e.contains("expected a lowercase DNS host name")
                    && e.contains(&format!("found {h:?}")),
                "{e}"
            );
        }
        for h in ["api.example.org", "xn--bcher-kva.example", "intranet"] {
            let mut v = base();
            v["tools"]["fetch"]["destinations"] = serde_json::json!({ "hosts": [h] });
            parse(&v).unwrap_or_else(|e| panic!("{h}: {e}"));
        }
    }
}
