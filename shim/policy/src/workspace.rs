//! Writes (issue 27): whether a copy's write to a host path may be committed.
//!
//! A copy that writes into a directory item writes into its own layer; after the call the
//! engine commits one copy's writes to the host (`engine::writes`). Each written path `P`
//! commits only if the copy's output label `L` (everything it saw, raised by any agent answer)
//! flows to both
//!
//! * `ℓ(P)`, the rules' label of the target path (for a new file, the label the rules give
//!   that path, else the default item label): so the next read of `P`, which is labelled
//!   `ℓ(P)`, can never be labelled lower than what went into it; and
//! * `c(consumer)`, the clearance of the consumer the writes are for (the agent's workspace by
//!   default): the writes are a result delivered to that consumer.
//!
//! One refused path refuses the whole commit (a partial commit could leave a repository or
//! workspace inconsistent), and the refusal names every refused path and why.
//!
//! The consumer is a workspace: `[workspaces]` declares, per release, host directories and
//! whose clearance their writes get ([`Workspace`], validated by `parse_table`); a directory no
//! declared workspace covers is the agent's ([`crate::Policy::workspace_member`]).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use crate::label::Label;
use crate::policy::{Location, PolicyError};

/// Why one written path may not be committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRefusal {
    /// The copy saw items the path's label does not cover: `missing = L \ ℓ(P)`.
    AbovePath { missing: Label },
    /// The copy saw items the consumer is not cleared for: `missing = L \ c(consumer)`.
    AboveConsumer { missing: Label },
}

impl std::fmt::Display for WriteRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteRefusal::AbovePath { missing } => write!(
                f,
                "the copy saw items labelled {} and the path's label lacks them",
                missing.canonical()
            ),
            WriteRefusal::AboveConsumer { missing } => write!(
                f,
                "the copy saw items labelled {} and the consumer is not cleared for them",
                missing.canonical()
            ),
        }
    }
}

fn minus(a: &Label, b: &Label) -> Label {
    Label::of(a.tags().filter(|t| !b.contains(t)))
}

/// Whether a write of a copy whose output label is `label` to a path labelled `target` may be
/// committed for a consumer of clearance `consumer`: `label ⊆ target` and `label ⊆ consumer`.
pub fn commit_allowed(label: &Label, target: &Label, consumer: &Label) -> Result<(), WriteRefusal> {
    if !label.flows_to(target) {
        return Err(WriteRefusal::AbovePath {
            missing: minus(label, target),
        });
    }
    if !label.flows_to(consumer) {
        return Err(WriteRefusal::AboveConsumer {
            missing: minus(label, consumer),
        });
    }
    Ok(())
}

/// Every refusal of a commit of `writes` (path, `ℓ(path)`) by a copy labelled `label` for
/// `consumer`: empty when the whole commit may go ahead.
pub fn refusals<'a>(
    label: &Label,
    consumer: &Label,
    writes: impl IntoIterator<Item = (&'a str, &'a Label)>,
) -> Vec<(String, WriteRefusal)> {
    writes
        .into_iter()
        .filter_map(|(p, l)| {
            commit_allowed(label, l, consumer)
                .err()
                .map(|r| (p.to_string(), r))
        })
        .collect()
}

// ---- declared workspaces (`[workspaces]`) --------------------------------------------------

/// How a consumer that is a workspace is named in Plan's `C`: `workspace:<host path>`.
pub const WORKSPACE_PREFIX: &str = "workspace:";

/// Whether the consumer `name` is a workspace (whose "result" is the writes committed to it,
/// never a delivery).
pub fn is_workspace_consumer(name: &str) -> bool {
    name.starts_with(WORKSPACE_PREFIX)
}

/// Whose clearance a workspace has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceFor {
    /// The agent's (the default: the agent's own workspace).
    Agent,
    /// A consumer's, as `[consumers]` gives it.
    Consumer(String),
    /// A clearance written in the entry.
    Clearance(Label),
}

/// A declared workspace of a release: a host directory its tool may write into though no
/// argument names it, and for whom its writes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// An absolute path without `.`, `..` or empty components (not `/`).
    pub path: PathBuf,
    pub owner: WorkspaceFor,
}

impl Workspace {
    /// Its name in Plan's `C`.
    pub fn consumer_name(&self) -> String {
        format!("{WORKSPACE_PREFIX}{}", self.path.display())
    }

