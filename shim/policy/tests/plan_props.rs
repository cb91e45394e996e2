//! Property tests of Plan (issue 2; paper Theorem 3, P1-P3) on random small instances:
//! up to 5 labels, 6 hosts, 3 consumers and 6 items. The minimum is found by exhaustive search
//! over every partition of `D_f ∪ C`, sharing no code with Plan.

use std::collections::BTreeSet;

use germline_policy::plan::{plan, ItemMeta, Member, PlanInput, PlanMode};
use germline_policy::Label;
use proptest::prelude::*;

const TAGS: [&str; 5] = ["t0", "t1", "t2", "t3", "t4"];

fn label(bits: u8, ntags: usize) -> Label {
    Label::of((0..ntags).filter(|i| bits & (1 << i) != 0).map(|i| TAGS[i]))
}

#[derive(Debug, Clone)]
struct Instance {
    items: Vec<ItemMeta>,
    hosts: Vec<Member>,
    consumers: Vec<Member>,
}

fn instance() -> impl Strategy<Value = Instance> {
    (1usize..=5).prop_flat_map(|ntags| {
        let set = 0u8..(1u8 << ntags);
        (
            prop::collection::vec(set.clone(), 0..=6),
            prop::collection::vec(set.clone(), 0..=6),
            prop::collection::vec(set, 0..=3),
        )
            .prop_map(move |(i, h, c)| Instance {
                items: i
                    .iter()
                    .enumerate()
                    .map(|(k, &b)| ItemMeta {
                        name: format!("item{k}"),
                        label: label(b, ntags),
                    })
                    .collect(),
                hosts: h
                    .iter()
                    .enumerate()
                    .map(|(k, &b)| Member {
                        name: format!("h{k}.example"),
                        clearance: label(b, ntags),
                    })
                    .collect(),
                consumers: c
                    .iter()
                    .enumerate()
                    .map(|(k, &b)| Member {
                        name: format!("consumer{k}"),
                        clearance: label(b, ntags),
                    })
                    .collect(),
            })
    })
}

/// A member as the exhaustive search sees it: its view (recomputed here from Definition 2,
/// not taken from Plan), clearance and kind.
#[derive(Clone)]
struct Node {
    view: BTreeSet<String>,
    clearance: Label,
    host: bool,
}

fn nodes(inst: &Instance) -> Vec<Node> {
    let view = |c: &Label| {
        inst.items
            .iter()
            .filter(|x| x.label.flows_to(c))
            .map(|x| x.name.clone())
            .collect()
    };
    let mut v: Vec<Node> = inst
        .hosts
        .iter()
        .map(|h| Node {
            view: view(&h.clearance),
            clearance: h.clearance.clone(),
            host: true,
        })
        .collect();
    v.extend(inst.consumers.iter().map(|u| Node {
        view: view(&u.clearance),
        clearance: u.clearance.clone(),
        host: false,
    }));
    v
}

/// The constraints of issue 2 on one block of a partition.
fn block_ok(block: &[&Node]) -> bool {
    let Some(first) = block.first() else {
        return true;
    };
    if block.iter().any(|n| n.view != first.view) {
        return false;
    }
    let host_clearances: BTreeSet<&Label> = block
        .iter()
        .filter(|n| n.host)
        .map(|n| &n.clearance)
        .collect();
    if host_clearances.len() > 1 {
        return false;
    }
    if let Some(hc) = host_clearances.iter().next() {
        return block
            .iter()
            .filter(|n| !n.host)
            .all(|u| hc.flows_to(&u.clearance));
    }
    true
}

/// Minimum number of blocks over all valid partitions (restricted-growth enumeration).
fn min_partition(nodes: &[Node]) -> usize {
    fn go(nodes: &[Node], i: usize, blocks: &mut Vec<Vec<usize>>, best: &mut usize) {
        if blocks.len() >= *best {
            return;
        }
        if i == nodes.len() {
            *best = blocks.len();
            return;
        }
        for b in 0..blocks.len() {
            blocks[b].push(i);
            let ok = block_ok(&blocks[b].iter().map(|&k| &nodes[k]).collect::<Vec<_>>());
            if ok {
                go(nodes, i + 1, blocks, best);
            }
            blocks[b].pop();
        }
        blocks.push(vec![i]);
        go(nodes, i + 1, blocks, best);
        blocks.pop();
    }
    let mut best = usize::MAX;
    go(nodes, 0, &mut Vec::new(), &mut best);
    if nodes.is_empty() {
        0
    } else {
        best
    }
}

