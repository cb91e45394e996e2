//! `germline serve`'s status page (issue 31) for real: root, the fixture release
//! `germline-forward-plain` (bundles/forward: `ocr_pdf` sends its file to ocr.example and
//! declares no flow), a loopback sink as ocr.example, evidence on, the official MCP Python SDK
//! as the agent over Streamable HTTP (tests/run/serve_steps.py), and Debian's headless
//! Chromium as the person reading the page (tests/run/status_browser.py, over DevTools).
//!
//! An hr file sent to ocr.example is a trigger, re-run into an item witness that suppresses
//! the release, so the next call is refused: the page must show the release, the live
//! session, the call counts, the outcomes `ok` and `suppressed`, the broker's verdicts, the
//! witness and the dampening state, refresh itself when another call comes, and never show an
//! argument value (the files' paths) or an item's contents. Without the token, 401.

mod run_common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use run_common::*;
use serde_json::{json, Value};

const PLAIN: &str = "germline-forward-plain";
const CHROMIUM: &str = "/usr/bin/chromium";

fn ready() -> bool {
    if !can_run() {
        return false;
    }
    let have = bundle(PLAIN).exists() && Path::new(CHROMIUM).exists();
    assert!(
        have || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs bundles/out/{PLAIN} (bundles/build.sh) and Debian's chromium (apt-get install \
         chromium)"
    );
    have
}

/// A running `germline serve`, stopped (SIGTERM) when dropped.
struct Serve {
    child: Child,
    addr: String,
    token_file: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(60) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(w: &World, policy: &Path) -> Serve {
    let mut child = Command::new(germline())
        .arg("serve")
        .arg("--policy")
        .arg(policy)
        .arg("--key")
        .arg(key())
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--state-dir")
        .arg(w.path().join("state"))
        .arg("--evidence")
        .arg(w.path().join("evidence"))
        .args(["--probe-tries", "2"])
        .arg(bundle(PLAIN))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn germline serve");
    let err = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("[serve] {line}");
            let _ = tx.send(line);
        }
    });
    let (mut addr, mut token_file) = (None, None);
    while addr.is_none() || token_file.is_none() {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("germline serve came up");
        if let Some(rest) = line.strip_prefix("germline serve: http://") {
            addr = rest.split('/').next().map(str::to_string);
        }
        if let Some(p) = line.strip_prefix("germline serve: bearer token in ") {
            token_file = Some(PathBuf::from(p.trim()));
        }
    }
    Serve {
        child,
        addr: addr.expect("address"),
        token_file: token_file.expect("token file"),
    }
}

/// One HTTP/1.1 exchange: (status, lower-cased head, body).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn status_json(s: &Serve, token: &str) -> Value {
    let auth = format!("Bearer {token}");
    let (code, _, body) = http(
        &s.addr,
        "GET",
        "/status.json",
        &[("authorization", &auth)],
        "",
    );
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("status JSON")
}

