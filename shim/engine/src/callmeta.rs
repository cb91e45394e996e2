//! A `tools/call` as Plan sees it (paper Definition 2, A5): the call's public metadata, its
//! labelled items, the declared destinations of the signed manifest and the consumers.
//!
//! Every argument value reaches every copy unless it is an item, so each leaf value of the
//! arguments is classified here, without ever looking at what an item file contains:
//! * a string naming a regular file on the host is a **file item** (the path is public, the
//!   contents are labelled by the policy's `[[item]]` path rules applied to the path of the
//!   file the kernel reaches, not to the spelling: fileitem.rs; a file no rule covers is
//!   refused, or given the default label if the policy says so);
//! * a `file://` or `sqlite:///` URI naming a regular file is a file item labelled the same
//!   way, by the policy's path and URI rules;
//! * a path naming a directory is a directory item (treeitem.rs): the directory (public) and
//!   each regular file in it, labelled as a file item; a copy gets the files of its view at
//!   their paths, the others are absent;
//! * with a working directory declared (`[workdirs]`), a relative string naming an existing
//!   file or directory below it is one of the above, as its absolute path would be;
//! * every other value is **inline**: labelled by the `[[argument]]` rules, by a URI rule it
//!   matches, or else by the policy's default label (which fails closed). A non-public inline
//!   value becomes an item of its own, empty in the copies outside its view.
//!
//! Labels from the call's `_meta` (`"germline/labels": {"<argument>": ["hr"]}`) are joined
//! in: they may raise a value's label, never lower it.
//!
//! Every leaf is identified by its structural path ([`ArgPath`]: object keys and array
//! indices, whatever the keys hold), never by a spelling of it: rules match it step by step,
//! and each copy's arguments are re-serialised from a redacted copy of the parsed value, in
//! which every item's path must resolve or the call fails (docs/policy.md, "Inline values").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use germline_policy::argpath::{tokens, Seg};
use germline_policy::policy::{Source, UnlabelledPath};
use germline_policy::{ArgPath, ItemMeta, Label, Member, Policy};
use germline_release::manifest::Tool;

use crate::fileitem::{self, FileItemError};
use crate::treeitem;
use serde_json::{Map, Value};

/// Largest file an item may be (files are read into memory and copied into each copy).
pub const MAX_ITEM_BYTES: u64 = 64 << 20;
/// Most leaf values a call's arguments may have.
pub const MAX_LEAVES: usize = 4096;
/// The `_meta` key under which an agent may raise labels.
pub const META_LABELS: &str = "germline/labels";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CallMetaError {
    #[error("arguments must be a JSON object, found {0}")]
    NotAnObject(&'static str),
    #[error("argument `{arg}`: file {path} is not covered by any [[item]] rule of {policy}; add a rule for it, or set defaults.unlabelled_path = \"default-label\"")]
    UnlabelledPath {
        arg: String,
        path: String,
        policy: String,
    },
    #[error("argument `{arg}`: cannot read {path}: {reason}")]
    Unreadable {
        arg: String,
        path: String,
        reason: String,
    },
    #[error("argument `{arg}`: {path} is {size} bytes, more than the {max}-byte item limit")]
    TooLarge {
        arg: String,
        path: String,
        size: u64,
        max: u64,
    },
    #[error("tool `{tool}` declares its destination as the host of argument `{arg}`, but {found}")]
    Destination {
        tool: String,
        arg: String,
        found: String,
    },
    #[error("tool `{tool}` names its result's recipients by argument `{arg}`, but {found}")]
    Recipient {
        tool: String,
        arg: String,
        found: String,
    },
    #[error("_meta.\"germline/labels\": {0}")]
    MetaLabels(String),
    #[error("the arguments have more than {MAX_LEAVES} values")]
    TooMany,
    /// An item's path names no value of the arguments: nothing is sent (fails closed).
    #[error("item {item:?}: the arguments hold no value at {path}; the call is refused rather than sent unredacted")]
    Unresolved { item: String, path: String },
}

/// Where an item's contents come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemKind {
    /// A file on the host, read by the shim (never by a copy).
    File { host_path: PathBuf },
    /// An inline argument value (its JSON text is the contents).
    Inline,
    /// A directory the agent named (treeitem.rs): public (its name is in the call), present
    /// in every copy at `host_path` (`treeitem::copy_root`), which the copy's argument names;
    /// `trusted`: its trusted path on the host, where a copy's writes are committed (issue 27).
    Dir {
        host_path: PathBuf,
        trusted: PathBuf,
    },
    /// A regular file of a directory item, labelled by its own rules (the item is named by
    /// its resolved path): at `host_path`, below its directory's place in the copies, in the
    /// copies whose view holds it, absent from the others.
    TreeFile {
        host_path: PathBuf,
        /// Permission bits and modification time `(seconds, nanoseconds)`.
        mode: u32,
        mtime: (i64, i64),
    },
}

/// One labelled item of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgItem {
    /// The public name Plan sees: the path, the URI, or `argument:<name>`.
    pub name: String,
    /// Where its value sits in the arguments (shown `files.0`, or `/data/x.y`).
    pub arg: ArgPath,
    pub label: Label,
    pub kind: ItemKind,
    /// The file name under a copy's `/run/items` (file items only).
    pub file_name: Option<String>,
    /// The contents: the file's bytes, or the value's JSON text.
    pub contents: Vec<u8>,
}

/// A call's public description and labelled items.
#[derive(Debug, Clone)]
pub struct CallMeta {
    pub tool: String,
    pub arguments: Value,
    pub items: Vec<ArgItem>,
    pub hosts: Vec<Member>,
    pub consumers: Vec<Member>,
    /// The agent's `_meta.progressToken`, given only to the agent's own copy.
    pub progress_token: Option<Value>,
    /// The agent's W3C trace context, `_meta.traceparent` and `_meta.tracestate` (public
    /// metadata the client chose to send): the call's span becomes a child of it. Only the
    /// syntax is checked here; [`crate::trace`] parses it.
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
    /// The policy whose rules label the paths a copy writes (issue 27, `crate::writes`): set
    /// by the session; `None` refuses every write.
    pub policy: Option<std::sync::Arc<Policy>>,
}

impl CallMeta {
    /// Plan's view of the items: names and labels only.
    pub fn item_meta(&self) -> Vec<ItemMeta> {
        self.items
            .iter()
            .map(|i| ItemMeta {
                name: i.name.clone(),
                label: i.label.clone(),
            })
            .collect()
    }

    /// The join of every item's label.
    pub fn label_of_all(&self) -> Label {
        let mut l = Label::public();
        for i in &self.items {
            l.join(&i.label);
        }
        l
    }

