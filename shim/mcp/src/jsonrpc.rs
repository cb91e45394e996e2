//! JSON-RPC framing shared by `germline run` (stdio) and `germline serve` (HTTP): which kind of
//! message an object is, and ids echoed as the agent wrote them (docs/run.md, "Limits of the
//! front end").
//!
//! serde_json without `arbitrary_precision` reads a number that fits no `i64`/`u64` (a 30-digit
//! id, `1e3`, `7.50`) as an `f64`, and would write back another number. Rather than turn that
//! feature on for the whole crate graph, the few answers whose id is such a number get the id's
//! original text spliced back in ([`render`]); the text comes from [`peek_ids`], a shallow scan
//! of the message's top level. Integer and string ids (what MCP clients send) cost one
//! `is_f64` check. The same scan reads the id of a message that cannot be parsed (nested
//! deeper than serde_json's limit of 128, or cut by a length limit), so that its error still
//! reaches the request that waits for it.

use serde_json::{Map, Value};

use crate::session::{error, INVALID_REQUEST};

/// An id as the agent wrote it: the text of one JSON string or number (checked).
#[derive(Debug, Clone, PartialEq)]
pub struct RawId {
    text: String,
    value: Value,
}

impl RawId {
    /// The id's text if it is one JSON string or number.
    fn new(text: &[u8]) -> Option<RawId> {
        let value: Value = serde_json::from_slice(text).ok()?;
        if !(value.is_string() || value.is_number()) {
            return None;
        }
        let text = String::from_utf8(text.to_vec()).ok()?;
        Some(RawId { text, value })
    }

    /// The id as serde_json reads it (a big number as its nearest `f64`).
    pub fn value(&self) -> &Value {
        &self.value
    }

    pub fn text(&self) -> &str {
        &self.text
    }
}

/// A shallow reader of one JSON text: it skips nested values by counting brackets, without
/// recursion and without building them, so any depth and any length costs one linear pass.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn ws(&mut self) {
        while self
            .b
            .get(self.i)
            .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    /// Skips a string (at its opening quote); `None` if it does not end.
    fn string(&mut self) -> Option<()> {
        self.i += 1;
        loop {
            let at = memchr::memchr2(b'"', b'\\', self.b.get(self.i..)?)?;
            if self.b[self.i + at] == b'"' {
                self.i += at + 1;
                return Some(());
            }
            // A backslash and the character it escapes (`\u` is followed by hex digits).
            self.i += at + 2;
        }
    }

    /// Skips one value; `None` if the text ends first.
    fn value(&mut self) -> Option<()> {
        self.ws();
        match *self.b.get(self.i)? {
            b'"' => self.string(),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match *self.b.get(self.i)? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.saturating_sub(1);
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                let start = self.i;
                while self.b.get(self.i).is_some_and(|c| {
                    !matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                }) {
                    self.i += 1;
                }
                (self.i > start).then_some(())
            }
        }
    }

    /// The last `"id"` member of the object at the cursor, as far as the text lets it be read.
    fn object_id(&mut self) -> Option<RawId> {
        let mut found = None;
        if !self.eat(b'{') {
            return None;
        }
        loop {
            self.ws();
            if self.b.get(self.i) != Some(&b'"') {
                return found;
            }
            let key = self.i;
            if self.string().is_none() {
                return found;
            }
            let key = &self.b[key..self.i];
            let is_id = key == b"\"id\""
                || (key.contains(&b'\\')
                    && serde_json::from_slice::<String>(key).is_ok_and(|k| k == "id"));
            self.ws();
            if !self.eat(b':') {
                return found;
            }
            self.ws();
            let start = self.i;
            if self.value().is_none() {
                return found;
            }
            if is_id {
                found = RawId::new(&self.b[start..self.i]);
            }
            self.ws();
            if !self.eat(b',') {
                return found;
            }
        }
    }
}

/// The id of a message whose top level is an object, read without parsing the rest: for
/// answering a message that cannot be parsed or is refused for its length. `None` if no string
/// or number id can be read.
pub fn peek_id(text: &[u8]) -> Option<RawId> {
    let mut s = Scan { b: text, i: 0 };
    s.ws();
    s.object_id()
}

/// The ids of a message's top level in order: one for an object, one per object element of
/// an array (a batch). Only what [`render`] needs.
pub fn peek_ids(text: &[u8]) -> Vec<RawId> {
    let mut s = Scan { b: text, i: 0 };
    s.ws();
    if !s.eat(b'[') {
        return s.object_id().into_iter().collect();
    }
    let mut out = Vec::new();
    loop {
        s.ws();
        if s.b.get(s.i) == Some(&b'{') {
            let start = s.i;
            if s.value().is_none() {
                return out;
            }
            out.extend(peek_id(&s.b[start..s.i]));
        } else if s.value().is_none() {
            return out;
        }
        s.ws();
        if !s.eat(b',') {
            return out;
        }
    }
}

