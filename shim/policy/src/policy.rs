//! The deployer's policy file (paper Definitions 1-2; DESIGN "Front end and labels").
//!
//! Labels and clearances come from the deployer, never from the release. The file, in TOML,
//! defines the tags, maps item sources (path globs, resource URI globs) to labels and
//! destination hosts and consumers to clearances, and sets the dampening parameters. Every
//! error names the file, the line and the field, and says what was expected.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use globset::{Glob, GlobBuilder, GlobMatcher};
use serde::Deserialize;
use toml::Spanned;

use crate::argpath::{ArgPath, ArgPattern};
use crate::dampening::DampeningParams;
use crate::label::Label;
use crate::limits::{Lifetime, OperatingLimits};
use crate::names;
use crate::plan::{ItemMeta, Member};

/// Where in a policy (or call) file something is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read {}: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{at}: {message}")]
    Syntax { at: Location, message: String },
    #[error("{at}: field `{field}`: label {tag:?} is used but never defined in [labels] (defined: {defined})")]
    UndefinedLabel {
        at: Location,
        field: String,
        tag: String,
        defined: String,
    },
    #[error("{at}: field `{field}`: bad glob {pattern:?}: {reason}")]
    BadGlob {
        at: Location,
        field: String,
        pattern: String,
        reason: String,
    },
    #[error("{at}: field `{field}`: rule {pattern:?} duplicates the rule at line {first_line}")]
    DuplicateRule {
        at: Location,
        field: String,
        pattern: String,
        first_line: usize,
    },
    #[error("{at}: [[item]] rule needs exactly one of `path` or `uri`, found {found}")]
    RuleSource { at: Location, found: &'static str },
    #[error("{at}: field `{field}`: {message}")]
    Invalid {
        at: Location,
        field: String,
        message: String,
    },
}

// ---- the file as written -------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    /// Tag name -> description.
    labels: BTreeMap<Spanned<String>, String>,
    #[serde(default)]
    defaults: DefaultsFile,
    #[serde(default, rename = "item")]
    items: Vec<Spanned<ItemRuleFile>>,
    /// Labels of inline argument values, by tool and argument name.
    #[serde(default, rename = "argument")]
    arguments: Vec<Spanned<ArgumentRuleFile>>,
    #[serde(default)]
    destinations: BTreeMap<Spanned<String>, Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    consumers: BTreeMap<Spanned<String>, Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    dampening: Option<Spanned<DampeningFile>>,
    /// Operating limits (crate::limits, docs/operations.md).
    #[serde(default)]
    limits: Option<crate::limits::LimitsFile>,
    /// Spawned copies kept ready (crate::pool, docs/policy.md).
    #[serde(default)]
    pool: Option<crate::pool::PoolFile>,
    /// Release name -> germline lifetime (crate::limits::Lifetime).
    #[serde(default)]
    lifetimes: BTreeMap<Spanned<String>, Spanned<String>>,
    /// Release name -> the deployer's working directory for it: relative path arguments
    /// are resolved against it (docs/policy.md, "Relative paths").
    #[serde(default)]
    workdirs: BTreeMap<Spanned<String>, Spanned<String>>,
    /// Release name -> declared workspace paths and for whom their writes are (issue 27,
    /// crate::workspace, docs/policy.md "Writes").
    #[serde(default)]
    workspaces: crate::workspace::WorkspacesFile,
    /// Declared host -> fixed address (`ip` or `ip:port`), resolved by the broker only.
    #[serde(default)]
    pins: BTreeMap<Spanned<String>, Spanned<String>>,
    /// Declared host -> the credential the broker adds to requests it delivers there.
    #[serde(default)]
    credentials: BTreeMap<Spanned<String>, Spanned<CredentialFile>>,
    /// How copies are made (docs/sandbox.md).
    #[serde(default)]
    copies: CopiesFile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CopiesFile {
    /// The tool runs as PID 2 under a reaper as its copy's PID 1 (docs/sandbox.md, "The tool
    /// is PID 2"). Absent: [`COPY_REAPER_DEFAULT`].
    reaper: Option<bool>,
    /// Release names whose multi-group calls run their copies concurrently, under the hold
    /// rule (issue 30, docs/policy.md "Concurrent copies"). Absent: none (A1: one at a time).
    #[serde(default)]
    concurrent: Vec<Spanned<String>>,
}

/// Whether copies run the tool under a reaper when `[copies] reaper` is absent.
pub const COPY_REAPER_DEFAULT: bool = false;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CredentialFile {
    header: Option<Spanned<String>>,
    query: Option<Spanned<String>>,
    value: Option<Spanned<String>>,
    value_env: Option<Spanned<String>>,
    value_file: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DefaultsFile {
    /// Label of an inline value or item no rule labels. Absent: every defined tag (fails closed).
    item_label: Option<Vec<Spanned<String>>>,
    /// Clearance of a declared host the policy does not list. Absent: public only.
    host_clearance: Option<Vec<Spanned<String>>>,
    /// Clearance of a consumer the policy does not list. Absent: public only.
    consumer_clearance: Option<Vec<Spanned<String>>>,
    /// What a call whose argument names a file no `[[item]]` rule covers gets: `"refuse"`
    /// (the default: the call fails with an error naming the path) or `"default-label"`.
    unlabelled_path: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArgumentRuleFile {
    /// Tool name glob; absent: every tool.
    tool: Option<Spanned<String>>,
    /// Argument path: dotted (`url`, `options.*`) or an RFC 6901 pointer (`/data/x.y`), each
    /// part a glob over one step (crate::argpath).
    name: Spanned<String>,
    label: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ItemRuleFile {
    path: Option<Spanned<String>>,
    uri: Option<Spanned<String>>,
    label: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DampeningFile {
    half_life: Option<f64>,
    unverified_weight: Option<f64>,
    verified_weight: Option<f64>,
    suppress_at: Option<f64>,
    reuse_below: Option<f64>,
}

// ---- the policy as used ----------------------------------------------------------------------

/// What an item rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Path,
    Uri,
}

#[derive(Debug)]
struct ArgumentRule {
    tool: GlobMatcher,
    name: ArgPattern,
    label: Label,
}

/// What happens to a file argument no `[[item]]` rule covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnlabelledPath {
    /// The call fails with an error naming the path (fails closed; the default).
    Refuse,
    /// The file gets the default item label.
    DefaultLabel,
}

#[derive(Debug)]
struct ItemRule {
    source: Source,
    pattern: String,
    matcher: GlobMatcher,
    label: Label,
}

/// Where a pinned host is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin {
    pub ip: std::net::IpAddr,
    /// `None`: the port of the request's URL (80 / 443 by default).
    pub port: Option<u16>,
}

/// How the broker adds a credential to the requests it delivers to one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialPlace {
    Header(String),
    Query(String),
}

/// Where the credential's value comes from; the broker reads it at start.
#[derive(Clone, PartialEq, Eq)]
pub enum CredentialSource {
    Inline(String),
    Env(String),
    File(PathBuf),
}