    /// The arguments one copy receives: items in `view` keep their value, other inline items
    /// become the empty value of their type; file arguments name the item's file inside the
    /// copy (`items_dir/<file_name>`), empty there when outside the view. Built from the
    /// parsed arguments (the copy gets it re-serialised, never the agent's bytes); an item
    /// whose path names no value fails the call rather than pass anything through.
    pub fn arguments_for(
        &self,
        in_view: &dyn Fn(&ArgItem) -> bool,
        items_dir: &str,
    ) -> Result<Value, CallMetaError> {
        let mut args = self.arguments.clone();
        let dirs: Vec<&PathBuf> = self
            .items
            .iter()
            .filter_map(|i| match &i.kind {
                ItemKind::Dir { host_path, .. } => Some(host_path),
                _ => None,
            })
            .collect();
        // A declared workspace's items (issue 27) sit at the empty path: no argument holds
        // them, so there is nothing to rewrite.
        for item in self.items.iter().filter(|i| !i.arg.segments().is_empty()) {
            let slot = item
                .arg
                .get_mut(&mut args)
                .ok_or_else(|| CallMetaError::Unresolved {
                    item: item.name.clone(),
                    path: item.arg.to_string(),
                })?;
            match (&item.kind, &item.file_name) {
                // A file of a directory item of the same call, in the view: the copy has it at
                // its own path there, which is what a tool on that directory expects (`git add
                // README` in the repository; issue 27). Elsewhere, under the items directory.
                (ItemKind::File { host_path }, _)
                    if in_view(item) && dirs.iter().any(|d| host_path.starts_with(d)) =>
                {
                    *slot = Value::String(host_path.display().to_string())
                }
                (ItemKind::File { .. }, Some(f)) => {
                    *slot = Value::String(format!("{items_dir}/{f}"))
                }
                // Where the copy finds the directory, however the agent spelled it.
                (ItemKind::Dir { host_path, .. }, _) => {
                    *slot = Value::String(host_path.display().to_string())
                }
                // Its directory's argument is public; the file is in the view or absent.
                (ItemKind::TreeFile { .. }, _) => {}
                _ if in_view(item) => {}
                _ => *slot = empty_like(slot),
            }
        }
        Ok(args)
    }
}

fn empty_like(v: &Value) -> Value {
    match v {
        Value::String(_) => Value::String(String::new()),
        Value::Number(_) => Value::from(0),
        Value::Bool(_) => Value::Bool(false),
        _ => Value::Null,
    }
}

/// Every non-null scalar of `v`, with its structural path (`path` is where `v` sits).
fn leaves<'a>(
    path: &mut ArgPath,
    v: &'a Value,
    out: &mut Vec<(ArgPath, &'a Value)>,
) -> Result<(), CallMetaError> {
    if out.len() > MAX_LEAVES {
        return Err(CallMetaError::TooMany);
    }
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                path.push(Seg::Key(k.clone()));
                leaves(path, x, out)?;
                path.pop();
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                path.push(Seg::Index(i));
                leaves(path, x, out)?;
                path.pop();
            }
        }
        Value::Null => {}
        other => out.push((path.clone(), other)),
    }
    Ok(())
}

fn looks_like_uri(s: &str) -> bool {
    match s.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme.len() < 32
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        }
        None => false,
    }
}

fn safe_file_name(index: usize, path: &Path) -> String {
    let base: String = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    format!("i{index}-{}", base.trim_start_matches('.'))
}

/// Labels raised by the call's `_meta`, by argument name.
pub fn meta_labels(
    policy: &Policy,
    meta: Option<&Value>,
) -> Result<BTreeMap<String, Label>, CallMetaError> {
    let mut out = BTreeMap::new();
    let Some(v) = meta.and_then(|m| m.get(META_LABELS)) else {
        return Ok(out);
    };
    let Value::Object(m) = v else {
        return Err(CallMetaError::MetaLabels(
            "expected an object of argument name -> list of labels".into(),
        ));
    };
    for (arg, tags) in m {
        let Some(list) = tags.as_array() else {
            return Err(CallMetaError::MetaLabels(format!(
                "`{arg}`: expected a list of labels"
            )));
        };
        let mut names = Vec::new();
        for t in list {
            match t.as_str() {
                Some(t) if policy.is_defined(t) => names.push(t.to_string()),
                Some(t) => {
                    return Err(CallMetaError::MetaLabels(format!(
                        "`{arg}`: label {t:?} is not defined by the policy {}",
                        policy.file().display()
                    )))
                }
                None => {
                    return Err(CallMetaError::MetaLabels(format!(
                        "`{arg}`: expected label names"
                    )))
                }
            }
        }
        out.insert(arg.clone(), Label::of(names));
    }
    Ok(out)
}

/// Joins into `label` every `_meta` raise naming the value at `path` or one it lies inside (a
/// label given for `files` raises `files.0`, `files.1`, ... as well). A name is read every way
/// it can be (the whole text as one top-level key, a dotted path, a pointer) and raises
/// wherever any reading fits: a raise can only add tags, so reading more is safe.
fn raised(raise: &BTreeMap<String, Label>, path: &ArgPath, label: &mut Label) {
    for (k, l) in raise {
        let whole = path.starts_with_tokens(std::slice::from_ref(k));
        if whole || tokens(k).is_ok_and(|t| path.starts_with_tokens(&t)) {
            label.join(l);
        }
    }
}

/// An argument whose value the signed manifest reads: the call's destination host
/// (`destinations.host_of_argument`) or its result's recipients (`consumers.of_argument`).
struct NamedArg<'a> {
    tool: &'a str,
    arg: &'a str,
    /// It names the recipients (else the destination host).
    recipients: bool,
}

impl<'a> NamedArg<'a> {
    fn destination(tool: &'a str, arg: &'a str) -> Self {
        NamedArg {
            tool,
            arg,
            recipients: false,
        }
    }

    fn recipients(tool: &'a str, arg: &'a str) -> Self {
        NamedArg {
            tool,
            arg,
            recipients: true,
        }
    }

    /// The error saying what is wrong with the argument (`found`).
    fn err(&self, found: String) -> CallMetaError {
        let (tool, arg) = (self.tool.to_string(), self.arg.to_string());
        if self.recipients {
            CallMetaError::Recipient { tool, arg, found }
        } else {
            CallMetaError::Destination { tool, arg, found }
        }
    }

    /// The argument's value in `arguments`.
    fn value<'v>(&self, arguments: &'v Value) -> Result<&'v Value, CallMetaError> {
        arguments
            .get(self.arg)
            .ok_or_else(|| self.err("the call has no such argument".into()))
    }
}

