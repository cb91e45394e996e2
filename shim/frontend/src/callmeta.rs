//! A `tools/call` as Plan sees it (paper Definition 2, A5): the call's public metadata, its
//! labelled items, the declared destinations of the signed manifest and the consumers.
//!
//! Every argument value reaches every copy unless it is an item, so each leaf value of the
//! arguments is classified here, without ever looking at what an item file contains:
//! * a string naming a regular file on the host is a **file item** (the path is public, the
//!   contents are labelled by the policy's `[[item]]` path rules; a file no rule covers is
//!   refused, or given the default label if the policy says so);
//! * a `file://` or `sqlite:///` URI naming a regular file is a file item labelled by the
//!   policy's URI rules;
//! * every other value is **inline**: labelled by the `[[argument]]` rules, by a URI rule it
//!   matches, or else by the policy's default label (which fails closed). A non-public inline
//!   value becomes an item of its own, empty in the copies outside its view.
//!
//! Labels from the call's `_meta` (`"germline/labels": {"<argument>": ["hr"]}`) are joined
//! in: they may raise a value's label, never lower it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use germline_policy::policy::{Source, UnlabelledPath};
use germline_policy::{ItemMeta, Label, Member, Policy};
use germline_release::manifest::Tool;
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
}

/// Where an item's contents come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemKind {
    /// A file on the host, read by the shim (never by a copy).
    File { host_path: PathBuf },
    /// An inline argument value (its JSON text is the contents).
    Inline,
}

/// One labelled item of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgItem {
    /// The public name Plan sees: the path, the URI, or `argument:<name>`.
    pub name: String,
    /// The argument it came from, as a dotted name (`url`, `files.0`).
    pub arg: String,
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
    /// copy (`items_dir/<file_name>`), empty there when outside the view.
    pub fn arguments_for(&self, in_view: &dyn Fn(&ArgItem) -> bool, items_dir: &str) -> Value {
        let mut args = self.arguments.clone();
        for item in &self.items {
            let Some(slot) = pointer_mut(&mut args, &item.arg) else {
                continue;
            };
            match (&item.kind, &item.file_name) {
                (ItemKind::File { .. }, Some(f)) => {
                    *slot = Value::String(format!("{items_dir}/{f}"))
                }
                _ if in_view(item) => {}
                _ => *slot = empty_like(slot),
            }
        }
        args
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

fn pointer_mut<'a>(v: &'a mut Value, dotted: &str) -> Option<&'a mut Value> {
    let mut cur = v;
    for part in dotted.split('.') {
        cur = match cur {
            Value::Object(m) => m.get_mut(part)?,
            Value::Array(a) => a.get_mut(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn leaves(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) -> Result<(), CallMetaError> {
    if out.len() > MAX_LEAVES {
        return Err(CallMetaError::TooMany);
    }
    let name = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                leaves(&name(k), x, out)?;
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                leaves(&name(&i.to_string()), x, out)?;
            }
        }
        Value::Null => {}
        other => out.push((prefix.to_string(), other.clone())),
    }
    Ok(())
}

