//! Plan (paper Algorithm 1, lines 1-4; Section IV-B; Theorem 3).
//!
//! Plan groups the declared destination hosts `D_f` and the consumers `C` of a call by view,
//! splits each view by host clearance, attaches consumers, and orders the groups so that a
//! strictly smaller view runs first. It never reads item contents, and that is structural:
//! [`ItemMeta`] has a name and a label and nothing else.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::label::Label;

/// What Plan knows of an item: its name (public metadata, A5) and its label. No contents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ItemMeta {
    pub name: String,
    pub label: Label,
}

/// A destination host or consumer with its clearance, from the deployer's policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Member {
    pub name: String,
    pub clearance: Label,
}

/// Everything Plan reads: item names and labels, declared hosts and consumers with clearances.
#[derive(Clone, Copy, Debug)]
pub struct PlanInput<'a> {
    pub items: &'a [ItemMeta],
    pub hosts: &'a [Member],
    pub consumers: &'a [Member],
}

/// How runs are chosen. `Split` is germline execution; the others are the evaluation's
/// ablations (Section VII-E).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum PlanMode {
    /// Declared-destination splitting (Algorithm 1).
    #[default]
    Split,
    /// One group holding every item and every member (Germline-NoSplit).
    NoSplit,
    /// Lazy splitting: a full-view run first, a host's copy only if that run contacted it
    /// (Lemma 2: leaks one bit per call and host; for the existence-bit experiment only).
    Lazy,
}

/// One group `g ⊆ D_f ∪ C`, served by one copy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Group {
    /// Destination hosts in `g`, sorted by name. All share one clearance (P2).
    pub hosts: Vec<String>,
    /// Consumers in `g`, sorted by name.
    pub consumers: Vec<String>,
    /// `V(g)`: names of the items every member may see, sorted (P1).
    pub view: Vec<String>,
    /// Join of the labels of the items in the view.
    pub view_label: Label,
    /// `κ(g) = ⋂_{d∈g} c(d)`.
    pub horizon: Label,
}

impl Group {
    pub fn members(&self) -> impl Iterator<Item = &str> {
        self.hosts.iter().chain(&self.consumers).map(String::as_str)
    }

    pub fn has_host(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h == host)
    }

    /// `true` if `view` is a subset of this group's view (both sorted).
    pub fn view_contains(&self, other: &Group) -> bool {
        let mine: BTreeSet<&str> = self.view.iter().map(String::as_str).collect();
        other.view.iter().all(|v| mine.contains(v.as_str()))
    }
}

/// When a group of a lazy plan is forked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForkRule {
    Always,
    /// Forked only if the full-view run sent a request to one of these hosts.
    IfContacted(Vec<String>),
}

/// The groups of a call, in the order their copies run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Plan {
    pub mode: PlanMode,
    pub groups: Vec<Group>,
    /// For [`PlanMode::Lazy`], one rule per group after the first (the full-view run);
    /// empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fork_rules: Vec<ForkRule>,
}

impl std::fmt::Display for PlanMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PlanMode::Split => "declared-destination splitting",
            PlanMode::NoSplit => "no-split ablation",
            PlanMode::Lazy => "lazy-splitting ablation",
        })
    }
}

impl Plan {
    /// Index of the group that serves destination host `host`, if it is declared.
    pub fn group_of_host(&self, host: &str) -> Option<usize> {
        self.groups.iter().position(|g| g.has_host(host))
    }
}

/// Errors in Plan's input: names must identify items and members uniquely.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("item {0:?} appears twice in the call; item names must be unique")]
    DuplicateItem(String),
    #[error("destination host {0:?} is declared twice")]
    DuplicateHost(String),
    #[error("consumer {0:?} appears twice")]
    DuplicateConsumer(String),
}

/// Runs Plan in the given mode.
pub fn plan(input: PlanInput<'_>, mode: PlanMode) -> Result<Plan, PlanError> {
    let items = sorted_items(input.items)?;
    let hosts = sorted_members(input.hosts, PlanError::DuplicateHost)?;
    let consumers = sorted_members(input.consumers, PlanError::DuplicateConsumer)?;
    let groups = match mode {
        PlanMode::Split => split(&items, &hosts, &consumers),
        PlanMode::NoSplit => no_split(&items, &hosts, &consumers).into_iter().collect(),
        PlanMode::Lazy => return Ok(lazy(&items, &hosts, &consumers)),
    };
    Ok(Plan {
        mode,
        groups,
        fork_rules: Vec::new(),
    })
}

