//! Server-sent events on `germline serve`'s Streamable HTTP (issue 29): a `tools/call` whose
//! POST accepts `text/event-stream` is answered with a stream that carries what the agent's
//! group copy says during the call (progress and log notifications, sampling and elicitation
//! requests), then the call's answer. Which copy may speak is the relay's decision, as over
//! stdio (`germline_engine::relay`): other copies' notifications never reach an [`SseLink`].
//!
//! The agent answers a request made on the stream by POSTing a JSON-RPC response with its
//! session id; [`Streams::answer`] hands it to the waiting call. The agent's
//! `notifications/cancelled` fires the call's [`Cancel`] through [`Streams::cancel`], without
//! the session's lock (which the call holds).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use germline_engine::relay::{AgentLink, Cancel};
use http_body_util::Full;
use hyper::body::{Body, Frame, SizeHint};
use serde_json::{json, Value};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// A response body: one buffer, or the events of a call as they come.
#[derive(Debug)]
pub enum Out {
    Full(Full<Bytes>),
    Events(UnboundedReceiver<Bytes>),
}

impl Body for Out {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            Out::Full(b) => Pin::new(b).poll_frame(cx),
            Out::Events(rx) => rx.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Out::Full(b) => b.is_end_stream(),
            Out::Events(_) => false,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Out::Full(b) => b.size_hint(),
            Out::Events(_) => SizeHint::default(),
        }
    }
}

/// One SSE `message` event carrying a JSON-RPC message (already rendered).
pub fn event(json: &str) -> Bytes {
    let mut s = String::with_capacity(json.len() + 24);
    s.push_str("event: message\n");
    // A rendered JSON value has no raw newline; split anyway, as SSE requires.
    for line in json.split('\n') {
        s.push_str("data: ");
        s.push_str(line);
        s.push('\n');
    }
    s.push('\n');
    Bytes::from(s)
}

/// Calls in flight and the requests they wait on, by HTTP session.
#[derive(Debug, Default)]
pub struct Streams {
    /// (session, id of the agent's request as JSON text) → its cancellation.
    running: Mutex<HashMap<(String, String), Arc<Cancel>>>,
    /// (session, id germline gave its request to the agent) → where the answer goes.
    waiting: Mutex<HashMap<(String, String), std::sync::mpsc::Sender<Value>>>,
    next: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Streams {
    /// Registers the call `id` of `session` and returns its cancellation (`None` if the
    /// socket pair for it cannot be made: the call then runs uncancellable, as before).
    pub fn start(&self, session: &str, id: &Value) -> Option<Arc<Cancel>> {
        let c = Arc::new(Cancel::new().ok()?);
        lock(&self.running).insert((session.to_string(), id.to_string()), c.clone());
        Some(c)
    }

    /// The call ended (answered or cancelled).
    pub fn finish(&self, session: &str, id: &Value) {
        lock(&self.running).remove(&(session.to_string(), id.to_string()));
    }

    /// `notifications/cancelled` for `id` of `session`: whether a call in flight was fired.
    pub fn cancel(&self, session: &str, id: &Value) -> bool {
        match lock(&self.running).get(&(session.to_string(), id.to_string())) {
            Some(c) => {
                c.fire();
                true
            }
            None => false,
        }
    }

    /// The agent's JSON-RPC response `msg` (an object with `id`) to a request of a call of
    /// `session`: whether a call was waiting for it.
    pub fn answer(&self, session: &str, msg: Value) -> bool {
        let id = msg.get("id").map(Value::to_string).unwrap_or_default();
        let tx = lock(&self.waiting).remove(&(session.to_string(), id));
        tx.is_some_and(|tx| tx.send(msg).is_ok())
    }
}

/// The agent of one `tools/call` answered with an SSE stream.
#[derive(Debug)]
pub struct SseLink {
    pub session: String,
    pub tx: UnboundedSender<Bytes>,
    pub streams: Arc<Streams>,
    pub cancel: Option<Arc<Cancel>>,
}

impl AgentLink for SseLink {
    fn notify(&mut self, msg: &Value) {
        // The agent may have gone (stream closed): the call goes on, as over stdio.
        let _ = self.tx.send(event(&msg.to_string()));
    }

    fn request(&mut self, method: &str, params: Value, deadline: Instant) -> Result<Value, Value> {
        let n = self.streams.next.fetch_add(1, Ordering::Relaxed);
        let id = json!(format!("germline-{n}"));
        let (tx, rx) = std::sync::mpsc::channel();
        let key = (self.session.clone(), id.to_string());
        lock(&self.streams.waiting).insert(key.clone(), tx);
        let req = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let gone = || json!({"code": -32001, "message": "germline: the agent did not answer"});
        if self.tx.send(event(&req.to_string())).is_err() {
            lock(&self.streams.waiting).remove(&key);
            return Err(gone());
        }
        // Wait in short steps so that a cancellation ends the wait too.
        let answer = loop {
            if self.cancel.as_ref().is_some_and(|c| c.fired()) {
                break None;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break None;
            }
            match rx.recv_timeout(left.min(std::time::Duration::from_millis(50))) {
                Ok(v) => break Some(v),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break None,
            }
        };
        lock(&self.streams.waiting).remove(&key);
        match answer {
            Some(v) => match v.get("result") {
                Some(r) => Ok(r.clone()),
                None => Err(v.get("error").cloned().unwrap_or_else(gone)),
            },
            None => Err(gone()),
        }
    }

    fn cancel(&self) -> Option<Arc<Cancel>> {
        self.cancel.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_one_message_frame() {
        assert_eq!(
            &event(r#"{"a":1}"#)[..],
            b"event: message\ndata: {\"a\":1}\n\n"
        );
    }

    #[test]
    fn a_cancel_fires_only_the_named_call_of_its_session() {
        let s = Streams::default();
        let c = s.start("s1", &json!(7)).expect("cancel");
        assert!(!s.cancel("s2", &json!(7)));
        assert!(!s.cancel("s1", &json!("7")));
        assert!(!c.fired());
        assert!(s.cancel("s1", &json!(7)));
        assert!(c.fired());
        s.finish("s1", &json!(7));
        assert!(!s.cancel("s1", &json!(7)));
    }

    #[test]
    fn an_answer_reaches_the_request_of_its_session_only() {
        let streams = Arc::new(Streams::default());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut link = SseLink {
            session: "s1".into(),
            tx,
            streams: streams.clone(),
            cancel: None,
        };
        let s2 = streams.clone();
        let t = std::thread::spawn(move || {
            let deadline = Instant::now() + std::time::Duration::from_secs(10);
            link.request("sampling/createMessage", json!({}), deadline)
        });
        let frame = loop {
            if let Ok(f) = rx.try_recv() {
                break f;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let text = String::from_utf8_lossy(&frame).into_owned();
        assert!(
            text.contains("\"method\":\"sampling/createMessage\""),
            "{text}"
        );
        let id = json!("germline-0");
        assert!(!s2.answer("s2", json!({"id": id, "result": {"x": 1}})));
        assert!(s2.answer("s1", json!({"id": id, "result": {"x": 2}})));
        assert_eq!(t.join().expect("thread"), Ok(json!({"x": 2})));
    }
}
