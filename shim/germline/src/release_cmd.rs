//! The `germline keygen` and `germline release ...` subcommands: argument structs, handlers and
//! what they print, over the `germline-release` library (which has no CLI of its own).

use clap::{Args, Subcommand, ValueEnum as _};
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use germline_release::error::{Error, Result};
use germline_release::keys::{self, Algorithm, PublicKey};
use germline_release::manifest::{Manifest, MANIFEST_PATH};
use germline_release::release::{self, Source};
use germline_release::untrusted::LimitArgs;
use germline_release::{bundle, digest, tuf};

use crate::output::{self, emit, print_json};
use crate::progress::{self, Progress};

/// `germline keygen`: a cosign-compatible key pair. The private key's password, as cosign
/// takes it: `COSIGN_PASSWORD` if it is set (even empty); else, on a terminal, asked twice
/// without echo; else empty. An empty password is warned of.
#[derive(Debug, Args)]
#[command(
    after_help = "Password: COSIGN_PASSWORD if set (even empty); else asked twice on a \
terminal; else empty. An empty password leaves the private key unprotected and is warned of."
)]
pub struct KeygenArgs {
    /// Directory to write `<prefix>.key` and `<prefix>.pub` into (made if missing).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// File name prefix, as cosign's `--output-key-prefix`.
    #[arg(long, default_value = "cosign")]
    pub output_key_prefix: String,
    #[arg(long, value_enum, default_value = "ecdsa-p256")]
    pub algorithm: Algorithm,
    /// Print the result as JSON (and a failure as a JSON object on stderr).
    #[arg(long)]
    pub json: bool,
}

/// `germline release ...`
#[derive(Debug, Subcommand)]
pub enum ReleaseCmd {
    /// Build an OCI bundle (config.json + rootfs/) and optionally an OCI image layout.
    Pack(Box<PackArgs>),
    /// Sign a blob (like `cosign sign-blob --bundle`), or re-sign an unpacked bundle's manifest.
    Sign(SignArgs),
    /// Create a TUF repository (root, targets, snapshot, timestamp) with one key.
    TufInit(TufInitArgs),
    /// Verify a release and add it as a target of a TUF repository.
    Publish(PublishArgs),
    /// Verify a release (image layout or unpacked bundle) before anything of it is used.
    Verify(VerifyArgs),
    /// Show name, version, digest, publisher key, tools and their destinations, determinism,
    /// signature status.
    Inspect(InspectArgs),
    /// Time the verification of a generated rootfs (a benchmark, prints and writes JSON).
    BenchVerify(BenchArgs),
}

#[derive(Debug, Args)]
pub struct PackArgs {
    /// The release manifest (its `rootfs` pin is filled in); with --from, where the draft
    /// manifest is written (default `<out>.manifest.json`).
    #[arg(long, required_unless_present = "from")]
    pub manifest: Option<PathBuf>,
    /// The rootfs directory.
    #[arg(
        long,
        conflicts_with_all = ["from_image", "from"],
        required_unless_present_any = ["from_image", "from"]
    )]
    pub rootfs: Option<PathBuf>,
    /// `--from pypi:NAME[==VERSION]` or `--from npm:NAME[@VERSION]` and their flags
    /// (docs/release.md, "Packing from PyPI", "Packing from npm").
    #[command(flatten)]
    pub pypi: germline_pack::FromArgs,
    /// An OCI image layout to take the rootfs from (layers flattened).
    #[arg(long, conflicts_with = "from")]
    pub from_image: Option<PathBuf>,
    /// The cosign private key (password in COSIGN_PASSWORD); without it the manifest is unsigned.
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// Output OCI bundle directory (must not exist).
    #[arg(long)]
    pub out: PathBuf,
    /// Also write an OCI image layout here (must not exist).
    #[arg(long)]
    pub image: Option<PathBuf>,
    /// Print the result as JSON (and a failure as a JSON object on stderr).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub limits: LimitArgs,
}

