//! The engine's `config.json`, read as untrusted input. germline takes from it only where the
//! engine put the rootfs and which cgroup it accounts the container in; the process, its
//! environment, mounts, namespaces and capabilities come from the signed manifest and the
//! node's policy. What a user asked for through the engine and does not get is reported.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Most bytes of a `config.json` we read.
const MAX_CONFIG: u64 = 4 << 20;

/// What germline uses of the engine's `config.json`, and what it ignores.
#[derive(Debug)]
pub struct EngineSpec {
    pub rootfs: PathBuf,
    /// `linux.cgroupsPath` (cgroupfs form) if the engine named one.
    pub cgroups_path: Option<String>,
    pub terminal: bool,
    pub args: Vec<String>,
    pub annotations: serde_json::Map<String, Value>,
    /// Settings the user asked the engine for that germline does not apply, each a sentence.
    pub ignored: Vec<String>,
}

/// Environment variables engines set on their own (podman, containerd, CRI-O): not reported.
const ENGINE_ENV: [&str; 5] = ["PATH", "TERM", "container", "HOSTNAME", "HOME"];
/// Mount points engines add on their own.
const ENGINE_MOUNTS: [&str; 15] = [
    "/proc",
    "/run",
    "/dev",
    "/sys",
    "/dev/pts",
    "/dev/mqueue",
    "/dev/shm",
    "/sys/fs/cgroup",
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
    "/run/.containerenv",
    "/run/secrets",
    "/dev/termination-log",
    "/var/run/secrets/kubernetes.io/serviceaccount",
];
/// podman's and containerd's default capability set; anything beyond came from `--cap-add`.
const ENGINE_CAPS: [&str; 14] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_NET_BIND_SERVICE",
    "CAP_SETFCAP",
    "CAP_SETGID",
    "CAP_SETPCAP",
    "CAP_SETUID",
    "CAP_SYS_CHROOT",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_AUDIT_WRITE",
];

fn field<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

