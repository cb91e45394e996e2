//! `germline run`: MCP over stdio (newline-delimited JSON-RPC), as MCP clients start servers.
//! Ends cleanly when the agent closes stdin or on SIGINT, SIGTERM or SIGHUP: the copies, the
//! germline, its cgroups and the broker sidecar all go.

use std::io::Write;

use crate::session::Session;

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
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 0) };
    n != 0
}

/// Most bytes of one line from the agent.
const MAX_LINE: usize = 32 << 20;

/// Serves the session on stdin/stdout until EOF or a stop signal. Returns why it stopped.
pub fn serve(session: &mut Session, sigfd: i32) -> String {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    let stdout = std::io::stdout();
    loop {
        let mut fds = [
            libc::pollfd {
                fd: 0,
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
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return format!("poll: {e}");
        }
        if fds[1].revents != 0 {
            return "stopped by a signal".into();
        }
        if fds[0].revents == 0 {
            continue;
        }
        // SAFETY: chunk is a valid writable buffer of its length.
        let r = unsafe { libc::read(0, chunk.as_mut_ptr().cast(), chunk.len()) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return format!("stdin: {e}");
        }
        if r == 0 {
            return "the agent closed stdin".into();
        }
        buf.extend_from_slice(&chunk[..r as usize]);
        while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let answer = match std::str::from_utf8(&line) {
                Ok(text) => session.handle_line(text),
                Err(_) => Some(crate::session::error(
                    &serde_json::Value::Null,
                    crate::session::PARSE_ERROR,
                    "parse error: the line is not UTF-8",
                )),
            };
            let mut out = stdout.lock();
            for n in session.pending.drain(..) {
                if writeln!(out, "{n}").is_err() {
                    return "the agent closed stdout".into();
                }
            }
            if let Some(a) = answer {
                if writeln!(out, "{a}").and_then(|()| out.flush()).is_err() {
                    return "the agent closed stdout".into();
                }
                drop(out);
                // Probe and control re-runs of this call's triggers, after its answer went out
                // (docs/evidence.md).
                crate::evidence::process(&mut session.runtime);
                // Refill the pool between calls, one copy at a time, stopping as soon as the
                // agent's next request is waiting: the refill never delays a call.
                while !readable_now(0, sigfd) && session.runtime.idle_step() {}
            }
        }
        if buf.len() > MAX_LINE {
            buf.clear();
            let mut out = stdout.lock();
            let e = crate::session::error(
                &serde_json::Value::Null,
                crate::session::PARSE_ERROR,
                "parse error: a line longer than 32 MiB",
            );
            if writeln!(out, "{e}").and_then(|()| out.flush()).is_err() {
                return "the agent closed stdout".into();
            }
        }
    }
}