impl fmt::Debug for CredentialSource {
    // Never print an inline secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialSource::Inline(_) => f.write_str("Inline(<redacted>)"),
            CredentialSource::Env(v) => write!(f, "Env({v:?})"),
            CredentialSource::File(p) => write!(f, "File({p:?})"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub place: CredentialPlace,
    pub source: CredentialSource,
}

/// A loaded, validated deployer policy.
#[derive(Debug)]
pub struct Policy {
    file: PathBuf,
    tags: BTreeMap<String, String>,
    rules: Vec<ItemRule>,
    arguments: Vec<ArgumentRule>,
    unlabelled_path: UnlabelledPath,
    hosts: BTreeMap<String, Label>,
    consumers: BTreeMap<String, Label>,
    default_item_label: Label,
    default_host_clearance: Label,
    default_consumer_clearance: Label,
    dampening: DampeningParams,
    limits: OperatingLimits,
    /// `[pool]`: None when the policy has no such table.
    pool: Option<crate::pool::PoolPolicy>,
    lifetimes: BTreeMap<String, Lifetime>,
    workdirs: BTreeMap<String, PathBuf>,
    workspaces: BTreeMap<String, Vec<crate::workspace::Workspace>>,
    pins: BTreeMap<String, Pin>,
    credentials: BTreeMap<String, Credential>,
    copy_reaper: bool,
    concurrent_copies: BTreeSet<String>,
}

struct Ctx<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Ctx<'_> {
    fn at(&self, span: Range<usize>) -> Location {
        let upto = &self.text[..span.start.min(self.text.len())];
        let line = upto.matches('\n').count() + 1;
        let column = upto.rfind('\n').map_or(upto.len(), |n| upto.len() - n - 1) + 1;
        Location {
            file: self.file.to_path_buf(),
            line,
            column,
        }
    }

    fn label(
        &self,
        tags: &BTreeMap<String, String>,
        field: &str,
        raw: &[Spanned<String>],
    ) -> Result<Label, PolicyError> {
        for t in raw {
            if !tags.contains_key(t.get_ref()) {
                return Err(PolicyError::UndefinedLabel {
                    at: self.at(t.span()),
                    field: field.to_string(),
                    tag: t.get_ref().clone(),
                    defined: tags.keys().cloned().collect::<Vec<_>>().join(", "),
                });
            }
        }
        Ok(Label::of(raw.iter().map(|t| t.get_ref().as_str())))
    }
}

/// Why a glob can never match what it is compared with: a NUL (no path, URI, tool or
/// argument name holds one).
fn nul_problem(pattern: &str, what: &str) -> Option<String> {
    pattern
        .contains('\0')
        .then(|| format!("expected {what} without NUL, found {pattern:?}"))
}

/// Like [`nul_problem`], for globs of texts that never hold a control character (URIs, tool
/// names).
fn control_problem(pattern: &str, what: &str) -> Option<String> {
    pattern.chars().any(char::is_control).then(|| {
        format!("expected {what} without NUL or other control characters, found {pattern:?}")
    })
}

/// A path rule is matched against canonical paths, which hold no NUL and no empty, `.` or
/// `..` component: a rule spelled with one would never match, and its label never apply.
fn path_glob_problem(pattern: &str) -> Option<String> {
    if let Some(m) = nul_problem(pattern, "an absolute path glob") {
        return Some(m);
    }
    if pattern == "/" {
        return None;
    }
    let bad = pattern
        .strip_prefix('/')
        .unwrap_or(pattern)
        .split('/')
        .find(|c| c.is_empty() || *c == "." || *c == "..")?;
    let what = if bad.is_empty() {
        "an empty component (`//` or a trailing '/')".to_string()
    } else {
        format!("a `{bad}` component")
    };
    Some(format!(
        "expected an absolute path glob in canonical form (no empty, `.` or `..` components: \
         files are labelled by their canonical path), found {pattern:?} with {what}"
    ))
}

/// A `[pins]` value: `ip` or `ip:port` (IPv6 as `[ip]:port`) naming one host.
fn parse_pin(text: &str) -> Result<Pin, String> {
    let bad = |why: &str| {
        format!(
            "expected an IP address or IP:port (IPv6 as [address]:port) of one host, port \
             1-65535, found {text:?}: {why}"
        )
    };
    let (ip, port) = if let Ok(sa) = text.parse::<std::net::SocketAddr>() {
        (sa.ip(), Some(sa.port()))
    } else if let Ok(ip) = text.parse::<std::net::IpAddr>() {
        (ip, None)
    } else {
        return Err(bad("not an address"));
    };
    if port == Some(0) {
        return Err(bad("port 0 is no port"));
    }
    if let Some(why) = names::pin_address_problem(ip) {
        return Err(bad(why));
    }
    Ok(Pin { ip, port })
}

/// A credential's `value_file`: an absolute path to a regular file (symlinks followed) that
/// can be opened now. The broker reads it at start; a policy naming a file that is not there
/// is refused when it is loaded, not at the first delivery.
fn check_value_file(path: &str) -> Result<(), String> {
    let bad = |why: String| {
        format!("expected an absolute path to a readable regular file, found {path:?}: {why}")
    };
    if path.contains('\0') {
        return Err(bad("it holds NUL".into()));
    }
    if !path.starts_with('/') {
        return Err(bad("not an absolute path".into()));
    }
    let meta = std::fs::metadata(path).map_err(|e| bad(format!("cannot stat it: {e}")))?;
    if !meta.is_file() {
        let kind = if meta.is_dir() {
            "a directory"
        } else {
            "not a regular file (a FIFO, socket or device)"
        };
        return Err(bad(kind.into()));
    }
    // A regular file: opening it does not block.
    std::fs::File::open(path).map_err(|e| bad(format!("cannot open it: {e}")))?;
    Ok(())
}

impl Policy {
    /// Loads and validates a policy file.
    pub fn load(file: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(file).map_err(|source| PolicyError::Read {
            file: file.to_path_buf(),
            source,
        })?;
        Self::parse(file, &text)
    }

