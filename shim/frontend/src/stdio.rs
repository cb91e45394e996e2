//! `germline run`: MCP over stdio (newline-delimited JSON-RPC), as MCP clients start servers.
//! Ends cleanly when the agent closes stdin or on SIGINT, SIGTERM or SIGHUP: the copies, the
//! germline, its cgroups and the broker sidecar all go.
//!
//! During a call the agent's copy talks to the agent live ([`crate::relay`]): its log and
//! progress notifications are written as they arrive, and its sampling and elicitation
//! requests go to the agent, whose answer is read from stdin; anything else the agent sends
//! meanwhile is kept and handled, in order, after the call.

use std::collections::VecDeque;
use std::io::Write;
use std::time::Instant;

use serde_json::{json, Value};

use crate::relay::AgentLink;
use crate::session::{error, Session, PARSE_ERROR};

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

/// Whether `fd` (or the signal fd) has input right now.
fn readable_now(fd: i32, sigfd: i32) -> bool {
    poll2(fd, sigfd, 0).is_ok_and(|(a, b)| a || b)
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

/// Most bytes of one line from the agent.
const MAX_LINE: usize = 32 << 20;

/// What the agent wrote on stdin, as lines; lines that arrived during a call wait in `later`.
struct Input {
    sigfd: i32,
    buf: Vec<u8>,
    later: VecDeque<Vec<u8>>,
    /// Why the session must end (EOF, a signal, a read error), once seen.
    ended: Option<String>,
    /// Answers that must reach the agent (an over-long line's parse error).
    errors: Vec<Value>,
}

enum Read {
    Line(Vec<u8>),
    Timeout,
    Ended(String),
}

impl Input {
    /// The next line: one kept from a call first, then stdin; waits until `until` (`None`:
    /// forever).
    fn next(&mut self, until: Option<Instant>, kept_first: bool) -> Read {
        if kept_first {
            if let Some(l) = self.later.pop_front() {
                return Read::Line(l);
            }
        }
        let mut chunk = vec![0u8; 1 << 16];
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                return Read::Line(self.buf.drain(..=pos).collect());
            }
            if self.buf.len() > MAX_LINE {
                self.buf.clear();
                self.errors.push(error(
                    &Value::Null,
                    PARSE_ERROR,
                    "parse error: a line longer than 32 MiB",
                ));
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
                continue;
            }
            self.buf.extend_from_slice(&chunk[..r as usize]);
        }
    }
}

/// The agent over stdio during one call.
struct StdioLink<'a> {
    input: &'a mut Input,
    next_id: &'a mut u64,
    /// Writing to the agent failed: the session ends after the call.
    broken: bool,
}

impl StdioLink<'_> {
    fn write(&mut self, v: &Value) {
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{v}").and_then(|()| out.flush()).is_err() {
            self.broken = true;
        }
    }
}

impl AgentLink for StdioLink<'_> {
    fn notify(&mut self, msg: &Value) {
        self.write(msg);
    }

    fn request(&mut self, method: &str, params: Value, deadline: Instant) -> Result<Value, Value> {
        *self.next_id += 1;
        let id = json!(format!("germline-{}", self.next_id));
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        if self.broken {
            return Err(json!({"code": -32001, "message": "germline: the agent closed stdout"}));
        }
        loop {
            let line = match self.input.next(Some(deadline), false) {
                Read::Line(l) => l,
                Read::Timeout => {
                    // Tell the agent to stop working on it; the copy's deadline has passed.
                    self.write(
                        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": id, "reason": "the tool's deadline passed"}}),
                    );
                    return Err(json!({"code": -32001,
                        "message": "germline: the agent did not answer before the tool's deadline"}));
                }
                Read::Ended(why) => {
                    return Err(json!({"code": -32001, "message": format!("germline: {why}")}))
                }
            };
            let msg: Option<Value> = serde_json::from_slice(&line).ok();
            let answers_us = msg
                .as_ref()
                .is_some_and(|m| m.get("id") == Some(&id) && m.get("method").is_none());
            if !answers_us {
                // Another request or notification of the agent: handled after the call.
                self.input.later.push_back(line);
                continue;
            }
            let Some(mut m) = msg else { continue };
            if let Some(e) = m.get_mut("error").map(Value::take) {
                return Err(e);
            }
            return match m.get_mut("result").map(Value::take) {
                Some(r) => Ok(r),
                None => Err(json!({"code": -32603,
                    "message": "germline: the agent's answer has neither result nor error"})),
            };
        }
    }
}

/// Serves the session on stdin/stdout until EOF or a stop signal. Returns why it stopped.
pub fn serve(session: &mut Session, sigfd: i32) -> String {
    let mut input = Input {
        sigfd,
        buf: Vec::new(),
        later: VecDeque::new(),
        ended: None,
        errors: Vec::new(),
    };
    let mut next_id = 0u64;
    loop {
        let line = match input.next(None, true) {
            Read::Line(l) => Some(l),
            Read::Timeout => None,
            Read::Ended(why) => return why,
        };
        for e in input.errors.drain(..) {
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{e}").and_then(|()| out.flush()).is_err() {
                return "the agent closed stdout".into();
            }
        }
        let Some(line) = line else { continue };
        let mut link = StdioLink {
            input: &mut input,
            next_id: &mut next_id,
            broken: false,
        };
        let answer = match std::str::from_utf8(&line) {
            Ok(text) => session.handle_line(text, &mut link),
            Err(_) => Some(error(
                &Value::Null,
                PARSE_ERROR,
                "parse error: the line is not UTF-8",
            )),
        };
        if link.broken {
            return "the agent closed stdout".into();
        }
        let Some(a) = answer else { continue };
        let mut out = std::io::stdout().lock();
        for n in session.pending.drain(..) {
            if writeln!(out, "{n}").is_err() {
                return "the agent closed stdout".into();
            }
        }
        if writeln!(out, "{a}").and_then(|()| out.flush()).is_err() {
            return "the agent closed stdout".into();
        }
        drop(out);
        // Probe and control re-runs of this call's triggers, after its answer went out
        // (docs/evidence.md).
        crate::evidence::process(&mut session.runtime);
        // Refill the pool between calls, one copy at a time, stopping as soon as the agent's
        // next request is waiting: the refill never delays a call.
        while input.later.is_empty()
            && input.ended.is_none()
            && !input.buf.contains(&b'\n')
            && !readable_now(0, sigfd)
            && session.runtime.idle_step()
        {}
    }
}
