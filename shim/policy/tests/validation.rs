//! Issue 25 item 9: values a policy (or a `germline plan --call` file) must refuse, each with
//! `file:line:column`, the field, what was found (printable) and what was expected. One test
//! per class, several spellings each; each also checks that the well-formed neighbours of the
//! refused values are still accepted, so a rule that refuses everything fails here too.

use std::path::Path;

use germline_policy::policy::{CallError, Location};
use germline_policy::{CallSpec, Policy, PolicyError};

const BASE: &str = r#"[labels]
hr = "HR records"
finance = "invoices"

[destinations]
"ocr.example" = ["finance"]
{dest}
[consumers]
agent = ["hr", "finance"]
{rest}"#;

fn policy(dest: &str, rest: &str) -> String {
    BASE.replace("{dest}", dest).replace("{rest}", rest)
}

/// `s` as a TOML basic string, with every control character escaped.
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// 1-based line and column of the first occurrence of `needle` in `text`.
fn pos(text: &str, needle: &str) -> (usize, usize) {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in\n{text}"));
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.rfind('\n').map_or(at, |n| at - n - 1) + 1;
    (line, column)
}

struct Refusal {
    at: Location,
    field: String,
    message: String,
    shown: String,
}

fn parse(text: &str) -> Result<Policy, PolicyError> {
    Policy::parse(Path::new("policy.toml"), text)
}

fn refuse(text: &str) -> Refusal {
    match parse(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => {
            let shown = e.to_string();
            match e {
                PolicyError::Invalid { at, field, message } => Refusal {
                    at,
                    field,
                    message,
                    shown,
                },
                other => panic!("expected a field error, got: {other}\n{text}"),
            }
        }
    }
}

/// Checks the refusal's location is where `needle` starts, its field, that it shows what
/// was found (escaped, so printable) unless `found` is `None`, and what was expected.
fn check(text: &str, needle: &str, field: &str, found: Option<&str>, expected: &str) -> Refusal {
    let r = refuse(text);
    let (line, column) = pos(text, needle);
    assert_eq!(
        (r.at.line, r.at.column),
        (line, column),
        "location of {needle:?}: {}",
        r.shown
    );
    assert_eq!(r.at.file, Path::new("policy.toml"));
    assert_eq!(r.field, field, "{}", r.shown);
    assert!(
        r.shown
            .starts_with(&format!("policy.toml:{line}:{column}: field `{field}`: ")),
        "{}",
        r.shown
    );
    if let Some(found) = found {
        let f = format!("found {found:?}");
        assert!(r.message.contains(&f), "{f} not in: {}", r.shown);
    }
    assert!(
        r.message.contains(expected),
        "{expected:?} not in: {}",
        r.shown
    );
    assert!(
        !r.shown.chars().any(|c| c.is_control()),
        "unprintable: {:?}",
        r.shown
    );
    r
}

const HOST_EXPECTED: &str = "expected a lowercase DNS host name";

const BAD_HOSTS: &[&str] = &[
    "",
    "*",
    "*.example",
    "ocr.*",
    // IP literals, every spelling a URL parser or resolver takes as an address.
    "127.0.0.1",
    "10.1.2.3",
    "::1",
    "[::1]",
    "::ffff:127.0.0.1",
    "fe80::1%eth0",
    "2130706433",
    "0x7f.1",
    "0x7f000001",
    "0X7F.0.0.1",
    "127.1",
    "017700000001",
    "0177.0.0.1",
    "ocr.0x1f",
    "ocr.123",
    // The broker's own names and localhost.
    "state.germline",
    "germline",
    "x.state.germline",
    "localhost",
    "api.localhost",
    // Not a host name at all.
    "ocr example",
    " ocr.example",
    "ocr.example ",
    "ocr\nexample",
    "ocr.example\n",
    "ocr\r\nexample",
    "ocr\0.example",
    "ocr\t.example",
    "ocr.example:80",
    "ocr.example:",
    "http://ocr.example",
    "https://ocr.example/",
    "ocr.example/v1",
    "user@ocr.example",
    "ocr.example.",
    ".ocr.example",
    "ocr..example",
    "-ocr.example",
    "ocr-.example",
    "ocr_a.example",
    "OCR.example",
    "Ocr.Example",
    "bücher.example",
    "ocr.example\u{202e}",
];

