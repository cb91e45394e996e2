//! Issue 31: `germline client setup|list` writes and reads the MCP clients' own configuration
//! files (merged, backed up, atomic, malformed files refused), and the official MCP client SDK
//! spawns exactly the command line written and makes a call that works; and when `germline run`
//! cannot start, the SDK's `initialize` fails with the reason (not "Connection closed"), with a
//! bounded wait when stdin stays open.

mod run_common;

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use run_common::*;
use serde_json::{json, Value};

/// `germline client ARGS` as a user whose home is `home` and config home `xdg`.
fn client(home: &Path, xdg: &Path, args: &[&str]) -> Output {
    Command::new(germline())
        .arg("client")
        .args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", xdg)
        .env_remove("VSCODE_APPDATA")
        .output()
        .expect("germline client")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 path")
}

/// The `<file>.bak-*` backups next to `file`.
fn backups(file: &Path) -> Vec<PathBuf> {
    let name = file
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    let mut out: Vec<PathBuf> = std::fs::read_dir(file.parent().expect("dir"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&format!("{name}.bak-")))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777
}

/// The bundles are needed to verify a release; without them (no setup) the test skips unless
/// tests are required to run.
fn have_bundles() -> bool {
    let ok = bundle("germline-office").exists() && key().exists();
    assert!(
        ok || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs the example bundles (scripts/setup.sh)"
    );
    ok
}

