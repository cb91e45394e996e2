//! `[workspaces]` (issue 27, docs/policy.md "Writes"): which declared workspace a written
//! directory belongs to, and whose clearance its writes are checked against. The policy
//! accepts a release's workspaces exactly when none lies inside another, so at most one
//! covers a directory, and it is the one at or above it component by component (`/a/b` never
//! covers `/a/bc`); a directory no workspace covers is the agent's, with the agent's
//! clearance.

use std::path::{Path, PathBuf};

use germline_policy::{Label, Policy};
use proptest::prelude::*;

/// Paths over a tiny alphabet, so that nesting, equality and shared text prefixes (`/a` and
/// `/ab`) all come up often.
fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!["a", "ab", "b"]), 1..4)
        .prop_map(|c| format!("/{}", c.join("/")))
}

/// Whose a workspace is: the agent's (0), the reviewer's (1), or public (2).
fn owner() -> impl Strategy<Value = u8> {
    0u8..3
}

fn policy(entries: &[(String, u8)]) -> Result<Policy, String> {
    let mut text = String::from(
        "[labels]\nhr = \"hr\"\nfinance = \"finance\"\n\n[consumers]\nagent = [\"hr\", \
         \"finance\"]\nreviewer = [\"finance\"]\n\n[workspaces.r]\n",
    );
    for (p, o) in entries {
        let v = match o {
            0 => "{}",
            1 => "{ consumer = \"reviewer\" }",
            _ => "{ clearance = [] }",
        };
        text.push_str(&format!("{p:?} = {v}\n"));
    }
    Policy::parse(Path::new("p.toml"), &text).map_err(|e| e.to_string())
}

/// Component-wise "at or below".
fn below(p: &str, w: &str) -> bool {
    p == w || p.starts_with(&format!("{w}/"))
}

proptest! {
    #[test]
    fn accepted_iff_no_nesting_and_the_cover_is_the_one_above(
        entries in prop::collection::btree_map(path(), owner(), 1..5),
        probe in path(),
    ) {
        let entries: Vec<(String, u8)> = entries.into_iter().collect();
        let nested = entries.iter().any(|(a, _)| {
            entries.iter().any(|(b, _)| a != b && below(a, b))
        });
        let parsed = policy(&entries);
        prop_assert_eq!(parsed.is_err(), nested, "{:?}", parsed.as_ref().err());
        let Ok(p) = parsed else { return Ok(()); };
        let agent = Label::of(["hr", "finance"]);
        let m = p.workspace_member("r", &PathBuf::from(&probe), &agent);
        let covering: Vec<&(String, u8)> =
            entries.iter().filter(|(w, _)| below(&probe, w)).collect();
        prop_assert!(covering.len() <= 1);
        match covering.first() {
            Some((w, o)) => {
                prop_assert_eq!(&m.name, &format!("workspace:{w}"));
                let want = match o {
                    0 => agent.clone(),
                    1 => Label::of(["finance"]),
                    _ => Label::public(),
                };
                prop_assert_eq!(m.clearance, want);
            }
            None => {
                prop_assert_eq!(&m.name, &format!("workspace:{probe}"));
                prop_assert_eq!(m.clearance, agent);
            }
        }
        // Another release has no workspace: every directory is the agent's.
        let other = p.workspace_member("s", &PathBuf::from(&probe), &Label::public());
        prop_assert_eq!(other.clearance, Label::public());
    }
}