#[derive(Debug, Args)]
pub struct SignArgs {
    /// The cosign private key (password in COSIGN_PASSWORD).
    #[arg(long)]
    pub key: PathBuf,
    /// Re-sign the manifest of this unpacked bundle in place.
    #[arg(long, conflicts_with = "blob", required_unless_present = "blob")]
    pub release: Option<PathBuf>,
    /// A file to sign.
    pub blob: Option<PathBuf>,
    /// Where to write the sigstore bundle (default: `<blob>.sigstore.json`).
    #[arg(long)]
    pub bundle: Option<PathBuf>,
    /// Print the result as JSON (and a failure as a JSON object on stderr).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TufInitArgs {
    #[arg(long)]
    pub repo: PathBuf,
    /// PKCS#8 DER key for all four roles (Ed25519, generated if the file does not exist).
    #[arg(long)]
    pub key: PathBuf,
    #[arg(long, default_value_t = 365)]
    pub expires_days: i64,
    /// Print the result as JSON (and a failure as a JSON object on stderr).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PublishArgs {
    #[arg(long)]
    pub repo: PathBuf,
    /// The TUF key that signs targets, snapshot and timestamp.
    #[arg(long)]
    pub tuf_key: PathBuf,
    /// The publisher's cosign public key: a release is verified before it is published.
    #[arg(long)]
    pub key: PathBuf,
    /// Release to publish (image layout or unpacked bundle).
    pub release: PathBuf,
    #[arg(long, default_value_t = 365)]
    pub expires_days: i64,
    /// Expiry of timestamp.json, RFC 3339 (default: 7 days from now).
    #[arg(long)]
    pub timestamp_expires: Option<String>,
    /// Print the result as JSON (and a failure as a JSON object on stderr).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub limits: LimitArgs,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The publisher's pinned cosign public key (`PUBLIC KEY` PEM).
    #[arg(long)]
    pub key: PathBuf,
    /// Image layout or unpacked bundle.
    pub release: PathBuf,
    /// Extract a verified image layout here as an OCI bundle (atomically; must not exist).
    #[arg(long)]
    pub extract_to: Option<PathBuf>,
    /// Also check the release against this TUF repository...
    #[arg(long, requires = "tuf_root")]
    pub tuf_repo: Option<PathBuf>,
    /// ...loaded from this pinned root.json.
    #[arg(long, requires = "tuf_repo")]
    pub tuf_root: Option<PathBuf>,
    /// Where rollback state lives (TUF datastore, highest versions seen).
    #[arg(long, default_value = germline_sys::paths::RELEASE_STATE)]
    pub state: PathBuf,
    /// Print the result as JSON (and a failure as a JSON object on stderr).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub limits: LimitArgs,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Image layout or unpacked bundle.
    pub release: PathBuf,
    /// Pinned public key; without it the signature is reported as not checked.
    #[arg(long)]
    pub key: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub limits: LimitArgs,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[arg(long, default_value_t = 100)]
    pub size_mb: u64,
    /// Also time verifying the packed image layout (gunzip + tar + digest).
    #[arg(long)]
    pub image: bool,
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Where to write the JSON result (as `--json` prints it).
    #[arg(long, default_value = "bench-verify.json")]
    pub output: PathBuf,
    /// Print the result as JSON (and a failure as a JSON object on stderr).
    #[arg(long)]
    pub json: bool,
}

/// Exit 0, or 1 with the error on stderr: `germline: WHAT: message`, or under `--json` the
/// JSON error object of `command` with the file (and field) it is about (output.rs).
/// `subject`: the file the command is about (its release), named when the error itself names
/// none.
fn finish(
    r: Result<()>,
    command: &str,
    what: &str,
    json: bool,
    subject: Option<&std::path::Path>,
) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Printable whatever an image put into the message (error::printable).
            let message = germline_release::error::printable(&e.to_string());
            if json {
                let mut place = output::release_place(&e);
                if let (false, Some(p)) = (place.contains_key("file"), subject) {
                    place.insert("file".into(), json!(p.to_string_lossy()));
                }
                output::print_error(command, &message, place);
            } else {
                eprintln!("germline: {what}: {message}");
            }
            ExitCode::FAILURE
        }
    }
}