fn sorted_items(items: &[ItemMeta]) -> Result<Vec<&ItemMeta>, PlanError> {
    let mut v: Vec<&ItemMeta> = items.iter().collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = v.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(PlanError::DuplicateItem(w[0].name.clone()));
    }
    Ok(v)
}

fn sorted_members(
    members: &[Member],
    dup: fn(String) -> PlanError,
) -> Result<Vec<&Member>, PlanError> {
    let mut v: Vec<&Member> = members.iter().collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = v.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(dup(w[0].name.clone()));
    }
    Ok(v)
}

/// `V(d)` as indices into the sorted items.
fn view_of(items: &[&ItemMeta], clearance: &Label) -> Vec<usize> {
    (0..items.len())
        .filter(|&i| items[i].label.flows_to(clearance))
        .collect()
}

#[derive(Default)]
struct ViewParts<'a> {
    /// Host parts keyed by their common clearance, each with the consumers attached to it.
    host_parts: BTreeMap<&'a Label, (Vec<&'a Member>, Vec<&'a Member>)>,
    /// Consumers of this view that fit no host part.
    extra: Vec<&'a Member>,
}

fn split(items: &[&ItemMeta], hosts: &[&Member], consumers: &[&Member]) -> Vec<Group> {
    // Line 2: group D_f ∪ C by view. Line 3: within a view, hosts of different clearance
    // never share a group.
    let mut views: BTreeMap<Vec<usize>, ViewParts<'_>> = BTreeMap::new();
    for &h in hosts {
        let parts = views.entry(view_of(items, &h.clearance)).or_default();
        parts.host_parts.entry(&h.clearance).or_default().0.push(h);
    }
    // A consumer joins a host part of its view whose clearance lies inside its own (the
    // first in clearance order: any choice gives the minimum); otherwise the view's extra part.
    for &u in consumers {
        let parts = views.entry(view_of(items, &u.clearance)).or_default();
        match parts
            .host_parts
            .iter_mut()
            .find(|(c, _)| c.flows_to(&u.clearance))
        {
            Some((_, part)) => part.1.push(u),
            None => parts.extra.push(u),
        }
    }
    let mut groups = Vec::new();
    for (view, parts) in &views {
        for (hs, us) in parts.host_parts.values() {
            groups.push(group(items, view, hs, us));
        }
        if !parts.extra.is_empty() {
            groups.push(group(items, view, &[], &parts.extra));
        }
    }
    // Line 4 (P3): a strictly smaller view is strictly smaller in size, so a stable sort by
    // size puts it first; ties keep the BTreeMap order, which depends only on Plan's inputs.
    groups.sort_by_key(|g| g.view.len());
    groups
}

fn group(items: &[&ItemMeta], view: &[usize], hosts: &[&Member], consumers: &[&Member]) -> Group {
    let mut horizon: Option<Label> = None;
    for m in hosts.iter().chain(consumers) {
        horizon = Some(match horizon {
            None => m.clearance.clone(),
            Some(h) => h.meet(&m.clearance),
        });
    }
    let mut view_label = Label::public();
    for &i in view {
        view_label.join(&items[i].label);
    }
    Group {
        hosts: hosts.iter().map(|m| m.name.clone()).collect(),
        consumers: consumers.iter().map(|m| m.name.clone()).collect(),
        view: view.iter().map(|&i| items[i].name.clone()).collect(),
        view_label,
        horizon: horizon.unwrap_or_default(),
    }
}

fn no_split(items: &[&ItemMeta], hosts: &[&Member], consumers: &[&Member]) -> Option<Group> {
    if hosts.is_empty() && consumers.is_empty() {
        return None;
    }
    let all: Vec<usize> = (0..items.len()).collect();
    Some(group(items, &all, hosts, consumers))
}