impl EngineSpec {
    /// Reads `bundle/config.json`.
    pub fn load(bundle: &Path) -> Result<EngineSpec, String> {
        let p = bundle.join("config.json");
        let f = std::fs::File::open(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_CONFIG + 1), &mut text)
            .map_err(|e| format!("{}: {e}", p.display()))?;
        if text.len() as u64 > MAX_CONFIG {
            return Err(format!("{}: larger than 4 MiB", p.display()));
        }
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: not JSON: {e}", p.display()))?;
        Self::parse(&v, bundle, &p.display().to_string())
    }

    /// Interprets a parsed `config.json` of the bundle `bundle` (`file` names it in errors).
    pub fn parse(v: &Value, bundle: &Path, file: &str) -> Result<EngineSpec, String> {
        let root = field(v, &["root", "path"])
            .and_then(Value::as_str)
            .ok_or_else(|| {
                format!("{file}: field `root.path`: missing, expected the rootfs path")
            })?;
        let rootfs = if Path::new(root).is_absolute() {
            PathBuf::from(root)
        } else {
            bundle.join(root)
        };
        let cgroups_path = field(v, &["linux", "cgroupsPath"])
            .and_then(Value::as_str)
            .map(str::to_string)
            .filter(|s| !s.is_empty());
        let terminal = field(v, &["process", "terminal"])
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let args = strings(field(v, &["process", "args"]));
        let annotations = v
            .get("annotations")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();

        let mut ignored = Vec::new();
        let env: Vec<String> = strings(field(v, &["process", "env"]))
            .into_iter()
            .filter_map(|e| e.split('=').next().map(str::to_string))
            .filter(|k| !ENGINE_ENV.contains(&k.as_str()))
            .collect();
        if !env.is_empty() {
            ignored.push(format!(
                "environment {} (-e): the germline's environment comes from the signed \
                 manifest; a credential belongs in the policy, given to the broker per host",
                env.join(", ")
            ));
        }
        let mounts: Vec<String> = field(v, &["mounts"])
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|m| {
                        let dest = m.get("destination")?.as_str()?;
                        if ENGINE_MOUNTS.contains(&dest) {
                            return None;
                        }
                        let src = m.get("source").and_then(Value::as_str).unwrap_or("");
                        Some(format!("{src}:{dest}"))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if !mounts.is_empty() {
            ignored.push(format!(
                "mounts {} (-v/--mount): a copy sees only the signed rootfs and the items of \
                 its view; files reach it as arguments the policy labels",
                mounts.join(", ")
            ));
        }
        let namespaces: Vec<&Value> = field(v, &["linux", "namespaces"])
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        let netns = namespaces
            .iter()
            .find(|n| n.get("type").and_then(Value::as_str) == Some("network"));
        if netns.is_none() {
            ignored.push(
                "the host network (--network host): the germline and its copies have no \
                 network; the broker delivers only to declared destinations"
                    .into(),
            );
        }
        let mut caps: Vec<String> = ["bounding", "effective", "permitted"]
            .iter()
            .flat_map(|set| strings(field(v, &["process", "capabilities", set])))
            .filter(|c| !ENGINE_CAPS.contains(&c.as_str()))
            .collect();
        caps.sort();
        caps.dedup();
        let privileged = annotations
            .get("io.podman.annotations.privileged")
            .and_then(Value::as_str)
            == Some("TRUE");
        if privileged {
            ignored.push(
                "--privileged: copies run with no capabilities, under seccomp and Landlock".into(),
            );
        } else if !caps.is_empty() {
            ignored.push(format!(
                "capabilities {} (--cap-add): copies run with no capabilities",
                caps.join(", ")
            ));
        }
        Ok(EngineSpec {
            rootfs,
            cgroups_path,
            terminal,
            args,
            annotations,
            ignored,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn podman_default() -> Value {
        json!({
            "process": {"args": ["/usr/bin/python3", "-m", "mcp_server_time"],
                        "env": ["PATH=/usr/bin", "TERM=xterm", "container=podman", "HOSTNAME=x"],
                        "capabilities": {"bounding": ["CAP_CHOWN", "CAP_KILL"]}},
            "root": {"path": "/var/lib/containers/storage/overlay/x/merged"},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                       {"destination": "/etc/hosts", "type": "bind", "source": "/run/x/hosts"}],
            "linux": {"cgroupsPath": "/libpod_parent/libpod-x",
                      "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "mount"}]}
        })
    }

    #[test]
    fn engine_defaults_are_not_reported() {
        let s = EngineSpec::parse(&podman_default(), Path::new("/b"), "c.json").expect("spec");
        assert!(s.ignored.is_empty(), "{:?}", s.ignored);
        assert_eq!(
            s.rootfs,
            PathBuf::from("/var/lib/containers/storage/overlay/x/merged")
        );
        assert_eq!(s.cgroups_path.as_deref(), Some("/libpod_parent/libpod-x"));
    }

    #[test]
    fn env_volume_host_network_and_cap_add_are_each_named() {
        let mut v = podman_default();
        v["process"]["env"]
            .as_array_mut()
            .expect("env")
            .push(json!("API_TOKEN=s3cret"));
        v["mounts"]
            .as_array_mut()
            .expect("mounts")
            .push(json!({"destination": "/data", "type": "bind", "source": "/home/alice"}));
        v["linux"]["namespaces"] = json!([{"type": "pid"}, {"type": "mount"}]);
        v["process"]["capabilities"]["bounding"] = json!(["CAP_CHOWN", "CAP_NET_ADMIN"]);
        let s = EngineSpec::parse(&v, Path::new("/b"), "c.json").expect("spec");
        let all = s.ignored.join("\n");
        assert_eq!(s.ignored.len(), 4, "{all}");
        assert!(all.contains("environment API_TOKEN (-e)"), "{all}");
        assert!(!all.contains("s3cret"), "values are never echoed: {all}");
        assert!(
            all.contains("mounts /home/alice:/data (-v/--mount)"),
            "{all}"
        );
        assert!(all.contains("--network host"), "{all}");
        assert!(all.contains("CAP_NET_ADMIN (--cap-add)"), "{all}");
    }

    #[test]
    fn relative_root_resolves_against_the_bundle_and_missing_root_is_named() {
        let v = json!({"root": {"path": "rootfs"}, "linux": {"namespaces": [{"type": "network"}]}});
        let s = EngineSpec::parse(&v, Path::new("/b"), "c.json").expect("spec");
        assert_eq!(s.rootfs, PathBuf::from("/b/rootfs"));
        let e = EngineSpec::parse(&json!({}), Path::new("/b"), "c.json").expect_err("no root");
        assert!(e.contains("c.json: field `root.path`"), "{e}");
    }
}