#[test]
fn destinations_must_be_lowercase_dns_host_names() {
    let long_label = format!("{}.example", "a".repeat(64));
    let long_name = format!("{}.example", vec!["a".repeat(61); 4].join("."));
    assert!(long_name.len() > 253);
    let mut bad: Vec<String> = BAD_HOSTS.iter().map(|s| s.to_string()).collect();
    bad.push(long_label);
    bad.push(long_name);
    for host in &bad {
        let key = quote(host);
        let text = policy(&format!("{key} = []\n"), "");
        check(
            &text,
            &format!("{key} = []"),
            &format!("destinations.{host:?}"),
            Some(host),
            HOST_EXPECTED,
        );
    }
    // Well-formed neighbours stay accepted.
    let ok_label = format!("{}.example", "a".repeat(63));
    let ok_name = format!("{}.example", vec!["a".repeat(61); 3].join("."));
    for host in [
        "api.example",
        "intranet",
        "a-b.c0",
        "1password.example",
        "123.example",
        "xn--bcher-kva.example",
        "a.b.c.d.e.example",
        ok_label.as_str(),
        ok_name.as_str(),
    ] {
        let text = policy(&format!("{} = []\n", quote(host)), "");
        let p = parse(&text).unwrap_or_else(|e| panic!("{host:?} refused: {e}"));
        assert!(p.hosts().any(|h| h == host));
    }
}

#[test]
fn destination_refusals_say_why() {
    let why = |host: &str| refuse(&policy(&format!("{} = []\n", quote(host)), "")).message;
    assert!(
        why("127.0.0.1").contains("IP address"),
        "{}",
        why("127.0.0.1")
    );
    assert!(why("0x7f.1").contains("IP address"), "{}", why("0x7f.1"));
    assert!(why("[::1]").contains("IP address"), "{}", why("[::1]"));
    assert!(why("state.germline").contains("germline"));
    assert!(why("ocr.example:80").contains("port"));
    assert!(why("http://ocr.example").contains("URL"));
    assert!(why("ocr.example.").contains("trailing dot"));
    assert!(why("bücher.example").contains("xn--"));
    assert!(why("OCR.example").contains("lowercase"));
}

#[test]
fn pin_and_credential_keys_are_host_names_too() {
    for host in [
        "ocr.example:80",
        "127.0.0.1",
        "*",
        "OCR.example",
        "state.germline",
    ] {
        let key = quote(host);
        let text = policy("", &format!("\n[pins]\n{key} = \"127.0.0.1:8080\"\n"));
        check(
            &text,
            &format!("{key} = \"127"),
            &format!("pins.{host:?}"),
            Some(host),
            HOST_EXPECTED,
        );
        let text = policy(
            "",
            &format!("\n[credentials.{key}]\nheader = \"X-Api-Key\"\nvalue = \"k\"\n"),
        );
        check(
            &text,
            &key,
            &format!("credentials.{host:?}"),
            Some(host),
            HOST_EXPECTED,
        );
    }
    // A well-formed host that is not declared is still refused as before.
    let text = policy("", "\n[pins]\n\"api.example\" = \"127.0.0.1:8080\"\n");
    check(
        &text,
        "\"api.example\" = ",
        "pins.\"api.example\"",
        None,
        "[destinations]",
    );
}

#[test]
fn pins_refuse_unusable_addresses_and_port_zero() {
    for addr in [
        "0.0.0.0",
        "0.0.0.0:80",
        "0.1.2.3:80",
        "::",
        "[::]:443",
        "[::ffff:0.0.0.0]:80",
        "255.255.255.255",
        "255.255.255.255:80",
        "240.0.0.1:80",
        "224.0.0.1",
        "239.255.255.250:1900",
        "[ff02::1]:80",
        "ff05::2",
        "127.0.0.1:0",
        "[::1]:0",
        "10.0.0.1:0",
        "localhost:80",
        "127.0.0.1:99999",
        "127.0.0.1:8080\n",
        "",
    ] {
        let text = policy(
            "",
            &format!("\n[pins]\n\"ocr.example\" = {}\n", quote(addr)),
        );
        check(
            &text,
            &quote(addr),
            "pins.\"ocr.example\"",
            Some(addr),
            "expected",
        );
    }
    // Loopback and private pins stay allowed: tests pin their loopback sinks.
    for addr in [
        "127.0.0.1:8080",
        "127.0.0.1",
        "[::1]:8080",
        "::1",
        "10.0.0.5:443",
        "192.168.1.1",
        "203.0.113.7:8443",
    ] {
        let text = policy(
            "",
            &format!("\n[pins]\n\"ocr.example\" = {}\n", quote(addr)),
        );
        let p = parse(&text).unwrap_or_else(|e| panic!("{addr:?} refused: {e}"));
        assert!(p.pin("ocr.example").is_some());
    }
}

