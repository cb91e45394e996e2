//! The package from PyPI: `pypi:NAME[==VERSION]`, installed with pip into the rootfs's
//! `/usr/lib/python3/dist-packages` (where Debian's Python looks), and what its metadata says:
//! version, console scripts.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Error, PackFrom, Result};

/// `pypi:NAME` or `pypi:NAME==VERSION`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyPiSpec {
    pub name: String,
    pub version: Option<String>,
}

impl PyPiSpec {
    pub fn parse(s: &str) -> Result<PyPiSpec> {
        let bad = || Error::Spec(s.to_string());
        let rest = s.strip_prefix("pypi:").ok_or_else(bad)?;
        let (name, version) = match rest.split_once("==") {
            Some((n, v)) => (n, Some(v)),
            None => (rest, None),
        };
        // A PyPI project name (PEP 508): letters, digits, `-`, `_`, `.`; no other requirement
        // syntax here (extras, ranges and markers go in --with).
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && name.starts_with(|c: char| c.is_ascii_alphanumeric());
        let version_ok = version.is_none_or(|v| {
            !v.is_empty()
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._+!-".contains(c))
        });
        if !name_ok || !version_ok {
            return Err(bad());
        }
        Ok(PyPiSpec {
            name: name.to_string(),
            version: version.map(str::to_string),
        })
    }

    /// The requirement as pip takes it.
    pub fn requirement(&self) -> String {
        match &self.version {
            Some(v) => format!("{}=={v}", self.name),
            None => self.name.clone(),
        }
    }
}

impl std::fmt::Display for PyPiSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pypi:{}", self.requirement())
    }
}

/// The installed package.
#[derive(Debug, Clone)]
pub struct Installed {
    pub name: String,
    /// As its metadata says (PEP 440).
    pub version: String,
    /// `name = module:function` lines of its `[console_scripts]`.
    pub scripts: Vec<(String, String)>,
    /// Every installed distribution, `(name, version)`, sorted.
    pub distributions: Vec<(String, String)>,
}

/// Where pip installs inside the rootfs.
pub const SITE: &str = "usr/lib/python3/dist-packages";

/// How long the resolution of an unpinned `pypi:NAME` is reused (a pinned one's always is).
const LOCK_FRESH: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// pip installs `p.spec` and `p.with` into `root`'s site directory; the package's metadata.
///
/// The cache (`p.cache`) keeps pip's own cache, a `wheels/` directory and, per requirement set,
/// a lock (`locks/*.txt`: each installed distribution as `name==version`). When the lock is
/// there (for an unpinned name, younger than a day) and every wheel it names is in `wheels/`,
/// the install is offline (`--no-index --no-deps`): resolving against the index is most of a
/// pack's time (about 20 s of 40 for mcp-server-time here). Otherwise pip resolves online, and
/// the lock and wheels are written for the next pack.
pub fn install(p: &PackFrom, root: &Path) -> Result<Installed> {
    let site = root.join(SITE);
    std::fs::create_dir_all(&site).map_err(|e| Error::io(site.display(), e))?;
    let wheels = p.cache.join("wheels");
    let locks = p.cache.join("locks");
    for d in [&wheels, &locks] {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d.display(), e))?;
    }
    let lock = locks.join(lock_name(p));
    if lock_usable(&lock, &wheels, p.spec.version.is_some()) {
        let mut cmd = pip(p, "install");
        cmd.args(["--no-index", "--no-deps", "--find-links"])
            .arg(&wheels)
            .arg("--target")
            .arg(&site)
            .arg("-r")
            .arg(&lock);
        if run(&mut cmd, "pip install (offline, from the lock)").is_ok() {
            return read_installed(&site, &p.spec.name);
        }
        // A lock that no longer installs is resolved again from the index.
        std::fs::remove_dir_all(&site).map_err(|e| Error::io(site.display(), e))?;
        std::fs::create_dir_all(&site).map_err(|e| Error::io(site.display(), e))?;
    }
    let mut cmd = pip(p, "install");
    cmd.arg("--target")
        .arg(&site)
        .arg(p.spec.requirement())
        .args(&p.with);
    run(&mut cmd, "pip install")?;
    let installed = read_installed(&site, &p.spec.name)?;
    // The lock and its wheels, for the next pack; a failure here only costs that pack time.
    let text: String = installed
        .distributions
        .iter()
        .map(|(n, v)| format!("{n}=={v}\n"))
        .collect();
    let tmp = lock.with_extension("tmp");
    if std::fs::write(&tmp, text).is_ok() {
        let mut cmd = pip(p, "wheel");
        cmd.args(["--no-deps", "--wheel-dir"])
            .arg(&wheels)
            .arg("-r")
            .arg(&tmp);
        if run(&mut cmd, "pip wheel").is_ok() {
            let _ = std::fs::rename(&tmp, &lock);
        } else {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    Ok(installed)
}

/// `python -m pip SUB` with the cache and without prompts, progress or bytecode (rootfs::compile
/// writes reproducible `.pyc` for the paths the rootfs sees).
fn pip(p: &PackFrom, sub: &str) -> Command {
    let mut cmd = Command::new(&p.python);
    cmd.args(["-m", "pip", sub, "--quiet", "--no-input"])
        .args(["--disable-pip-version-check", "--progress-bar", "off"])
        .arg("--cache-dir")
        .arg(p.cache.join("pip"))
        .env("PIP_ROOT_USER_ACTION", "ignore");
    if sub == "install" {
        cmd.arg("--no-compile");
    }
    cmd
}

/// The lock's file name: the requirement set, spelt with file-name-safe characters.
fn lock_name(p: &PackFrom) -> String {
    let mut s = p.spec.requirement();
    for w in &p.with {
        s.push('+');
        s.push_str(w);
    }
    let safe: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-.+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}.txt")
}

