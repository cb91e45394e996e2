//! The twin-input preload of spawned Node copies (`bootstrap/node/germline-twin.cjs`, issue 28)
//! run by the real `node` outside any sandbox: the twin line is taken off the stream however
//! the stream is cut into reads (and nothing else is), and two processes given the same twin
//! line draw the same clocks and entropy after it, while before it they read the real ones.
//! The sandboxed path (mount, `NODE_OPTIONS`, the line written by the shim) is tested through
//! `germline run` in shim/germline/tests/run_evidence_node.rs.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use germline_sandbox::spec::{NODE_TWIN_LINE, NODE_TWIN_PRELOAD};
use proptest::prelude::*;
use serde_json::Value;

/// Echoes what reached `process.stdin` and, at each `DRAW` line, one draw of every source the
/// preload covers: a line `{"draw": [...]}` at once, and `{"text": ...}` at the end of the
/// stream.
const DRIVER: &str = r#"
const c = require("crypto");
const got = [];
let seen = 0;
const draw = () => [
  Date.now(), new Date().toISOString(), Date(), performance.now(),
  String(process.hrtime.bigint()), process.hrtime().join("."), Math.random(),
  c.randomUUID(), c.randomBytes(5).toString("hex"), c.randomInt(1000000),
  Array.from(c.getRandomValues(new Uint8Array(3))), globalThis.crypto.randomUUID(),
  Array.from(globalThis.crypto.getRandomValues(new Uint16Array(2))),
  Array.from(c.randomFillSync(new Uint32Array(2), 1)),
];
process.stdin.on("data", (d) => {
  got.push(d);
  const n = Buffer.concat(got).toString("utf8").split("\n").filter((l) => l === "DRAW").length;
  while (seen < n) { process.stdout.write(JSON.stringify({ draw: draw() }) + "\n"); seen += 1; }
});
process.stdin.on("end", () => {
  process.stdout.write(JSON.stringify({ text: Buffer.concat(got).toString("utf8") }) + "\n");
});
"#;

fn node() -> Option<std::path::PathBuf> {
    ["/usr/bin/node", "/usr/local/bin/node"]
        .iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
}

/// Runs the driver with the preload, writing `chunks` to its stdin `gap` apart; after a chunk
/// with `DRAW` lines, waits for their draws before the next chunk, so that a draw is made
/// before a later chunk's twin line exists. Returns `{"text": ..., "draws": [...]}`.
fn run(chunks: &[Vec<u8>], gap: Duration) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let preload = dir.path().join("germline-twin.cjs");
    std::fs::write(&preload, NODE_TWIN_PRELOAD).expect("preload");
    let Some(node) = node() else {
        panic!("node is not installed (scripts/setup.d/30-release.sh installs it)");
    };
    let mut child = Command::new(node)
        .arg("--require")
        .arg(&preload)
        .arg("-e")
        .arg(DRIVER)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn node");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut draws = Vec::new();
    let mut line = String::new();
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for c in chunks {
            stdin.write_all(c).expect("write");
            stdin.flush().expect("flush");
            let n = String::from_utf8_lossy(c)
                .lines()
                .filter(|l| *l == "DRAW")
                .count();
            for _ in 0..n {
                line.clear();
                out.read_line(&mut line).expect("a draw");
                let v: Value = serde_json::from_str(&line).expect("a draw's JSON");
                draws.push(v["draw"].clone());
            }
            std::thread::sleep(gap);
        }
    }
    let mut text = Value::Null;
    loop {
        line.clear();
        if out.read_line(&mut line).expect("read") == 0 {
            break;
        }
        let v: Value = serde_json::from_str(&line).expect("the driver's JSON");
        match v.get("draw") {
            Some(d) => draws.push(d.clone()),
            None => text = v["text"].clone(),
        }
    }
    let status = child.wait().expect("node");
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert!(status.success(), "node: {err}");
    serde_json::json!({"text": text, "draws": draws})
}

fn twin_line(time_ns: u128, seed: u64) -> String {
    format!("{NODE_TWIN_LINE}{{\"time_ns\":\"{time_ns}\",\"seed\":\"{seed}\"}}\n")
}