/// `germline keygen`.
/// The private key's password for `keygen` (see [`KeygenArgs`]).
fn keygen_password() -> Result<Vec<u8>> {
    use std::io::IsTerminal as _;
    let password = if std::env::var_os("COSIGN_PASSWORD").is_some() {
        keys::password_from_env()
    } else if std::io::stdin().is_terminal() {
        let ask =
            |prompt: &str| rpassword::prompt_password(prompt).map_err(|e| Error::io("/dev/tty", e));
        let first = ask("Enter password for private key: ")?;
        if first != ask("Enter password for private key again: ")? {
            return Err(Error::Usage(
                "the two passwords differ; no key was written".into(),
            ));
        }
        first.into_bytes()
    } else {
        Vec::new()
    };
    if password.is_empty() {
        eprintln!(
            "germline: keygen: warning: the private key's password is empty: anyone who can \
             read the file can sign with it (set COSIGN_PASSWORD, or run keygen on a terminal \
             to be asked)"
        );
    }
    Ok(password)
}

pub fn run_keygen(a: &KeygenArgs, quiet: bool) -> ExitCode {
    finish(
        (|| {
            let password = keygen_password()?;
            std::fs::create_dir_all(&a.dir).map_err(|e| Error::io(&a.dir, e))?;
            let public = {
                // scrypt with cosign's parameters takes a moment.
                let _p = Progress::spinner(
                    progress::wanted(quiet, a.json),
                    "generating and encrypting the key",
                );
                keys::keygen(&a.dir, &a.output_key_prefix, a.algorithm, &password)?
            };
            let private = a.dir.join(format!("{}.key", a.output_key_prefix));
            let public_file = a.dir.join(format!("{}.pub", a.output_key_prefix));
            let fingerprint = public.fingerprint()?;
            let v = json!({
                "private_key": private, "public_key": public_file,
                "fingerprint": fingerprint, "algorithm": a.algorithm.to_possible_value().map(|p| p.get_name().to_string()),
                "password_empty": password.is_empty(),
            });
            emit(a.json, &v, || {
                format!(
                    "Private key written to {}\nPublic key written to {}\nfingerprint {fingerprint}",
                    private.display(),
                    public_file.display(),
                )
            });
            Ok(())
        })(),
        "keygen",
        "keygen",
        a.json,
        Some(&a.dir),
    )
}

/// `germline release ...`.
/// `quiet`: the global `--quiet` (no progress on the terminal).
pub fn run_release(cmd: &ReleaseCmd, quiet: bool) -> ExitCode {
    match cmd {
        ReleaseCmd::Pack(a) => finish(
            pack(a, quiet),
            "release pack",
            "release pack",
            a.json,
            // With --from, --manifest is where the draft is written, not what a failure is about.
            a.manifest.as_deref().filter(|_| a.pypi.from.is_none()),
        ),
        ReleaseCmd::Sign(a) => finish(sign(a), "release sign", "release sign", a.json, None),
        ReleaseCmd::TufInit(a) => finish(
            tuf_init(a),
            "release tuf-init",
            "release tuf-init",
            a.json,
            Some(&a.repo),
        ),
        ReleaseCmd::Publish(a) => finish(
            publish(a, quiet),
            "release publish",
            "release publish refused",
            a.json,
            Some(&a.release),
        ),
        ReleaseCmd::Verify(a) => finish(
            verify(a, quiet),
            "release verify",
            "release refused",
            a.json,
            Some(&a.release),
        ),
        ReleaseCmd::Inspect(a) => finish(
            inspect(a, quiet),
            "release inspect",
            "release inspect",
            a.json,
            Some(&a.release),
        ),
        ReleaseCmd::BenchVerify(a) => finish(
            bench(a, quiet),
            "release bench-verify",
            "release bench-verify",
            a.json,
            None,
        ),
    }
}