/// Whether an id is a number serde_json did not read exactly (so its text must be kept).
fn inexact(id: Option<&Value>) -> bool {
    matches!(id, Some(Value::Number(n)) if n.is_f64())
}

/// The ids' texts of `text`, only if the parsed message `msg` has an id that needs them.
pub fn raw_ids_if_needed(msg: &Value, text: &[u8]) -> Vec<RawId> {
    let needed = match msg {
        Value::Object(o) => inexact(o.get("id")),
        Value::Array(a) => a.iter().any(|m| inexact(m.get("id"))),
        _ => false,
    };
    if needed {
        peek_ids(text)
    } else {
        Vec::new()
    }
}

/// One answer's text with its id as the agent wrote it, taken in order from `raw`.
fn render_one(answer: &Value, raw: &[RawId], next: &mut usize) -> String {
    let (Some(obj), true) = (answer.as_object(), inexact(answer.get("id"))) else {
        return answer.to_string();
    };
    let id = obj.get("id");
    let Some(k) = (*next..raw.len()).find(|&k| Some(&raw[k].value) == id) else {
        return answer.to_string();
    };
    *next = k + 1;
    let rest: Map<String, Value> = obj
        .iter()
        .filter(|(key, _)| key.as_str() != "id")
        .map(|(key, v)| (key.clone(), v.clone()))
        .collect();
    let rest = Value::Object(rest).to_string();
    match rest.strip_prefix('{') {
        Some("}") | None => format!("{{\"id\":{}}}", raw[k].text),
        Some(tail) => format!("{{\"id\":{},{tail}", raw[k].text),
    }
}

/// The text of an answer (or a batch of answers), each id as the agent wrote it (`raw` from
/// [`peek_ids`] or [`raw_ids_if_needed`] of the message answered).
pub fn render(answer: &Value, raw: &[RawId]) -> String {
    if raw.is_empty() {
        return answer.to_string();
    }
    let mut next = 0;
    match answer {
        Value::Array(all) => {
            let parts: Vec<String> = all.iter().map(|a| render_one(a, raw, &mut next)).collect();
            format!("[{}]", parts.join(","))
        }
        a => render_one(a, raw, &mut next),
    }
}

/// What a JSON-RPC message object is.
#[derive(Debug, PartialEq)]
pub enum Kind<'a> {
    Request {
        id: &'a Value,
        method: &'a str,
    },
    Notification {
        method: &'a str,
    },
    /// An answer to a request of ours (`result` or `error`).
    Response,
}

