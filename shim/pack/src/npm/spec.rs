//! `npm:NAME[@VERSION]`: which package, and what its `package.json` says once installed
//! (version, `bin`).

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::{Error, Result};

/// `npm:NAME` or `npm:NAME@VERSION` (`NAME` may be scoped, `@scope/name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpmSpec {
    pub name: String,
    /// An exact version, a range or a dist-tag, as npm takes it; `None`: `latest`.
    pub version: Option<String>,
}

impl NpmSpec {
    pub fn parse(s: &str) -> Result<NpmSpec> {
        let bad = |why: &str| {
            Error::Entry(format!(
                "--from {s:?}: {why}: expected npm:NAME or npm:NAME@VERSION (NAME as npm spells \
                 it, e.g. npm:@modelcontextprotocol/server-everything@2026.8.31)"
            ))
        };
        let rest = s.strip_prefix("npm:").ok_or_else(|| bad("not npm:"))?;
        // The version's `@` is the first one after the scope's.
        let at = rest
            .char_indices()
            .skip(1)
            .find(|(_, c)| *c == '@')
            .map(|(i, _)| i);
        let (name, version) = match at {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        if !valid_name(name) {
            return Err(bad(&format!("{name:?} is not an npm package name")));
        }
        // An exact version, a dist-tag (`latest`, `next`) or a simple range (`^1.2`): no
        // spaces, so nothing npm would read as a second argument or an option.
        let version_ok = version.is_none_or(|v| {
            !v.is_empty()
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._+-^~".contains(c))
        });
        if !version_ok {
            return Err(bad(&format!(
                "{:?} is not a version or dist-tag",
                version.unwrap_or_default()
            )));
        }
        Ok(NpmSpec {
            name: name.to_string(),
            version: version.map(str::to_string),
        })
    }

    /// The argument npm install takes.
    pub fn requirement(&self) -> String {
        match &self.version {
            Some(v) => format!("{}@{v}", self.name),
            None => self.name.clone(),
        }
    }

    /// Whether the version names exactly one release (then its lock never goes stale).
    pub fn pinned(&self) -> bool {
        self.version
            .as_deref()
            .is_some_and(|v| semver::Version::parse(v).is_ok())
    }

    /// The name without its scope (`server-everything` for `@modelcontextprotocol/...`).
    pub fn unscoped(&self) -> &str {
        self.name.rsplit('/').next().unwrap_or(&self.name)
    }

    /// The release's name: the package's, without `@` and with `/` as `-`
    /// (`modelcontextprotocol-server-everything`), because a release name becomes part of
    /// cgroup and state directory names, where `/` would nest.
    pub fn release_name(&self) -> String {
        self.name.trim_start_matches('@').replace('/', "-")
    }
}

impl std::fmt::Display for NpmSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "npm:{}", self.requirement())
    }
}

/// npm's rules for a (new) package name: at most 214 characters, lowercase, URL-safe, not
/// starting with `.` or `_`; a scope is `@scope/`.
fn valid_name(name: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && !p.starts_with(['.', '_'])
            && p.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "-._~".contains(c))
    };
    let ok = match name.strip_prefix('@') {
        Some(scoped) => scoped
            .split_once('/')
            .is_some_and(|(scope, n)| part(scope) && part(n)),
        None => part(name),
    };
    ok && name.len() <= 214
}

/// The installed package, from its `package.json`.
#[derive(Debug, Clone)]
pub struct Package {
    pub name: String,
    pub version: String,
    /// `bin` as a map, name to path inside the package (a string `bin` is named like the
    /// package without its scope, as npm links it).
    pub bins: BTreeMap<String, String>,
}

