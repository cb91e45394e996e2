//! `germline client setup` and `germline client list`: `germline run` in the MCP clients' own
//! configuration files, where and in the form each client reads them on Linux
//! (docs/user-guide.md, "Desktop MCP clients", cites each client's documentation).
//!
//! The entry is exactly the command line a user would otherwise type, with absolute paths (the
//! client starts it from a working directory of its own, with a reduced environment), checked
//! before anything is written: the options parse as `germline run` parses them, the policy
//! loads, and the release verifies against the key. A file is merged, never regenerated: every
//! other key and server is kept, in its order and byte for byte; the old file is copied to
//! `<file>.bak-<UTC time>` first; the new one replaces it atomically (a temporary file in the
//! same directory, renamed over it), with the old one's mode and owner. A file that is not
//! JSON, or whose servers are not an object, is refused with its line and column and left as it
//! was.

use crate::output::{outln, outp};
use std::ffi::OsString;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use clap::{Args, FromArgMatches as _, Subcommand, ValueEnum};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use germline_mcp::cli::RunArgs;
use germline_policy::Policy;
use germline_release::{keys, release};

#[derive(Debug, Args)]
pub struct ClientArgs {
    #[command(subcommand)]
    pub cmd: ClientCmd,
}

#[derive(Debug, Subcommand)]
pub enum ClientCmd {
    /// Add `germline run` for a signed release to an MCP client's configuration (merged into
    /// the client's file, the old file backed up).
    Setup(SetupArgs),
    /// Each client's configuration file, whether it exists, and the germline servers in it.
    List(ListArgs),
}

/// The MCP clients whose configuration `germline client` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Client {
    /// Claude Desktop: `$XDG_CONFIG_HOME/Claude/claude_desktop_config.json` (`mcpServers`).
    ClaudeDesktop,
    /// VS Code's user profile: `$XDG_CONFIG_HOME/Code/User/mcp.json` (`servers`, type stdio).
    Vscode,
    /// Cursor's global file: `~/.cursor/mcp.json` (`mcpServers`).
    Cursor,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Where: claude-desktop $XDG_CONFIG_HOME/Claude/claude_desktop_config.json, vscode \
$XDG_CONFIG_HOME/Code/User/mcp.json ($VSCODE_APPDATA/Code/User/mcp.json if set), cursor \
~/.cursor/mcp.json; $XDG_CONFIG_HOME is ~/.config when unset. --config FILE writes another file \
of the same client (a VS Code profile, VS Code Insiders, a project's .cursor/mcp.json).
Example: germline client setup vscode --release /var/lib/germline/releases/time/image \
--key /etc/germline/keys/acme.pub -- --audit /var/log/germline/time.jsonl")]
pub struct SetupArgs {
    /// The MCP client whose configuration to write.
    #[arg(value_enum)]
    pub client: Client,
    /// The signed release the server runs (an unpacked bundle or an OCI image layout); it is
    /// verified with --key now, as `germline run` will verify it at every start.
    #[arg(long)]
    pub release: PathBuf,
    /// The publisher's pinned public key (cosign `PUBLIC KEY` PEM).
    #[arg(long)]
    pub key: PathBuf,
    /// The deployer's policy.
    #[arg(long, default_value = "/etc/germline/policy.toml")]
    pub policy: PathBuf,
    /// The server's name in the client (default: the release's name in its signed manifest).
    #[arg(long)]
    pub name: Option<String>,
    /// Write this file instead of the client's default one.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Replace a different server of the same name (the old file is backed up first).
    #[arg(long)]
    pub force: bool,
    /// Print the file as it would be written, and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub json: bool,
    /// More `germline run` options for the server, after `--` (e.g. `-- --mode sig-pin`); they
    /// are checked as `germline run` parses them, and paths among them must be absolute.
    #[arg(last = true, value_name = "RUN-OPTION")]
    pub run_args: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `germline client` fails on; each message names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "HOME is not set to an absolute path, so the client's configuration file cannot be \
         found; pass --config FILE"
    )]
    Home,
    #[error("{what} {}: {source}", .path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the `germline run` options do not parse: {0}")]
    RunArgs(String),
    #[error(
        "{flag} {}: give an absolute path (the client starts germline from a working \
         directory of its own)",
        .path.display()
    )]
    Relative { flag: &'static str, path: PathBuf },
    #[error("policy: {0}")]
    Policy(#[source] Box<germline_policy::PolicyError>),
    #[error("release {} refused: {source}", .path.display())]
    Release {
        path: PathBuf,
        #[source]
        source: Box<germline_release::error::Error>,
    },
    #[error(
        "the policy's lifetimes.{0:?} = \"long-lived\" needs `germline serve`; an MCP client \
         over stdio runs `germline run`, which is one session"
    )]
    LongLived(String),
    #[error("--name {0:?}: expected a non-empty name without control characters")]
    Name(String),
    #[error(
        "{}:{line}:{column}: {what}; expected {expected}.{hint} The file was left as it was.",
        .path.display()
    )]
    Malformed {
        path: PathBuf,
        line: usize,
        column: usize,
        what: String,
        expected: String,
        hint: &'static str,
    },
    #[error(
        "{} already has a server named {name:?} ({command}); pass --force to replace it (the \
         old file is backed up first), or --name to add this one under another name",
        .path.display()
    )]
    Exists {
        path: PathBuf,
        name: String,
        command: String,
    },
    #[error(
        "{} changed while germline was writing it (the client saving it?); nothing was \
         written: run the command again",
        .0.display()
    )]
    Changed(PathBuf),
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ClientError {
    let path = path.to_path_buf();
    move |source| ClientError::Io { what, path, source }
}