/// The destination hosts `D_f` the signed manifest declares for this call.
pub fn destinations(
    tool_name: &str,
    tool: &Tool,
    arguments: &Value,
) -> Result<Vec<String>, CallMetaError> {
    let mut hosts: Vec<String> = tool
        .destinations
        .hosts
        .iter()
        .flatten()
        .map(|h| h.to_ascii_lowercase())
        .collect();
    if let Some(arg) = &tool.destinations.host_of_argument {
        let named = NamedArg::destination(tool_name, arg);
        let v = named.value(arguments)?;
        let err = |found: String| named.err(found);
        let s = v
            .as_str()
            .ok_or_else(|| err(format!("its value is not a string: {v}")))?;
        let u = url::Url::parse(s).map_err(|e| err(format!("its value is not a URL ({e})")))?;
        if !matches!(u.scheme(), "http" | "https") {
            return Err(err(format!(
                "its scheme {:?} is not http or https",
                u.scheme()
            )));
        }
        let host = u
            .host_str()
            .ok_or_else(|| err("its URL has no host".into()))?
            .trim_matches(['[', ']'])
            .to_ascii_lowercase();
        hosts.push(host);
    }
    hosts.sort();
    hosts.dedup();
    Ok(hosts)
}

/// The recipients of the call's result besides the agent, as the signed manifest names them
/// (`consumers.names`, and the value of `consumers.of_argument`), sorted, without the agent.
/// They are public metadata (A5), so the naming argument must be public under the policy
/// (after any `_meta` raise): otherwise the call is refused, never the name hidden.
pub fn recipients(
    policy: &Policy,
    tool_name: &str,
    tool: &Tool,
    arguments: &Value,
    meta: Option<&Value>,
    agent: &str,
) -> Result<Vec<String>, CallMetaError> {
    let Some(c) = &tool.consumers else {
        return Ok(Vec::new());
    };
    let mut out: Vec<String> = c.names.clone();
    if let Some(arg) = &c.of_argument {
        let named = NamedArg::recipients(tool_name, arg);
        let v = named.value(arguments)?;
        let err = |found: String| named.err(found);
        let names: Vec<&str> = match v {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a
                .iter()
                .map(|x| {
                    x.as_str()
                        .ok_or_else(|| err(format!("{x} is not a string")))
                })
                .collect::<Result<_, _>>()?,
            other => return Err(err(format!("its value is not a string or a list: {other}"))),
        };
        let raise = meta_labels(policy, meta)?;
        for (i, n) in names.iter().enumerate() {
            let mut leaf = ArgPath::key(arg);
            if v.is_array() {
                leaf.push(Seg::Index(i));
            }
            let mut label = policy
                .argument_label(tool_name, &leaf)
                .or_else(|| policy.rule_label(Source::Uri, n))
                .or_else(|| policy.rule_label(Source::Path, n))
                .unwrap_or_else(|| policy.default_item_label().clone());
            raised(&raise, &leaf, &mut label);
            if !label.is_public() {
                return Err(err(format!(
                    "the policy labels it {{{}}}: a recipient's name reaches every copy (A5), so \
                     it must be public; add an [[argument]] rule with label = [] for it",
                    label.canonical()
                )));
            }
            if !germline_release::manifest::valid_consumer(n) {
                return Err(err(format!("{n:?} is not a consumer name")));
            }
            if germline_policy::workspace::is_workspace_consumer(n) {
                return Err(err(format!(
                    "{n:?} names a workspace: writes are committed to a workspace, never \
                     delivered (docs/policy.md \"Writes\")"
                )));
            }
            out.push(n.to_string());
        }
    }
    out.retain(|n| n != agent);
    out.sort();
    out.dedup();
    Ok(out)
}

/// Builds the call's metadata and items. `consumers` are the names of the result's consumers
/// (the agent, and any recipient the manifest names); their clearances come from the policy.
pub fn build(
    policy: &Policy,
    tool_name: &str,
    tool: &Tool,
    arguments: &Value,
    meta: Option<&Value>,
    consumers: &[String],
) -> Result<CallMeta, CallMetaError> {
    build_in(policy, None, tool_name, tool, arguments, meta, consumers)
}

/// Like [`build`], with relative paths resolved against the deployer's working directory
/// `workdir` (the policy's `[workdirs]`): a relative string that names an existing file or
/// directory there is an item as its absolute path would be.
pub fn build_in(
    policy: &Policy,
    workdir: Option<&Path>,
    tool_name: &str,
    tool: &Tool,
    arguments: &Value,
    meta: Option<&Value>,
    consumers: &[String],
) -> Result<CallMeta, CallMetaError> {
    let args: &Map<String, Value> = match arguments {
        Value::Object(m) => m,
        Value::Null => &Map::new(),
        Value::Array(_) => return Err(CallMetaError::NotAnObject("an array")),
        Value::String(_) => return Err(CallMetaError::NotAnObject("a string")),
        Value::Number(_) => return Err(CallMetaError::NotAnObject("a number")),
        Value::Bool(_) => return Err(CallMetaError::NotAnObject("a boolean")),
    };
    let arguments = Value::Object(args.clone());
    let raise = meta_labels(policy, meta)?;
    let mut flat = Vec::new();
    leaves(&mut ArgPath::default(), &arguments, &mut flat)?;
    let mut items: Vec<ArgItem> = Vec::new();
    for (path, value) in flat {
        let arg = path.to_string();
        let s = value.as_str();
        // A relative spelling names what it names below the working directory, if anything.
        let joined = match (s, workdir) {
            (Some(s), Some(w)) if !s.starts_with('/') && !looks_like_uri(s) => {
                treeitem::relative(w, s).and_then(|p| p.to_str().map(str::to_string))
            }
            _ => None,
        };
        let local = joined.as_deref().or(s);
        // A path or local file URI is resolved once, by the kernel, and labelled by the file
        // it reaches (fileitem.rs); its contents are read from that same descriptor.
        let file = match local {
            Some(s) if s.starts_with('/') || looks_like_uri(s) => {
                fileitem::open_item(policy, s, MAX_ITEM_BYTES).map_err(|e| match e {
                    FileItemError::TooLarge(size) => CallMetaError::TooLarge {
                        arg: arg.clone(),
                        path: s.to_string(),
                        size,
                        max: MAX_ITEM_BYTES,
                    },
                    FileItemError::Unreadable(reason) => CallMetaError::Unreadable {
                        arg: arg.clone(),
                        path: s.to_string(),
                        reason,
                    },
                })?
            }
            _ => None,
        };
        // Not a regular file: a directory is a tree of file items (treeitem.rs).
        let tree = match (&file, local.and_then(fileitem::Spelling::of)) {
            (None, Some(spelling)) => treeitem::open_tree(policy, spelling, MAX_ITEM_BYTES)
                .map_err(|e| unreadable(&arg, s.unwrap_or_default(), e))?,
            _ => None,
        };
        if let (Some(t), Some(name)) = (tree, s) {
            push_tree(&mut items, policy, &raise, &path, name, t)?;
            continue;
        }
        if let (Some(f), Some(name)) = (file, s) {
            let name = name.to_string();
            let mut label = match (f.label, policy.unlabelled_path()) {
                (Some(l), _) => l,
                (None, UnlabelledPath::DefaultLabel) => policy.default_item_label().clone(),
                (None, UnlabelledPath::Refuse) => {
                    // Rules match the resolved path: say which one was looked up.
                    let path = match &f.identity {
                        fileitem::Identity::Path(p) if p != f.spelling.path() => {
                            format!("{name} (resolved: {})", p.display())
                        }
                        _ => name,
                    };
                    return Err(CallMetaError::UnlabelledPath {
                        arg,
                        path,
                        policy: policy.file().display().to_string(),
                    });
                }
            };
            raised(&raise, &path, &mut label);
            let host_path = f.identity.host_path(f.spelling.path());
            let contents = f.contents;
            // Named as spelled: the name the agent gave is public, the resolved one need not be.
            let file_name = safe_file_name(items.len(), f.spelling.path());
            items.push(ArgItem {
                name: unique(&items, &name),
                arg: path,
                label,
                kind: ItemKind::File { host_path },
                file_name: Some(file_name),
                contents,
            });
            continue;
        }
        let mut label = policy
            .argument_label(tool_name, &path)
            .or_else(|| s.and_then(|s| policy.rule_label(Source::Uri, s)))
            .or_else(|| s.and_then(|s| policy.rule_label(Source::Path, s)))
            .unwrap_or_else(|| policy.default_item_label().clone());
        raised(&raise, &path, &mut label);
        if label.is_public() {
            continue; // public metadata: every copy sees it
        }
        let name = unique(&items, &format!("argument:{arg}"));
        items.push(ArgItem {
            name,
            arg: path,
            label,
            kind: ItemKind::Inline,
            file_name: None,
            contents: value.to_string().into_bytes(),
        });
    }
    let hosts = destinations(tool_name, tool, &arguments)?
        .into_iter()
        .map(|h| policy.host_member(h))
        .collect();
    let consumers = consumers
        .iter()
        .map(|c| policy.consumer_member(c.clone()))
        .collect();
    let progress_token = meta
        .and_then(|m| m.get("progressToken"))
        .filter(|t| t.is_string() || t.is_number())
        .cloned();
    let text = |k: &str| {
        meta.and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .filter(|t| t.len() <= 512 && t.is_ascii())
            .map(str::to_string)
    };
    Ok(CallMeta {
        progress_token,
        traceparent: text("traceparent"),
        tracestate: text("tracestate"),
        tool: tool_name.to_string(),
        arguments,
        items,
        hosts,
        consumers,
        policy: None,
    })
}