fn lazy(items: &[&ItemMeta], hosts: &[&Member], consumers: &[&Member]) -> Plan {
    let full: Vec<usize> = (0..items.len()).collect();
    let split_groups = split(items, hosts, consumers);
    let (full_view, rest): (Vec<Group>, Vec<Group>) = split_groups
        .into_iter()
        .partition(|g| g.view.len() == full.len());
    // The full-view run serves the members that may see everything; if there are none it is a
    // scout that holds every item, serves nobody and writes only a slot of everything it holds.
    let mut first = match no_split(items, hosts, consumers) {
        Some(g) => g,
        None => {
            return Plan {
                mode: PlanMode::Lazy,
                groups: Vec::new(),
                fork_rules: Vec::new(),
            }
        }
    };
    first.hosts = full_view
        .iter()
        .flat_map(|g| g.hosts.iter().cloned())
        .collect();
    first.consumers = full_view
        .iter()
        .flat_map(|g| g.consumers.iter().cloned())
        .collect();
    first.horizon = match full_view
        .iter()
        .map(|g| g.horizon.clone())
        .reduce(|a, b| a.meet(&b))
    {
        Some(h) => h,
        // A scout serves nobody and returns nothing: it only decides which copies to fork.
        None => first.view_label.clone(),
    };
    let fork_rules = rest
        .iter()
        .map(|g| {
            if g.hosts.is_empty() {
                ForkRule::Always
            } else {
                ForkRule::IfContacted(g.hosts.clone())
            }
        })
        .collect();
    let mut groups = vec![first];
    groups.extend(rest);
    Plan {
        mode: PlanMode::Lazy,
        groups,
        fork_rules,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, c: &[&str]) -> Member {
        Member {
            name: name.into(),
            clearance: Label::of(c),
        }
    }

    fn it(name: &str, l: &[&str]) -> ItemMeta {
        ItemMeta {
            name: name.into(),
            label: Label::of(l),
        }
    }

    /// Fig. 2c: invoice (finance) to ocr.example, salary sheet (hr); the agent is cleared for
    /// both. Two groups, the OCR host's smaller view first.
    #[test]
    fn fig_2c_two_groups_in_order() {
        let items = [it("salary.xlsx", &["hr"]), it("invoice.pdf", &["finance"])];
        let hosts = [m("ocr.example", &["finance"])];
        let consumers = [m("agent", &["finance", "hr"])];
        let p = plan(
            PlanInput {
                items: &items,
                hosts: &hosts,
                consumers: &consumers,
            },
            PlanMode::Split,
        )
        .expect("plan");
        assert_eq!(p.groups.len(), 2);
        assert_eq!(p.groups[0].hosts, ["ocr.example"]);
        assert_eq!(p.groups[0].view, ["invoice.pdf"]);
        assert_eq!(p.groups[0].horizon, Label::of(["finance"]));
        assert_eq!(p.groups[1].consumers, ["agent"]);
        assert_eq!(p.groups[1].view, ["invoice.pdf", "salary.xlsx"]);
        assert_eq!(p.groups[1].horizon, Label::of(["finance", "hr"]));
        assert_eq!(p.groups[1].view_label, Label::of(["finance", "hr"]));
    }

    /// Section IV-A: same view, different clearances: separate copies and slots.
    #[test]
    fn equal_views_split_by_clearance() {
        let hosts = [
            m("ocr.example", &["finance"]),
            m("mail.example", &["projx"]),
        ];
        let consumers = [m("agent", &["finance", "projx"])];
        let p = plan(
            PlanInput {
                items: &[],
                hosts: &hosts,
                consumers: &consumers,
            },
            PlanMode::Split,
        )
        .expect("plan");
        assert_eq!(p.groups.len(), 2);
        assert!(p.groups.iter().all(|g| g.hosts.len() == 1));
        // The agent joins one of the host parts: its clearance holds both.
        assert_eq!(p.groups.iter().map(|g| g.consumers.len()).sum::<usize>(), 1);
    }

    #[test]
    fn nosplit_holds_everything() {
        let items = [it("a", &["hr"]), it("b", &[])];
        let hosts = [m("ocr.example", &[])];
        let consumers = [m("agent", &["hr"])];
        let input = PlanInput {
            items: &items,
            hosts: &hosts,
            consumers: &consumers,
        };
        let p = plan(input, PlanMode::NoSplit).expect("plan");
        assert_eq!(p.groups.len(), 1);
        assert_eq!(p.groups[0].view, ["a", "b"]);
        assert_eq!(p.groups[0].horizon, Label::public());
    }

    #[test]
    fn lazy_forks_hosts_only_if_contacted() {
        let items = [it("secret", &["hr"]), it("invoice", &["finance"])];
        let hosts = [m("ocr.example", &["finance"])];
        let consumers = [m("agent", &["finance", "hr"])];
        let input = PlanInput {
            items: &items,
            hosts: &hosts,
            consumers: &consumers,
        };
        let p = plan(input, PlanMode::Lazy).expect("plan");
        assert_eq!(p.groups[0].view.len(), 2);
        assert_eq!(p.groups[0].consumers, ["agent"]);
        assert_eq!(
            p.fork_rules,
            [ForkRule::IfContacted(vec!["ocr.example".into()])]
        );
    }

    #[test]
    fn duplicates_are_refused() {
        let items = [it("a", &[]), it("a", &["hr"])];
        let input = PlanInput {
            items: &items,
            hosts: &[],
            consumers: &[],
        };
        assert_eq!(
            plan(input, PlanMode::Split),
            Err(PlanError::DuplicateItem("a".into()))
        );
    }
}
