//! `germline plan --call` and `germline policy check` show the declared workspaces
//! (`[workspaces."<release>"]`, docs/policy.md "Writes"): which directory, whom its writes are
//! for and with what clearance, and in the plan which group holds `workspace:<dir>` (the group
//! whose copy's writes commit there).

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};

fn germline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_germline"))
        .args(args)
        .output()
        .expect("run germline")
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

const POLICY: &str = r#"[labels]
hr = "personnel records"
finance = "invoices"

[[item]]
path = "/srv/co/hr/**"
label = ["hr"]

[[item]]
path = "/srv/co/finance/**"
label = ["finance"]

[consumers]
agent = ["hr", "finance"]
reviewer = ["finance"]

[workspaces."mcp-server-git"]
"/srv/repo" = { consumer = "reviewer" }
"/srv/notes" = { clearance = [] }
"/srv/mine" = {}
"#;

fn files(d: &Path, release: &str) -> (String, String) {
    let policy = d.join("policy.toml");
    std::fs::write(&policy, POLICY).expect("policy");
    let call = d.join("call.json");
    let spec = json!({
        "release": release,
        "function": "git_status",
        "items": [
            {"name": "salary.csv", "path": "/srv/co/hr/salary.csv"},
            {"name": "inv.pdf", "path": "/srv/co/finance/inv.pdf"}
        ],
        "destinations": [],
        "consumers": ["agent"]
    });
    std::fs::write(&call, spec.to_string()).expect("call");
    (policy.display().to_string(), call.display().to_string())
}

/// The 1-based group holding consumer `name` in `germline plan --json`'s answer.
fn group_of(v: &Value, name: &str) -> usize {
    v["plan"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .position(|g| {
            g["consumers"]
                .as_array()
                .is_some_and(|c| c.iter().any(|x| x == name))
        })
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("no group holds {name}: {v}"))
}

#[test]
fn plan_places_each_declared_workspace_and_says_which_group_holds_it() {
    let d = tempfile::tempdir().expect("tempdir");
    let (policy, call) = files(d.path(), "mcp-server-git@2026.1.0");
    let o = germline(&["plan", "--policy", &policy, "--call", &call, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    // The agent's own (default) workspace shares the agent's group; the reviewer's (cleared
    // for finance only) gets a group that sees only the invoice; the one cleared for nothing
    // a group that sees no item.
    let agent = group_of(&v, "agent");
    let (repo, notes, mine) = (
        group_of(&v, "workspace:/srv/repo"),
        group_of(&v, "workspace:/srv/notes"),
        group_of(&v, "workspace:/srv/mine"),
    );
    assert_eq!(mine, agent, "{v}");
    assert!(repo != agent && notes != agent && repo != notes, "{v}");
    let view = |g: usize| v["plan"]["groups"][g - 1]["view"].clone();
    assert_eq!(view(repo), json!(["inv.pdf"]));
    assert_eq!(view(notes), json!([]));
    let ws = v["workspaces"].as_array().expect("workspaces");
    assert_eq!(ws.len(), 3, "{v}");
    let entry = |name: &str| {
        ws.iter()
            .find(|w| w["consumer"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {v}"))
    };
    assert_eq!(
        entry("workspace:/srv/repo"),
        json!({"consumer": "workspace:/srv/repo", "for": "consumer reviewer",
               "clearance": ["finance"], "group": repo})
    );
    assert_eq!(
        entry("workspace:/srv/notes"),
        json!({"consumer": "workspace:/srv/notes", "for": "its own clearance",
               "clearance": [], "group": notes})
    );
    assert_eq!(
        entry("workspace:/srv/mine"),
        json!({"consumer": "workspace:/srv/mine", "for": "the agent",
               "clearance": ["finance", "hr"], "group": mine})
    );

    // The same as text.
    let o = germline(&["plan", "--policy", &policy, "--call", &call]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("workspace:/srv/repo (consumer)"), "{t}");
    for line in [
        "Declared workspaces (writes committed from the copy of the group that holds each):"
            .to_string(),
        format!(
            "  workspace:/srv/repo: for consumer reviewer (clearance {{finance}}), held by group {repo}"
        ),
        format!(
            "  workspace:/srv/notes: for its own clearance (clearance {{}}), held by group {notes}"
        ),
        format!(
            "  workspace:/srv/mine: for the agent (clearance {{finance, hr}}), held by group {mine}"
        ),
    ] {
        assert!(t.lines().any(|l| l == line), "missing {line:?} in:\n{t}");
    }
}

#[test]
fn plan_of_another_release_shows_no_workspace() {
    let d = tempfile::tempdir().expect("tempdir");
    let (policy, call) = files(d.path(), "other-tool");
    let o = germline(&["plan", "--policy", &policy, "--call", &call, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["workspaces"], json!([]));
    assert_eq!(v["plan"]["groups"].as_array().map(Vec::len), Some(1));
    let o = germline(&["plan", "--policy", &policy, "--call", &call]);
    assert!(!text(&o).contains("workspace"), "{}", text(&o));
}

#[test]
fn policy_check_lists_the_declared_workspaces() {
    let d = tempfile::tempdir().expect("tempdir");
    let (policy, _) = files(d.path(), "mcp-server-git");
    let o = germline(&["policy", "check", &policy]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    for line in [
        "  workspace of mcp-server-git: /srv/mine -> writes for the agent (clearance {finance, hr}), consumer workspace:/srv/mine",
        "  workspace of mcp-server-git: /srv/notes -> writes for its own clearance (clearance {}), consumer workspace:/srv/notes",
        "  workspace of mcp-server-git: /srv/repo -> writes for consumer reviewer (clearance {finance}), consumer workspace:/srv/repo",
    ] {
        assert!(t.lines().any(|l| l == line), "missing {line:?} in:\n{t}");
    }
    let o = germline(&["policy", "check", &policy, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("json");
    let ws = v["workspaces"].as_array().expect("workspaces");
    assert_eq!(ws.len(), 3, "{v}");
    assert!(
        ws.contains(&json!({"release": "mcp-server-git", "path": "/srv/repo",
        "consumer": "workspace:/srv/repo", "for": "consumer reviewer", "clearance": ["finance"]})),
        "{v}"
    );
}
