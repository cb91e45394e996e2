//! Workspaces (issue 27; docs/policy.md "Writes"): for whom a call's writes are, and so which
//! one copy's writes are committed.
//!
//! Each directory item a copy may write into belongs to one workspace: the release's declared
//! workspace covering it (`[workspaces]`, whose directories every call of the release gets as
//! directory items, [`add_declared`]), else the agent's own. A workspace is a consumer in
//! Plan's `C` (`workspace:<path>`, with the clearance the policy gives it, by default the
//! agent's), so Plan places it in a group like any consumer; the copy of that group is the
//! one whose layers of the workspace's directories are read back and committed
//! ([`for_group`]), checked against that consumer's clearance. Every other copy's layers are
//! dropped with it, unread.

use std::collections::BTreeMap;
use std::path::PathBuf;

use germline_policy::plan::Group;
use germline_policy::workspace::{is_workspace_consumer, WORKSPACE_PREFIX};
use germline_policy::{ArgPath, Label, Member, Policy};
use serde_json::{json, Value};

use crate::callmeta::{self, CallMeta, CallMetaError};
use crate::treeitem;

/// One workspace of a call: the consumer Plan places, and its directory items (where the
/// copies see each, its trusted host path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallWorkspace {
    pub member: Member,
    pub dirs: Vec<(PathBuf, PathBuf)>,
}

/// The workspaces of `meta`'s directory items, for the release named `release`, each with the
/// directories whose writes are for it. With no policy every directory is the agent's
/// workspace (and its writes are refused: no rule labels the paths).
pub fn of_call(meta: &CallMeta, release: &str) -> Vec<CallWorkspace> {
    let agent = crate::runtime::agent_clearance_of(meta);
    let mut out: Vec<CallWorkspace> = Vec::new();
    for (seen_at, trusted) in crate::writes::dirs(meta) {
        let member = match meta.policy.as_deref() {
            Some(p) => p.workspace_member(release, &trusted, &agent),
            None => Member {
                name: format!("{WORKSPACE_PREFIX}{}", trusted.display()),
                clearance: agent.clone(),
            },
        };
        match out.iter_mut().find(|w| w.member.name == member.name) {
            Some(w) => w.dirs.push((seen_at, trusted)),
            None => out.push(CallWorkspace {
                member,
                dirs: vec![(seen_at, trusted)],
            }),
        }
    }
    out
}

/// What one group's copy commits: the directories of the workspaces the group holds, for
/// whom (their consumer names) and the clearance the writes are checked against (the meet of
/// theirs: a write must be cleared for every workspace it is committed for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commits {
    pub dirs: Vec<(PathBuf, PathBuf)>,
    pub for_: Vec<String>,
    pub clearance: Label,
}

/// The commits of `group`'s copy: `None` when the group holds no workspace of the call (its
/// copy's layers are dropped unread).
pub fn for_group(workspaces: &[CallWorkspace], group: &Group) -> Option<Commits> {
    let mine: Vec<&CallWorkspace> = workspaces
        .iter()
        .filter(|w| group.consumers.iter().any(|c| c == &w.member.name))
        .collect();
    let first = mine.first()?;
    let mut clearance = first.member.clearance.clone();
    for w in &mine[1..] {
        clearance = clearance.meet(&w.member.clearance);
    }
    Some(Commits {
        dirs: mine.iter().flat_map(|w| w.dirs.iter().cloned()).collect(),
        for_: mine.iter().map(|w| w.member.name.clone()).collect(),
        clearance,
    })
}

/// Whether the consumer `name` is a workspace (its "result" is the writes committed to it:
/// nothing is delivered to it).
pub fn is_workspace(name: &str) -> bool {
    is_workspace_consumer(name)
}

/// Adds the release's declared workspaces (`[workspaces]`) to the call as directory items,
/// labelled file by file as an argument's directory is: a server configured with a root
/// directory works on it though no argument names it. A declared directory that an
/// argument's directory item already is, lies inside or contains is not added again (the
/// argument's item stands; its writes are still the declared workspace's when it lies inside).
pub fn add_declared(
    meta: &mut CallMeta,
    policy: &Policy,
    release: &str,
) -> Result<(), CallMetaError> {
    let named: Vec<PathBuf> = crate::writes::dirs(meta)
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    for w in policy.workspaces(release) {
        if named
            .iter()
            .any(|d| d.starts_with(&w.path) || w.path.starts_with(d))
        {
            continue;
        }
        let Some(text) = w.path.to_str() else {
            continue;
        };
        let unreadable = |reason: String| CallMetaError::Unreadable {
            arg: format!("[workspaces] of {release}"),
            path: text.to_string(),
            reason,
        };
        let Some(spelling) = crate::fileitem::Spelling::of(text) else {
            return Err(unreadable("not a path".into()));
        };
        let tree = match treeitem::open_tree(policy, spelling, callmeta::MAX_ITEM_BYTES) {
            Ok(Some(t)) => t,
            Ok(None) => return Err(unreadable("not a directory".into())),
            Err(e) => return Err(unreadable(e.why())),
        };
        callmeta::push_tree(
            &mut meta.items,
            policy,
            &BTreeMap::new(),
            &ArgPath::default(),
            text,
            tree,
        )?;
    }
    Ok(())
}

