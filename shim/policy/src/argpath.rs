//! Where a value sits inside a call's JSON arguments, by structure rather than by spelling.
//!
//! An [`ArgPath`] is the list of steps from the arguments object to one value: an object key
//! (any text at all: dots, slashes, `~`, the empty key, any unicode) or an array index. Two
//! different values of one call always have different paths, and a path names exactly one
//! value, so labelling and redacting by path cannot be fooled by how a key is spelled.
//!
//! An [`ArgPattern`] is an `[[argument]] name` of the policy: a list of segment globs, written
//! either dotted (`url`, `options.*`, `files.0`: plain keys) or as an RFC 6901 pointer
//! (`/data/x.y`, `/a~1b`, `/` for the empty key) for keys a dotted name cannot spell. A pattern
//! names the values at the paths it matches *and everything inside them*.

use std::fmt;

use globset::{GlobBuilder, GlobMatcher};
use serde_json::Value;

/// One step of an [`ArgPath`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Seg {
    /// A key of an object, exactly as the call spelled it.
    Key(String),
    /// An element of an array.
    Index(usize),
}

impl Seg {
    /// Whether this step's text is `token` (an index as RFC 6901 writes it: decimal, no
    /// leading zeros).
    fn is(&self, token: &str) -> bool {
        match self {
            Seg::Key(k) => k == token,
            Seg::Index(i) => parse_index(token) == Some(*i),
        }
    }
}

/// The structural path of a value inside a call's arguments (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ArgPath(Vec<Seg>);

impl ArgPath {
    pub fn new(segs: Vec<Seg>) -> ArgPath {
        ArgPath(segs)
    }

    /// The path of the top-level argument `name`.
    pub fn key(name: &str) -> ArgPath {
        ArgPath(vec![Seg::Key(name.to_string())])
    }

    pub fn segments(&self) -> &[Seg] {
        &self.0
    }

    pub fn push(&mut self, s: Seg) {
        self.0.push(s);
    }

    pub fn pop(&mut self) -> Option<Seg> {
        self.0.pop()
    }

    /// This path with `s` appended.
    pub fn child(&self, s: Seg) -> ArgPath {
        let mut p = self.clone();
        p.push(s);
        p
    }

    /// The RFC 6901 JSON pointer of this path (`~` written `~0`, `/` written `~1`).
    pub fn pointer(&self) -> String {
        let mut out = String::new();
        for s in &self.0 {
            out.push('/');
            match s {
                Seg::Key(k) => {
                    for c in k.chars() {
                        match c {
                            '~' => out.push_str("~0"),
                            '/' => out.push_str("~1"),
                            c => out.push(c),
                        }
                    }
                }
                Seg::Index(i) => out.push_str(&i.to_string()),
            }
        }
        out
    }

    /// The value at this path, if `v` has one there (an index only into an array, a key only
    /// into an object).
    pub fn get<'a>(&self, v: &'a Value) -> Option<&'a Value> {
        let mut cur = v;
        for s in &self.0 {
            cur = match (s, cur) {
                (Seg::Key(k), Value::Object(m)) => m.get(k)?,
                (Seg::Index(i), Value::Array(a)) => a.get(*i)?,
                _ => return None,
            };
        }
        Some(cur)
    }

    /// Whether this is the empty path (the arguments themselves; a declared item's).
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The value at this path, mutably (see [`ArgPath::get`]).
    pub fn get_mut<'a>(&self, v: &'a mut Value) -> Option<&'a mut Value> {
        let mut cur = v;
        for s in &self.0 {
            cur = match (s, cur) {
                (Seg::Key(k), Value::Object(m)) => m.get_mut(k)?,
                (Seg::Index(i), Value::Array(a)) => a.get_mut(*i)?,
                _ => return None,
            };
        }
        Some(cur)
    }

    /// Whether this path starts with the steps spelled `tokens` (compared as text).
    pub fn starts_with_tokens(&self, tokens: &[String]) -> bool {
        tokens.len() <= self.0.len() && self.0.iter().zip(tokens).all(|(s, t)| s.is(t))
    }

    /// The path that `text` (as [`ArgPath`]'s `Display` writes it: a pointer when it starts
    /// with `/`, else a dotted name) names inside `v`, typed by what `v` holds there; `None` if
    /// `text` is malformed or `v` has no value there.
    pub fn resolve(text: &str, v: &Value) -> Option<ArgPath> {
        let tokens = tokens(text).ok()?;
        let mut path = ArgPath::default();
        let mut cur = v;
        for t in tokens {
            let (s, next) = match cur {
                Value::Object(m) => {
                    let next = m.get(&t)?;
                    (Seg::Key(t), next)
                }
                Value::Array(a) => {
                    let i = parse_index(&t)?;
                    (Seg::Index(i), a.get(i)?)
                }
                _ => return None,
            };
            path.push(s);
            cur = next;
        }
        Some(path)
    }
}