fn wait_file(p: &Path, what: &str) {
    let t0 = Instant::now();
    while !p.exists() {
        assert!(t0.elapsed() < Duration::from_secs(180), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An agent session on `serve` running `steps` (tests/run/serve_steps.py).
fn agent(s: &Serve, dir: &Path, name: &str, steps: Value) -> Child {
    let sp = dir.join(format!("{name}.json"));
    std::fs::write(&sp, steps.to_string()).expect("steps");
    Command::new(agent_python())
        .arg(root().join("tests/run/serve_steps.py"))
        .arg(format!("http://{}/mcp", s.addr))
        .arg(&s.token_file)
        .arg(&sp)
        .stdout(Stdio::piped())
        .spawn()
        .expect("serve_steps.py")
}

fn lines_of(c: Child) -> Vec<Value> {
    let out = c.wait_with_output().expect("agent output");
    assert!(out.status.success(), "the agent failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|l: &Value| l.get("tool").is_some())
        .collect()
}

/// The cells' text of table `id` in a serialized DOM, row by row (tags dropped).
fn table(html: &str, id: &str) -> Vec<Vec<String>> {
    let Some(start) = html.find(&format!("<table id=\"{id}\"")) else {
        return vec![];
    };
    let t = &html[start..];
    let t = &t[..t.find("</table>").unwrap_or(t.len())];
    let body = t.split("<tbody>").nth(1).unwrap_or_default();
    body.split("<tr>")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .map(|c| {
                    let c = &c[c.find('>').map_or(0, |i| i + 1)..];
                    let c = &c[..c.find("</td>").unwrap_or(c.len())];
                    let mut text = String::new();
                    let mut in_tag = false;
                    for ch in c.chars() {
                        match ch {
                            '<' => in_tag = true,
                            '>' => in_tag = false,
                            ch if !in_tag => text.push(ch),
                            _ => {}
                        }
                    }
                    text.replace("&amp;", "&")
                        .replace("&lt;", "<")
                        .replace("&gt;", ">")
                })
                .collect()
        })
        .collect()
}

#[test]
fn the_status_page_shows_releases_sessions_calls_verdicts_and_witnesses_never_contents() {
    if !ready() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let s = serve(&w, &policy);
    let token = std::fs::read_to_string(&s.token_file)
        .expect("token")
        .trim()
        .to_string();

    // Without the token: 401 (the page offers its login form), and a wrong token or a
    // wrong login is refused alike.
    let (code, head, body) = http(&s.addr, "GET", "/status", &[], "");
    assert_eq!(code, 401, "{head}");
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    assert!(
        body.contains("name=\"token\"") && !body.contains("Recent calls"),
        "{body}"
    );
    assert!(
        head.contains("content-security-policy: default-src 'none'; style-src 'nonce-"),
        "{head}"
    );
    let (code, _, body) = http(&s.addr, "GET", "/status.json", &[], "");
    assert_eq!(code, 401, "{body}");
    let (code, _, _) = http(
        &s.addr,
        "GET",
        "/status.json",
        &[("authorization", "Bearer 0000000000000000000000000000000000")],
        "",
    );
    assert_eq!(code, 401);
    let (code, head, _) = http(
        &s.addr,
        "POST",
        "/status/login",
        &[("content-type", "application/x-www-form-urlencoded")],
        "token=0000000000000000000000000000000000",
    );
    assert_eq!(code, 401, "{head}");
    assert!(!head.contains("set-cookie"), "{head}");
    // The right token, posted from another site's page: the Origin guard refuses it.
    let form = format!("token={token}");
    let (code, head, _) = http(
        &s.addr,
        "POST",
        "/status/login",
        &[
            ("content-type", "application/x-www-form-urlencoded"),
            ("origin", "http://evil.example"),
        ],
        &form,
    );
    assert_eq!(code, 403, "{head}");
    assert!(!head.contains("set-cookie"), "{head}");
    // Posted from the page itself: a cookie for the page only, which opens no MCP session.
    let (code, head, _) = http(
        &s.addr,
        "POST",
        "/status/login",
        &[("content-type", "application/x-www-form-urlencoded")],
        &form,
    );
    assert_eq!(code, 303, "{head}");
    let set = head
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .expect("a login cookie")
        .to_string();
    assert!(
        set.contains("; httponly")
            && set.contains("; samesite=strict")
            && set.contains("; path=/status;"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap_or_default().to_string();
    let (code, _, body) = http(&s.addr, "GET", "/status", &[("cookie", &cookie)], "");
    assert_eq!(code, 200, "{body}");
    let init = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let (code, _, _) = http(
        &s.addr,
        "POST",
        "/mcp",
        &[
            ("cookie", &cookie),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ],
        init,
    );
    assert_eq!(code, 401, "the page's cookie is no MCP credential");
    // A cookie that was never issued is no login either.
    let (code, _, _) = http(
        &s.addr,
        "GET",
        "/status",
        &[("cookie", "germline_status=00000000000000000000000000000000")],
        "",
    );
    assert_eq!(code, 401);

    // Session A: a finance file (delivered to ocr.example), then an hr file: a trigger whose
    // re-runs make an item witness and suppress the release.
    let dir = w.path();
    let file =
        |p: &Path| json!({"tool": "ocr_pdf", "arguments": {"file": p.display().to_string()}});
    let mark = |n: &str| dir.join(n).display().to_string();
    let a = agent(
        &s,
        dir,
        "a",
        json!([file(&w.invoice), file(&w.salary), {"touch": mark("a1")},
               {"wait_file": mark("a2")}, file(&w.invoice), {"touch": mark("a3")},
               {"wait_file": mark("a4")}]),
    );
    wait_file(&dir.join("a1"), "session A's first two calls");
    let t0 = Instant::now();
    loop {
        let st = status_json(&s, &token);
        if st["witnesses"].as_array().is_some_and(|v| !v.is_empty())
            && st["releases"][0]["dampening"]["suppressed"] == json!(true)
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(180),
            "no witness on the page: {st}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    std::fs::write(dir.join("a2"), "").expect("a2");
    wait_file(&dir.join("a3"), "session A's refused call");

    // The browser logs in with the form, reads the page, then watches it refresh while
    // session B's call is refused too.
    let out = dir.join("browser");
    std::fs::create_dir_all(&out).expect("browser dir");
    let browser = Command::new(agent_python())
        .arg(root().join("tests/run/status_browser.py"))
        .arg(format!("http://{}", s.addr))
        .arg(&s.token_file)
        .arg(&out)
        .stdout(Stdio::piped())
        .spawn()
        .expect("status_browser.py");
    wait_file(&out.join("first.done"), "the browser's first look");
    let b = lines_of(agent(&s, dir, "b", json!([file(&w.invoice)])));
    std::fs::write(out.join("more"), "").expect("more");
    let seen = browser.wait_with_output().expect("browser");
    assert!(seen.status.success(), "status_browser.py failed");
    let seen: Value = serde_json::from_slice(&seen.stdout).expect("browser JSON");
    std::fs::write(dir.join("a4"), "").expect("a4");
    let a = lines_of(a);

    // What the agents got: ok, ok, then refused by dampening (A and B).
    let oks: Vec<bool> = a.iter().chain(&b).map(|r| r["ok"] == json!(true)).collect();
    assert_eq!(oks, [true, true, false, false], "{a:?} {b:?}");
    for r in [&a[2], &b[0]] {
        let e = r["error"].as_str().unwrap_or_default();
        assert!(e.contains("suppressed by dampening"), "{r}");
    }

    let login = std::fs::read_to_string(out.join("login.html")).expect("login.html");
    let first = std::fs::read_to_string(out.join("first.html")).expect("first.html");
    let second = std::fs::read_to_string(out.join("second.html")).expect("second.html");
    assert!(login.contains("name=\"token\"") && !login.contains("Recent calls"));

    // Never an argument value or an item's contents: the files' paths, names and texts.
    let json_text = status_json(&s, &token).to_string();
    for page in [&login, &first, &second, &json_text] {
        for secret in [
            w.path().display().to_string(),
            "salary.csv".into(),
            "invoice.txt".into(),
            w.canary_hr.clone(),
            "INVOICE".into(),
            "91234".into(),
        ] {
            assert!(
                !page.contains(&secret),
                "{secret:?} shown on the status page"
            );
        }
    }

    // The release, with its digest, calls, outcomes, triggers and dampening.
    let label = {
        let st = status_json(&s, &token);
        st["releases"][0]["release"]
            .as_str()
            .unwrap_or("?")
            .to_string()
    };
    assert!(label.starts_with("germline-forward-plain@"), "{label}");
    let rel = table(&first, "releases");
    assert_eq!(rel.len(), 1, "{rel:?}");
    assert_eq!(rel[0][0], label);
    assert!(rel[0][1].starts_with("sha256:"), "{rel:?}");
    assert_eq!(
        rel[0][4], "3",
        "three calls when the browser first looked: {rel:?}"
    );
    assert_eq!(rel[0][5], "ok 2, suppressed 1", "{rel:?}");
    assert!(
        rel[0][6].parse::<u64>().unwrap_or(0) >= 1,
        "a trigger: {rel:?}"
    );
    assert!(
        rel[0][8].starts_with("SUPPRESSED P ") && rel[0][8].contains("last item_witness"),
        "{rel:?}"
    );
    // Session A is live (B has not started): root's, with its three calls.
    let sessions = table(&first, "sessions");
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0][1], "root");
    assert_eq!(sessions[0][5], "3", "{sessions:?}");
    assert_eq!(
        sessions[0][0].len(),
        12,
        "a digest of the session id: {sessions:?}"
    );
    // The calls, newest first: tool, outcome, the broker's verdicts by declared host.
    let calls = table(&first, "calls");
    let got: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c[3].as_str(), c[4].as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("ocr_pdf", "suppressed"),
            ("ocr_pdf", "ok"),
            ("ocr_pdf", "ok")
        ],
        "{calls:?}"
    );
    assert!(calls[2][8].contains("ocr.example delivered"), "{calls:?}");
    assert!(calls[1][8].contains("ocr.example"), "{calls:?}");
    assert_eq!(
        (calls[0][7].as_str(), calls[1][7].as_str()),
        ("-", "finance, hr"),
        "{calls:?}"
    );
    // The witness: the hr call's item witness to ocr.example, at the hr clearance.
    let wit = table(&first, "witnesses");
    assert_eq!(wit.len(), 1, "{wit:?}");
    assert_eq!(
        (wit[0][2].as_str(), wit[0][3].as_str(), wit[0][4].as_str()),
        ("ocr_pdf", "ocr.example", "item_witness"),
        "{wit:?}"
    );
    assert!(wit[0][5].contains("hr"), "{wit:?}");

    // Refreshed live: the page reloaded itself and shows B's refused call.
    assert!(
        seen["second_calls"].as_u64() > seen["first_calls"].as_u64(),
        "{seen}"
    );
    let rel2 = table(&second, "releases");
    assert_eq!(rel2[0][4], "4", "{rel2:?}");
    assert_eq!(rel2[0][5], "ok 2, suppressed 2", "{rel2:?}");

    // The login is a cookie no script can read; the page's own style applied under its
    // CSP nonce; nothing was blocked.
    assert_eq!(seen["cookie_visible_to_script"], json!(""), "{seen}");
    assert_eq!(seen["th_font_weight"], json!("600"), "{seen}");
    let console = seen["console"].to_string();
    assert!(!console.contains("Content Security Policy"), "{console}");

    // The screenshot, for the note.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    std::fs::copy(out.join("status.png"), &shot).expect("screenshot");
    eprintln!(
        "status page screenshot: {} (browser: {seen})",
        shot.display()
    );
}
