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

use crate::label::Label;

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