/// The environment the clients' locations depend on (a struct, so tests need not change the
/// process's).
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub home: Option<OsString>,
    pub xdg_config_home: Option<OsString>,
    pub vscode_appdata: Option<OsString>,
}

impl Env {
    pub fn from_process() -> Env {
        Env {
            home: std::env::var_os("HOME"),
            xdg_config_home: std::env::var_os("XDG_CONFIG_HOME"),
            vscode_appdata: std::env::var_os("VSCODE_APPDATA"),
        }
    }

    /// An absolute path from a variable; an empty or relative value counts as unset (the XDG
    /// Base Directory specification says to ignore a relative one).
    fn absolute(v: &Option<OsString>) -> Option<PathBuf> {
        v.as_ref().map(PathBuf::from).filter(|p| p.is_absolute())
    }

    fn home(&self) -> Result<PathBuf, ClientError> {
        Self::absolute(&self.home).ok_or(ClientError::Home)
    }

    /// `$XDG_CONFIG_HOME`, else `~/.config`: Electron's `appData` on Linux, under which Claude
    /// Desktop and VS Code keep their settings.
    fn config_home(&self) -> Result<PathBuf, ClientError> {
        match Self::absolute(&self.xdg_config_home) {
            Some(p) => Ok(p),
            None => Ok(self.home()?.join(".config")),
        }
    }
}

impl Client {
    pub const ALL: [Client; 3] = [Client::ClaudeDesktop, Client::Vscode, Client::Cursor];

    pub fn name(self) -> &'static str {
        match self {
            Client::ClaudeDesktop => "claude-desktop",
            Client::Vscode => "vscode",
            Client::Cursor => "cursor",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Client::ClaudeDesktop => "Claude Desktop",
            Client::Vscode => "VS Code",
            Client::Cursor => "Cursor",
        }
    }

    /// The top-level key holding the servers.
    pub fn servers_key(self) -> &'static str {
        match self {
            Client::Vscode => "servers",
            Client::ClaudeDesktop | Client::Cursor => "mcpServers",
        }
    }

    /// Where the client reads its user-wide MCP servers on Linux.
    pub fn config_path(self, env: &Env) -> Result<PathBuf, ClientError> {
        Ok(match self {
            Client::ClaudeDesktop => env.config_home()?.join("Claude/claude_desktop_config.json"),
            // VS Code's own override of its data directory comes first (its userDataPath).
            Client::Vscode => Env::absolute(&env.vscode_appdata)
                .map_or_else(|| env.config_home(), Ok)?
                .join("Code/User/mcp.json"),
            Client::Cursor => env.home()?.join(".cursor/mcp.json"),
        })
    }

    /// The server entry, in the client's form.
    fn entry<'a>(self, command: &'a str, args: &'a [String]) -> Entry<'a> {
        Entry {
            kind: (self == Client::Vscode).then_some("stdio"),
            command,
            args,
        }
    }

    fn expected(self) -> String {
        format!(
            "a JSON object whose \"{}\" is an object of servers, as {} reads it",
            self.servers_key(),
            self.title()
        )
    }

    fn hint(self) -> &'static str {
        match self {
            Client::Vscode => {
                " (VS Code also reads comments and trailing commas in mcp.json; germline rewrites \
                 only plain JSON, so that nothing of the file is lost: remove them, or add the \
                 server by hand.)"
            }
            Client::ClaudeDesktop | Client::Cursor => "",
        }
    }
}

