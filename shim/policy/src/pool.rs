//! The policy's `[pool]` table (issue 28, docs/policy.md): how many spawned copies a release
//! keeps ready ahead of its calls, and how much private memory they may hold while they wait.
//!
//! ```toml
//! [pool]                      # every release served by spawned copies
//! min = 0                     # copies kept ready whatever the call rate
//! max = 4                     # the most kept ready, however fast calls come
//! memory_mb = 512             # the waiting copies' private memory together, at most
//!
//! [pool.release."node-everything"]   # one release: fields left out are [pool]'s
//! max = 8
//! ```
//!
//! Without a `[pool]` table (and without `germline run --pool N`), spawned copies are spawned on
//! the call's path, as before this table existed. Forked (Python) copies keep `--pool`, which
//! stays bounded by `[limits] pool_max`; so are `[pool]`'s `max`es.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use crate::policy::{Location, PolicyError};

/// The defaults of the design (docs/design/28-spawn-ahead.md, "The pool").
pub const DEFAULT_MIN: usize = 0;
pub const DEFAULT_MAX: usize = 4;
pub const DEFAULT_MEMORY_MB: u64 = 512;

/// One `[pool]` or `[pool.release."NAME"]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PoolFields {
    min: Option<Spanned<i64>>,
    max: Option<Spanned<i64>>,
    memory_mb: Option<Spanned<i64>>,
}

/// The `[pool]` table as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PoolFile {
    min: Option<Spanned<i64>>,
    max: Option<Spanned<i64>>,
    memory_mb: Option<Spanned<i64>>,
    #[serde(default)]
    release: BTreeMap<Spanned<String>, PoolFields>,
}

/// The validated settings of one release's pool of spawned copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// Kept ready however slowly calls come (still bounded by `memory_mb`).
    pub min: usize,
    /// Kept ready at most, however fast calls come.
    pub max: usize,
    /// The most private memory the waiting copies may hold together (bytes).
    pub memory_bytes: u64,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            min: DEFAULT_MIN,
            max: DEFAULT_MAX,
            memory_bytes: DEFAULT_MEMORY_MB << 20,
        }
    }
}

/// The validated `[pool]` table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PoolPolicy {
    all: PoolSettings,
    releases: BTreeMap<String, PoolSettings>,
}

impl PoolPolicy {
    /// The settings of the release named `release`.
    pub fn settings(&self, release: &str) -> PoolSettings {
        self.releases.get(release).copied().unwrap_or(self.all)
    }
}

impl PoolFields {
    fn validate(
        &self,
        base: PoolSettings,
        prefix: &str,
        pool_max: Option<usize>,
        at: &dyn Fn(Range<usize>) -> Location,
    ) -> Result<PoolSettings, PolicyError> {
        let invalid = |span: Range<usize>, field: &str, message: String| PolicyError::Invalid {
            at: at(span),
            field: format!("{prefix}.{field}"),
            message,
        };
        let count = |v: &Option<Spanned<i64>>, field: &str, min: i64| {
            crate::limits::at_least(v, min, |span, m| invalid(span, field, m))
        };
        let to_usize = |n: i64| usize::try_from(n).unwrap_or(usize::MAX);
        let min = count(&self.min, "min", 0)?.map_or(base.min, to_usize);
        let max = count(&self.max, "max", 0)?.map_or(base.max, to_usize);
        // 1 TiB: a figure beyond it is a typo, and MiB to bytes must not overflow.
        let memory_mb = count(&self.memory_mb, "memory_mb", 1)?;
        if let Some(mb) = memory_mb.filter(|mb| *mb > 1 << 20) {
            let span = self
                .memory_mb
                .as_ref()
                .map(Spanned::span)
                .unwrap_or_default();
            return Err(invalid(
                span,
                "memory_mb",
                format!("expected at most 1048576 (1 TiB), found {mb}"),
            ));
        }
        let memory_bytes = memory_mb.map_or(base.memory_bytes, |mb| (mb as u64) << 20);
        if min > max {
            // The span of whichever of the two this table wrote (min, else max).
            let span = self
                .min
                .as_ref()
                .or(self.max.as_ref())
                .map(Spanned::span)
                .unwrap_or_default();
            return Err(invalid(
                span,
                "min",
                format!("expected min <= max, found min {min} > max {max}"),
            ));
        }
        if let Some(cap) = pool_max.filter(|cap| max > *cap) {
            let span = self
                .max
                .as_ref()
                .or(self.min.as_ref())
                .map(Spanned::span)
                .unwrap_or_default();
            return Err(invalid(
                span,
                "max",
                format!(
                    "{max} is above limits.pool_max = {cap} (the operator's bound on every pool)"
                ),
            ));
        }
        Ok(PoolSettings {
            min,
            max,
            memory_bytes,
        })
    }
}