fn input(inst: &Instance) -> PlanInput<'_> {
    PlanInput {
        items: &inst.items,
        hosts: &inst.hosts,
        consumers: &inst.consumers,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// (a) Plan's group count is the exhaustive minimum.
    #[test]
    fn group_count_is_minimal(inst in instance()) {
        let p = plan(input(&inst), PlanMode::Split).expect("plan");
        prop_assert_eq!(p.groups.len(), min_partition(&nodes(&inst)));
    }

    /// (b) the groups partition D_f ∪ C; (c) P1, P2; (d) P3.
    #[test]
    fn partition_views_horizons_order(inst in instance()) {
        let p = plan(input(&inst), PlanMode::Split).expect("plan");
        let mut seen_hosts = Vec::new();
        let mut seen_consumers = Vec::new();
        let clearance = |name: &str| {
            inst.hosts.iter().chain(&inst.consumers).find(|m| m.name == name).map(|m| m.clearance.clone())
        };
        for g in &p.groups {
            prop_assert!(!g.hosts.is_empty() || !g.consumers.is_empty(), "empty group");
            seen_hosts.extend(g.hosts.iter().cloned());
            seen_consumers.extend(g.consumers.iter().cloned());
            // P1: every member's own view is the group's view.
            for name in g.members() {
                let c = clearance(name).expect("member is an input");
                let v: Vec<String> = inst.items.iter().filter(|x| x.label.flows_to(&c)).map(|x| x.name.clone()).collect();
                let mut v = v; v.sort();
                prop_assert_eq!(&v, &g.view);
            }
            // P2: every host of the group has the group's horizon as its clearance.
            for h in &g.hosts {
                prop_assert_eq!(clearance(h).expect("host"), g.horizon.clone());
            }
            // The horizon lies inside every member's clearance.
            for name in g.members() {
                prop_assert!(g.horizon.flows_to(&clearance(name).expect("member")));
            }
        }
        seen_hosts.sort();
        seen_consumers.sort();
        let mut want_hosts: Vec<String> = inst.hosts.iter().map(|h| h.name.clone()).collect();
        let mut want_consumers: Vec<String> = inst.consumers.iter().map(|u| u.name.clone()).collect();
        want_hosts.sort();
        want_consumers.sort();
        prop_assert_eq!(seen_hosts, want_hosts);
        prop_assert_eq!(seen_consumers, want_consumers);
        // P3: V(g') ⊊ V(g) puts g' first.
        for (i, a) in p.groups.iter().enumerate() {
            for b in &p.groups[..i] {
                let a_strictly_inside_b = b.view_contains(a) && a.view.len() < b.view.len();
                prop_assert!(!a_strictly_inside_b, "a later group's view is strictly inside an earlier one's");
            }
        }
    }

    /// (e) The result is a function of labels and clearances only: the order in which the call
    /// lists things does not matter, and renaming items changes nothing but the names.
    #[test]
    fn depends_only_on_labels_and_clearances(inst in instance(), seed in any::<u64>()) {
        let p = plan(input(&inst), PlanMode::Split).expect("plan");
        let mut shuffled = inst.clone();
        let mut s = seed | 1;
        let mut next = move || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; s };
        for v in [&mut shuffled.hosts, &mut shuffled.consumers] {
            for i in (1..v.len()).rev() { let j = (next() % (i as u64 + 1)) as usize; v.swap(i, j); }
        }
        for i in (1..shuffled.items.len()).rev() { let j = (next() % (i as u64 + 1)) as usize; shuffled.items.swap(i, j); }
        prop_assert_eq!(&plan(input(&shuffled), PlanMode::Split).expect("plan"), &p);

        // Rename items (contents never reach Plan, names are public metadata).
        let mut renamed = inst.clone();
        for it in &mut renamed.items { it.name = format!("renamed-{}", it.name); }
        let q = plan(input(&renamed), PlanMode::Split).expect("plan");
        let shape = |p: &germline_policy::Plan, prefix: &str| {
            let mut v: Vec<_> = p.groups.iter().map(|g| (
                g.hosts.clone(), g.consumers.clone(), g.horizon.clone(), g.view_label.clone(),
                g.view.iter().map(|n| n.trim_start_matches(prefix).to_string()).collect::<Vec<_>>(),
            )).collect();
            v.sort();
            v
        };
        prop_assert_eq!(shape(&q, "renamed-"), shape(&p, ""));
    }

    /// NoSplit holds everything in one group; the lazy plan's first run holds every item.
    #[test]
    fn ablations(inst in instance()) {
        let n = plan(input(&inst), PlanMode::NoSplit).expect("plan");
        let members = inst.hosts.len() + inst.consumers.len();
        prop_assert_eq!(n.groups.len(), usize::from(members > 0));
        if let Some(g) = n.groups.first() {
            prop_assert_eq!(g.view.len(), inst.items.len());
        }
        let l = plan(input(&inst), PlanMode::Lazy).expect("plan");
        if let Some(first) = l.groups.first() {
            prop_assert_eq!(first.view.len(), inst.items.len());
            prop_assert_eq!(l.fork_rules.len(), l.groups.len() - 1);
        }
    }
}