/// One server entry; fields in the order the clients' documentation shows them.
#[derive(Debug, Serialize)]
struct Entry<'a> {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'a str>,
    command: &'a str,
    args: &'a [String],
}

/// A JSON object's members in the file's order, each value as its text in the file.
struct Ordered<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Ordered<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Ordered<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> Result<Ordered<'a>, M::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = m.next_entry::<String, &'de RawValue>()? {
                    out.push((k, v));
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// A client's configuration file, parsed only as deep as germline changes it.
#[derive(Debug)]
struct Doc<'a> {
    top: Vec<(String, Member<'a>)>,
    servers_key: &'static str,
}

#[derive(Debug)]
enum Member<'a> {
    Raw(&'a RawValue),
    /// The servers object, member by member.
    Servers(Vec<(String, Server<'a>)>),
}

#[derive(Debug)]
enum Server<'a> {
    Raw(&'a RawValue),
    New(String),
}

/// 1-based line and column of byte `offset` of `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = before.len()
        - before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |p| p + 1)
        + 1;
    (line, col)
}

impl<'a> Doc<'a> {
    /// Parses `text` (the file's contents; empty or blank is an empty object).
    fn parse(text: &'a str, client: Client, path: &Path) -> Result<Doc<'a>, ClientError> {
        let malformed = |line, column, what: String| ClientError::Malformed {
            path: path.to_path_buf(),
            line,
            column,
            what,
            expected: client.expected(),
            hint: client.hint(),
        };
        let servers_key = client.servers_key();
        if text.trim().is_empty() {
            return Ok(Doc {
                top: Vec::new(),
                servers_key,
            });
        }
        let top: Ordered<'a> = serde_json::from_str(text).map_err(|e| {
            let what = e.to_string();
            let what = what
                .rsplit_once(" at line ")
                .map_or(what.as_str(), |(w, _)| w)
                .to_string();
            // serde_json counts the bytes read on the line; before the first one, 0.
            malformed(e.line(), e.column().max(1), what)
        })?;
        let mut out = Vec::new();
        for (k, v) in top.0 {
            // A duplicate key: JSON.parse, which the clients use, keeps the last one.
            out.retain(|(key, _): &(String, Member)| *key != k);
            if k != servers_key {
                out.push((k, Member::Raw(v)));
                continue;
            }
            // Where the value starts in the file (it is borrowed from `text`).
            let at = (v.get().as_ptr() as usize).saturating_sub(text.as_ptr() as usize);
            let servers: Ordered<'a> = serde_json::from_str(v.get()).map_err(|_| {
                let (line, column) = line_col(text, at);
                let found = match v.get().as_bytes().first() {
                    Some(b'[') => "an array",
                    Some(b'"') => "a string",
                    Some(b'n') => "null",
                    Some(b't' | b'f') => "a boolean",
                    _ => "a number",
                };
                malformed(line, column, format!("\"{servers_key}\" is {found}"))
            })?;
            let mut list: Vec<(String, Server)> = Vec::new();
            for (name, s) in servers.0 {
                list.retain(|(n, _)| *n != name);
                list.push((name, Server::Raw(s)));
            }
            out.push((k, Member::Servers(list)));
        }
        Ok(Doc {
            top: out,
            servers_key,
        })
    }

    fn servers(&self) -> &[(String, Server<'a>)] {
        self.top
            .iter()
            .find_map(|(_, m)| match m {
                Member::Servers(s) => Some(s.as_slice()),
                Member::Raw(_) => None,
            })
            .unwrap_or(&[])
    }

    /// The server `name` as it is in the file, if there is one.
    fn server(&self, name: &str) -> Option<Value> {
        self.servers()
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| match s {
                Server::Raw(r) => serde_json::from_str(r.get()).unwrap_or(Value::Null),
                Server::New(t) => serde_json::from_str(t).unwrap_or(Value::Null),
            })
    }

    /// Puts the server `name` (its JSON text), in place of one of that name or last.
    fn set(&mut self, name: &str, entry: String) {
        let key = self.servers_key;
        let list = match self.top.iter_mut().find_map(|(_, m)| match m {
            Member::Servers(s) => Some(s),
            Member::Raw(_) => None,
        }) {
            Some(l) => l,
            None => {
                self.top
                    .push((key.to_string(), Member::Servers(Vec::new())));
                match self.top.last_mut() {
                    Some((_, Member::Servers(l))) => l,
                    _ => return,
                }
            }
        };
        match list.iter_mut().find(|(n, _)| n == name) {
            Some((_, s)) => *s = Server::New(entry),
            None => list.push((name.to_string(), Server::New(entry))),
        }
    }

    /// The file's new text: two-space indentation for what germline writes, every other value
    /// as it was.
    fn render(&self) -> String {
        let key = |k: &str| serde_json::to_string(k).unwrap_or_else(|_| format!("\"{k}\""));
        let mut out = String::from("{");
        for (i, (k, m)) in self.top.iter().enumerate() {
            out.push_str(if i == 0 { "\n  " } else { ",\n  " });
            out.push_str(&key(k));
            out.push_str(": ");
            match m {
                Member::Raw(r) => out.push_str(r.get()),
                Member::Servers(list) if list.is_empty() => out.push_str("{}"),
                Member::Servers(list) => {
                    out.push('{');
                    for (j, (n, s)) in list.iter().enumerate() {
                        out.push_str(if j == 0 { "\n    " } else { ",\n    " });
                        out.push_str(&key(n));
                        out.push_str(": ");
                        match s {
                            Server::Raw(r) => out.push_str(r.get()),
                            Server::New(t) => out.push_str(&t.replace('\n', "\n    ")),
                        }
                    }
                    out.push_str("\n  }");
                }
            }
        }
        out.push_str(if self.top.is_empty() { "}\n" } else { "\n}\n" });
        out
    }
}

