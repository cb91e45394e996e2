//! Inline argument values are labelled and redacted by their structural path, through the real
//! front end, the real MCP SDK as agent and a real HTTP sink (docs/policy.md, "Inline values").
//!
//! A property test: seeded adversarial forms (random nesting of objects and lists, keys spelled
//! with dots, slashes, `~`, the empty key, unicode, glob characters, digits) carrying canaries
//! at random leaves go to `submit_form` of the germline-forms release, which forwards its whole
//! argument to ocr.example (cleared for finance only). Under `--mode germline` no canary may
//! reach the sink, and what does arrive must be the form with exactly the values outside the
//! finance view emptied; under `--mode sig-pin` (the mechanism off) the canaries arrive.

mod run_common;

use run_common::*;
use serde_json::{json, Map, Value};

/// splitmix64: a small seeded generator, so a failing case can be run again by its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[self.below(v.len())]
    }
}

/// Parts keys are made of: what a dotted or slashed spelling, a pointer's escapes, a glob, an
/// index or a policy rule's own names could be confused with.
const KEY_PARTS: &[&str] = &[
    "",
    ".",
    "..",
    "/",
    "//",
    "~",
    "~0",
    "~1",
    "*",
    "**",
    "?",
    "[",
    "]",
    "{a,b}",
    "\\",
    "\"",
    "x.y",
    "a/b",
    "pub",
    "fin",
    "hr",
    "form",
    "0",
    "1",
    "01",
    "-1",
    " ",
    "\n",
    "\t",
    "\u{0}",
    "é",
    "données",
    "🙂",
    "\u{202e}",
    "#2",
    "argument:",
    "$ref",
];

/// Which part of the form a value sits in, and so who may see it.
#[derive(Clone, Copy, PartialEq)]
enum Zone {
    /// Under `form.pub` (public by rule): reaches ocr.example as it is.
    Public,
    /// Under `form.fin` (finance by rule): reaches ocr.example as it is.
    Finance,
    /// Anywhere else (hr by rule under `form.hr`, or the default label): a canary, which must
    /// reach ocr.example empty.
    Secret,
}

struct Gen {
    rng: Rng,
    canaries: Vec<String>,
    n: u64,
}

impl Gen {
    fn key(&mut self) -> String {
        let mut k = String::new();
        for _ in 0..self.rng.below(4) {
            k.push_str(self.rng.pick(KEY_PARTS));
        }
        k
    }

    fn leaf(&mut self, zone: Zone) -> Value {
        self.n += 1;
        let tag = match zone {
            Zone::Public => "PUB",
            Zone::Finance => "FIN",
            Zone::Secret => "CANARY",
        };
        let text = format!("{tag}-{:x}-{}", self.rng.next() >> 16, self.n);
        let v = match self.rng.below(6) {
            // A number or a boolean carries information too; numbers are unique so a leak shows.
            0 => json!(9_000_000_000_000u64 + self.rng.next() % 1_000_000_000_000),
            1 => json!(self.rng.below(2) == 0),
            _ => json!(text),
        };
        if zone == Zone::Secret {
            match &v {
                Value::String(s) => self.canaries.push(s.clone()),
                Value::Number(n) => self.canaries.push(n.to_string()),
                _ => {}
            }
        }
        v
    }

    fn tree(&mut self, zone: Zone, depth: usize) -> Value {
        match if depth == 0 { 9 } else { self.rng.below(10) } {
            0..=3 => {
                let mut m = Map::new();
                for _ in 0..=self.rng.below(3) {
                    let k = self.key();
                    let v = self.tree(zone, depth.saturating_sub(1));
                    m.insert(k, v);
                }
                Value::Object(m)
            }
            4..=5 => Value::Array(
                (0..=self.rng.below(3))
                    .map(|_| self.tree(zone, depth.saturating_sub(1)))
                    .collect(),
            ),
            6 => match self.rng.below(3) {
                0 => Value::Null,
                1 => json!({}),
                _ => json!([]),
            },
            _ => self.leaf(zone),
        }
    }

    /// One form: the zones the policy names, and adversarial keys beside them spelled to look
    /// like them (`pub.x`, `fin/y`, `pub~1`, ...), which take the default label.
    fn form(&mut self) -> Value {
        let mut m = Map::new();
        m.insert("hr".into(), self.tree(Zone::Secret, 4));
        if self.rng.below(4) > 0 {
            m.insert("pub".into(), self.tree(Zone::Public, 3));
        }
        if self.rng.below(4) > 0 {
            m.insert("fin".into(), self.tree(Zone::Finance, 3));
        }
        for _ in 0..=self.rng.below(4) {
            let mut k = match self.rng.below(3) {
                0 => format!("{}{}", self.rng.pick(&["pub", "fin", "hr"]), self.key()),
                1 => format!("{}{}", self.key(), self.rng.pick(&["pub", "fin"])),
                _ => self.key(),
            };
            if k == "pub" || k == "fin" || k == "hr" {
                k.push('.');
            }
            let v = self.tree(Zone::Secret, 4);
            m.insert(k, v);
        }
        Value::Object(m)
    }
}

