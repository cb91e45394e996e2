//! Interop with independent implementations: @sigstore/verify and @sigstore/sign (npm),
//! Python's hashlib scrypt + PyNaCl secretbox, python-tuf (publisher and ngclient).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use germline_release::keys::{self, Algorithm};
use germline_release::manifest::{MANIFEST_PATH, SIGNATURE_PATH};
use germline_release::{release, tuf};
use std::process::Command;

#[test]
fn germline_signed_release_verifies_with_sigstore_verify() {
    if !node_ready() {
        return;
    }
    let f = Fixture::new();
    let (_, public) = f.write_keys("cosign", "pw");
    let (bundle, _) = f.pack("rel", "1.0.0", true);
    let m = bundle.join("rootfs").join(MANIFEST_PATH);
    let s = bundle.join("rootfs").join(SIGNATURE_PATH);
    let (ok, out, err) = run(Command::new("node")
        .arg(node_dir().join("verify.js"))
        .arg(&s)
        .arg(&m)
        .arg(&public));
    assert!(ok, "@sigstore/verify refused germline's bundle: {out}{err}");
    assert!(
        out.contains("@sigstore/verify: OK application/vnd.dev.sigstore.bundle.v0.3+json"),
        "{out}"
    );
    // The same verifier refuses a manifest with one flipped byte, so the check above is real.
    let mut bytes = std::fs::read(&m).unwrap();
    bytes[10] ^= 1;
    let tampered = f.path("tampered.json");
    std::fs::write(&tampered, bytes).unwrap();
    let (ok, _, err) = run(Command::new("node")
        .arg(node_dir().join("verify.js"))
        .arg(&s)
        .arg(&tampered)
        .arg(&public));
    assert!(
        !ok && err.contains("@sigstore/verify"),
        "tampered manifest accepted: {err}"
    );
}

/// Ed25519 bundles are checked with Python's `cryptography`: @sigstore/verify 4 always hands a
/// digest name to Node's crypto.verify, which Ed25519 keys reject, so it cannot verify them.
#[test]
fn germline_bundles_verify_with_python_cryptography() {
    let py = venv_python();
    if !have(&py, "python venv with cryptography") {
        return;
    }
    let f = Fixture::new();
    let blob = f.path("blob.txt");
    std::fs::write(&blob, b"hello bundle").unwrap();
    for alg in [Algorithm::Ed25519, Algorithm::EcdsaP256] {
        let key = keys::SigningKey::generate(alg);
        let b = f.path("blob.sigstore.json");
        std::fs::write(
            &b,
            germline_release::bundle::sign(&key, b"hello bundle").unwrap(),
        )
        .unwrap();
        let p = f.path("k.pub");
        std::fs::write(&p, key.public().to_pem().unwrap()).unwrap();
        let (ok, out, err) = run(Command::new(&py)
            .arg(python_script("verify_bundle.py"))
            .arg(&b)
            .arg(&blob)
            .arg(&p));
        assert!(ok, "{alg:?}: {out}{err}");
        // And refuses it for another artifact.
        let other = f.path("other.txt");
        std::fs::write(&other, b"hello bundlE").unwrap();
        let (ok, _, err) = run(Command::new(&py)
            .arg(python_script("verify_bundle.py"))
            .arg(&b)
            .arg(&other)
            .arg(&p));
        assert!(!ok && err.contains("digest"), "{alg:?}: {err}");
    }
}

#[test]
fn sigstore_sign_bundle_verifies_with_germline() {
    if !node_ready() {
        return;
    }
    let f = Fixture::new();
    let (bundle, _) = f.pack("rel", "1.0.0", false);
    let m = bundle.join("rootfs").join(MANIFEST_PATH);
    let s = bundle.join("rootfs").join(SIGNATURE_PATH);
    let node_pub = f.path("node.pub");
    let (ok, out, err) = run(Command::new("node")
        .arg(node_dir().join("sign.js"))
        .arg(&m)
        .arg(&s)
        .arg(&node_pub));
    assert!(ok, "@sigstore/sign failed: {out}{err}");
    let key = keys::load_public_key(&node_pub).unwrap();
    let v = release::verify_bundle_dir(&bundle, &key)
        .expect("germline refused @sigstore/sign's bundle");
    assert_eq!(v.manifest.version, "1.0.0");
    assert!(
        germline_release::bundle::ACCEPTED_MEDIA_TYPES.contains(&v.signature.media_type.as_str())
    );
    // Refused with any other key.
    let e = release::verify_bundle_dir(&bundle, &f.key.public())
        .expect_err("other key accepted")
        .to_string();
    assert!(e.contains("another key"), "{e}");
}