fn days(n: i64) -> Result<jiff::Timestamp> {
    jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_hours(24 * n))
        .map_err(|e| Error::Usage(format!("expiry: {e}")))
}

fn pack(a: &PackArgs, quiet: bool) -> Result<()> {
    if a.pypi.from.is_some() {
        return pack_from(a, quiet);
    }
    let manifest = a
        .manifest
        .as_deref()
        .ok_or_else(|| Error::Usage("--manifest is required".into()))?;
    let source = match (&a.rootfs, &a.from_image) {
        (Some(r), None) => Source::RootfsDir(r.clone()),
        (None, Some(i)) => Source::ImageLayout(i.clone()),
        _ => {
            return Err(Error::Usage(
                "give exactly one of --rootfs and --from-image".into(),
            ))
        }
    };
    let key = a.key.as_deref().map(keys::load_signing_key).transpose()?;
    // `--germline-owned` (germline_pack::publisher): refused before any work when not root.
    let owned = germline_pack::publisher::owned_paths(&a.pypi.germline_owned)
        .and_then(|o| germline_pack::publisher::check_can_chown(&o).map(|()| o))
        .map_err(|e| Error::Usage(e.to_string()))?;
    let t0 = Instant::now();
    let p = {
        // The rootfs digest, the bundle's copy and the image's gzip take seconds.
        let _p = Progress::spinner(
            progress::wanted(quiet, a.json),
            format!(
                "packing {} (rootfs digest, bundle{}{})",
                manifest.display(),
                if a.image.is_some() { ", image" } else { "" },
                if key.is_some() { ", signature" } else { "" },
            ),
        );
        release::pack_with(
            manifest,
            &source,
            key.as_ref(),
            &a.out,
            a.image.as_deref(),
            &a.limits.limits(),
        )?
    };
    if !owned.is_empty() {
        let _p = Progress::spinner(
            progress::wanted(quiet, a.json),
            format!(
                "owned: {} to the germline's root",
                germline_pack::publisher::describe(&owned)
            ),
        );
        germline_pack::own_or_remove(&a.out, a.image.as_deref(), &owned)
            .map_err(|e| Error::Usage(e.to_string()))?;
    }
    let v = json!({
        "name": p.manifest.name, "version": p.manifest.version, "rootfs_digest": p.rootfs_digest,
        "signed": p.signed, "bundle": a.out, "image": a.image,
        "image_manifest": p.image_manifest.as_ref().map(|d| d.digest.clone()),
        "germline_owned": a.pypi.germline_owned,
    });
    emit(a.json, &v, || {
        let mut t = packed_text(&p, a, t0.elapsed().as_secs_f64());
        if !p.signed {
            t.push_str("  unsigned (no --key): sign it with `germline release sign --release`\n");
        }
        t
    });
    Ok(())
}

/// The text for a person of a pack: what was made, where, and its digest.
fn packed_text(p: &release::Packed, a: &PackArgs, seconds: f64) -> String {
    let mut t = format!(
        "packed {} {} in {seconds:.1} s{}\n  rootfs digest: {}\n  bundle:        {}\n",
        p.manifest.name,
        p.manifest.version,
        if p.signed { ", signed" } else { "" },
        p.rootfs_digest,
        a.out.display(),
    );
    if let (Some(i), Some(d)) = (&a.image, &p.image_manifest) {
        t.push_str(&format!(
            "  image:         {} (manifest {})\n",
            i.display(),
            d.digest
        ));
    }
    t
}

