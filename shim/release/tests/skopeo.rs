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
