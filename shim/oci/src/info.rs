//! The commands that report, as runc's do: `list` (the containers under `--root`), `ps` (a
//! container's processes), `events` (its resource statistics), `features` (the runtime-spec
//! features document) and `spec` (a template `config.json`). The runtime-spec documents are
//! built with oci-spec's types.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use germline_sys::{cgroup, procfs};

use crate::config::Config;
use crate::error::{Error, Result};
use crate::runtime::Globals;
use crate::spec::LISTEN_ANNOTATION;
use crate::state::{self, State};

/// Prints `v` as indented JSON (runc's `state`, `features`). A closed stdout (a pager,
/// `| head`) is not an error of the container.
pub fn print_json(v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(Error::Encode)?;
    let _ = writeln!(std::io::stdout(), "{text}");
    Ok(())
}

/// runc's `--format`: `table` or `json`.
fn is_json(format: &str) -> Result<bool> {
    match format {
        "table" => Ok(false),
        "json" => Ok(true),
        other => Err(Error::Format(other.to_string())),
    }
}

/// `list`: every container under `--root`, as runc prints them: a table (`ID PID STATUS BUNDLE
/// CREATED OWNER`), a JSON array of `state` objects, or with `quiet` the ids only. A container
/// handed to runc is listed with runc's own state of it.
pub fn list(cli: &Globals, format: &str, quiet: bool) -> Result<()> {
    let json = is_json(format)?;
    let root = &cli.root;
    let mut ids: Vec<String> = match std::fs::read_dir(root) {
        Ok(rd) => rd
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| state::check_id(n).is_ok())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io(root)(e)),
    };
    ids.sort();
    let mut runc: Option<PathBuf> = None;
    let mut rows = Vec::new();
    for id in ids {
        let dir = state::dir(root, &id);
        if state::handoff_marker(root, &id).exists() {
            let bin = match &runc {
                Some(b) => b.clone(),
                None => {
                    let b = Config::load(cli.config.as_deref())?.runc;
                    runc = Some(b.clone());
                    b
                }
            };
            if let Some(v) = runc_state(&bin, root, &id) {
                rows.push(v);
            }
            continue;
        }
        // Not a container: `releases/`, a precreate hook's bind, a `create` that failed.
        if !dir.join("state.json").is_file() {
            continue;
        }
        let Ok(st) = State::load(root, &id) else {
            continue;
        };
        let mut v = st.to_runc_json(root)?;
        v["owner"] = owner_of(&dir).into();
        rows.push(v);
    }
    let mut out = std::io::stdout().lock();
    if quiet {
        for r in &rows {
            let _ = writeln!(out, "{}", r["id"].as_str().unwrap_or_default());
        }
        return Ok(());
    }
    if json {
        let _ = writeln!(out, "{}", Value::Array(rows));
        return Ok(());
    }
    let cell = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let table: Vec<Vec<String>> = std::iter::once(
        ["ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER"]
            .map(str::to_string)
            .to_vec(),
    )
    .chain(rows.iter().map(|r| {
        ["id", "pid", "status", "bundle", "created", "owner"]
            .iter()
            .map(|k| cell(&r[*k]))
            .collect()
    }))
    .collect();
    let _ = out.write_all(align(&table).as_bytes());
    Ok(())
}

/// Columns padded as runc's tabwriter pads them (at least 12 wide, 3 spaces after the longest
/// cell); the last column is not padded.
fn align(rows: &[Vec<String>]) -> String {
    let cols = rows.first().map(Vec::len).unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            let w = rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0);
            (w + 3).max(12)
        })
        .collect();
    let mut s = String::new();
    for r in rows {
        for (c, v) in r.iter().enumerate() {
            if c + 1 == cols {
                s.push_str(v);
            } else {
                s.push_str(&format!("{v:<w$}", w = widths[c]));
            }
        }
        s.push('\n');
    }
    s
}

/// runc's `state` of a container handed to it, if runc gives one.
fn runc_state(runc: &Path, root: &Path, id: &str) -> Option<Value> {
    let out = Command::new(runc)
        .arg("--root")
        .arg(state::runc_root(root))
        .arg("state")
        .arg(id)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

/// The user owning a state directory, as runc's `list` names it (`#UID` without a name).
fn owner_of(dir: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(md) = std::fs::metadata(dir) else {
        return String::new();
    };
    let uid = md.uid();
    user_name(uid).unwrap_or_else(|| format!("#{uid}"))
}

/// The name of `uid` in /etc/passwd.
fn user_name(uid: u32) -> Option<String> {
    let text = std::fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let id: u32 = f.nth(1)?.parse().ok()?;
        (id == uid).then(|| name.to_string())
    })
}

/// The cgroups a container's processes live in: the engine's (joined at `create`: the front end
/// and its broker) and those `germline run` made for its germlines and their copies.
fn cgroups_of(st: &State) -> Vec<PathBuf> {
    let mut v = st.cgroups.clone();
    if let Ok(pid) = u32::try_from(st.pid) {
        v.extend(cgroup::germline_run_cgroups(pid));
    }
    v
}

