//! germline's image layouts are read and copied by skopeo (containers/image, what podman and
//! CRI-O use), and a layout skopeo wrote is verified by germline and can be packed from.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use germline_release::release;
use std::path::Path;
use std::process::Command;

fn skopeo() -> bool {
    let ok = Command::new("skopeo")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok && required() {
        panic!("skopeo not found (run scripts/setup.sh)");
    }
    if !ok {
        eprintln!("SKIP: skopeo not found");
    }
    ok
}

#[test]
fn skopeo_reads_copies_and_germline_verifies_the_copy() {
    if !skopeo() {
        return;
    }
    let f = Fixture::new();
    let (_, image) = f.pack("rel", "1.4.0", true);
    let oci = |p: &Path, tag: &str| format!("oci:{}{tag}", p.display());
    let (ok, out, err) = run(Command::new("skopeo").args(["inspect", &oci(&image, "")]));
    assert!(ok, "skopeo inspect: {err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["Labels"]["org.opencontainers.image.version"], "1.4.0");
    let v = release::verify_image(&image, &f.key.public(), None).unwrap();
    assert_eq!(
        j["Labels"]["dev.germline.rootfs.digest"],
        v.rootfs_digest.as_str()
    );
    let copy = f.path("copy.oci");
    let (ok, _, err) =
        run(Command::new("skopeo").args(["copy", "-q", &oci(&image, ""), &oci(&copy, ":copied")]));
    assert!(ok, "skopeo copy: {err}");
    let v2 = release::verify_image(&copy, &f.key.public(), Some(&f.path("extracted")))
        .expect("germline refused skopeo's copy");
    assert_eq!(v2.rootfs_digest, v.rootfs_digest);
    // Packing a new release from the layout skopeo wrote.
    let m = f.path("m.json");
    std::fs::write(&m, manifest_json("1.5.0").to_string()).unwrap();
    let p = release::pack(
        &m,
        &release::Source::ImageLayout(copy),
        Some(&f.key),
        &f.path("repacked"),
        Some(&f.path("repacked.oci")),
    )
    .unwrap();
    assert_eq!(p.rootfs_digest, v.rootfs_digest, "same files, same digest");
    release::verify_image(&f.path("repacked.oci"), &f.key.public(), None).unwrap();
}

/// A version with SemVer build metadata is written under an OCI tag (`+` as `_`) that skopeo
/// finds; a layout written before, whose ref name is the version itself, still verifies, and
/// both names give the version back.
#[test]
fn a_version_with_build_metadata_is_tagged_and_old_ref_names_still_read() {
    if !skopeo() {
        return;
    }
    let f = Fixture::new();
    let (_, image) = f.pack("rel", "0.2.1+g1", true);
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(image.join("index.json")).unwrap()).unwrap();
    let name = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(name, "0.2.1_g1");
    assert_eq!(germline_release::oci::version_of_ref(&name), "0.2.1+g1");
    let at = |p: &Path, tag: &str| format!("oci:{}:{tag}", p.display());
    let (ok, out, err) = run(Command::new("skopeo").args(["inspect", &at(&image, "0.2.1_g1")]));
    assert!(ok, "skopeo inspect by the tag: {err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["Labels"]["org.opencontainers.image.version"], "0.2.1+g1");
    let v = release::verify_image(&image, &f.key.public(), None).unwrap();
    assert_eq!(v.manifest.version, "0.2.1+g1");

    // The same layout with the ref name germline wrote before (the version, `+` and all).
    let old = f.path("old.oci");
    let (ok, _, err) = run(Command::new("cp").arg("-a").arg(&image).arg(&old));
    assert!(ok, "cp: {err}");
    let text = std::fs::read_to_string(old.join("index.json"))
        .unwrap()
        .replace("\"0.2.1_g1\"", "\"0.2.1+g1\"");
    std::fs::write(old.join("index.json"), &text).unwrap();
    assert!(text.contains("\"org.opencontainers.image.ref.name\":\"0.2.1+g1\""));
    let v2 = release::verify_image(&old, &f.key.public(), None).expect("old ref name reads");
    assert_eq!(v2.rootfs_digest, v.rootfs_digest);
    assert_eq!(
        germline_release::oci::version_of_ref("0.2.1+g1"),
        "0.2.1+g1"
    );
    let (ok, _, err) = run(Command::new("skopeo").args(["inspect", &at(&old, "0.2.1+g1")]));
    assert!(ok, "skopeo inspect by the old name: {err}");
}
