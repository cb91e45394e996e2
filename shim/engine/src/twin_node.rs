//! Twin inputs for spawned Node copies (issue 28; docs/evidence.md, "Twin inputs"). A Node
//! release runs its own entry, with no bootstrap to hand the call's `(time_ns, seed)` to, so
//! the shim gives it a preload: [`germline_sandbox::spec::NODE_TWIN_PRELOAD`], written next
//! to the copies' CA bundles, bind-mounted read-only at
//! [`germline_sandbox::spec::NODE_TWIN_PATH`] and loaded by `NODE_OPTIONS=--require` before
//! the entry. The preload takes the twin line the spawned copy gets before its `tools/call`
//! off stdin ([`germline_sandbox::spawn::Spawned::set_twin`]) and derives the copy's clocks
//! and entropy from it.
//!
//! Why a file bound into `/run` and not one in the rootfs: the rootfs is the publisher's and
//! signed (a release packed before this existed has no such file, and a publisher's copy
//! could lag the shim's twin line), while the preload is the shim's, like the Python
//! bootstrap it mirrors.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use germline_sandbox::spec::{NODE_TWIN_PATH, NODE_TWIN_PRELOAD};
use germline_sandbox::{BindMount, Language, LaunchSpec};

use crate::error::StartError;

/// The preload's file name in the runtime's directory of files bound into copies.
const FILE: &str = "germline-twin.cjs";

/// Gives `spec`'s spawned Node copies the twin preload: the file written into `dir` (the
/// runtime's CA directory, removed at stop), its mount, `NODE_OPTIONS`, and the twin line.
/// Nothing for a release of another language (no reader for the line).
pub fn install(spec: &mut LaunchSpec, dir: &Path) -> Result<(), StartError> {
    if spec.language != Language::Node {
        return Ok(());
    }
    let file = dir.join(FILE);
    std::fs::write(&file, NODE_TWIN_PRELOAD)
        .and_then(|()| std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)))
        .map_err(|source| StartError::Permissions {
            path: file.clone(),
            source,
        })?;
    spec.extra_mounts.push(BindMount {
        source: file,
        target: NODE_TWIN_PATH.into(),
    });
    let require = format!("--require {NODE_TWIN_PATH}");
    match spec.env.iter_mut().find(|e| e.starts_with("NODE_OPTIONS=")) {
        Some(e) => {
            e.push(' ');
            e.push_str(&require);
        }
        None => {
            spec.env.push(format!("NODE_OPTIONS={require}"));
            spec.env.sort();
        }
    }
    spec.twin_line = true;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(language: Language, env: &[&str]) -> LaunchSpec {
        let mut s = LaunchSpec::mcp_server_time("/nonexistent".into());
        s.language = language;
        s.env = env.iter().map(|e| e.to_string()).collect();
        s
    }

    #[test]
    fn a_node_release_gets_the_preload_its_mount_and_the_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = spec(Language::Node, &["HOME=/tmp", "PATH=/usr/bin"]);
        install(&mut s, dir.path()).expect("install");
        let file = dir.path().join(FILE);
        assert_eq!(
            std::fs::read_to_string(&file).expect("written"),
            NODE_TWIN_PRELOAD
        );
        let mode = std::fs::metadata(&file).expect("meta").permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o644,
            "readable by the copy's unprivileged user"
        );
        assert_eq!(
            s.extra_mounts,
            vec![BindMount {
                source: file,
                target: NODE_TWIN_PATH.into()
            }]
        );
        assert_eq!(
            s.env,
            vec![
                "HOME=/tmp".to_string(),
                format!("NODE_OPTIONS=--require {NODE_TWIN_PATH}"),
                "PATH=/usr/bin".to_string()
            ]
        );
        assert!(s.twin_line);
    }

    #[test]
    fn existing_node_options_are_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut s = spec(Language::Node, &["NODE_OPTIONS=--max-old-space-size=64"]);
        install(&mut s, dir.path()).expect("install");
        assert_eq!(
            s.env,
            vec![format!(
                "NODE_OPTIONS=--max-old-space-size=64 --require {NODE_TWIN_PATH}"
            )]
        );
    }

    #[test]
    fn other_languages_get_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        for l in [Language::Python, Language::Native] {
            let mut s = spec(l, &["HOME=/tmp"]);
            let before = s.clone();
            install(&mut s, dir.path()).expect("install");
            assert_eq!(s, before);
        }
        assert!(!dir.path().join(FILE).exists());
    }
}
