//! How a command prints its result: text for a person, or with `--json` one JSON document on
//! stdout; and how it fails: `germline: CMD: message` on stderr, or with `--json` one JSON
//! object `{"error": {...}}` on stderr (docs/user-guide.md, "Output"). The exit status is
//! non-zero either way, so a script never has to parse text to know that a command failed.

use std::path::Path;

use serde_json::{json, Map, Value};

/// Writes `text` to stdout. A reader that went away (`germline ... | head`) ends the
/// command quietly, as in other Unix tools, rather than with a panic's backtrace.
pub fn out(text: &str) {
    use std::io::Write as _;
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_all(text.as_bytes()).and_then(|()| o.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            // The documented exit status of a write to a closed pipe (128 + SIGPIPE).
            #[allow(clippy::exit)]
            std::process::exit(141);
        }
        eprintln!("germline: cannot write to stdout: {e}");
    }
}

/// `println!` through [`out`]: a reader that went away ends the command with status 141, never
/// a panic (`println!` panics on a closed pipe).
macro_rules! outln {
    ($($t:tt)*) => {
        $crate::output::out(&format!("{}\n", format_args!($($t)*)))
    };
}
pub(crate) use outln;

/// `print!` through [`out`].
macro_rules! outp {
    ($($t:tt)*) => {
        $crate::output::out(&format!($($t)*))
    };
}
pub(crate) use outp;

/// `--json`'s document on stdout, pretty-printed (one document, nothing else on stdout).
pub fn print_json(v: &Value) {
    let mut t = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
    t.push('\n');
    out(&t);
}

/// Prints `v` as JSON when `json`, else `text()`'s lines.
pub fn emit(json: bool, v: &Value, text: impl FnOnce() -> String) {
    if json {
        print_json(v);
    } else {
        let mut t = text();
        if !t.ends_with('\n') {
            t.push('\n');
        }
        out(&t);
    }
}

/// The error object `--json` prints on stderr: the command, the message, and where the
/// error type says it is, the file (and field, or line and column) it is about.
pub fn error_value(command: &str, message: &str, place: Map<String, Value>) -> Value {
    let mut e = Map::new();
    e.insert("command".into(), json!(command));
    e.insert("message".into(), json!(message));
    e.extend(place);
    json!({ "error": e })
}

/// Prints a failure of `command` on stderr as [`error_value`]'s object (one line).
pub fn print_error(command: &str, message: &str, place: Map<String, Value>) {
    let v = error_value(command, message, place);
    eprintln!("{}", serde_json::to_string(&v).unwrap_or_default());
}

fn path(p: &Path) -> Value {
    json!(p.to_string_lossy())
}

/// The file (and field) a release error is about, for the JSON error object.
pub fn release_place(e: &germline_release::error::Error) -> Map<String, Value> {
    use germline_release::error::Error as E;
    let mut m = Map::new();
    match e {
        E::Io { path: p, .. } | E::Rootfs { path: p, .. } => {
            m.insert("file".into(), path(p));
        }
        E::Manifest { file, field, .. } | E::Bundle { file, field, .. } => {
            m.insert("file".into(), json!(file));
            m.insert("field".into(), json!(field));
        }
        E::Json { file, .. }
        | E::Key { file, .. }
        | E::KeyPassword { file }
        | E::BadSignature { file, .. } => {
            m.insert("file".into(), json!(file));
        }
        E::Image { layout, .. } | E::BlobMismatch { layout, .. } => {
            m.insert("file".into(), path(layout));
        }
        E::Rollback { state, .. } => {
            m.insert("file".into(), path(state));
        }
        E::Tuf { repo, .. } => {
            m.insert("file".into(), json!(repo));
        }
        _ => {}
    }
    m
}

/// The file, line, column and field a policy error is about.
pub fn policy_place(e: &germline_policy::policy::PolicyError) -> Map<String, Value> {
    let mut m = Map::new();
    // Every variant but Read carries a `Location`; Read names its file. The fields are read
    // through the error's Display prefix `file:line:column`, which the policy crate keeps
    // stable for editors (docs/policy.md), rather than matching each of its variants here.
    if let germline_policy::policy::PolicyError::Read { file, .. } = e {
        m.insert("file".into(), path(file));
        return m;
    }
    let text = e.to_string();
    let mut parts = text.splitn(4, ':');
    if let (Some(file), Some(line), Some(col)) = (parts.next(), parts.next(), parts.next()) {
        if let (Ok(line), Ok(col)) = (line.parse::<u64>(), col.parse::<u64>()) {
            m.insert("file".into(), json!(file));
            m.insert("line".into(), json!(line));
            m.insert("column".into(), json!(col));
        }
    }
    if let Some(field) = text
        .split_once("field `")
        .and_then(|(_, r)| r.split_once('`'))
    {
        m.insert("field".into(), json!(field.0));
    }
    m
}