#[test]
fn vscode_setup_writes_the_command_line_the_sdk_runs_and_a_call_works() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let policy = w.policy_pinned("127.0.0.1:9", "");
    let home = w.path().join("user");
    let xdg = w.path().join("xdg");
    // The user's VS Code file already holds an input and another server.
    let file = xdg.join("Code/User/mcp.json");
    std::fs::create_dir_all(file.parent().expect("dir")).expect("mkdir");
    let before = "{\n  \"inputs\": [{\"type\": \"promptString\", \"id\": \"tok\", \"password\": true}],\n  \"servers\": {\n    \"other\": {\"type\": \"stdio\", \"command\": \"npx\", \"args\": [\"-y\", \"x\"], \"env\": {\"T\": \"${input:tok}\"}}\n  }\n}\n";
    std::fs::write(&file, before).expect("write");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let state = w.path().join("broker-state");
    let audit = w.path().join("audit.jsonl");
    let out = client(
        &home,
        &xdg,
        &[
            "setup",
            "vscode",
            "--release",
            s(&bundle("germline-office")),
            "--key",
            s(&key()),
            "--policy",
            s(&policy),
            "--",
            "--state-dir",
            s(&state),
            "--audit",
            s(&audit),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("added server \"germline-office\""),
        "{}",
        text(&out.stdout)
    );

    // Merged: the input and the other server as they were; the old file backed up; the mode
    // kept.
    let written = std::fs::read_to_string(&file).expect("read");
    let v: Value = serde_json::from_str(&written).expect("JSON");
    let old: Value = serde_json::from_str(before).expect("JSON");
    assert_eq!(v["inputs"], old["inputs"]);
    assert_eq!(v["servers"]["other"], old["servers"]["other"]);
    assert_eq!(mode(&file), 0o640);
    let b = backups(&file);
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(std::fs::read_to_string(&b[0]).expect("backup"), before);
    assert_eq!(mode(&b[0]), 0o640);

    // The entry: VS Code's stdio form, absolute paths, this germline binary, the release's
    // canonical path last.
    let e = &v["servers"]["germline-office"];
    assert_eq!(e["type"], "stdio", "{written}");
    let command = e["command"].as_str().expect("command").to_string();
    assert_eq!(
        Path::new(&command),
        std::fs::canonicalize(germline()).expect("canonical")
    );
    let args: Vec<String> = e["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("string").to_string())
        .collect();
    assert_eq!(args[0], "run");
    assert_eq!(
        Path::new(args.last().expect("release")),
        std::fs::canonicalize(bundle("germline-office")).expect("canonical")
    );
    for (flag, value) in args.iter().zip(args.iter().skip(1)) {
        if ["--policy", "--key", "--state-dir", "--audit"].contains(&flag.as_str()) {
            assert!(Path::new(value).is_absolute(), "{flag} {value}");
        }
    }

    // The SDK spawns exactly that command line (its own reduced environment, as a client
    // does) and the call works.
    let mut server = vec![command.clone()];
    server.extend(args.iter().cloned());
    let script = json!([{"tool": "summarize", "arguments": {"text": "one two three"}}]);
    let r = run_agent(w.path(), &script, &server);
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0]["ok"], true, "{:?}", r[0]);
    assert_eq!(text_of(&r[0]), "3 words; starts with: one two three");

    // `client list` finds it.
    let out = client(&home, &xdg, &["list", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let all: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let vs = all
        .as_array()
        .expect("list")
        .iter()
        .find(|c| c["client"] == "vscode")
        .expect("vscode")
        .clone();
    assert_eq!(vs["config"], json!(file));
    assert_eq!(vs["exists"], true);
    assert_eq!(vs["servers"], 2);
    assert_eq!(vs["germline"][0]["name"], "germline-office");
    assert_eq!(vs["germline"][0]["release"], json!(args.last()));
    let out = client(&home, &xdg, &["list"]);
    assert!(
        text(&out.stdout).contains("2 server(s), 1 of them germline"),
        "{}",
        text(&out.stdout)
    );
}

fn text_of(r: &Value) -> String {
    run_common::text(r)
}

#[test]
fn setup_merges_refuses_without_force_backs_up_and_leaves_malformed_files_alone() {
    if !have_bundles() {
        return;
    }
    let w = World::new();
    let policy = w.policy_pinned("127.0.0.1:9", "");
    let home = w.path().join("user");
    let xdg = w.path().join("xdg");
    std::fs::create_dir_all(&home).expect("mkdir");
    let release = bundle("germline-office");
    let base = |client: &str| -> Vec<String> {
        [
            "setup",
            client,
            "--release",
            s(&release),
            "--key",
            s(&key()),
            "--policy",
            s(&policy),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let run = |args: &[String]| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        client(&home, &xdg, &a)
    };

    // Claude Desktop: no file yet; made under $XDG_CONFIG_HOME, mode 0600, nothing to back up.
    let claude = xdg.join("Claude/claude_desktop_config.json");
    let out = run(&base("claude-desktop"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let first = std::fs::read_to_string(&claude).expect("written");
    let v: Value = serde_json::from_str(&first).expect("JSON");
    let e = &v["mcpServers"]["germline-office"];
    assert!(e.get("type").is_none(), "{first}");
    assert_eq!(e["args"][0], "run");
    assert_eq!(mode(&claude), 0o600);
    assert!(backups(&claude).is_empty());

    // The same again: nothing to do, nothing written or backed up.
    let out = run(&base("claude-desktop"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("unchanged"),
        "{}",
        text(&out.stdout)
    );
    assert!(backups(&claude).is_empty());

    // A different server of the same name: refused without --force, the file untouched.
    let mut other = base("claude-desktop");
    other.extend(["--".into(), "--mode".into(), "sig-pin".into()]);
    let out = run(&other);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("already has a server named \"germline-office\"") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&claude).expect("read"), first);
    assert!(backups(&claude).is_empty());

    // --dry-run prints the result and writes nothing.
    let mut dry = other.clone();
    dry.insert(1, "--dry-run".into());
    dry.insert(1, "--force".into());
    let out = run(&dry);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown: Value = serde_json::from_slice(&out.stdout).expect("the file as it would be");
    assert_eq!(shown["mcpServers"]["germline-office"]["args"][5], "--mode");
    assert_eq!(std::fs::read_to_string(&claude).expect("read"), first);

    // --force replaces it, after backing up the old file.
    let mut force = other.clone();
    force.insert(1, "--force".into());
    let out = run(&force);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("replaced"),
        "{}",
        text(&out.stdout)
    );
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(&claude).expect("read")).expect("JSON");
    assert_eq!(v["mcpServers"]["germline-office"]["args"][6], "sig-pin");
    let b = backups(&claude);
    assert_eq!(b.len(), 1);
    assert_eq!(std::fs::read_to_string(&b[0]).expect("backup"), first);

    // Cursor (not under XDG_CONFIG_HOME): a file that is not JSON is refused with its line and
    // column and left alone.
    let cursor = home.join(".cursor/mcp.json");
    std::fs::create_dir_all(cursor.parent().expect("dir")).expect("mkdir");
    let bad = "{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\"},\n  }\n}\n";
    std::fs::write(&cursor, bad).expect("write");
    let out = run(&base("cursor"));
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains(&format!("{}:4:3:", cursor.display())), "{err}");
    assert!(err.contains("left as it was"), "{err}");
    assert_eq!(std::fs::read_to_string(&cursor).expect("read"), bad);
    assert!(backups(&cursor).is_empty());
    // ...and `list` says so instead of failing.
    let out = client(&home, &xdg, &["list", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let all: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(
        all[2]["error"]
            .as_str()
            .is_some_and(|e| e.contains(":4:3:")),
        "{all}"
    );
    assert_eq!(all[0]["germline"][0]["name"], "germline-office");

    // A symlinked file (a dotfiles manager's) is written through: the link stays.
    std::fs::remove_file(&cursor).expect("rm");
    let target = w.path().join("dotfiles-cursor.json");
    std::fs::write(&target, "{\"mcpServers\": {\"a\": {\"command\": \"x\"}}}").expect("write");
    std::os::unix::fs::symlink(&target, &cursor).expect("symlink");
    let out = run(&base("cursor"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(std::fs::symlink_metadata(&cursor)
        .expect("stat")
        .file_type()
        .is_symlink());
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(&target).expect("read")).expect("JSON");
    assert_eq!(v["mcpServers"]["a"]["command"], "x");
    assert_eq!(v["mcpServers"]["germline-office"]["args"][0], "run");

    // What would not start is not written: a relative path among the run options, options
    // `germline run` does not take, a key the release was not signed with.
    let mut rel = base("vscode");
    rel.extend(["--".into(), "--audit".into(), "audit.jsonl".into()]);
    let out = run(&rel);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--audit audit.jsonl: give an absolute path"),
        "{}",
        text(&out.stderr)
    );
    let mut unknown = base("vscode");
    unknown.extend(["--".into(), "--no-such-option".into()]);
    let out = run(&unknown);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("--no-such-option"),
        "{}",
        text(&out.stderr)
    );
    let other_key = other_key(w.path());
    let mut wrong = base("vscode");
    let k = wrong.iter().position(|a| a == "--key").expect("--key") + 1;
    wrong[k] = s(&other_key).to_string();
    let out = run(&wrong);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("refused"),
        "{}",
        text(&out.stderr)
    );
    assert!(!xdg.join("Code/User/mcp.json").exists());
}