fn credential(body: &str) -> String {
    policy("", &format!("\n[credentials.\"ocr.example\"]\n{body}\n"))
}

#[test]
fn credential_header_names_are_tokens() {
    for name in [
        "",
        "X-Api\r\nKey",
        "X-Api-Key\r\nX-Evil: 1",
        "X-Api-Key\n",
        "X Api Key",
        "X-Api-Key:",
        "X-Api\0Key",
        "Ключ",
        "(key)",
        "Host",
        "content-length",
        "Transfer-Encoding",
        "connection",
    ] {
        let text = credential(&format!("header = {}\nvalue = \"k\"", quote(name)));
        check(
            &text,
            &quote(name),
            "credentials.\"ocr.example\".header",
            Some(name),
            "expected",
        );
    }
    for name in [
        "X-Api-Key",
        "authorization",
        "x_key",
        "X-Key.v2",
        "k!#$%&'*+^`|~",
    ] {
        let text = credential(&format!("header = {}\nvalue = \"k\"", quote(name)));
        parse(&text).unwrap_or_else(|e| panic!("{name:?} refused: {e}"));
    }
}

#[test]
fn credential_values_never_break_a_request_and_are_never_printed() {
    for value in [
        "",
        "secret\r\nX-Evil: 1",
        "secret\n",
        "\nsecret",
        "sec\rret",
        "sec\0ret",
        "sec\u{7f}ret",
        "sec\u{1b}ret",
        " secret",
        "secret\t",
    ] {
        let text = credential(&format!("header = \"X-Api-Key\"\nvalue = {}", quote(value)));
        let r = check(
            &text,
            &quote(value),
            "credentials.\"ocr.example\".value",
            None,
            "expected",
        );
        if value.trim().len() > 3 {
            assert!(
                !r.shown.contains("secret") && !r.shown.contains("sec"),
                "the secret is printed: {}",
                r.shown
            );
        }
    }
    for value in ["k", "Bearer abc.def-ghi", "a b\tc", "tök€n"] {
        let text = credential(&format!("header = \"X-Api-Key\"\nvalue = {}", quote(value)));
        parse(&text).unwrap_or_else(|e| panic!("{value:?} refused: {e}"));
    }
}

#[test]
fn credential_query_names_and_env_names_are_sane() {
    for name in ["", "api key", "key\n", "key\0", "k&v=1", "ключ"] {
        let text = credential(&format!("query = {}\nvalue = \"k\"", quote(name)));
        check(
            &text,
            &quote(name),
            "credentials.\"ocr.example\".query",
            Some(name),
            "expected",
        );
    }
    for name in ["", "OCR KEY", "OCR=KEY", "OCR\0KEY", "1KEY", "KEY\n"] {
        let text = credential(&format!(
            "header = \"X-Api-Key\"\nvalue_env = {}",
            quote(name)
        ));
        check(
            &text,
            &quote(name),
            "credentials.\"ocr.example\".value_env",
            Some(name),
            "expected",
        );
    }
    let text = credential("query = \"api_key\"\nvalue_env = \"OCR_KEY_1\"");
    parse(&text).expect("good query and env names");
}