/// `path`, made absolute and resolved, or an error naming `flag`.
fn canonical(path: &Path, flag: &'static str) -> Result<PathBuf, ClientError> {
    std::fs::canonicalize(path).map_err(io(flag, path))
}

/// The `germline run` arguments (after `run`) of the entry, parsed as `germline run` parses
/// them.
fn run_args(a: &SetupArgs) -> Result<(Vec<String>, RunArgs), ClientError> {
    let text = |p: PathBuf| p.to_string_lossy().into_owned();
    let mut args = vec![
        "run".to_string(),
        "--policy".into(),
        text(canonical(&a.policy, "--policy")?),
        "--key".into(),
        text(canonical(&a.key, "--key")?),
    ];
    args.extend(a.run_args.iter().cloned());
    args.push(text(canonical(&a.release, "--release")?));
    let cmd = <RunArgs as clap::Args>::augment_args(clap::Command::new("germline run"));
    let parsed = cmd
        .try_get_matches_from(&args)
        .and_then(|m| RunArgs::from_arg_matches(&m))
        .map_err(|e| ClientError::RunArgs(e.render().to_string().trim().to_string()))?;
    let paths: [(&'static str, Option<&Path>); 5] = [
        ("--broker", parsed.broker.broker.as_deref()),
        ("--state-dir", Some(&parsed.broker.state_dir)),
        ("--audit", parsed.broker.audit.as_deref()),
        ("--evidence", parsed.evidence.evidence.as_deref()),
        ("--outbox", parsed.outbox.as_deref()),
    ];
    for (flag, p) in paths {
        if let Some(p) = p.filter(|p| !p.is_absolute()) {
            return Err(ClientError::Relative {
                flag,
                path: p.to_path_buf(),
            });
        }
    }
    Ok((args, parsed))
}

/// What `setup` did, for its output.
#[derive(Debug, Serialize)]
struct Outcome {
    client: &'static str,
    config: PathBuf,
    name: String,
    command: String,
    args: Vec<String>,
    release: Value,
    /// `added`, `replaced`, `unchanged`, or with --dry-run `would-add`, `would-replace`.
    action: &'static str,
    backup: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
}

/// `germline client setup`.
pub fn setup(a: &SetupArgs) -> Result<(), ClientError> {
    let (args, run) = run_args(a)?;
    let release_path = PathBuf::from(args.last().cloned().unwrap_or_default());
    let policy = Policy::load(&run.policy).map_err(|e| ClientError::Policy(Box::new(e)))?;
    let refused = |source| ClientError::Release {
        path: release_path.clone(),
        source: Box::new(source),
    };
    let key = keys::load_public_key(&run.key).map_err(refused)?;
    let verified = release::verify_path_with(&release_path, &key, None, &run.image_limits.limits())
        .map_err(refused)?;
    let manifest = &verified.manifest;
    if policy.lifetime(&manifest.name) == germline_policy::limits::Lifetime::LongLived {
        return Err(ClientError::LongLived(manifest.name.clone()));
    }
    let name = a.name.clone().unwrap_or_else(|| manifest.name.clone());
    if name.is_empty() || name.chars().any(char::is_control) {
        return Err(ClientError::Name(name));
    }
    let exe = std::env::current_exe().map_err(io("this program's path", Path::new("")))?;
    let command = exe.to_string_lossy().into_owned();
    let entry_value = a.client.entry(&command, &args[..]);
    let entry_text = serde_json::to_string_pretty(&entry_value).unwrap_or_default();

    let path = match &a.config {
        Some(p) => p.clone(),
        None => a.client.config_path(&Env::from_process())?,
    };
    // A symlinked file (a dotfiles manager's) is written through, not replaced by a file.
    let path = match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_symlink() => canonical(&path, "config")?,
        _ => path,
    };
    let old = match std::fs::read(&path) {
        Ok(b) => Some(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io("config", &path)(e)),
    };
    let old_text = match &old {
        Some(b) => std::str::from_utf8(b).map_err(|e| {
            let text = String::from_utf8_lossy(&b[..e.valid_up_to()]).into_owned();
            let (line, column) = line_col(&text, text.len());
            ClientError::Malformed {
                path: path.clone(),
                line,
                column,
                what: "the file is not UTF-8".into(),
                expected: a.client.expected(),
                hint: "",
            }
        })?,
        None => "",
    };
    let mut doc = Doc::parse(old_text, a.client, &path)?;
    let wanted: Value = serde_json::to_value(&entry_value).unwrap_or(Value::Null);
    let existing = doc.server(&name);
    let action = match &existing {
        Some(v) if *v == wanted => "unchanged",
        Some(v) if !a.force => {
            return Err(ClientError::Exists {
                path,
                name,
                command: describe(v),
            })
        }
        Some(_) => "replaced",
        None => "added",
    };
    doc.set(&name, entry_text);
    let content = doc.render();
    // What is spliced in is checked whole before it is written.
    if let Err(e) = serde_json::from_str::<Value>(&content) {
        return Err(ClientError::Malformed {
            path,
            line: e.line(),
            column: e.column(),
            what: format!("germline's merge gave invalid JSON ({e}), a bug"),
            expected: a.client.expected(),
            hint: "",
        });
    }
    let mut out = Outcome {
        client: a.client.name(),
        config: path.clone(),
        name,
        command,
        args,
        release: json!({"name": manifest.name, "version": manifest.version,
                        "rootfs_digest": verified.rootfs_digest}),
        action,
        backup: None,
        content: None,
    };
    if a.dry_run {
        out.action = match action {
            "added" => "would-add",
            "replaced" => "would-replace",
            other => other,
        };
        if a.json {
            out.content = Some(content);
            print_json(&out);
        } else {
            eprintln!(
                "germline client setup: --dry-run: {} would be ({}; nothing written):",
                path.display(),
                out.action
            );
            outp!("{content}");
        }
        return Ok(());
    }
    if action != "unchanged" {
        out.backup = old.as_deref().map(|b| backup(&path, b)).transpose()?;
        write_atomic(&path, content.as_bytes(), old.as_deref())?;
    }
    if a.json {
        print_json(&out);
    } else {
        outln!(
            "{}: {} server {:?} in {}{}",
            a.client.name(),
            action,
            out.name,
            path.display(),
            out.backup
                .as_ref()
                .map(|b| format!(" (the old file is in {})", b.display()))
                .unwrap_or_default()
        );
        outln!("  {} {}", out.command, out.args.join(" "));
        if action != "unchanged" {
            outln!(
                "Restart {} (or reload its MCP servers) to start it.",
                a.client.title()
            );
        }
    }
    Ok(())
}

