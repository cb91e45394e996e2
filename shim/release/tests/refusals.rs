//! Bad input: every refusal names what failed, and nothing is left extracted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use germline_release::keys::{Algorithm, SigningKey};
use germline_release::manifest::{MANIFEST_PATH, SIGNATURE_PATH};
use germline_release::{bundle, release, tuf};
use std::path::{Path, PathBuf};

fn regular_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            if md.is_dir() {
                stack.push(e.path());
            } else if md.is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

fn flip(path: &Path, at: usize) {
    let mut b = std::fs::read(path).unwrap();
    let i = at.min(b.len() - 1);
    b[i] ^= 0x01;
    std::fs::write(path, b).unwrap();
}

#[test]
fn one_flipped_byte_in_any_rootfs_file_is_refused() {
    let f = Fixture::new();
    let (bundle, _) = f.pack("rel", "1.0.0", true);
    let rootfs = bundle.join("rootfs");
    let files: Vec<_> = regular_files(&rootfs)
        .into_iter()
        .filter(|p| !p.starts_with(rootfs.join(".germline")))
        .collect();
    assert!(files.len() >= 5, "{files:?}");
    release::verify_bundle_dir(&bundle, &f.key.public()).expect("intact release verifies");
    for file in files {
        let size = std::fs::metadata(&file).unwrap().len() as usize;
        for at in [0, size / 2, size.saturating_sub(1)] {
            flip(&file, at);
            let e = release::verify_bundle_dir(&bundle, &f.key.public())
                .expect_err("flipped byte accepted")
                .to_string();
            assert!(
                e.starts_with("rootfs digest mismatch: manifest pins sha256:"),
                "{}: {e}",
                file.display()
            );
            flip(&file, at);
        }
    }
    // A changed mode or a retargeted symlink is refused too.
    use std::os::unix::fs::PermissionsExt;
    let py = rootfs.join("usr/bin/python3");
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o4755)).unwrap();
    assert!(release::verify_bundle_dir(&bundle, &f.key.public())
        .expect_err("setuid")
        .to_string()
        .contains("rootfs digest mismatch"));
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::remove_file(rootfs.join("usr/bin/python")).unwrap();
    std::os::unix::fs::symlink(
        "../lib/python3/demo/__init__.py",
        rootfs.join("usr/bin/python"),
    )
    .unwrap();
    assert!(release::verify_bundle_dir(&bundle, &f.key.public())
        .expect_err("link")
        .to_string()
        .contains("rootfs digest mismatch"));
}

#[test]
fn one_flipped_byte_in_the_image_layer_is_refused_before_extraction() {
    let f = Fixture::new();
    let (_, image) = f.pack("rel", "1.0.0", true);
    let img = germline_release::oci::Image::open(&image).unwrap();
    let layer = img.blob_path(&img.layers[0].1).unwrap();
    flip(&layer, 5000);
    let dest = f.path("out");
    let e = release::verify_image(&image, &f.key.public(), Some(&dest))
        .expect_err("flipped layer accepted")
        .to_string();
    assert!(
        e.contains("blob sha256:") && e.contains("expected sha256:"),
        "{e}"
    );
    assert!(!dest.exists());
    assert!(leftovers(f.dir.path(), "partial").is_empty());
}

#[test]
fn one_flipped_byte_in_the_manifest_is_refused() {
    let f = Fixture::new();
    let (bundle, _) = f.pack("rel", "1.0.0", true);
    let m = bundle.join("rootfs").join(MANIFEST_PATH);
    let len = std::fs::metadata(&m).unwrap().len() as usize;
    for at in [0, len / 3, len / 2, len - 2] {
        flip(&m, at);
        let e = release::verify_bundle_dir(&bundle, &f.key.public())
            .expect_err("flipped manifest accepted")
            .to_string();
        assert!(e.contains("manifest.sigstore.json: field `messageSignature.messageDigest.digest`: the signed artifact's sha256 is"), "{e}");
        flip(&m, at);
    }
}

