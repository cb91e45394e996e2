//! `germline run`: MCP over stdio (newline-delimited JSON-RPC), as MCP clients start servers.
//! Ends cleanly when the agent closes stdin or on SIGINT, SIGTERM or SIGHUP: the copies, the
//! germline, its cgroups and the broker sidecar all go.
//!
//! A reader thread reads the agent all the time, also while a call runs (issue 29): it answers
//! `ping` at once, turns `notifications/cancelled` into the running call's [`Cancel`] (or drops
//! a request still waiting), hands the agent's answers to germline's own requests to the call
//! that waits for them, and queues everything else for the main thread, which handles requests
//! one at a time, in order. A ping's answer may therefore overtake the answers of requests sent
//! before it (a running call's), which MCP allows: responses are matched by id. It never
//! overtakes the answer to anything else sent before it (an invalid line, a refused one, a
//! notification): those are answered in order, and a ping behind one waits its turn.
//!
//! During a call the agent's copy talks to the agent live ([`germline_engine::relay`]): its
//! log and progress notifications are written as they arrive, and its sampling and elicitation
//! requests go to the agent, whose answer the reader thread routes back.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::jsonrpc::{self, Kind};
use crate::session::{error, Session, INVALID_REQUEST, START_FAILED};
use germline_engine::relay::{AgentLink, Cancel};

/// Blocks the stop signals in this thread (call before any thread starts, so all inherit the
/// mask) and returns a signalfd that reads them.
pub fn stop_signals() -> std::io::Result<i32> {
    // SAFETY: sigset_t is plain data; the calls only read and write the set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(fd)
    }
}

/// Polls stdin-like `fd` and the signal fd for up to `ms` (-1: forever): which are readable.
fn poll2(fd: i32, sigfd: i32, ms: i32) -> std::io::Result<(bool, bool)> {
    let mut fds = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: sigfd,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // SAFETY: fds is a valid array of two pollfd for the duration of the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((fds[0].revents != 0, fds[1].revents != 0))
}

/// Most bytes of one line from the agent (its newline not counted). A longer line is refused
/// whole: answered with an error (with its id if a shallow scan of what was read reads one)
/// and skipped up to and including its newline, so nothing of it runs.
pub const MAX_LINE: usize = 32 << 20;

/// How much one read(2) of stdin asks for.
const CHUNK: usize = 1 << 16;

/// What the agent wrote on stdin, as lines (read by the reader thread only).
///
/// Linear in what the agent sends: each byte is searched for a newline once (`scanned`
/// remembers where the search stopped), and consumed lines are dropped from the buffer's
/// front only before the next read, when what is left is at most one read's worth.
struct Input {
    sigfd: i32,
    buf: Vec<u8>,
    /// `buf[..start]` was consumed.
    start: usize,
    /// `buf[start..scanned]` holds no newline.
    scanned: usize,
    /// Skipping the rest of a refused over-long line, up to and including its newline.
    skipping: bool,
    /// Why the session must end (EOF, a signal, a read error), once seen.
    ended: Option<String>,
    /// The agent closed stdin (not a signal or an error): the session may finish its work.
    closed: bool,
}

enum Read {
    Line(Vec<u8>),
    /// An over-long line was refused: the answer to write to the agent.
    Refused(String),
    Timeout,
    Ended(String),
}

/// The answer to an over-long line, of which `head` was read.
fn refuse_long(head: &[u8]) -> String {
    let id = crate::jsonrpc::peek_id(head);
    let e = error(
        id.as_ref()
            .map_or(&Value::Null, crate::jsonrpc::RawId::value),
        INVALID_REQUEST,
        format!(
            "germline: a line longer than {} MiB ({MAX_LINE} bytes) was refused whole and \
             nothing of it was run; send large inputs as files (a path argument)",
            MAX_LINE >> 20
        ),
    );
    crate::jsonrpc::render(&e, id.as_slice())
}