/// The lines a stream is made of: JSON-RPC-like messages, twin lines, and look-alikes that
/// must pass untouched (the mark without its space, the mark inside a line, a lone `#`).
fn line() -> impl Strategy<Value = (String, bool)> {
    prop_oneof![
        "[a-z0-9 ]{0,40}".prop_map(|s| (format!("{{\"jsonrpc\":\"2.0\",\"m\":\"{s}\"}}\n"), false)),
        (any::<u64>(), any::<u64>()).prop_map(|(t, s)| (twin_line(u128::from(t), s), true)),
        Just((
            "#germline-twins {\"time_ns\":\"1\",\"seed\":\"2\"}\n".to_string(),
            false
        )),
        Just(("{\"x\":\"#germline-twin {}\"}\n".to_string(), false)),
        Just(("#\n".to_string(), false)),
        Just(("#germline-twin\n".to_string(), false)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the stream and however it is cut into reads, the server receives exactly the
    /// stream without its twin lines.
    #[test]
    fn the_twin_line_is_taken_off_the_stream_however_it_is_cut(
        lines in proptest::collection::vec(line(), 1..8),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let stream: String = lines.iter().map(|(l, _)| l.as_str()).collect();
        let want: String = lines.iter().filter(|(_, twin)| !twin).map(|(l, _)| l.as_str()).collect();
        let bytes = stream.as_bytes();
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        at.push(0);
        at.push(bytes.len());
        at.sort_unstable();
        at.dedup();
        let chunks: Vec<Vec<u8>> = at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect();
        let got = run(&chunks, Duration::from_millis(3));
        prop_assert_eq!(got["text"].as_str().unwrap_or("<none>"), want.as_str());
    }
}

#[test]
fn a_twin_line_cut_byte_by_byte_is_taken_off_too() {
    let stream = format!(
        "{{\"a\":1}}\n{}{{\"b\":2}}\n",
        twin_line(1_700_000_000_000_000_000, 7)
    );
    let chunks: Vec<Vec<u8>> = stream.bytes().map(|b| vec![b]).collect();
    let got = run(&chunks, Duration::from_millis(1));
    assert_eq!(got["text"], "{\"a\":1}\n{\"b\":2}\n");
}

/// Two copies of one call (the same twin line) draw the same values after it, from the given
/// time; before it they read the real clocks and the kernel's entropy; another seed draws
/// other entropy at the same times.
#[test]
fn copies_given_the_same_twin_line_draw_the_same_values_and_only_after_it() {
    let t: u128 = 1_700_000_000_123_456_789;
    // The first draw is made (and read back) before the twin line is written.
    let stream = |seed: u64| {
        vec![
            b"DRAW\n".to_vec(),
            format!("{}DRAW\nDRAW\n", twin_line(t, seed)).into_bytes(),
        ]
    };
    let gap = Duration::from_millis(1);
    let a = run(&stream(u64::MAX), gap);
    let b = run(&stream(u64::MAX), gap);
    let other = run(&stream(42), gap);
    let draws = |v: &Value| v["draws"].as_array().cloned().unwrap_or_default();
    let (da, db, dother) = (draws(&a), draws(&b), draws(&other));
    assert_eq!((da.len(), db.len(), dother.len()), (3, 3, 3), "{a} {b}");
    // Before the line: the real ones (two processes' nonces differ).
    assert_ne!(da[0][7], db[0][7], "real randomUUID before the line");
    assert_ne!(da[0][6], db[0][6], "real Math.random before the line");
    // After it: equal, draw for draw, and the clock starts at the given time.
    assert_eq!(da[1..], db[1..]);
    assert_eq!(da[1][0], serde_json::json!(1_700_000_000_123u64));
    assert_eq!(da[1][1], "2023-11-14T22:13:20.123Z");
    assert_ne!(da[1], da[2], "each draw moves on");
    // Another seed: the same clocks, other entropy.
    assert_eq!(da[1][0], dother[1][0]);
    assert_eq!(da[1][3], dother[1][3]);
    for k in 6..=13 {
        assert_ne!(da[1][k], dother[1][k], "source {k} follows the seed");
    }
}