#[test]
fn one_flipped_byte_in_the_signature_is_refused() {
    let f = Fixture::new();
    let (bundle, _) = f.pack("rel", "1.0.0", true);
    let s = bundle.join("rootfs").join(SIGNATURE_PATH);
    let original = std::fs::read(&s).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&original).unwrap();
    let sig = v["messageSignature"]["signature"]
        .as_str()
        .unwrap()
        .to_string();
    let start = String::from_utf8_lossy(&original).find(&sig).unwrap();
    // Every byte of the base64 signature: each flip must be refused.
    for i in 0..sig.len() {
        let mut b = original.clone();
        b[start + i] ^= 0x01;
        std::fs::write(&s, &b).unwrap();
        let e = release::verify_bundle_dir(&bundle, &f.key.public())
            .expect_err("flipped signature accepted")
            .to_string();
        assert!(
            e.contains("signature does not verify with the pinned public key")
                || e.contains("field `messageSignature.signature`: not base64")
                || e.contains("not valid JSON"),
            "byte {i}: {e}"
        );
    }
    std::fs::write(&s, &original).unwrap();
    release::verify_bundle_dir(&bundle, &f.key.public()).expect("restored signature verifies");
}

#[test]
fn a_signature_by_another_key_is_refused() {
    let f = Fixture::new();
    let (bundle, image) = f.pack("rel", "1.0.0", true);
    let other = SigningKey::generate(Algorithm::EcdsaP256);
    let e = release::verify_bundle_dir(&bundle, &other.public())
        .expect_err("other key")
        .to_string();
    assert!(
        e.contains("signature does not verify with the pinned public key sha256:")
            && e.contains("signature by another key"),
        "{e}"
    );
    // The same, with the hint removed so only the signature itself decides.
    let s = bundle.join("rootfs").join(SIGNATURE_PATH);
    let m = std::fs::read(bundle.join("rootfs").join(MANIFEST_PATH)).unwrap();
    let mut v: serde_json::Value =
        serde_json::from_slice(&bundle::sign(&other, &m).unwrap()).unwrap();
    v["verificationMaterial"]["publicKey"] = serde_json::json!({});
    std::fs::write(&s, v.to_string()).unwrap();
    let e = release::verify_bundle_dir(&bundle, &f.key.public())
        .expect_err("other key, no hint")
        .to_string();
    assert!(
        e.contains("signature does not verify with the pinned public key"),
        "{e}"
    );
    // An Ed25519 pinned key against an ECDSA signature.
    let ed = SigningKey::generate(Algorithm::Ed25519);
    let e = release::verify_image(&image, &ed.public(), None)
        .expect_err("ed25519 key")
        .to_string();
    assert!(e.contains("another key"), "{e}");
}

#[test]
fn a_truncated_bundle_is_refused() {
    let f = Fixture::new();
    let (bundle, image) = f.pack("rel", "1.0.0", true);
    let s = bundle.join("rootfs").join(SIGNATURE_PATH);
    let b = std::fs::read(&s).unwrap();
    std::fs::write(&s, &b[..b.len() / 2]).unwrap();
    let e = release::verify_bundle_dir(&bundle, &f.key.public())
        .expect_err("truncated sigstore bundle")
        .to_string();
    assert!(
        e.contains("manifest.sigstore.json: not valid JSON for a sigstore bundle: EOF"),
        "{e}"
    );
    // A truncated image layer, with every descriptor rewritten to match, is refused while reading.
    let img = germline_release::oci::Image::open(&image).unwrap();
    let layer = std::fs::read(img.blob_path(&img.layers[0].1).unwrap()).unwrap();
    let mut raw = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&layer[..]), &mut raw).unwrap();
    let crafted = f.path("truncated.oci");
    craft_layout(&crafted, &raw[..raw.len() / 2]);
    let dest = f.path("out");
    let e = release::verify_image(&crafted, &f.key.public(), Some(&dest))
        .expect_err("truncated layer")
        .to_string();
    assert!(e.contains("truncated") || e.contains("corrupt"), "{e}");
    assert!(!dest.exists() && leftovers(f.dir.path(), "partial").is_empty());
}

#[test]
fn an_unsigned_manifest_is_refused() {
    let f = Fixture::new();
    let (bundle, image) = f.pack("rel", "1.0.0", false);
    let e = release::verify_bundle_dir(&bundle, &f.key.public())
        .expect_err("unsigned")
        .to_string();
    assert!(
        e.contains("missing signature: unsigned manifest refused"),
        "{e}"
    );
    let dest = f.path("out");
    let e = release::verify_image(&image, &f.key.public(), Some(&dest))
        .expect_err("unsigned image")
        .to_string();
    assert!(e.contains("unsigned manifest refused"), "{e}");
    assert!(!dest.exists());
}

