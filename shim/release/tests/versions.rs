//! Release versions over generated SemVer strings: the rollback check orders them by SemVer 2.0
//! precedence (build metadata ignored), and the image ref name germline writes for a version is
//! always a valid OCI tag that gives the version back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::cmp::Ordering;

use germline_release::manifest::Manifest;
use germline_release::{oci, tuf};
use proptest::prelude::*;

/// SemVer 2.0.0 §11, written from the text (not from the semver crate): major, minor, patch
/// numerically; a version with a pre-release is lower than the same without; pre-release
/// identifiers compared left to right, numeric ones numerically and below alphanumeric ones,
/// alphanumeric ones in ASCII order, and a shorter list lower when it is a prefix. Build
/// metadata (after `+`) is not looked at (§10).
fn spec_precedence(a: &str, b: &str) -> Ordering {
    fn split(v: &str) -> ([u64; 3], Vec<&str>) {
        let core_pre = v.split('+').next().unwrap();
        let (core, pre) = match core_pre.split_once('-') {
            Some((c, p)) => (c, p.split('.').collect()),
            None => (core_pre, vec![]),
        };
        let n: Vec<u64> = core.split('.').map(|x| x.parse().unwrap()).collect();
        ([n[0], n[1], n[2]], pre)
    }
    fn ident(a: &str, b: &str) -> Ordering {
        let num = |s: &str| s.bytes().all(|c| c.is_ascii_digit());
        match (num(a), num(b)) {
            // No leading zeros: the longer number is the larger.
            (true, true) => a.len().cmp(&b.len()).then_with(|| a.cmp(b)),
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            (false, false) => a.as_bytes().cmp(b.as_bytes()),
        }
    }
    let (ca, pa) = split(a);
    let (cb, pb) = split(b);
    ca.cmp(&cb)
        .then_with(|| match (pa.is_empty(), pb.is_empty()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Greater,
            (false, true) => Ordering::Less,
            (false, false) => {
                for (x, y) in pa.iter().zip(&pb) {
                    let o = ident(x, y);
                    if o != Ordering::Equal {
                        return o;
                    }
                }
                pa.len().cmp(&pb.len())
            }
        })
}

/// A number as SemVer writes it: often small (so that versions collide), sometimes huge.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![3 => (0u64..3).prop_map(|n| n.to_string()), 1 => any::<u64>().prop_map(|n| n.to_string())]
}

fn pre_ident() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..12).prop_map(|n| n.to_string()),
        "[a-c-][0-9a-c-]{0,3}",
        "[0-9]{1,2}[a-cA-C-][0-9]{0,2}",
    ]
}

fn build_ident() -> impl Strategy<Value = String> {
    prop_oneof!["[0-9A-Za-z-]{1,6}", "[0-9a-z]{20,60}"]
}

/// A SemVer 2.0 version string: core, optional pre-release, optional build metadata.
fn version() -> impl Strategy<Value = String> {
    (
        number(),
        number(),
        number(),
        prop::collection::vec(pre_ident(), 0..4),
        prop::collection::vec(build_ident(), 0..4),
    )
        .prop_map(|(a, b, c, pre, build)| {
            let mut v = format!("{a}.{b}.{c}");
            if !pre.is_empty() {
                v = format!("{v}-{}", pre.join("."));
            }
            if !build.is_empty() {
                v = format!("{v}+{}", build.join("."));
            }
            v
        })
}

fn manifest(version: &str) -> Manifest {
    let j = common::manifest_json(version);
    Manifest::parse(&serde_json::to_vec(&j).unwrap(), "m.json").expect("a generated version parses")
}

fn tag_regex() -> regex::Regex {
    regex::Regex::new(r"^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$").unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn rollback_precedence_is_semver_precedence(a in version(), b in version()) {
        let (va, vb) = (semver::Version::parse(&a).unwrap(), semver::Version::parse(&b).unwrap());
        prop_assert_eq!(tuf::precedence(&va, &vb), spec_precedence(&a, &b), "{} vs {}", a, b);
        prop_assert_eq!(tuf::precedence(&va, &vb), va.cmp_precedence(&vb));
    }

    #[test]
    fn build_metadata_never_decides(a in version(), build in prop::collection::vec(build_ident(), 0..3)) {
        let core = a.split('+').next().unwrap().to_string();
        let other = if build.is_empty() { core.clone() } else { format!("{core}+{}", build.join(".")) };
        let (va, vo) = (semver::Version::parse(&a).unwrap(), semver::Version::parse(&other).unwrap());
        prop_assert_eq!(tuf::precedence(&va, &vo), Ordering::Equal, "{} vs {}", a, other);
    }

    #[test]
    fn the_ref_name_is_a_tag_or_refused_and_gives_the_version_back(v in version()) {
        match oci::ref_name_of(&v) {
            Ok(tag) => {
                prop_assert!(tag_regex().is_match(&tag), "{:?} from {:?}", tag, v);
                prop_assert!(oci::is_tag(&tag));
                prop_assert_eq!(oci::version_of_ref(&tag), v.clone());
                // The name older germline versions wrote (the version itself) reads the same.
                prop_assert_eq!(oci::version_of_ref(&v), v.clone());
            }
            Err(e) => {
                prop_assert!(v.len() > 128, "{:?} refused: {}", v, e);
                prop_assert!(e.contains("at most 128"), "{}", e);
            }
        }
    }

    #[test]
    fn is_tag_is_the_oci_tag_grammar(s in "[a-zA-Z0-9._+é/:-]{0,130}") {
        prop_assert_eq!(oci::is_tag(&s), tag_regex().is_match(&s), "{:?}", s);
    }
}

