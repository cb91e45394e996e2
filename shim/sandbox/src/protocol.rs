//! The control protocol between the shim, the germline and its copies, as typed messages. The
//! bootstrap (`bootstrap/python/germline_bootstrap.py`, its head comment) is the other end:
//!
//! * control socket (fd 3 of the germline, `SOCK_SEQPACKET`, one JSON object per packet):
//!   [`FromGermline`] `ready` / `error` once, then per fork [`ToGermline::Fork`] (with the
//!   copy socket as `SCM_RIGHTS`) answered by [`FromGermline::Forked`];
//! * copy socket (`SOCK_STREAM`, one JSON object a line): [`ToCopy::Go`] (under a reaper),
//!   [`FromCopy::Ready`] or [`FromCopy::Error`], [`ToCopy::Prewarm`] (pool copies), then MCP
//!   JSON-RPC, into which the shim puts one [`ToCopy::Data`] line (with the items' memfds)
//!   before the call. A control line starts with `{"op":` (no JSON-RPC line does: the copy
//!   tells them apart by that prefix), which the tag-first encoding here guarantees.
//!
//! Everything the germline and a copy say is untrusted: decoding is lenient where the shim
//! only reports what was said (times, reasons) and strict on the operation; a message of
//! another operation is not one of these types ([`known`] gives `None`), and the caller quotes
//! the message itself in its refusal.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// Messages of the shim to the germline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToGermline {
    /// Fork one copy: the copy installs `seccomp` (the program's hex, [`crate::seccomp`]) and
    /// the Landlock layer `landlock`, unshares its PID namespace if `pidns`, and runs the
    /// tool under a reaper if `reaper`.
    Fork {
        seccomp: String,
        landlock: LandlockLayer,
        pidns: bool,
        reaper: bool,
    },
}

/// The copy's own Landlock layer as the bootstrap installs it: handled filesystem rights,
/// handled network rights, scopes, `(path, rights)` rules and the TCP ports it may connect to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LandlockLayer {
    pub fs: u64,
    pub net: u64,
    pub scoped: u64,
    pub rules: Vec<(String, u64)>,
    pub ports: Vec<u16>,
}

/// Messages of the germline to the shim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FromGermline {
    /// Initialisation done; `warm`: the warming session ran; `warm_failed`: the manifest's
    /// warm calls that failed in it (skipped), each as `'tool': why` for the shim to say.
    Ready {
        #[serde(default, deserialize_with = "lenient_bool")]
        warm: bool,
        #[serde(default, deserialize_with = "lenient_lines")]
        warm_failed: Vec<String>,
    },
    /// Initialisation failed, with the traceback's end.
    Error {
        #[serde(default, deserialize_with = "lenient_reason")]
        reason: Option<String>,
    },
    /// The copy is forked; `t`: the germline's own clock readings (for the time breakdown).
    Forked {
        #[serde(default, deserialize_with = "lenient_times")]
        t: Vec<u64>,
    },
}

/// Lines of the shim to a copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToCopy {
    /// The copy (a reaper) is in its own cgroup: it may fork the tool.
    Go,
    /// A pool copy runs the germline's warming session once more while it waits.
    Prewarm,
    /// The call's items (their memfds travel with the line, in this order) and twin inputs.
    Data {
        items: Vec<DataItem>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        twin: Option<Twin>,
    },
}

/// One item of [`ToCopy::Data`]: its name and, if it has one, its path inside the copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataItem {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// The per-call twin inputs (paper A4): the clock the copy starts from and its seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Twin {
    /// u64, not u128: not every JSON reader takes a larger number.
    pub time_ns: u64,
    pub seed: u64,
}

/// Lines of a copy to the shim before its MCP session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum FromCopy {
    /// Confined and waiting; `t`: its own clock readings (for the time breakdown).
    Ready {
        #[serde(default, deserialize_with = "lenient_times")]
        t: Vec<u64>,
    },
    /// Confining itself failed, with the traceback's end.
    Error {
        #[serde(default, deserialize_with = "lenient_reason")]
        reason: Option<String>,
    },
}