impl Package {
    pub fn read(app: &Path, spec: &NpmSpec) -> Result<Package> {
        let path = app
            .join("node_modules")
            .join(&spec.name)
            .join("package.json");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(path.display(), e))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| Error::Entry(format!("{}: not JSON ({e})", path.display())))?;
        let version = v["version"]
            .as_str()
            .ok_or_else(|| Error::Entry(format!("{}: field `version` missing", path.display())))?
            .to_string();
        let bins = match &v["bin"] {
            Value::String(p) => [(spec.unscoped().to_string(), p.clone())].into(),
            Value::Object(m) => m
                .iter()
                .filter_map(|(k, p)| Some((k.clone(), p.as_str()?.to_string())))
                .collect(),
            _ => BTreeMap::new(),
        };
        Ok(Package {
            name: spec.name.clone(),
            version,
            bins,
        })
    }

    /// The server's entry after `node`: the file to run (a path in the rootfs) and its
    /// arguments. `--entry "BIN [ARGS...]"` names one of the package's `bin`s or a file of
    /// the package (`dist/index.js`); without it, the `bin` named like the package (without
    /// its scope), else its only one.
    pub fn entry(&self, app_in_rootfs: &str, flag: Option<&str>) -> Result<Vec<String>> {
        let bins = || self.bins.keys().cloned().collect::<Vec<_>>().join(", ");
        let (file, args): (String, Vec<String>) = match flag {
            Some(e) => {
                let mut words = e.split_whitespace().map(str::to_string);
                let first = words.next().ok_or_else(|| {
                    Error::Entry("--entry \"\": expected BIN [ARGS...]".to_string())
                })?;
                let file = match self.bins.get(&first) {
                    Some(p) => p.clone(),
                    None if first.contains('/') || first.ends_with("js") => first,
                    None => {
                        return Err(Error::Entry(format!(
                            "--entry {e:?}: {} {} has no bin {first:?} (it has: {}); give a \
                             bin name or a file of the package such as dist/index.js",
                            self.name,
                            self.version,
                            bins()
                        )))
                    }
                };
                (file, words.collect())
            }
            None => {
                let unscoped = self.name.rsplit('/').next().unwrap_or(&self.name);
                let named = self
                    .bins
                    .get(unscoped)
                    .or_else(|| self.bins.get(&self.name));
                let only = (self.bins.len() == 1)
                    .then(|| self.bins.values().next())
                    .flatten();
                match named.or(only) {
                    Some(p) => (p.clone(), vec![]),
                    None if self.bins.is_empty() => {
                        return Err(Error::Entry(format!(
                            "{} {} declares no `bin` in its package.json: give --entry with \
                             the file that starts its stdio server (e.g. --entry dist/index.js)",
                            self.name, self.version
                        )))
                    }
                    None => {
                        return Err(Error::Entry(format!(
                            "{} {} declares several bins ({}), none named like it: say which \
                             with --entry",
                            self.name,
                            self.version,
                            bins()
                        )))
                    }
                }
            }
        };
        let rel = relative_inside(&file).ok_or_else(|| {
            Error::Entry(format!(
                "{} {}: bin path {file:?} leaves the package",
                self.name, self.version
            ))
        })?;
        let mut out = vec![format!("{app_in_rootfs}/node_modules/{}/{rel}", self.name)];
        out.extend(args);
        Ok(out)
    }
}

/// `./dist/index.js` as `dist/index.js`; `None` for an absolute path or one with `..`.
fn relative_inside(p: &str) -> Option<String> {
    let parts: Vec<&str> = p
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    (!p.starts_with('/') && !parts.is_empty() && !parts.contains(&"..")).then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let s = NpmSpec::parse("npm:@modelcontextprotocol/server-everything@2026.8.31")
            .expect("scoped, versioned");
        assert_eq!(s.name, "@modelcontextprotocol/server-everything");
        assert_eq!(s.version.as_deref(), Some("2026.8.31"));
        assert!(s.pinned());
        assert_eq!(s.unscoped(), "server-everything");
        assert_eq!(s.release_name(), "modelcontextprotocol-server-everything");
        let s = NpmSpec::parse("npm:left-pad").expect("plain");
        assert_eq!((s.name.as_str(), s.version), ("left-pad", None));
        let s = NpmSpec::parse("npm:x@next").expect("tag");
        assert!(!s.pinned());
        for bad in [
            "left-pad",
            "pypi:x",
            "npm:",
            "npm:Upper",
            "npm:x@",
            "npm:@scope",
            "npm:@scope/",
            "npm:.hidden",
            "npm:x@1 --registry=evil",
            "npm:x;rm",
        ] {
            let e = NpmSpec::parse(bad).expect_err(bad);
            assert!(e.to_string().contains("npm:NAME@VERSION"), "{e}");
        }
    }

    #[test]
    fn entries() {
        let p = Package {
            name: "@s/srv".into(),
            version: "1.0.0".into(),
            bins: [
                ("srv".to_string(), "./dist/index.js".to_string()),
                ("srv-admin".to_string(), "dist/admin.js".to_string()),
            ]
            .into(),
        };
        assert_eq!(
            p.entry("/app", None).expect("named like it"),
            vec!["/app/node_modules/@s/srv/dist/index.js"]
        );
        assert_eq!(
            p.entry("/app", Some("srv-admin --stdio")).expect("by bin"),
            vec!["/app/node_modules/@s/srv/dist/admin.js", "--stdio"]
        );
        assert_eq!(
            p.entry("/app", Some("lib/x.js")).expect("by file"),
            vec!["/app/node_modules/@s/srv/lib/x.js"]
        );
        assert!(p.entry("/app", Some("nope")).is_err());
        assert!(p.entry("/app", Some("../../etc/x.js")).is_err());
        let mut q = p.clone();
        q.name = "@s/other".into();
        let e = q
            .entry("/app", None)
            .expect_err("two bins, none named like it");
        assert!(e.to_string().contains("srv, srv-admin"), "{e}");
        q.bins.clear();
        assert!(q.entry("/app", None).is_err());
    }
}