#[test]
fn a_manifest_with_an_unknown_field_or_no_destination_list_is_refused() {
    let f = Fixture::new();
    let src = f.path("src");
    make_rootfs(&src, "x");
    let mut m = manifest_json("1.0.0");
    m["tools"]["post"]["exfiltrate"] = serde_json::json!(true);
    let mp = f.path("m.json");
    std::fs::write(&mp, m.to_string()).unwrap();
    let e = release::pack(
        &mp,
        &release::Source::RootfsDir(src.clone()),
        Some(&f.key),
        &f.path("b"),
        None,
    )
    .expect_err("unknown field")
    .to_string();
    assert!(e.contains("m.json: field `tools.post.exfiltrate`: unknown field `exfiltrate`, expected one of `destinations`, `consumers`, `flows`"), "{e}");
    assert!(!f.path("b").exists() && leftovers(f.dir.path(), "partial").is_empty());
    let mut m = manifest_json("1.0.0");
    m["tools"]["post"] = serde_json::json!({});
    std::fs::write(&mp, m.to_string()).unwrap();
    let e = release::pack(
        &mp,
        &release::Source::RootfsDir(src),
        Some(&f.key),
        &f.path("b"),
        None,
    )
    .expect_err("no destinations")
    .to_string();
    assert!(
        e.contains("field `tools.post`: missing field `destinations`"),
        "{e}"
    );
    // A signed manifest with an unknown field is refused at verification, after the signature.
    let (bundle, _) = f.pack("rel", "1.0.0", true);
    let mpath = bundle.join("rootfs").join(MANIFEST_PATH);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
    v["tools"]["get_time"]["destinations"] = serde_json::json!({});
    v["egress"] = serde_json::json!("any");
    let bytes = serde_json::to_vec(&v).unwrap();
    std::fs::write(&mpath, &bytes).unwrap();
    std::fs::write(
        bundle.join("rootfs").join(SIGNATURE_PATH),
        bundle::sign(&f.key, &bytes).unwrap(),
    )
    .unwrap();
    let e = release::verify_bundle_dir(&bundle, &f.key.public())
        .expect_err("signed unknown field")
        .to_string();
    assert!(
        e.contains("manifest.json: field `egress`: unknown field `egress`"),
        "{e}"
    );
    v.as_object_mut().unwrap().remove("egress");
    let bytes = serde_json::to_vec(&v).unwrap();
    std::fs::write(&mpath, &bytes).unwrap();
    std::fs::write(
        bundle.join("rootfs").join(SIGNATURE_PATH),
        bundle::sign(&f.key, &bytes).unwrap(),
    )
    .unwrap();
    let e = release::verify_bundle_dir(&bundle, &f.key.public())
        .expect_err("signed, no destinations")
        .to_string();
    assert!(
        e.contains("field `tools.get_time.destinations`: missing destination list"),
        "{e}"
    );
}