/// `pack --from pypi:...` or `--from npm:...`: the germline-pack crate does the work; this
/// prints its result.
fn pack_from(a: &PackArgs, quiet: bool) -> Result<()> {
    let key = a.key.as_deref().map(keys::load_signing_key).transpose()?;
    let t0 = Instant::now();
    // `npm:` (issue 28) or `pypi:` (issue 27): the same flags, result and manners.
    let npm = a
        .pypi
        .from
        .as_deref()
        .is_some_and(|f| f.starts_with("npm:"));
    let (manifest, image, limits) = (a.manifest.as_deref(), a.image.as_deref(), a.limits.limits());
    let progress = progress::wanted(quiet, a.json);
    let p = if npm {
        germline_pack::npm::NpmPack::from_args(&a.pypi, manifest, key, &a.out, image, limits)
            .and_then(|mut n| {
                n.flags.progress = progress;
                germline_pack::npm::pack_from(&n)
            })
    } else {
        germline_pack::PackFrom::from_args(&a.pypi, manifest, key, &a.out, image, limits).and_then(
            |mut f| {
                f.progress = progress;
                germline_pack::pack_from(&f)
            },
        )
    }
    .map_err(|e| Error::Usage(e.to_string()))?;
    // How each ecosystem spells a pinned package.
    let pin = if npm { "@" } else { "==" };
    let r = &p.release;
    const REVIEW: &str = "destinations are only those given by --destination: review the \
                          manifest, then re-pack with --manifest if you edit it";
    let v = json!({
        "name": r.manifest.name, "version": r.manifest.version, "rootfs_digest": r.rootfs_digest,
        "signed": r.signed, "bundle": a.out, "image": a.image,
        "image_manifest": r.image_manifest.as_ref().map(|d| d.digest.clone()),
        "manifest": p.manifest_path, "tools": p.tools,
        "distributions": p.distributions.iter().map(|(n, v)| format!("{n}{pin}{v}")).collect::<Vec<_>>(),
        "seconds": p.steps.iter().map(|(s, t)| (s.to_string(), json!((t * 10.0).round() / 10.0))).collect::<serde_json::Map<_, _>>(),
        "review": REVIEW,
        "probe_calls": p.memory.iter().map(germline_pack::memory::Finding::to_json).collect::<Vec<_>>(),
        "rootfs_hook": a.pypi.rootfs_hook, "germline_owned": a.pypi.germline_owned,
    });
    // State kept in memory is lost under germline: said on stderr whatever the output format.
    for w in p
        .memory
        .iter()
        .filter_map(germline_pack::memory::Finding::warning)
    {
        eprintln!("germline release pack: warning: {w}");
    }
    emit(a.json, &v, || {
        let mut t = packed_text(r, a, t0.elapsed().as_secs_f64());
        t.push_str(&format!(
            "  manifest:      {} (a draft)\n  tools:         {}\n  installed:     {}\n",
            p.manifest_path.display(),
            p.tools.join(", "),
            p.distributions
                .iter()
                .map(|(n, v)| format!("{n}{pin}{v}"))
                .collect::<Vec<_>>()
                .join(" "),
        ));
        if let Some(h) = &a.pypi.rootfs_hook {
            t.push_str(&format!(
                "  rootfs hook:   {} (signed with the rootfs)\n",
                h.display()
            ));
        }
        if !a.pypi.germline_owned.is_empty() {
            t.push_str(&format!(
                "  germline-owned: {} (not signed: docs/release.md)\n",
                a.pypi.germline_owned.join(", ")
            ));
        }
        t.push_str(&format!("Note: {REVIEW}."));
        t
    });
    Ok(())
}

fn sign(a: &SignArgs) -> Result<()> {
    let key = keys::load_signing_key(&a.key)?;
    if let Some(dir) = &a.release {
        release::sign_bundle_dir(dir, &key)?;
        let signed = dir.join("rootfs").join(MANIFEST_PATH);
        emit(a.json, &json!({"signed": signed}), || {
            format!("signed {}", signed.display())
        });
        return Ok(());
    }
    let blob = a
        .blob
        .as_ref()
        .ok_or_else(|| Error::Usage("nothing to sign".into()))?;
    let bytes = std::fs::read(blob).map_err(|e| Error::io(blob, e))?;
    let out = a
        .bundle
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.sigstore.json", blob.display())));
    std::fs::write(&out, bundle::sign(&key, &bytes)?).map_err(|e| Error::io(&out, e))?;
    emit(a.json, &json!({"signed": blob, "bundle": out}), || {
        format!("Wrote bundle to file {}", out.display())
    });
    Ok(())
}