/// Requests of `germline status|call|stop ID` to the supervisor that `germline start` leaves
/// running (`/run/germline/<id>.sock`, one JSON line each way; `cli.rs`). Read leniently as
/// before: a call's missing or non-string `tool` is the empty name, missing `arguments` are
/// `{}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum SupervisorRequest {
    Status,
    Call {
        #[serde(default, deserialize_with = "lenient_string")]
        tool: String,
        #[serde(default = "empty_object")]
        arguments: Value,
    },
    Stop,
}

/// The supervisor's answers (the status answer is the germline's `Status` with its extras).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SupervisorAnswer {
    Status(Value),
    Result { result: Value },
    Error { error: String },
    Stopped { stopped: bool },
}

/// A control message that is not JSON at all.
#[derive(Debug, thiserror::Error)]
#[error("malformed control message: {0}")]
pub struct Malformed(#[from] pub serde_json::Error);

/// Parses one message (a packet or a line, its newline included or not) as JSON.
pub fn decode(bytes: &[u8]) -> Result<Value, Malformed> {
    Ok(serde_json::from_slice(bytes)?)
}

/// The message as one this end expects (`T`), or `None` for any other operation or shape:
/// the caller keeps the message itself for the refusal that quotes it.
///
/// Only an object is a message: serde would also read an internally tagged enum from an
/// array whose first element is the tag (`["ready"]`), which no end of this protocol sends.
pub fn known<T: for<'de> Deserialize<'de>>(v: &Value) -> Option<T> {
    if !v.is_object() {
        return None;
    }
    T::deserialize(v).ok()
}

/// Encodes one message as a packet (no newline).
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    // Serialising these types (strings, integers, booleans, sequences, string-keyed structs)
    // cannot fail; an empty message would be refused by the other end.
    serde_json::to_vec(msg).unwrap_or_default()
}

/// Encodes one message as a line.
pub fn encode_line<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut line = encode(msg);
    line.push(b'\n');
    line
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

fn lenient_string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Value::deserialize(d)?
        .as_str()
        .unwrap_or_default()
        .to_string())
}

fn lenient_bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Value::deserialize(d)?.as_bool().unwrap_or(false))
}

/// At most 16 strings of at most 400 characters, control characters (a terminal's escapes
/// among them: the shim prints these) replaced; anything else dropped.
fn lenient_lines<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Value::deserialize(d)?
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .take(16)
                .map(|s| {
                    s.chars()
                        .take(400)
                        .map(|c| if c.is_control() { '?' } else { c })
                        .collect()
                })
                .collect()
        })
        .unwrap_or_default())
}

fn lenient_reason<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Value::deserialize(d)?.as_str().map(str::to_string))
}