impl Input {
    fn new(sigfd: i32) -> Input {
        Input {
            sigfd,
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            skipping: false,
            ended: None,
            closed: false,
        }
    }

    /// The next complete line (or refusal) already read, without reading more.
    fn buffered(&mut self) -> Option<Read> {
        if self.skipping {
            match memchr::memchr(b'\n', &self.buf[self.start..]) {
                Some(p) => {
                    self.start += p + 1;
                    self.scanned = self.start;
                    self.skipping = false;
                }
                None => {
                    self.start = self.buf.len();
                    self.scanned = self.start;
                    return None;
                }
            }
        }
        match memchr::memchr(b'\n', &self.buf[self.scanned..]) {
            Some(p) => {
                let end = self.scanned + p;
                let line = &self.buf[self.start..end];
                let read = if line.len() > MAX_LINE {
                    Read::Refused(refuse_long(line))
                } else {
                    Read::Line(self.buf[self.start..=end].to_vec())
                };
                self.start = end + 1;
                self.scanned = self.start;
                Some(read)
            }
            None => {
                self.scanned = self.buf.len();
                if self.buf.len() - self.start <= MAX_LINE {
                    return None;
                }
                let answer = refuse_long(&self.buf[self.start..]);
                self.skipping = true;
                self.buf = Vec::new();
                self.start = 0;
                self.scanned = 0;
                Some(Read::Refused(answer))
            }
        }
    }

    /// Appends one read's bytes, first dropping what was consumed.
    fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
            if self.buf.capacity() > 4 * CHUNK && self.buf.len() < CHUNK {
                self.buf.shrink_to(2 * CHUNK);
            }
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next line from stdin; waits until `until` (`None`: forever).
    fn next(&mut self, until: Option<Instant>) -> Read {
        let mut chunk = vec![0u8; CHUNK];
        loop {
            if let Some(r) = self.buffered() {
                return r;
            }
            if let Some(why) = &self.ended {
                return Read::Ended(why.clone());
            }
            let ms = match until {
                None => -1,
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Read::Timeout;
                    }
                    i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX)
                }
            };
            let (input, signal) = match poll2(0, self.sigfd, ms) {
                Ok(r) => r,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.ended = Some(format!("poll: {e}"));
                    continue;
                }
            };
            if signal {
                self.ended = Some("stopped by a signal".into());
                continue;
            }
            if !input {
                continue;
            }
            // SAFETY: chunk is a valid writable buffer of its length.
            let r = unsafe { libc::read(0, chunk.as_mut_ptr().cast(), chunk.len()) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    self.ended = Some(format!("stdin: {e}"));
                }
                continue;
            }
            if r == 0 {
                self.ended = Some("the agent closed stdin".into());
                self.closed = true;
                continue;
            }
            self.push(&chunk[..r as usize]);
        }
    }
}

/// What the reader thread and the main thread share.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when `state` changes (a line queued, an answer, a cancellation, the end).
    cv: Condvar,
    /// Rung with every line queued and at the end, cleared when the queue is emptied: the
    /// runtime's idle waits return when it rings (`Runtime::set_doorbell`).
    bell: Arc<germline_sys::doorbell::Doorbell>,
}

/// One thing for the main thread to handle.
enum Item {
    /// A line from the agent.
    Line(Vec<u8>),
    /// The answer to a refused over-long line, written in its turn.
    Answer(String),
}

#[derive(Default)]
struct State {
    /// What the main thread handles, in arrival order, each request with its id (`None`:
    /// an item a ping may not overtake).
    queue: VecDeque<(Option<Value>, Item)>,
    /// Items without an id queued or being handled: a ping waits behind them.
    plain_ahead: usize,
    /// The agent's answers to germline's own requests (`germline-N`), with their ids.
    answers: Vec<(Value, Value)>,
    /// The request the main thread handles now, and its cancellation.
    running: Option<(Value, Arc<Cancel>)>,
    /// Why reading ended (EOF, a signal, a read error), once it did.
    ended: Option<String>,
    /// The agent closed stdin (not a signal or an error): the session may finish its work.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic of the other thread leaves the state usable (plain data).
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether something waits for the main thread (a line, or the end).
    fn has_work(&self) -> bool {
        let st = self.lock();
        !st.queue.is_empty() || st.ended.is_some()
    }

