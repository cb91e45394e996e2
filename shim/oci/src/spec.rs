//! The engine's `config.json`, read as untrusted input. germline takes from it only where the
//! engine put the rootfs and which cgroup it accounts the container in; the process, its
//! environment, mounts, namespaces and capabilities come from the signed manifest and the
//! node's policy. What a user asked for through the engine and does not get is reported.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::{Error, Result};

/// Most bytes of a `config.json` we read.
const MAX_CONFIG: u64 = 4 << 20;

/// The network namespace the engine gave the container (`linux.namespaces`, type `network`).
/// The front end and its broker run in it, so what the broker delivers leaves from the
/// workload's own network (a pod's, governed by the cluster's NetworkPolicy); copies never
/// see it (each has a network namespace of its own with only the broker's endpoint).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Network {
    /// No network namespace in `config.json`: the host's (`--network host`, a node-network
    /// pod).
    #[default]
    Host,
    /// A fresh one (a `network` entry without a path), as runc makes: only `lo`.
    New,
    /// The existing namespace at this path (podman's netns, `ctr run --with-ns`, a CRI pod
    /// sandbox's `/proc/PID/ns/net`).
    Path(PathBuf),
}

/// The annotation that selects the Streamable HTTP endpoint instead of stdio: its value is
/// the `IP:PORT` `germline serve` listens on, in the container's network namespace.
pub const LISTEN_ANNOTATION: &str = "dev.germline.mcp/listen";

/// What germline uses of the engine's `config.json`, and what it ignores.
#[derive(Debug)]
pub struct EngineSpec {
    pub rootfs: PathBuf,
    /// `linux.cgroupsPath` (cgroupfs form) if the engine named one.
    pub cgroups_path: Option<String>,
    pub terminal: bool,
    pub args: Vec<String>,
    pub annotations: serde_json::Map<String, Value>,
    pub network: Network,
    /// `dev.germline.mcp/listen`: serve MCP over Streamable HTTP at this address.
    pub listen: Option<std::net::SocketAddr>,
    /// `process.env` entries the engine did not add itself (`-e`), as (name, value).
    pub env: Vec<(String, String)>,
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
    pub fn load(bundle: &Path) -> Result<EngineSpec> {
        let p = bundle.join("config.json");
        let f = std::fs::File::open(&p).map_err(Error::io(&p))?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_CONFIG + 1), &mut text)
            .map_err(Error::io(&p))?;
        if text.len() as u64 > MAX_CONFIG {
            return Err(Error::TooLarge(p));
        }
        let v: Value = serde_json::from_str(&text).map_err(|source| Error::NotJson {
            file: p.display().to_string(),
            source,
        })?;
        Self::parse(&v, bundle, &p.display().to_string())
    }

    /// Interprets a parsed `config.json` of the bundle `bundle` (`file` names it in errors).
    pub fn parse(v: &Value, bundle: &Path, file: &str) -> Result<EngineSpec> {
        let root = field(v, &["root", "path"])
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Field {
                file: file.to_string(),
                field: "root.path",
                message: "missing, expected the rootfs path".into(),
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

        let listen = match annotations.get(LISTEN_ANNOTATION) {
            None => None,
            Some(a) => Some(
                a.as_str()
                    .and_then(|s| s.parse::<std::net::SocketAddr>().ok())
                    .ok_or_else(|| Error::Annotation {
                        file: file.to_string(),
                        name: LISTEN_ANNOTATION,
                        message: format!(
                            "{a}, expected IP:PORT (e.g. 10.0.0.5:8080) for the Streamable \
                             HTTP endpoint"
                        ),
                    })?,
            ),
        };
        // Which variables are broker credentials is the node's decision (runtime.rs), so
        // the ignored ones are named there.
        let env: Vec<(String, String)> = strings(field(v, &["process", "env"]))
            .into_iter()
            .filter_map(|e| {
                let (k, val) = e.split_once('=').unwrap_or((e.as_str(), ""));
                (!ENGINE_ENV.contains(&k)).then(|| (k.to_string(), val.to_string()))
            })
            .collect();
        let mut ignored = Vec::new();
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
        let network = match netns {
            None => Network::Host,
            Some(n) => match n.get("path").and_then(Value::as_str) {
                Some(p) if !p.is_empty() => {
                    if !Path::new(p).is_absolute() {
                        return Err(Error::Field {
                            file: file.to_string(),
                            field: "linux.namespaces[network].path",
                            message: format!("{p:?}, expected an absolute path"),
                        });
                    }
                    Network::Path(PathBuf::from(p))
                }
                _ => Network::New,
            },
        };
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
            network,
            listen,
            env,
            ignored,
        })
    }
}

