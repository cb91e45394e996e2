//! The policy's `[limits]` table (issue 11, docs/operations.md): what keeps a runaway agent
//! from exhausting a node. Every field is optional; an absent field means no limit.

use std::ops::Range;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use crate::policy::{Location, PolicyError};

/// The `[limits]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitsFile {
    copies_per_node: Option<Spanned<i64>>,
    copies_per_release: Option<Spanned<i64>>,
    calls_per_second: Option<Spanned<f64>>,
    call_burst: Option<Spanned<i64>>,
    item_bytes_per_copy: Option<Spanned<i64>>,
    pool_max: Option<Spanned<i64>>,
    node_dir: Option<Spanned<String>>,
}

/// Where node-wide copy slots live unless `limits.node_dir` says otherwise.
pub const DEFAULT_NODE_DIR: &str = "/run/germline/limits";

/// The validated `[limits]`.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatingLimits {
    /// Live copies (forked for a call or a data-free request) across every germline on the
    /// node that shares `node_dir`.
    pub copies_per_node: Option<usize>,
    /// Live copies of one release (by digest) on the node.
    pub copies_per_release: Option<usize>,
    /// Token-bucket refill rate of `tools/call` per session.
    pub calls_per_second: Option<f64>,
    /// The bucket's capacity (default: the rate rounded up, at least 1).
    pub call_burst: u32,
    /// Most bytes of items (file contents and inline values) delivered into one copy.
    pub item_bytes_per_copy: Option<u64>,
    /// Most pre-forked copies `--pool` may ask for.
    pub pool_max: Option<usize>,
    /// Directory of the node-wide copy slots (lock files).
    pub node_dir: PathBuf,
}

impl Default for OperatingLimits {
    fn default() -> Self {
        Self {
            copies_per_node: None,
            copies_per_release: None,
            calls_per_second: None,
            call_burst: 1,
            item_bytes_per_copy: None,
            pool_max: None,
            node_dir: PathBuf::from(DEFAULT_NODE_DIR),
        }
    }
}

/// An optional integer field that must be at least `min`; else `invalid(span, message)`
/// (shared by `[limits]` and `[pool]`).
pub(crate) fn at_least(
    v: &Option<Spanned<i64>>,
    min: i64,
    invalid: impl FnOnce(Range<usize>, String) -> PolicyError,
) -> Result<Option<i64>, PolicyError> {
    match v {
        None => Ok(None),
        Some(s) if *s.get_ref() >= min => Ok(Some(*s.get_ref())),
        Some(s) => Err(invalid(
            s.span(),
            format!("expected an integer >= {min}, found {}", s.get_ref()),
        )),
    }
}

impl LimitsFile {
    pub(crate) fn validate(
        &self,
        at: &dyn Fn(Range<usize>) -> Location,
    ) -> Result<OperatingLimits, PolicyError> {
        let invalid = |span: Range<usize>, field: &str, message: String| PolicyError::Invalid {
            at: at(span),
            field: format!("limits.{field}"),
            message,
        };
        let count = |v: &Option<Spanned<i64>>, field: &str, min: i64| {
            at_least(v, min, |span, m| invalid(span, field, m))
        };
        let to_usize = |v: Option<i64>| v.map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        let calls_per_second = match &self.calls_per_second {
            None => None,
            Some(s) if s.get_ref().is_finite() && *s.get_ref() > 0.0 => Some(*s.get_ref()),
            Some(s) => {
                return Err(invalid(
                    s.span(),
                    "calls_per_second",
                    format!("expected a positive number, found {}", s.get_ref()),
                ))
            }
        };
        let burst = count(&self.call_burst, "call_burst", 1)?;
        if let (Some(b), None) = (&self.call_burst, calls_per_second) {
            return Err(invalid(
                b.span(),
                "call_burst",
                "call_burst needs calls_per_second".into(),
            ));
        }
        let call_burst = match (burst, calls_per_second) {
            (Some(b), _) => u32::try_from(b).unwrap_or(u32::MAX),
            (None, Some(r)) => (r.ceil() as u32).max(1),
            (None, None) => 1,
        };
        let node_dir = match &self.node_dir {
            None => PathBuf::from(DEFAULT_NODE_DIR),
            Some(d) if d.get_ref().starts_with('/') => PathBuf::from(d.get_ref()),
            Some(d) => {
                return Err(invalid(
                    d.span(),
                    "node_dir",
                    format!("expected an absolute path, found {:?}", d.get_ref()),
                ))
            }
        };
        Ok(OperatingLimits {
            copies_per_node: to_usize(count(&self.copies_per_node, "copies_per_node", 1)?),
            copies_per_release: to_usize(count(&self.copies_per_release, "copies_per_release", 1)?),
            calls_per_second,
            call_burst,
            item_bytes_per_copy: count(&self.item_bytes_per_copy, "item_bytes_per_copy", 0)?
                .map(|n| n as u64),
            pool_max: to_usize(count(&self.pool_max, "pool_max", 0)?),
            node_dir,
        })
    }
}

/// How long a release's germline lives (issue 11, docs/operations.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lifetime {
    /// A fresh germline for every `tools/call`.
    SingleShot,
    /// One germline per agent session (the default).
    #[default]
    Session,
    /// One persistent germline shared by the sessions of one deployment (`germline serve`).
    LongLived,
}

impl Lifetime {
    pub fn name(self) -> &'static str {
        match self {
            Lifetime::SingleShot => "single-shot",
            Lifetime::Session => "session",
            Lifetime::LongLived => "long-lived",
        }
    }
}

/// The `[lifetimes]` table: release name (the signed manifest's `name`) -> lifetime.
pub(crate) fn parse_lifetimes(
    raw: &std::collections::BTreeMap<Spanned<String>, Spanned<String>>,
    at: &dyn Fn(Range<usize>) -> Location,
) -> Result<std::collections::BTreeMap<String, Lifetime>, PolicyError> {
    let mut out = std::collections::BTreeMap::new();
    for (key, v) in raw {
        let name = key.get_ref();
        crate::names::check_release_name(name).map_err(|message| PolicyError::Invalid {
            at: at(key.span()),
            field: format!("lifetimes.{name:?}"),
            message,
        })?;
        let l = match v.get_ref().as_str() {
            "single-shot" => Lifetime::SingleShot,
            "session" => Lifetime::Session,
            "long-lived" => Lifetime::LongLived,
            other => {
                return Err(PolicyError::Invalid {
                    at: at(v.span()),
                    field: format!("lifetimes.{name:?}"),
                    message: format!(
                        "expected \"single-shot\", \"session\" or \"long-lived\", found {other:?}"
                    ),
                })
            }
        };
        out.insert(name.clone(), l);
    }
    Ok(out)
}
