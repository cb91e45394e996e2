//! `germline gc`: removes what `run` and `serve` processes that died without stopping left
//! behind (germline_engine::sweep), and says what it removed: lines for a person, or with
//! `--json` the sweep's document `{cgroups, processes, dirs, failed}` (as it always printed).

use clap::Args;
use serde_json::Value;

use germline_engine::sweep::{self, GcError, Swept};

use crate::output;

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Print what was removed as JSON (and a failure as a JSON object on stderr).
    #[arg(long)]
    pub json: bool,
}

/// The text for a person: one line of counts, then each thing removed or left.
fn text(s: &Swept) -> String {
    if s.is_empty() {
        return "nothing to remove: no leftovers of stopped sessions".into();
    }
    let mut t = format!(
        "removed {} cgroup(s) ({} process(es) killed) and {} directory(ies)\n",
        s.cgroups.len(),
        s.processes,
        s.dirs.len()
    );
    for c in &s.cgroups {
        t.push_str(&format!("  cgroup     {c}\n"));
    }
    for d in &s.dirs {
        t.push_str(&format!("  directory  {}\n", d.display()));
    }
    for f in &s.failed {
        t.push_str(&format!("  NOT removed: {f}\n"));
    }
    t
}

/// Sweeps and prints the result. What was removed is printed even when something could not
/// be (the `failed` list); the command then fails, with the reason on stderr.
pub fn run(a: &GcArgs) -> Result<(), Box<dyn std::error::Error>> {
    let (s, r) = match sweep::gc() {
        Ok(s) => (s, Ok(())),
        Err(GcError::NotRemoved(s)) => {
            let e = GcError::NotRemoved(s.clone());
            (s, Err(e.into()))
        }
    };
    let v = serde_json::to_value(&s).unwrap_or(Value::Null);
    output::emit(a.json, &v, || text(&s));
    r
}
