//! Issue 28: file items reach spawned copies. The Node documents server (bundles/corpus-node,
//! the corpus's documents server ported to Node with the official TypeScript SDK) reads the
//! files its arguments name; through `germline run --mode germline` each one is a file of the
//! copy (`/run/items/<name>`, written by the shim through the copy's `/run/items` descriptor
//! before the call), and the official Python client (tests/run/node_items_client.py) gets the
//! same texts as from the unprotected server on the same calls, with germline's labels. A
//! directory argument (a directory item) is at its own path in the copy, each file of it a
//! labelled item.

mod run_common;

use std::path::Path;
use std::process::Command;

use run_common::*;
use serde_json::Value;

const RELEASE: &str = "corpus-node/docs-benign";

/// A one-page PDF in the form the corpus's world writes (tests/security/world.py `pdf`).
fn pdf(lines: &[&str]) -> Vec<u8> {
    let mut ops = vec!["BT /F1 11 Tf 72 760 Td".to_string()];
    for (i, l) in lines.iter().enumerate() {
        ops.push(format!("{}({l}) Tj", if i == 0 { "" } else { "0 -14 Td " }));
    }
    ops.push("ET".into());
    let stream = ops.join("\n");
    format!(
        "%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n4 0 obj\n<< /Length {} \
         >>\nstream\n{stream}\nendstream\nendobj\n%%EOF\n",
        stream.len()
    )
    .into_bytes()
}

fn world(home: &Path) {
    for d in ["hr", "board/notes"] {
        std::fs::create_dir_all(home.join(d)).expect("mkdir");
    }
    std::fs::write(
        home.join("hr/review.md"),
        "# Performance review 2026\nDana exceeded every goal. Promotion proposed.\n",
    )
    .expect("md");
    std::fs::write(
        home.join("board/minutes.pdf"),
        pdf(&[
            "Board minutes, 14 November 2026",
            "Present: Dana Whitfield, chair",
        ]),
    )
    .expect("pdf");
    for (name, text) in [
        ("a.md", "# Agenda\nBudget first. Then hiring.\n"),
        ("b.txt", "Actions\nDana drafts the plan. Due Friday.\n"),
    ] {
        std::fs::write(home.join("board/notes").join(name), text).expect("note");
    }
    std::fs::write(
        home.join("hr/staff.csv"),
        "name,team,salary\nDana Whitfield,Engineering,98000\n",
    )
    .expect("csv");
}

fn session(home: &Path, server: &[String]) -> Value {
    let out = Command::new(agent_python())
        .arg(root().join("tests/run/node_items_client.py"))
        .arg(home)
        .arg("--")
        .args(server)
        .output()
        .expect("client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
    {
        Some(v) if out.status.success() => v,
        _ => panic!(
            "session with {server:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[test]
fn a_node_server_reads_its_file_items_through_spawned_copies_as_unprotected() {
    if !can_run() {
        return;
    }
    let release = bundle(RELEASE);
    if !release.is_dir() {
        assert!(
            std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
            "needs {} (scripts/setup.d/67-corpus-node.sh)",
            release.display()
        );
        return;
    }
    // Not tempfile's default `.tmp` prefix: a policy's `**` matches no hidden directory. Under
    // /tmp: a directory item is mounted on the deepest directory of the rootfs above it, and the
    // Node rootfs has /tmp but no /var.
    let dir = tempfile::Builder::new()
        .prefix("germline-node-items-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let home = dir.path().join("home");
    world(&home);
    // The agent is cleared for both labels: its own copy has every item in view.
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[labels]\nhr = \"personnel records\"\nboard = \"board papers\"\n\n[defaults]\n\
             item_label = []\nhost_clearance = []\nconsumer_clearance = []\n\n\
             [[item]]\npath = \"{h}/hr/**\"\nlabel = [\"hr\"]\n\n\
             [[item]]\npath = \"{h}/board/**\"\nlabel = [\"board\"]\n\n\
             [consumers]\nagent = [\"hr\", \"board\"]\n",
            h = home.display()
        ),
    )
    .expect("policy");
    let germ = session(
        &home,
        &[
            germline().display().to_string(),
            "run".into(),
            "--policy".into(),
            policy.display().to_string(),
            "--key".into(),
            key().display().to_string(),
            "--mode".into(),
            "germline".into(),
            "--no-evidence".into(),
            "--state-dir".into(),
            dir.path().join("state").display().to_string(),
            release.display().to_string(),
        ],
    );
    let plain = session(
        &home,
        &[
            release.join("rootfs/usr/bin/node").display().to_string(),
            release
                .join("rootfs/app/node_modules/corpus-docs-node/server.js")
                .display()
                .to_string(),
        ],
    );
    assert_eq!(germ["texts"], plain["texts"], "texts differ under germline");
    assert_eq!(germ["errors"], plain["errors"]);
    // What was compared is what the files say, not two equal failures.
    assert_eq!(
        germ["texts"]["md"][0],
        "Performance review 2026: Dana exceeded every goal. (10 words)"
    );
    assert_eq!(
        germ["texts"]["pdf"][0],
        "Board minutes, 14 November 2026: Present: Dana Whitfield, chair. (9 words)"
    );
    let both = germ["texts"]["both"][0].as_str().unwrap_or_default();
    assert!(
        both.contains("Present: Dana Whitfield, chair   [Dana Whitfield: Engineering, 98000]"),
        "both items of one call reached the copy: {both}"
    );
    assert_eq!(germ["errors"]["missing"], true);
    // A directory item: its files at their own paths in the copy (a bind of an item store slot).
    assert_eq!(
        germ["texts"]["folder"][0],
        "a.md: Agenda: Budget first. (6 words)\nb.txt: Actions: Dana drafts the plan. (7 words)"
    );
    // Each answer carries the labels of the items it was computed from.
    assert_eq!(germ["labels"]["md"], serde_json::json!(["hr"]));
    assert_eq!(germ["labels"]["pdf"], serde_json::json!(["board"]));
    assert_eq!(germ["labels"]["both"], serde_json::json!(["board", "hr"]));
    assert_eq!(germ["labels"]["folder"], serde_json::json!(["board"]));
    assert_eq!(plain["labels"]["md"], Value::Null);
}
