//! The one MCP client the shim speaks to tool servers with: to copies over their socket
//! ([`crate::Copy`]) and to the baselines' tool processes over their stdio
//! (`germline-engine`'s `process.rs`, see docs/sandbox.md "The MCP client").
//!
//! A [`Session`] holds the client's state (request ids, the handshake) and speaks over any
//! [`Channel`] that moves newline-delimited JSON lines. While it waits for its response it
//! answers `ping`, hands notifications and the server's requests to a handler, and refuses
//! requests the handler does not answer ([`relay_one`]): during a call the shim is the
//! server's only client. Every wait is the channel's: a copy's channel waits until the copy's
//! one deadline, [`LineChannel`] until the deadline set for the request.

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::cancel::Cancel;

/// The MCP protocol version the client announces.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// What one message from a server means while the client awaits the answer to its request
/// `id`: the rules of both transports, in one place.
#[derive(Debug)]
pub enum Relayed {
    /// The awaited response: its result, or its error object (`None`: it had neither).
    Response(std::result::Result<Value, Option<Value>>),
    /// A reply to send back: to `ping`, or the handler's answer (or refusal) of a request.
    Reply(Value),
    /// Nothing to send: a notification (handed to the handler) or an unrelated message.
    Nothing,
}

/// Classifies `msg` (see [`Relayed`]). `handler` sees every notification (its answer is
/// ignored) and every request other than `ping`, and answers a request with
/// `Some({"result": ..})` or `Some({"error": ..})`; `None` refuses it.
pub fn relay_one(
    msg: &Value,
    id: u64,
    handler: &mut dyn FnMut(&Value) -> Option<Value>,
) -> Relayed {
    if msg.get("id").and_then(Value::as_u64) == Some(id) && msg.get("method").is_none() {
        return Relayed::Response(match (msg.get("result"), msg.get("error")) {
            (_, Some(err)) => Err(Some(err.clone())),
            (Some(r), None) => Ok(r.clone()),
            (None, None) => Err(None),
        });
    }
    match (msg.get("method").and_then(Value::as_str), msg.get("id")) {
        (Some("ping"), Some(rid)) => {
            Relayed::Reply(json!({"jsonrpc": "2.0", "id": rid, "result": {}}))
        }
        (Some(m), Some(rid)) => {
            let mut answer = handler(msg)
                .filter(|a| a.get("result").is_some() || a.get("error").is_some())
                .unwrap_or_else(|| {
                    json!({"error": {"code": -32601,
                        "message": format!("germline: {m} is not available to the tool during a call")}})
                });
            answer["jsonrpc"] = json!("2.0");
            answer["id"] = rid.clone();
            Relayed::Reply(answer)
        }
        (Some(_), None) => {
            handler(msg);
            Relayed::Nothing
        }
        _ => Relayed::Nothing,
    }
}

/// A transport of newline-delimited JSON-RPC lines.
pub trait Channel {
    /// What the transport itself can fail with (closed, deadline, ...).
    type Error;
    /// Sends one line; `line` ends with `\n`.
    fn send_line(&mut self, line: &[u8]) -> Result<(), Self::Error>;
    /// Waits for the next line (with or without its `\n`).
    fn recv_line(&mut self) -> Result<Vec<u8>, Self::Error>;
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError<E> {
    /// The transport failed.
    #[error(transparent)]
    Channel(E),
    /// The server sent a line that is not JSON.
    #[error("not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// A strict session got a message without `"jsonrpc": "2.0"`.
    #[error("not a JSON-RPC 2.0 message")]
    NotJsonRpc,
    /// The server answered with an error object.
    #[error("{method} failed: {error}")]
    Failed { method: String, error: Value },
    /// The server's response had neither a result nor an error.
    #[error("a response without result")]
    NoResult,
    /// [`Session::handshake`] on a session that has made (or begun) its handshake.
    #[error("initialize: this copy has made its handshake already")]
    AlreadyInitialized,
}

/// One client's state towards one server: request ids and the handshake.
#[derive(Debug)]
pub struct Session {
    next_id: u64,
    strict: bool,
    initialized: bool,
    /// The id of an `initialize` sent ahead ([`Session::begin_initialize`]) whose response has
    /// not been read yet.
    init_pending: Option<u64>,
    /// The capabilities the `initialize` announced, once sent.
    init_caps: Option<Value>,
    /// The client capabilities the next `initialize` announces.
    client_caps: Value,
}

impl Session {
    /// A session that refuses any message without `"jsonrpc": "2.0"` (copies).
    pub fn strict() -> Session {
        Session::new(true)
    }

