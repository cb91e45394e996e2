//! Declared flows (an extension of A5; docs/release.md, docs/evidence.md).
//!
//! A release's manifest may declare that a tool sends an argument to one of its destinations
//! (`flows = [{"argument": "file", "to": "ocr.example"}]`). Such a flow is the tool's job, not a
//! leak: when the agent hands it an item the destination is not cleared for, the copy that
//! serves that destination sees the item empty, the agent's copy sends it, the tripwire fires,
//! and the probe replay would blame the release for what the *agent* asked. So the front end
//! refuses such a call here, from public metadata only (item names, labels, hosts, the signed
//! manifest), before the evidence layer admits it and before any copy runs. Nothing is recorded
//! against the release: no trigger, no witness, no penalty, no dampening attempt.
//!
//! Whatever the release does *not* declare still reaches the tripwire and the evidence layer
//! as before.

use germline_policy::{Label, Member, Seg};
use germline_release::manifest::Tool;

use crate::callmeta::{ArgItem, CallMeta};

/// A call refused because a declared flow would carry an item to a host not cleared for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRefusal {
    pub tool: String,
    pub argument: String,
    /// The item's public name (its path, URI or `argument:<name>`).
    pub item: String,
    pub label: Label,
    pub host: String,
    /// The host's clearance, `None` when the call has no clearance for it (fail closed).
    pub clearance: Option<Label>,
}

impl std::fmt::Display for FlowRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let clearance = self.clearance.as_ref().map_or_else(
            || "no clearance".to_string(),
            |c| format!("clearance {{{}}}", c.canonical()),
        );
        write!(
            f,
            "declared flow refused: tool `{}` sends argument `{}` to {} (its manifest declares \
             this flow), but item {} has label {{{}}} and {} has {}; the call was not run and \
             nothing is held against the release",
            self.tool,
            self.argument,
            self.host,
            self.item,
            self.label.canonical(),
            self.host,
            clearance
        )
    }
}

/// Whether an item came from (or from under) the top-level argument `argument`: its
/// structural path starts with that key (a key is matched whole, never split on `.`).
fn in_argument(item: &ArgItem, argument: &str) -> bool {
    matches!(item.arg.segments().first(), Some(Seg::Key(k)) if k == argument)
}

/// The host a declared flow goes to in this call, with its clearance from the call's hosts.
fn flow_host<'m>(
    flow: &germline_release::manifest::Flow,
    hosts: &'m [Member],
) -> (String, Option<&'m Member>) {
    match (&flow.to, &flow.to_host_of_argument) {
        (Some(h), _) => {
            let h = h.to_ascii_lowercase();
            let m = hosts.iter().find(|m| m.name == h);
            (h, m)
        }
        // `destinations.host_of_argument` is the tool's only destination (the manifest
        // allows `hosts` or `host_of_argument`, not both): the call's one host.
        (None, Some(arg)) => match hosts {
            [m] => (m.name.clone(), Some(m)),
            _ => (format!("the host of argument `{arg}`"), None),
        },
        (None, None) => ("no host".into(), None),
    }
}