    /// Parses policy text; `file` names it in errors.
    pub fn parse(file: &Path, text: &str) -> Result<Self, PolicyError> {
        let cx = Ctx { file, text };
        let raw: PolicyFile = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let at = cx.at(span.clone());
            let line = text.lines().nth(at.line - 1).unwrap_or("").trim();
            PolicyError::Syntax {
                at,
                message: format!("{} (in: `{line}`)", e.message().trim()),
            }
        })?;
        for name in raw.labels.keys() {
            let n = name.get_ref();
            let ok = !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
            if !ok {
                return Err(PolicyError::Invalid {
                    at: cx.at(name.span()),
                    field: format!("labels.{n:?}"),
                    message: format!(
                        "expected a label name of lowercase ASCII letters, digits, '_' or '-', \
                         found {n:?}"
                    ),
                });
            }
        }
        let tags: BTreeMap<String, String> = raw
            .labels
            .into_iter()
            .map(|(k, v)| (k.into_inner(), v))
            .collect();
        let all = Label::of(tags.keys());
        let default_item_label = match &raw.defaults.item_label {
            Some(l) => cx.label(&tags, "defaults.item_label", l)?,
            None => all,
        };
        let default_host_clearance = match &raw.defaults.host_clearance {
            Some(l) => cx.label(&tags, "defaults.host_clearance", l)?,
            None => Label::public(),
        };
        let default_consumer_clearance = match &raw.defaults.consumer_clearance {
            Some(l) => cx.label(&tags, "defaults.consumer_clearance", l)?,
            None => Label::public(),
        };

        let mut rules: Vec<ItemRule> = Vec::new();
        let mut seen: BTreeMap<(u8, String), usize> = BTreeMap::new();
        for (i, rule) in raw.items.iter().enumerate() {
            let at = cx.at(rule.span());
            let r = rule.get_ref();
            let (source, pat, field) = match (&r.path, &r.uri) {
                (Some(p), None) => (Source::Path, p, format!("item[{i}].path")),
                (None, Some(u)) => (Source::Uri, u, format!("item[{i}].uri")),
                (None, None) => {
                    return Err(PolicyError::RuleSource {
                        at,
                        found: "neither",
                    })
                }
                (Some(_), Some(_)) => return Err(PolicyError::RuleSource { at, found: "both" }),
            };
            let pattern = pat.get_ref().clone();
            if source == Source::Path && !pattern.starts_with('/') {
                return Err(PolicyError::Invalid {
                    at: cx.at(pat.span()),
                    field,
                    message: format!(
                        "expected an absolute path glob (starting with '/'), found {pattern:?}"
                    ),
                });
            }
            let problem = match source {
                Source::Path => path_glob_problem(&pattern),
                Source::Uri => control_problem(&pattern, "a resource URI glob"),
            };
            if let Some(message) = problem {
                return Err(PolicyError::Invalid {
                    at: cx.at(pat.span()),
                    field,
                    message,
                });
            }
            let glob: Glob = GlobBuilder::new(&pattern)
                .literal_separator(source == Source::Path)
                .backslash_escape(true)
                .build()
                .map_err(|e| PolicyError::BadGlob {
                    at: cx.at(pat.span()),
                    field: field.clone(),
                    pattern: pattern.clone(),
                    reason: e.kind().to_string(),
                })?;
            let line = cx.at(pat.span()).line;
            if let Some(first_line) = seen.insert((source as u8, pattern.clone()), line) {
                return Err(PolicyError::DuplicateRule {
                    at: cx.at(pat.span()),
                    field,
                    pattern,
                    first_line,
                });
            }
            let label = cx.label(&tags, &format!("item[{i}].label"), &r.label)?;
            rules.push(ItemRule {
                source,
                pattern,
                matcher: glob.compile_matcher(),
                label,
            });
        }

        let mut arguments = Vec::new();
        for (i, rule) in raw.arguments.iter().enumerate() {
            let r = rule.get_ref();
            let glob = |pat: &Spanned<String>, field: String| {
                if let Some(message) = control_problem(pat.get_ref(), "a tool name glob") {
                    return Err(PolicyError::Invalid {
                        at: cx.at(pat.span()),
                        field,
                        message,
                    });
                }
                GlobBuilder::new(pat.get_ref())
                    .literal_separator(false)
                    .build()
                    .map(|g| g.compile_matcher())
                    .map_err(|e| PolicyError::BadGlob {
                        at: cx.at(pat.span()),
                        field,
                        pattern: pat.get_ref().clone(),
                        reason: e.kind().to_string(),
                    })
            };
            let tool = match &r.tool {
                Some(t) => glob(t, format!("argument[{i}].tool"))?,
                None => GlobBuilder::new("*")
                    .build()
                    .map(|g| g.compile_matcher())
                    .map_err(|e| PolicyError::Invalid {
                        at: cx.at(rule.span()),
                        field: format!("argument[{i}].tool"),
                        message: e.to_string(),
                    })?,
            };
            // A NUL is refused before parsing: no JSON key a policy author means holds one,
            // and the refusal says where it is (the file's other names are checked alike).
            let name = match nul_problem(r.name.get_ref(), "an argument name glob") {
                Some(message) => Err(message),
                None => ArgPattern::parse(r.name.get_ref()),
            }
            .map_err(|message| PolicyError::Invalid {
                at: cx.at(r.name.span()),
                field: format!("argument[{i}].name"),
                message,
            })?;
            let label = cx.label(&tags, &format!("argument[{i}].label"), &r.label)?;
            arguments.push(ArgumentRule { tool, name, label });
        }
        let unlabelled_path = match &raw.defaults.unlabelled_path {
            None => UnlabelledPath::Refuse,
            Some(v) => match v.get_ref().as_str() {
                "refuse" => UnlabelledPath::Refuse,
                "default-label" => UnlabelledPath::DefaultLabel,
                other => {
                    return Err(PolicyError::Invalid {
                        at: cx.at(v.span()),
                        field: "defaults.unlabelled_path".into(),
                        message: format!(
                            "expected \"refuse\" or \"default-label\", found {other:?}"
                        ),
                    })
                }
            },
        };

        type Table = BTreeMap<Spanned<String>, Spanned<Vec<Spanned<String>>>>;
        let clearances = |table: &Table, what: &str, check: fn(&str) -> Result<(), String>| {
            let mut out = BTreeMap::new();
            for (name, c) in table {
                let field = format!("{what}.{:?}", name.get_ref());
                check(name.get_ref()).map_err(|message| PolicyError::Invalid {
                    at: cx.at(name.span()),
                    field: field.clone(),
                    message,
                })?;
                out.insert(
                    name.get_ref().clone(),
                    cx.label(&tags, &field, c.get_ref())?,
                );
            }
            Ok(out)
        };
        let hosts = clearances(&raw.destinations, "destinations", names::check_host)?;
        let consumers = clearances(&raw.consumers, "consumers", names::check_consumer)?;
        // A [pins] or [credentials] key: a host name, and a declared one.
        let declared = |host: &Spanned<String>, what: &str| {
            let h = host.get_ref();
            let invalid = |message: String| PolicyError::Invalid {
                at: cx.at(host.span()),
                field: format!("{what}.{h:?}"),
                message,
            };
            names::check_host(h).map_err(invalid)?;
            if !hosts.contains_key(h) {
                return Err(invalid(format!(
                    "expected a host listed in [destinations], found {h:?}"
                )));
            }
            Ok(())
        };

        let mut dampening = DampeningParams::default();
        if let Some(d) = &raw.dampening {
            let at = cx.at(d.span());
            let d = d.get_ref();
            let set = |v: Option<f64>, slot: &mut f64, field: &str| -> Result<(), PolicyError> {
                if let Some(v) = v {
                    if !(v.is_finite() && v > 0.0) {
                        return Err(PolicyError::Invalid {
                            at: at.clone(),
                            field: format!("dampening.{field}"),
                            message: format!("expected a positive number, found {v}"),
                        });
                    }
                    *slot = v;
                }
                Ok(())
            };
            set(d.half_life, &mut dampening.half_life, "half_life")?;
            set(
                d.unverified_weight,
                &mut dampening.unverified_weight,
                "unverified_weight",
            )?;
            set(
                d.verified_weight,
                &mut dampening.verified_weight,
                "verified_weight",
            )?;
            set(d.suppress_at, &mut dampening.suppress_at, "suppress_at")?;
            set(d.reuse_below, &mut dampening.reuse_below, "reuse_below")?;
            if dampening.reuse_below >= dampening.suppress_at {
                return Err(PolicyError::Invalid {
                    at,
                    field: "dampening.reuse_below".into(),
                    message: format!(
                        "expected reuse_below < suppress_at for hysteresis, found {} >= {}",
                        dampening.reuse_below, dampening.suppress_at
                    ),
                });
            }
        }

        let limits = match &raw.limits {
            Some(l) => l.validate(&|span| cx.at(span))?,
            None => OperatingLimits::default(),
        };
        let pool = match &raw.pool {
            Some(p) => Some(p.validate(limits.pool_max, &|span| cx.at(span))?),
            None => None,
        };
        let lifetimes = crate::limits::parse_lifetimes(&raw.lifetimes, &|span| cx.at(span))?;
        let mut concurrent_copies = BTreeSet::new();
        for name in &raw.copies.concurrent {
            let n = name.get_ref();
            crate::names::check_release_name(n).map_err(|message| PolicyError::Invalid {
                at: cx.at(name.span()),
                field: "copies.concurrent".into(),
                message,
            })?;
            concurrent_copies.insert(n.clone());
        }
        let mut workdirs = BTreeMap::new();
        for (release, dir) in &raw.workdirs {
            let d = dir.get_ref();
            let plain = d.starts_with('/')
                && !d.contains('\0')
                && d.split('/').skip(1).all(|c| !matches!(c, "" | "." | ".."));
            if !plain {
                return Err(PolicyError::Invalid {
                    at: cx.at(dir.span()),
                    field: format!("workdirs.{:?}", release.get_ref()),
                    message: format!(
                        "expected an absolute path without `.`, `..` or empty components, found {d:?}"
                    ),
                });
            }
            workdirs.insert(release.get_ref().clone(), PathBuf::from(d));
        }

        let workspaces = crate::workspace::parse_table(
            &raw.workspaces,
            &consumers,
            &|field, l| cx.label(&tags, field, l),
            &|span| cx.at(span),
        )?;

        let mut pins = BTreeMap::new();
        for (host, addr) in &raw.pins {
            declared(host, "pins")?;
            let pin = parse_pin(addr.get_ref()).map_err(|message| PolicyError::Invalid {
                at: cx.at(addr.span()),
                field: format!("pins.{:?}", host.get_ref()),
                message,
            })?;
            pins.insert(host.get_ref().clone(), pin);
        }
        let mut credentials = BTreeMap::new();
        for (host, c) in &raw.credentials {
            declared(host, "credentials")?;
            let field = format!("credentials.{:?}", host.get_ref());
            let invalid = |message: &str| PolicyError::Invalid {
                at: cx.at(c.span()),
                field: field.clone(),
                message: message.to_string(),
            };
            // A check of one key of the credential, located at its value.
            let checked =
                |v: &Spanned<String>, key: &str, check: fn(&str) -> Result<(), String>| {
                    check(v.get_ref()).map_err(|message| PolicyError::Invalid {
                        at: cx.at(v.span()),
                        field: format!("{field}.{key}"),
                        message,
                    })
                };
            let c = c.get_ref();
            let place = match (&c.header, &c.query) {
                (Some(h), None) => {
                    checked(h, "header", names::check_header_name)?;
                    CredentialPlace::Header(h.get_ref().to_ascii_lowercase())
                }
                (None, Some(q)) => {
                    checked(q, "query", names::check_query_name)?;
                    CredentialPlace::Query(q.get_ref().clone())
                }
                _ => return Err(invalid("expected exactly one of `header` or `query`")),
            };
            let source = match (&c.value, &c.value_env, &c.value_file) {
                (Some(v), None, None) => {
                    checked(v, "value", names::check_credential_value)?;
                    CredentialSource::Inline(v.get_ref().clone())
                }
                (None, Some(e), None) => {
                    checked(e, "value_env", names::check_env_name)?;
                    CredentialSource::Env(e.get_ref().clone())
                }
                (None, None, Some(f)) => {
                    checked(f, "value_file", check_value_file)?;
                    CredentialSource::File(PathBuf::from(f.get_ref()))
                }
                _ => {
                    return Err(invalid(
                        "expected exactly one of `value`, `value_env` or `value_file`",
                    ))
                }
            };
            credentials.insert(host.get_ref().clone(), Credential { place, source });
        }

        Ok(Policy {
            pins,
            credentials,
            file: file.to_path_buf(),
            tags,
            rules,
            arguments,
            unlabelled_path,
            hosts,
            consumers,
            default_item_label,
            default_host_clearance,
            default_consumer_clearance,
            dampening,
            limits,
            pool,
            lifetimes,
            workdirs,
            workspaces,
            copy_reaper: raw.copies.reaper.unwrap_or(COPY_REAPER_DEFAULT),
            concurrent_copies,
        })
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The defined tags with their descriptions.
    pub fn tags(&self) -> &BTreeMap<String, String> {
        &self.tags
    }

    pub fn is_defined(&self, tag: &str) -> bool {
        self.tags.contains_key(tag)
    }

    /// Join of the labels of every rule matching `value`, or `None` if no rule matches.
    pub fn rule_label(&self, source: Source, value: &str) -> Option<Label> {
        let mut out: Option<Label> = None;
        for r in self
            .rules
            .iter()
            .filter(|r| r.source == source && r.matcher.is_match(value))
        {
            out.get_or_insert_with(Label::public).join(&r.label);
        }
        out
    }

    /// Join of the labels of every `[[argument]]` rule matching `tool` whose name covers the
    /// value at `path` (names that value or one it lies inside: crate::argpath), or `None` if
    /// none does.
    pub fn argument_label(&self, tool: &str, path: &ArgPath) -> Option<Label> {
        let mut out: Option<Label> = None;
        for r in self
            .arguments
            .iter()
            .filter(|r| r.tool.is_match(tool) && r.name.covers(path))
        {
            out.get_or_insert_with(Label::public).join(&r.label);
        }
        out
    }

    /// What a file argument no `[[item]]` rule covers gets.
    pub fn unlabelled_path(&self) -> UnlabelledPath {
        self.unlabelled_path
    }

    /// Whether a path or URI rule matches `value` (an item the policy knows).
    pub fn has_rule(&self, source: Source, value: &str) -> bool {
        self.rules
            .iter()
            .any(|r| r.source == source && r.matcher.is_match(value))
    }

    /// The label of something no rule labels (fails closed by default: every tag).
    pub fn default_item_label(&self) -> &Label {
        &self.default_item_label
    }

    pub fn host_clearance(&self, host: &str) -> Label {
        let host = host.to_ascii_lowercase();
        self.hosts
            .get(&host)
            .cloned()
            .unwrap_or_else(|| self.default_host_clearance.clone())
    }

    pub fn consumer_clearance(&self, name: &str) -> Label {
        self.consumers
            .get(name)
            .cloned()
            .unwrap_or_else(|| self.default_consumer_clearance.clone())
    }

    /// A declared destination host as Plan and the broker take it: its name and clearance.
    pub fn host_member(&self, name: String) -> Member {
        Member {
            clearance: self.host_clearance(&name),
            name,
        }
    }

    /// A consumer as Plan takes it: its name and clearance.
    pub fn consumer_member(&self, name: String) -> Member {
        Member {
            clearance: self.consumer_clearance(&name),
            name,
        }
    }

    pub fn dampening(&self) -> &DampeningParams {
        &self.dampening
    }

    /// `[copies] reaper`: whether copies run the tool as PID 2 under a reaper.
    pub fn copy_reaper(&self) -> bool {
        self.copy_reaper
    }

    /// `[copies] concurrent`: whether the release named `release` runs a multi-group call's
    /// copies concurrently (opt-in; re-opens the parallel-copy timing channel A1 closes).
    pub fn concurrent_copies(&self, release: &str) -> bool {
        self.concurrent_copies.contains(release)
    }

    /// The `[limits]` table (every limit off when absent).
    pub fn limits(&self) -> &OperatingLimits {
        &self.limits
    }

    /// `[pool]`'s settings for the spawned copies of the release named `release`; None when
    /// the policy has no `[pool]` table (copies are then spawned on the call's path unless
    /// `germline run --pool N` fixes a depth).
    pub fn spawn_pool(&self, release: &str) -> Option<crate::pool::PoolSettings> {
        self.pool.as_ref().map(|p| p.settings(release))
    }

    /// The germline lifetime of the release named `release` (`session` unless `[lifetimes]`
    /// says otherwise).
    pub fn lifetime(&self, release: &str) -> Lifetime {
        self.lifetimes.get(release).copied().unwrap_or_default()
    }

    /// The deployer's working directory for the release named `release` (`[workdirs]`), if
    /// any: relative path arguments of its calls are resolved against it.
    pub fn workdir(&self, release: &str) -> Option<&Path> {
        self.workdirs.get(release).map(PathBuf::as_path)
    }

    /// The workspaces declared for the release named `release` (`[workspaces]`): host
    /// directories its copies get as directory items though no argument names them.
    pub fn workspaces(&self, release: &str) -> &[crate::workspace::Workspace] {
        self.workspaces.get(release).map_or(&[], Vec::as_slice)
    }

    /// Every declared workspace (`[workspaces]`), with its release's name, in the releases'
    /// order (for `germline policy check`).
    pub fn declared_workspaces(
        &self,
    ) -> impl Iterator<Item = (&str, &crate::workspace::Workspace)> {
        self.workspaces
            .iter()
            .flat_map(|(r, ws)| ws.iter().map(move |w| (r.as_str(), w)))
    }

    /// The consumer a copy's writes into the directory `dir` (a trusted host path) are for,
    /// as Plan takes it: the release's declared workspace covering `dir`
    /// (`workspace:<declared path>`, with the clearance its entry gives), else the agent's
    /// workspace `workspace:<dir>` with the agent's clearance `agent`.
    pub fn workspace_member(&self, release: &str, dir: &Path, agent: &Label) -> Member {
        use crate::workspace::{covering, WorkspaceFor, WORKSPACE_PREFIX};
        match covering(self.workspaces(release), dir) {
            Some(w) => Member {
                name: w.consumer_name(),
                clearance: match &w.owner {
                    WorkspaceFor::Agent => agent.clone(),
                    WorkspaceFor::Consumer(c) => self.consumer_clearance(c),
                    WorkspaceFor::Clearance(l) => l.clone(),
                },
            },
            None => Member {
                name: format!("{WORKSPACE_PREFIX}{}", dir.display()),
                clearance: agent.clone(),
            },
        }
    }

    /// The declared destination hosts (the only host names metrics may carry as labels).
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.hosts.keys().map(String::as_str)
    }

    /// The fixed address of a declared host, if the policy pins it.
    pub fn pin(&self, host: &str) -> Option<Pin> {
        self.pins.get(host).copied()
    }

    /// The credential the broker adds to requests delivered to `host`.
    pub fn credential(&self, host: &str) -> Option<&Credential> {
        self.credentials.get(host)
    }

    pub fn credentials(&self) -> &BTreeMap<String, Credential> {
        &self.credentials
    }

    /// Patterns of the item rules, for display.
    pub fn rule_patterns(&self) -> impl Iterator<Item = (Source, &str, &Label)> {
        self.rules
            .iter()
            .map(|r| (r.source, r.pattern.as_str(), &r.label))
    }
}