/// A public key that signed nothing here.
fn other_key(dir: &Path) -> PathBuf {
    let d = dir.join("other-keys");
    let out = Command::new(germline())
        .args(["keygen", "--dir", s(&d)])
        .env("COSIGN_PASSWORD", "")
        .output()
        .expect("keygen");
    assert!(out.status.success(), "{}", text(&out.stderr));
    d.join("cosign.pub")
}

/// What the SDK's `initialize` gives against `server` (tests/run/initialize.py).
fn sdk_initialize(server: &[String]) -> Value {
    let out = Command::new(agent_python())
        .arg(root().join("tests/run/initialize.py"))
        .arg("--")
        .args(server)
        .stderr(Stdio::null())
        .output()
        .expect("initialize.py");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("initialize.py: {}", text(&out.stdout)))
}

#[test]
fn a_client_learns_why_germline_run_cannot_start() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let policy = w.policy_pinned("127.0.0.1:9", "");
    // A copy of the release with one file of its rootfs replaced (hard links, so the copy is
    // cheap and the original untouched).
    let tampered = w.path().join("tampered");
    let st = Command::new("cp")
        .args(["-al", s(&bundle("germline-office")), s(&tampered)])
        .status()
        .expect("cp");
    assert!(st.success());
    let f = tampered.join("rootfs/etc/ssl/certs/ca-certificates.crt");
    std::fs::remove_file(&f).expect("rm");
    std::fs::write(&f, "not the signed file\n").expect("write");
    let other = other_key(w.path());
    let bad_policy = w.path().join("bad-policy.toml");
    std::fs::write(&bad_policy, "[labels\n").expect("write");

    let cmd = |policy: &Path, key: &Path, release: &Path| -> Vec<String> {
        let mut v = run_cmd(policy, "germline", "germline-office", w.path(), &[]);
        let k = v.iter().position(|a| a == "--key").expect("--key") + 1;
        v[k] = s(key).to_string();
        *v.last_mut().expect("release") = s(release).to_string();
        v
    };
    let missing = w.path().join("no-such-release");
    let cases: [(&str, Vec<String>, &str); 4] = [
        (
            "a missing release",
            cmd(&policy, &key(), &missing),
            "neither an OCI image layout",
        ),
        (
            "a tampered release",
            cmd(&policy, &key(), &tampered),
            "rootfs digest mismatch",
        ),
        (
            "the wrong key",
            cmd(&policy, &other, &bundle("germline-office")),
            "refused",
        ),
        (
            "a policy that does not load",
            cmd(&bad_policy, &key(), &bundle("germline-office")),
            "bad-policy.toml",
        ),
    ];
    for (what, server, reason) in cases {
        let r = sdk_initialize(&server);
        assert_eq!(r["mcp_error"], true, "{what}: {r}");
        assert_eq!(r["code"], -32004, "{what}: {r}");
        let m = r["message"].as_str().unwrap_or_default();
        assert!(
            m.starts_with("germline run could not start: "),
            "{what}: {m}"
        );
        assert!(m.contains(reason), "{what}: {m}");
        assert!(
            r["seconds"].as_f64().is_some_and(|s| s < 5.0),
            "{what}: {r}"
        );
    }
    // The release itself starts (so the cases above failed for their reason).
    let r = sdk_initialize(&cmd(&policy, &key(), &bundle("germline-office")));
    assert_eq!(r["ok"], true, "{r}");
}

