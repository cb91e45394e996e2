//! Results for the recipients a tool's manifest names (`consumers` in the manifest, part of
//! `C` in Plan): each recipient gets its own group's result (paper Algorithm 1, line 67), never
//! the agent's. germline hands it over through an outbox directory (`--outbox DIR`), one JSON
//! line per result in `DIR/<recipient>.jsonl`, for whatever delivers mail or posts to pick up;
//! the agent learns only each recipient's name (public metadata) and whether its result went.
//!
//! A result goes out only if its output label flows to the recipient's clearance (a group's
//! label can exceed its view when a slot or reply raised it); under `sig-pin`, which labels
//! nothing, every result goes, as the unprotected server would send it.

use std::io::Write;
use std::path::Path;

use germline_policy::{Label, Member};
use serde_json::{json, Map, Value};

/// One recipient's result of one call.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub consumer: String,
    /// The copy's `CallToolResult`, or `Err` if the recipient's copy failed.
    pub result: Result<Value, String>,
    /// The output label; `None` in modes that label nothing.
    pub label: Option<Label>,
}

/// The file of a recipient's results: its name with anything but `[A-Za-z0-9._@-]` as `_`.
pub fn file_name(consumer: &str) -> String {
    let safe: String = consumer
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._@-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{}.jsonl", safe.trim_start_matches('.'))
}

/// Hands every delivery over (or withholds it) and returns, per recipient, what happened:
/// `delivered`, or why not (the agent reads these in `_meta.germline.recipients`).
pub fn deliver_all(
    outbox: Option<&Path>,
    tool: &str,
    deliveries: Vec<Delivery>,
    consumers: &[Member],
) -> Map<String, Value> {
    let mut status = Map::new();
    for d in deliveries {
        let clearance = consumers
            .iter()
            .find(|m| m.name == d.consumer)
            .map(|m| m.clearance.clone())
            .unwrap_or_else(Label::public);
        let s = match (&d.result, &d.label, outbox) {
            (Err(_), _, _) => "withheld: its copy failed".to_string(),
            (_, Some(l), _) if !l.flows_to(&clearance) => {
                "withheld: its result's label exceeds its clearance".to_string()
            }
            (_, _, None) => "not delivered: germline runs without --outbox".to_string(),
            (Ok(r), label, Some(dir)) => {
                let line =
                    json!({"tool": tool, "consumer": d.consumer, "label": label, "result": r});
                match append(&dir.join(file_name(&d.consumer)), &line) {
                    Ok(()) => "delivered".to_string(),
                    Err(e) => format!("not delivered: {e}"),
                }
            }
        };
        status.insert(d.consumer, Value::String(s));
    }
    status
}

fn append(path: &Path, line: &Value) -> Result<(), String> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    writeln!(f, "{line}").map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_go_only_where_their_label_is_cleared() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bob = Member {
            name: "bob@example.org".into(),
            clearance: Label::of(["finance"]),
        };
        let ok = |label: Option<Label>| Delivery {
            consumer: bob.name.clone(),
            result: Ok(json!({"content": []})),
            label,
        };
        let s = deliver_all(
            Some(dir.path()),
            "t",
            vec![ok(Some(Label::of(["finance"])))],
            std::slice::from_ref(&bob),
        );
        assert_eq!(s["bob@example.org"], "delivered");
        let s = deliver_all(
            Some(dir.path()),
            "t",
            vec![ok(Some(Label::of(["hr"])))],
            std::slice::from_ref(&bob),
        );
        assert!(s["bob@example.org"]
            .as_str()
            .is_some_and(|m| m.starts_with("withheld")));
        let s = deliver_all(None, "t", vec![ok(None)], std::slice::from_ref(&bob));
        assert!(s["bob@example.org"]
            .as_str()
            .is_some_and(|m| m.contains("--outbox")));
        let text = std::fs::read_to_string(dir.path().join("bob@example.org.jsonl")).expect("file");
        assert_eq!(text.lines().count(), 1);
        assert_eq!(file_name("../x y"), "_x_y.jsonl");
    }
}