// ---- a call as the front end describes it ----------------------------------------------------

/// A call's public description (paper Definition 2, `k = (r, f, m, X, D_f, C)` without item
/// contents), as `germline plan --call` reads it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallSpec {
    #[serde(default)]
    pub release: Option<String>,
    #[serde(deserialize_with = "checked::<Function, _>")]
    pub function: String,
    #[serde(default)]
    pub items: Vec<CallItem>,
    #[serde(deserialize_with = "checked_list::<Host, _>")]
    pub destinations: Vec<String>,
    #[serde(
        default = "default_consumers",
        deserialize_with = "checked_list::<Consumer, _>"
    )]
    pub consumers: Vec<String>,
}

/// A string field of a call file with a [`names`] check, refused where it is read, so the
/// error carries its line and column and (through `serde_path_to_error`) its field.
trait NameRule {
    const CHECK: fn(&str) -> Result<(), String>;
}
struct Function;
impl NameRule for Function {
    const CHECK: fn(&str) -> Result<(), String> = names::check_function;
}
struct Host;
impl NameRule for Host {
    const CHECK: fn(&str) -> Result<(), String> = names::check_host;
}
struct Consumer;
impl NameRule for Consumer {
    const CHECK: fn(&str) -> Result<(), String> = names::check_consumer;
}
struct ItemName;
impl NameRule for ItemName {
    const CHECK: fn(&str) -> Result<(), String> = names::check_item_name;
}