impl PoolFile {
    /// `pool_max`: `[limits] pool_max`, which bounds every release's `max` here too.
    pub(crate) fn validate(
        &self,
        pool_max: Option<usize>,
        at: &dyn Fn(Range<usize>) -> Location,
    ) -> Result<PoolPolicy, PolicyError> {
        // [pool]'s own max defaults to 4; under a smaller pool_max it defaults to pool_max.
        let mut base = PoolSettings::default();
        if let Some(cap) = pool_max {
            base.max = base.max.min(cap);
        }
        let top = PoolFields {
            min: self.min.clone(),
            max: self.max.clone(),
            memory_mb: self.memory_mb.clone(),
        };
        let all = top.validate(base, "pool", pool_max, at)?;
        let mut releases = BTreeMap::new();
        for (name, fields) in &self.release {
            crate::names::check_release_name(name.get_ref()).map_err(|message| {
                PolicyError::Invalid {
                    at: at(name.span()),
                    field: format!("pool.release.{:?}", name.get_ref()),
                    message,
                }
            })?;
            let prefix = format!("pool.release.{:?}", name.get_ref());
            let s = fields.validate(all, &prefix, pool_max, at)?;
            releases.insert(name.get_ref().clone(), s);
        }
        Ok(PoolPolicy { all, releases })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::policy::Policy;

    const BASE: &str = "[labels]\nhr = \"HR records\"\n";

    fn parse(extra: &str) -> Result<Policy, PolicyError> {
        Policy::parse(Path::new("p.toml"), &format!("{BASE}{extra}"))
    }

    #[test]
    fn no_table_means_no_pool_and_defaults_fill_a_table() {
        assert_eq!(parse("").expect("policy").spawn_pool("x"), None);
        let p = parse("\n[pool]\n").expect("policy");
        assert_eq!(p.spawn_pool("x"), Some(PoolSettings::default()));
        assert_eq!(
            PoolSettings::default(),
            PoolSettings {
                min: 0,
                max: 4,
                memory_bytes: 512 << 20
            }
        );
    }

    #[test]
    fn a_release_entry_overrides_only_what_it_writes() {
        let p = parse(
            "\n[pool]\nmin = 1\nmax = 3\nmemory_mb = 256\n\n\
             [pool.release.\"node-everything\"]\nmax = 6\n",
        )
        .expect("policy");
        let all = PoolSettings {
            min: 1,
            max: 3,
            memory_bytes: 256 << 20,
        };
        assert_eq!(p.spawn_pool("other"), Some(all));
        assert_eq!(
            p.spawn_pool("node-everything"),
            Some(PoolSettings { max: 6, ..all })
        );
    }

    #[test]
    fn bad_settings_name_the_field_and_where_it_is() {
        for (extra, field, what, line) in [
            ("\n[pool]\nmin = -1\n", "pool.min", ">= 0", 5),
            ("\n[pool]\nmin = 5\nmax = 2\n", "pool.min", "min <= max", 5),
            ("\n[pool]\nmemory_mb = 0\n", "pool.memory_mb", ">= 1", 5),
            (
                "\n[pool]\nmemory_mb = 2000000\n",
                "pool.memory_mb",
                "1 TiB",
                5,
            ),
            ("\n[pool]\nmaxx = 2\n", "maxx", "unknown field", 5),
            (
                "\n[pool.release.\"n\"]\nmin = 9\n",
                "pool.release.\"n\".min",
                "min <= max",
                5,
            ),
            (
                "\n[limits]\npool_max = 2\n\n[pool]\nmax = 3\n",
                "pool.max",
                "limits.pool_max = 2",
                8,
            ),
        ] {
            let e = parse(extra).expect_err(extra).to_string();
            assert!(
                e.contains(field) && e.contains(what) && e.starts_with(&format!("p.toml:{line}:")),
                "{extra:?}: {e}"
            );
        }
    }

    #[test]
    fn pool_max_lowers_the_default_max() {
        let p = parse("\n[limits]\npool_max = 2\n\n[pool]\n").expect("policy");
        assert_eq!(p.spawn_pool("x").map(|s| s.max), Some(2));
    }
}
