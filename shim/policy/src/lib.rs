//! germline's policy core: the pure logic every other part calls.
//!
//! - [`argpath`]: where a value sits in a call's JSON arguments, and `[[argument]] name`s.
//! - [`label`]: labels and clearances (Definition 1).
//! - [`policy`]: the deployer's policy file and call descriptions (Definitions 1-2).
//! - [`plan`]: Plan and its ablations (Algorithm 1 lines 1-4, Theorem 3).
//! - [`call`]: the per-call records, the positional rule and each copy's label `L`
//!   (Algorithm 1 lines 5-28, Definition 4, Eq. (2)).
//! - [`slots`]: per-horizon state slots with entry labels, durable in SQLite (Definition 3,
//!   Lemma 1).
//! - [`dampening`]: the per-release penalty (Appendix B-E).
//! - [`names`]: what a host, item, consumer, release, header or credential name may be.
//! - [`workspace`]: whether a copy's writes may be committed to a host path (issue 27).
//!
//! Nothing here forks, confines or talks to the network; only [`slots`] touches the disk.

pub mod argpath;
pub mod call;
pub mod dampening;
pub mod label;
pub mod limits;
pub mod names;
pub mod plan;
pub mod policy;
pub mod pool;
pub mod slots;
pub mod witness;
pub mod workspace;

pub use argpath::{ArgPath, ArgPattern, Seg};
pub use label::Label;
pub use plan::{plan, Group, ItemMeta, Member, Plan, PlanInput, PlanMode};
pub use policy::{CallSpec, Policy, PolicyError};
