//! `workspace::commit_allowed` (issue 27, docs/policy.md "Writes"): a write commits exactly
//! when the copy's label flows to both the path's label and the consumer's clearance, so no
//! committed write ever carries an item to a place, or a consumer, not cleared for it.

use germline_policy::workspace::{commit_allowed, refusals, WriteRefusal};
use germline_policy::Label;
use proptest::prelude::*;

const TAGS: [&str; 4] = ["hr", "finance", "legal", "medical"];

fn label() -> impl Strategy<Value = Label> {
    prop::collection::vec(0..TAGS.len(), 0..4)
        .prop_map(|v| Label::of(v.into_iter().map(|i| TAGS[i])))
}

proptest! {
    #[test]
    fn allowed_iff_below_both(l in label(), p in label(), c in label()) {
        let ok = commit_allowed(&l, &p, &c).is_ok();
        prop_assert_eq!(ok, l.flows_to(&p) && l.flows_to(&c));
    }

    /// What a committed write holds (at most `l`) is then readable only under `ℓ(P)` and was
    /// for a consumer cleared for it: every tag of `l` is in both.
    #[test]
    fn committed_tags_are_cleared(l in label(), p in label(), c in label()) {
        if commit_allowed(&l, &p, &c).is_ok() {
            for t in l.tags() {
                prop_assert!(p.contains(t) && c.contains(t));
            }
        }
    }

    /// A refusal names exactly the tags missing from the label it was refused by.
    #[test]
    fn refusal_names_what_is_missing(l in label(), p in label(), c in label()) {
        match commit_allowed(&l, &p, &c) {
            Ok(()) => {}
            Err(WriteRefusal::AbovePath { missing }) => {
                prop_assert!(!missing.is_empty());
                for t in l.tags() {
                    prop_assert_eq!(missing.contains(t), !p.contains(t));
                }
            }
            Err(WriteRefusal::AboveConsumer { missing }) => {
                prop_assert!(l.flows_to(&p) && !missing.is_empty());
                for t in l.tags() {
                    prop_assert_eq!(missing.contains(t), !c.contains(t));
                }
            }
        }
    }

    /// One path refused refuses the commit: `refusals` is empty only if every path is allowed.
    #[test]
    fn whole_commit(l in label(), c in label(), ps in prop::collection::vec(label(), 0..6)) {
        let names: Vec<String> = (0..ps.len()).map(|i| format!("f{i}")).collect();
        let r = refusals(&l, &c, names.iter().map(String::as_str).zip(ps.iter()));
        let all_ok = ps.iter().all(|p| commit_allowed(&l, p, &c).is_ok());
        prop_assert_eq!(r.is_empty(), all_ok);
        prop_assert_eq!(r.len(), ps.iter().filter(|p| commit_allowed(&l, p, &c).is_err()).count());
    }
}

#[test]
fn public_write_to_a_public_path_commits() {
    assert!(commit_allowed(&Label::public(), &Label::public(), &Label::public()).is_ok());
    let hr = Label::of(["hr"]);
    assert!(matches!(
        commit_allowed(&hr, &Label::public(), &hr),
        Err(WriteRefusal::AbovePath { .. })
    ));
    assert!(matches!(
        commit_allowed(&hr, &hr, &Label::of(["finance"])),
        Err(WriteRefusal::AboveConsumer { .. })
    ));
}