/// Pushes the directory item `t` and its files onto `items`: an argument's (at `path`, spelled
/// `name` by the agent, raised by `raise`) or a declared workspace's (issue 27: at the empty
/// path, which no argument's value has, with no raise). The directory is named by its
/// resolved path (what the rules matched) and found by the copy at `treeitem::copy_root`.
pub(crate) fn push_tree(
    items: &mut Vec<ArgItem>,
    policy: &Policy,
    raise: &BTreeMap<String, Label>,
    path: &ArgPath,
    name: &str,
    t: treeitem::TreeItem,
) -> Result<(), CallMetaError> {
    let arg = path.to_string();
    let root = treeitem::copy_root(&t);
    let host_path = t.host_path;
    let dir_name = unique(items, &format!("{}/", host_path.display()));
    items.push(ArgItem {
        name: dir_name,
        arg: path.clone(),
        label: Label::public(),
        kind: ItemKind::Dir {
            host_path: root.clone(),
            trusted: host_path.clone(),
        },
        file_name: None,
        contents: Vec::new(),
    });
    for f in t.files {
        let at = host_path.join(&f.rel);
        let in_copy = root.join(&f.rel);
        let mut label = match (f.label, policy.unlabelled_path()) {
            (Some(l), _) => l,
            (None, UnlabelledPath::DefaultLabel) => policy.default_item_label().clone(),
            (None, UnlabelledPath::Refuse) => {
                return Err(CallMetaError::UnlabelledPath {
                    arg,
                    path: format!("{} (in the directory {name})", at.display()),
                    policy: policy.file().display().to_string(),
                })
            }
        };
        raised(raise, path, &mut label);
        items.push(ArgItem {
            name: unique(items, &at.display().to_string()),
            arg: path.clone(),
            label,
            kind: ItemKind::TreeFile {
                host_path: in_copy,
                mode: f.mode,
                mtime: f.mtime,
            },
            file_name: None,
            contents: f.contents,
        });
    }
    Ok(())
}

fn unreadable(arg: &str, path: &str, e: FileItemError) -> CallMetaError {
    match e {
        FileItemError::TooLarge(size) => CallMetaError::TooLarge {
            arg: arg.to_string(),
            path: path.to_string(),
            size,
            max: MAX_ITEM_BYTES,
        },
        FileItemError::Unreadable(reason) => CallMetaError::Unreadable {
            arg: arg.to_string(),
            path: path.to_string(),
            reason,
        },
    }
}