/// The file a URI names, for the schemes whose item is a local file.
fn uri_file(uri: &str) -> Option<PathBuf> {
    let u = url::Url::parse(uri).ok()?;
    match u.scheme() {
        "file" | "sqlite" if u.host_str().is_none_or(str::is_empty) => {
            let p = PathBuf::from(u.path());
            p.is_absolute().then_some(p)
        }
        _ => None,
    }
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

fn regular_file(p: &Path) -> bool {
    std::fs::metadata(p).map(|m| m.is_file()).unwrap_or(false)
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

fn raised(raise: &BTreeMap<String, Label>, arg: &str, label: &mut Label) {
    // A label given for `files` raises `files.0`, `files.1`, ... as well.
    for (k, l) in raise {
        if arg == k || arg.starts_with(&format!("{k}.")) {
            label.join(l);
        }
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
        let err = |found: String| CallMetaError::Destination {
            tool: tool_name.to_string(),
            arg: arg.clone(),
            found,
        };
        let v = arguments
            .get(arg)
            .ok_or_else(|| err("the call has no such argument".into()))?;
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
        let err = |found: String| CallMetaError::Recipient {
            tool: tool_name.to_string(),
            arg: arg.clone(),
            found,
        };
        let v = arguments
            .get(arg)
            .ok_or_else(|| err("the call has no such argument".into()))?;
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
            let leaf = if v.is_array() {
                format!("{arg}.{i}")
            } else {
                arg.clone()
            };
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
    leaves("", &arguments, &mut flat)?;
    let mut items: Vec<ArgItem> = Vec::new();
    for (arg, value) in flat {
        let s = value.as_str();
        let file: Option<(PathBuf, Option<Label>, String)> = match s {
            Some(s) if s.starts_with('/') && regular_file(Path::new(s)) => Some((
                PathBuf::from(s),
                policy.rule_label(Source::Path, s),
                s.to_string(),
            )),
            Some(s) if looks_like_uri(s) => match uri_file(s) {
                Some(p) if regular_file(&p) => {
                    Some((p, policy.rule_label(Source::Uri, s), s.to_string()))
                }
                _ => None,
            },
            _ => None,
        };
        if let Some((host_path, ruled, name)) = file {
            let mut label = match (ruled, policy.unlabelled_path()) {
                (Some(l), _) => l,
                (None, UnlabelledPath::DefaultLabel) => policy.default_item_label().clone(),
                (None, UnlabelledPath::Refuse) => {
                    return Err(CallMetaError::UnlabelledPath {
                        arg,
                        path: name,
                        policy: policy.file().display().to_string(),
                    })
                }
            };
            raised(&raise, &arg, &mut label);
            let unreadable = |reason: String| CallMetaError::Unreadable {
                arg: arg.clone(),
                path: name.clone(),
                reason,
            };
            let size = std::fs::metadata(&host_path)
                .map_err(|e| unreadable(e.to_string()))?
                .len();
            if size > MAX_ITEM_BYTES {
                return Err(CallMetaError::TooLarge {
                    arg,
                    path: name,
                    size,
                    max: MAX_ITEM_BYTES,
                });
            }
            let contents = std::fs::read(&host_path).map_err(|e| unreadable(e.to_string()))?;
            let file_name = safe_file_name(items.len(), &host_path);
            items.push(ArgItem {
                name: unique(&items, &name),
                arg,
                label,
                kind: ItemKind::File { host_path },
                file_name: Some(file_name),
                contents,
            });
            continue;
        }
        let mut label = policy
            .argument_label(tool_name, &arg)
            .or_else(|| s.and_then(|s| policy.rule_label(Source::Uri, s)))
            .or_else(|| s.and_then(|s| policy.rule_label(Source::Path, s)))
            .unwrap_or_else(|| policy.default_item_label().clone());
        raised(&raise, &arg, &mut label);
        if label.is_public() {
            continue; // public metadata: every copy sees it
        }
        let name = unique(&items, &format!("argument:{arg}"));
        items.push(ArgItem {
            name,
            arg,
            label,
            kind: ItemKind::Inline,
            file_name: None,
            contents: value.to_string().into_bytes(),
        });
    }
    let hosts = destinations(tool_name, tool, &arguments)?
        .into_iter()
        .map(|h| Member {
            clearance: policy.host_clearance(&h),
            name: h,
        })
        .collect();
    let consumers = consumers
        .iter()
        .map(|c| Member {
            name: c.clone(),
            clearance: policy.consumer_clearance(c),
        })
        .collect();
    let progress_token = meta
        .and_then(|m| m.get("progressToken"))
        .filter(|t| t.is_string() || t.is_number())
        .cloned();
    Ok(CallMeta {
        progress_token,
        tool: tool_name.to_string(),
        arguments,
        items,
        hosts,
        consumers,
    })
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
        let text = format!(
            r#"[labels]
hr = "hr"
finance = "finance"

[[item]]
path = "{d}/hr/**"
label = ["hr"]

[[item]]
path = "{d}/fin/**"
label = ["finance"]

[[item]]
uri = "sqlite://{d}/fin/*"
label = ["finance"]

[[argument]]
tool = "fetch"
name = "url"
label = []

[destinations]
"ocr.example" = ["finance"]

[consumers]
agent = ["hr", "finance"]
{extra}
"#,
            d = dir.display()
        );
        Policy::parse(Path::new("p.toml"), &text).expect("policy")
    }

    fn tool(hosts: &[&str], arg: Option<&str>) -> Tool {
        Tool {
            destinations: Destinations {
                hosts: Some(hosts.iter().map(|h| h.to_string()).collect()),
                host_of_argument: arg.map(str::to_string),
            },
            consumers: None,
            flows: Vec::new(),
        }
    }

    fn world() -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(d.path().join("hr")).expect("mkdir");
        std::fs::create_dir_all(d.path().join("fin")).expect("mkdir");
        std::fs::write(d.path().join("hr/salary.csv"), "alice,1").expect("write");
        std::fs::write(d.path().join("fin/invoice.txt"), "INVOICE").expect("write");
        std::fs::write(d.path().join("fin/ledger.db"), "DB").expect("write");
        std::fs::write(d.path().join("stray.txt"), "x").expect("write");
        d
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
            .map(|i| (i.arg.clone(), i.label.clone(), i.contents.clone()))
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
        let view = m.arguments_for(&|i| i.label == Label::of(["finance"]), "/run/items");
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
        let v = m.arguments_for(&|_| false, "/run/items");
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
        let url = m.items.iter().find(|i| i.arg == "url").expect("url item");
        assert_eq!(url.label, Label::of(["hr"]));
        let note = m.items.iter().find(|i| i.arg == "note").expect("note item");
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
}