fn tuf_init(a: &TufInitArgs) -> Result<()> {
    tuf::init(&a.repo, &a.key, days(a.expires_days)?)?;
    let root = a.repo.join("metadata/1.root.json");
    emit(a.json, &json!({"repo": a.repo, "root": root}), || {
        format!(
            "initialised TUF repository {} (pin {} on the nodes)",
            a.repo.display(),
            root.display()
        )
    });
    Ok(())
}

fn publish(a: &PublishArgs, quiet: bool) -> Result<()> {
    let key = keys::load_public_key(&a.key)?;
    let v = {
        let _p = Progress::spinner(
            progress::wanted(quiet, a.json),
            format!("verifying {}", a.release.display()),
        );
        release::verify_path_with(&a.release, &key, None, &a.limits.limits())?
    };
    let ts = match &a.timestamp_expires {
        Some(s) => s
            .parse::<jiff::Timestamp>()
            .map_err(|e| Error::Usage(format!("--timestamp-expires {s:?}: {e}")))?,
        None => days(7)?,
    };
    let name = tuf::publish(
        &a.repo,
        &a.tuf_key,
        &v.manifest_bytes,
        &v.manifest,
        days(a.expires_days)?,
        ts,
    )?;
    let out = json!({"published": name, "repo": a.repo, "rootfs_digest": v.rootfs_digest});
    emit(a.json, &out, || {
        format!(
            "published {name} to {} (rootfs {})",
            a.repo.display(),
            v.rootfs_digest
        )
    });
    Ok(())
}

fn verify(a: &VerifyArgs, quiet: bool) -> Result<()> {
    let key = keys::load_public_key(&a.key)?;
    let t0 = Instant::now();
    let p = Progress::spinner(
        progress::wanted(quiet, a.json),
        format!(
            "verifying {} (signature, every layer and file digest)",
            a.release.display()
        ),
    );
    let v = release::verify_path_with(
        &a.release,
        &key,
        a.extract_to.as_deref(),
        &a.limits.limits(),
    )?;
    if a.tuf_repo.is_some() {
        p.message("checking the TUF repository");
    }
    let tuf = match (&a.tuf_repo, &a.tuf_root) {
        (Some(repo), Some(root)) => {
            let c = tuf::check_release(repo, root, &a.state, &v.manifest_bytes, &v.manifest)?;
            json!({"target": c.target, "targets_version": c.targets_version, "timestamp_version": c.timestamp_version,
                   "highest_seen_before": c.highest_seen_before})
        }
        _ => serde_json::Value::Null,
    };
    drop(p);
    let out = json!({
        "verified": true, "name": v.manifest.name, "version": v.manifest.version,
        "rootfs_digest": v.rootfs_digest, "publisher_key": v.signature.fingerprint,
        "bundle_media_type": v.signature.media_type, "extracted_to": a.extract_to, "tuf": tuf,
        "seconds": t0.elapsed().as_secs_f64(),
    });
    emit(a.json, &out, || {
        let mut t = format!(
            "verified {} {} in {:.2} s\n  rootfs digest: {}\n  publisher key: {}\n",
            v.manifest.name,
            v.manifest.version,
            t0.elapsed().as_secs_f64(),
            v.rootfs_digest,
            v.signature.fingerprint
        );
        if let Some(x) = &a.extract_to {
            t.push_str(&format!("  extracted to:  {}\n", x.display()));
        }
        if !tuf.is_null() {
            t.push_str(&format!(
                "  TUF target:    {} (targets v{}, timestamp v{})\n",
                tuf["target"].as_str().unwrap_or_default(),
                tuf["targets_version"],
                tuf["timestamp_version"]
            ));
        }
        t
    });
    Ok(())
}