fn unique(items: &[ArgItem], name: &str) -> String {
    if !items.iter().any(|i| i.name == name) {
        return name.to_string();
    }
    (2..)
        .map(|n| format!("{name}#{n}"))
        .find(|n| !items.iter().any(|i| &i.name == n))
        .unwrap_or_else(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use germline_release::manifest::Destinations;
    use serde_json::json;

    fn policy(dir: &Path, extra: &str) -> Policy {
        let rules = format!(
            r#"
[[item]]
path = "{{d}}/fin/**"
label = ["finance"]

[[argument]]
tool = "fetch"
name = "url"
label = []

[destinations]
"ocr.example" = ["finance"]

[consumers]
agent = ["hr", "finance"]
{extra}"#
        );
        crate::testkit::policy(dir, &rules)
    }

    fn tool(hosts: &[&str], arg: Option<&str>) -> Tool {
        Tool {
            destinations: Destinations {
                hosts: Some(hosts.iter().map(|h| h.to_string()).collect()),
                host_of_argument: arg.map(str::to_string),
            },
            consumers: None,
            flows: Vec::new(),
            read_only: false,
        }
    }

    fn world() -> tempfile::TempDir {
        crate::testkit::tree([
            ("hr/salary.csv", "alice,1"),
            ("fin/invoice.txt", "INVOICE"),
            ("fin/ledger.db", "DB"),
            ("stray.txt", "x"),
        ])
    }

    #[test]
    fn recipients_come_from_the_manifest_and_must_be_public() {
        let d = world();
        let p = policy(
            d.path(),
            "[[argument]]\ntool = \"mail\"\nname = \"to*\"\nlabel = []\n",
        );
        let mut t = tool(&[], None);
        t.consumers = Some(germline_release::manifest::Consumers {
            names: vec!["archive".into()],
            of_argument: Some("to".into()),
        });
        let args = json!({"to": ["bob", "agent", "bob"], "body": "hi"});
        let r = recipients(&p, "mail", &t, &args, None, "agent").expect("public names");
        assert_eq!(r, ["archive", "bob"]);
        // Raised by the agent's own _meta: refused, the name would reach every copy.
        let raise = json!({"germline/labels": {"to": ["hr"]}});
        let e = recipients(&p, "mail", &t, &args, Some(&raise), "agent").expect_err("raised");
        assert!(e.to_string().contains("must be public"), "{e}");
        // No rule for this tool: the default label, which is not public.
        let e = recipients(&p, "mail2", &t, &args, None, "agent").expect_err("default");
        assert!(e.to_string().contains("argument `to`"), "{e}");
        let e = recipients(&p, "mail", &t, &json!({"to": 7}), None, "agent").expect_err("7");
        assert!(e.to_string().contains("not a string or a list"), "{e}");
        assert!(
            recipients(&p, "mail", &tool(&[], None), &args, None, "agent")
                .expect("none")
                .is_empty()
        );
    }

    #[test]
    fn a_missing_named_argument_is_told_as_the_destination_or_the_recipients_it_names() {
        let d = world();
        let p = policy(d.path(), "");
        let args = json!({"body": "hi"});
        let e = destinations("fetch", &tool(&[], Some("url")), &args).expect_err("no url");
        assert_eq!(
            e,
            CallMetaError::Destination {
                tool: "fetch".into(),
                arg: "url".into(),
                found: "the call has no such argument".into(),
            }
        );
        let mut t = tool(&[], None);
        t.consumers = Some(germline_release::manifest::Consumers {
            names: Vec::new(),
            of_argument: Some("to".into()),
        });
        let e = recipients(&p, "mail", &t, &args, None, "agent").expect_err("no to");
        assert_eq!(
            e.to_string(),
            "tool `mail` names its result's recipients by argument `to`, but the call has no \
             such argument"
        );
    }

    #[test]
    fn a_directory_is_a_tree_of_labelled_files_and_relative_paths_need_a_workdir() {
        let d = world();
        // stray.txt has no rule: the default label makes every file of the root covered.
        let p = policy(
            d.path(),
            "[defaults]\nunlabelled_path = \"default-label\"\n",
        );
        let root = d.path().display().to_string();
        let args = json!({"repo": format!("{root}/fin/../fin"), "msg": "hello"});
        let m = build(&p, "git", &tool(&[], None), &args, None, &[]).expect("meta");
        let got: Vec<(String, String, Label)> = m
            .items
            .iter()
            .filter(|i| i.arg.to_string() == "repo")
            .map(|i| {
                (
                    i.name.clone(),
                    format!("{:?}", i.kind).chars().take(8).collect(),
                    i.label.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    format!("{root}/fin/"),
                    "Dir { ho".to_string(),
                    Label::public()
                ),
                (
                    format!("{root}/fin/invoice.txt"),
                    "TreeFile".to_string(),
                    Label::of(["finance"])
                ),
                (
                    format!("{root}/fin/ledger.db"),
                    "TreeFile".to_string(),
                    Label::of(["finance"])
                ),
            ]
        );
        // Outside the view the files are absent, but the directory's argument is kept, as
        // its resolved path.
        let v = m
            .arguments_for(&|i| i.label.is_public(), "/run/items")
            .expect("args");
        assert_eq!(v["repo"], format!("{root}/fin"));
        // A plain spelling through a symlink is where the copy finds it; the files are named
        // (and labelled) by their resolved paths.
        std::os::unix::fs::symlink(d.path().join("fin"), d.path().join("alias")).expect("ln");
        let args = json!({"repo": format!("{root}/alias")});
        let m = build(&p, "git", &tool(&[], None), &args, None, &[]).expect("meta");
        let v = m.arguments_for(&|_| true, "/run/items").expect("args");
        assert_eq!(v["repo"], format!("{root}/alias"));
        let f = &m.items[1];
        assert_eq!(f.name, format!("{root}/fin/invoice.txt"));
        assert_eq!(f.label, Label::of(["finance"]));
        assert!(
            matches!(&f.kind, ItemKind::TreeFile { host_path, .. }
                if host_path == &d.path().join("alias/invoice.txt")),
            "{:?}",
            f.kind
        );
        // A relative name: an item only with a working directory.
        let args = json!({"f": "invoice.txt", "dir": ".", "other": "nothing-here"});
        let m = build(&p, "t", &tool(&[], None), &args, None, &[]).expect("meta");
        assert!(
            m.items.iter().all(|i| i.kind == ItemKind::Inline),
            "{:?}",
            m.items
        );
        let w = d.path().join("fin");
        let m = build_in(&p, Some(&w), "t", &tool(&[], None), &args, None, &[]).expect("meta");
        let kinds: Vec<(String, bool)> = m
            .items
            .iter()
            .map(|i| (i.arg.to_string(), matches!(i.kind, ItemKind::File { .. })))
            .collect();
        assert!(kinds.contains(&("f".into(), true)), "{kinds:?}");
        assert!(m.items.iter().any(|i| i.arg.to_string() == "dir"
            && i.kind
                == ItemKind::Dir {
                    host_path: w.clone(),
                    trusted: w.clone()
                }));
        assert!(m
            .items
            .iter()
            .filter(|i| i.arg.to_string() == "other")
            .all(|i| i.kind == ItemKind::Inline));
        let f = m
            .items
            .iter()
            .find(|i| i.arg.to_string() == "f")
            .expect("f");
        assert_eq!(
            (f.label.clone(), f.contents.clone()),
            (Label::of(["finance"]), b"INVOICE".to_vec())
        );
    }

    #[test]
    fn files_become_items_labelled_by_path_and_uri_rules() {
        let d = world();
        let p = policy(d.path(), "");
        let sal = d.path().join("hr/salary.csv").display().to_string();
        let inv = d.path().join("fin/invoice.txt").display().to_string();
        let db = format!("sqlite://{}", d.path().join("fin/ledger.db").display());
        let args = json!({"a": sal, "b": {"c": [inv, db]}});
        let m = build(
            &p,
            "ocr",
            &tool(&["OCR.example"], None),
            &args,
            None,
            &["agent".into()],
        )
        .expect("meta");
        let got: Vec<(String, Label, Vec<u8>)> = m
            .items
            .iter()
            .map(|i| (i.arg.to_string(), i.label.clone(), i.contents.clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a".into(), Label::of(["hr"]), b"alice,1".to_vec()),
                ("b.c.0".into(), Label::of(["finance"]), b"INVOICE".to_vec()),
                ("b.c.1".into(), Label::of(["finance"]), b"DB".to_vec()),
            ]
        );
        assert_eq!(m.hosts[0].name, "ocr.example");
        assert_eq!(m.hosts[0].clearance, Label::of(["finance"]));
        // A copy outside a file's view gets the same path inside the copy; the file is empty.
        let view = m
            .arguments_for(&|i| i.label == Label::of(["finance"]), "/run/items")
            .expect("redacted");
        assert_eq!(view["a"], json!("/run/items/i0-salary.csv"));
        assert_eq!(view["b"]["c"][0], json!("/run/items/i1-invoice.txt"));
    }

    #[test]
    fn an_unlabelled_file_is_refused_unless_the_policy_says_otherwise() {
        let d = world();
        let stray = d.path().join("stray.txt").display().to_string();
        let args = json!({"doc": stray});
        let e = build(
            &policy(d.path(), ""),
            "t",
            &tool(&[], None),
            &args,
            None,
            &[],
        )
        .expect_err("refused");
        assert!(
            matches!(e, CallMetaError::UnlabelledPath { ref arg, .. } if arg == "doc"),
            "{e}"
        );
        let lenient = "[labels]\nhr = \"hr\"\n[defaults]\nunlabelled_path = \"default-label\"\n";
        let p = Policy::parse(Path::new("p.toml"), lenient).expect("policy");
        let m = build(&p, "t", &tool(&[], None), &args, None, &[]).expect("meta");
        assert_eq!(m.items[0].label, Label::of(["hr"]));
    }

    #[test]
    fn inline_values_default_closed_rules_open_meta_only_raises() {
        let d = world();
        let p = policy(d.path(), "");
        let args = json!({"url": "https://Docs.Example/x?q=1", "note": "salary is 91234", "n": 7, "flag": true});
        let m = build(
            &p,
            "fetch",
            &tool(&[], Some("url")),
            &args,
            None,
            &["agent".into()],
        )
        .expect("meta");
        // url is public by rule: metadata, not an item. The others take the default label.
        let names: Vec<&str> = m.items.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, vec!["argument:flag", "argument:n", "argument:note"]);
        assert!(m
            .items
            .iter()
            .all(|i| i.label == Label::of(["hr", "finance"])));
        assert_eq!(m.hosts.len(), 1);
        assert_eq!(m.hosts[0].name, "docs.example");
        // Outside every view: empty values of the same type.
        let v = m.arguments_for(&|_| false, "/run/items").expect("redacted");
        assert_eq!(
            v,
            json!({"url": "https://Docs.Example/x?q=1", "note": "", "n": 0, "flag": false})
        );
        // _meta raises the public url to hr; it cannot lower the note.
        let meta = json!({"germline/labels": {"url": ["hr"], "note": []}});
        let m = build(
            &p,
            "fetch",
            &tool(&[], Some("url")),
            &args,
            Some(&meta),
            &[],
        )
        .expect("meta");
        let url = m
            .items
            .iter()
            .find(|i| i.arg == ArgPath::key("url"))
            .expect("url item");
        assert_eq!(url.label, Label::of(["hr"]));
        let note = m
            .items
            .iter()
            .find(|i| i.arg == ArgPath::key("note"))
            .expect("note item");
        assert_eq!(note.label, Label::of(["hr", "finance"]));
        // An undefined label in _meta is an error naming it.
        let bad = json!({"germline/labels": {"note": ["hrr"]}});
        let e =
            build(&p, "fetch", &tool(&[], Some("url")), &args, Some(&bad), &[]).expect_err("bad");
        assert!(e.to_string().contains("\"hrr\""), "{e}");
    }

    #[test]
    fn destination_of_an_argument_must_be_an_http_url() {
        let d = world();
        let p = policy(d.path(), "");
        let t = tool(&[], Some("url"));
        for (args, want) in [
            (json!({}), "no such argument"),
            (json!({"url": 3}), "not a string"),
            (json!({"url": "not a url"}), "not a URL"),
            (json!({"url": "ftp://example.com/x"}), "not http or https"),
        ] {
            let e = build(&p, "fetch", &t, &args, None, &[]).expect_err("refused");
            assert!(e.to_string().contains(want), "{args}: {e}");
        }
        let e = build(&p, "fetch", &t, &json!([1]), None, &[]).expect_err("not an object");
        assert_eq!(e, CallMetaError::NotAnObject("an array"));
    }

    /// A policy with `[[argument]]` rules for tool `t`: `(name, label)`.
    fn arg_policy(rules: &[(&str, &[&str])]) -> Policy {
        let mut text = String::from("[labels]\nhr = \"hr\"\nfinance = \"finance\"\n");
        for (name, label) in rules {
            text.push_str(&format!(
                "\n[[argument]]\ntool = \"t\"\nname = {}\nlabel = {}\n",
                serde_json::to_string(name).expect("name"),
                serde_json::to_string(label).expect("label"),
            ));
        }
        Policy::parse(Path::new("p.toml"), &text).expect("policy")
    }

    fn finance_view(i: &ArgItem) -> bool {
        i.label.flows_to(&Label::of(["finance"]))
    }

    #[test]
    fn a_key_holding_a_dot_is_redacted_like_any_other() {
        // The reproduction of issue 25 item 1: `data` labelled hr, a finance-only copy.
        let p = arg_policy(&[("data", &["hr"])]);
        let args = json!({"data": {"x.y": "SECRET", "plain": "SECRET2"}});
        let m = build(&p, "t", &tool(&[], None), &args, None, &[]).expect("meta");
        let names: Vec<&str> = m.items.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["argument:data.plain", "argument:/data/x.y"]);
        assert!(m.items.iter().all(|i| i.label == Label::of(["hr"])));
        let v = m
            .arguments_for(&finance_view, "/run/items")
            .expect("redacted");
        assert_eq!(v, json!({"data": {"x.y": "", "plain": ""}}));
        let all = m.arguments_for(&|_| true, "/run/items").expect("whole");
        assert_eq!(all, args);
        // No rule at all: the default label, and the same redaction.
        let m = build(&arg_policy(&[]), "t", &tool(&[], None), &args, None, &[]).expect("meta");
        let v = m
            .arguments_for(&finance_view, "/run/items")
            .expect("redacted");
        assert_eq!(v, json!({"data": {"x.y": "", "plain": ""}}));
    }

    #[test]
    fn any_key_text_and_any_nesting_is_labelled_and_redacted_by_structure() {
        let p = arg_policy(&[
            ("/a~1b", &["hr"]),
            ("/", &["finance"]),
            ("/données/🙂", &[]),
            ("list.*.k", &["finance"]),
        ]);
        let mut deep = json!("DEEP-SECRET");
        for i in 0..60 {
            deep = if i % 2 == 0 {
                json!({format!("k.{i}/~"): deep})
            } else {
                json!([0, deep])
            };
        }
        let args = json!({
            "a/b": {"~": {"": [{"é🙂": "S1", "x.y": 7, "t": true}]}},
            "a": {"b": "S2"},
            "": {"": "F1"},
            "données": {"🙂": "P1", "🙃": "S3"},
            "list": [{"k": "F2", "k.": "S4"}, {"k": {"z": ["F3"]}}],
            "deep": deep,
        });
        let m = build(&p, "t", &tool(&[], None), &args, None, &[]).expect("meta");
        let label_of = |name: &str| {
            m.items
                .iter()
                .find(|i| i.name == name)
                .map(|i| i.label.clone())
        };
        assert_eq!(
            label_of("argument:/a~1b/~0//0/é🙂"),
            Some(Label::of(["hr"]))
        );
        assert_eq!(
            label_of("argument:/a~1b/~0//0/x.y"),
            Some(Label::of(["hr"]))
        );
        assert_eq!(label_of("argument:a.b"), Some(Label::of(["hr", "finance"])));
        assert_eq!(label_of("argument://"), Some(Label::of(["finance"])));
        assert_eq!(label_of("argument:/données/🙂"), None, "public by rule");
        assert_eq!(label_of("argument:list.0.k"), Some(Label::of(["finance"])));
        assert_eq!(
            label_of("argument:/list/0/k."),
            Some(Label::of(["hr", "finance"]))
        );
        assert_eq!(
            label_of("argument:list.1.k.z.0"),
            Some(Label::of(["finance"]))
        );
        let v = m
            .arguments_for(&finance_view, "/run/items")
            .expect("redacted");
        let mut want = json!({
            "a/b": {"~": {"": [{"é🙂": "", "x.y": 0, "t": false}]}},
            "a": {"b": ""},
            "": {"": "F1"},
            "données": {"🙂": "P1", "🙃": ""},
            "list": [{"k": "F2", "k.": ""}, {"k": {"z": ["F3"]}}],
            "deep": null,
        });
        let mut empty_deep = json!("");
        for i in 0..60 {
            empty_deep = if i % 2 == 0 {
                json!({format!("k.{i}/~"): empty_deep})
            } else {
                json!([0, empty_deep])
            };
        }
        want["deep"] = empty_deep;
        assert_eq!(v, want);
        let text = v.to_string();
        for secret in ["S1", "S2", "S3", "S4", "DEEP-SECRET"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        // The copy cleared for everything gets the arguments as parsed.
        assert_eq!(m.arguments_for(&|_| true, "/run/items").expect("all"), args);
    }

    #[test]
    fn a_public_rule_never_covers_a_key_that_only_starts_like_it() {
        let p = arg_policy(&[("url", &[])]);
        let args = json!({"url.x": "SECRET", "url": {"x": "nested"}, "url~": "S2", "url/x": "S3"});
        let m = build(&p, "t", &tool(&[], None), &args, None, &[]).expect("meta");
        let names: Vec<&str> = m.items.iter().map(|i| i.name.as_str()).collect();
        // `url.x` and friends are not `url`: the default label. `url` covers what is inside it.
        assert_eq!(
            names,
            ["argument:/url.x", "argument:/url~1x", "argument:/url~0"]
        );
        let v = m.arguments_for(&|_| false, "/run/items").expect("redacted");
        assert_eq!(
            v,
            json!({"url.x": "", "url": {"x": "nested"}, "url~": "", "url/x": ""})
        );
    }

    #[test]
    fn meta_raises_by_any_reading_of_its_name() {
        let p = arg_policy(&[("*", &[])]);
        let args = json!({"x.y": "A", "x": {"y": "B", "z": "C"}, "a/b": ["D"], "q": "E"});
        for (name, want) in [
            ("x.y", vec!["argument:x.y", "argument:/x.y"]),
            ("/x.y", vec!["argument:/x.y"]),
            ("/a~1b", vec!["argument:/a~1b/0"]),
            ("a/b", vec!["argument:/a~1b/0"]),
            ("x", vec!["argument:x.y", "argument:x.z"]),
        ] {
            let meta = json!({"germline/labels": {name: ["hr"]}});
            let m = build(&p, "t", &tool(&[], None), &args, Some(&meta), &[]).expect("meta");
            let mut got: Vec<&str> = m.items.iter().map(|i| i.name.as_str()).collect();
            got.sort_unstable();
            let mut want = want.clone();
            want.sort_unstable();
            assert_eq!(got, want, "{name}");
            assert!(m.items.iter().all(|i| i.label == Label::of(["hr"])));
        }
    }

    #[test]
    fn a_path_that_names_no_value_fails_closed() {
        let p = arg_policy(&[("data", &["hr"])]);
        let args = json!({"data": {"x.y": "SECRET"}, "list": ["S"]});
        let m = build(&p, "t", &tool(&[], None), &args, None, &[]).expect("meta");
        assert_eq!(m.items.len(), 2);
        // The arguments no longer hold the item's value where its path says: an error, never
        // the value passed over.
        for broken in [
            json!({"data": {"x": {"y": "SECRET"}}, "list": ["S"]}),
            json!({"data": ["SECRET"], "list": ["S"]}),
            json!({"data": {"x.y": "SECRET"}, "list": {"0": "S"}}),
        ] {
            let mut m = m.clone();
            m.arguments = broken.clone();
            let e = m
                .arguments_for(&|_| false, "/run/items")
                .expect_err("unresolved");
            assert!(
                matches!(e, CallMetaError::Unresolved { .. }),
                "{broken}: {e}"
            );
            assert!(e.to_string().contains("refused"), "{e}");
        }
    }

    #[test]
    fn a_copy_gets_the_parsed_value_never_the_agents_bytes() {
        // Duplicate keys: the parser keeps one; nothing of the other reaches any copy.
        let raw = r#"{"data": {"x": "FIRST-SECRET", "x": "second"}, "n": 1.0e0}"#;
        let args: Value = serde_json::from_str(raw).expect("json");
        let p = arg_policy(&[("data", &[]), ("n", &[])]);
        let m = build(&p, "t", &tool(&[], None), &args, None, &[]).expect("meta");
        let v = m.arguments_for(&|_| true, "/run/items").expect("args");
        let text = serde_json::to_string(&v).expect("text");
        assert!(!text.contains("FIRST-SECRET"), "{text}");
        assert_eq!(v["data"]["x"], json!("second"));
    }
}

