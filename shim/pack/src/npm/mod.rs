//! `germline release pack --from npm:NAME[@VERSION]` (issue 28): one command from an npm
//! package to a signed release whose copies are spawned (Node cannot fork: docs/sandbox.md,
//! "Spawned copies").
//!
//! The steps, shown as the PyPI path shows them ([`crate::progress`]):
//! 1. [`install`]: npm installs the package (production dependencies, no install scripts)
//!    into the rootfs's `/app`, its `package-lock.json` kept there and in the cache;
//! 2. [`runtime`]: the host's `node` and its shared libraries beside it;
//!    then the publisher's `--rootfs-hook` and `--germline-owned` checks, as for PyPI
//!    ([`crate::publisher`]);
//! 3. [`probe`]: the server spawned once as a copy (the real sandbox, no network, no data)
//!    to list its tools;
//! 4. the manifest: the PyPI draft's rules (destinations only from `--destination`, never
//!    guessed) with language `node`, execution `spawn` and the package's `bin` as entry;
//! 5. `germline_release::release::pack_with`: rootfs digest, OCI bundle and image, signature.

pub mod install;
pub mod probe;
pub mod runtime;
pub mod spec;

use std::path::{Path, PathBuf};

use serde_json::json;

pub use spec::NpmSpec;

use crate::{Error, FromArgs, PackFrom, Packed, Result};

/// The rootfs paths a Node release reads: the runtime and its libraries, the package, CAs.
const READABLE: [&str; 3] = ["/usr", install::APP, "/etc/ssl"];

/// What a pack from npm asks for.
#[derive(Debug)]
pub struct NpmPack {
    pub spec: NpmSpec,
    /// The host's Node, copied into the rootfs.
    pub node: PathBuf,
    /// The npm that installs (the host's, from `PATH`).
    pub npm: PathBuf,
    /// `--npm-tarball`: the package from this file, not the registry.
    pub tarball: Option<PathBuf>,
    /// The flags a pack from PyPI takes too (`with`, `destinations`, `entry`, `include`,
    /// `cache`, `manifest_out`, `key`, `out`, `image`, `limits`, `progress`), parsed by the
    /// PyPI path's own code; its `spec` and `python` are not read.
    pub flags: PackFrom,
}

impl NpmPack {
    /// From the command line's flags (the same as `--from pypi:`'s, with `--node`).
    pub fn from_args(
        a: &FromArgs,
        manifest_out: Option<&Path>,
        key: Option<germline_release::keys::SigningKey>,
        out: &Path,
        image: Option<&Path>,
        limits: germline_release::untrusted::Limits,
    ) -> Result<NpmPack> {
        let spec = NpmSpec::parse(a.from.as_deref().unwrap_or_default())?;
        let flags = PackFrom::from_args(
            &FromArgs {
                // A stand-in the PyPI parser accepts: only the other flags are read.
                from: Some("pypi:npm".into()),
                ..a.clone()
            },
            manifest_out,
            key,
            out,
            image,
            limits,
        )?;
        Ok(NpmPack {
            spec,
            node: a.node.clone(),
            npm: PathBuf::from("npm"),
            tarball: a.npm_tarball.clone(),
            flags,
        })
    }
}

/// Packs `p.spec` from npm (see the module's documentation).
pub fn pack_from(p: &NpmPack) -> Result<Packed> {
    let f = &p.flags;
    if let Some(c) = f.probe_calls.first() {
        // The memory probe forks copies of a germline; npm releases run spawned (issue 28).
        return Err(crate::Error::ProbeCall(format!(
            "{}: not built for npm: releases (spawned copies)",
            c.tool
        )));
    }
    if !f.state.is_empty() {
        // State in files reaches forked copies only (docs/policy.md, "State in files"); a
        // spawned release with state is refused at start, so it is refused here first.
        return Err(Error::Entry(format!(
            "npm:{}: --state is not supported for Node servers yet (they run as spawned copies, \
             and state in files is built for forked copies only): pack without --state",
            p.spec.name
        )));
    }
    crate::publisher::check_can_chown(&f.germline_owned)?;
    let mut bar = crate::progress::Steps::new(crate::step_count(f, 5), f.progress);
    let parent = f
        .out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let work = tempfile::Builder::new()
        .prefix(".germline-pack-")
        .tempdir_in(parent)
        .map_err(|e| Error::io(parent.display(), e))?;
    let root = work.path().join("rootfs");

    bar.step(&format!("npm: {}", p.spec.requirement()));
    let installed = install::install(p, &root)?;

    bar.step("rootfs: Node runtime, shared libraries");
    runtime::node_runtime(&p.node, &root)?;
    crate::rootfs::include(&root, &f.include)?;
    crate::publisher_steps(f, &root, &mut bar)?;

    bar.step("probe: listing the tools in a spawned copy");
    let pkg = &installed.package;
    let entry = pkg.entry(install::APP, f.entry.as_deref())?;
    if !root.join(entry[0].trim_start_matches('/')).is_file() {
        return Err(Error::Entry(format!(
            "{} {}: its entry {} is not a file of the package: give --entry",
            pkg.name, pkg.version, entry[0]
        )));
    }
    let readable: Vec<String> = READABLE.iter().map(|s| s.to_string()).collect();
    let name = p.spec.release_name();
    let tools = probe::list_tools(probe::launch_spec(&root, &entry, &readable), &name)?;

    bar.step("manifest: drafting for review");
    semver::Version::parse(&pkg.version).map_err(|e| {
        Error::Version(format!(
            "{} {}: not a semantic version ({e}): pack with --manifest after editing the draft",
            pkg.name, pkg.version
        ))
    })?;
    // The PyPI draft (tools, destinations only from flags, deterministic: false), with what
    // differs for Node.
    let draft = crate::draft::Draft {
        name,
        version: pkg.version.clone(),
        entry: vec![],
        readable_paths: readable,
        state: Vec::new(),
    };
    let mut manifest = draft.manifest(&tools, &f.destinations)?;
    let mut full_entry = vec![runtime::NODE.to_string()];
    full_entry.extend(entry);
    manifest["entry"] = json!(full_entry);
    manifest["language"] = json!("node");
    manifest["execution"] = json!("spawn");
    // No imports (a Python notion); every copy makes the MCP handshake before it waits.
    manifest["initialisation"] = json!({"imports": [], "warm": true});
    let release = crate::write_and_pack(f, &manifest, root, &mut bar)?;
    let steps = bar.finish();
    Ok(Packed {
        release,
        manifest_path: f.manifest_out.clone(),
        tools: tools.into_iter().map(|t| t.name).collect(),
        distributions: installed.packages,
        steps,
        // --probe-call is refused for npm: before anything runs (see pack_from).
        memory: Vec::new(),
    })
}
