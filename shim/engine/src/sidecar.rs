//! The broker sidecar: `germline run` and `germline serve` start `germline broker serve` as a
//! process of its own (in the host's network namespace) unless one is already running at the
//! given socket, and stop it on exit.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use germline_broker::control::BrokerClient;

use crate::error::SidecarError;

/// A connection to the broker, and the sidecar process if this session started it.
#[derive(Debug)]
pub struct Sidecar {
    pub client: BrokerClient,
    pub socket: PathBuf,
    child: Option<Child>,
    run_dir: Option<PathBuf>,
    cfg: SidecarConfig,
}

/// How to reach or start the broker.
#[derive(Debug, Clone)]
pub struct SidecarConfig {
    /// Use the broker already serving here (never started or stopped by this session).
    pub existing: Option<PathBuf>,
    pub policy: PathBuf,
    /// Where a started broker keeps its CA and slots.
    pub state_dir: PathBuf,
    pub audit: Option<PathBuf>,
    /// A started broker reads the policy and its credential files with this user's
    /// permissions (`germline daemon`'s sessions, docs/daemon.md).
    pub read_as: Option<germline_sys::user::FsCreds>,
}

impl Sidecar {
    /// Where the broker keeps its CA and slots (and the runtime its state in files).
    pub fn state_dir(&self) -> &Path {
        &self.cfg.state_dir
    }

    pub fn start(cfg: &SidecarConfig) -> Result<Sidecar, SidecarError> {
        if let Some(sock) = &cfg.existing {
            let client = connect(sock)?;
            return Ok(Sidecar {
                client,
                socket: sock.clone(),
                child: None,
                run_dir: None,
                cfg: cfg.clone(),
            });
        }
        let run_dir = germline_sys::paths::session_dir(std::process::id());
        let (client, child) = Self::spawn(cfg, &run_dir)?;
        Ok(Sidecar {
            client,
            socket: run_dir.join("broker.sock"),
            child: Some(child),
            run_dir: Some(run_dir),
            cfg: cfg.clone(),
        })
    }

    fn spawn(cfg: &SidecarConfig, run_dir: &Path) -> Result<(BrokerClient, Child), SidecarError> {
        // Removed again on every way out but success: a failed start leaves nothing behind.
        let made = DirGuard::new(run_dir.to_path_buf());
        let dir_err = |source| SidecarError::RunDir {
            dir: run_dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(run_dir).map_err(dir_err)?;
        std::fs::set_permissions(run_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(dir_err)?;
        let socket = run_dir.join("broker.sock");
        let exe = std::env::current_exe().map_err(SidecarError::OwnExe)?;
        let mut cmd = Command::new(exe);
        cmd.arg("broker")
            .arg("serve")
            .arg("--policy")
            .arg(&cfg.policy)
            .arg("--socket")
            .arg(&socket)
            .arg("--state")
            .arg(&cfg.state_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(a) = &cfg.audit {
            cmd.arg("--audit").arg(a);
        }
        if let Some(c) = &cfg.read_as {
            cmd.arg("--read-as").arg(c.to_string());
        }
        // `run` and `serve` block their stop signals (signalfd) and the mask survives exec: give
        // the broker its signals back, and end it if this process dies without stopping it.
        // SAFETY: runs in the forked child before exec; sigprocmask and prctl are
        // async-signal-safe and use only the child's own stack.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                if libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) != 0
                    || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(SidecarError::Spawn)?;
        let t = Instant::now();
        loop {
            if let Ok(client) = BrokerClient::connect(&socket) {
                // The broker's own messages go to our stderr (never to the agent's stdout).
                if let Some(mut err) = child.stderr.take() {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut err, &mut std::io::stderr());
                    });
                }
                made.keep();
                return Ok((client, child));
            }
            if let Ok(Some(status)) = child.try_wait() {
                let mut text = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut text);
                }
                return Err(SidecarError::Exited {
                    status,
                    stderr: text.trim().to_string(),
                });
            }
            if t.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SidecarError::NotUp);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// After the broker's connection broke: restarts a sidecar of ours that died, then
    /// reconnects (also to a shared broker restarted at the same socket).
    pub fn reconnect(&mut self) -> Result<(), SidecarError> {
        if let (Some(child), Some(dir)) = (self.child.as_mut(), self.run_dir.clone()) {
            if !matches!(child.try_wait(), Ok(None)) {
                let _ = child.wait();
                let _ = std::fs::remove_file(&self.socket);
                eprintln!("germline: the broker sidecar had stopped; starting it again");
                let (client, child) = Self::spawn(&self.cfg, &dir)?;
                self.client = client;
                self.child = Some(child);
                return Ok(());
            }
        }
        self.client = connect(&self.socket)?;
        Ok(())
    }

    /// The sidecar's pid, if this session started it.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Asks the broker to forget the endpoints it prepared in `netns`, pool copies dropped
    /// unused (`germline_sandbox::offered`). A failure leaves each listener to the broker's
    /// eviction, as before the op existed.
    pub fn forget(&self, netns: Vec<std::fs::File>) {
        for ns in netns {
            let _ = self.client.forget_copy(std::os::fd::AsFd::as_fd(&ns));
        }
    }

    /// Stops a broker this session started.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(d) = self.run_dir.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// A connection to the broker at `socket`.
fn connect(socket: &Path) -> Result<BrokerClient, SidecarError> {
    BrokerClient::connect(socket).map_err(|source| SidecarError::Unreachable {
        socket: socket.to_path_buf(),
        source,
    })
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A directory a start made, removed with everything in it when the guard is dropped unless
/// [`DirGuard::keep`] was called: every early return of a failed start (`?` included) then
/// leaves nothing behind, where a sweep would find it only at the next start.
#[derive(Debug)]
pub(crate) struct DirGuard(Option<PathBuf>);

impl DirGuard {
    pub(crate) fn new(dir: PathBuf) -> DirGuard {
        DirGuard(Some(dir))
    }

    /// The start succeeded: the directory stays (its owner removes it when it stops).
    pub(crate) fn keep(mut self) -> PathBuf {
        self.0.take().unwrap_or_default()
    }
}

impl Drop for DirGuard {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