/// Property test (A5, issue 25): random argument trees with adversarial key texts, canaries at
/// every leaf, random `[[argument]]` rules on random nodes (spelled as pointers, dotted where
/// the keys allow, and decoy dotted spellings of keys that hold dots): for every view, no
/// canary of a leaf whose label the view excludes appears anywhere in the copy's serialised
/// arguments, and every leaf the view holds arrives untouched.
#[cfg(test)]
mod proptests {
    use super::*;
    use germline_release::manifest::Destinations;
    use proptest::prelude::*;
    use proptest::sample::Index;
    use serde_json::json;

    const PARTS: &[&str] = &[
        "",
        ".",
        "..",
        "/",
        "~",
        "~0",
        "~1",
        "*",
        "?",
        "[",
        "{",
        "\\",
        "x.y",
        "a/b",
        "0",
        "1",
        "01",
        "é",
        "🙂",
        "\u{0}",
        " ",
        "hr",
        "data",
        "argument:",
    ];

    fn key() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(PARTS), 0..4).prop_map(|v| v.concat())
    }

    /// A tree whose leaves are placeholders (strings, numbers, booleans, nulls): canaries are
    /// put in afterwards, one per leaf.
    fn tree() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(json!("s")),
            Just(json!(1)),
            Just(json!(true)),
            Just(Value::Null),
        ];
        leaf.prop_recursive(6, 64, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(key(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Gives every leaf a unique canary; returns every node's path (internal nodes too) and
    /// every leaf's path with its canary text.
    fn canaries(
        v: &mut Value,
        path: &mut ArgPath,
        nodes: &mut Vec<ArgPath>,
        leaves: &mut Vec<(ArgPath, String)>,
    ) {
        nodes.push(path.clone());
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    path.push(Seg::Key(k.clone()));
                    canaries(x, path, nodes, leaves);
                    path.pop();
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter_mut().enumerate() {
                    path.push(Seg::Index(i));
                    canaries(x, path, nodes, leaves);
                    path.pop();
                }
            }
            Value::Null => {}
            leaf => {
                let n = leaves.len();
                let c = format!("CANARY{n}#");
                *leaf = match leaf {
                    Value::String(_) => json!(c),
                    Value::Number(_) => json!(900_000_000 + n),
                    _ => json!(n.is_multiple_of(2)),
                };
                let text = match leaf {
                    Value::Number(x) => x.to_string(),
                    Value::Bool(_) => String::new(), // a boolean is checked by value only
                    _ => c,
                };
                leaves.push((path.clone(), text));
            }
        }
    }

    fn escape_glob(t: &str) -> String {
        let mut out = String::new();
        for c in t.chars() {
            if "*?[]{}\\".contains(c) {
                out.push('\\');
            }
            out.push(c);
        }
        out
    }

    fn seg_text(s: &Seg) -> String {
        match s {
            Seg::Key(k) => k.clone(),
            Seg::Index(i) => i.to_string(),
        }
    }

    /// The rule's steps as the oracle reads them: literal texts (this test escapes every glob
    /// character, so no step is a glob).
    struct Rule {
        name: String,
        steps: Vec<String>,
        label: Label,
    }

    fn labels() -> [Label; 3] {
        [Label::of(["hr"]), Label::of(["finance"]), Label::public()]
    }

    fn pointer_rule(p: &ArgPath, label: Label) -> Rule {
        let mut name = String::new();
        for s in p.segments() {
            name.push('/');
            name.push_str(
                &escape_glob(&seg_text(s))
                    .replace('~', "~0")
                    .replace('/', "~1"),
            );
        }
        Rule {
            name,
            steps: p.segments().iter().map(seg_text).collect(),
            label,
        }
    }

    /// The path's keys joined with '.', as a naive reading would spell it; what it names is the
    /// dotted split of that text (which may be a different value, or none).
    fn dotted_rule(p: &ArgPath, label: Label) -> Option<Rule> {
        let text: Vec<String> = p.segments().iter().map(seg_text).collect();
        let joined = text.join(".");
        let steps: Vec<String> = joined.split('.').map(str::to_string).collect();
        let ok = !joined.starts_with('/')
            && steps.iter().all(|s| !s.is_empty())
            && !joined.contains(['*', '?', '[', ']', '{', '}', '\\']);
        ok.then_some(Rule {
            name: joined,
            steps,
            label,
        })
    }

    /// The label the specification gives a leaf: the join of the rules whose steps are a
    /// prefix of its path (compared as text), or the default label (every tag).
    fn oracle(rules: &[Rule], path: &ArgPath) -> Label {
        let texts: Vec<String> = path.segments().iter().map(seg_text).collect();
        let mut out: Option<Label> = None;
        for r in rules {
            if r.steps.len() <= texts.len() && r.steps.iter().zip(&texts).all(|(a, b)| a == b) {
                out.get_or_insert_with(Label::public).join(&r.label);
            }
        }
        out.unwrap_or_else(|| Label::of(["hr", "finance"]))
    }

    fn empty_of(v: &Value) -> Value {
        match v {
            Value::String(_) => json!(""),
            Value::Number(_) => json!(0),
            Value::Bool(_) => json!(false),
            _ => Value::Null,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn no_canary_reaches_a_copy_whose_view_excludes_it(
            children in prop::collection::btree_map(key(), tree(), 1..5),
            picks in prop::collection::vec((any::<Index>(), 0..3usize, 0..3usize), 0..8),
        ) {
            let mut args = Value::Object(children.into_iter().collect());
            let (mut nodes, mut leaves) = (Vec::new(), Vec::new());
            canaries(&mut args, &mut ArgPath::default(), &mut nodes, &mut leaves);
            nodes.remove(0); // the arguments object itself
            prop_assume!(!nodes.is_empty());
            let mut rules: Vec<Rule> = Vec::new();
            for (at, label, spelling) in &picks {
                let p = at.get(&nodes);
                if p.segments().iter().any(|s| seg_text(s).contains('\u{0}')) {
                    continue;
                }
                let label = labels()[*label].clone();
                let r = match spelling {
                    0 => Some(pointer_rule(p, label)),
                    // Dotted: when the keys are plain this is the node itself; when they hold
                    // dots it is a decoy naming another place.
                    _ => dotted_rule(p, label),
                };
                if let Some(r) = r {
                    if !rules.iter().any(|x| x.name == r.name) {
                        rules.push(r);
                    }
                }
            }
            let spec: Vec<(&str, Vec<&str>)> = rules
                .iter()
                .map(|r| (r.name.as_str(), r.label.tags().collect()))
                .collect();
            let mut text = String::from("[labels]\nhr = \"hr\"\nfinance = \"finance\"\n");
            for (name, label) in &spec {
                text.push_str(&format!(
                    "\n[[argument]]\ntool = \"t\"\nname = {}\nlabel = {}\n",
                    serde_json::to_string(name).expect("name"),
                    serde_json::to_string(label).expect("label"),
                ));
            }
            let policy = Policy::parse(Path::new("p.toml"), &text)
                .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
            let t = Tool {
                destinations: Destinations { hosts: Some(vec![]), host_of_argument: None },
                consumers: None,
                flows: Vec::new(),
                read_only: false,
            };
            let m = build(&policy, "t", &t, &args, None, &[])
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            for view in labels() {
                let in_view = |i: &ArgItem| i.label.flows_to(&view);
                let out = m
                    .arguments_for(&in_view, "/run/items")
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let serialised = serde_json::to_string(&out).expect("json");
                for (path, canary) in &leaves {
                    let label = oracle(&rules, path);
                    let before = path.get(&args).expect("leaf");
                    let after = path.get(&out);
                    if label.flows_to(&view) {
                        prop_assert_eq!(after, Some(before), "in view {:?}: {} ({})", view, path, text);
                    } else {
                        prop_assert_eq!(after, Some(&empty_of(before)), "outside {:?}: {}", view, path);
                        if !canary.is_empty() {
                            prop_assert!(
                                !serialised.contains(canary.as_str()),
                                "{} of {} reached a copy of view {:?}: {}\n{}",
                                canary, path, view, serialised, text
                            );
                        }
                    }
                }
            }
        }
    }
}