    fn queue(&self, id: Option<Value>, item: Item) {
        let mut st = self.lock();
        if id.is_none() {
            st.plain_ahead += 1;
        }
        st.queue.push_back((id, item));
        // Under the lock the main thread clears it under (when it empties the queue), so a
        // ring never outlives the line it announces.
        self.bell.ring();
        drop(st);
        self.cv.notify_all();
    }

    /// An item without an id was answered (or needed no answer).
    fn release_plain(&self) {
        let mut st = self.lock();
        st.plain_ahead = st.plain_ahead.saturating_sub(1);
    }

    /// The agent cancelled request `id`: the running call's cancellation fires, or the
    /// request, if it still waits, is dropped unanswered; an unknown or finished id is
    /// ignored (MCP: the cancellation may arrive after the answer).
    fn cancel(&self, id: &Value) {
        let mut st = self.lock();
        match &st.running {
            Some((rid, c)) if rid == id => c.fire(),
            // Only a request has an id here, so `plain_ahead` stays right.
            _ => st.queue.retain(|(rid, _)| rid.as_ref() != Some(id)),
        }
        drop(st);
        self.cv.notify_all();
    }
}

/// Writes one line to the agent; `false` if stdout is closed. Lines of the two threads never
/// interleave: each is written whole under stdout's lock.
fn write_line(text: &str) -> bool {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").and_then(|()| out.flush()).is_ok()
}

/// Whether `id` names one of germline's own requests to the agent.
fn ours(id: &Value) -> bool {
    id.as_str().is_some_and(|s| s.starts_with("germline-"))
}

/// The reader thread: reads the agent until the end, routing each line (see the module's
/// documentation).
fn read_agent(mut input: Input, shared: &Shared) {
    loop {
        match input.next(None) {
            Read::Line(line) => route(shared, line),
            Read::Refused(answer) => shared.queue(None, Item::Answer(answer)),
            Read::Timeout => {}
            Read::Ended(why) => {
                let mut st = shared.lock();
                st.ended = Some(why);
                st.closed = input.closed;
                drop(st);
                shared.cv.notify_all();
                shared.bell.ring();
                return;
            }
        }
    }
}

fn route(shared: &Shared, line: Vec<u8>) {
    let msg: Option<Value> = std::str::from_utf8(&line)
        .ok()
        .and_then(|t| serde_json::from_str(t).ok());
    let Some(Value::Object(obj)) = &msg else {
        // Not an object (a parse error, a batch, ...): the main thread answers it.
        return shared.queue(None, Item::Line(line));
    };
    match jsonrpc::classify(obj) {
        Ok(Kind::Request { id, method: "ping" }) => {
            // Answered here, at once, whatever request runs; behind anything else sent before
            // it, it waits its turn (the main thread answers it then).
            if shared.lock().plain_ahead > 0 {
                return shared.queue(None, Item::Line(line));
            }
            let raw = msg
                .as_ref()
                .map(|m| jsonrpc::raw_ids_if_needed(m, &line))
                .unwrap_or_default();
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": {}});
            // A closed stdout is found by the main thread's next write.
            let _ = write_line(&jsonrpc::render(&answer, &raw));
        }
        Ok(Kind::Request { id, .. }) => shared.queue(Some(id.clone()), Item::Line(line)),
        Ok(Kind::Notification {
            method: "notifications/cancelled",
        }) => {
            if let Some(id) = obj.get("params").and_then(|p| p.get("requestId")) {
                shared.cancel(id);
            }
        }
        Ok(Kind::Response) if obj.get("id").is_some_and(ours) => {
            let id = obj.get("id").cloned().unwrap_or(Value::Null);
            shared.lock().answers.push((id, Value::Object(obj.clone())));
            shared.cv.notify_all();
        }
        _ => shared.queue(None, Item::Line(line)),
    }
}

