//! Operating limits (issue 11, docs/operations.md): the policy's `[limits]` applied to one
//! runtime. A limit that is hit refuses the one call with an error naming the limit and the
//! policy value; nothing else changes, so the next call within the limit succeeds.
//!
//! * Live copies per node and per release are counted with node-wide slots: `N` lock files in
//!   `limits.node_dir`, one `flock` per live copy. The kernel drops the lock when the copy's
//!   slot is released or the process dies, so a crashed germline never leaks a slot.
//! * The call rate is a token bucket per runtime (one agent session under `germline run`;
//!   one release under `germline serve`).
//! * Item bytes per copy are counted over the items in the copy's view before it is forked.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use germline_policy::limits::OperatingLimits;

/// A refused call: which limit, and the policy's value of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("limit {name:?} reached (policy limits.{name} = {value}){detail}")]
pub struct LimitHit {
    pub name: &'static str,
    pub value: String,
    pub detail: String,
}

/// A token bucket: `capacity` tokens, refilled at `rate` per second.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    capacity: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    pub fn new(rate: f64, capacity: u32, now: Instant) -> Self {
        let capacity = f64::from(capacity.max(1));
        Self {
            rate,
            capacity,
            tokens: capacity,
            last: now,
        }
    }

    /// Takes one token if there is one.
    pub fn take(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.capacity);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Seconds until the next token.
    pub fn wait(&self) -> f64 {
        ((1.0 - self.tokens) / self.rate).max(0.0)
    }
}

/// One held node-wide slot; dropping it (closing the file) releases the lock.
#[derive(Debug)]
pub struct Slot {
    _file: File,
}

/// Takes one of `n` slots named `{kind}-{i}.lock` in `dir`, or `None` if all are held.
fn take_slot(dir: &Path, kind: &str, n: usize) -> std::io::Result<Option<Slot>> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    for i in 0..n {
        let path = dir.join(format!("{kind}-{i}.lock"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)?;
        // SAFETY: flock(2) on a descriptor we own; LOCK_NB makes it return at once.
        let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(Some(Slot { _file: file }));
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(e);
        }
    }
    Ok(None)
}

/// The slots one live copy holds while it runs.
#[derive(Debug, Default)]
pub struct CopyPermit {
    _slots: Vec<Slot>,
}

/// The `[limits]` of one runtime.
#[derive(Debug)]
pub struct Limiter {
    limits: OperatingLimits,
    bucket: Option<TokenBucket>,
    /// The slot-file name of this release (its digest, shortened).
    release_kind: String,
}

impl Limiter {
    pub fn new(limits: &OperatingLimits, release_digest: &str) -> Self {
        let short: String = release_digest
            .trim_start_matches("sha256:")
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(16)
            .collect();
        Self {
            bucket: limits
                .calls_per_second
                .map(|r| TokenBucket::new(r, limits.call_burst, Instant::now())),
            limits: limits.clone(),
            release_kind: format!("release-{short}"),
        }
    }

    /// No limits at all.
    pub fn off() -> Self {
        Self::new(&OperatingLimits::default(), "")
    }

    pub fn limits(&self) -> &OperatingLimits {
        &self.limits
    }

    /// Once per `tools/call`, before anything runs.
    pub fn admit_call(&mut self) -> Result<(), LimitHit> {
        let Some(b) = &mut self.bucket else {
            return Ok(());
        };
        if b.take(Instant::now()) {
            return Ok(());
        }
        Err(LimitHit {
            name: "calls_per_second",
            value: fmt_rate(self.limits.calls_per_second.unwrap_or(0.0)),
            detail: format!(
                ", burst {}; retry in {:.1} s",
                self.limits.call_burst,
                b.wait()
            ),
        })
    }

