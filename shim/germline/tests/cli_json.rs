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