/// Every live process of the container: the tree below its process (`germline run`, its
/// broker, the germline, the copies) and whatever is in its cgroups.
pub(crate) fn processes(st: &State) -> Vec<i32> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![st.pid];
    while let Some(p) = stack.pop() {
        if p > 0 && seen.insert(p) {
            stack.extend(procfs::children(p));
        }
    }
    seen.extend(cgroup::procs_in_trees(&cgroups_of(st)));
    seen.into_iter()
        .filter(|p| *p > 0 && procfs::alive(*p))
        .collect()
}

/// `ps`: the container's pids (`--format json`: a JSON array), or `ps OPTIONS` (default
/// `-ef`) cut to the lines of those pids, header first, as runc does.
pub fn ps(root: &Path, id: &str, format: &str, options: &[String]) -> Result<()> {
    let json = is_json(format)?;
    let st = State::load(root, id)?;
    if !st.alive() {
        return Err(Error::NotRunning(id.to_string()));
    }
    let pids = processes(&st);
    let mut out = std::io::stdout().lock();
    if json {
        let _ = writeln!(out, "{}", json!(pids));
        return Ok(());
    }
    let opts: Vec<String> = if options.is_empty() {
        vec!["-ef".into()]
    } else {
        options.to_vec()
    };
    let o = Command::new("ps")
        .args(&opts)
        .output()
        .map_err(|e| Error::op("running", "ps", e))?;
    let text = String::from_utf8_lossy(&o.stdout);
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let col = header
        .split_whitespace()
        .position(|f| f == "PID")
        .ok_or_else(|| Error::PsHeader(opts.clone()))?;
    let _ = writeln!(out, "{header}");
    for l in lines {
        let pid = l
            .split_whitespace()
            .nth(col)
            .and_then(|p| p.parse::<i32>().ok());
        if pid.is_some_and(|p| pids.binary_search(&p).is_ok()) {
            let _ = writeln!(out, "{l}");
        }
    }
    Ok(())
}

/// One runc `stats` event's `data`: CPU time (ns), memory in use (bytes) and tasks, summed
/// over the container's cgroups (each a separate tree: the engine's, and each germline's);
/// without a pids controller, the count of [`processes`].
fn stats(st: &State) -> Value {
    let read = |p: PathBuf| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let cpu_stat_usec = |d: &Path| {
        std::fs::read_to_string(d.join("cpu.stat"))
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse::<u64>().ok())
    };
    let add = |acc: &mut Option<u64>, v: Option<u64>| {
        if let Some(v) = v {
            *acc = Some(acc.unwrap_or(0).saturating_add(v));
        }
    };
    let (mut cpu, mut mem, mut tasks) = (None, None, None);
    for d in cgroups_of(st) {
        // v1: cpuacct.usage, memory.usage_in_bytes; v2: cpu.stat usage_usec, memory.current.
        add(
            &mut cpu,
            read(d.join("cpuacct.usage")).or_else(|| cpu_stat_usec(&d).map(|u| u * 1000)),
        );
        add(
            &mut mem,
            read(d.join("memory.usage_in_bytes")).or_else(|| read(d.join("memory.current"))),
        );
        add(&mut tasks, read(d.join("pids.current")));
    }
    let mut data = serde_json::Map::new();
    if let Some(c) = cpu {
        data.insert("cpu".into(), json!({"usage": {"total": c}}));
    }
    if let Some(m) = mem {
        data.insert("memory".into(), json!({"usage": {"usage": m}}));
    }
    let tasks = tasks.unwrap_or(processes(st).len() as u64);
    data.insert("pids".into(), json!({"current": tasks}));
    Value::Object(data)
}