    /// Before a copy is forked: the items it is to receive, and a live-copy permit held until
    /// the copy is gone.
    pub fn admit_copy(&self, item_bytes: u64) -> Result<CopyPermit, LimitHit> {
        if let Some(max) = self.limits.item_bytes_per_copy {
            if item_bytes > max {
                return Err(LimitHit {
                    name: "item_bytes_per_copy",
                    value: max.to_string(),
                    detail: format!("; this copy's view holds {item_bytes} bytes"),
                });
            }
        }
        let mut slots = Vec::new();
        let dir = &self.limits.node_dir;
        for (name, kind, n) in [
            ("copies_per_node", "node", self.limits.copies_per_node),
            (
                "copies_per_release",
                self.release_kind.as_str(),
                self.limits.copies_per_release,
            ),
        ] {
            let Some(n) = n else { continue };
            match take_slot(dir, kind, n) {
                Ok(Some(s)) => slots.push(s),
                Ok(None) => {
                    return Err(LimitHit {
                        name,
                        value: n.to_string(),
                        detail: format!("; {n} live copies already run"),
                    })
                }
                Err(e) => {
                    // Fails closed: a slot that cannot be counted is not taken.
                    return Err(LimitHit {
                        name,
                        value: n.to_string(),
                        detail: format!("; slot directory {}: {e}", dir.display()),
                    });
                }
            }
        }
        Ok(CopyPermit { _slots: slots })
    }

    /// Directory of the node-wide slots.
    pub fn node_dir(&self) -> PathBuf {
        self.limits.node_dir.clone()
    }
}

fn fmt_rate(r: f64) -> String {
    if r.fract() == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r}")
    }
}

/// `--pool N` against `limits.pool_max`: an operator asking for more is refused at start.
pub fn check_pool(limits: &OperatingLimits, pool: usize) -> Result<(), PoolTooLarge> {
    match limits.pool_max {
        Some(max) if pool > max => Err(PoolTooLarge {
            pool,
            hit: LimitHit {
                name: "pool_max",
                value: max.to_string(),
                detail: String::new(),
            },
        }),
        _ => Ok(()),
    }
}

/// A `--pool` above the policy's `[limits] pool_max` ([`check_pool`]).
#[derive(Debug, thiserror::Error)]
#[error("--pool {pool}: {hit}")]
pub struct PoolTooLarge {
    pub pool: usize,
    #[source]
    pub hit: LimitHit,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bucket_allows_a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(2.0, 3, t0);
        assert!(b.take(t0) && b.take(t0) && b.take(t0));
        assert!(!b.take(t0));
        assert!(!b.take(t0 + Duration::from_millis(400)));
        assert!(b.take(t0 + Duration::from_millis(600)));
        // Idle time refills up to the capacity, never beyond.
        let later = t0 + Duration::from_secs(60);
        assert!(b.take(later) && b.take(later) && b.take(later));
        assert!(!b.take(later));
    }

    #[test]
    fn slots_are_node_wide_and_released_on_drop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = OperatingLimits {
            copies_per_node: Some(2),
            node_dir: dir.path().to_path_buf(),
            ..OperatingLimits::default()
        };
        // Two runtimes (as two germlines on one node) share the slots.
        let a = Limiter::new(&limits, "sha256:aa");
        let b = Limiter::new(&limits, "sha256:bb");
        let p1 = a.admit_copy(0).expect("first");
        let p2 = b.admit_copy(0).expect("second");
        let e = a.admit_copy(0).expect_err("third");
        assert_eq!(e.name, "copies_per_node");
        assert!(e.to_string().contains("limits.copies_per_node = 2"), "{e}");
        drop(p1);
        let _p3 = b.admit_copy(0).expect("after one ended");
        drop(p2);
    }

    #[test]
    fn release_slots_are_per_digest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let limits = OperatingLimits {
            copies_per_release: Some(1),
            node_dir: dir.path().to_path_buf(),
            ..OperatingLimits::default()
        };
        let a = Limiter::new(&limits, "sha256:aa");
        let b = Limiter::new(&limits, "sha256:bb");
        let _pa = a.admit_copy(0).expect("a");
        let _pb = b.admit_copy(0).expect("b, another release");
        assert_eq!(
            a.admit_copy(0).expect_err("a again").name,
            "copies_per_release"
        );
    }

    #[test]
    fn item_bytes_and_pool() {
        let limits = OperatingLimits {
            item_bytes_per_copy: Some(10),
            pool_max: Some(2),
            ..OperatingLimits::default()
        };
        let l = Limiter::new(&limits, "x");
        assert!(l.admit_copy(10).is_ok());
        let e = l.admit_copy(11).expect_err("over");
        assert_eq!(e.name, "item_bytes_per_copy");
        assert!(check_pool(&limits, 2).is_ok());
        let e = check_pool(&limits, 3).expect_err("pool");
        assert!(e.to_string().contains("limits.pool_max = 2"), "{e}");
        assert_eq!((e.pool, e.hit.name), (3, "pool_max"));
    }
}