fn print_json(v: &impl Serialize) {
    match serde_json::to_string_pretty(v) {
        // A closed stdout (`| head`) is not an error of the command.
        Ok(s) => {
            let _ = writeln!(std::io::stdout(), "{s}");
        }
        Err(e) => eprintln!("germline: JSON output: {e}"),
    }
}

/// A server entry in a line: its command and arguments, or its URL.
fn describe(v: &Value) -> String {
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    match (
        v.get("command").and_then(Value::as_str),
        v.get("url").and_then(Value::as_str),
    ) {
        (Some(c), _) => std::iter::once(c.to_string())
            .chain(strings(v.get("args")))
            .collect::<Vec<_>>()
            .join(" "),
        (None, Some(u)) => u.to_string(),
        (None, None) => v.to_string(),
    }
}

/// Copies the old contents to `<file>.bak-<UTC time>` (never over an existing file), with the
/// file's mode and owner.
fn backup(path: &Path, old: &[u8]) -> Result<PathBuf, ClientError> {
    let meta = std::fs::metadata(path).map_err(io("config", path))?;
    let stamp = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".bak-{stamp}"));
    let base = PathBuf::from(name);
    for n in 1..1000u32 {
        let candidate = if n == 1 {
            base.clone()
        } else {
            let mut s = base.clone().into_os_string();
            s.push(format!("-{n}"));
            PathBuf::from(s)
        };
        let mut f = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(meta.mode() & 0o7777)
            .open(&candidate)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io("backup", &candidate)(e)),
        };
        keep_mode_and_owner(&f, &meta, &candidate)?;
        f.write_all(old)
            .and_then(|()| f.sync_all())
            .map_err(io("backup", &candidate))?;
        return Ok(candidate);
    }
    Err(io("backup", &base)(std::io::Error::from(
        std::io::ErrorKind::AlreadyExists,
    )))
}