/// `events`: `{"type":"stats","id":ID,"data":{...}}` lines (runc's shape, the fields germline
/// reads: `cpu.usage.total`, `memory.usage.usage`, `pids.current`), once with `--stats`, else
/// every `interval` seconds until the container stops or stdout closes.
pub fn events(root: &Path, id: &str, interval: u32, once: bool) -> Result<()> {
    let st = State::load(root, id)?;
    if !st.alive() {
        return Err(Error::NotRunning(id.to_string()));
    }
    let every = Duration::from_secs(u64::from(interval.max(1)));
    loop {
        let line = json!({"type": "stats", "id": id, "data": stats(&st)});
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() || once {
            return Ok(());
        }
        drop(out);
        let t = Instant::now();
        while t.elapsed() < every {
            if !st.alive() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The runtime-spec features document (features.md), built with oci-spec's `Features`: what
/// germline-runtime takes from a `config.json`. It runs no hooks of it, applies none of its
/// mount options, capabilities, seccomp, AppArmor or SELinux settings (the signed manifest and
/// the node's policy decide those), joins only its network namespace, and joins a cgroupfs
/// `linux.cgroupsPath` (v1 or v2; a systemd one is not joined). `dev.germline.mcp/listen`
/// changes what it runs. Fields oci-spec leaves unset are left out (its `null`s are not valid
/// under the features schema).
pub fn features() -> Result<Value> {
    use oci_spec::runtime::{
        ApparmorBuilder, CgroupBuilder, FeaturesBuilder, IDMapBuilder, IntelRdtBuilder,
        LinuxFeatureBuilder, LinuxNamespaceType, MountExtensionsBuilder, SeccompBuilder,
        SelinuxBuilder,
    };
    let e = |source| Error::OciSpec {
        what: "features",
        source,
    };
    let linux = LinuxFeatureBuilder::default()
        .namespaces(vec![LinuxNamespaceType::Network])
        .capabilities(Vec::<String>::new())
        .cgroup(
            CgroupBuilder::default()
                .v1(true)
                .v2(true)
                .systemd(false)
                .systemd_user(false)
                .rdma(false)
                .build()
                .map_err(e)?,
        )
        .seccomp(
            SeccompBuilder::default()
                .enabled(false)
                .build()
                .map_err(e)?,
        )
        .apparmor(
            ApparmorBuilder::default()
                .enabled(false)
                .build()
                .map_err(e)?,
        )
        .selinux(
            SelinuxBuilder::default()
                .enabled(false)
                .build()
                .map_err(e)?,
        )
        .intel_rdt(
            IntelRdtBuilder::default()
                .enabled(false)
                .build()
                .map_err(e)?,
        )
        .mount_extensions(
            MountExtensionsBuilder::default()
                .idmap(IDMapBuilder::default().enabled(false).build().map_err(e)?)
                .build()
                .map_err(e)?,
        )
        .build()
        .map_err(e)?;
    let f = FeaturesBuilder::default()
        .oci_version_min("1.0.0")
        .oci_version_max(crate::OCI_VERSION)
        .hooks(Vec::<String>::new())
        .mount_options(Vec::<String>::new())
        .linux(linux)
        .annotations(std::collections::HashMap::from([(
            "dev.germline.runtime.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        )]))
        .potentially_unsafe_config_annotations(vec![LISTEN_ANNOTATION.to_string()])
        .build()
        .map_err(e)?;
    let mut v = serde_json::to_value(&f).map_err(Error::Encode)?;
    drop_nulls(&mut v);
    Ok(v)
}

/// Removes every `null` member of every object in `v`.
fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null());
            m.values_mut().for_each(drop_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// `spec`: writes oci-spec's template `config.json` (runc's: `sh` as the process, the usual
/// mounts and namespaces, `root.path` = `rootfs`) into `bundle`, with this runtime's
/// `ociVersion` and hostname `germline`. germline-runtime takes only a few fields of it (see
/// docs/engines.md); `--rootless` is refused, as germline-runtime runs as root.
pub fn spec(bundle: Option<&Path>, rootless: bool) -> Result<()> {
    if rootless {
        return Err(Error::Unsupported {
            command: "spec --rootless",
            reason: "germline-runtime runs as root: the germline's cgroups and the check of \
                     each copy's seccomp program need it (docs/engines.md)",
        });
    }
    let dir = bundle.unwrap_or(Path::new("."));
    let p = dir.join("config.json");
    if std::fs::symlink_metadata(&p).is_ok() {
        return Err(Error::ConfigExists(p));
    }
    let mut s = oci_spec::runtime::Spec::default();
    s.set_version(crate::OCI_VERSION.to_string());
    s.set_hostname(Some("germline".to_string()));
    let mut v = serde_json::to_value(&s).map_err(Error::Encode)?;
    drop_nulls(&mut v);
    let text = serde_json::to_string_pretty(&v).map_err(Error::Encode)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&p)
        .map_err(Error::io(&p))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.write_all(b"\n"))
        .map_err(Error::io(&p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_padded_as_runcs() {
        let t = align(&[
            vec!["ID".into(), "PID".into(), "OWNER".into()],
            vec!["a-long-container-id".into(), "42".into(), "root".into()],
        ]);
        assert_eq!(
            t,
            "ID                    PID         OWNER\na-long-container-id   42          root\n"
        );
    }

    #[test]
    fn features_are_the_runtime_spec_document_without_nulls() {
        let v = features().expect("features");
        assert_eq!(v["ociVersionMin"], "1.0.0");
        assert_eq!(v["ociVersionMax"], crate::OCI_VERSION);
        assert_eq!(v["linux"]["namespaces"], json!(["network"]));
        assert_eq!(v["linux"]["cgroup"]["systemd"], false);
        assert_eq!(
            v["potentiallyUnsafeConfigAnnotations"],
            json!(["dev.germline.mcp/listen"])
        );
        assert!(!v.to_string().contains("null"), "{v}");
        // oci-spec's own type reads it back.
        let f: oci_spec::runtime::Features = serde_json::from_value(v).expect("Features");
        assert_eq!(f.hooks().as_deref(), Some(&[][..]));
    }
}
