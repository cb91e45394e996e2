//! `germline plan` and `germline policy check` as a user runs them.

use std::path::PathBuf;
use std::process::{Command, Output};

fn germline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_germline"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run germline")
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// Fig. 2c: two groups in the paper's order, the OCR host first with the invoice alone.
#[test]
fn fig_2c_text_and_json() {
    let args = [
        "plan",
        "--policy",
        "config/policy.example.toml",
        "--call",
        "config/call.fig2c.json",
    ];
    let o = germline(&args);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("2 groups"), "{t}");
    let first = t
        .find("1. members: ocr.example (host)")
        .expect("OCR group first");
    let second = t
        .find("2. members: agent (consumer)")
        .expect("agent group second");
    assert!(first < second);
    assert!(t.contains("hidden:  salary.xlsx"), "{t}");

    let mut json_args = args.to_vec();
    json_args.push("--json");
    let o = germline(&json_args);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let groups = v["plan"]["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 2);
    assert_eq!(groups[0]["hosts"], serde_json::json!(["ocr.example"]));
    assert_eq!(groups[0]["view"], serde_json::json!(["invoice.pdf"]));
    assert_eq!(groups[0]["horizon"], serde_json::json!(["finance"]));
    assert_eq!(groups[1]["consumers"], serde_json::json!(["agent"]));
    assert_eq!(
        groups[1]["view"],
        serde_json::json!(["invoice.pdf", "salary.xlsx"])
    );
}

#[test]
fn nosplit_gives_one_group() {
    let o = germline(&[
        "plan",
        "--policy",
        "config/policy.example.toml",
        "--call",
        "config/call.fig2c.json",
        "--mode",
        "nosplit",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["plan"]["groups"].as_array().map(Vec::len), Some(1));
}

/// A typo in a policy names the file, the line and the field, exits 2, and prints no plan.
#[test]
fn policy_typo_is_reported_with_location() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("policy.toml");
    let good = std::fs::read_to_string(repo().join("config/policy.example.toml")).expect("example");
    std::fs::write(
        &bad,
        good.replace("reuse_below = 750", "reuse_bellow = 750"),
    )
    .expect("write");
    let line = good
        .lines()
        .position(|l| l.starts_with("reuse_below"))
        .expect("line")
        + 1;
    let bad_s = bad.to_string_lossy().into_owned();
    let o = germline(&[
        "plan",
        "--policy",
        &bad_s,
        "--call",
        "config/call.fig2c.json",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("{bad_s}:{line}:")), "{err}");
    assert!(err.contains("unknown field `reuse_bellow`"), "{err}");
    assert!(o.stdout.is_empty());

    let o = germline(&["policy", "check", "config/policy.example.toml"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("p* = 11.0%"));
}

#[test]
fn call_with_undefined_label_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let call = dir.path().join("call.json");
    std::fs::write(
        &call,
        r#"{"function":"f","destinations":["ocr.example"],"items":[{"name":"x","label":["secret"]}]}"#,
    )
    .expect("write");
    let call_s = call.to_string_lossy().into_owned();
    let o = germline(&[
        "plan",
        "--policy",
        "config/policy.example.toml",
        "--call",
        &call_s,
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("items[0]") && err.contains("\"secret\""),
        "{err}"
    );
}

/// Issue 25, item 2: `germline plan` labels a `path` by the file it reaches, as `germline run`
/// does: `public/../hr/salary.csv` and a symlink in `public/` to it are hr, not public.
#[test]
fn plan_labels_a_path_by_the_file_it_reaches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::create_dir_all(d.join("hr")).expect("mkdir");
    std::fs::create_dir_all(d.join("public")).expect("mkdir");
    std::fs::write(d.join("hr/salary.csv"), "alice,1").expect("write");
    std::fs::write(d.join("public/menu.txt"), "soup").expect("write");
    std::os::unix::fs::symlink(d.join("hr/salary.csv"), d.join("public/link.csv")).expect("ln");
    std::os::unix::fs::symlink(d.join("hr"), d.join("public/hrdir")).expect("ln");
    let policy = d.join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            "[labels]\nhr = \"hr\"\nfinance = \"finance\"\n\n[[item]]\npath = \"{d}/hr/**\"\n\
             label = [\"hr\"]\n\n[[item]]\npath = \"{d}/public/**\"\nlabel = []\n\n\
             [destinations]\n\"ocr.example\" = []\n",
            d = d.display()
        ),
    )
    .expect("policy");
    let p = |rel: &str| format!("{}/{rel}", d.display());
    let items = [
        ("dotdot", p("public/../hr/salary.csv")),
        ("link", p("public/link.csv")),
        ("uri", format!("file://{}", p("public/hrdir/salary.csv"))),
        ("absent-below-link", p("public/hrdir/new.csv")),
        ("menu", p("public/menu.txt")),
    ];
    let call = d.join("call.json");
    let json_items: Vec<serde_json::Value> = items
        .iter()
        .map(|(name, s)| {
            let key = if s.starts_with("file:") {
                "uri"
            } else {
                "path"
            };
            serde_json::json!({"name": name, key: s})
        })
        .collect();
    std::fs::write(
        &call,
        serde_json::json!({"function": "f", "destinations": ["ocr.example"], "items": json_items})
            .to_string(),
    )
    .expect("call");
    let o = germline(&[
        "plan",
        "--policy",
        &policy.display().to_string(),
        "--call",
        &call.display().to_string(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let labels: Vec<(String, serde_json::Value)> = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            (
                i["name"].as_str().unwrap_or("").to_string(),
                i["label"].clone(),
            )
        })
        .collect();
    let hr = serde_json::json!(["hr"]);
    let public = serde_json::json!([]);
    assert_eq!(
        labels,
        vec![
            ("dotdot".to_string(), hr.clone()),
            ("link".to_string(), hr.clone()),
            ("uri".to_string(), hr.clone()),
            ("absent-below-link".to_string(), hr),
            ("menu".to_string(), public),
        ]
    );
    // The hr items stay out of ocr.example's view (cleared for nothing).
    let groups = v["plan"]["groups"].as_array().expect("groups");
    assert_eq!(groups[0]["hosts"], serde_json::json!(["ocr.example"]));
    assert_eq!(groups[0]["view"], serde_json::json!(["menu"]));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("resolves to"),
        "{}",
        text(&o)
    );
}

