//! `germline plan` and `germline policy check`.

use crate::output::{outln, outp};
use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use germline_engine::fileitem;
use germline_policy::plan::Member;
use germline_policy::plan::{plan, ForkRule, ItemMeta, PlanInput, PlanMode};
use germline_policy::policy::Source;
use germline_policy::workspace::WorkspaceFor;
use germline_policy::{CallSpec, Plan, Policy};
use serde_json::json;

type Error = Box<dyn std::error::Error>;

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The deployer's policy file (TOML).
    #[arg(long)]
    policy: PathBuf,
    /// The call to plan (JSON: function, items, destinations, consumers).
    #[arg(long)]
    call: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Run selection: declared-destination splitting, or one of the evaluation's ablations.
    #[arg(long, value_enum, default_value = "split")]
    mode: Mode,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Mode {
    Split,
    Nosplit,
    Lazy,
}

#[derive(Debug, Args)]
pub struct PolicyArgs {
    #[command(subcommand)]
    cmd: PolicyCmd,
}

#[derive(Debug, Subcommand)]
enum PolicyCmd {
    /// Load a policy, report the first error with file, line and field, or summarise it.
    Check {
        file: PathBuf,
        /// Print the summary as JSON (and an error as a JSON object on stderr).
        #[arg(long)]
        json: bool,
    },
}

impl PolicyArgs {
    /// Whether `--json` was given (for the error's form).
    pub fn json(&self) -> bool {
        match &self.cmd {
            PolicyCmd::Check { json, .. } => *json,
        }
    }
}

impl PlanArgs {
    /// Whether `--json` was given (for the error's form).
    pub fn json(&self) -> bool {
        self.json
    }
}

pub fn run_plan(args: &PlanArgs) -> Result<(), Error> {
    let policy = Policy::load(&args.policy)?;
    let call = CallSpec::load(&args.call)?;
    let mut resolved = call.resolve(&policy, &args.call)?;
    relabel_files(&policy, &call, &mut resolved.items, &args.call);
    // The release's declared workspaces are consumers Plan places, as at run time.
    let workspaces = declared_members(&policy, call.release.as_deref(), &resolved.consumers);
    for (_, m) in &workspaces {
        if !resolved.consumers.iter().any(|c| c.name == m.name) {
            resolved.consumers.push(m.clone());
        }
    }
    let mode = match args.mode {
        Mode::Split => PlanMode::Split,
        Mode::Nosplit => PlanMode::NoSplit,
        Mode::Lazy => PlanMode::Lazy,
    };
    let input = PlanInput {
        items: &resolved.items,
        hosts: &resolved.hosts,
        consumers: &resolved.consumers,
    };
    let p = plan(input, mode)?;
    if args.json {
        let out = json!({
            "release": call.release,
            "function": call.function,
            "items": resolved.items,
            "destinations": resolved.hosts,
            "consumers": resolved.consumers,
            "plan": p,
            "workspaces": workspaces_json(&workspaces, &p),
        });
        outln!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        outp!(
            "{}{}",
            render(&call, &resolved.items, &p),
            render_workspaces(&workspaces, &p)
        );
    }
    Ok(())
}

/// A `path` (or local file `uri`) names a file: label it as `germline run` would, by the file
/// the kernel reaches, not by its spelling (fileitem.rs). The policy crate stays pure; the
/// call's own `label` tags still raise it. A note goes to stderr when the label is not simply
/// the rules' label of the path as written.
fn relabel_files(policy: &Policy, call: &CallSpec, items: &mut [ItemMeta], file: &std::path::Path) {
    for (index, (it, meta)) in call.items.iter().zip(items.iter_mut()).enumerate() {
        let Some(planned) = it
            .path
            .as_deref()
            .or(it.uri.as_deref())
            .and_then(|s| fileitem::plan_label(policy, s))
        else {
            continue;
        };
        let mut label = planned.label;
        label.join(&germline_policy::Label::of(&it.label));
        meta.label = label;
        if let Some(note) = planned.note {
            eprintln!(
                "germline: note: {}: items[{index}] ({:?}): {note}",
                file.display(),
                it.name
            );
        }
    }
}

fn render(call: &CallSpec, items: &[ItemMeta], p: &Plan) -> String {
    let mut s = String::new();
    let release = call
        .release
        .as_deref()
        .map(|r| format!(" of {r}"))
        .unwrap_or_default();
    let n = p.groups.len();
    let _ = writeln!(
        s,
        "Plan for {}{release}: {n} group{}, run in this order ({})",
        call.function,
        if n == 1 { "" } else { "s" },
        p.mode
    );
    for (i, g) in p.groups.iter().enumerate() {
        let mut members: Vec<String> = g.hosts.iter().map(|h| format!("{h} (host)")).collect();
        members.extend(g.consumers.iter().map(|u| format!("{u} (consumer)")));
        let members = if members.is_empty() {
            "none (full-view scout)".to_string()
        } else {
            members.join(", ")
        };
        let view = if g.view.is_empty() {
            "no items".to_string()
        } else {
            g.view.join(", ")
        };
        let _ = writeln!(s, "  {}. members: {members}", i + 1);
        let _ = writeln!(s, "     view:    {view}  (label {})", g.view_label);
        let hidden: Vec<&str> = items
            .iter()
            .map(|x| x.name.as_str())
            .filter(|x| !g.view.iter().any(|v| v == x))
            .collect();
        if !hidden.is_empty() {
            let _ = writeln!(
                s,
                "     hidden:  {}  (names only, empty contents)",
                hidden.join(", ")
            );
        }
        let _ = writeln!(s, "     horizon: {}", g.horizon);
        if let Some(rule) = i.checked_sub(1).and_then(|k| p.fork_rules.get(k)) {
            let when = match rule {
                ForkRule::Always => "always".to_string(),
                ForkRule::IfContacted(h) => format!("only if run 1 contacted {}", h.join(" or ")),
            };
            let _ = writeln!(s, "     forked:  {when}");
        }
    }
    s
}

