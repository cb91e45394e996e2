//! Every command that prints a result prints text for a person, or with `--json` one JSON
//! document on stdout; a failure under `--json` is one JSON object on stderr naming the
//! command and the file (field, line) it is about, with a non-zero exit (issue 31). Long
//! commands show progress on a terminal only: never in a pipe, nor with `--quiet` or `--json`.
//! Real commands on the real example release (bundles/out, from scripts/setup.sh).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_germline");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn bundle() -> PathBuf {
    repo().join("bundles/out/mcp-server-time/bundle")
}

fn key() -> PathBuf {
    repo().join("bundles/out/keys/cosign.pub")
}

/// The example release is needed; without it (no setup) the test skips unless tests are
/// required to run.
fn have_bundles() -> bool {
    let ok = bundle().exists() && key().exists();
    assert!(
        ok || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs the example bundles (scripts/setup.sh)"
    );
    ok
}

fn germline(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    Command::new(BIN)
        .args(args.iter().map(|a| a.as_ref()))
        .env("COSIGN_PASSWORD", "correct horse")
        .stdin(Stdio::null())
        .output()
        .expect("run germline")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The one JSON document a successful `--json` command printed on stdout (and nothing on
/// stderr that looks like progress).
fn json_ok(o: &Output) -> Value {
    assert!(o.status.success(), "{}", text(o));
    assert!(!o.stderr.contains(&0x1b), "no escapes: {}", text(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

/// The JSON error object a failed `--json` command printed as the one line of its stderr,
/// with nothing on stdout.
fn json_err(o: &Output, command: &str) -> serde_json::Map<String, Value> {
    assert!(!o.status.success(), "{}", text(o));
    assert!(o.stdout.is_empty(), "{}", text(o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{}", text(o));
    let v: Value = serde_json::from_str(&err).unwrap_or_else(|e| panic!("{e}: {}", text(o)));
    let e = v["error"].as_object().expect("an error object").clone();
    assert_eq!(e["command"], command, "{}", text(o));
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()));
    e
}

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[test]
fn release_verify_inspect_tuf_init_and_publish_in_text_and_json() {
    if !have_bundles() {
        return;
    }
    let t = tempfile::tempdir().expect("tempdir");
    let v = json_ok(&germline(&[
        &"release",
        &"verify",
        &"--json",
        &"--key",
        &key(),
        &bundle(),
    ]));
    assert_eq!(v["verified"], true);
    assert_eq!(v["name"], "mcp-server-time");
    let digest = v["rootfs_digest"].as_str().expect("digest").to_string();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );
    assert!(v["tuf"].is_null() && v["extracted_to"].is_null());

    // inspect --json reads the same digest (the manifest's pin), and says it was checked.
    let i = json_ok(&germline(&[
        &"release",
        &"inspect",
        &"--json",
        &"--key",
        &key(),
        &bundle(),
    ]));
    assert_eq!(i["rootfs_digest"], digest.as_str());
    assert_eq!(i["signature"], "verified");

    // The text form: for a person, not JSON, with the same facts.
    let o = germline(&[&"release", &"verify", &"--key", &key(), &bundle()]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(serde_json::from_str::<Value>(&out).is_err(), "{out}");
    assert!(out.starts_with("verified mcp-server-time "), "{out}");
    assert!(out.contains(&format!("rootfs digest: {digest}")), "{out}");

    // A TUF repository, the release published into it, and verified against it.
    let repo = t.path().join("tuf");
    let tuf_key = t.path().join("tuf.der");
    let init = json_ok(&germline(&[
        &"release",
        &"tuf-init",
        &"--json",
        &"--repo",
        &repo,
        &"--key",
        &tuf_key,
    ]));
    let root = PathBuf::from(init["root"].as_str().expect("root"));
    assert!(root.is_file(), "{init}");
    let p = json_ok(&germline(&[
        &"release",
        &"publish",
        &"--json",
        &"--repo",
        &repo,
        &"--tuf-key",
        &tuf_key,
        &"--key",
        &key(),
        &bundle(),
    ]));
    assert_eq!(p["rootfs_digest"], digest.as_str());
    let target = p["published"].as_str().expect("published").to_string();
    let v = json_ok(&germline(&[
        &"release",
        &"verify",
        &"--json",
        &"--key",
        &key(),
        &"--tuf-repo",
        &repo,
        &"--tuf-root",
        &root,
        &"--state",
        &t.path().join("state"),
        &bundle(),
    ]));
    assert_eq!(v["tuf"]["target"], target.as_str(), "{v}");
    assert!(v["tuf"]["targets_version"].as_u64().is_some(), "{v}");
}

#[test]
fn keygen_sign_and_policy_check_in_json() {
    let t = tempfile::tempdir().expect("tempdir");
    let dir = t.path().join("new/keys");
    let k = json_ok(&germline(&[&"keygen", &"--json", &"--dir", &dir]));
    assert_eq!(k["algorithm"], "ecdsa-p256");
    assert_eq!(k["password_empty"], false);
    let private = PathBuf::from(k["private_key"].as_str().expect("private_key"));
    assert_eq!(private, dir.join("cosign.key"));
    assert!(private.is_file() && dir.join("cosign.pub").is_file());
    assert!(k["fingerprint"]
        .as_str()
        .is_some_and(|f| f.starts_with("sha256:")));

    let blob = t.path().join("blob.txt");
    std::fs::write(&blob, b"hello").expect("blob");
    let sig = json_ok(&germline(&[
        &"release", &"sign", &"--json", &"--key", &private, &blob,
    ]));
    let b = PathBuf::from(sig["bundle"].as_str().expect("bundle"));
    assert_eq!(b, t.path().join("blob.txt.sigstore.json"));
    let bundle: Value = serde_json::from_slice(&std::fs::read(&b).expect("read")).expect("json");
    assert!(bundle["mediaType"].as_str().is_some(), "{bundle}");

    let example = repo().join("config/policy.example.toml");
    let p = json_ok(&germline(&[&"policy", &"check", &"--json", &example]));
    assert_eq!(p["ok"], true);
    assert!(
        p["labels"].as_object().is_some_and(|l| !l.is_empty()),
        "{p}"
    );
    assert!(p["rules"].as_array().is_some_and(|r| !r.is_empty()), "{p}");
    assert!(p["dampening"]["half_life"].as_f64().is_some(), "{p}");
}

#[test]
fn failures_under_json_are_one_object_on_stderr_naming_the_file() {
    let t = tempfile::tempdir().expect("tempdir");
    // A policy with an IP literal as a destination: file, line, column and field.
    let good = std::fs::read_to_string(repo().join("config/policy.example.toml")).expect("example");
    let bad = t.path().join("policy.toml");
    let policy = good.replace(
        "\"api.example\" = []",
        "\"api.example\" = []\n\"127.0.0.1\" = []",
    );
    assert_ne!(policy, good);
    std::fs::write(&bad, &policy).expect("write");
    let line = policy
        .lines()
        .position(|l| l.starts_with("\"127.0.0.1\""))
        .expect("line")
        + 1;
    let o = germline(&[&"policy", &"check", &"--json", &bad]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let e = json_err(&o, "policy check");
    assert_eq!(e["file"], s(&bad).as_str());
    assert_eq!(e["line"], line);
    assert_eq!(e["column"], 1);
    assert_eq!(e["field"], "destinations.\"127.0.0.1\"");
    // Without --json, the same failure is text.
    let o = germline(&[&"policy", &"check", &bad]);
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("germline: error: "));

    // plan with that policy: the same object, under plan.
    let call = repo().join("config/call.fig2c.json");
    let o = germline(&[&"plan", &"--json", &"--policy", &bad, &"--call", &call]);
    assert_eq!(json_err(&o, "plan")["line"], line);

    // keygen where a key already is: the file it refuses to overwrite.
    let dir = t.path().join("k");
    json_ok(&germline(&[&"keygen", &"--json", &"--dir", &dir]));
    let o = germline(&[&"keygen", &"--json", &"--dir", &dir]);
    let e = json_err(&o, "keygen");
    assert!(
        e["file"].as_str().is_some_and(|f| f.starts_with(&s(&dir))),
        "{e:?}"
    );

    // verify with a key that did not sign the release: the signature's file.
    if have_bundles() {
        let other = dir.join("cosign.pub");
        let o = germline(&[
            &"release",
            &"verify",
            &"--json",
            &"--key",
            &other,
            &bundle(),
        ]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        let e = json_err(&o, "release verify");
        assert!(
            e["file"]
                .as_str()
                .is_some_and(|f| f.starts_with(&s(&bundle()))),
            "{e:?}"
        );
    }
    // A release that is not there.
    let missing = t.path().join("missing");
    let o = germline(&[&"release", &"verify", &"--json", &"--key", &key(), &missing]);
    assert_eq!(json_err(&o, "release verify")["file"], s(&missing).as_str());
}

#[test]
fn witness_list_and_bench_verify_in_text_and_json() {
    let t = tempfile::tempdir().expect("tempdir");
    let ev = t.path().join("evidence");
    std::fs::create_dir_all(&ev).expect("mkdir");
    let v = json_ok(&germline(&[
        &"witness",
        &"list",
        &"--json",
        &"--evidence",
        &ev,
    ]));
    assert_eq!(v["witnesses"], serde_json::json!([]));
    assert_eq!(v["pending"], serde_json::json!([]));
    let o = germline(&[&"witness", &"list", &"--evidence", &ev]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("0 witness records, 0 pending"), "{out}");

    let file = t.path().join("bench-verify.json");
    let v = json_ok(&germline(&[
        &"release",
        &"bench-verify",
        &"--json",
        &"--size-mb",
        &"1",
        &"--runs",
        &"1",
        &"--output",
        &file,
    ]));
    let written: Value =
        serde_json::from_slice(&std::fs::read(&file).expect("written")).expect("json");
    assert_eq!(v, written);
    assert_eq!(v["runs"], 1);
    assert!(
        v["bundle_verify_seconds"]["median"].as_f64().is_some(),
        "{v}"
    );
}

/// `cmd` run on a terminal (a pty from util-linux `script`); what the terminal showed.
fn on_a_terminal(cmd: &str) -> String {
    let o = Command::new("script")
        .args(["-qec", cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script(1) from util-linux");
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn progress_shows_on_a_terminal_only() {
    if !have_bundles() {
        return;
    }
    let verify = format!("{BIN} release verify --key {} {}", s(&key()), s(&bundle()));
    // In a pipe: the result on stdout, and stderr holds nothing at all.
    let o = germline(&[&"release", &"verify", &"--key", &key(), &bundle()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(o.stderr.is_empty(), "{}", text(&o));
    assert!(!o.stdout.contains(&0x1b), "{}", text(&o));
    // On a terminal: the spinner with its step, cleared before the result.
    let screen = on_a_terminal(&verify);
    assert!(
        screen.contains("verifying ") && screen.contains("\x1b[2K"),
        "{screen:?}"
    );
    assert!(screen.contains("verified mcp-server-time"), "{screen:?}");
    // --quiet or --json: nothing drawn, even on a terminal.
    for flag in ["--quiet", "--json"] {
        let screen = on_a_terminal(&format!("{verify} {flag}"));
        assert!(!screen.contains('\x1b'), "{flag}: {screen:?}");
        assert!(!screen.contains("verifying "), "{flag}: {screen:?}");
    }
}

/// The example release's signing key and its password (bundles/build.sh).
fn example_key() -> PathBuf {
    repo().join("bundles/out/keys/cosign.key")
}

/// `germline release pack` of the example release's rootfs into `out`: signed when `signed`.
fn pack_args(t: &Path, out: &str, signed: bool) -> Vec<String> {
    let manifest = t.join("manifest.json");
    if !manifest.exists() {
        std::fs::copy(
            repo().join("bundles/mcp-server-time/manifest.json"),
            &manifest,
        )
        .expect("copy the manifest");
    }
    let mut a = vec![
        "release".into(),
        "pack".into(),
        "--manifest".into(),
        s(&manifest),
        "--rootfs".into(),
        s(&bundle().join("rootfs")),
        "--out".into(),
        s(&t.join(out)),
    ];
    if signed {
        a.extend(["--key".into(), s(&example_key())]);
    }
    a
}

fn pack(args: &[String]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("COSIGN_PASSWORD", "germline-example-test-key")
        .stdin(Stdio::null())
        .output()
        .expect("germline release pack")
}

#[test]
fn release_pack_in_text_and_json_with_progress_on_a_terminal_only() {
    if !have_bundles() {
        return;
    }
    let t = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let example = json_ok(&germline(&[
        &"release",
        &"verify",
        &"--json",
        &"--key",
        &key(),
        &bundle(),
    ]));

    // --json: the document scripts read (bundles/build.sh's pack.json), nothing on stderr.
    let mut a = pack_args(t.path(), "json", true);
    a.push("--json".into());
    let o = pack(&a);
    let v = json_ok(&o);
    assert!(o.stderr.is_empty(), "{}", text(&o));
    assert_eq!(v["name"], "mcp-server-time");
    assert_eq!(v["signed"], true);
    assert_eq!(v["rootfs_digest"], example["rootfs_digest"], "{v}");
    assert_eq!(v["bundle"], s(&t.path().join("json")));
    assert!(v["image"].is_null() && v["image_manifest"].is_null(), "{v}");
    // What it packed verifies, with the digest it printed.
    let packed = json_ok(&germline(&[
        &"release",
        &"verify",
        &"--json",
        &"--key",
        &key(),
        &t.path().join("json"),
    ]));
    assert_eq!(packed["rootfs_digest"], v["rootfs_digest"]);

    // Text by default: for a person, the same facts, and no progress in a pipe.
    let o = pack(&pack_args(t.path(), "text", false));
    assert!(o.status.success(), "{}", text(&o));
    assert!(o.stderr.is_empty(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(serde_json::from_str::<Value>(&out).is_err(), "{out}");
    assert!(out.starts_with("packed mcp-server-time "), "{out}");
    let digest = example["rootfs_digest"].as_str().expect("digest");
    assert!(out.contains(&format!("rootfs digest: {digest}")), "{out}");
    assert!(out.contains("unsigned (no --key)"), "{out}");

    // On a terminal: the spinner, cleared before the result; none with --json.
    let cmd = |out: &str, extra: &str| {
        format!(
            "COSIGN_PASSWORD=x {BIN} {} {extra}",
            pack_args(t.path(), out, false).join(" ")
        )
    };
    let screen = on_a_terminal(&cmd("tty", ""));
    assert!(
        screen.contains("packing ") && screen.contains("\x1b[2K"),
        "{screen:?}"
    );
    assert!(screen.contains("packed mcp-server-time"), "{screen:?}");
    let screen = on_a_terminal(&cmd("tty-json", "--json"));
    assert!(!screen.contains('\x1b'), "{screen:?}");
    assert!(!screen.contains("packing "), "{screen:?}");

    // A failure under --json: one object naming the manifest it could not read.
    let missing = t.path().join("no-manifest.json");
    let e = json_err(
        &germline(&[
            &"release",
            &"pack",
            &"--json",
            &"--manifest",
            &missing,
            &"--rootfs",
            &bundle().join("rootfs"),
            &"--out",
            &t.path().join("never"),
        ]),
        "release pack",
    );
    assert_eq!(e["file"], s(&missing));
}

#[test]
fn gc_in_text_and_json() {
    // gc reads and removes root's leftovers (cgroups, /run/germline).
    if !nix_root() {
        return;
    }
    let v = json_ok(&germline(&[&"gc", &"--json"]));
    let keys: Vec<&str> = v
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["cgroups", "dirs", "failed", "processes"], "{v}");
    assert!(v["failed"].as_array().is_some_and(Vec::is_empty), "{v}");
    // The text: usually nothing is left for a second sweep, and it says so; or (a session that
    // died meanwhile, on a busy machine) a count and one line per thing removed.
    let o = germline(&[&"gc"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(serde_json::from_str::<Value>(&out).is_err(), "{out}");
    let mut lines = out.lines();
    let first = lines.next().unwrap_or_default();
    if first != "nothing to remove: no leftovers of stopped sessions" {
        assert!(first.starts_with("removed "), "{out}");
        assert!(
            lines.all(|l| l.starts_with("  cgroup ") || l.starts_with("  directory ")),
            "{out}"
        );
    }
}

fn nix_root() -> bool {
    let root = nix::unistd::Uid::effective().is_root();
    assert!(
        root || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs root"
    );
    root
}

/// The sandbox's commands need root and the test rootfs `mcp-server-time` names
/// (scripts/setup.d/40-sandbox.sh; the marker its version writes).
fn can_start_a_germline() -> bool {
    if !nix_root() {
        return false;
    }
    let ok = Path::new("/var/tmp/germline-sandbox/rootfs-python/.germline-rootfs-v2").exists();
    assert!(
        ok || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs the sandbox rootfs (scripts/setup.d/40-sandbox.sh)"
    );
    ok
}

/// Stops the germline `id` when the test ends, passed or not.
struct Running(String);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = germline(&[&"stop", &self.0]);
        // `start` keeps the background supervisor's log beside its socket.
        let _ = std::fs::remove_file(format!("/run/germline/{}.log", self.0));
    }
}

#[test]
fn sandbox_start_status_call_stop_in_text_and_json() {
    if !can_start_a_germline() {
        return;
    }
    let pid = std::process::id();
    let (a, b) = (format!("clijson-{pid}-a"), format!("clijson-{pid}-b"));

    // start --json: where it runs; start: a line for a person.
    let v = json_ok(&germline(&[
        &"start",
        &"mcp-server-time",
        &"--id",
        &a,
        &"--json",
    ]));
    let _a = Running(a.clone());
    assert_eq!(v["id"], a.as_str());
    assert!(v["pid"].as_u64().is_some_and(|p| p > 1), "{v}");
    assert_eq!(v["socket"], format!("/run/germline/{a}.sock"));
    let o = germline(&[&"start", &"mcp-server-time", &"--id", &b]);
    let _b = Running(b.clone());
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with(&format!("germline {b} started (pid ")),
        "{out}"
    );

    // status: the checks for a person; --json: the supervisor's document.
    let st = json_ok(&germline(&[&"status", &a, &"--json"]));
    assert_eq!(st["id"], a.as_str());
    assert_eq!(st["g1_g3"], "pass", "{st}");
    let o = germline(&[&"status", &a]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with(&format!("germline {a} (pid {}): G1-G3 pass", st["pid"])),
        "{out}"
    );
    assert!(out.contains("copies made: 0"), "{out}");

    // call: the tool's text; --json: the answer `{result}` with the same facts.
    let args = r#"{"timezone":"UTC"}"#;
    let r = json_ok(&germline(&[
        &"call",
        &a,
        &"get_current_time",
        &args,
        &"--json",
    ]));
    assert_eq!(r["result"]["isError"], false, "{r}");
    assert_eq!(r["result"]["structuredContent"]["timezone"], "UTC", "{r}");
    let o = germline(&[&"call", &a, &"get_current_time", &args]);
    assert!(o.status.success(), "{}", text(&o));
    let shown: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert_eq!(
        shown["timezone"],
        "UTC",
        "the tool's own text: {}",
        text(&o)
    );
    assert!(shown.get("result").is_none(), "{}", text(&o));
    // A refused call under --json: the error object on stderr, stdout empty.
    let e = json_err(
        &germline(&[&"call", &a, &"no_such_tool", &"--json"]),
        "call",
    );
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("no_such_tool")),
        "{e:?}"
    );
    let o = germline(&[&"call", &a, &"no_such_tool"]);
    assert!(!o.status.success() && o.stdout.is_empty(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).starts_with("germline: "),
        "{}",
        text(&o)
    );

    // stop --json: `{stopped: true}`; stop: a line; stopping it again fails.
    let s1 = json_ok(&germline(&[&"stop", &a, &"--json"]));
    assert_eq!(s1, serde_json::json!({"stopped": true}));
    let o = germline(&[&"stop", &b]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("germline {b} stopped")
    );
    json_err(&germline(&[&"stop", &a, &"--json"]), "stop");

    // sandbox-bench (a research command): its table, or with --json the same figures.
    let v = json_ok(&germline(&[
        &"sandbox-bench",
        &"mcp-server-time",
        &"--n",
        &"1",
        &"--json",
    ]));
    let modes = v["modes"].as_array().expect("modes");
    assert_eq!(
        modes.iter().map(|m| m["pool"].clone()).collect::<Vec<_>>(),
        [0, 2]
    );
    for m in modes {
        assert!(
            m["answer_ms"]["median"].as_f64().is_some_and(|t| t > 0.0),
            "{v}"
        );
        assert!(m["private_mib"]["max"].as_f64().is_some(), "{v}");
    }
    let o = germline(&[&"sandbox-bench", &"mcp-server-time", &"--n", &"1"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("germline pid "), "{out}");
    assert_eq!(out.lines().count(), 7, "{out}");
}

#[test]
fn client_and_broker_bench_in_text_and_json() {
    if !have_bundles() {
        return;
    }
    // client setup's failure under --json: the JSON object, not `germline: error:`.
    let t = tempfile::tempdir().expect("tempdir");
    let policy = t.path().join("no-policy.toml");
    let e = json_err(
        &germline(&[
            &"client",
            &"setup",
            &"vscode",
            &"--release",
            &bundle(),
            &"--key",
            &key(),
            &"--policy",
            &policy,
            &"--config",
            &t.path().join("mcp.json"),
            &"--json",
        ]),
        "client setup",
    );
    assert!(
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains(&s(&policy))),
        "{e:?}"
    );
    assert!(!t.path().join("mcp.json").exists());
    // broker bench: --json prints the document --out writes; text by default.
    if !nix_root() {
        return;
    }
    let file = t.path().join("broker.json");
    let v = json_ok(&germline(&[
        &"broker",
        &"bench",
        &"--requests",
        &"20",
        &"--out",
        &file,
        &"--json",
    ]));
    let written: Value =
        serde_json::from_slice(&std::fs::read(&file).expect("written")).expect("json");
    assert_eq!(v, written);
    assert_eq!(v["requests"], 20);
    let o = germline(&[&"broker", &"bench", &"--requests", &"20"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("broker bench: 20 requests per side"),
        "{out}"
    );
}