/// Whether `lock` can be installed offline: fresh enough, and every wheel it names present.
fn lock_usable(lock: &Path, wheels: &Path, pinned: bool) -> bool {
    let Ok(meta) = std::fs::metadata(lock) else {
        return false;
    };
    let fresh = pinned
        || meta
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age < LOCK_FRESH);
    let Ok(text) = std::fs::read_to_string(lock) else {
        return false;
    };
    let have: std::collections::BTreeSet<(String, String)> = std::fs::read_dir(wheels)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    let stem = n.strip_suffix(".whl")?;
                    let mut parts = stem.split('-');
                    Some((normalise(parts.next()?), parts.next()?.to_string()))
                })
                .collect()
        })
        .unwrap_or_default();
    fresh
        && !text.trim().is_empty()
        && text.lines().filter(|l| !l.trim().is_empty()).all(|l| {
            l.split_once("==")
                .is_some_and(|(n, v)| have.contains(&(normalise(n), v.trim().to_string())))
        })
}

/// Runs `cmd`; its stderr in the error when it fails.
pub(crate) fn run(cmd: &mut Command, what: &str) -> Result<Vec<u8>> {
    let out = cmd.output().map_err(|e| Error::io(what, e))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: String = stderr
            .chars()
            .rev()
            .take(4000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        return Err(Error::Command {
            command: what.to_string(),
            status: out.status.to_string(),
            stderr: tail.trim().to_string(),
        });
    }
    Ok(out.stdout)
}

/// PEP 503's normal form, with `_` (as in `*.dist-info` directory names).
pub fn normalise(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        let c = if "-_.".contains(c) {
            '_'
        } else {
            c.to_ascii_lowercase()
        };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    out
}

fn read_installed(site: &Path, name: &str) -> Result<Installed> {
    let want = normalise(name);
    let mut distributions = Vec::new();
    let mut found: Option<(PathBuf, String)> = None;
    let rd = std::fs::read_dir(site).map_err(|e| Error::io(site.display(), e))?;
    for e in rd.flatten() {
        let file_name = e.file_name().to_string_lossy().into_owned();
        let Some(stem) = file_name.strip_suffix(".dist-info") else {
            continue;
        };
        let Some((dist, version)) = stem.rsplit_once('-') else {
            continue;
        };
        distributions.push((dist.to_string(), version.to_string()));
        if normalise(dist) == want {
            found = Some((e.path(), version.to_string()));
        }
    }
    distributions.sort();
    let (dir, version) = found.ok_or_else(|| {
        Error::Entry(format!(
            "pip installed no distribution named {name} into {}",
            site.display()
        ))
    })?;
    let eps = std::fs::read_to_string(dir.join("entry_points.txt")).unwrap_or_default();
    Ok(Installed {
        name: name.to_string(),
        version,
        scripts: console_scripts(&eps),
        distributions,
    })
}

/// The `[console_scripts]` of an `entry_points.txt`.
pub fn console_scripts(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == "[console_scripts]";
            continue;
        }
        if !inside || line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            // `module:attr [extra]`: the extras are not part of the object reference.
            let target = v.split('[').next().unwrap_or_default().trim();
            out.push((k.trim().to_string(), target.to_string()));
        }
    }
    out
}