/// One checked string: deserialised on its own, so a list's errors name its index.
struct Checked<R>(String, std::marker::PhantomData<R>);

impl<'de, R: NameRule> Deserialize<'de> for Checked<R> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        R::CHECK(&s).map_err(serde::de::Error::custom)?;
        Ok(Checked(s, std::marker::PhantomData))
    }
}

fn checked<'de, R: NameRule, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Checked::<R>::deserialize(d).map(|c| c.0)
}

fn checked_list<'de, R: NameRule, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<String>, D::Error> {
    Vec::<Checked<R>>::deserialize(d).map(|v| v.into_iter().map(|c| c.0).collect())
}

fn default_consumers() -> Vec<String> {
    vec!["agent".into()]
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallItem {
    #[serde(deserialize_with = "checked::<ItemName, _>")]
    pub name: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub uri: Option<String>,
    /// Labels from the call's `_meta`: they may raise the item's label, never lower it.
    #[serde(default)]
    pub label: Vec<String>,
}

/// A call with labels and clearances resolved from the policy: Plan's input.
#[derive(Debug, Clone)]
pub struct ResolvedCall {
    pub items: Vec<ItemMeta>,
    pub hosts: Vec<Member>,
    pub consumers: Vec<Member>,
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("cannot read {}: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}", file.display())]
    Syntax {
        file: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}: items[{index}] ({name:?}): label {tag:?} is not defined by the policy {}", file.display(), policy.display())]
    UndefinedLabel {
        file: PathBuf,
        index: usize,
        name: String,
        tag: String,
        policy: PathBuf,
    },
    #[error("{}: items[{index}] ({name:?}): {message}", file.display())]
    Item {
        file: PathBuf,
        index: usize,
        name: String,
        message: String,
    },
}