fn assert_layer_refused(entries: &[Raw<'_>], expect: &str) {
    let f = Fixture::new();
    let layout = f.path("evil.oci");
    craft_layout(&layout, &raw_tar(entries));
    let dest = f.path("sub/out");
    std::fs::create_dir_all(f.path("sub")).unwrap();
    let e = release::verify_image(&layout, &f.key.public(), Some(&dest))
        .expect_err("malicious layer accepted")
        .to_string();
    assert!(e.contains(expect), "expected {expect:?} in: {e}");
    assert!(
        e.starts_with("layer sha256:"),
        "the refusal names the layer: {e}"
    );
    assert!(
        !dest.exists(),
        "partial extraction left at {}",
        dest.display()
    );
    assert!(
        leftovers(&f.path("sub"), "").is_empty(),
        "left behind: {:?}",
        leftovers(&f.path("sub"), "")
    );
    assert!(
        !f.path("evil").exists() && !f.path("sub/evil").exists(),
        "wrote outside the destination"
    );
}

#[test]
fn path_traversal_entries_in_a_layer_are_refused_with_nothing_extracted() {
    assert_layer_refused(
        &[
            Raw::Dir(b"usr"),
            Raw::File(b"usr/ok", b"fine"),
            Raw::File(b"../evil", b"x"),
        ],
        "entry `../evil`: `..` component in path (path traversal)",
    );
    assert_layer_refused(
        &[Raw::Dir(b"usr"), Raw::File(b"usr/../../evil", b"x")],
        "`..` component in path",
    );
    assert_layer_refused(
        &[Raw::File(b"/evil", b"x")],
        "entry `/evil`: absolute path in a layer",
    );
    assert_layer_refused(
        &[
            Raw::Dir(b"etc"),
            Raw::Symlink(b"etc/shadow", b"/etc/shadow"),
        ],
        "entry `etc/shadow`: absolute symlink target \"/etc/shadow\"",
    );
    assert_layer_refused(
        &[Raw::Dir(b"etc"), Raw::Symlink(b"etc/up", b"../../..")],
        "symlink target \"../../..\" escapes the rootfs",
    );
    // A link that stays inside, then an entry written through it.
    assert_layer_refused(
        &[
            Raw::Dir(b"usr"),
            Raw::Symlink(b"lnk", b"usr"),
            Raw::File(b"lnk/evil", b"x"),
        ],
        "parent `lnk` is not a directory",
    );
    assert_layer_refused(
        &[
            Raw::Dir(b"usr"),
            Raw::Hardlink(b"usr/h", b"../../etc/passwd"),
        ],
        "hard link target: `..` component",
    );
    assert_layer_refused(
        &[Raw::Dir(b"usr"), Raw::Hardlink(b"usr/h", b"etc/passwd")],
        "not an earlier regular file of this layer",
    );
    assert_layer_refused(
        &[
            Raw::Dir(b"usr"),
            Raw::File(b"usr/a", b"1"),
            Raw::File(b"usr/a", b"2"),
        ],
        "duplicate entry",
    );
    assert_layer_refused(
        &[Raw::Dir(b"usr"), Raw::File(b"usr/.wh.x", b"")],
        "whiteout",
    );
}

#[test]
fn extraction_is_atomic_and_matches_the_bundle() {
    let f = Fixture::new();
    let (bundle, image) = f.pack("rel", "1.0.0", true);
    let dest = f.path("extracted");
    let v = release::verify_image(&image, &f.key.public(), Some(&dest)).unwrap();
    let again = release::verify_bundle_dir(&dest, &f.key.public()).unwrap();
    assert_eq!(v.rootfs_digest, again.rootfs_digest);
    assert_eq!(
        again.rootfs_digest,
        release::verify_bundle_dir(&bundle, &f.key.public())
            .unwrap()
            .rootfs_digest
    );
    assert_eq!(
        std::fs::read_link(dest.join("rootfs/etc/ssl/cert.pem")).unwrap(),
        Path::new("../../etc/ssl/certs/ca.pem")
    );
    // Extracting over an existing destination is refused and leaves it alone.
    let e = release::verify_image(&image, &f.key.public(), Some(&dest))
        .expect_err("overwrite")
        .to_string();
    assert!(e.contains("already exists"), "{e}");
    assert!(leftovers(f.dir.path(), "partial").is_empty());
}

#[test]
fn packing_is_deterministic() {
    let f = Fixture::new();
    let (_, a) = f.pack("a", "1.0.0", false);
    let (_, b) = f.pack("b", "1.0.0", false);
    // Same manifest and rootfs contents (the salt differs by name: compare a re-pack of `a`'s source).
    let ia = germline_release::oci::Image::open(&a).unwrap();
    let ib = germline_release::oci::Image::open(&b).unwrap();
    assert_ne!(
        ia.layers[0].1.digest, ib.layers[0].1.digest,
        "different contents, different layers"
    );
    let m = f.path("a.manifest.json");
    let c = f.path("c.oci");
    release::pack(
        &m,
        &release::Source::RootfsDir(f.path("a.src")),
        None,
        &f.path("c"),
        Some(&c),
    )
    .unwrap();
    let ic = germline_release::oci::Image::open(&c).unwrap();
    assert_eq!(
        ia.layers[0].1.digest, ic.layers[0].1.digest,
        "same input, same layer digest"
    );
    assert_eq!(
        std::fs::read(a.join("index.json")).unwrap(),
        std::fs::read(c.join("index.json")).unwrap()
    );
}

#[test]
fn packing_from_an_oci_image_layout_flattens_layers_and_whiteouts() {
    let f = Fixture::new();
    // A foreign two-layer image: the second layer deletes a file and adds one; absolute links.
    let l1 = raw_tar(&[
        Raw::Dir(b"usr"),
        Raw::Dir(b"usr/bin"),
        Raw::File(b"usr/bin/tool", b"v1"),
        Raw::File(b"usr/bin/old", b"gone"),
        Raw::Symlink(b"bin", b"/usr/bin"),
    ]);
    let l2 = raw_tar(&[
        Raw::Dir(b"usr/bin"),
        Raw::File(b"usr/bin/.wh.old", b""),
        Raw::File(b"usr/bin/new", b"v2"),
    ]);
    let one = f.path("one.oci");
    craft_layout(&one, &l1);
    // Append the second layer to the same layout by hand.
    let img = germline_release::oci::Image::open(&one).unwrap();
    let two = f.path("two.oci");
    craft_layout(&two, &l2);
    let img2 = germline_release::oci::Image::open(&two).unwrap();
    for e in std::fs::read_dir(two.join("blobs/sha256"))
        .unwrap()
        .flatten()
    {
        std::fs::copy(e.path(), one.join("blobs/sha256").join(e.file_name())).unwrap();
    }
    let mut manifest = img.manifest.clone();
    manifest["layers"]
        .as_array_mut()
        .unwrap()
        .push(img2.manifest["layers"][0].clone());
    let mbytes = serde_json::to_vec(&manifest).unwrap();
    use sha2::Digest as _;
    let mhex = hex::encode(sha2::Sha256::digest(&mbytes));
    std::fs::write(one.join("blobs/sha256").join(&mhex), &mbytes).unwrap();
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": format!("sha256:{mhex}"), "size": mbytes.len()}]});
    std::fs::write(one.join("index.json"), index.to_string()).unwrap();
    let mp = f.path("m.json");
    std::fs::write(&mp, manifest_json("3.0.0").to_string()).unwrap();
    let out = f.path("packed");
    let img_out = f.path("packed.oci");
    release::pack(
        &mp,
        &release::Source::ImageLayout(one),
        Some(&f.key),
        &out,
        Some(&img_out),
    )
    .unwrap();
    let r = out.join("rootfs");
    assert_eq!(std::fs::read(r.join("usr/bin/tool")).unwrap(), b"v1");
    assert_eq!(std::fs::read(r.join("usr/bin/new")).unwrap(), b"v2");
    assert!(!r.join("usr/bin/old").exists(), "whiteout applied");
    assert_eq!(
        std::fs::read_link(r.join("bin")).unwrap(),
        Path::new("usr/bin"),
        "absolute link made relative"
    );
    release::verify_image(&img_out, &f.key.public(), None).unwrap();
}

fn tuf_repo(f: &Fixture) -> (PathBuf, PathBuf) {
    let repo = f.path("repo");
    let key = f.path("tuf.der");
    tuf::init(&repo, &key, in_hours(48)).unwrap();
    (repo, key)
}

fn in_hours(h: i64) -> jiff::Timestamp {
    jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_hours(h))
        .unwrap()
}

