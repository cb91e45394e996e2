//! `npm install --omit=dev` of the package into the rootfs's `/app`, its lockfile kept there
//! (signed with the release) and in the cache, so that the next pack of the same spec installs
//! offline with `npm ci` from the same lock.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::spec::{NpmSpec, Package};
use super::NpmPack;
use crate::source::run;
use crate::{Error, Result};

/// Where the package is installed, inside the rootfs.
pub const APP: &str = "/app";

/// How long the resolution of an unpinned `npm:NAME` is reused (a pinned one's always is),
/// as for PyPI.
const LOCK_FRESH: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The installed package and every package of its lock.
#[derive(Debug, Clone)]
pub struct Installed {
    pub package: Package,
    /// `(name, version)` of every installed package, sorted.
    pub packages: Vec<(String, String)>,
    /// Whether `npm ci --offline` installed it from the cache's lock.
    pub offline: bool,
}

/// Installs `p.spec` (and `p.flags.with`) into `root/app`.
///
/// The cache (`p.flags.cache`) keeps npm's own cache (`npm/`, tarballs by integrity) and, per spec,
/// a lock (`npm-locks/<spec>/{package.json,package-lock.json}`). When the lock is there (for
/// an unpinned spec, younger than a day), `npm ci --offline` installs exactly it from the
/// cache; otherwise (or if that fails) `npm install` resolves against the registry and the
/// lock is written for the next pack.
pub fn install(p: &NpmPack, root: &Path) -> Result<Installed> {
    let app = root.join(APP.trim_start_matches('/'));
    std::fs::create_dir_all(&app).map_err(|e| Error::io(app.display(), e))?;
    // npm writes lock paths relative to the real directory: through a symbolic link in
    // `--out`'s path they would climb out of `/app` (and the rootfs digest would change with
    // the place the pack ran).
    let app = std::fs::canonicalize(&app).map_err(|e| Error::io(app.display(), e))?;
    if let Some(tgz) = &p.tarball {
        return install_tarball(p, &app, tgz);
    }
    let lock = p.flags.cache.join("npm-locks").join(lock_name(p));
    if lock_usable(&lock, p.spec.pinned()) {
        for f in ["package.json", "package-lock.json"] {
            std::fs::copy(lock.join(f), app.join(f))
                .map_err(|e| Error::io(lock.join(f).display(), e))?;
        }
        let mut cmd = npm(p, "ci", &app);
        cmd.arg("--offline");
        if run(&mut cmd, "npm ci --offline").is_ok() {
            return finish(&app, &p.spec, true);
        }
        // A lock whose tarballs left the cache is resolved again from the registry.
        std::fs::remove_dir_all(&app).map_err(|e| Error::io(app.display(), e))?;
        std::fs::create_dir_all(&app).map_err(|e| Error::io(app.display(), e))?;
    }
    let mut cmd = npm(p, "install", &app);
    cmd.arg("--save-exact")
        .arg(p.spec.requirement())
        .args(&p.flags.with);
    run(&mut cmd, "npm install").map_err(|e| explain(e, &p.spec))?;
    let installed = finish(&app, &p.spec, false)?;
    // The lock, for the next pack; a failure here only costs that pack time.
    let tmp = lock.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    let saved = std::fs::create_dir_all(&tmp).is_ok()
        && ["package.json", "package-lock.json"]
            .iter()
            .all(|f| std::fs::copy(app.join(f), tmp.join(f)).is_ok());
    if saved {
        let _ = std::fs::remove_dir_all(&lock);
        let _ = std::fs::rename(&tmp, &lock);
    } else {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Ok(installed)
}

/// `--npm-tarball`: the package from a local tarball, its dependencies from the registry (or
/// npm's cache). No lock is kept for the next pack: the tarball's contents, not its name and
/// version, say what it is. The package must be the one `npm:NAME@VERSION` names.
fn install_tarball(p: &NpmPack, app: &Path, tgz: &Path) -> Result<Installed> {
    let tgz = std::fs::canonicalize(tgz).map_err(|e| Error::io(tgz.display(), e))?;
    let mut cmd = npm(p, "install", app);
    cmd.arg("--save-exact").arg(&tgz).args(&p.flags.with);
    run(&mut cmd, "npm install").map_err(|e| explain(e, &p.spec))?;
    let installed = finish(app, &p.spec, false)?;
    if let Some(want) = p.spec.version.as_deref() {
        if installed.package.version != want {
            return Err(Error::Entry(format!(
                "--npm-tarball {}: it holds {} {}, not {want}",
                tgz.display(),
                p.spec.name,
                installed.package.version
            )));
        }
    }
    Ok(installed)
}

/// `npm SUB` for `app`, with the pack's cache, without prompts, audit, funding messages or
/// install scripts (why no scripts: docs/release.md, "Packing from npm"), production
/// dependencies only, and every lock entry with its tarball URL (`resolved`: a user's
/// `omit-lockfile-registry-resolved` would make `npm ci --offline` ask the registry).
fn npm(p: &NpmPack, sub: &str, app: &Path) -> Command {
    let mut cmd = Command::new(&p.npm);
    cmd.arg(sub)
        .arg("--prefix")
        .arg(app)
        .arg("--cache")
        .arg(p.flags.cache.join("npm"))
        .args(["--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund"])
        .args([
            "--omit-lockfile-registry-resolved=false",
            "--loglevel=error",
        ])
        .args(["--update-notifier=false", "--progress=false"]);
    cmd
}

/// npm's error codes said as what to do.
fn explain(e: Error, spec: &NpmSpec) -> Error {
    let Error::Command { stderr, .. } = &e else {
        return e;
    };
    let hint = if stderr.contains("E404") {
        format!("the registry has no package {}: check the name", spec.name)
    } else if stderr.contains("ETARGET") {
        format!(
            "{} has no version matching {:?}: `npm view {} versions` lists them",
            spec.name,
            spec.version.as_deref().unwrap_or("latest"),
            spec.name
        )
    } else if [
        "ENOTFOUND",
        "ECONNREFUSED",
        "EAI_AGAIN",
        "ETIMEDOUT",
        "ENOTCACHED",
    ]
    .iter()
    .any(|c| stderr.contains(c))
    {
        format!(
            "npm could not reach the registry for {}, and the cache cannot install it \
             offline (no lock of it there, or its tarballs are gone): pack it once with the \
             network (then again offline, with the same --cache)",
            spec.requirement()
        )
    } else {
        return e;
    };
    Error::Entry(format!("npm install {}: {hint}\n{e}", spec.requirement()))
}

/// After an install: npm's hidden lockfile removed (a cache of npm's, not read at run time:
/// the lock of record is `/app/package-lock.json`), the package's metadata read.
fn finish(app: &Path, spec: &NpmSpec, offline: bool) -> Result<Installed> {
    let hidden = app.join("node_modules/.package-lock.json");
    if hidden.exists() {
        std::fs::remove_file(&hidden).map_err(|e| Error::io(hidden.display(), e))?;
    }
    let package = Package::read(app, spec)?;
    let lock_path = app.join("package-lock.json");
    let text =
        std::fs::read_to_string(&lock_path).map_err(|e| Error::io(lock_path.display(), e))?;
    let lock: Value = serde_json::from_str(&text)
        .map_err(|e| Error::Entry(format!("{}: not JSON ({e})", lock_path.display())))?;
    if let Some(k) = lock["packages"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .find(|k| !k.is_empty() && !k.starts_with("node_modules/"))
    {
        return Err(Error::Entry(format!(
            "{}: npm recorded {k:?}, a package outside {APP}/node_modules",
            lock_path.display()
        )));
    }
    Ok(Installed {
        package,
        packages: lock_packages(&lock),
        offline,
    })
}

/// `(name, version)` of every package a lockfile (v2 or v3) installs.
pub fn lock_packages(lock: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = lock["packages"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !k.is_empty())
                .filter_map(|(k, v)| {
                    let name = v["name"]
                        .as_str()
                        .map(str::to_string)
                        .or_else(|| k.rsplit_once("node_modules/").map(|(_, n)| n.to_string()))?;
                    Some((name, v["version"].as_str()?.to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out.dedup();
    out
}

/// The lock's directory name: the spec and `--with`, spelt with file-name-safe characters.
fn lock_name(p: &NpmPack) -> String {
    let mut s = p.spec.requirement();
    for w in &p.flags.with {
        s.push('+');
        s.push_str(w);
    }
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-.+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Whether `lock` can be installed offline: both files there, and fresh enough.
fn lock_usable(lock: &Path, pinned: bool) -> bool {
    let file = |f: &str| -> PathBuf { lock.join(f) };
    let Ok(meta) = std::fs::metadata(file("package-lock.json")) else {
        return false;
    };
    file("package.json").is_file()
        && (pinned
            || meta
                .modified()
                .ok()
                .and_then(|m| m.elapsed().ok())
                .is_some_and(|age| age < LOCK_FRESH))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_of_a_lock() {
        let lock = serde_json::json!({"lockfileVersion": 3, "packages": {
            "": {"dependencies": {"@s/srv": "1.0.0"}},
            "node_modules/@s/srv": {"version": "1.0.0", "resolved": "https://r/x.tgz"},
            "node_modules/@s/srv/node_modules/ajv": {"version": "6.12.6"},
            "node_modules/ajv": {"version": "8.17.1"},
            "node_modules/alias": {"name": "real-name", "version": "2.0.0"},
        }});
        assert_eq!(
            lock_packages(&lock),
            vec![
                ("@s/srv".to_string(), "1.0.0".to_string()),
                ("ajv".to_string(), "6.12.6".to_string()),
                ("ajv".to_string(), "8.17.1".to_string()),
                ("real-name".to_string(), "2.0.0".to_string()),
            ]
        );
    }
}