fn lenient_times<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    Ok(Value::deserialize(d)?
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip<T>(msg: &T) -> T
    where
        T: Serialize + for<'de> Deserialize<'de>,
    {
        let bytes = encode(msg);
        known(&decode(&bytes).expect("JSON")).expect("decodes as what was encoded")
    }

    fn fork() -> ToGermline {
        ToGermline::Fork {
            seccomp: "2000000004000000".into(),
            landlock: LandlockLayer {
                fs: 0xfff0,
                net: 3,
                scoped: 3,
                rules: vec![("/dev/null".into(), 6), ("/run".into(), 0xfff0)],
                ports: vec![3128],
            },
            pidns: true,
            reaper: false,
        }
    }

    #[test]
    fn every_message_round_trips() {
        assert_eq!(round_trip(&fork()), fork());
        for m in [
            FromGermline::Ready {
                warm: true,
                warm_failed: vec!["'echo': bad".into()],
            },
            FromGermline::Error {
                reason: Some("Traceback ...".into()),
            },
            FromGermline::Forked { t: vec![1, 2, 3] },
        ] {
            assert_eq!(round_trip(&m), m);
        }
        for m in [
            ToCopy::Go,
            ToCopy::Prewarm,
            ToCopy::Data {
                items: vec![],
                twin: None,
            },
            ToCopy::Data {
                items: vec![
                    DataItem {
                        name: "a".into(),
                        path: None,
                    },
                    DataItem {
                        name: "b".into(),
                        path: Some("/home/alice/b.txt".into()),
                    },
                ],
                twin: Some(Twin {
                    time_ns: u64::MAX,
                    seed: 7,
                }),
            },
        ] {
            assert_eq!(round_trip(&m), m);
        }
        for m in [
            FromCopy::Ready {
                t: vec![1, 2, 3, 4, 5],
            },
            FromCopy::Error { reason: None },
        ] {
            assert_eq!(round_trip(&m), m);
        }
    }

    #[test]
    fn copy_lines_are_byte_for_byte_what_the_bootstrap_matches() {
        // The bootstrap tells control lines by their first bytes (`{"op":`, and
        // `{"op":"prewarm"` for a pool copy), so these are fixed.
        assert_eq!(encode_line(&ToCopy::Go), b"{\"op\":\"go\"}\n");
        assert_eq!(encode_line(&ToCopy::Prewarm), b"{\"op\":\"prewarm\"}\n");
        let data = ToCopy::Data {
            items: vec![
                DataItem {
                    name: "in\"voice".into(),
                    path: Some("/home/alice/invoice.pdf".into()),
                },
                DataItem {
                    name: "notes".into(),
                    path: None,
                },
            ],
            twin: Some(Twin {
                time_ns: 1_700_000_000_000_000_000,
                seed: 42,
            }),
        };
        assert_eq!(
            String::from_utf8(encode_line(&data)).expect("UTF-8"),
            "{\"op\":\"data\",\"items\":[{\"name\":\"in\\\"voice\",\"path\":\"/home/alice/invoice.pdf\"},\
             {\"name\":\"notes\"}],\"twin\":{\"time_ns\":1700000000000000000,\"seed\":42}}\n"
        );
        let bare = ToCopy::Data {
            items: vec![],
            twin: None,
        };
        assert_eq!(encode_line(&bare), b"{\"op\":\"data\",\"items\":[]}\n");
        // The fork command carries the operation first too.
        assert!(encode(&fork()).starts_with(b"{\"op\":\"fork\","));
    }

    #[test]
    fn what_the_bootstrap_sends_decodes() {
        // As germline_bootstrap.py writes them (json.dumps: spaces after separators).
        let ready = br#"{"op": "ready", "warm": false}"#;
        assert_eq!(
            known(&decode(ready).expect("JSON")),
            Some(FromGermline::Ready {
                warm: false,
                warm_failed: vec![]
            })
        );
        let ready = br#"{"op": "ready", "warm": true, "warm_failed": ["'git_status': dubious"]}"#;
        assert_eq!(
            known(&decode(ready).expect("JSON")),
            Some(FromGermline::Ready {
                warm: true,
                warm_failed: vec!["'git_status': dubious".into()]
            })
        );
        let forked = br#"{"op": "forked", "t": [10, 20, 30]}"#;
        assert_eq!(
            known(&decode(forked).expect("JSON")),
            Some(FromGermline::Forked {
                t: vec![10, 20, 30]
            })
        );
        let copy_ready = b"{\"op\": \"ready\", \"t\": [1, 2, 3, 4, 5]}\n";
        assert_eq!(
            known(&decode(copy_ready).expect("JSON")),
            Some(FromCopy::Ready {
                t: vec![1, 2, 3, 4, 5]
            })
        );
        let error = br#"{"op": "error", "reason": "ImportError: no module x"}"#;
        assert_eq!(
            known(&decode(error).expect("JSON")),
            Some(FromCopy::Error {
                reason: Some("ImportError: no module x".into())
            })
        );
    }

    #[test]
    fn untrusted_details_are_read_leniently() {
        // What is only reported (times, reasons, the warm flag) never turns a message into
        // another one: odd values read as absent.
        let v = json!({"op": "forked", "t": "soon"});
        assert_eq!(known(&v), Some(FromGermline::Forked { t: vec![] }));
        let v = json!({"op": "forked", "t": [1, -2, "x", 3]});
        assert_eq!(known(&v), Some(FromGermline::Forked { t: vec![1, 3] }));
        let v = json!({"op": "ready", "warm": "yes", "extra": 1, "warm_failed": -1});
        assert_eq!(
            known(&v),
            Some(FromGermline::Ready {
                warm: false,
                warm_failed: vec![]
            })
        );
        // Reported lines are bounded and carry no terminal escapes.
        let many: Vec<String> = (0..40)
            .map(|i| format!("'t{i}': \u{1b}[2J{}", "x".repeat(900)))
            .collect();
        let v = json!({"op": "ready", "warm": true, "warm_failed": many});
        let Some(FromGermline::Ready { warm_failed, .. }) = known::<FromGermline>(&v) else {
            panic!("not ready");
        };
        assert_eq!(warm_failed.len(), 16);
        assert!(warm_failed
            .iter()
            .all(|l| l.chars().count() == 400 && !l.contains('\u{1b}')));
        let v = json!({"op": "error", "reason": 5});
        assert_eq!(known(&v), Some(FromCopy::Error { reason: None }));
        assert_eq!(
            known(&json!({"op": "error"})),
            Some(FromCopy::Error { reason: None })
        );
    }

    #[test]
    fn other_operations_and_shapes_are_not_taken_for_known_ones() {
        for v in [
            json!({"op": "fork"}),
            json!({"op": "READY"}),
            json!({"warm": true}),
            json!(["ready"]),
            json!("ready"),
            json!(null),
        ] {
            assert_eq!(known::<FromGermline>(&v), None, "{v}");
            assert_eq!(known::<FromCopy>(&v), None, "{v}");
        }
        // The germline's `forked` is not a copy's message, nor a copy's `ready` the germline's
        // answer to a fork.
        assert_eq!(known::<FromCopy>(&json!({"op": "forked"})), None);
        // What the shim sends is read strictly: a missing or unknown field is refused.
        let mut v = serde_json::to_value(fork()).expect("value");
        v["extra"] = json!(1);
        assert_eq!(known::<ToGermline>(&v), None);
        assert_eq!(
            known::<ToGermline>(&json!({"op": "fork", "pidns": true})),
            None
        );
        assert_eq!(known::<ToCopy>(&json!({"op": "data"})), None);
        assert_eq!(
            known::<ToCopy>(&json!({"op": "data", "items": [{"name": "a", "mode": 1}]})),
            None
        );
    }

    #[test]
    fn supervisor_requests_round_trip_and_read_leniently() {
        for m in [
            SupervisorRequest::Status,
            SupervisorRequest::Stop,
            SupervisorRequest::Call {
                tool: "get_current_time".into(),
                arguments: json!({"timezone": "UTC"}),
            },
        ] {
            assert_eq!(round_trip(&m), m);
        }
        assert_eq!(
            known(&json!({"op": "call"})),
            Some(SupervisorRequest::Call {
                tool: String::new(),
                arguments: json!({})
            })
        );
        assert_eq!(
            known(&json!({"op": "call", "tool": 3, "arguments": null})),
            Some(SupervisorRequest::Call {
                tool: String::new(),
                arguments: Value::Null
            })
        );
        assert_eq!(known::<SupervisorRequest>(&json!({"op": "restart"})), None);
        assert_eq!(known::<SupervisorRequest>(&Value::Null), None);
        assert_eq!(
            serde_json::to_value(SupervisorAnswer::Error { error: "no".into() }).expect("value"),
            json!({"error": "no"})
        );
        assert_eq!(
            serde_json::to_value(SupervisorAnswer::Stopped { stopped: true }).expect("value"),
            json!({"stopped": true})
        );
        assert_eq!(
            serde_json::to_value(SupervisorAnswer::Result { result: json!(1) }).expect("value"),
            json!({"result": 1})
        );
    }

    #[test]
    fn malformed_input_is_a_clear_error() {
        for bad in [&b"{\"op\": \"ready\""[..], b"", b"\xff\xfe", b"ready"] {
            let e = decode(bad).expect_err("not JSON");
            assert!(
                e.to_string().starts_with("malformed control message: "),
                "{e}"
            );
        }
        let e = decode(b"{\"op\": \"ready\"").expect_err("truncated");
        assert_eq!(
            e.to_string(),
            "malformed control message: EOF while parsing an object at line 1 column 14"
        );
    }
}