#[test]
fn tuf_refuses_rollback_expiry_mismatch_and_unknown_keys() {
    let f = Fixture::new();
    let (repo, key) = tuf_repo(&f);
    let root = repo.join("metadata/1.root.json");
    let state = f.path("state");
    let (b1, _) = f.pack("v1", "1.0.0", true);
    let (b2, _) = f.pack("v2", "2.0.0", true);
    let v1 = release::verify_bundle_dir(&b1, &f.key.public()).unwrap();
    let v2 = release::verify_bundle_dir(&b2, &f.key.public()).unwrap();
    tuf::publish(
        &repo,
        &key,
        &v1.manifest_bytes,
        &v1.manifest,
        in_hours(48),
        in_hours(24),
    )
    .unwrap();
    tuf::publish(
        &repo,
        &key,
        &v2.manifest_bytes,
        &v2.manifest,
        in_hours(48),
        in_hours(24),
    )
    .unwrap();
    tuf::check_release(&repo, &root, &state, &v2.manifest_bytes, &v2.manifest)
        .expect("2.0.0 verifies");
    // Rollback to an older version than one already seen.
    let e = tuf::check_release(&repo, &root, &state, &v1.manifest_bytes, &v1.manifest)
        .expect_err("rollback")
        .to_string();
    assert!(
        e.starts_with("rollback refused: mcp-server-demo 1.0.0 is older than 2.0.0, already seen"),
        "{e}"
    );
    // A release whose manifest is not the published one (same name and version, other bytes).
    let (b3, _) = f.pack("v3", "2.0.0", true);
    let v3 = release::verify_bundle_dir(&b3, &f.key.public()).unwrap();
    let e = tuf::check_release(&repo, &root, &state, &v3.manifest_bytes, &v3.manifest)
        .expect_err("mismatch")
        .to_string();
    assert!(
        e.contains("target `mcp-server-demo-2.0.0.manifest.json`: sha256 mismatch"),
        "{e}"
    );
    // A release that was never published.
    let (b4, _) = f.pack("v4", "4.0.0", true);
    let v4 = release::verify_bundle_dir(&b4, &f.key.public()).unwrap();
    let e = tuf::check_release(&repo, &root, &state, &v4.manifest_bytes, &v4.manifest)
        .expect_err("unpublished")
        .to_string();
    assert!(
        e.contains("release mcp-server-demo 4.0.0 is not a target"),
        "{e}"
    );
    // Expired timestamp metadata.
    let past = jiff::Timestamp::now()
        .checked_sub(jiff::SignedDuration::from_hours(1))
        .unwrap();
    tuf::publish(
        &repo,
        &key,
        &v4.manifest_bytes,
        &v4.manifest,
        in_hours(48),
        past,
    )
    .unwrap();
    let e = tuf::check_release(
        &repo,
        &root,
        &f.path("state-b"),
        &v4.manifest_bytes,
        &v4.manifest,
    )
    .expect_err("expired")
    .to_string();
    assert!(e.contains("expired") && e.contains("timestamp"), "{e}");
    // Metadata signed by keys the pinned root does not know.
    let f2 = Fixture::new();
    let (repo2, key2) = tuf_repo(&f2);
    tuf::publish(
        &repo2,
        &key2,
        &v2.manifest_bytes,
        &v2.manifest,
        in_hours(48),
        in_hours(24),
    )
    .unwrap();
    let e = tuf::check_release(
        &repo2,
        &root,
        &f.path("state-c"),
        &v2.manifest_bytes,
        &v2.manifest,
    )
    .expect_err("unknown key")
    .to_string();
    assert!(
        e.starts_with("TUF repository") && (e.contains("signature") || e.contains("threshold")),
        "{e}"
    );
    // Publishing with a key the root does not trust is refused.
    let e = tuf::publish(
        &repo,
        &key2,
        &v2.manifest_bytes,
        &v2.manifest,
        in_hours(48),
        in_hours(24),
    )
    .expect_err("untrusted publisher")
    .to_string();
    assert!(e.contains("is it a key the root trusts?"), "{e}");
}