proptest! {
    // Each case writes and renames the state file: fewer cases.
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// The rollback check over the state file: after `seen` was accepted, `offered` is refused
    /// exactly when it is lower in SemVer precedence; a higher one becomes the record, an equal
    /// one leaves it.
    #[test]
    fn check_rollback_refuses_exactly_the_lower_versions(
        seen in version(),
        other in version(),
        same in any::<bool>(),
        build in prop::collection::vec(build_ident(), 0..3),
    ) {
        // Half the cases offer `seen` again with other build metadata (or none): equal in
        // precedence, which independent random versions almost never are.
        let offered = if same {
            let core = seen.split('+').next().unwrap();
            if build.is_empty() { core.to_string() } else { format!("{core}+{}", build.join(".")) }
        } else {
            other
        };
        let d = tempfile::tempdir().unwrap();
        tuf::check_rollback(d.path(), &manifest(&seen)).unwrap();
        let r = tuf::check_rollback(d.path(), &manifest(&offered));
        let state: std::collections::BTreeMap<String, String> =
            serde_json::from_slice(&std::fs::read(d.path().join("seen-versions.json")).unwrap()).unwrap();
        match spec_precedence(&offered, &seen) {
            Ordering::Less => {
                let e = r.expect_err("a lower version is a rollback").to_string();
                prop_assert!(e.starts_with(&format!("rollback refused: mcp-server-demo {offered} is older than {seen}")), "{}", e);
                prop_assert_eq!(&state["mcp-server-demo"], &seen);
            }
            Ordering::Equal => {
                prop_assert_eq!(r.unwrap(), Some(seen.clone()));
                prop_assert_eq!(&state["mcp-server-demo"], &seen);
            }
            Ordering::Greater => {
                prop_assert_eq!(r.unwrap(), Some(seen.clone()));
                prop_assert_eq!(&state["mcp-server-demo"], &offered);
            }
        }
    }
}

/// The case of issue 31: `0.2.1` after `0.2.1+g1` is the same version, not a rollback; a
/// lower version and a pre-release of it are still refused.
#[test]
fn build_metadata_is_not_a_rollback_and_lower_versions_still_are() {
    let d = tempfile::tempdir().unwrap();
    assert_eq!(
        tuf::check_rollback(d.path(), &manifest("0.2.1+g1")).unwrap(),
        None
    );
    assert_eq!(
        tuf::check_rollback(d.path(), &manifest("0.2.1")).unwrap(),
        Some("0.2.1+g1".into())
    );
    assert_eq!(
        tuf::check_rollback(d.path(), &manifest("0.2.1+g2")).unwrap(),
        Some("0.2.1+g1".into())
    );
    for lower in ["0.2.0", "0.2.1-rc.1", "0.2.0+g9"] {
        let e = tuf::check_rollback(d.path(), &manifest(lower))
            .expect_err(lower)
            .to_string();
        assert!(
            e.starts_with(&format!(
                "rollback refused: mcp-server-demo {lower} is older than 0.2.1+g1, already seen"
            )),
            "{e}"
        );
    }
    assert_eq!(
        tuf::check_rollback(d.path(), &manifest("0.2.2-alpha")).unwrap(),
        Some("0.2.1+g1".into())
    );
}

/// A version that cannot become an OCI tag is refused by `pack --image` before any work, with
/// the manifest file and its field named; without an image it packs.
#[test]
fn a_version_that_cannot_be_a_tag_is_refused_at_pack_naming_the_field() {
    let f = common::Fixture::new();
    let long = format!("1.0.0+{}", "b".repeat(130));
    let src = f.path("src");
    common::make_rootfs(&src, "x");
    let m = f.path("m.json");
    std::fs::write(&m, common::manifest_json(&long).to_string()).unwrap();
    let src = germline_release::release::Source::RootfsDir(src);
    let e =
        germline_release::release::pack(&m, &src, Some(&f.key), &f.path("b"), Some(&f.path("i")))
            .expect_err("a 136-character version cannot be a tag")
            .to_string();
    assert_eq!(
        e,
        format!(
            "{}: field `version`: \"{long}\" cannot be an OCI image tag (the image ref name): 136 characters, at most 128",
            m.display()
        )
    );
    assert!(!f.path("b").exists() && !f.path("i").exists());
    germline_release::release::pack(&m, &src, Some(&f.key), &f.path("b"), None)
        .expect("a bundle has no ref name");
}