impl CallSpec {
    pub fn load(file: &Path) -> Result<Self, CallError> {
        let text = std::fs::read_to_string(file).map_err(|source| CallError::Read {
            file: file.to_path_buf(),
            source,
        })?;
        let de = &mut serde_json::Deserializer::from_str(&text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            let e = e.into_inner();
            // serde_json appends " at line L column C"; the location leads the message.
            let full = e.to_string();
            let message = full
                .rsplit_once(" at line ")
                .map_or(full.as_str(), |(m, _)| m);
            CallError::Syntax {
                file: file.to_path_buf(),
                line: e.line(),
                column: e.column(),
                message: if field == "." {
                    message.to_string()
                } else {
                    format!("field `{field}`: {message}")
                },
            }
        })
    }

    /// Labels the items and looks up clearances. An item's label is the join of every rule
    /// matching its path or URI, or the policy's default if none does, joined with the labels
    /// the call itself gives (which can only raise it).
    pub fn resolve(&self, policy: &Policy, file: &Path) -> Result<ResolvedCall, CallError> {
        let mut items = Vec::with_capacity(self.items.len());
        for (index, it) in self.items.iter().enumerate() {
            let err = |message: String| CallError::Item {
                file: file.to_path_buf(),
                index,
                name: it.name.clone(),
                message,
            };
            if it.path.is_some() && it.uri.is_some() {
                return Err(err("give `path` or `uri`, not both".into()));
            }
            if let Some(p) = &it.path {
                if !p.starts_with('/') {
                    return Err(err(format!("path {p:?} must be absolute")));
                }
            }
            let ruled = match (&it.path, &it.uri) {
                (Some(p), _) => policy.rule_label(Source::Path, p),
                (_, Some(u)) => policy.rule_label(Source::Uri, u),
                _ => None,
            };
            let mut label = ruled.unwrap_or_else(|| policy.default_item_label().clone());
            for tag in &it.label {
                if !policy.is_defined(tag) {
                    return Err(CallError::UndefinedLabel {
                        file: file.to_path_buf(),
                        index,
                        name: it.name.clone(),
                        tag: tag.clone(),
                        policy: policy.file().to_path_buf(),
                    });
                }
            }
            label.join(&Label::of(&it.label));
            items.push(ItemMeta {
                name: it.name.clone(),
                label,
            });
        }
        let hosts = self
            .destinations
            .iter()
            .map(|h| policy.host_member(h.to_ascii_lowercase()))
            .collect();
        let consumers = self
            .consumers
            .iter()
            .map(|u| policy.consumer_member(u.clone()))
            .collect();
        Ok(ResolvedCall {
            items,
            hosts,
            consumers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::argpath::Seg;

    const GOOD: &str = r#"
[labels]
hr = "HR records"
finance = "invoices"

[[item]]
path = "/home/*/hr/**"
label = ["hr"]

[[item]]
uri = "sqlite:///payroll.db*"
label = ["hr", "finance"]

[destinations]
"ocr.example" = ["finance"]

[consumers]
agent = ["hr", "finance"]
"#;

    fn parse(text: &str) -> Result<Policy, PolicyError> {
        Policy::parse(Path::new("policy.toml"), text)
    }

    #[test]
    fn argument_rules_match_keys_by_structure_not_by_spelling() {
        let text = format!(
            "{GOOD}\n[[argument]]\ntool = \"fetch\"\nname = \"url\"\nlabel = []\n\
             \n[[argument]]\nname = \"data\"\nlabel = [\"hr\"]\n\
             \n[[argument]]\nname = \"/cfg/x.y/~0~1\"\nlabel = [\"finance\"]\n\
             \n[[argument]]\nname = \"/\"\nlabel = [\"finance\"]\n"
        );
        let p = parse(&text).expect("policy");
        let path =
            |keys: &[&str]| ArgPath::new(keys.iter().map(|k| Seg::Key(k.to_string())).collect());
        // A key holding a dot is one step: the public rule for `url` does not reach it.
        assert_eq!(p.argument_label("fetch", &path(&["url.x"])), None);
        assert_eq!(
            p.argument_label("fetch", &path(&["url", "x"])),
            Some(Label::public())
        );
        // `data` covers every value inside it, whatever its keys are spelled like.
        for keys in [
            &["data", "x.y"][..],
            &["data", "a/b", "~", ""],
            &["data", "données", "🙂"],
        ] {
            assert_eq!(
                p.argument_label("t", &path(keys)),
                Some(Label::of(["hr"])),
                "{keys:?}"
            );
        }
        let mut deep = path(&["data"]);
        for i in 0..100 {
            deep.push(if i % 2 == 0 {
                Seg::Index(i)
            } else {
                Seg::Key(format!("k.{i}"))
            });
        }
        assert_eq!(p.argument_label("t", &deep), Some(Label::of(["hr"])));
        assert_eq!(p.argument_label("t", &path(&["datax"])), None);
        // A pointer names keys holding `.`, `/` and `~`, and the empty key.
        assert_eq!(
            p.argument_label("t", &path(&["cfg", "x.y", "~/", "z"])),
            Some(Label::of(["finance"]))
        );
        assert_eq!(p.argument_label("t", &path(&["cfg", "x", "y"])), None);
        assert_eq!(
            p.argument_label("t", &path(&["", "q"])),
            Some(Label::of(["finance"]))
        );
        // Names that cannot be read are refused with file:line:column and the field.
        for (name, want) in [
            ("a..b", "empty part"),
            ("/a~2", "must be followed"),
            ("", "found \"\""),
        ] {
            let bad = format!("{GOOD}\n[[argument]]\nname = {name:?}\nlabel = []\n");
            let e = parse(&bad).expect_err(name).to_string();
            assert!(
                e.contains("argument[0].name") && e.contains(want),
                "{name}: {e}"
            );
            assert!(e.contains("policy.toml:"), "{e}");
        }
    }

    #[test]
    fn argument_rules_label_inline_values() {
        let text = format!(
            "{GOOD}\n[[argument]]\ntool = \"fetch\"\nname = \"url\"\nlabel = []\n\n[[argument]]\nname = \"options.*\"\nlabel = [\"hr\"]\n"
        );
        let p = parse(&text).expect("policy");
        let url = ArgPath::key("url");
        assert_eq!(p.argument_label("fetch", &url), Some(Label::public()));
        assert_eq!(p.argument_label("other", &url), None);
        let depth = ArgPath::new(vec![Seg::Key("options".into()), Seg::Key("depth".into())]);
        assert_eq!(p.argument_label("any", &depth), Some(Label::of(["hr"])));
        assert_eq!(p.unlabelled_path(), UnlabelledPath::Refuse);
        let typo = format!("{GOOD}\n[[argument]]\nnmae = \"url\"\nlabel = []\n");
        let e = parse(&typo).expect_err("typo").to_string();
        assert!(e.contains("unknown field `nmae`"), "{e}");
        let undefined = format!("{GOOD}\n[[argument]]\nname = \"url\"\nlabel = [\"hrr\"]\n");
        let e = parse(&undefined).expect_err("undefined").to_string();
        assert!(e.contains("argument[0].label") && e.contains("hrr"), "{e}");
        let bad = GOOD.replacen(
            "[[item]]",
            "[defaults]\nunlabelled_path = \"allow\"\n\n[[item]]",
            1,
        );
        let e = parse(&bad).expect_err("bad value").to_string();
        assert!(
            e.contains("defaults.unlabelled_path") && e.contains("\"allow\""),
            "{e}"
        );
    }

    #[test]
    fn loads_and_labels() {
        let p = parse(GOOD).expect("policy");
        assert_eq!(
            p.rule_label(Source::Path, "/home/alice/hr/salary.xlsx"),
            Some(Label::of(["hr"]))
        );
        // Path globs do not cross '/' with a single '*'.
        assert_eq!(p.rule_label(Source::Path, "/home/a/b/hr/x"), None);
        assert_eq!(
            p.rule_label(Source::Uri, "sqlite:///payroll.db?q=1"),
            Some(Label::of(["hr", "finance"]))
        );
        assert_eq!(p.host_clearance("OCR.example"), Label::of(["finance"]));
        assert_eq!(p.host_clearance("evil.example"), Label::public());
        assert_eq!(p.default_item_label(), &Label::of(["hr", "finance"]));
        assert_eq!(p.dampening(), &DampeningParams::default());
    }

    #[test]
    fn unknown_key_names_line_and_field() {
        let text = GOOD.replace("[consumers]", "[consumer]");
        let e = parse(&text).expect_err("typo");
        let s = e.to_string();
        assert!(s.starts_with("policy.toml:17:"), "{s}");
        assert!(s.contains("unknown field `consumer`"), "{s}");
    }

    #[test]
    fn undefined_label_names_line_and_field() {
        let text = GOOD.replace(
            r#"agent = ["hr", "finance"]"#,
            r#"agent = ["hr", "fnance"]"#,
        );
        let s = parse(&text).expect_err("undefined").to_string();
        assert!(s.starts_with("policy.toml:18:"), "{s}");
        assert!(s.contains("field `consumers.\"agent\"`"), "{s}");
        assert!(s.contains("\"fnance\""), "{s}");
    }

    #[test]
    fn bad_glob_names_line() {
        let text = GOOD.replace("/home/*/hr/**", "/home/[hr/**");
        let s = parse(&text).expect_err("glob").to_string();
        assert!(s.starts_with("policy.toml:7:"), "{s}");
        assert!(s.contains("item[0].path") && s.contains("bad glob"), "{s}");
    }

    #[test]
    fn duplicate_rule_names_both_lines() {
        let text = GOOD
            .replace("sqlite:///payroll.db*", "/home/*/hr/**")
            .replace("uri =", "path =");
        let s = parse(&text).expect_err("dup").to_string();
        assert!(s.starts_with("policy.toml:11:"), "{s}");
        assert!(s.contains("duplicates the rule at line 7"), "{s}");
    }

    #[test]
    fn duplicate_key_is_a_syntax_error() {
        let text = GOOD.replace(
            r#"agent = ["hr", "finance"]"#,
            "agent = [\"hr\"]\nagent = []",
        );
        let s = parse(&text).expect_err("dup key").to_string();
        assert!(s.starts_with("policy.toml:19:"), "{s}");
        assert!(
            s.contains("duplicate key") && s.contains("`agent = []`"),
            "{s}"
        );
    }

    #[test]
    fn pins_and_credentials() {
        let text = format!(
            "{GOOD}\n[pins]\n\"ocr.example\" = \"127.0.0.1:8080\"\n\n[credentials.\"ocr.example\"]\nheader = \"X-Api-Key\"\nvalue_env = \"OCR_KEY\"\n"
        );
        let p = parse(&text).expect("policy");
        assert_eq!(p.pin("ocr.example").map(|x| x.port), Some(Some(8080)));
        let c = p.credential("ocr.example").expect("credential");
        assert_eq!(c.place, CredentialPlace::Header("x-api-key".into()));
        let bad = text.replace("[pins]\n\"ocr.example\"", "[pins]\n\"evil.example\"");
        let s = parse(&bad).expect_err("undeclared pin").to_string();
        assert!(s.contains("pins.\"evil.example\""), "{s}");
        let bad = text.replace(
            "value_env = \"OCR_KEY\"",
            "value = \"k\"\nvalue_env = \"OCR_KEY\"",
        );
        let s = parse(&bad).expect_err("two sources").to_string();
        assert!(s.contains("exactly one of `value`"), "{s}");
    }

    #[test]
    fn limits_parse_and_bad_ones_name_the_field() {
        let p = parse(GOOD).expect("policy");
        assert_eq!(p.limits(), &OperatingLimits::default());
        let text = format!(
            "{GOOD}\n[limits]\ncopies_per_node = 4\ncalls_per_second = 2.5\npool_max = 2\n\
             item_bytes_per_copy = 1000\n"
        );
        let l = parse(&text).expect("limits").limits().clone();
        assert_eq!(l.copies_per_node, Some(4));
        assert_eq!(l.calls_per_second, Some(2.5));
        assert_eq!(l.call_burst, 3);
        assert_eq!(l.pool_max, Some(2));
        assert_eq!(l.item_bytes_per_copy, Some(1000));
        let s = parse(&format!("{GOOD}\n[limits]\ncopies_per_nod = 4\n"))
            .expect_err("typo")
            .to_string();
        assert!(s.contains("copies_per_nod"), "{s}");
        let s = parse(&format!("{GOOD}\n[limits]\ncopies_per_release = 0\n"))
            .expect_err("zero")
            .to_string();
        assert!(
            s.contains("limits.copies_per_release") && s.contains(">= 1"),
            "{s}"
        );
        let s = parse(&format!("{GOOD}\n[limits]\ncall_burst = 3\n"))
            .expect_err("burst alone")
            .to_string();
        assert!(s.contains("limits.call_burst"), "{s}");
        let s = parse(&format!("{GOOD}\n[limits]\ncalls_per_second = -1.0\n"))
            .expect_err("negative")
            .to_string();
        assert!(s.contains("limits.calls_per_second"), "{s}");
        let p = parse(&format!(
            "{GOOD}\n[lifetimes]\n\"mcp-server-time\" = \"single-shot\"\n"
        ))
        .expect("lifetimes");
        assert_eq!(p.lifetime("mcp-server-time"), Lifetime::SingleShot);
        assert_eq!(p.lifetime("other"), Lifetime::Session);
        let s = parse(&format!("{GOOD}\n[lifetimes]\nx = \"forever\"\n"))
            .expect_err("bad lifetime")
            .to_string();
        assert!(
            s.contains("lifetimes.\"x\"") && s.contains("single-shot"),
            "{s}"
        );
    }

    #[test]
    fn workdirs_are_absolute_plain_paths() {
        let p = parse(&format!(
            "{GOOD}\n[workdirs]\n\"mcp-server-git\" = \"/home/alice/project\"\n"
        ))
        .expect("workdirs");
        assert_eq!(
            p.workdir("mcp-server-git"),
            Some(Path::new("/home/alice/project"))
        );
        assert_eq!(p.workdir("other"), None);
        for bad in ["project", "/home/../etc", "/home//alice", "/home/alice/"] {
            let s = parse(&format!("{GOOD}\n[workdirs]\nx = {bad:?}\n"))
                .expect_err(bad)
                .to_string();
            assert!(s.contains("workdirs.\"x\""), "{bad}: {s}");
        }
    }

    /// `[workspaces]`: per release, a declared path for the agent, a consumer or a written
    /// clearance; the member Plan gets for a directory at or below it (and the agent's
    /// workspace for any other); every refusal names the file, the field and what was
    /// expected.
    #[test]
    fn workspaces_are_declared_per_release_with_their_clearance() {
        let base = r#"
[labels]
hr = "HR records"
finance = "invoices"

[consumers]
agent = ["hr", "finance"]
reviewer = ["finance"]
"#;
        let p = parse(&format!(
            "{base}\n[workspaces.\"mcp-server-git\"]\n\"/srv/repo\" = {{ consumer = \"reviewer\" }}\n\
             \"/srv/notes\" = {{ clearance = [] }}\n\"/srv/mine\" = {{}}\n"
        ))
        .expect("workspaces");
        let agent = Label::of(["hr", "finance"]);
        let m = p.workspace_member("mcp-server-git", Path::new("/srv/repo/sub"), &agent);
        assert_eq!(m.name, "workspace:/srv/repo");
        assert_eq!(m.clearance, Label::of(["finance"]));
        let m = p.workspace_member("mcp-server-git", Path::new("/srv/notes"), &agent);
        assert_eq!(
            (m.name.as_str(), m.clearance),
            ("workspace:/srv/notes", Label::public())
        );
        let m = p.workspace_member("mcp-server-git", Path::new("/srv/mine"), &agent);
        assert_eq!(m.clearance, agent);
        // Not below any (component-wise), or another release: the agent's, named by the dir.
        for (release, dir) in [
            ("mcp-server-git", "/srv/repository"),
            ("other", "/srv/repo"),
        ] {
            let m = p.workspace_member(release, Path::new(dir), &agent);
            assert_eq!(m.name, format!("workspace:{dir}"));
            assert_eq!(m.clearance, agent);
        }
        assert_eq!(p.workspaces("mcp-server-git").len(), 3);
        assert!(p.workspaces("other").is_empty());
        let refused = |table: &str, field: &str, expected: &str| {
            let s = parse(&format!("{base}\n[workspaces.\"r\"]\n{table}\n"))
                .expect_err(table)
                .to_string();
            assert!(s.starts_with("policy.toml:"), "{table}: {s}");
            assert!(s.contains(field), "{table}: {s}");
            assert!(s.contains(expected), "{table}: {s}");
        };
        for bad in ["srv", "/", "/srv/../etc", "/srv//a", "/srv/a/"] {
            refused(
                &format!("{bad:?} = {{}}"),
                &format!("workspaces.\"r\".{bad:?}"),
                "expected an absolute directory path",
            );
        }
        refused(
            "\"/a\" = { consumer = \"nobody\" }",
            "workspaces.\"r\".\"/a\".consumer",
            "listed in [consumers]",
        );
        refused(
            "\"/a\" = { clearance = [\"secret\"] }",
            "workspaces.\"r\".\"/a\".clearance",
            "never defined",
        );
        refused(
            "\"/a\" = { consumer = \"reviewer\", clearance = [] }",
            "workspaces.\"r\".\"/a\"",
            "at most one of",
        );
        refused("\"/a\" = { owner = \"x\" }", "policy.toml", "unknown field");
        refused(
            "\"/a\" = {}\n\"/a/b\" = {}",
            "workspaces.\"r\".\"/a/b\"",
            "do not nest",
        );
        let s = parse(&format!("{base}\n[workspaces.\".bad\"]\n\"/a\" = {{}}\n"))
            .expect_err("release")
            .to_string();
        assert!(
            s.contains("workspaces.\".bad\"") && s.contains("release name"),
            "{s}"
        );
        // Siblings that share a prefix of text do not nest.
        parse(&format!(
            "{base}\n[workspaces.r]\n\"/a/b\" = {{}}\n\"/a/bc\" = {{}}\n"
        ))
        .expect("siblings");
    }

    #[test]
    fn copies_reaper_is_read_and_defaults_off() {
        let p = parse(GOOD).expect("good");
        assert_eq!(p.copy_reaper(), COPY_REAPER_DEFAULT);
        let p = parse(&format!("{GOOD}\n[copies]\nreaper = true\n")).expect("on");
        assert!(p.copy_reaper());
        let p = parse(&format!("{GOOD}\n[copies]\nreaper = false\n")).expect("off");
        assert!(!p.copy_reaper());
        parse(&format!("{GOOD}\n[copies]\nreaper = \"yes\"\n")).expect_err("not a bool");
        parse(&format!("{GOOD}\n[copies]\npid = 2\n")).expect_err("unknown field");
    }

    #[test]
    fn copies_concurrent_names_releases_and_defaults_to_none() {
        let p = parse(GOOD).expect("default");
        assert!(!p.concurrent_copies("mcp-server-time"));
        let p = parse(&format!("{GOOD}\n[copies]\nconcurrent = [\"summarize\"]\n")).expect("one");
        assert!(p.concurrent_copies("summarize"));
        assert!(!p.concurrent_copies("mcp-server-time"));
        let e = parse(&format!("{GOOD}\n[copies]\nconcurrent = [\"../x\"]\n"))
            .expect_err("not a release name")
            .to_string();
        assert!(e.contains("copies.concurrent"), "{e}");
        parse(&format!("{GOOD}\n[copies]\nconcurrent = true\n")).expect_err("not a list");
    }

    #[test]
    fn hysteresis_must_be_ordered() {
        let text = format!("{GOOD}\n[dampening]\nsuppress_at = 500\n");
        let s = parse(&text).expect_err("order").to_string();
        assert!(s.contains("dampening.reuse_below"), "{s}");
    }

    #[test]
    fn call_labels_can_only_rise() {
        let p = parse(GOOD).expect("policy");
        let call: CallSpec = serde_json::from_str(
            r#"{"function":"f","destinations":["ocr.example"],
                "items":[{"name":"s","path":"/home/alice/hr/s.xlsx","label":["finance"]},
                         {"name":"inline"}]}"#,
        )
        .expect("call");
        let r = call.resolve(&p, Path::new("call.json")).expect("resolve");
        assert_eq!(r.items[0].label, Label::of(["hr", "finance"]));
        // No rule: the default label, which fails closed.
        assert_eq!(r.items[1].label, Label::of(["hr", "finance"]));
        assert_eq!(r.consumers[0].name, "agent");
    }
}