/// The server's entry as the manifest's `entry` after the interpreter: `--entry` if given
/// (`module:function` or `-m module`), else the console script named like the package, else
/// its only console script.
pub fn entry(installed: &Installed, flag: Option<&str>) -> Result<Vec<String>> {
    if let Some(e) = flag {
        let parts: Vec<String> = e.split_whitespace().map(str::to_string).collect();
        let ok = match parts.as_slice() {
            [m, module] => m == "-m" && !module.is_empty(),
            [target] => target.contains(':') || !target.starts_with('-'),
            _ => false,
        };
        if !ok {
            return Err(Error::Entry(format!(
                "--entry {e:?}: expected module:function or \"-m module\""
            )));
        }
        return Ok(parts);
    }
    let want = normalise(&installed.name);
    let named = installed.scripts.iter().find(|(n, _)| normalise(n) == want);
    let chosen = match (named, installed.scripts.as_slice()) {
        (Some(s), _) => s,
        (None, [only]) => only,
        (None, []) => {
            return Err(Error::Entry(format!(
                "{} {} declares no console script: give --entry module:function or \
                 --entry \"-m module\"",
                installed.name, installed.version
            )))
        }
        (None, many) => {
            let names: Vec<&str> = many.iter().map(|(n, _)| n.as_str()).collect();
            return Err(Error::Entry(format!(
                "{} {} declares several console scripts ({}): say which with --entry",
                installed.name,
                installed.version,
                names.join(", ")
            )));
        }
    };
    Ok(vec![chosen.1.clone()])
}

/// A PEP 440 version as the semantic version a release carries (rollback protection compares
/// them): `1.2` is `1.2.0`, `0.0.1a8` is `0.0.1-a8`, `1.0.post2` is `1.0.0-post2`. A local
/// part (`+x`) is build metadata.
pub fn semver_of(pep440: &str) -> Result<String> {
    let refuse = || {
        Error::Version(format!(
            "version {pep440:?} has no semantic-version form: pack with a version given by \
             --manifest after editing the draft"
        ))
    };
    if semver::Version::parse(pep440).is_ok() {
        return Ok(pep440.to_string());
    }
    let (main, local) = match pep440.split_once('+') {
        Some((m, l)) => (m, Some(l)),
        None => (pep440, None),
    };
    let split = main
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(main.len());
    let (release, pre) = main.split_at(split);
    let mut nums: Vec<&str> = release
        .trim_end_matches('.')
        .split('.')
        .filter(|s| !s.is_empty())
        .collect();
    if nums.is_empty() || nums.len() > 3 {
        return Err(refuse());
    }
    while nums.len() < 3 {
        nums.push("0");
    }
    let nums: Vec<String> = nums
        .iter()
        .map(|n| n.parse::<u64>().map(|v| v.to_string()))
        .collect::<Result<_, _>>()
        .map_err(|_| refuse())?;
    let mut s = nums.join(".");
    let pre = pre.trim_start_matches(['.', '-', '_']);
    if !pre.is_empty() {
        s.push('-');
        s.push_str(&pre.replace(['_', '-'], "."));
    }
    if let Some(l) = local {
        s.push('+');
        s.push_str(&l.replace('_', "."));
    }
    semver::Version::parse(&s).map_err(|_| refuse())?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let s = PyPiSpec::parse("pypi:mcp-server-git==2026.10.19").expect("spec");
        assert_eq!(s.name, "mcp-server-git");
        assert_eq!(s.version.as_deref(), Some("2026.10.19"));
        assert_eq!(s.requirement(), "mcp-server-git==2026.10.19");
        assert_eq!(
            PyPiSpec::parse("pypi:mcp-server-time")
                .expect("spec")
                .version,
            None
        );
        for bad in [
            "mcp-server-git",
            "npm:x",
            "pypi:",
            "pypi:x==",
            "pypi:x>=1",
            "pypi:x[cli]",
            "pypi:-x",
            "pypi:x==1;rm",
        ] {
            assert!(PyPiSpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn versions() {
        for (p, s) in [
            ("2026.10.19", "2026.10.19"),
            ("1.2", "1.2.0"),
            ("0.0.1a8", "0.0.1-a8"),
            ("1.0.post2", "1.0.0-post2"),
            ("2.0.0rc1", "2.0.0-rc1"),
            ("1.2.3+local.1", "1.2.3+local.1"),
        ] {
            assert_eq!(semver_of(p).expect(p), s);
        }
        assert!(semver_of("1.2.3.4").is_err());
        assert!(semver_of("abc").is_err());
    }

    #[test]
    fn scripts_and_entries() {
        let eps = "[console_scripts]\nmcp-server-git = mcp_server_git:main\nother = o:run [cli]\n\n[gui_scripts]\nx = y:z\n";
        let scripts = console_scripts(eps);
        assert_eq!(
            scripts,
            vec![
                ("mcp-server-git".into(), "mcp_server_git:main".into()),
                ("other".into(), "o:run".into())
            ]
        );
        let mut i = Installed {
            name: "mcp_server.git".into(),
            version: "1".into(),
            scripts,
            distributions: vec![],
        };
        assert_eq!(entry(&i, None).expect("named"), vec!["mcp_server_git:main"]);
        assert_eq!(entry(&i, Some("-m pkg")).expect("flag"), vec!["-m", "pkg"]);
        assert!(entry(&i, Some("-x pkg")).is_err());
        i.name = "else".into();
        assert!(entry(&i, None).is_err(), "two scripts, none named like it");
        i.scripts.truncate(1);
        assert_eq!(entry(&i, None).expect("only"), vec!["mcp_server_git:main"]);
    }
}
