//! A container's state directory (`ROOT/ID/`) and runc's `state` JSON.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use germline_sys::{paths, procfs};

use crate::error::{Error, Result};

/// Default `--root`.
pub const DEFAULT_ROOT: &str = paths::RUNTIME_ROOT;

/// What `create` records; later commands read it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub id: String,
    pub bundle: PathBuf,
    /// The engine's rootfs (as `config.json` named it).
    pub rootfs: PathBuf,
    pub created: String,
    /// The container's process (`germline run` after `start`); 0 before `create` forks it.
    pub pid: i32,
    /// Its start time, so that a reused pid is never mistaken for it.
    pub start_time: u64,
    /// The key the release verified under.
    pub key: PathBuf,
    /// The engine's cgroup directories this runtime made and moved the process into.
    pub cgroups: Vec<PathBuf>,
    pub paused: bool,
    /// What the engine asked for and germline does not apply, said again on the container's
    /// stderr at start (the engine does not show what `create` printed when it succeeds).
    #[serde(default)]
    pub ignored: Vec<String>,
    pub annotations: serde_json::Map<String, Value>,
    /// The network namespace the front end and its broker run in.
    #[serde(default)]
    pub network: crate::spec::Network,
    /// Serve MCP over Streamable HTTP at this address instead of stdio.
    #[serde(default)]
    pub listen: Option<std::net::SocketAddr>,
}

/// A container id as runc accepts it: letters, digits, `_`, `.`, `-`, `+`; no path tricks.
pub fn check_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 1024
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-+".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidId(id.to_string()))
    }
}

/// `ROOT/ID`.
pub fn dir(root: &Path, id: &str) -> PathBuf {
    root.join(id)
}

/// The verified release as `germline run` reads it: `paths::RUNTIME_RELEASES/<root hash>-ID/rootfs` is a
/// read-only bind of the engine's image layer (one per `--root` and id: engines reuse ids
/// across namespaces). The releases are bound there whatever `--root` is: the germline's
/// unprivileged user must traverse every directory above its rootfs, and engines keep
/// `--root` private (containerd's `/run/containerd/runc/NS` is 0700).
pub fn release_dir(root: &Path, id: &str) -> PathBuf {
    // FNV-1a of the root path: stable, and enough to tell a few state roots apart.
    let mut h: u64 = 0xcbf29ce484222325;
    for b in root.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x100000001b3);
    }
    Path::new(paths::RUNTIME_RELEASES).join(format!("{:08x}-{id}", h as u32))
}

pub fn fifo(root: &Path, id: &str) -> PathBuf {
    dir(root, id).join("exec.fifo")
}

/// Marks a container handed to runc.
pub fn handoff_marker(root: &Path, id: &str) -> PathBuf {
    dir(root, id).join("handed-to-runc")
}

/// runc's own state root for containers handed to it.
pub fn runc_root(root: &Path) -> PathBuf {
    root.join(".runc")
}