/// The agent over stdio during one request.
struct StdioLink<'a> {
    shared: &'a Shared,
    next_id: &'a mut u64,
    /// The request's cancellation (none for a notification or a batch).
    cancel: Option<Arc<Cancel>>,
    /// Writing to the agent failed: the session ends after the call.
    broken: bool,
}

impl StdioLink<'_> {
    fn write(&mut self, v: &Value) {
        if !write_line(&v.to_string()) {
            self.broken = true;
        }
    }
}

impl AgentLink for StdioLink<'_> {
    fn notify(&mut self, msg: &Value) {
        self.write(msg);
    }

    fn cancel(&self) -> Option<Arc<Cancel>> {
        self.cancel.clone()
    }

    fn request(&mut self, method: &str, params: Value, deadline: Instant) -> Result<Value, Value> {
        *self.next_id += 1;
        let id = json!(format!("germline-{}", self.next_id));
        // Late answers to earlier requests (past their deadline) are of no use any more.
        self.shared.lock().answers.clear();
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        if self.broken {
            return Err(json!({"code": -32001, "message": "germline: the agent closed stdout"}));
        }
        let mut st = self.shared.lock();
        loop {
            if let Some(at) = st.answers.iter().position(|(i, _)| i == &id) {
                let (_, mut m) = st.answers.swap_remove(at);
                drop(st);
                if let Some(e) = m.get_mut("error").map(Value::take) {
                    return Err(e);
                }
                return match m.get_mut("result").map(Value::take) {
                    Some(r) => Ok(r),
                    None => Err(json!({"code": -32603,
                        "message": "germline: the agent's answer has neither result nor error"})),
                };
            }
            if self.cancel.as_ref().is_some_and(|c| c.fired()) {
                return Err(json!({"code": -32001,
                    "message": "germline: the agent cancelled the call"}));
            }
            if let Some(why) = &st.ended {
                return Err(json!({"code": -32001, "message": format!("germline: {why}")}));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                drop(st);
                // Tell the agent to stop working on it; the copy's deadline has passed.
                self.write(
                    &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": id, "reason": "the tool's deadline passed"}}),
                );
                return Err(json!({"code": -32001,
                    "message": "germline: the agent did not answer before the tool's deadline"}));
            }
            st = self
                .shared
                .cv
                .wait_timeout(st, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

/// Serves the session on stdin/stdout until EOF or a stop signal. Returns why it stopped.
pub fn serve(session: &mut Session, sigfd: i32) -> String {
    let shared = Arc::new(Shared::default());
    let input = Input::new(sigfd);
    let reader = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("germline-stdin".into())
            .spawn(move || read_agent(input, &shared))
    };
    if let Err(e) = reader {
        return format!("cannot start the thread that reads stdin: {e}");
    }
    let mut next_id = 0u64;
    // Metrics, traces and the state file are told of a call after its answer is written.
    session.runtime.observe_after_answer(true);
    session.runtime.set_doorbell(shared.bell.clone());
    loop {
        // The next line, marked as running (with a fresh cancellation if it is a request)
        // under the same lock the reader cancels under, so no cancellation is lost between.
        let (item, plain, cancel) = {
            let mut st = shared.lock();
            loop {
                if let Some((id, item)) = st.queue.pop_front() {
                    if st.queue.is_empty() && st.ended.is_none() {
                        // Under the lock `queue` rings under.
                        shared.bell.clear();
                    }
                    let plain = id.is_none();
                    let running = id.and_then(|id| Some((id, Arc::new(Cancel::new().ok()?))));
                    let cancel = running.as_ref().map(|(_, c)| c.clone());
                    st.running = running;
                    break (item, plain, cancel);
                }
                if let Some(why) = st.ended.clone() {
                    let closed = st.closed;
                    drop(st);
                    // The agent is done: settle the evidence jobs still queued (an earlier
                    // runtime's, resumed at start) before the session ends. On a signal they
                    // stay pending on disk for the next runtime instead (crate
                    // germline-engine, evidence::pending).
                    if closed {
                        session.runtime.process_evidence();
                    }
                    return why;
                }
                st = shared
                    .cv
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        let line = match item {
            Item::Line(l) => l,
            Item::Answer(a) => {
                let written = write_line(&a);
                shared.release_plain();
                if !written {
                    return "the agent closed stdout".into();
                }
                continue;
            }
        };
        let mut link = StdioLink {
            shared: &shared,
            next_id: &mut next_id,
            cancel: cancel.clone(),
            broken: false,
        };
        let answer = session.handle_line(&line, &mut link);
        let broken = link.broken;
        shared.lock().running = None;
        if broken {
            return "the agent closed stdout".into();
        }
        // MCP: a cancelled request gets no answer, even one that was ready.
        let cancelled = cancel.as_ref().is_some_and(|c| c.fired());
        let answer = answer.filter(|_| !cancelled);
        if answer.is_none() && plain {
            shared.release_plain();
        }
        if let Some(a) = answer {
            let mut out = std::io::stdout().lock();
            let mut written = true;
            for n in session.pending.drain(..) {
                written = written && writeln!(out, "{n}").is_ok();
            }
            written = written && writeln!(out, "{a}").and_then(|()| out.flush()).is_ok();
            drop(out);
            // Only now may a ping sent after this line be answered.
            if plain {
                shared.release_plain();
            }
            // The answer is out: now the observers (Runtime::observe_after_answer).
            session.runtime.after_answer();
            if !written {
                return "the agent closed stdout".into();
            }
            // Probe and control re-runs of this call's triggers, after its answer went out
            // (docs/evidence.md).
            session.runtime.process_evidence();
        } else if !cancelled {
            continue;
        }
        // Refill the pool between calls, one copy at a time, stopping as soon as the agent's
        // next request is waiting: the refill never delays a call.
        while !shared.has_work() && session.runtime.idle_step() {}
    }
}

/// How long `germline run` that could not start waits for the client's `initialize` to answer
/// it with the reason ([`refuse_start`]). Clients send `initialize` as soon as they have
/// started the server, so it is usually read at once; the bound is for a stdin that stays open
/// and silent (an engine's `podman run -i` whose agent never speaks), which then ends the
/// process after this long instead of never.
pub const START_FAILURE_WAIT: Duration = Duration::from_secs(5);

/// What [`refuse_start`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The client's `initialize` was answered with the reason.
    Answered,
    /// stdin is a terminal (a person, who reads the reason on stderr): nothing was waited for.
    Terminal,
    /// stdin ended, a stop signal came, or nothing came within [`START_FAILURE_WAIT`].
    NoInitialize,
}

/// `germline run` could not start (`reason`: the error a user can act on). So that the MCP
/// client shows why rather than only "Connection closed", every request it sends is answered
/// with a JSON-RPC error of code [`START_FAILED`] whose message carries the reason, until its
/// `initialize` has been answered; then this returns (and `germline run` exits non-zero as
/// before). It returns at once when stdin is a terminal, and otherwise when stdin ends, a stop
/// signal arrives or [`START_FAILURE_WAIT`] has passed.
pub fn refuse_start(reason: &str, sigfd: i32) -> Refusal {
    // SAFETY: isatty(3) only inspects the descriptor.
    if unsafe { libc::isatty(0) } == 1 {
        return Refusal::Terminal;
    }
    let message = format!("germline run could not start: {reason}");
    let mut input = Input::new(sigfd);
    let until = Instant::now() + START_FAILURE_WAIT;
    loop {
        let line = match input.next(Some(until)) {
            Read::Line(l) => l,
            Read::Refused(answer) => {
                if !write_line(&answer) {
                    return Refusal::NoInitialize;
                }
                continue;
            }
            Read::Timeout | Read::Ended(_) => return Refusal::NoInitialize,
        };
        let (answer, initialize) = start_failure_answer(&line, &message);
        if let Some(a) = answer {
            if !write_line(&a) {
                return Refusal::NoInitialize;
            }
        }
        if initialize {
            return Refusal::Answered;
        }
    }
}

/// The answer to one line from the agent while the release could not start (each request of
/// it, a batch's too, gets the error `message`; notifications and responses none), and whether
/// it held the `initialize` request.
fn start_failure_answer(line: &[u8], message: &str) -> (Option<String>, bool) {
    if line.trim_ascii().is_empty() {
        return (None, false);
    }
    let parsed = std::str::from_utf8(line)
        .map_err(|e| format!("the line is not UTF-8 ({e})"))
        .and_then(|t| {
            serde_json::from_str::<Value>(t).map_err(|e| crate::session::parse_error_text(&e))
        });
    let msg = match parsed {
        Ok(v) => v,
        Err(why) => return (Some(crate::session::parse_error(line, &why)), false),
    };
    let mut initialize = false;
    let mut answer_one = |m: &Value| -> Option<Value> {
        let obj = m.as_object()?;
        match crate::jsonrpc::classify(obj) {
            Ok(crate::jsonrpc::Kind::Request { id, method }) => {
                initialize |= method == "initialize";
                Some(error(id, START_FAILED, message))
            }
            Ok(_) => None,
            Err(e) => Some(e),
        }
    };
    let answer = match &msg {
        Value::Array(batch) => {
            let all: Vec<Value> = batch.iter().filter_map(&mut answer_one).collect();
            (!all.is_empty()).then_some(Value::Array(all))
        }
        m => answer_one(m),
    };
    let raw = crate::jsonrpc::raw_ids_if_needed(&msg, line);
    (answer.map(|a| crate::jsonrpc::render(&a, &raw)), initialize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `data` in reads of `chunk` bytes; returns what came out, in order.
    fn feed(data: &[u8], chunk: usize) -> Vec<Result<Vec<u8>, Value>> {
        let mut input = Input::new(-1);
        let mut out = Vec::new();
        for piece in data.chunks(chunk) {
            input.push(piece);
            while let Some(r) = input.buffered() {
                out.push(match r {
                    Read::Line(l) => Ok(l),
                    Read::Refused(a) => Err(serde_json::from_str(&a).expect("JSON answer")),
                    Read::Timeout | Read::Ended(_) => unreachable!("no I/O here"),
                });
            }
            assert!(input.buf.len() - input.start <= MAX_LINE + chunk);
        }
        out
    }

    #[test]
    fn a_start_failure_answers_each_request_and_tells_initialize_apart() {
        let why = "germline run could not start: release refused";
        let init = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#;
        let (a, done) = start_failure_answer(init, why);
        let a: Value = serde_json::from_str(&a.expect("answered")).expect("JSON");
        assert!(done);
        assert_eq!(a["id"], 0);
        assert_eq!(a["error"]["code"], START_FAILED);
        assert_eq!(a["error"]["message"], why);
        // A ping before it is answered with the same error, and the wait goes on.
        let (a, done) = start_failure_answer(br#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#, why);
        assert!(!done);
        assert!(a.is_some_and(|a| a.contains(r#""id":"p""#) && a.contains("-32004")));
        // Notifications and blank lines get nothing.
        let note = br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        assert_eq!(start_failure_answer(note, why), (None, false));
        assert_eq!(start_failure_answer(b"\n", why), (None, false));
        // A batch holding initialize; an id of any spelling comes back as written.
        let batch =
            br#"[{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"initialize"}]"#;
        let (a, done) = start_failure_answer(batch, why);
        assert!(done);
        assert!(a.is_some_and(|a| a.contains(r#""id":123456789012345678901234567890"#)));
        // Not JSON: a parse error, and the wait goes on.
        let (a, done) = start_failure_answer(b"{\"id\": 4, \"method\":", why);
        assert!(!done);
        assert!(a.is_some_and(|a| a.contains("-32700")));
    }

    #[test]
    fn lines_come_out_whole_whatever_the_reads() {
        let data = b"{\"a\":1}\n\n{\"b\":2}\nrest";
        for chunk in [1, 2, 3, 7, 100] {
            let out = feed(data, chunk);
            let lines: Vec<&[u8]> = out
                .iter()
                .map(|r| r.as_ref().expect("no refusal").as_slice())
                .collect();
            assert_eq!(
                lines,
                [&b"{\"a\":1}\n"[..], b"\n", b"{\"b\":2}\n"],
                "{chunk}"
            );
        }
    }

    #[test]
    fn an_over_long_line_is_refused_whole_and_the_next_line_is_intact() {
        let call = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}"#;
        // 1: the id first, then too much; 2: padding first, then a valid request (its tail
        // alone would parse); 3: exactly the limit (accepted).
        let mut one = br#"{"jsonrpc":"2.0","id":"big-1","params":{"t":""#.to_vec();
        one.resize(MAX_LINE + 10, b'a');
        one.extend_from_slice(b"\"}}\n");
        let mut two = vec![b' '; MAX_LINE + (1 << 20)];
        two.extend_from_slice(call);
        two.push(b'\n');
        let mut three = vec![b' '; MAX_LINE - call.len()];
        three.extend_from_slice(call);
        three.push(b'\n');
        let mut data = one;
        data.extend_from_slice(&two);
        data.extend_from_slice(&three);
        data.extend_from_slice(b"{\"id\":3}\n");
        for chunk in [CHUNK, 1 << 20, 3 << 20, MAX_LINE * 2] {
            let out = feed(&data, chunk);
            assert_eq!(out.len(), 4, "{chunk}");
            let e = out[0].as_ref().expect_err("refused");
            assert_eq!(e["id"], "big-1", "{chunk}");
            assert_eq!(e["error"]["code"], INVALID_REQUEST);
            assert!(e["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("longer than 32 MiB") && m.contains("nothing of it")));
            let e = out[1].as_ref().expect_err("refused");
            // Its id is read only if the part read when it was refused holds it.
            let id = if chunk <= 1 << 20 {
                Value::Null
            } else {
                json!(2)
            };
            assert_eq!(e["id"], id, "{chunk}");
            let l = out[2].as_ref().expect("at the limit");
            assert_eq!(l.len(), MAX_LINE + 1);
            assert_eq!(out[3].as_ref().expect("intact"), b"{\"id\":3}\n");
        }
    }

    #[test]
    fn each_byte_is_searched_once() {
        // 50 MB without a newline in 64 KiB reads, then one: the scan position only moves
        // forward, so the bytes searched are the bytes sent.
        let mut input = Input::new(-1);
        let piece = vec![b'x'; CHUNK];
        let mut searched = 0;
        for _ in 0..(50 << 20) / CHUNK {
            input.push(&piece);
            let before = if input.skipping {
                input.start
            } else {
                input.scanned
            };
            let _ = input.buffered();
            let after = if input.skipping {
                input.buf.len()
            } else {
                input.scanned
            };
            searched += after.saturating_sub(before);
            assert!(input.buf.len() <= MAX_LINE + CHUNK);
        }
        assert!(searched <= 50 << 20, "{searched}");
        input.push(b"\n{}\n");
        assert!(matches!(input.buffered(), Some(Read::Line(l)) if l == b"{}\n"));
    }
}