#[test]
fn a_start_failure_answers_initialize_at_once_and_waits_for_it_only_so_long() {
    let dir = tempfile::Builder::new()
        .prefix("germline-start-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[labels]\n[consumers]\nagent = []\n").expect("policy");
    let base = || {
        let mut c = Command::new(germline());
        c.args([
            "run",
            "--policy",
            s(&policy),
            "--key",
            s(&dir.path().join("k.pub")),
        ])
        .arg(dir.path().join("missing"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c
    };

    // stdin open and silent (an engine's `-i` whose agent never speaks): it gives up after
    // START_FAILURE_WAIT (5 s), exits 2, and has written nothing.
    let t0 = Instant::now();
    let mut child = base().stdin(Stdio::piped()).spawn().expect("germline run");
    let _stdin = child.stdin.take();
    let out = wait_output(child, Duration::from_secs(30));
    let took = t0.elapsed();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        took >= Duration::from_millis(4500) && took < Duration::from_secs(15),
        "{took:?}"
    );
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert!(
        text(&out.stderr).contains("germline: error: "),
        "{}",
        text(&out.stderr)
    );

    // stdin at its end: no wait.
    let t0 = Instant::now();
    let out = base().stdin(Stdio::null()).output().expect("germline run");
    assert_eq!(out.status.code(), Some(2));
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());

    // initialize arrives (stdin stays open): answered with its id, then exit 2 at once.
    let t0 = Instant::now();
    let mut child = base().stdin(Stdio::piped()).spawn().expect("germline run");
    let mut stdin = child.stdin.take().expect("stdin");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/x"})
    )
    .expect("write");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": "p1", "method": "ping"})
    )
    .expect("write");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {}})
    )
    .expect("write");
    let out = wait_output(child, Duration::from_secs(30));
    drop(stdin);
    assert_eq!(out.status.code(), Some(2));
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    let answers: Vec<Value> = BufReader::new(&out.stdout[..])
        .lines()
        .map_while(Result::ok)
        .map(|l| serde_json::from_str(&l).expect("JSON line"))
        .collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0]["id"], "p1");
    assert_eq!(answers[1]["id"], 7);
    for a in &answers {
        assert_eq!(a["error"]["code"], -32004, "{a}");
        assert!(
            a["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("germline run could not start: ")),
            "{a}"
        );
    }
}