#[test]
fn credential_value_file_must_be_a_readable_regular_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = dir.path().join("key");
    std::fs::write(&good, "secret\n").expect("key");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&good, &link).expect("symlink");
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let missing = dir.path().join("missing");
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(&missing, &dangling).expect("symlink");
    let d = dir.path().display().to_string();
    for path in [
        missing.display().to_string(),
        dangling.display().to_string(),
        d.clone(),
        fifo.display().to_string(),
        "/dev/null".to_string(),
        "relative/key".to_string(),
        String::new(),
        format!("{d}/key\0"),
    ] {
        let text = credential(&format!(
            "header = \"X-Api-Key\"\nvalue_file = {}",
            quote(&path)
        ));
        let r = check(
            &text,
            &quote(&path),
            "credentials.\"ocr.example\".value_file",
            None,
            "expected",
        );
        assert!(
            r.message.contains(&format!("{path:?}")),
            "the path is not named: {}",
            r.shown
        );
    }
    for path in [&good, &link] {
        let text = credential(&format!(
            "header = \"X-Api-Key\"\nvalue_file = {}",
            quote(&path.display().to_string())
        ));
        parse(&text).unwrap_or_else(|e| panic!("{} refused: {e}", path.display()));
    }
}

#[test]
fn globs_with_nul_are_refused() {
    let cases = [
        (
            "[[item]]\npath = {}\nlabel = [\"hr\"]",
            "item[0].path",
            "/home/*/hr\0/**",
        ),
        (
            "[[item]]\npath = {}\nlabel = [\"hr\"]",
            "item[0].path",
            "\0",
        ),
        (
            "[[item]]\nuri = {}\nlabel = [\"hr\"]",
            "item[0].uri",
            "sqlite:///x\0*",
        ),
        (
            "[[item]]\nuri = {}\nlabel = [\"hr\"]",
            "item[0].uri",
            "file:///a\nb",
        ),
        (
            "[[argument]]\nname = {}\nlabel = [\"hr\"]",
            "argument[0].name",
            "a\0b",
        ),
        (
            "[[argument]]\nname = {}\nlabel = [\"hr\"]",
            "argument[0].name",
            "\0",
        ),
        (
            "[[argument]]\ntool = {}\nname = \"url\"\nlabel = []",
            "argument[0].tool",
            "fetch\0",
        ),
        (
            "[[argument]]\ntool = {}\nname = \"url\"\nlabel = []",
            "argument[0].tool",
            "fe\ntch",
        ),
    ];
    for (rule, field, pattern) in cases {
        let text = policy("", &format!("\n{}\n", rule.replace("{}", &quote(pattern))));
        check(&text, &quote(pattern), field, Some(pattern), "expected");
    }
}

#[test]
fn path_rules_are_canonical() {
    for pattern in [
        "/home//hr/**",
        "/home/./hr/**",
        "/home/*/../hr/**",
        "/home/..",
        "/home/hr/",
        "/./**",
    ] {
        let text = policy(
            "",
            &format!("\n[[item]]\npath = {}\nlabel = [\"hr\"]\n", quote(pattern)),
        );
        check(
            &text,
            &quote(pattern),
            "item[0].path",
            Some(pattern),
            "expected",
        );
    }
    for pattern in ["/", "/**", "/home/*/hr/**", "/home/.cache/**", "/a..b/*"] {
        let text = policy(
            "",
            &format!("\n[[item]]\npath = {}\nlabel = [\"hr\"]\n", quote(pattern)),
        );
        parse(&text).unwrap_or_else(|e| panic!("{pattern:?} refused: {e}"));
    }
}

#[test]
fn consumer_and_release_names_are_sane() {
    let long = "c".repeat(257);
    for name in ["", "a\nb", "agent\0", "a\r", "\u{1b}[31m", long.as_str()] {
        let key = quote(name);
        let text = BASE
            .replace("{dest}", "")
            .replace("{rest}", &format!("{key} = []\n"));
        check(
            &text,
            &format!("{key} = []"),
            &format!("consumers.{name:?}"),
            Some(name),
            "expected",
        );
    }
    for name in [
        "",
        "a b",
        "x\0",
        "../x",
        ".x",
        "a/b",
        "x\n",
        "ocr-tool@1.0.0",
    ] {
        let key = quote(name);
        let text = policy("", &format!("\n[lifetimes]\n{key} = \"session\"\n"));
        check(
            &text,
            &format!("{key} = \"session\""),
            &format!("lifetimes.{name:?}"),
            Some(name),
            "expected",
        );
    }
    let text = policy(
        "",
        "\n[lifetimes]\n\"mcp-server-time\" = \"single-shot\"\n\"a.b_c-1\" = \"session\"\n",
    );
    parse(&text).expect("good release names");
    let text = BASE.replace("{dest}", "").replace(
        "{rest}",
        "\"alice@corp.example\" = []\n\"blog.example\" = []\n",
    );
    parse(&text).expect("good consumer names");
}