    /// Whether `path` is this workspace or lies below it (component by component: `/srv/a`
    /// does not cover `/srv/ab`).
    pub fn covers(&self, path: &Path) -> bool {
        path.starts_with(&self.path)
    }
}

/// The declared workspace at or above `path`, if any. A release's workspaces never nest
/// (the policy refuses it), so at most one covers a path.
pub fn covering<'a>(workspaces: &'a [Workspace], path: &Path) -> Option<&'a Workspace> {
    workspaces.iter().find(|w| w.covers(path))
}

/// One entry of `[workspaces."<release>"]` as written: `"/srv/repo" = { consumer = "ci" }`,
/// `{ clearance = ["hr"] }`, or `{}` (the agent's).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorkspaceFile {
    consumer: Option<Spanned<String>>,
    clearance: Option<Vec<Spanned<String>>>,
}

/// `[workspaces]` as written: release name -> host path -> entry.
pub(crate) type WorkspacesFile =
    BTreeMap<Spanned<String>, BTreeMap<Spanned<String>, Spanned<WorkspaceFile>>>;

/// Whether `d` is a path a workspace may be declared at: absolute, plain, not `/`.
pub fn workspace_path_problem(d: &str) -> Option<String> {
    let plain = d.starts_with('/')
        && d != "/"
        && !d.contains('\0')
        && d.split('/').skip(1).all(|c| !matches!(c, "" | "." | ".."));
    (!plain).then(|| {
        format!(
            "expected an absolute directory path other than `/`, without `.`, `..` or empty \
             components (no trailing `/`), found {d:?}"
        )
    })
}

/// How a list of tags written at `field` becomes a label (the policy's defined tags).
pub(crate) type LabelOf<'a> = dyn Fn(&str, &[Spanned<String>]) -> Result<Label, PolicyError> + 'a;

/// Validates `[workspaces]`: release names as manifests spell them; paths as
/// [`workspace_path_problem`] wants, never one inside another of the same release (whose
/// writes would they be?); an entry naming at most one of `consumer` (listed in
/// `[consumers]`) and `clearance` (defined tags).
pub(crate) fn parse_table(
    raw: &WorkspacesFile,
    consumers: &BTreeMap<String, Label>,
    label: &LabelOf<'_>,
    at: &dyn Fn(Range<usize>) -> Location,
) -> Result<BTreeMap<String, Vec<Workspace>>, PolicyError> {
    let mut out = BTreeMap::new();
    for (release, entries) in raw {
        let r = release.get_ref();
        let invalid = |span: Range<usize>, field: String, message: String| PolicyError::Invalid {
            at: at(span),
            field,
            message,
        };
        crate::names::check_release_name(r)
            .map_err(|m| invalid(release.span(), format!("workspaces.{r:?}"), m))?;
        let mut list: Vec<Workspace> = Vec::new();
        for (path, entry) in entries {
            let p = path.get_ref();
            let field = format!("workspaces.{r:?}.{p:?}");
            if let Some(m) = workspace_path_problem(p) {
                return Err(invalid(path.span(), field, m));
            }
            let e = entry.get_ref();
            let owner = match (&e.consumer, &e.clearance) {
                (None, None) => WorkspaceFor::Agent,
                (Some(c), None) => {
                    let name = c.get_ref();
                    if !consumers.contains_key(name) {
                        return Err(invalid(
                            c.span(),
                            format!("{field}.consumer"),
                            format!(
                                "expected a consumer listed in [consumers] (its clearance is the \
                                 workspace's), found {name:?}"
                            ),
                        ));
                    }
                    WorkspaceFor::Consumer(name.clone())
                }
                (None, Some(l)) => {
                    WorkspaceFor::Clearance(label(&format!("{field}.clearance"), l)?)
                }
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        entry.span(),
                        field,
                        "expected at most one of `consumer` or `clearance` (neither: the \
                         agent's clearance)"
                            .into(),
                    ))
                }
            };
            let w = Workspace {
                path: PathBuf::from(p),
                owner,
            };
            if let Some(other) = list.iter().find(|o| o.covers(&w.path) || w.covers(&o.path)) {
                return Err(invalid(
                    path.span(),
                    field,
                    format!(
                        "expected workspaces that do not nest, found {p:?} and {:?} (one inside \
                         the other: whose would a write there be?)",
                        other.path.display()
                    ),
                ));
            }
            list.push(w);
        }
        out.insert(r.clone(), list);
    }
    Ok(out)
}