/// `form` as the copy serving ocr.example must send it: every non-null scalar outside the
/// public and finance zones replaced by the empty value of its type.
fn expected(form: &Value) -> Value {
    fn empty(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                Value::Object(m.iter().map(|(k, x)| (k.clone(), empty(x))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(empty).collect()),
            Value::String(_) => json!(""),
            Value::Number(_) => json!(0),
            Value::Bool(_) => json!(false),
            Value::Null => Value::Null,
        }
    }
    let Value::Object(m) = form else {
        return empty(form);
    };
    Value::Object(
        m.iter()
            .map(|(k, v)| {
                let keep = k == "pub" || k == "fin";
                (k.clone(), if keep { v.clone() } else { empty(v) })
            })
            .collect(),
    )
}

fn cases() -> usize {
    std::env::var("GERMLINE_PROP_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(48)
}

#[test]
fn no_canary_at_any_leaf_reaches_a_host_not_cleared_for_it() {
    if !can_run() {
        return;
    }
    let ready = bundle("germline-forms").exists();
    if !ready {
        assert!(
            std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
            "needs bundles/out/germline-forms (bundles/build.sh germline-forms)"
        );
        return;
    }
    let seed = std::env::var("GERMLINE_PROP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x6765_726d_6c69_6e65u64);
    let n = cases();
    let mut g = Gen {
        rng: Rng(seed),
        canaries: Vec::new(),
        n: 0,
    };
    let forms: Vec<Value> = (0..n).map(|_| g.form()).collect();
    // A key drawn twice in one object keeps its last value: only canaries still in a form count.
    let all = serde_json::to_string(&forms).expect("forms");
    let canaries: Vec<String> = g
        .canaries
        .into_iter()
        .filter(|c| all.contains(c.as_str()))
        .collect();
    eprintln!(
        "seed {seed:#x}: {n} calls, {} canaries at random leaves",
        canaries.len()
    );
    assert!(canaries.len() >= n, "every form carries canaries");

    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(
        sink.port,
        "\n[[argument]]\ntool = \"submit_form\"\nname = \"form.hr\"\nlabel = [\"hr\"]\n\
         \n[[argument]]\ntool = \"submit_form\"\nname = \"form.fin\"\nlabel = [\"finance\"]\n\
         \n[[argument]]\ntool = \"submit_form\"\nname = \"form.pub\"\nlabel = []\n",
    );
    let script: Vec<Value> = forms
        .iter()
        .map(|f| json!({"tool": "submit_form", "arguments": {"form": f}}))
        .collect();
    let mut leaked = Vec::new();
    for mode in ["sig-pin", "germline"] {
        sink.clear();
        // --no-evidence: the agent's copy sees the canaries and its request differs from the
        // delivered one on purpose; this test is about what reaches the sink (docs/evidence.md).
        let out = run_agent(
            w.path(),
            &json!(script),
            &run_cmd(
                &policy,
                mode,
                "germline-forms",
                w.path(),
                &["--no-evidence"],
            ),
        );
        assert_eq!(out.len(), n, "{mode}");
        for (i, r) in out.iter().enumerate() {
            assert_eq!(r["ok"], json!(true), "{mode}: call {i}: {r}");
        }
        let bodies = sink.bodies();
        assert_eq!(bodies.len(), n, "{mode}: one delivered request per call");
        let leaks: Vec<&String> = canaries
            .iter()
            .filter(|c| bodies.iter().any(|b| b.contains(c.as_str())))
            .collect();
        eprintln!(
            "{mode}: {} of {} canaries reached the sink",
            leaks.len(),
            canaries.len()
        );
        if mode == "germline" {
            assert!(
                leaks.is_empty(),
                "seed {seed:#x}: {} canaries reached ocr.example: {leaks:?}",
                leaks.len()
            );
        }
        leaked.push((mode, leaks.len()));
        for (i, (body, form)) in bodies.iter().zip(&forms).enumerate() {
            let got: Value = serde_json::from_str(body).expect("the form as JSON");
            // Mechanism off: the form arrives whole. On: exactly the finance view of it, every
            // public and finance value untouched and every other value empty.
            let want = if mode == "germline" {
                expected(form)
            } else {
                form.clone()
            };
            assert_eq!(got, want, "{mode}: call {i} (seed {seed:#x})");
        }
    }
    // The test can fail: with the mechanism off every canary reaches the sink.
    assert_eq!(leaked, vec![("sig-pin", canaries.len()), ("germline", 0)]);
}