    /// A session that skips any message it cannot classify (the baselines' tool processes).
    pub fn lenient() -> Session {
        Session::new(false)
    }

    fn new(strict: bool) -> Session {
        Session {
            next_id: 1,
            strict,
            initialized: false,
            init_pending: None,
            init_caps: None,
            client_caps: json!({}),
        }
    }

    /// Sets the client capabilities the `initialize` announces (the agent's `sampling` and
    /// `elicitation`, where the shim relays them); `{}` by default.
    pub fn set_client_capabilities(&mut self, caps: Value) {
        self.client_caps = caps;
    }

    /// The capabilities this session's `initialize` announced, once sent.
    pub fn initialized_with(&self) -> Option<&Value> {
        self.init_caps.as_ref()
    }

    /// The id of the last request sent, if any.
    pub fn last_request_id(&self) -> Option<u64> {
        (self.next_id > 1).then(|| self.next_id - 1)
    }

    /// Whether the handshake is complete.
    pub fn is_initialized(&self) -> bool {
        self.initialized
    }

    /// The `initialize` parameters this client sends.
    pub fn initialize_params(caps: &Value) -> Value {
        json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": caps,
            "clientInfo": {"name": "germline-shim", "version": env!("CARGO_PKG_VERSION")}
        })
    }

    /// The `tools/call` parameters, with the call's `_meta` if any.
    pub fn tools_call_params(tool: &str, arguments: Value, meta: Option<Value>) -> Value {
        let mut params = json!({"name": tool, "arguments": arguments});
        if let Some(m) = meta {
            params["_meta"] = m;
        }
        params
    }

    fn send<C: Channel>(&self, ch: &mut C, v: &Value) -> Result<(), ClientError<C::Error>> {
        let mut line = v.to_string().into_bytes();
        line.push(b'\n');
        ch.send_line(&line).map_err(ClientError::Channel)
    }

    /// Reads the next message; in a strict session it must be a JSON-RPC 2.0 object.
    fn recv<C: Channel>(&self, ch: &mut C) -> Result<Value, ClientError<C::Error>> {
        let line = ch.recv_line().map_err(ClientError::Channel)?;
        let msg: Value = serde_json::from_slice(&line).map_err(ClientError::NotJson)?;
        if self.strict
            && (!msg.is_object() || msg.get("jsonrpc").and_then(Value::as_str) != Some("2.0"))
        {
            return Err(ClientError::NotJsonRpc);
        }
        Ok(msg)
    }

    /// Sends a JSON-RPC notification.
    pub fn notify<C: Channel>(
        &self,
        ch: &mut C,
        method: &str,
    ) -> Result<(), ClientError<C::Error>> {
        self.send(ch, &json!({"jsonrpc": "2.0", "method": method}))
    }

    /// Sends one request and waits for its response, refusing the server's requests and
    /// skipping its notifications.
    pub fn request<C: Channel>(
        &mut self,
        ch: &mut C,
        method: &str,
        params: Value,
    ) -> Result<Value, ClientError<C::Error>> {
        self.request_relayed(ch, method, params, &mut |_| None)
    }

    /// Like [`Session::request`], handing every notification the server sends meanwhile to
    /// `observer`.
    pub fn request_observed<C: Channel>(
        &mut self,
        ch: &mut C,
        method: &str,
        params: Value,
        observer: &mut dyn FnMut(&Value),
    ) -> Result<Value, ClientError<C::Error>> {
        self.request_relayed(ch, method, params, &mut |m| {
            if m.get("id").is_none() {
                observer(m);
            }
            None
        })
    }

    /// Like [`Session::request`], with one handler for everything the server sends meanwhile
    /// ([`relay_one`]). A pending `initialize`'s response is read (and checked) on the way.
    pub fn request_relayed<C: Channel>(
        &mut self,
        ch: &mut C,
        method: &str,
        params: Value,
        handler: &mut dyn FnMut(&Value) -> Option<Value>,
    ) -> Result<Value, ClientError<C::Error>> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(
            ch,
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )?;
        loop {
            let msg = self.recv(ch)?;
            if self.init_response(&msg)? {
                continue;
            }
            match relay_one(&msg, id, handler) {
                Relayed::Response(Ok(result)) => return Ok(result),
                Relayed::Response(Err(Some(error))) => {
                    return Err(ClientError::Failed {
                        method: method.to_string(),
                        error,
                    })
                }
                Relayed::Response(Err(None)) => return Err(ClientError::NoResult),
                Relayed::Reply(answer) => self.send(ch, &answer)?,
                Relayed::Nothing => {}
            }
        }
    }

    /// Sends `initialize` (with the client capabilities set) and `notifications/initialized`
    /// without waiting for the answer, unless done already. The handshake is public, so it may
    /// run before the data; its answer is read, and checked, before the answer of the next
    /// request ([`Session::request_relayed`]) or by [`Session::initialize`].
    pub fn begin_initialize<C: Channel>(
        &mut self,
        ch: &mut C,
    ) -> Result<(), ClientError<C::Error>> {
        if self.initialized || self.init_pending.is_some() {
            return Ok(());
        }
        let id = self.next_id;
        self.next_id += 1;
        self.send(
            ch,
            &json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
                "params": Session::initialize_params(&self.client_caps)}),
        )?;
        self.notify(ch, "notifications/initialized")?;
        self.init_pending = Some(id);
        self.init_caps = Some(self.client_caps.clone());
        Ok(())
    }

    /// `true` if `msg` is the response to the pending `initialize` (then consumed); its error
    /// is the request's error.
    fn init_response<E>(&mut self, msg: &Value) -> Result<bool, ClientError<E>> {
        let Some(id) = self.init_pending else {
            return Ok(false);
        };
        if msg.get("id").and_then(Value::as_u64) != Some(id) || msg.get("method").is_some() {
            return Ok(false);
        }
        self.init_pending = None;
        if let Some(error) = msg.get("error") {
            return Err(ClientError::Failed {
                method: "initialize".into(),
                error: error.clone(),
            });
        }
        if msg.get("result").is_none() {
            return Err(ClientError::NoResult);
        }
        self.initialized = true;
        Ok(true)
    }

    /// The pipelined handshake ([`Session::begin_initialize`]) completed: waits for its answer.
    /// Before its handshake is answered a server has nothing to say: a ping is answered,
    /// anything else refused.
    pub fn initialize<C: Channel>(&mut self, ch: &mut C) -> Result<(), ClientError<C::Error>> {
        self.begin_initialize(ch)?;
        while self.init_pending.is_some() {
            let msg = self.recv(ch)?;
            if !self.init_response(&msg)? {
                if let Relayed::Reply(answer) = relay_one(&msg, 0, &mut |_| None) {
                    self.send(ch, &answer)?;
                }
            }
        }
        Ok(())
    }

    /// The handshake in order: `initialize` with `params`, its answer, then
    /// `notifications/initialized`. Returns the server's answer. Refused once a handshake is
    /// made or begun.
    pub fn handshake<C: Channel>(
        &mut self,
        ch: &mut C,
        params: Value,
    ) -> Result<Value, ClientError<C::Error>> {
        if self.initialized || self.init_pending.is_some() {
            return Err(ClientError::AlreadyInitialized);
        }
        let r = self.request(ch, "initialize", params)?;
        self.notify(ch, "notifications/initialized")?;
        self.initialized = true;
        Ok(r)
    }

    /// [`Session::handshake`] with this client's own parameters, unless made already.
    pub fn ensure_handshake<C: Channel>(
        &mut self,
        ch: &mut C,
    ) -> Result<(), ClientError<C::Error>> {
        if !self.initialized {
            let params = Session::initialize_params(&self.client_caps);
            self.handshake(ch, params)?;
        }
        Ok(())
    }
}