/// Gives `f` the mode (not narrowed by the umask) and, where it differs, the owner of `meta`.
fn keep_mode_and_owner(
    f: &std::fs::File,
    meta: &std::fs::Metadata,
    path: &Path,
) -> Result<(), ClientError> {
    f.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o7777))
        .map_err(io("mode of", path))?;
    let ours = f.metadata().map_err(io("config", path))?;
    if (ours.uid(), ours.gid()) != (meta.uid(), meta.gid()) {
        std::os::unix::fs::fchown(f, Some(meta.uid()), Some(meta.gid()))
            .map_err(io("owner of", path))?;
    }
    Ok(())
}

/// Replaces `path` with `content` atomically: a temporary file in the same directory, synced,
/// renamed over it, and the directory synced. The old file's mode and owner are kept (a new
/// file is 0600: client configurations hold tokens). Refused if the file no longer holds
/// `old` (what was read and merged).
fn write_atomic(path: &Path, content: &[u8], old: Option<&[u8]>) -> Result<(), ClientError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(io("directory", &dir))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.germline-{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io("temporary file", &tmp))?;
        if old.is_some() {
            let meta = std::fs::metadata(path).map_err(io("config", path))?;
            keep_mode_and_owner(&f, &meta, &tmp)?;
        }
        f.write_all(content)
            .and_then(|()| f.sync_all())
            .map_err(io("temporary file", &tmp))?;
        let now = match std::fs::read(path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io("config", path)(e)),
        };
        if now.as_deref() != old {
            return Err(ClientError::Changed(path.to_path_buf()));
        }
        std::fs::rename(&tmp, path).map_err(io("config", path))?;
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io("directory", &dir))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A server entry that runs `germline run`: its command's file name is `germline` and its
/// first argument `run`.
fn is_germline(v: &Value) -> bool {
    let command = v.get("command").and_then(Value::as_str).unwrap_or_default();
    Path::new(command)
        .file_name()
        .is_some_and(|n| n == "germline")
        && v.get("args")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            == Some("run")
}

/// One client's file for `list`.
#[derive(Debug, Serialize)]
struct Listed {
    client: &'static str,
    config: Option<PathBuf>,
    exists: bool,
    servers: usize,
    germline: Vec<Value>,
    error: Option<String>,
}