/// Issue 25 item 9: a destination that is an IP literal (accepted on 88bfd6b) makes
/// `germline policy check` exit 2 with file:line:column, the field, what was found and what
/// was expected, and `germline plan` refuses a call item named `..` the same way.
#[test]
fn policy_check_refuses_a_bad_value_with_location() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("policy.toml");
    let good = std::fs::read_to_string(repo().join("config/policy.example.toml")).expect("example");
    let policy = good.replace(
        "\"api.example\" = []",
        "\"api.example\" = []\n\"127.0.0.1\" = []",
    );
    assert_ne!(policy, good);
    std::fs::write(&bad, &policy).expect("write");
    let line = policy
        .lines()
        .position(|l| l.starts_with("\"127.0.0.1\""))
        .expect("line")
        + 1;
    let bad_s = bad.to_string_lossy().into_owned();
    let o = germline(&["policy", "check", &bad_s]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!(
            "{bad_s}:{line}:1: field `destinations.\"127.0.0.1\"`: expected a lowercase DNS host name"
        )),
        "{err}"
    );
    assert!(err.contains("found \"127.0.0.1\""), "{err}");
    assert!(o.stdout.is_empty());

    let call = dir.path().join("call.json");
    std::fs::write(
        &call,
        "{\"function\": \"f\", \"destinations\": [\"ocr.example\"],\n\"items\": [{\"name\": \"..\"}]}",
    )
    .expect("call");
    let call_s = call.to_string_lossy().into_owned();
    let o = germline(&[
        "plan",
        "--policy",
        "config/policy.example.toml",
        "--call",
        &call_s,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("{call_s}:2:")) && err.contains("field `items[0].name`"),
        "{err}"
    );
}