/// Waits for `child` at most `limit` (killing it after), with its output.
fn wait_output(mut child: std::process::Child, limit: Duration) -> Output {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return child.wait_with_output().expect("output");
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            return child.wait_with_output().expect("output");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `program args` as uid/gid 65534 (nobody) with `HOME=home` (util-linux setpriv).
fn as_nobody(home: &Path, program: &Path, args: &[String]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "env"])
        .arg(format!("HOME={}", home.display()))
        .arg("XDG_CONFIG_HOME=")
        .arg(program)
        .args(args)
        .output()
        .expect("setpriv")
}

#[test]
fn an_unprivileged_user_sets_up_their_own_file_and_their_client_gets_a_reason() {
    if !can_run() {
        return;
    }
    // A directory nobody can read (World's is private to root), and nobody's home in it.
    let dir = tempfile::Builder::new()
        .prefix("germline-client-user-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let home = dir.path().join("home");
    std::fs::create_dir(&home).expect("mkdir");
    std::os::unix::fs::chown(&home, Some(65534), Some(65534)).expect("chown");
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[labels]\n[consumers]\nagent = []\n").expect("policy");
    let script = dir.path().join("initialize.py");
    std::fs::copy(root().join("tests/run/initialize.py"), &script).expect("copy");
    for f in [&policy, &script] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let setup: Vec<String> = [
        "client",
        "setup",
        "vscode",
        "--release",
        s(&bundle("germline-office")),
        "--key",
        s(&key()),
        "--policy",
        s(&policy),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let out = as_nobody(&home, &germline(), &setup);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The file is the user's own, at ~/.config (XDG_CONFIG_HOME empty counts as unset).
    let file = home.join(".config/Code/User/mcp.json");
    let meta = std::fs::metadata(&file).expect("written");
    assert_eq!(
        (
            std::os::unix::fs::MetadataExt::uid(&meta),
            std::os::unix::fs::MetadataExt::gid(&meta),
            mode(&file)
        ),
        (65534, 65534, 0o600)
    );
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("read")).expect("JSON");
    let e = &v["servers"]["germline-office"];
    let mut server = vec![e["command"].as_str().expect("command").to_string()];
    server.extend(
        e["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("string").to_string()),
    );

    // The SDK, as that user, spawns exactly that. Today `germline run` needs root, so its
    // `initialize` must fail with the reason (code -32004), not "Connection closed"; once
    // running without root is supported, it succeeds.
    let mut args = vec![s(&script).to_string(), "--".into()];
    args.extend(server);
    let out = as_nobody(&home, &agent_python(), &args);
    let r: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("initialize.py: {}", text(&out.stderr)));
    if r["ok"] != true {
        assert_eq!(r["code"], -32004, "{r}");
        let m = r["message"].as_str().unwrap_or_default();
        assert!(
            m.starts_with("germline run could not start: ") && m.len() > 31,
            "{m}"
        );
    }

    // root setting up that user's file keeps it theirs, and the backup too.
    let mut again = setup.clone();
    again.extend(["--name".into(), "second".into()]);
    let out = Command::new(germline())
        .args(&again)
        .env("HOME", &home)
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .expect("germline client");
    assert!(out.status.success(), "{}", text(&out.stderr));
    for f in std::iter::once(file.clone()).chain(backups(&file)) {
        let m = std::fs::metadata(&f).expect("stat");
        assert_eq!(
            (
                std::os::unix::fs::MetadataExt::uid(&m),
                std::os::unix::fs::MetadataExt::gid(&m)
            ),
            (65534, 65534),
            "{}",
            f.display()
        );
    }
    assert_eq!(backups(&file).len(), 1);
}