fn tools_json(m: &Manifest) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    for (name, t) in &m.tools {
        let d = match (&t.destinations.hosts, &t.destinations.host_of_argument) {
            (Some(h), _) => json!({"hosts": h}),
            (None, Some(arg)) => json!({"host_of_argument": arg}),
            _ => serde_json::Value::Null,
        };
        out.insert(name.clone(), d);
    }
    serde_json::Value::Object(out)
}

fn inspect(a: &InspectArgs, quiet: bool) -> Result<()> {
    let limits = a.limits.limits();
    let p = Progress::spinner(
        progress::wanted(quiet, a.json),
        format!("reading {}", a.release.display()),
    );
    let (manifest, status, fingerprint, digest_ok) = match &a.key {
        Some(k) => {
            let key: PublicKey = keys::load_public_key(k)?;
            match release::verify_path_with(&a.release, &key, None, &limits) {
                Ok(v) => (
                    v.manifest,
                    "verified".to_string(),
                    Some(v.signature.fingerprint),
                    Some(true),
                ),
                Err(e) => {
                    let (m, _, fp) = release::read_unverified_with(&a.release, &limits)?;
                    (m, format!("REFUSED: {e}"), fp, None)
                }
            }
        }
        None => {
            let (m, signed, fp) = release::read_unverified_with(&a.release, &limits)?;
            let s = if signed {
                "signed, not checked (no --key given)"
            } else {
                "UNSIGNED"
            };
            (m, s.to_string(), fp, None)
        }
    };
    let digest = manifest
        .rootfs
        .as_ref()
        .map(|p| p.digest.clone())
        .unwrap_or_default();
    drop(p);
    if a.json {
        print_json(&json!({
            "name": manifest.name, "version": manifest.version, "rootfs_digest": digest,
            "publisher_key": fingerprint, "tools": tools_json(&manifest),
            "deterministic": manifest.deterministic, "signature": status, "rootfs_digest_checked": digest_ok,
            "entry": manifest.entry, "readable_paths": manifest.readable_paths, "scratch_mb": manifest.scratch_mb,
        }));
        return Ok(());
    }
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(o, "name:          {}", manifest.name);
    let _ = writeln!(o, "version:       {}", manifest.version);
    let _ = writeln!(o, "rootfs digest: {digest}");
    let _ = writeln!(
        o,
        "publisher key: {}",
        fingerprint.as_deref().unwrap_or("(none)")
    );
    let _ = writeln!(o, "entry:         {}", manifest.entry.join(" "));
    let _ = writeln!(
        o,
        "deterministic: {}",
        if manifest.deterministic {
            "declared"
        } else {
            "not declared"
        }
    );
    let _ = writeln!(o, "scratch:       {} MiB", manifest.scratch_mb);
    let _ = writeln!(o, "readable:      {}", manifest.readable_paths.join(", "));
    let _ = writeln!(o, "tools:");
    for (name, t) in &manifest.tools {
        let d = match (&t.destinations.hosts, &t.destinations.host_of_argument) {
            (Some(h), _) if h.is_empty() => "no destinations".to_string(),
            (Some(h), _) => h.join(", "),
            (None, Some(arg)) => format!("the host of argument `{arg}`"),
            _ => "?".into(),
        };
        let _ = writeln!(o, "  {name}: {d}");
    }
    let _ = writeln!(o, "signature:     {status}");
    output::out(&o);
    Ok(())
}