/// A key a dotted name can show as it is.
fn plain(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A path as item names show it (`argument:<path>`): dotted when every key is plain
/// (`files.0`, `options.depth`), else its RFC 6901 pointer (`/data/x.y`), which always starts
/// with `/`. Either way different paths of one call show differently.
impl fmt::Display for ArgPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dotted = !self.0.is_empty()
            && self.0.iter().all(|s| match s {
                Seg::Key(k) => plain(k),
                Seg::Index(_) => true,
            });
        if !dotted {
            return f.write_str(&self.pointer());
        }
        for (n, s) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(".")?;
            }
            match s {
                Seg::Key(k) => f.write_str(k)?,
                Seg::Index(i) => write!(f, "{i}")?,
            }
        }
        Ok(())
    }
}

/// An array index as RFC 6901 spells it: `0`, or decimal digits without a leading zero.
fn parse_index(t: &str) -> Option<usize> {
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) || (t.len() > 1 && t.starts_with('0'))
    {
        return None;
    }
    t.parse().ok()
}

/// The steps `text` spells: an RFC 6901 pointer when it starts with `/` (`~0` is `~`, `~1` is
/// `/`), else a dotted name whose parts are non-empty.
pub fn tokens(text: &str) -> Result<Vec<String>, String> {
    if let Some(rest) = text.strip_prefix('/') {
        return rest.split('/').map(unescape).collect();
    }
    if text.is_empty() {
        return Err("expected an argument name, a dotted path or a /pointer, found \"\"".into());
    }
    text.split('.')
        .map(|p| {
            if p.is_empty() {
                Err(format!(
                    "{text:?} has an empty part; name a key that is empty or holds '.' or '/' \
                     by an RFC 6901 pointer (`/data/x.y`, `/a~1b`, `/` for the empty key)"
                ))
            } else {
                Ok(p.to_string())
            }
        })
        .collect()
}

fn unescape(t: &str) -> Result<String, String> {
    let mut out = String::with_capacity(t.len());
    let mut chars = t.chars();
    while let Some(c) = chars.next() {
        if c != '~' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('0') => out.push('~'),
            Some('1') => out.push('/'),
            other => {
                return Err(format!(
                    "pointer part {t:?}: `~` must be followed by 0 (for `~`) or 1 (for `/`), \
                     found {}",
                    other.map_or_else(|| "the end".to_string(), |c| format!("{c:?}"))
                ))
            }
        }
    }
    Ok(out)
}

#[derive(Debug, Clone)]
enum SegPat {
    /// `**`: any number of steps, none included.
    Many,
    /// A step spelled exactly so.
    Literal(String),
    /// A glob over one step's text (`*` never crosses into the next step).
    Glob(GlobMatcher),
}

/// An `[[argument]] name`: segment globs, matched step by step against an [`ArgPath`].
#[derive(Debug, Clone)]
pub struct ArgPattern {
    segs: Vec<SegPat>,
}

