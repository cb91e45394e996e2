//! A doorbell between the transport and the runtime's idle work (branch node40;
//! docs/performance.md, "Stop 40", item 5): the transport rings it when the agent's next
//! request is queued, and the idle steps' waits (a launch in flight, a copy still exiting)
//! return at once instead of at the end of their timer. Whatever else an idle wait is for can
//! `poke` it: that wakes the sleepers without saying the agent is waiting.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct Bell {
    /// The agent's request is waiting (until the transport takes it).
    rung: bool,
    /// Every ring and poke, so a sleeper misses none that came after it looked.
    generation: u64,
}

#[derive(Debug, Default)]
pub struct Doorbell {
    bell: Mutex<Bell>,
    cv: Condvar,
}

impl Doorbell {
    fn lock(&self) -> MutexGuard<'_, Bell> {
        self.bell.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The agent's request is waiting: every sleeper wakes, and sleeps return at once until
    /// [`Doorbell::clear`].
    pub fn ring(&self) {
        let mut b = self.lock();
        b.rung = true;
        b.generation += 1;
        self.cv.notify_all();
    }

    /// The transport took every request waiting.
    pub fn clear(&self) {
        self.lock().rung = false;
    }

    /// Wakes the sleepers (something they wait for happened) without ringing.
    pub fn poke(&self) {
        let mut b = self.lock();
        b.generation += 1;
        self.cv.notify_all();
    }

    pub fn rung(&self) -> bool {
        self.lock().rung
    }

    /// What [`Doorbell::sleep_since`] compares against: read it before looking at what a
    /// poke announces, so that a poke in between is not missed.
    pub fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Sleeps for `d`, or until rung or poked after `generation`; whether it is rung.
    pub fn sleep_since(&self, generation: u64, d: Duration) -> bool {
        let until = Instant::now() + d;
        let mut b = self.lock();
        while !b.rung && b.generation == generation {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            b = self
                .cv
                .wait_timeout(b, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        b.rung
    }

    /// Sleeps for `d` or until rung; whether it is rung.
    pub fn sleep(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        loop {
            // A poke is not for this sleeper: sleep on until the time is up or a ring.
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || self.sleep_since(self.generation(), left) {
                return self.rung();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_ring_ends_a_sleep_and_holds_until_cleared() {
        let b = Arc::new(Doorbell::default());
        assert!(!b.sleep(Duration::from_millis(1)), "nothing rang");
        let r = b.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            r.ring();
        });
        let t0 = Instant::now();
        assert!(b.sleep(Duration::from_secs(10)), "rung");
        assert!(t0.elapsed() < Duration::from_secs(5), "woken by the ring");
        let _ = t.join();
        assert!(
            b.sleep(Duration::from_secs(10)),
            "still rung: returns at once"
        );
        b.clear();
        assert!(!b.sleep(Duration::from_millis(1)));
    }

    #[test]
    fn a_poke_wakes_a_sleeper_since_its_generation_without_ringing() {
        let b = Arc::new(Doorbell::default());
        let g = b.generation();
        b.poke();
        let t0 = Instant::now();
        assert!(
            !b.sleep_since(g, Duration::from_secs(10)),
            "poked, not rung"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the poke before the sleep counts"
        );
        let p = b.clone();
        let g = b.generation();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            p.poke();
        });
        assert!(!b.sleep_since(g, Duration::from_secs(10)));
        assert!(t0.elapsed() < Duration::from_secs(5), "woken by the poke");
        let _ = t.join();
    }
}