/// Refuses the call if a declared flow of `tool` would carry one of its items to a host whose
/// clearance does not cover the item's label. Public metadata only; a host the call has no
/// clearance for refuses every non-public item (fail closed).
pub fn check(tool_name: &str, tool: &Tool, meta: &CallMeta) -> Result<(), Box<FlowRefusal>> {
    for flow in &tool.flows {
        let items: Vec<&ArgItem> = meta
            .items
            .iter()
            .filter(|i| in_argument(i, &flow.argument) && !i.label.is_public())
            .collect();
        if items.is_empty() {
            continue;
        }
        let (host, member) = flow_host(flow, &meta.hosts);
        for item in items {
            let cleared = member.is_some_and(|m| item.label.flows_to(&m.clearance));
            if !cleared {
                return Err(Box::new(FlowRefusal {
                    tool: tool_name.to_string(),
                    argument: flow.argument.clone(),
                    item: item.name.clone(),
                    label: item.label.clone(),
                    host,
                    clearance: member.map(|m| m.clearance.clone()),
                }));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callmeta::ItemKind;
    use germline_policy::ArgPath;
    use germline_release::manifest::{Destinations, Flow};
    use proptest::prelude::*;
    use serde_json::json;

    fn tool(hosts: Option<&[&str]>, of_arg: Option<&str>, flows: Vec<Flow>) -> Tool {
        Tool {
            destinations: Destinations {
                hosts: hosts.map(|h| h.iter().map(|s| s.to_string()).collect()),
                host_of_argument: of_arg.map(str::to_string),
            },
            consumers: None,
            flows,
            read_only: false,
        }
    }

    fn to(argument: &str, host: &str) -> Flow {
        Flow {
            argument: argument.into(),
            to: Some(host.into()),
            to_host_of_argument: None,
        }
    }

    /// A test path from dotted text: numeric parts are indices.
    fn dotted(text: &str) -> ArgPath {
        ArgPath::new(
            text.split('.')
                .map(|p| {
                    p.parse()
                        .map_or_else(|_| Seg::Key(p.to_string()), Seg::Index)
                })
                .collect(),
        )
    }

    fn item(arg: &str, label: &[&str]) -> ArgItem {
        ArgItem {
            name: format!("/home/alice/{arg}.txt"),
            arg: dotted(arg),
            label: Label::of(label.iter().copied()),
            kind: ItemKind::File {
                host_path: format!("/home/alice/{arg}.txt").into(),
            },
            file_name: None,
            contents: b"SECRET".to_vec(),
        }
    }

    fn meta(items: Vec<ArgItem>, hosts: &[(&str, &[&str])]) -> CallMeta {
        CallMeta {
            tool: "ocr_pdf".into(),
            arguments: json!({}),
            items,
            hosts: hosts
                .iter()
                .map(|(h, c)| Member {
                    name: h.to_string(),
                    clearance: Label::of(c.iter().copied()),
                })
                .collect(),
            consumers: vec![],
            progress_token: None,
            traceparent: None,
            tracestate: None,
            policy: None,
        }
    }

    const OCR: &[(&str, &[&str])] = &[("ocr.example", &["finance"])];

    #[test]
    fn a_declared_flow_of_an_uncleared_item_is_refused_naming_item_label_and_host() {
        let t = tool(
            Some(&["ocr.example"]),
            None,
            vec![to("file", "ocr.example")],
        );
        let e = check("ocr_pdf", &t, &meta(vec![item("file", &["hr"])], OCR))
            .expect_err("hr to a finance host");
        let s = e.to_string();
        assert!(
            s.contains("/home/alice/file.txt")
                && s.contains("{hr}")
                && s.contains("ocr.example")
                && s.contains("{finance}"),
            "{s}"
        );
        // Cleared items, public items and items of other arguments pass.
        assert!(check("ocr_pdf", &t, &meta(vec![item("file", &["finance"])], OCR)).is_ok());
        assert!(check("ocr_pdf", &t, &meta(vec![item("file", &[])], OCR)).is_ok());
        assert!(check("ocr_pdf", &t, &meta(vec![item("notes", &["hr"])], OCR)).is_ok());
        // Without a declared flow nothing is refused here (the tripwire keeps watching).
        let plain = tool(Some(&["ocr.example"]), None, vec![]);
        assert!(check("ocr_pdf", &plain, &meta(vec![item("file", &["hr"])], OCR)).is_ok());
    }

    fn at(path: ArgPath, label: &[&str]) -> ArgItem {
        ArgItem {
            arg: path,
            ..item("x", label)
        }
    }

    fn key(k: &str) -> Seg {
        Seg::Key(k.into())
    }

    #[test]
    fn nested_values_and_keys_spelled_like_paths_are_told_apart() {
        let t = tool(
            Some(&["ocr.example"]),
            None,
            vec![to("files", "ocr.example")],
        );
        // Values anywhere under the argument `files` belong to it.
        for path in [
            vec![key("files"), Seg::Index(0)],
            vec![key("files"), key("a"), key("b")],
            vec![key("files")],
        ] {
            let p = ArgPath::new(path);
            assert!(
                check("x", &t, &meta(vec![at(p.clone(), &["hr"])], OCR)).is_err(),
                "{p}"
            );
        }
        // Keys that only look like a path into `files` are other arguments: a dotted or
        // pointer-like key is one step, never split.
        for path in [
            vec![key("filesx")],
            vec![key("files.0")],
            vec![key("/files/0")],
            vec![key("other"), key("files")],
        ] {
            let p = ArgPath::new(path);
            assert!(
                check("x", &t, &meta(vec![at(p.clone(), &["hr"])], OCR)).is_ok(),
                "{p}"
            );
        }
        // An argument whose name holds pointer metacharacters is matched as written.
        let t = tool(
            Some(&["ocr.example"]),
            None,
            vec![to("a/b~c", "ocr.example")],
        );
        let p = ArgPath::new(vec![key("a/b~c"), Seg::Index(0)]);
        assert!(check("x", &t, &meta(vec![at(p, &["hr"])], OCR)).is_err());
    }

    #[test]
    fn a_host_without_clearance_and_host_of_argument_flows_fail_closed() {
        // The flow's host is missing from the call's hosts: nothing non-public may go.
        let t = tool(
            Some(&["ocr.example"]),
            None,
            vec![to("file", "ocr.example")],
        );
        let e =
            check("x", &t, &meta(vec![item("file", &["finance"])], &[])).expect_err("no clearance");
        assert!(e.to_string().contains("no clearance"), "{e}");
        let flow = Flow {
            argument: "body".into(),
            to: None,
            to_host_of_argument: Some("url".into()),
        };
        let t = tool(None, Some("url"), vec![flow]);
        let public_host: &[(&str, &[&str])] = &[("docs.example", &[])];
        let e = check(
            "fetch",
            &t,
            &meta(vec![item("body", &["finance"])], public_host),
        )
        .expect_err("finance to a public host");
        assert!(e.to_string().contains("docs.example"), "{e}");
        assert!(check("fetch", &t, &meta(vec![item("body", &["finance"])], OCR)).is_ok());
    }

    proptest! {
        /// Any label and clearance: refused exactly when some item of the flowing argument is
        /// not covered by the host's clearance.
        #[test]
        fn refused_iff_an_item_of_the_argument_exceeds_the_clearance(
            labels in proptest::collection::vec(
                proptest::sample::subsequence(vec!["hr", "finance", "legal"], 0..=3), 1..5),
            args in proptest::collection::vec(proptest::sample::select(vec!["file", "file.0", "notes"]), 1..5),
            clearance in proptest::sample::subsequence(vec!["hr", "finance", "legal"], 0..=3),
        ) {
            let c: &[&str] = &clearance;
            let hosts: &[(&str, &[&str])] = &[("ocr.example", c)];
            let items: Vec<ArgItem> = labels.iter().zip(&args).map(|(l, a)| item(a, l)).collect();
            let t = tool(Some(&["ocr.example"]), None, vec![to("file", "ocr.example")]);
            let cl = Label::of(clearance.iter().copied());
            // The oracle reads the spelled argument, not the item's path.
            let expect_refused = labels.iter().zip(&args).any(|(l, a)| {
                a.split('.').next() == Some("file") && !Label::of(l.iter().copied()).flows_to(&cl)
            });
            prop_assert_eq!(check("x", &t, &meta(items, hosts)).is_err(), expect_refused);
        }
    }
}