fn list_one(client: Client, env: &Env) -> Listed {
    let mut out = Listed {
        client: client.name(),
        config: None,
        exists: false,
        servers: 0,
        germline: Vec::new(),
        error: None,
    };
    let path = match client.config_path(env) {
        Ok(p) => p,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    out.config = Some(path.clone());
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return out,
        Err(e) => {
            out.exists = path.exists();
            out.error = Some(io("config", &path)(e).to_string());
            return out;
        }
    };
    out.exists = true;
    let text = String::from_utf8_lossy(&bytes);
    match Doc::parse(&text, client, &path) {
        Ok(doc) => {
            out.servers = doc.servers().len();
            for (name, s) in doc.servers() {
                let v: Value = match s {
                    Server::Raw(r) => serde_json::from_str(r.get()).unwrap_or(Value::Null),
                    Server::New(t) => serde_json::from_str(t).unwrap_or(Value::Null),
                };
                if is_germline(&v) {
                    let args = v.get("args").cloned().unwrap_or(Value::Null);
                    let release = args
                        .as_array()
                        .and_then(|a| a.last())
                        .cloned()
                        .unwrap_or(Value::Null);
                    out.germline
                        .push(json!({"name": name, "command": v.get("command"),
                                             "args": args, "release": release}));
                }
            }
        }
        Err(e) => out.error = Some(e.to_string()),
    }
    out
}

/// `germline client list`.
pub fn list(a: &ListArgs) -> Result<(), ClientError> {
    let env = Env::from_process();
    let all: Vec<Listed> = Client::ALL.iter().map(|&c| list_one(c, &env)).collect();
    if a.json {
        print_json(&all);
        return Ok(());
    }
    for l in &all {
        let path = l
            .config
            .as_ref()
            .map_or_else(|| "?".to_string(), |p| p.display().to_string());
        outln!("{:<15} {path}", l.client);
        if let Some(e) = &l.error {
            outln!("  unreadable: {e}");
        } else if !l.exists {
            outln!("  not there yet");
        } else {
            outln!(
                "  {} server(s), {} of them germline",
                l.servers,
                l.germline.len()
            );
        }
        for g in &l.germline {
            outln!(
                "    {}: {}",
                g["name"].as_str().unwrap_or_default(),
                describe(g)
            );
        }
    }
    Ok(())
}

/// `germline client ...`.
impl ClientArgs {
    /// `--json` of the subcommand (a failure is then a JSON object on stderr).
    pub fn json(&self) -> bool {
        match &self.cmd {
            ClientCmd::Setup(s) => s.json,
            ClientCmd::List(l) => l.json,
        }
    }

    /// The command's name in an error.
    pub fn name(&self) -> &'static str {
        match &self.cmd {
            ClientCmd::Setup(_) => "client setup",
            ClientCmd::List(_) => "client list",
        }
    }
}