/// Classifies a message object, or the Invalid Request error (-32600) to answer it with: the
/// id is echoed when it is a string or a number, else null.
pub fn classify(obj: &Map<String, Value>) -> Result<Kind<'_>, Value> {
    let id = obj.get("id");
    let echo = id
        .filter(|v| v.is_string() || v.is_number())
        .unwrap_or(&Value::Null);
    let invalid = |why: &str| error(echo, INVALID_REQUEST, format!("invalid request: {why}"));
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("expected \"jsonrpc\": \"2.0\""));
    }
    match (obj.get("method"), id) {
        (Some(Value::String(method)), None) => Ok(Kind::Notification { method }),
        (Some(Value::String(method)), Some(id)) if id.is_string() || id.is_number() => {
            Ok(Kind::Request { id, method })
        }
        (Some(Value::String(_)), Some(_)) => Err(invalid("the id must be a string or a number")),
        (Some(m), _) => Err(invalid(&format!(
            "the method must be a string, not {}",
            kind_of(m)
        ))),
        (None, Some(_)) if obj.contains_key("result") != obj.contains_key("error") => {
            Ok(Kind::Response)
        }
        (None, _) => Err(invalid(
            "not a request, notification or response (no method; a response has an id and \
             one of result or error)",
        )),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text_of(id: &Option<RawId>) -> Option<&str> {
        id.as_ref().map(RawId::text)
    }

    #[test]
    fn the_id_is_read_from_the_top_level_only_and_at_any_depth_of_the_rest() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        for (msg, want) in [
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"x"}"#.to_string(),
                Some("7"),
            ),
            (r#" { "id" : "a\"b" }"#.into(), Some(r#""a\"b""#)),
            (r#"{"params":{"id":1},"id":2}"#.into(), Some("2")),
            (r#"{"params":["\"id\":1"],"id":3}"#.into(), Some("3")),
            (
                r#"{"\u0069d":123456789012345678901234567890}"#.into(),
                Some("123456789012345678901234567890"),
            ),
            (r#"{"id":1,"id":2}"#.into(), Some("2")),
            (format!(r#"{{"params":{deep},"id":-5e3}}"#), Some("-5e3")),
            (format!(r#"{{"id":9,"params":{deep}"#), Some("9")),
            (r#"{"id":{"x":1}}"#.into(), None),
            (r#"{"id":null}"#.into(), None),
            (r#"{"id":tru}"#.into(), None),
            (r#"{"params":{"id":1}}"#.into(), None),
            (r#"[{"id":1}]"#.into(), None),
            (r#""id""#.into(), None),
            (r#"{"id":"unterminated"#.into(), None),
            ("".into(), None),
        ] {
            assert_eq!(text_of(&peek_id(msg.as_bytes())), want, "{msg:.80}");
        }
    }

    #[test]
    fn a_cut_message_still_gives_the_id_it_holds() {
        let full = format!(
            r#"{{"jsonrpc":"2.0","id":"req-1","params":{{"t":"{}"}}}}"#,
            "a".repeat(1000)
        );
        for cut in [30, 40, 200, full.len() - 1] {
            assert_eq!(
                text_of(&peek_id(&full.as_bytes()[..cut])),
                Some("\"req-1\""),
                "{cut}"
            );
        }
        assert_eq!(text_of(&peek_id(&full.as_bytes()[..15])), None);
    }

    #[test]
    fn big_and_decimal_ids_come_back_as_written() {
        for id in [
            "123456789012345678901234567890",
            "-98765432109876543210",
            "1e3",
            "7.50",
            "18446744073709551616",
        ] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            let msg: Value = serde_json::from_str(&line).expect("json");
            let raw = raw_ids_if_needed(&msg, line.as_bytes());
            assert_eq!(raw.len(), 1, "{id}");
            let answer = json!({"jsonrpc": "2.0", "id": msg["id"], "result": {}});
            let out = render(&answer, &raw);
            assert!(out.starts_with(&format!("{{\"id\":{id},")), "{out}");
            let back: Value = serde_json::from_str(&out).expect("valid JSON");
            assert_eq!(back["result"], json!({}));
            assert_eq!(back["jsonrpc"], "2.0");
        }
        // Exact ids need nothing.
        for line in [
            r#"{"id":18446744073709551615}"#,
            r#"{"id":-9223372036854775808}"#,
            r#"{"id":"x"}"#,
        ] {
            let msg: Value = serde_json::from_str(line).expect("json");
            assert!(
                raw_ids_if_needed(&msg, line.as_bytes()).is_empty(),
                "{line}"
            );
            assert_eq!(render(&msg, &[]), msg.to_string());
        }
    }

    #[test]
    fn a_batch_gets_each_id_back_in_order() {
        let line = r#"[{"id":100000000000000000000001},{"method":"n"},{"id":100000000000000000000002},{"id":"s"}]"#;
        let msg: Value = serde_json::from_str(line).expect("json");
        let raw = raw_ids_if_needed(&msg, line.as_bytes());
        assert_eq!(raw.len(), 3);
        // Both big ids read as the same f64: the order tells them apart.
        assert_eq!(msg[0]["id"], msg[2]["id"]);
        let answers = json!([{"id": msg[0]["id"], "result": 1}, {"id": msg[2]["id"], "result": 2}, {"id": "s", "result": 3}]);
        let out = render(&answers, &raw);
        assert_eq!(
            out,
            r#"[{"id":100000000000000000000001,"result":1},{"id":100000000000000000000002,"result":2},{"id":"s","result":3}]"#
        );
    }

    #[test]
    fn messages_are_classified_and_invalid_ones_answered_with_their_id() {
        let o = |v: Value| v.as_object().expect("object").clone();
        let m = o(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
        assert_eq!(
            classify(&m),
            Ok(Kind::Request {
                id: &json!(1),
                method: "ping"
            })
        );
        let m = o(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        assert!(matches!(classify(&m), Ok(Kind::Notification { .. })));
        let m = o(json!({"jsonrpc": "2.0", "id": "g-1", "result": {}}));
        assert_eq!(classify(&m), Ok(Kind::Response));
        for (msg, id, why) in [
            (
                json!({"jsonrpc": "2.0", "id": 4, "method": 5}),
                json!(4),
                "the method must be a string, not a number",
            ),
            (
                json!({"jsonrpc": "2.0", "method": 5}),
                Value::Null,
                "the method must be a string",
            ),
            (json!({"method": 5}), Value::Null, "expected \"jsonrpc\""),
            (
                json!({"jsonrpc": "1.0", "id": "a", "method": "ping"}),
                json!("a"),
                "expected \"jsonrpc\"",
            ),
            (
                json!({"jsonrpc": "2.0", "id": [1], "method": "ping"}),
                Value::Null,
                "the id must be",
            ),
            (
                json!({"jsonrpc": "2.0", "id": 3}),
                json!(3),
                "not a request",
            ),
            (
                json!({"jsonrpc": "2.0", "id": 3, "result": 1, "error": {}}),
                json!(3),
                "not a request",
            ),
            (json!({"jsonrpc": "2.0"}), Value::Null, "not a request"),
        ] {
            let e = classify(&o(msg.clone())).expect_err(&msg.to_string());
            assert_eq!(e["id"], id, "{msg}");
            assert_eq!(e["error"]["code"], INVALID_REQUEST, "{msg}");
            let text = e["error"]["message"].as_str().unwrap_or_default();
            assert!(text.contains(why), "{msg}: {text}");
        }
    }
}