#[test]
fn label_names_are_located_at_their_key() {
    for name in ["HR", "h r", "hr\n", ""] {
        let key = quote(name);
        let text = BASE
            .replace(
                "finance = \"invoices\"",
                &format!("finance = \"invoices\"\n{key} = \"x\""),
            )
            .replace("{dest}", "")
            .replace("{rest}", "");
        check(
            &text,
            &format!("{key} = \"x\""),
            &format!("labels.{name:?}"),
            Some(name),
            "expected",
        );
    }
}

// ---- the call file of `germline plan --call` -----------------------------------------------

fn call_refusal(json: &str) -> (usize, usize, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("call.json");
    std::fs::write(&file, json).expect("call");
    match CallSpec::load(&file) {
        Ok(_) => panic!("accepted: {json}"),
        Err(e) => {
            let shown = e.to_string();
            match e {
                CallError::Syntax {
                    file: f,
                    line,
                    column,
                    message,
                } => {
                    assert_eq!(f, file);
                    assert!(
                        shown.starts_with(&format!("{}:{line}:{column}: ", file.display())),
                        "{shown}"
                    );
                    assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
                    (line, column, message)
                }
                other => panic!("expected a located error, got: {other}"),
            }
        }
    }
}

/// Where serde_json reports a bad value: the column just past its closing quote.
fn after(json: &str, needle: &str) -> (usize, usize) {
    let (line, column) = pos(json, needle);
    (line, column + needle.chars().count())
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("json string")
}

#[test]
fn call_item_names_are_single_file_names() {
    for name in [
        "",
        "\0",
        "a\0b",
        "..",
        ".",
        "../x",
        "x/..",
        "a/../b",
        "a/b",
        "/etc/passwd",
        "x\n",
        ".hidden",
        "a..b",
    ] {
        let js = json_str(name);
        let json = format!(
            "{{\"function\": \"f\", \"destinations\": [\"ocr.example\"],\n \"items\": [\n  {{\"name\": \"ok.pdf\"}},\n  {{\"name\": {js}}}\n ]}}"
        );
        let (line, column, message) = call_refusal(&json);
        assert_eq!(
            (line, column),
            after(&json, &format!("\"name\": {js}")),
            "{message}"
        );
        assert!(message.contains("items[1].name"), "{message}");
        assert!(message.contains(&format!("found {name:?}")), "{message}");
        assert!(message.contains("expected"), "{message}");
    }
}

#[test]
fn call_destinations_and_consumers_are_checked() {
    for host in [
        "127.0.0.1",
        "*",
        "state.germline",
        "ocr.example:80",
        "http://x.example",
        "",
    ] {
        let js = json_str(host);
        let json = format!("{{\"function\": \"f\",\n \"destinations\": [\"ocr.example\", {js}]}}");
        let (line, column, message) = call_refusal(&json);
        assert_eq!(
            (line, column),
            after(&json, &format!(", {js}")),
            "{message}"
        );
        assert!(message.contains("destinations[1]"), "{message}");
        assert!(message.contains(HOST_EXPECTED), "{message}");
        assert!(message.contains(&format!("found {host:?}")), "{message}");
    }
    for name in ["", "a\nb", "x\0"] {
        let js = json_str(name);
        let json =
            format!("{{\"function\": \"f\", \"destinations\": [],\n \"consumers\": [{js}]}}");
        let (line, column, message) = call_refusal(&json);
        assert_eq!((line, column), after(&json, &format!("[{js}")), "{message}");
        assert!(message.contains("consumers[0]"), "{message}");
        assert!(message.contains(&format!("found {name:?}")), "{message}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("call.json");
    std::fs::write(
        &file,
        r#"{"function":"f","destinations":["ocr.example"],"consumers":["agent","alice@corp.example"],
            "items":[{"name":"invoice.pdf","path":"/home/a/finance/invoice.pdf"},{"name":"notes"}]}"#,
    )
    .expect("call");
    CallSpec::load(&file).expect("a good call");
}