/// A deterministic pseudo-random filler (xorshift), so the data does not compress.
fn fill(buf: &mut [u8], seed: &mut u64) {
    for chunk in buf.chunks_mut(8) {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        let b = seed.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

fn bench(a: &BenchArgs, quiet: bool) -> Result<()> {
    let shown = progress::wanted(quiet, a.json);
    let dir = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let src = dir.path().join("src");
    // A rootfs-like mix: many small files and some large ones, in nested directories.
    let total = a.size_mb << 20;
    let sizes = [
        4usize << 10,
        16 << 10,
        64 << 10,
        256 << 10,
        1 << 20,
        4 << 20,
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let p = Progress::spinner(shown, format!("writing a {} MB rootfs", a.size_mb));
    let (mut written, mut files) = (0u64, 0u64);
    let mut buf = Vec::new();
    while written < total {
        let size = (sizes[(files as usize) % sizes.len()] as u64).min(total - written) as usize;
        let d = src.join(format!("usr/lib/d{:03}", files % 97));
        std::fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
        buf.resize(size, 0);
        fill(&mut buf, &mut seed);
        let p = d.join(format!("f{files}"));
        std::fs::write(&p, &buf).map_err(|e| Error::io(&p, e))?;
        written += size as u64;
        files += 1;
    }
    let m = dir.path().join("manifest.json");
    let manifest = json!({"schema": germline_release::manifest::SCHEMA, "name": "bench", "version": "1.0.0", "language": "native",
        "entry": ["/bin/true"], "initialisation": {"imports": []}, "tools": {"noop": {"destinations": {"hosts": []}}},
        "readable_paths": ["/"], "deterministic": true});
    std::fs::write(&m, manifest.to_string()).map_err(|e| Error::io(&m, e))?;
    let key = keys::SigningKey::generate(Algorithm::EcdsaP256);
    p.message("packing it");
    let out = dir.path().join("bundle");
    let img = dir.path().join("image");
    release::pack(
        &m,
        &Source::RootfsDir(src),
        Some(&key),
        &out,
        a.image.then_some(img.as_path()),
    )?;
    drop(p);
    let public = key.public();
    let mut times = Vec::new();
    let runs = a.runs.max(1);
    let total_runs = if a.image { 2 * runs } else { runs };
    let p = Progress::bar(shown, total_runs as u64, "verifying");
    for _ in 0..runs {
        let t = Instant::now();
        release::verify_bundle_dir(&out, &public)?;
        times.push(t.elapsed().as_secs_f64());
        p.inc();
    }
    times.sort_by(f64::total_cmp);
    let mut image_times = Vec::new();
    if a.image {
        p.message("verifying the image layout");
        for _ in 0..runs {
            let t = Instant::now();
            release::verify_image(&img, &public, None)?;
            image_times.push(t.elapsed().as_secs_f64());
            p.inc();
        }
        image_times.sort_by(f64::total_cmp);
    }
    let median = |v: &[f64]| v.get(v.len() / 2).copied();
    let mb = written as f64 / (1 << 20) as f64;
    let result = json!({
        "size_mb": mb, "files": files, "runs": times.len(), "workers": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "bundle_verify_seconds": {"min": times.first(), "median": median(&times), "max": times.last()},
        "bundle_verify_mb_per_s": median(&times).map(|t| mb / t),
        "image_verify_seconds": if a.image { json!({"min": image_times.first(), "median": median(&image_times)}) } else { serde_json::Value::Null },
        "note": "page cache warm after packing; bundle = signature + tree digest of rootfs/; image = blob digest + gunzip + tar checks + tree digest",
        "digest_algorithm": digest::ALGORITHM,
    });
    drop(p);
    let bytes = serde_json::to_vec_pretty(&result).map_err(|e| Error::Usage(e.to_string()))?;
    std::fs::write(&a.output, bytes).map_err(|e| Error::io(&a.output, e))?;
    emit(a.json, &result, || {
        let mut t = format!(
            "verified a {mb:.0} MB rootfs ({files} files) in {:.3} s (median of {}; min {:.3} s)\n",
            median(&times).unwrap_or(f64::NAN),
            times.len(),
            times.first().copied().unwrap_or(f64::NAN)
        );
        if a.image {
            t.push_str(&format!(
                "verified its image layout in {:.3} s (median)\n",
                median(&image_times).unwrap_or(f64::NAN)
            ));
        }
        t.push_str(&format!("wrote {}", a.output.display()));
        t
    });
    Ok(())
}