#[test]
fn tuf_refuses_a_rolled_back_timestamp() {
    let f = Fixture::new();
    let (repo, key) = tuf_repo(&f);
    let root = repo.join("metadata/1.root.json");
    let state = f.path("state");
    let (b1, _) = f.pack("v1", "1.0.0", true);
    let v1 = release::verify_bundle_dir(&b1, &f.key.public()).unwrap();
    tuf::publish(
        &repo,
        &key,
        &v1.manifest_bytes,
        &v1.manifest,
        in_hours(48),
        in_hours(24),
    )
    .unwrap();
    let old_ts = std::fs::read(repo.join("metadata/timestamp.json")).unwrap();
    tuf::publish(
        &repo,
        &key,
        &v1.manifest_bytes,
        &v1.manifest,
        in_hours(48),
        in_hours(24),
    )
    .unwrap();
    tuf::check_release(&repo, &root, &state, &v1.manifest_bytes, &v1.manifest).unwrap();
    // Replay the older (still unexpired, validly signed) timestamp: frozen metadata.
    std::fs::write(repo.join("metadata/timestamp.json"), old_ts).unwrap();
    let e = tuf::check_release(&repo, &root, &state, &v1.manifest_bytes, &v1.manifest)
        .expect_err("timestamp rollback")
        .to_string();
    assert!(
        e.starts_with("TUF repository") && e.to_lowercase().contains("version"),
        "{e}"
    );
}