pub fn run(a: &ClientArgs) -> Result<(), ClientError> {
    match &a.cmd {
        ClientCmd::Setup(s) => setup(s),
        ClientCmd::List(l) => list(l),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(home: &str, xdg: Option<&str>) -> Env {
        Env {
            home: Some(home.into()),
            xdg_config_home: xdg.map(Into::into),
            vscode_appdata: None,
        }
    }

    #[test]
    fn locations_follow_each_client() {
        let e = env("/home/a", None);
        let p = |c: Client, e: &Env| c.config_path(e).expect("path");
        assert_eq!(
            p(Client::ClaudeDesktop, &e),
            Path::new("/home/a/.config/Claude/claude_desktop_config.json")
        );
        assert_eq!(
            p(Client::Vscode, &e),
            Path::new("/home/a/.config/Code/User/mcp.json")
        );
        assert_eq!(p(Client::Cursor, &e), Path::new("/home/a/.cursor/mcp.json"));
        // XDG_CONFIG_HOME moves the two Electron apps' files, not Cursor's; a relative one
        // is ignored, as the XDG specification says.
        let x = env("/home/a", Some("/x"));
        assert_eq!(
            p(Client::ClaudeDesktop, &x),
            Path::new("/x/Claude/claude_desktop_config.json")
        );
        assert_eq!(p(Client::Vscode, &x), Path::new("/x/Code/User/mcp.json"));
        assert_eq!(p(Client::Cursor, &x), Path::new("/home/a/.cursor/mcp.json"));
        let rel = env("/home/a", Some("rel"));
        assert_eq!(
            p(Client::Vscode, &rel),
            Path::new("/home/a/.config/Code/User/mcp.json")
        );
        let mut v = x.clone();
        v.vscode_appdata = Some("/v".into());
        assert_eq!(p(Client::Vscode, &v), Path::new("/v/Code/User/mcp.json"));
        assert!(matches!(
            Client::Cursor.config_path(&Env::default()),
            Err(ClientError::Home)
        ));
    }

    #[test]
    fn a_merge_keeps_every_other_member_in_its_order_and_spelling() {
        let text = "{\"theme\": \"dark\", \"n\": 1.50,\n \"mcpServers\": {\"z\": {\"command\": \"npx\"},\n \"a\": {\"url\": \"http://x\"}}, \"last\": [1, 2]}";
        let mut d = Doc::parse(text, Client::Cursor, Path::new("f")).expect("parse");
        d.set("new", "{\n  \"command\": \"/g\"\n}".into());
        let out = d.render();
        let v: Value = serde_json::from_str(&out).expect("JSON");
        let order: Vec<&str> = ["\"theme\"", "\"n\"", "\"mcpServers\"", "\"last\""].to_vec();
        let at: Vec<usize> = order.iter().map(|k| out.find(k).expect("key")).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{out}");
        assert!(out.contains("1.50"), "{out}");
        let names: Vec<usize> = ["\"z\"", "\"a\"", "\"new\""]
            .iter()
            .map(|k| out.find(k).expect("server"))
            .collect();
        assert!(names.windows(2).all(|w| w[0] < w[1]), "{out}");
        assert_eq!(v["mcpServers"]["new"]["command"], "/g");
        assert_eq!(v["last"], json!([1, 2]));
        // Replacing keeps the position.
        d.set("z", "{}".into());
        let out = d.render();
        assert!(out.find("\"z\"") < out.find("\"a\""), "{out}");
    }

    #[test]
    fn an_empty_file_and_a_missing_servers_key_are_filled_in() {
        for text in ["", "  \n", "{}", "{\"servers\": {}}"] {
            let mut d = Doc::parse(text, Client::Vscode, Path::new("f")).expect("parse");
            d.set("g", "{\"type\": \"stdio\"}".into());
            let v: Value = serde_json::from_str(&d.render()).expect("JSON");
            assert_eq!(v, json!({"servers": {"g": {"type": "stdio"}}}), "{text:?}");
        }
    }

    #[test]
    fn malformed_files_are_refused_with_line_and_column() {
        let err = |text: &str, c: Client| match Doc::parse(text, c, Path::new("/f.json")) {
            Err(ClientError::Malformed {
                line, column, what, ..
            }) => (line, column, what),
            other => panic!("{other:?}"),
        };
        let (l, c, w) = err(
            "{\n  \"servers\": {\n    \"a\": {},\n  }\n}",
            Client::Vscode,
        );
        assert_eq!((l, c), (4, 3), "{w}");
        let (l, c, w) = err("[1]", Client::Cursor);
        assert_eq!((l, c), (1, 1), "{w}");
        assert!(w.contains("expected a JSON object"), "{w}");
        let (l, c, w) = err("{\"a\": 1,\n \"mcpServers\": [\n]}", Client::ClaudeDesktop);
        assert_eq!((l, c), (2, 16));
        assert_eq!(w, "\"mcpServers\" is an array");
        let e = Doc::parse("{\"servers\": 5}", Client::Vscode, Path::new("/f.json"))
            .expect_err("refused")
            .to_string();
        assert!(
            e.starts_with("/f.json:1:13: \"servers\" is a number; expected"),
            "{e}"
        );
        assert!(e.contains("left as it was"), "{e}");
    }

    #[test]
    fn germline_entries_are_told_apart() {
        assert!(is_germline(
            &json!({"command": "/usr/bin/germline", "args": ["run", "x"]})
        ));
        assert!(!is_germline(
            &json!({"command": "/usr/bin/germline", "args": ["serve"]})
        ));
        assert!(!is_germline(&json!({"command": "npx", "args": ["run"]})));
    }
}