pub fn run_policy(args: &PolicyArgs) -> Result<(), Error> {
    match &args.cmd {
        PolicyCmd::Check { file, json } => {
            let p = Policy::load(file)?;
            if *json {
                let d = p.dampening();
                let rules: Vec<_> = p
                    .rule_patterns()
                    .map(|(source, pattern, label)| {
                        json!({"source": match source { Source::Path => "path", Source::Uri => "uri" },
                               "pattern": pattern, "label": label.to_string()})
                    })
                    .collect();
                crate::output::print_json(&json!({
                    "file": file, "ok": true, "labels": p.tags(), "rules": rules,
                    "default_item_label": p.default_item_label().to_string(),
                    "workspaces": p.declared_workspaces().map(|(release, w)| {
                        let m = declared_member(&p, release, &w.path);
                        json!({"release": release, "path": w.path, "consumer": m.name,
                               "for": whom(&w.owner), "clearance": m.clearance})
                    }).collect::<Vec<_>>(),
                    "dampening": {"half_life": d.half_life, "unverified_weight": d.unverified_weight,
                        "verified_weight": d.verified_weight, "suppress_at": d.suppress_at,
                        "reuse_below": d.reuse_below, "threshold_rate": d.threshold_rate()},
                }));
                return Ok(());
            }
            outln!("{}: ok", file.display());
            outln!(
                "  labels: {}",
                p.tags().keys().cloned().collect::<Vec<_>>().join(", ")
            );
            for (source, pattern, label) in p.rule_patterns() {
                let kind = match source {
                    Source::Path => "path",
                    Source::Uri => "uri ",
                };
                outln!("  {kind} {pattern} -> {label}");
            }
            outln!("  unlabelled items get {}", p.default_item_label());
            for (release, w) in p.declared_workspaces() {
                let m = declared_member(&p, release, &w.path);
                outln!(
                    "  workspace of {release}: {} -> writes for {} (clearance {}), consumer {}",
                    w.path.display(),
                    whom(&w.owner),
                    m.clearance,
                    m.name
                );
            }
            let d = p.dampening();
            outln!(
                "  dampening: h={} w={} verified={} S={} R={} (p* = {:.1}%)",
                d.half_life,
                d.unverified_weight,
                d.verified_weight,
                d.suppress_at,
                d.reuse_below,
                d.threshold_rate() * 100.0
            );
            Ok(())
        }
    }
}

/// The declared workspaces (`[workspaces]`, docs/policy.md "Writes") of the call's release
/// (its name, without `@version`), each as the consumer Plan places (`workspace:<path>`, with
/// the clearance its entry gives, the agent's by default) and whom its writes are for.
fn declared_members(
    policy: &Policy,
    release: Option<&str>,
    consumers: &[Member],
) -> Vec<(String, Member)> {
    let Some(release) = release else {
        return Vec::new();
    };
    let name = release.split('@').next().unwrap_or(release);
    let agent = consumers
        .iter()
        .find(|c| c.name == "agent")
        .map(|c| c.clearance.clone())
        .unwrap_or_else(|| policy.consumer_clearance("agent"));
    policy
        .workspaces(name)
        .iter()
        .map(|w| {
            (
                whom(&w.owner),
                policy.workspace_member(name, &w.path, &agent),
            )
        })
        .collect()
}

/// The consumer Plan places for `release`'s declared workspace at `path`, with the agent's
/// clearance as `[consumers]` gives it (`Policy::workspace_member`, as at run time).
fn declared_member(policy: &Policy, release: &str, path: &std::path::Path) -> Member {
    policy.workspace_member(release, path, &policy.consumer_clearance("agent"))
}

/// Whom a declared workspace's writes are for.
fn whom(w: &WorkspaceFor) -> String {
    match w {
        WorkspaceFor::Agent => "the agent".into(),
        WorkspaceFor::Consumer(c) => format!("consumer {c}"),
        WorkspaceFor::Clearance(_) => "its own clearance".into(),
    }
}

/// The 1-based group of `p` that holds the consumer `name`.
fn group_of(p: &Plan, name: &str) -> Option<usize> {
    p.groups
        .iter()
        .position(|g| g.consumers.iter().any(|c| c == name))
        .map(|i| i + 1)
}

fn workspaces_json(ws: &[(String, Member)], p: &Plan) -> serde_json::Value {
    ws.iter()
        .map(|(whom, m)| {
            json!({"consumer": m.name, "for": whom, "clearance": m.clearance,
                   "group": group_of(p, &m.name)})
        })
        .collect()
}

fn render_workspaces(ws: &[(String, Member)], p: &Plan) -> String {
    let mut s = String::new();
    if ws.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "Declared workspaces (writes committed from the copy of the group that holds each):"
    );
    for (whom, m) in ws {
        let group = group_of(p, &m.name)
            .map(|g| format!("group {g}"))
            .unwrap_or_else(|| "no group".into());
        let _ = writeln!(
            s,
            "  {}: for {whom} (clearance {}), held by {group}",
            m.name, m.clearance
        );
    }
    let _ = writeln!(
        s,
        "  (at run time each declared directory's files are items too, labelled by the rules; \
         this plan has the call's items only)"
    );
    s
}