/// A [`Channel`] over a reader and a writer (a child's stdout and stdin): a thread reads the
/// lines, and each wait ends at the deadline set with [`LineChannel::set_deadline`].
#[derive(Debug)]
pub struct LineChannel<W: Write> {
    writer: W,
    lines: mpsc::Receiver<Result<String, LineError>>,
    deadline: Instant,
    cancel: Option<Arc<Cancel>>,
}

/// How a [`LineChannel`] fails.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// The reader reached its end.
    #[error("the reader closed")]
    Closed,
    /// Reading failed.
    #[error("reading: {0}")]
    Read(#[source] std::io::Error),
    /// No line before the deadline (or none will come: the reader is gone).
    #[error("no answer before the deadline")]
    Deadline,
    /// Writing failed (the other end stopped reading).
    #[error("writing: {0}")]
    Write(#[source] std::io::Error),
    /// The agent cancelled the request ([`LineChannel::set_cancel`]).
    #[error("the agent cancelled the request")]
    Cancelled,
}

impl<W: Write> LineChannel<W> {
    /// Starts the thread that reads `reader`'s lines; the deadline is now until set.
    pub fn spawn<R: Read + Send + 'static>(reader: R, writer: W) -> LineChannel<W> {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(reader);
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(0) => {
                        let _ = tx.send(Err(LineError::Closed));
                        return;
                    }
                    Ok(_) => {
                        if tx.send(Ok(line)).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(LineError::Read(e)));
                        return;
                    }
                }
            }
        });
        LineChannel {
            writer,
            lines: rx,
            deadline: Instant::now(),
            cancel: None,
        }
    }

    /// Every wait from now on also ends, with [`LineError::Cancelled`], once `cancel` fires.
    pub fn set_cancel(&mut self, cancel: Option<Arc<Cancel>>) {
        self.cancel = cancel;
    }

    /// Every wait from now on ends at `deadline`.
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    /// The writer (a child's stdin).
    pub fn writer_mut(&mut self) -> &mut W {
        &mut self.writer
    }
}

