//! A2 for file items, end to end (issue 25, item 2): through the real front end, the real
//! office release and a real HTTP sink, no spelling of the path of an hr file makes its
//! contents reach ocr.example, which the policy clears for finance only. Every spelling starts
//! in Alice's `finance/` directory, so a label taken from the spelling would be finance.

mod run_common;

use std::os::unix::fs::symlink;
use std::path::Path;

use run_common::*;
use serde_json::{json, Value};

/// A small seeded generator (xorshift64*), so a failing run can be repeated exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The real directories under Alice's home the spellings walk through.
const DIRS: [&str; 5] = ["", "finance", "finance/q1", "hr", "hr/deep"];
/// The hr files, each holding the hr canary.
const TARGETS: [&str; 2] = ["hr/salary.csv", "hr/payslip-2026-11.txt"];

/// One random spelling of a path to an hr file under `alice`, starting `alice/finance/`:
/// `.`, `//`, `..` (out of the home and back in by name), real subdirectories, symlinks to
/// directories and chains of symlinks to the file, absolute or relative, which it makes.
fn spelling(rng: &mut Rng, alice: &Path, links: &mut usize) -> String {
    let name_of_alice = alice.file_name().and_then(|n| n.to_str()).expect("name");
    let target = TARGETS[rng.below(TARGETS.len())];
    let mut out = alice.join("finance").display().to_string();
    let mut cur = "finance".to_string();
    let ups = |d: &str| d.split('/').filter(|c| !c.is_empty()).count();
    let mut link = |dir: &str, to: String| {
        *links += 1;
        let name = format!("l{links}");
        symlink(to, alice.join(dir).join(&name)).expect("symlink");
        name
    };
    for _ in 0..rng.below(7) {
        match rng.below(5) {
            0 => out.push_str("/."),
            1 => out.push('/'),
            2 => {
                let kids: Vec<&str> = DIRS
                    .iter()
                    .copied()
                    .filter(|d| !d.is_empty() && d.rsplit_once('/').map_or("", |(p, _)| p) == cur)
                    .collect();
                if !kids.is_empty() {
                    let k = kids[rng.below(kids.len())];
                    out.push('/');
                    out.push_str(k.rsplit('/').next().unwrap_or(k));
                    cur = k.to_string();
                }
            }
            3 => match cur.rsplit_once('/') {
                Some((p, _)) => {
                    out.push_str("/..");
                    cur = p.to_string();
                }
                None if !cur.is_empty() => {
                    out.push_str("/..");
                    cur.clear();
                }
                None => out.push_str(&format!("/../{name_of_alice}")),
            },
            _ => {
                let dest = DIRS[rng.below(DIRS.len())];
                let text = if rng.below(2) == 0 {
                    alice.join(dest).display().to_string()
                } else {
                    "../".repeat(ups(&cur)) + if dest.is_empty() { "." } else { dest }
                };
                let name = link(&cur, text);
                out.push('/');
                out.push_str(&name);
                cur = dest.to_string();
            }
        }
    }
    if rng.below(2) == 0 {
        out.push_str(&"/..".repeat(ups(&cur)));
        out.push('/');
        out.push_str(target);
    } else {
        let absolute = rng.below(2) == 0;
        let mut to = if absolute {
            alice.join(target).display().to_string()
        } else {
            "../".repeat(ups(&cur)) + target
        };
        let mut name = String::new();
        for _ in 0..1 + rng.below(3) {
            name = link(&cur, to);
            to = if absolute {
                alice.join(&cur).join(&name).display().to_string()
            } else {
                name.clone()
            };
        }
        out.push('/');
        out.push_str(&name);
    }
    out
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn no_spelling_of_an_hr_path_reaches_a_host_cleared_for_finance() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let alice = w.path().join("home/alice");
    std::fs::create_dir_all(alice.join("finance/q1")).expect("mkdir");
    std::fs::create_dir_all(alice.join("hr/deep")).expect("mkdir");
    let seed = env_u64("GERMLINE_SPELLING_SEED", 0x9e37_79b9_7f4a_7c15) | 1;
    let cases = env_u64("GERMLINE_SPELLING_CASES", 32) as usize;
    eprintln!("spellings: {cases}, seed {seed:#x} (GERMLINE_SPELLING_SEED/_CASES to repeat)");
    let mut rng = Rng(seed);
    let mut links = 0;
    let spellings: Vec<String> = (0..cases)
        .map(|_| spelling(&mut rng, &alice, &mut links))
        .collect();
    // Each spelling does reach an hr file (realpath agrees), and reads as a finance path.
    for s in &spellings {
        let r = std::fs::canonicalize(s).expect(s);
        assert!(r.starts_with(alice.join("hr")), "{s} -> {}", r.display());
        assert!(s.starts_with(&alice.join("finance/").display().to_string()));
    }
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    // The invoice argument is the spelled hr path; the salary sheet is a real finance file,
    // so a finance label on the invoice would put both in the OCR copy's view.
    let script: Vec<Value> = spellings
        .iter()
        .map(|s| {
            json!({"tool": "ocr_annotate", "arguments": {
                "invoice": s, "salary_sheet": w.invoice.display().to_string()}})
        })
        .collect();
    let mut leaks = Vec::new();
    let mut germline_out = Vec::new();
    for mode in ["sig-pin", "germline"] {
        sink.clear();
        // --no-evidence: the agent's copy's request differs from the OCR copy's on every call
        // (that is the point), and the witnesses would suppress the release midway; this test
        // is about labels (docs/evidence.md).
        let out = run_agent(
            w.path(),
            &json!(script),
            &run_cmd(
                &policy,
                mode,
                "germline-office",
                w.path(),
                &["--no-evidence"],
            ),
        );
        assert_eq!(out.len(), cases, "{mode}");
        for (r, s) in out.iter().zip(&spellings) {
            assert_eq!(r["ok"], json!(true), "{mode}: {s}: {r}");
        }
        if mode == "germline" {
            germline_out = out;
        }
        let bodies = sink.bodies();
        // Every call reached the sink once, in both modes: nothing passes by not sending.
        assert_eq!(bodies.len(), cases, "{mode}: {bodies:?}");
        let leaked: Vec<&String> = spellings
            .iter()
            .zip(&bodies)
            .filter(|(_, b)| b.contains(&w.canary_hr))
            .map(|(s, _)| s)
            .collect();
        eprintln!(
            "{mode}: {} of {cases} requests carried the hr canary",
            leaked.len()
        );
        leaks.push((mode, leaked.len(), leaked.first().cloned().cloned()));
    }
    // sig-pin (no splitting): the release sends the hr file's contents, every time, which
    // shows each spelling reaches it. Germline: never.
    assert_eq!(leaks[0].1, cases, "{leaks:?}");
    assert_eq!(leaks[1].1, 0, "germline leaked, first: {:?}", leaks[1].2);
    for (r, s) in germline_out.iter().zip(&spellings) {
        // Labelled by the file it reaches: hr (with the finance salary sheet).
        assert_eq!(
            r["meta"]["germline"]["label"],
            json!(["finance", "hr"]),
            "{s}"
        );
    }
}