/// What the agent's `_meta.germline.writes` says of the commit `w` of a copy committing for
/// `commits`: `w` with `"for"` (the workspaces' consumer names) when every workspace it
/// committed for has a clearance inside the agent's (`agent`), so what that copy saw is all
/// the agent may see; otherwise only that writes were made for them. The choice depends on
/// the policy alone, never on what the copy did.
pub fn told_agent(mut w: Value, commits: &Commits, agent: &Label) -> Value {
    if commits.clearance.flows_to(agent) {
        w["for"] = json!(commits.for_);
        w
    } else {
        json!({
            "for": commits.for_,
            "withheld": "the copy that wrote for these workspaces may see items the agent is \
                         not cleared for: what it committed is not shown to the agent",
        })
    }
}

/// Two copies' `_meta.germline.writes` as one (a call whose workspaces are in several
/// groups): the lists joined, the first reason kept.
pub fn merge(a: Option<Value>, b: Value) -> Value {
    let Some(mut a) = a else {
        return b;
    };
    let (Some(am), Value::Object(bm)) = (a.as_object_mut(), b) else {
        return a;
    };
    for (k, v) in bm {
        match (am.get_mut(&k), v) {
            (Some(Value::Array(x)), Value::Array(y)) => x.extend(y),
            (None, v) => {
                am.insert(k, v);
            }
            _ => {}
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use germline_policy::plan::{plan, PlanInput};
    use germline_policy::{ItemMeta, PlanMode};

    /// The manifest refuses recipients named as Plan names workspaces: one prefix for both
    /// (the release crate cannot see the policy crate's constant).
    #[test]
    fn manifests_refuse_the_names_plan_gives_workspaces() {
        assert_eq!(
            WORKSPACE_PREFIX,
            germline_release::manifest::WORKSPACE_NAMES
        );
    }

    fn member(name: &str, tags: &[&str]) -> Member {
        Member {
            name: name.into(),
            clearance: Label::of(tags.iter().copied()),
        }
    }

    fn ws(path: &str, tags: &[&str]) -> CallWorkspace {
        CallWorkspace {
            member: member(&format!("{WORKSPACE_PREFIX}{path}"), tags),
            dirs: vec![(PathBuf::from(path), PathBuf::from(path))],
        }
    }

    /// Plan places each workspace: one with the agent's clearance shares the agent's group
    /// (whose copy commits, as before workspaces), one cleared for less gets a group of its
    /// own, and only that group's copy commits for it; no other group commits anything.
    #[test]
    fn the_group_holding_the_workspace_commits_for_it() {
        let items = [
            ItemMeta {
                name: "/r/a".into(),
                label: Label::public(),
            },
            ItemMeta {
                name: "/r/hr/x".into(),
                label: Label::of(["hr"]),
            },
        ];
        let mine = ws("/mine", &["hr"]);
        let theirs = ws("/r", &[]);
        let workspaces = [mine.clone(), theirs.clone()];
        let mut consumers = vec![member("agent", &["hr"])];
        consumers.extend(workspaces.iter().map(|w| w.member.clone()));
        let p = plan(
            PlanInput {
                items: &items,
                hosts: &[],
                consumers: &consumers,
            },
            PlanMode::Split,
        )
        .expect("plan");
        assert_eq!(p.groups.len(), 2);
        let agent = p
            .groups
            .iter()
            .find(|g| g.consumers.iter().any(|c| c == "agent"))
            .expect("agent's group");
        let c = for_group(&workspaces, agent).expect("the agent's group commits");
        assert_eq!(c.for_, vec![mine.member.name.clone()]);
        assert_eq!(c.dirs, mine.dirs);
        assert_eq!(c.clearance, Label::of(["hr"]));
        let other = p
            .groups
            .iter()
            .find(|g| !g.consumers.iter().any(|c| c == "agent"))
            .expect("the workspace's group");
        let c = for_group(&workspaces, other).expect("its group commits");
        assert_eq!(c.for_, vec![theirs.member.name.clone()]);
        assert_eq!(c.clearance, Label::public());
        assert!(
            for_group(&[], agent).is_none(),
            "no workspace: nothing commits"
        );
        // Two workspaces in one group: checked against the meet of their clearances.
        let two = [ws("/a", &["hr", "finance"]), ws("/b", &["finance"])];
        let g = Group {
            hosts: vec![],
            consumers: two.iter().map(|w| w.member.name.clone()).collect(),
            view: vec![],
            view_label: Label::public(),
            horizon: Label::public(),
        };
        let c = for_group(&two, &g).expect("commits");
        assert_eq!(c.clearance, Label::of(["finance"]));
        assert_eq!(c.dirs.len(), 2);
    }

    /// The agent is told what another workspace's copy committed only when that workspace's
    /// clearance lies inside its own.
    #[test]
    fn the_agent_is_told_only_within_its_clearance() {
        let commits = |tags: &[&str]| Commits {
            dirs: vec![],
            for_: vec!["workspace:/r".into()],
            clearance: Label::of(tags.iter().copied()),
        };
        let w = json!({"committed": ["/r/.git/index"]});
        let hr = Label::of(["hr"]);
        let told = told_agent(w.clone(), &commits(&[]), &hr);
        assert_eq!(told["committed"], w["committed"]);
        assert_eq!(told["for"], json!(["workspace:/r"]));
        let told = told_agent(w, &commits(&["hr", "finance"]), &hr);
        assert!(told.get("committed").is_none(), "{told}");
        assert!(told["withheld"].is_string(), "{told}");
        let m = merge(
            Some(json!({"committed": ["/a"], "for": ["workspace:/a"]})),
            json!({"committed": ["/b"], "for": ["workspace:/b"], "why": "x"}),
        );
        assert_eq!(m["committed"], json!(["/a", "/b"]));
        assert_eq!(m["for"], json!(["workspace:/a", "workspace:/b"]));
        assert_eq!(m["why"], json!("x"));
    }
}