impl State {
    pub fn load(root: &Path, id: &str) -> Result<State> {
        check_id(id)?;
        let p = dir(root, id).join("state.json");
        let text = std::fs::read_to_string(&p).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::NoSuchContainer(id.to_string())
            } else {
                Error::io(&p)(e)
            }
        })?;
        serde_json::from_str(&text).map_err(|source| Error::Json { path: p, source })
    }

    /// Writes the state atomically.
    pub fn save(&self, root: &Path) -> Result<()> {
        let d = dir(root, &self.id);
        let tmp = d.join(".state.json.tmp");
        let text = serde_json::to_vec_pretty(self).map_err(Error::Encode)?;
        std::fs::write(&tmp, text).map_err(Error::io(&tmp))?;
        std::fs::rename(&tmp, d.join("state.json")).map_err(Error::io(&d))
    }

    /// Whether the container's process is alive (and is the one `create` forked).
    pub fn alive(&self) -> bool {
        self.pid > 0 && procfs::start_time(self.pid) == Some(self.start_time)
    }

    /// runc's status words: `created` (waiting for `start`), `running`, `paused`, `stopped`.
    pub fn status(&self, root: &Path) -> &'static str {
        if !self.alive() {
            "stopped"
        } else if fifo(root, &self.id).exists() {
            "created"
        } else if self.paused {
            "paused"
        } else {
            "running"
        }
    }

    /// The JSON `runc state` prints: the runtime-spec state (oci-spec's `State`: `ociVersion`,
    /// `id`, `status`, `pid`, `bundle`, `annotations`) and runc's `rootfs`, `created` and
    /// `owner`. The runtime-spec has no `paused` status (runc's, which engines read): oci-spec's
    /// type cannot hold it, so it is written over `running` in the JSON. `annotations` is left
    /// out when there are none, as runc does; keys are sorted.
    pub fn to_runc_json(&self, root: &Path) -> Result<Value> {
        use oci_spec::runtime::{ContainerState, StateBuilder};
        let status = self.status(root);
        let oci_status = match status {
            "created" => ContainerState::Created,
            "running" | "paused" => ContainerState::Running,
            _ => ContainerState::Stopped,
        };
        // The runtime-spec's annotations are strings (engines write only strings).
        let annotations: std::collections::HashMap<String, String> = self
            .annotations
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
            .collect();
        let mut b = StateBuilder::default()
            .version(crate::OCI_VERSION)
            .id(self.id.clone())
            .status(oci_status)
            .pid(if status == "stopped" { 0 } else { self.pid })
            .bundle(self.bundle.clone());
        if !annotations.is_empty() {
            b = b.annotations(annotations);
        }
        let state = b.build().map_err(|source| Error::OciSpec {
            what: "state",
            source,
        })?;
        let mut v = serde_json::to_value(&state).map_err(Error::Encode)?;
        if let Some(o) = v.as_object_mut() {
            o.insert("status".into(), status.into());
            o.insert("rootfs".into(), json!(self.rootfs));
            o.insert("created".into(), self.created.clone().into());
            o.insert("owner".into(), "".into());
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_leave_the_root_are_refused() {
        for bad in ["", ".", "..", "a/b", "../x", "a b", "x\0"] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
        check_id("fd9e4e8783490bea21aac970b4d22529811784536f126fbb15354fe1923162b3").expect("ok");
        check_id("my.container_1-a+b").expect("ok");
    }

    #[test]
    fn state_round_trips_and_a_dead_process_is_stopped() {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(d.path().join("c1")).expect("mkdir");
        let s = State {
            id: "c1".into(),
            bundle: "/b".into(),
            rootfs: "/b/rootfs".into(),
            created: "2026-12-03T07:00:00Z".into(),
            pid: i32::MAX,
            start_time: 1,
            key: "/k.pub".into(),
            cgroups: vec![],
            paused: false,
            ignored: vec![],
            annotations: Default::default(),
            network: crate::spec::Network::Path("/var/run/netns/p".into()),
            listen: Some("10.0.0.5:8080".parse().expect("addr")),
        };
        s.save(d.path()).expect("save");
        let l = State::load(d.path(), "c1").expect("load");
        let j = l.to_runc_json(d.path()).expect("state json");
        assert_eq!(j["status"], "stopped");
        assert_eq!(j["pid"], 0);
        assert_eq!(j["id"], "c1");
        assert_eq!(j["ociVersion"], crate::OCI_VERSION);
        assert_eq!(j["rootfs"], "/b/rootfs");
        assert_eq!(j["created"], "2026-12-03T07:00:00Z");
        assert!(
            j.get("annotations").is_none(),
            "none: left out, as runc does"
        );
        assert_eq!(l.network, s.network);
        assert_eq!(l.listen, s.listen);
        let e = State::load(d.path(), "c2").expect_err("missing");
        assert!(
            matches!(&e, Error::NoSuchContainer(id) if id == "c2"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "container \"c2\" does not exist");
    }
}
