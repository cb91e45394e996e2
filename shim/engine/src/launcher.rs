//! A thread that lives as long as the germlines it starts. The sandbox asks the kernel to
//! kill a germline when its parent dies (`PR_SET_PDEATHSIG`), and for the kernel the parent
//! is the *thread* that forked it: a germline forked on one of tokio's blocking threads
//! would be killed when that thread ends after its idle keep-alive. `germline serve` starts
//! every germline (and every fresh `single-shot` one) here instead.

use std::sync::mpsc::{channel, Sender};
use std::sync::Mutex;

use crate::error::LauncherError;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Debug)]
pub struct Launcher {
    tx: Mutex<Option<Sender<Job>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Launcher {
    pub fn start() -> Result<Launcher, LauncherError> {
        let (tx, rx) = channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("germline-launch".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
            })
            .map_err(LauncherError::Thread)?;
        Ok(Launcher {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Runs `f` on the launcher thread and returns what it returned (jobs run one at a time).
    pub fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, LauncherError> {
        let (back, answer) = channel();
        let job: Job = Box::new(move || {
            let _ = back.send(f());
        });
        let sent = self
            .tx
            .lock()
            .map_err(|_| LauncherError::Gone)?
            .as_ref()
            .map(|tx| tx.send(job).is_ok());
        if sent != Some(true) {
            return Err(LauncherError::Stopped);
        }
        answer.recv().map_err(|_| LauncherError::Failed)
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        if let Some(t) = self.thread.lock().ok().and_then(|mut t| t.take()) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_on_one_thread_that_outlives_the_callers() {
        let l = std::sync::Arc::new(Launcher::start().expect("launcher"));
        let me = std::thread::current().id();
        let ids: Vec<_> = (0..3)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || l.run(|| std::thread::current().id()).expect("run"))
                    .join()
                    .expect("join")
            })
            .collect();
        assert!(ids.iter().all(|i| *i == ids[0] && *i != me));
    }
}
