//! Writes into directory items (issue 27; docs/policy.md "Writes").
//!
//! Every copy writes into its own layer of each directory item (the item store slot bound
//! read-write in that copy only, `germline_sandbox::Copy::tree_layer`). After the call the
//! engine reads the layer of **the agent's copy** (the copy whose group holds the consumer the
//! writes are for: the agent's workspace by default), diffs it against the view the copy was
//! given ([`diff`]), checks each written path with `policy::workspace::commit_allowed`, and
//! commits all of it or nothing (`crate::commit`). Every other copy's layer is dropped with
//! the copy, unread.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use germline_policy::policy::Source;
use germline_policy::workspace::refusals;
use germline_policy::{Label, Policy};
use germline_sandbox::StateFiles;
use serde_json::{json, Value};

use crate::callmeta::{ArgItem, CallMeta, ItemKind};
use crate::commit::{self, sha256, Expected, Op};

/// Most changes one call may commit (files and directories, across its directory items).
pub const MAX_WRITES: usize = 4096;

/// Where a decided commit's journal lives, below the runtime's state directory.
pub fn journal_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("commits")
}

/// The directory items of a call: (where the copy sees it, its trusted host path).
pub fn dirs(meta: &CallMeta) -> Vec<(PathBuf, PathBuf)> {
    let mut out: Vec<(PathBuf, PathBuf)> = meta
        .items
        .iter()
        .filter_map(|i| match &i.kind {
            ItemKind::Dir { host_path, trusted } => Some((host_path.clone(), trusted.clone())),
            _ => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The changes a copy made below the directory item it saw at `copy_root`: `left` is its
/// layer (paths relative to `copy_root`), the view what it was given (its files of that
/// directory in `in_view`). A file the copy could not see and "creates" is a creation whose
/// target must be absent, so it can never overwrite what it did not see.
pub fn diff(
    meta: &CallMeta,
    in_view: &dyn Fn(&ArgItem) -> bool,
    copy_root: &Path,
    left: &StateFiles,
) -> Vec<Op> {
    let mut view: BTreeMap<String, (&[u8], u32)> = BTreeMap::new();
    for i in &meta.items {
        if let ItemKind::TreeFile {
            host_path, mode, ..
        } = &i.kind
        {
            let rel = host_path
                .strip_prefix(copy_root)
                .ok()
                .and_then(Path::to_str);
            if let (Some(rel), true) = (rel, in_view(i)) {
                if !rel.is_empty() {
                    view.insert(rel.to_string(), (&i.contents, *mode));
                }
            }
        }
    }
    let mut view_dirs: BTreeSet<String> = BTreeSet::new();
    for rel in view.keys() {
        let mut p = Path::new(rel.as_str()).parent();
        while let Some(d) = p.and_then(Path::to_str).filter(|d| !d.is_empty()) {
            view_dirs.insert(d.to_string());
            p = Path::new(d).parent();
        }
    }
    let mut ops = Vec::new();
    for d in &left.dirs {
        if !view_dirs.contains(d) {
            ops.push(Op::MkDir { rel: d.clone() });
        }
    }
    let mut seen = BTreeSet::new();
    for (rel, contents) in &left.files {
        seen.insert(rel.as_str());
        match view.get(rel) {
            Some((before, _)) if *before == contents.as_slice() => {}
            Some((before, mode)) => ops.push(Op::Write {
                rel: rel.clone(),
                contents: contents.clone(),
                mode: *mode,
                expected: Expected::Sha256(sha256(before)),
            }),
            None => ops.push(Op::Write {
                rel: rel.clone(),
                contents: contents.clone(),
                mode: 0o644,
                expected: Expected::Absent,
            }),
        }
    }
    for (rel, (before, _)) in &view {
        if !seen.contains(rel.as_str()) {
            ops.push(Op::Delete {
                rel: rel.clone(),
                expected: Expected::Sha256(sha256(before)),
            });
        }
    }
    ops
}

/// `ℓ(P)`: the label the rules give the host path `P` (what its next read is labelled),
/// else the default item label.
pub fn path_label(policy: &Policy, path: &Path) -> Label {
    path.to_str()
        .and_then(|p| policy.rule_label(Source::Path, p))
        .unwrap_or_else(|| policy.default_item_label().clone())
}

/// Commits the agent's copy's writes (`trees`: trusted root, changes, what was skipped) if
/// every written path passes `commit_allowed` for the copy's output `label` and the
/// consumer's `clearance`; returns what the agent's `_meta.germline.writes` says.
pub fn commit_all(
    journal: &Path,
    policy: Option<&Policy>,
    label: &Label,
    clearance: &Label,
    trees: &[(PathBuf, Vec<Op>, Vec<String>)],
) -> Value {
    let count: usize = trees.iter().map(|(_, ops, _)| ops.len()).sum();
    let skipped: Vec<String> = trees
        .iter()
        .flat_map(|(root, _, s)| s.iter().map(move |r| root.join(r).display().to_string()))
        .collect();
    if count == 0 {
        return if skipped.is_empty() {
            Value::Null
        } else {
            json!({"committed": [], "skipped": skipped})
        };
    }
    let refuse = |refused: Value, why: String| json!({"committed": [], "refused": refused, "why": why, "skipped": skipped});
    if count > MAX_WRITES {
        return refuse(
            json!([]),
            format!("the copy made {count} changes, more than {MAX_WRITES}"),
        );
    }
    let Some(policy) = policy else {
        return refuse(json!([]), "no policy labels the written paths".into());
    };
    let labelled: Vec<(String, Label)> = trees
        .iter()
        .flat_map(|(root, ops, _)| {
            ops.iter().map(move |op| {
                let p = root.join(op.rel());
                (p.display().to_string(), path_label(policy, &p))
            })
        })
        .collect();
    let refused = refusals(
        label,
        clearance,
        labelled.iter().map(|(p, l)| (p.as_str(), l)),
    );
    if !refused.is_empty() {
        let list: Vec<Value> = refused
            .iter()
            .map(|(p, why)| json!({"path": p, "why": why.to_string()}))
            .collect();
        return refuse(
            Value::Array(list),
            "a write may not carry what the copy saw to a path or consumer not cleared for it; \
             nothing was committed"
                .into(),
        );
    }
    let mut committed = Vec::new();
    for (root, ops, _) in trees {
        if let Err(e) = commit::commit(journal, root, ops) {
            return json!({
                "committed": committed,
                "refused": [{"path": root.display().to_string(), "why": e.to_string()}],
                "why": "this directory's writes were not committed",
                "skipped": skipped,
            });
        }
        committed.extend(
            ops.iter()
                .map(|op| root.join(op.rel()).display().to_string()),
        );
    }
    json!({"committed": committed, "skipped": skipped})
}

#[cfg(test)]
mod tests {
    use super::*;
    use germline_policy::ArgPath;

    fn file(name: &str, at: &str, contents: &str) -> ArgItem {
        ArgItem {
            name: name.into(),
            arg: ArgPath::default(),
            label: Label::public(),
            kind: ItemKind::TreeFile {
                host_path: PathBuf::from(at),
                mode: 0o640,
                mtime: (0, 0),
            },
            file_name: None,
            contents: contents.as_bytes().to_vec(),
        }
    }

    fn meta(items: Vec<ArgItem>) -> CallMeta {
        CallMeta {
            tool: "t".into(),
            arguments: json!({}),
            items,
            hosts: vec![],
            consumers: vec![],
            progress_token: None,
            traceparent: None,
            tracestate: None,
            policy: None,
        }
    }

    /// Modified, created, removed and a new directory, each against what the copy was shown;
    /// a file outside its view that it "creates" must be absent on the host.
    #[test]
    fn diff_is_against_the_view() {
        let m = meta(vec![
            file("a", "/r/a", "A"),
            file("b", "/r/sub/b", "B"),
            file("same", "/r/same", "S"),
            file("h", "/r/h", "H"),
            file("other", "/elsewhere/x", "X"),
        ]);
        let in_view = |i: &ArgItem| i.name != "h";
        let left = StateFiles {
            files: vec![
                ("a".into(), b"A2".to_vec()),
                ("h".into(), b"mine".to_vec()),
                ("n/c".into(), b"C".to_vec()),
                ("same".into(), b"S".to_vec()),
            ],
            dirs: vec!["n".into(), "sub".into()],
            skipped: vec![],
        };
        let ops = diff(&m, &in_view, Path::new("/r"), &left);
        assert_eq!(
            ops,
            vec![
                Op::MkDir { rel: "n".into() },
                Op::Write {
                    rel: "a".into(),
                    contents: b"A2".to_vec(),
                    mode: 0o640,
                    expected: Expected::Sha256(sha256(b"A")),
                },
                Op::Write {
                    rel: "h".into(),
                    contents: b"mine".to_vec(),
                    mode: 0o644,
                    expected: Expected::Absent,
                },
                Op::Write {
                    rel: "n/c".into(),
                    contents: b"C".to_vec(),
                    mode: 0o644,
                    expected: Expected::Absent,
                },
                Op::Delete {
                    rel: "sub/b".into(),
                    expected: Expected::Sha256(sha256(b"B")),
                },
            ]
        );
    }

    /// One path labelled below what the copy saw refuses the whole commit, and nothing is
    /// written.
    #[test]
    fn one_refused_path_refuses_all() {
        let d = tempfile::tempdir().expect("tmp");
        let root = d.path().join("r");
        std::fs::create_dir_all(root.join("hr")).expect("mkdir");
        let policy = Policy::parse(
            Path::new("p.toml"),
            &format!(
                "[labels]\nhr = \"hr\"\n\n[[item]]\npath = \"{r}/**\"\nlabel = []\n\n\
                 [[item]]\npath = \"{r}/hr/**\"\nlabel = [\"hr\"]\n\n[consumers]\nagent = [\"hr\"]\n",
                r = root.display()
            ),
        )
        .expect("policy");
        let ops = vec![
            Op::Write {
                rel: "hr/notes".into(),
                contents: b"x".to_vec(),
                mode: 0o644,
                expected: Expected::Absent,
            },
            Op::Write {
                rel: "public".into(),
                contents: b"x".to_vec(),
                mode: 0o644,
                expected: Expected::Absent,
            },
        ];
        let hr = Label::of(["hr"]);
        let trees = vec![(root.clone(), ops, vec![])];
        let w = commit_all(&d.path().join("j"), Some(&policy), &hr, &hr, &trees);
        assert_eq!(w["committed"], json!([]), "{w}");
        let refused = w["refused"].as_array().expect("refused");
        assert_eq!(refused.len(), 1, "{w}");
        assert_eq!(
            refused[0]["path"],
            json!(root.join("public").display().to_string())
        );
        assert!(!root.join("hr/notes").exists() && !root.join("public").exists());
        // Public, both commit.
        let w = commit_all(
            &d.path().join("j"),
            Some(&policy),
            &Label::public(),
            &hr,
            &trees,
        );
        assert_eq!(w["committed"].as_array().map(Vec::len), Some(2), "{w}");
        assert_eq!(std::fs::read(root.join("public")).expect("read"), b"x");
    }
}
