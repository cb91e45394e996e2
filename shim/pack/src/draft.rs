//! The manifest drafted for the publisher's review: what pack knows (name, version, entry,
//! the tools the server listed, the runtime's paths) and nothing it would have to guess. Every
//! tool's destinations are the `--destination TOOL=HOST` flags the publisher gave for it, else
//! none: an empty list means no network, so a tool that needs a host fails visibly in review
//! or at its first call instead of being granted one by a guess (docs/release.md).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::probe::Listed;
use crate::source::{semver_of, Installed};
use crate::{Error, Result};

/// The interpreter's path inside the rootfs ([`crate::rootfs`] links it).
pub const INTERPRETER: &str = "/usr/bin/python3";

/// A release being drafted.
#[derive(Debug, Clone)]
pub struct Draft {
    pub name: String,
    /// The release's semantic version (`source::semver_of` the package's).
    pub version: String,
    /// After the interpreter: `module:function` or `-m module`.
    pub entry: Vec<String>,
    /// What the germline may read: the runtime's directories.
    pub readable_paths: Vec<String>,
    /// State paths the publisher declared (`--state`).
    pub state: Vec<germline_release::manifest::StatePath>,
}

impl Draft {
    pub fn new(installed: &Installed, entry: Vec<String>, python_version: &str) -> Result<Draft> {
        Ok(Draft {
            name: installed.name.clone(),
            version: semver_of(&installed.version)?,
            entry,
            readable_paths: vec![
                "/usr".into(),
                "/etc/ssl".into(),
                format!("/etc/{python_version}"),
                "/usr/share/zoneinfo".into(),
            ],
            state: Vec::new(),
        })
    }

    /// The module the entry imports (the manifest's `initialisation.imports`).
    pub fn module(&self) -> String {
        match self.entry.as_slice() {
            [m, module, ..] if m == "-m" => module.clone(),
            [target, ..] => target.split(':').next().unwrap_or_default().to_string(),
            [] => String::new(),
        }
    }

    /// The manifest, with `tools` (each `read_only` where the server said so) and the
    /// publisher's `destinations` (TOOL, HOST).
    pub fn manifest(&self, tools: &[Listed], destinations: &[(String, String)]) -> Result<Value> {
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let mut hosts: BTreeMap<&str, Vec<&str>> = names.iter().map(|t| (*t, Vec::new())).collect();
        for (tool, host) in destinations {
            let list = hosts
                .get_mut(tool.as_str())
                .ok_or_else(|| Error::UnknownTool {
                    tool: tool.clone(),
                    host: host.clone(),
                    tools: names.join(", "),
                })?;
            if !list.contains(&host.as_str()) {
                list.push(host);
            }
        }
        let tools: serde_json::Map<String, Value> = hosts
            .into_iter()
            .map(|(t, h)| {
                let mut tool = json!({"destinations": {"hosts": h}});
                // The server's own annotation, for the publisher to review like the rest.
                if tools.iter().any(|l| l.name == t && l.read_only) {
                    tool["read_only"] = json!(true);
                }
                (t.to_string(), tool)
            })
            .collect();
        let mut entry = vec![INTERPRETER.to_string()];
        entry.extend(self.entry.iter().cloned());
        let mut m = json!({
            "schema": "germline.release.manifest/v1",
            "name": self.name,
            "version": self.version,
            "language": "python",
            "entry": entry,
            // The warm step (initialize and tools/list on public data) runs once in the
            // germline, so copies start past the SDK's first-call work.
            "initialisation": {"imports": [self.module()], "warm": true},
            "tools": tools,
            "readable_paths": self.readable_paths,
            "scratch_mb": 0,
            // Whether the server is deterministic under twin inputs is the publisher's claim
            // to make (docs/evidence.md): not guessed either.
            "deterministic": false,
        });
        if !self.state.is_empty() {
            m["state"] = serde_json::to_value(&self.state)
                .map_err(|e| Error::Entry(format!("state: {e}")))?;
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft() -> Draft {
        let installed = Installed {
            name: "mcp-server-git".into(),
            version: "2026.10.19".into(),
            scripts: vec![],
            distributions: vec![],
        };
        Draft::new(&installed, vec!["mcp_server_git:main".into()], "python3.11").expect("draft")
    }

    #[test]
    fn destinations_only_from_flags() {
        let d = draft();
        assert_eq!(d.module(), "mcp_server_git");
        let tools = [("git_status", true), ("git_log", false)].map(|(n, r)| Listed {
            name: n.into(),
            read_only: r,
        });
        let m = d
            .manifest(&tools, &[("git_log".into(), "example.org".into())])
            .expect("manifest");
        assert_eq!(m["tools"]["git_status"]["destinations"]["hosts"], json!([]));
        // The server's readOnlyHint, and nothing where it gave none.
        assert_eq!(m["tools"]["git_status"]["read_only"], json!(true));
        assert_eq!(m["tools"]["git_log"].get("read_only"), None);
        assert_eq!(
            m["tools"]["git_log"]["destinations"]["hosts"],
            json!(["example.org"])
        );
        assert_eq!(
            m["entry"],
            json!(["/usr/bin/python3", "mcp_server_git:main"])
        );
        // The draft is a manifest the release crate accepts as it is.
        germline_release::manifest::Manifest::parse(m.to_string().as_bytes(), "draft")
            .expect("a valid manifest");
        let mut s = d.clone();
        s.entry
            .extend(["--db-path".into(), "/run/state/db.sqlite".into()]);
        s.state = vec![
            crate::state_path("--db-path=db.sqlite").expect("flag"),
            crate::state_path("cache/").expect("dir"),
        ];
        let m = s.manifest(&tools, &[]).expect("manifest");
        assert_eq!(
            m["state"],
            json!([
                {"path": "/run/state/db.sqlite", "kind": "file", "arg": "--db-path"},
                {"path": "/run/state/cache", "kind": "dir"}
            ])
        );
        germline_release::manifest::Manifest::parse(m.to_string().as_bytes(), "draft")
            .expect("a valid manifest with state");
        for bad in ["", "a/b", "x=db", "--f=", ".hidden", "../x"] {
            assert!(crate::state_path(bad).is_err(), "{bad}");
        }
        let e = d
            .manifest(&tools, &[("git_push".into(), "example.org".into())])
            .expect_err("no such tool");
        assert!(e.to_string().contains("git_push"), "{e}");
    }
}
