//! docs/manifest.schema.json and the Rust parser agree: the same manifests are accepted and
//! refused by both (the schema checked with Python's `jsonschema`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use germline_release::manifest::Manifest;
use std::process::Command;

#[test]
fn schema_and_parser_agree() {
    let py = venv_python();
    if !have(&py, "python venv with jsonschema") {
        return;
    }
    let base = manifest_json("1.0.0");
    let mut cases: Vec<(&str, serde_json::Value, bool)> = vec![("valid", base.clone(), true)];
    let mut add = |name: &'static str, expect: bool, edit: &dyn Fn(&mut serde_json::Value)| {
        let mut v = base.clone();
        edit(&mut v);
        cases.push((name, v, expect));
    };
    add("unknown top-level field", false, &|v| {
        v["egress"] = serde_json::json!(true)
    });
    add("unknown tool field", false, &|v| {
        v["tools"]["post"]["x"] = serde_json::json!(1)
    });
    add("missing destinations", false, &|v| {
        v["tools"]["post"] = serde_json::json!({})
    });
    add("empty destinations", false, &|v| {
        v["tools"]["post"]["destinations"] = serde_json::json!({})
    });
    add("hosts and rule", false, &|v| {
        v["tools"]["post"]["destinations"] =
            serde_json::json!({"hosts": [], "host_of_argument": "u"})
    });
    add("no hosts is fine", true, &|v| {
        v["tools"]["post"]["destinations"] = serde_json::json!({"hosts": []})
    });
    add("upper-case host", false, &|v| {
        v["tools"]["post"]["destinations"] = serde_json::json!({"hosts": ["Api.example.org"]})
    });
    add("bad version", false, &|v| {
        v["version"] = serde_json::json!("1.0")
    });
    add("prerelease version", true, &|v| {
        v["version"] = serde_json::json!("1.0.0-rc.1")
    });
    add("relative readable path", false, &|v| {
        v["readable_paths"] = serde_json::json!(["usr"])
    });
    add("dotdot readable path", false, &|v| {
        v["readable_paths"] = serde_json::json!(["/usr/../etc"])
    });
    add("a declared flow", true, &|v| {
        let host = v["tools"]["post"]["destinations"]["hosts"][0].clone();
        v["tools"]["post"]["flows"] = serde_json::json!([{"argument": "body", "to": host}])
    });
    add("a flow without a destination", false, &|v| {
        v["tools"]["post"]["flows"] = serde_json::json!([{"argument": "body"}])
    });
    add("a flow with two destinations", false, &|v| {
        v["tools"]["post"]["flows"] = serde_json::json!([{"argument": "body",
            "to": "a.example", "to_host_of_argument": "url"}])
    });
    add("a flow with an unknown field", false, &|v| {
        v["tools"]["post"]["flows"] = serde_json::json!([{"argument": "body", "host": "a"}])
    });
    add("a flow with an empty argument", false, &|v| {
        let host = v["tools"]["post"]["destinations"]["hosts"][0].clone();
        v["tools"]["post"]["flows"] = serde_json::json!([{"argument": "", "to": host}])
    });
    add("no tools", false, &|v| v["tools"] = serde_json::json!({}));
    add("missing deterministic", false, &|v| {
        v.as_object_mut().unwrap().remove("deterministic");
    });
    add("wrong schema", false, &|v| {
        v["schema"] = serde_json::json!("other/v9")
    });
    add(
        "pinned rootfs",
        true,
        &|v| v["rootfs"] = serde_json::json!({"digest": format!("sha256:{}", "a".repeat(64)), "algorithm": "germline-tree-v1"}),
    );
    add(
        "bad pin",
        false,
        &|v| {
            v["rootfs"] =
                serde_json::json!({"digest": "sha256:zz", "algorithm": "germline-tree-v1"})
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for (i, (_, v, _)) in cases.iter().enumerate() {
        let p = dir.path().join(format!("case{i}.json"));
        std::fs::write(&p, v.to_string()).unwrap();
        paths.push(p);
    }
    let (_, out, err) = run(Command::new(&py)
        .arg(python_script("validate_manifest.py"))
        .arg(repo_root().join("docs/manifest.schema.json"))
        .args(&paths));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), cases.len(), "validator output: {out}{err}");
    for (((name, v, expect), line), p) in cases.iter().zip(lines).zip(&paths) {
        let schema_ok = line.starts_with("valid ");
        let rust = Manifest::parse(&serde_json::to_vec(v).unwrap(), &p.display().to_string());
        assert_eq!(schema_ok, *expect, "{name}: schema says {line}");
        assert_eq!(rust.is_ok(), *expect, "{name}: parser says {rust:?}");
    }
    // The example manifests conform too.
    let examples: Vec<_> = ["mcp-server-time", "mcp-server-fetch"]
        .iter()
        .map(|n| repo_root().join("bundles").join(n).join("manifest.json"))
        .collect();
    let (ok, out, _) = run(Command::new(&py)
        .arg(python_script("validate_manifest.py"))
        .arg(repo_root().join("docs/manifest.schema.json"))
        .args(&examples));
    assert!(ok, "{out}");
    for e in &examples {
        Manifest::parse(&std::fs::read(e).unwrap(), &e.display().to_string()).unwrap();
    }
}