#[test]
fn germline_key_decrypts_with_independent_decryptor() {
    let py = venv_python();
    if !have(&py, "python venv with PyNaCl") {
        return;
    }
    for alg in [Algorithm::EcdsaP256, Algorithm::Ed25519] {
        let dir = tempfile::tempdir().unwrap();
        let public = keys::keygen(dir.path(), "cosign", alg, b"correct horse").unwrap();
        let (ok, out, err) = run(Command::new(&py)
            .arg(python_script("decrypt_cosign_key.py"))
            .arg(dir.path().join("cosign.key"))
            .env("COSIGN_PASSWORD", "correct horse"));
        assert!(ok, "{alg:?}: independent decryptor failed: {err}");
        assert_eq!(
            out,
            std::fs::read_to_string(dir.path().join("cosign.pub")).unwrap(),
            "{alg:?}"
        );
        assert_eq!(out, public.to_pem().unwrap());
        let (ok, _, err) = run(Command::new(&py)
            .arg(python_script("decrypt_cosign_key.py"))
            .arg(dir.path().join("cosign.key"))
            .env("COSIGN_PASSWORD", "wrong"));
        assert!(
            !ok && err.contains("CryptoError"),
            "wrong password accepted: {err}"
        );
    }
}

#[test]
fn python_tuf_repository_is_read_by_germline() {
    let py = venv_python();
    if !have(&py, "python venv with python-tuf") {
        return;
    }
    let f = Fixture::new();
    let (_, image) = f.pack("rel", "1.2.3", true);
    let v = release::verify_image(&image, &f.key.public(), None).unwrap();
    let m = f.path("rel/rootfs").join(MANIFEST_PATH);
    let name = tuf::target_name(&v.manifest);
    let repo = f.path("pyrepo");
    let (ok, _, err) = run(Command::new(&py)
        .arg(python_script("tuf_publish.py"))
        .arg(&repo)
        .arg(&name)
        .arg(&m));
    assert!(ok, "python-tuf publish failed: {err}");
    let root = repo.join("metadata/1.root.json");
    let c = tuf::check_release(
        &repo,
        &root,
        &f.path("state"),
        &v.manifest_bytes,
        &v.manifest,
    )
    .expect("germline refused python-tuf's repo");
    assert_eq!(c.target, name);
    assert_eq!(c.targets_version, 1);
    // A python-tuf repository whose timestamp has expired is refused.
    let repo2 = f.path("pyrepo-expired");
    let (ok, _, err) = run(Command::new(&py)
        .arg(python_script("tuf_publish.py"))
        .arg(&repo2)
        .arg(&name)
        .arg(&m)
        .arg("--timestamp-expired"));
    assert!(ok, "{err}");
    let e = tuf::check_release(
        &repo2,
        &repo2.join("metadata/1.root.json"),
        &f.path("state2"),
        &v.manifest_bytes,
        &v.manifest,
    )
    .expect_err("expired timestamp accepted")
    .to_string();
    assert!(e.contains("expired") && e.contains("timestamp"), "{e}");
}

#[test]
fn germline_tuf_repository_is_read_by_python_tuf() {
    let py = venv_python();
    if !have(&py, "python venv with python-tuf") {
        return;
    }
    let f = Fixture::new();
    let (bundle, _) = f.pack("rel", "2.0.0", true);
    let v = release::verify_bundle_dir(&bundle, &f.key.public()).unwrap();
    let repo = f.path("repo");
    let tkey = f.path("tuf.der");
    let soon = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_hours(48))
        .unwrap();
    tuf::init(&repo, &tkey, soon).unwrap();
    let name = tuf::publish(&repo, &tkey, &v.manifest_bytes, &v.manifest, soon, soon).unwrap();
    let (ok, out, err) = run(Command::new(&py)
        .arg(python_script("tuf_client.py"))
        .arg(&repo)
        .arg(repo.join("metadata/1.root.json"))
        .arg(&name)
        .arg(f.path("pywork")));
    assert!(ok, "python-tuf's client refused germline's repo: {err}");
    let j: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    use sha2::Digest as _;
    let want = hex::encode(sha2::Sha256::digest(&v.manifest_bytes));
    assert_eq!(j["sha256"], want);
    assert_eq!(j["downloaded_sha256"], want);
    assert_eq!(j["length"], v.manifest_bytes.len());
    assert_eq!(j["custom"]["germline"]["version"], "2.0.0");
}