impl<W: Write> Channel for LineChannel<W> {
    type Error = LineError;

    fn send_line(&mut self, line: &[u8]) -> Result<(), LineError> {
        self.writer
            .write_all(line)
            .and_then(|()| self.writer.flush())
            .map_err(LineError::Write)
    }

    fn recv_line(&mut self) -> Result<Vec<u8>, LineError> {
        loop {
            if self.cancel.as_ref().is_some_and(|c| c.fired()) {
                return Err(LineError::Cancelled);
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            // With a cancellation to watch, the wait is cut into slices of 5 ms (the lines
            // come from a thread's channel, which cannot be polled next to it).
            let slice = match &self.cancel {
                Some(_) => left.min(Duration::from_millis(5)),
                None => left,
            };
            match self.lines.recv_timeout(slice.max(Duration::from_millis(1))) {
                Ok(line) => return line.map(String::into_bytes),
                Err(mpsc::RecvTimeoutError::Timeout) if !left.is_zero() && slice < left => {}
                Err(_) => return Err(LineError::Deadline),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The client against a scripted server over an in-memory socket pair: the server thread
    //! reads what the client really sends and answers line by line.

    use super::*;
    use std::os::unix::net::UnixStream;
    use std::thread::JoinHandle;

    /// The server's end: reads the client's lines, writes its own.
    struct Server {
        reader: BufReader<UnixStream>,
        writer: UnixStream,
    }

    impl Server {
        fn read(&mut self) -> Value {
            let mut line = String::new();
            self.reader.read_line(&mut line).expect("read");
            serde_json::from_str(&line).expect("the client sends JSON")
        }

        fn write(&mut self, v: Value) {
            self.write_raw(&v.to_string());
        }

        fn write_raw(&mut self, line: &str) {
            self.writer
                .write_all(format!("{line}\n").as_bytes())
                .expect("write");
        }

        /// Whether the client sends anything within `ms`.
        fn quiet_for(&mut self, ms: u64) -> bool {
            self.writer
                .set_read_timeout(Some(Duration::from_millis(ms)))
                .expect("timeout");
            // Buffered or arriving within the timeout: not quiet.
            let quiet = match self.reader.fill_buf() {
                Ok(buf) => buf.is_empty(),
                Err(_) => true,
            };
            self.writer.set_read_timeout(None).expect("timeout");
            quiet
        }
    }

    /// A client channel and a server running `script` on the other end.
    fn pair(
        script: impl FnOnce(&mut Server) + Send + 'static,
    ) -> (LineChannel<UnixStream>, JoinHandle<()>) {
        let (a, b) = UnixStream::pair().expect("socketpair");
        let mut ch = LineChannel::spawn(a.try_clone().expect("clone"), a);
        ch.set_deadline(Instant::now() + Duration::from_secs(10));
        let server = std::thread::spawn(move || {
            let mut s = Server {
                reader: BufReader::new(b.try_clone().expect("clone")),
                writer: b,
            };
            script(&mut s);
        });
        (ch, server)
    }

    #[test]
    fn a_pipelined_handshake_then_a_call_relays_what_the_server_sends_meanwhile() {
        let (mut ch, server) = pair(|s| {
            let init = s.read();
            assert_eq!(init["method"], "initialize");
            assert_eq!(init["id"], 1);
            assert_eq!(init["params"]["protocolVersion"], PROTOCOL_VERSION);
            assert_eq!(init["params"]["capabilities"], json!({"sampling": {}}));
            assert_eq!(s.read()["method"], "notifications/initialized");
            let call = s.read();
            assert_eq!(call["id"], 2);
            assert_eq!(
                call["params"],
                json!({"name": "echo", "arguments": {"text": "hi"}, "_meta": {"progressToken": 5}})
            );
            // Before answering anything: a notification, a ping, two requests of the client.
            s.write(json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progress": 1}}));
            s.write(json!({"jsonrpc": "2.0", "id": "p", "method": "ping"}));
            assert_eq!(s.read(), json!({"jsonrpc": "2.0", "id": "p", "result": {}}));
            s.write(json!({"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage"}));
            assert_eq!(
                s.read(),
                json!({"jsonrpc": "2.0", "id": 7, "result": {"content": "ok"}})
            );
            s.write(json!({"jsonrpc": "2.0", "id": 8, "method": "roots/list"}));
            assert_eq!(
                s.read(),
                json!({"jsonrpc": "2.0", "id": 8, "error": {"code": -32601,
                    "message": "germline: roots/list is not available to the tool during a call"}})
            );
            // The handshake's answer, then the call's.
            s.write(json!({"jsonrpc": "2.0", "id": 1, "result": {"capabilities": {}}}));
            s.write(json!({"jsonrpc": "2.0", "id": 2, "result": {"content": [{"text": "hi"}]}}));
        });
        let mut c = Session::strict();
        c.set_client_capabilities(json!({"sampling": {}}));
        c.begin_initialize(&mut ch).expect("begin");
        assert_eq!(c.initialized_with(), Some(&json!({"sampling": {}})));
        assert!(!c.is_initialized());
        let mut seen = Vec::new();
        let params = Session::tools_call_params(
            "echo",
            json!({"text": "hi"}),
            Some(json!({"progressToken": 5})),
        );
        let r = c
            .request_relayed(&mut ch, "tools/call", params, &mut |m| {
                seen.push(m["method"].clone());
                (m["method"] == "sampling/createMessage")
                    .then(|| json!({"result": {"content": "ok"}}))
            })
            .expect("call");
        assert_eq!(r, json!({"content": [{"text": "hi"}]}));
        assert!(c.is_initialized());
        assert_eq!(
            seen,
            [
                "notifications/progress",
                "sampling/createMessage",
                "roots/list"
            ]
        );
        server.join().expect("server");
    }

    #[test]
    fn the_ordered_handshake_waits_for_the_answer_before_initialized() {
        let (mut ch, server) = pair(|s| {
            assert_eq!(s.read()["method"], "initialize");
            // Nothing more until the answer: `notifications/initialized` follows it.
            assert!(s.quiet_for(200), "initialized was sent before the answer");
            s.write(json!({"jsonrpc": "2.0", "id": 1, "result": {"serverInfo": {"name": "t"}}}));
            assert_eq!(s.read()["method"], "notifications/initialized");
            let r = s.read();
            assert_eq!(
                (r["id"].clone(), r["method"].clone()),
                (json!(2), json!("tools/list"))
            );
            s.write(json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": []}}));
        });
        let mut c = Session::lenient();
        c.ensure_handshake(&mut ch).expect("handshake");
        c.ensure_handshake(&mut ch).expect("only once");
        assert!(matches!(
            c.handshake(&mut ch, json!({})),
            Err(ClientError::AlreadyInitialized)
        ));
        assert_eq!(
            c.request(&mut ch, "tools/list", json!({})).expect("list"),
            json!({"tools": []})
        );
        server.join().expect("server");
    }

    #[test]
    fn an_error_response_names_the_method() {
        let (mut ch, server) = pair(|s| {
            s.read();
            s.write(
                json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad"}}),
            );
        });
        let e = Session::strict()
            .request(&mut ch, "tools/call", json!({}))
            .expect_err("refused");
        assert_eq!(
            e.to_string(),
            r#"tools/call failed: {"code":-32602,"message":"bad"}"#
        );
        server.join().expect("server");
    }

    #[test]
    fn a_failed_pipelined_handshake_is_the_next_requests_error() {
        let (mut ch, server) = pair(|s| {
            s.read();
            s.read();
            s.read();
            s.write(json!({"jsonrpc": "2.0", "id": 1, "error": {"code": 1, "message": "old"}}));
        });
        let mut c = Session::strict();
        c.begin_initialize(&mut ch).expect("begin");
        let e = c
            .request(&mut ch, "tools/list", json!({}))
            .expect_err("refused");
        assert_eq!(
            e.to_string(),
            r#"initialize failed: {"code":1,"message":"old"}"#
        );
        server.join().expect("server");
    }

    #[test]
    fn malformed_input_is_a_clear_error() {
        // Not JSON.
        let (mut ch, server) = pair(|s| {
            s.read();
            s.write_raw("{\"jsonrpc\": \"2.0\", \"id\": 1,");
        });
        let e = Session::lenient()
            .request(&mut ch, "tools/list", json!({}))
            .expect_err("not JSON");
        assert!(matches!(e, ClientError::NotJson(_)), "{e:?}");
        assert!(e.to_string().starts_with("not JSON: "), "{e}");
        server.join().expect("server");

        // A response with neither result nor error.
        let (mut ch, server) = pair(|s| {
            s.read();
            s.write(json!({"jsonrpc": "2.0", "id": 1}));
        });
        let e = Session::strict()
            .request(&mut ch, "tools/list", json!({}))
            .expect_err("no result");
        assert_eq!(e.to_string(), "a response without result");
        server.join().expect("server");
    }

    #[test]
    fn only_a_strict_session_refuses_a_message_that_is_not_json_rpc() {
        let script = |s: &mut Server| {
            s.read();
            s.write(json!({"id": 1, "result": "no version"}));
            s.write(json!([1, 2]));
            s.write(json!({"jsonrpc": "2.0", "id": 1, "result": "ok"}));
        };
        let (mut ch, server) = pair(script);
        let e = Session::strict()
            .request(&mut ch, "m", json!({}))
            .expect_err("strict");
        assert!(matches!(e, ClientError::NotJsonRpc), "{e:?}");
        assert_eq!(e.to_string(), "not a JSON-RPC 2.0 message");
        server.join().expect("server");
        // The lenient one takes the first response, with or without the version field.
        let (mut ch, server) = pair(script);
        assert_eq!(
            Session::lenient()
                .request(&mut ch, "m", json!({}))
                .expect("lenient"),
            json!("no version")
        );
        server.join().expect("server");
    }

    #[test]
    fn a_closed_server_and_a_silent_one_are_channel_errors() {
        let (mut ch, server) = pair(|s| {
            s.read();
        });
        let e = Session::strict()
            .request(&mut ch, "m", json!({}))
            .expect_err("closed");
        assert!(
            matches!(e, ClientError::Channel(LineError::Closed)),
            "{e:?}"
        );
        server.join().expect("server");

        let (a, _b) = UnixStream::pair().expect("socketpair");
        let mut ch = LineChannel::spawn(a.try_clone().expect("clone"), a);
        ch.set_deadline(Instant::now() + Duration::from_millis(50));
        let t = Instant::now();
        let e = Session::strict()
            .request(&mut ch, "m", json!({}))
            .expect_err("silent");
        assert!(
            matches!(e, ClientError::Channel(LineError::Deadline)),
            "{e:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_notification_goes_to_the_observer_only() {
        let (mut ch, server) = pair(|s| {
            s.read();
            s.write(json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "log"}}));
            s.write(json!({"jsonrpc": "2.0", "id": 3, "method": "elicitation/create"}));
            let refusal = s.read();
            assert_eq!(refusal["id"], 3);
            assert_eq!(refusal["error"]["code"], -32601);
            s.write(json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
        });
        let mut seen = Vec::new();
        Session::strict()
            .request_observed(&mut ch, "tools/call", json!({}), &mut |m| {
                seen.push(m["params"]["data"].clone())
            })
            .expect("call");
        assert_eq!(seen, [json!("log")]);
        server.join().expect("server");
    }
}