impl EngineSpec {
    /// Takes the `-e` variables the node's policy names as broker credentials
    /// (`[credentials."HOST"] value_env = "NAME"`) out of `env` and returns them; every other
    /// one is named in `ignored` (by name: values may be secrets and are never echoed).
    pub fn take_credentials(
        &mut self,
        names: &std::collections::BTreeSet<String>,
    ) -> Vec<(String, String)> {
        let (creds, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.env)
            .into_iter()
            .partition(|(k, _)| names.contains(k));
        if !rest.is_empty() {
            let names: Vec<&str> = rest.iter().map(|(k, _)| k.as_str()).collect();
            self.ignored.insert(
                0,
                format!(
                    "environment {} (-e): the germline's environment comes from the signed \
                     manifest; only a variable the node's policy names as a credential \
                     (`value_env`) is taken, and given to the broker for its host",
                    names.join(", ")
                ),
            );
        }
        creds
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
        let mut s = EngineSpec::parse(&v, Path::new("/b"), "c.json").expect("spec");
        assert!(s.take_credentials(&Default::default()).is_empty());
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
    fn only_variables_the_policy_names_become_credentials() {
        let mut v = podman_default();
        v["process"]["env"]
            .as_array_mut()
            .expect("env")
            .extend([json!("OCR_KEY=k-123"), json!("OTHER=x=y")]);
        let mut s = EngineSpec::parse(&v, Path::new("/b"), "c.json").expect("spec");
        let names = ["OCR_KEY".to_string()].into_iter().collect();
        let creds = s.take_credentials(&names);
        assert_eq!(creds, vec![("OCR_KEY".to_string(), "k-123".to_string())]);
        let all = s.ignored.join("\n");
        assert!(all.contains("environment OTHER (-e)"), "{all}");
        assert!(!all.contains("OCR_KEY") && !all.contains("x=y"), "{all}");
    }

    #[test]
    fn network_namespace_and_listen_annotation() {
        let mut v = podman_default();
        let s = EngineSpec::parse(&v, Path::new("/b"), "c.json").expect("spec");
        assert_eq!((s.network, s.listen), (Network::New, None));
        v["linux"]["namespaces"] = json!([{"type": "network", "path": "/var/run/netns/p1"}]);
        v["annotations"] = json!({"dev.germline.mcp/listen": "10.0.0.5:8080"});
        let s = EngineSpec::parse(&v, Path::new("/b"), "c.json").expect("spec");
        assert_eq!(s.network, Network::Path(PathBuf::from("/var/run/netns/p1")));
        assert_eq!(s.listen, Some("10.0.0.5:8080".parse().expect("addr")));
        v["annotations"] = json!({"dev.germline.mcp/listen": "pod:8080"});
        let e = EngineSpec::parse(&v, Path::new("/b"), "c.json").expect_err("bad listen");
        assert!(
            e.to_string()
                .contains("annotation `dev.germline.mcp/listen`"),
            "{e}"
        );
        v["annotations"] = json!({});
        v["linux"]["namespaces"] = json!([{"type": "network", "path": "netns/p1"}]);
        let e = EngineSpec::parse(&v, Path::new("/b"), "c.json").expect_err("relative");
        assert!(
            e.to_string().contains("linux.namespaces[network].path"),
            "{e}"
        );
        v["linux"]["namespaces"] = json!([{"type": "pid"}]);
        let s = EngineSpec::parse(&v, Path::new("/b"), "c.json").expect("spec");
        assert_eq!(s.network, Network::Host);
    }

    #[test]
    fn relative_root_resolves_against_the_bundle_and_missing_root_is_named() {
        let v = json!({"root": {"path": "rootfs"}, "linux": {"namespaces": [{"type": "network"}]}});
        let s = EngineSpec::parse(&v, Path::new("/b"), "c.json").expect("spec");
        assert_eq!(s.rootfs, PathBuf::from("/b/rootfs"));
        let e = EngineSpec::parse(&json!({}), Path::new("/b"), "c.json").expect_err("no root");
        assert!(e.to_string().contains("c.json: field `root.path`"), "{e}");
    }
}