impl ArgPattern {
    /// Parses a name: dotted (`options.*`) or a pointer (`/data/x.y`); each part a glob over one
    /// step's text (`*`, `?`, `[ab]`, `{a,b}`; `\` escapes), a part `**` any number of steps.
    pub fn parse(text: &str) -> Result<ArgPattern, String> {
        let segs = tokens(text)?
            .into_iter()
            .map(|t| {
                if t == "**" {
                    Ok(SegPat::Many)
                } else if !t.contains(['*', '?', '[', ']', '{', '}', '\\']) {
                    Ok(SegPat::Literal(t))
                } else {
                    GlobBuilder::new(&t)
                        .literal_separator(false)
                        .backslash_escape(true)
                        .build()
                        .map(|g| SegPat::Glob(g.compile_matcher()))
                        .map_err(|e| format!("part {t:?}: {}", e.kind()))
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(ArgPattern { segs })
    }

    /// Whether the pattern names the value at `path`: it matches `path` or a path `path` lies
    /// inside (a rule for `data` covers `data.x`, `data.x.0`, ...).
    pub fn covers(&self, path: &ArgPath) -> bool {
        let steps = path.segments();
        // reach[j]: the patterns parts so far match the first j steps.
        let mut reach = vec![false; steps.len() + 1];
        reach[0] = true;
        let mut index_text = String::new();
        for p in &self.segs {
            let mut next = vec![false; steps.len() + 1];
            match p {
                SegPat::Many => {
                    let mut any = false;
                    for j in 0..=steps.len() {
                        any |= reach[j];
                        next[j] = any;
                    }
                }
                SegPat::Literal(t) => {
                    for j in 1..=steps.len() {
                        next[j] = reach[j - 1] && steps[j - 1].is(t);
                    }
                }
                SegPat::Glob(g) => {
                    for j in 1..=steps.len() {
                        if !reach[j - 1] {
                            continue;
                        }
                        next[j] = match &steps[j - 1] {
                            Seg::Key(k) => g.is_match(k),
                            Seg::Index(i) => {
                                index_text.clear();
                                index_text.push_str(&i.to_string());
                                g.is_match(&index_text)
                            }
                        };
                    }
                }
            }
            reach = next;
            if !reach.iter().any(|r| *r) {
                return false;
            }
        }
        reach.iter().any(|r| *r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(segs: &[Seg]) -> ArgPath {
        ArgPath(segs.to_vec())
    }
    fn k(s: &str) -> Seg {
        Seg::Key(s.into())
    }

    #[test]
    fn display_is_dotted_for_plain_keys_and_a_pointer_otherwise() {
        assert_eq!(p(&[k("files"), Seg::Index(0)]).to_string(), "files.0");
        assert_eq!(p(&[k("options"), k("depth")]).to_string(), "options.depth");
        assert_eq!(p(&[k("data"), k("x.y")]).to_string(), "/data/x.y");
        assert_eq!(p(&[k("a/b"), k("~")]).to_string(), "/a~1b/~0");
        assert_eq!(p(&[k("")]).to_string(), "/");
        assert_eq!(p(&[k("données")]).to_string(), "/données");
        // Different paths never show alike: `x.y` as one key, and `x` then `y`.
        assert_ne!(p(&[k("x.y")]).to_string(), p(&[k("x"), k("y")]).to_string());
        assert_ne!(p(&[k("/a")]).to_string(), p(&[k("a")]).to_string());
    }

    #[test]
    fn resolve_round_trips_every_display() {
        let v = json!({"data": {"x.y": [1, {"": "e", "a/b": 2, "~": 3, "é": 4}]}, "0": 5});
        for path in [
            p(&[k("data"), k("x.y"), Seg::Index(1), k("")]),
            p(&[k("data"), k("x.y"), Seg::Index(1), k("a/b")]),
            p(&[k("data"), k("x.y"), Seg::Index(1), k("~")]),
            p(&[k("data"), k("x.y"), Seg::Index(1), k("é")]),
            p(&[k("data"), k("x.y"), Seg::Index(0)]),
            p(&[k("0")]),
        ] {
            assert!(path.get(&v).is_some(), "{path}");
            assert_eq!(
                ArgPath::resolve(&path.to_string(), &v).as_ref(),
                Some(&path)
            );
            assert_eq!(ArgPath::resolve(&path.pointer(), &v).as_ref(), Some(&path));
        }
        // The pointer's escapes, and no leading zeros in an index.
        assert_eq!(ArgPath::resolve("/data/x.y/01", &v), None);
        assert_eq!(ArgPath::resolve("/data/x~2y", &v), None);
        assert_eq!(ArgPath::resolve("data.x.y", &v), None);
    }

    #[test]
    fn get_never_confuses_a_key_with_an_index() {
        let v = json!({"a": {"0": "key"}, "b": ["index"]});
        assert_eq!(p(&[k("a"), Seg::Index(0)]).get(&v), None);
        assert_eq!(p(&[k("b"), k("0")]).get(&v), None);
        assert_eq!(p(&[k("a"), k("0")]).get(&v), Some(&json!("key")));
        assert_eq!(p(&[k("b"), Seg::Index(0)]).get(&v), Some(&json!("index")));
    }

    #[test]
    fn patterns_match_by_step_never_by_text() {
        let covers = |pat: &str, path: &ArgPath| ArgPattern::parse(pat).expect(pat).covers(path);
        let url_x = p(&[k("url.x")]);
        assert!(!covers("url", &url_x), "a key holding '.' is one step");
        assert!(!covers("url.x", &url_x));
        assert!(covers("/url.x", &url_x));
        assert!(covers("url*", &url_x), "a glob within the step");
        // A rule covers everything inside the value it names.
        let deep = p(&[k("data"), k("x.y"), Seg::Index(3), k("a/b")]);
        assert!(covers("data", &deep));
        assert!(covers("/data/x.y", &deep));
        assert!(covers("/data/x.y/3/a~1b", &deep));
        assert!(!covers("/data/x.y/3/a/b", &deep));
        assert!(!covers("/data/x", &deep));
        assert!(covers("data.*.3", &deep));
        assert!(!covers("data.*.4", &deep));
        assert!(covers("**.3", &deep));
        assert!(covers("data.**.3.*", &deep));
        assert!(!covers("x.y", &deep));
        // `*` stays inside one step, and never matches a missing one.
        assert!(!covers("*.y", &p(&[k("x.y")])));
        assert!(!covers("data.*", &p(&[k("data")])));
        // Index steps match their decimal text; the empty key, `~` and unicode by pointer.
        assert!(covers("files.0", &p(&[k("files"), Seg::Index(0)])));
        assert!(covers("files.0", &p(&[k("files"), k("0")])));
        assert!(!covers("files.00", &p(&[k("files"), Seg::Index(0)])));
        assert!(covers("/", &p(&[k(""), k("z")])));
        assert!(!covers("/", &p(&[k("a")])));
        assert!(covers("/a//b", &p(&[k("a"), k(""), k("b")])));
        assert!(covers("/~0~1", &p(&[k("~/")])));
        assert!(covers("/données/*", &p(&[k("données"), k("é")])));
        // Glob metacharacters in a key, escaped.
        assert!(covers("/a\\*", &p(&[k("a*")])));
        assert!(!covers("/a\\*", &p(&[k("ab")])));
    }

    #[test]
    fn bad_names_are_refused_with_the_reason() {
        for (bad, want) in [
            ("", "found \"\""),
            ("a..b", "empty part"),
            (".a", "empty part"),
            ("a.", "empty part"),
            ("/a~2", "`~` must be followed"),
            ("/a~", "the end"),
            ("a[", "part \"a[\""),
        ] {
            let e = ArgPattern::parse(bad).expect_err(bad);
            assert!(e.contains(want), "{bad}: {e}");
        }
    }
}
