//! How many spawned copies the pool keeps ready (issue 28, docs/sandbox.md "The pool of
//! spawned copies"): enough that a call rarely waits for a spawn, few enough that waiting copies
//! do not hold more private memory than the deployer allows.
//!
//! target = clamp(round(call rate × spawn time) + ⌈groups per call⌉, min, max), then at most
//! ⌊memory cap / private memory of one ready copy⌋. The first term is the number of calls
//! expected to arrive while one copy spawns, rounded: the design's ⌈⌉ would keep one more copy
//! whenever any call came at all (a call an hour, a spawn of a second: ⌈0.0003⌉ = 1), so an
//! idle pool would never shrink to `min` + one call's groups. The call rate, spawn time, groups per call
//! and memory per copy are exponentially weighted moving averages, so the depth follows a
//! change of pace within a few calls; the time since the last call counts as an interval as soon
//! as it is longer than the average, so a pool whose calls stopped shrinks towards `min`
//! (the rate term goes to 0) without waiting for another call.

use std::time::{Duration, Instant};

/// Weight of the newest sample in every average.
const ALPHA: f64 = 0.3;

/// The deployer's bounds (policy `[pool]`, or `germline run --pool N` as min = max = N).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DepthBounds {
    pub min: usize,
    pub max: usize,
    /// The most private memory the waiting copies may hold together (bytes).
    pub memory_cap_bytes: u64,
}

/// An exponentially weighted moving average (none until the first sample).
#[derive(Debug, Clone, Copy, Default)]
struct Ewma(Option<f64>);

impl Ewma {
    fn add(&mut self, x: f64) {
        self.0 = Some(match self.0 {
            None => x,
            Some(m) => m + ALPHA * (x - m),
        });
    }
}

/// The pool's measurements and the depth they call for.
#[derive(Debug, Clone)]
pub struct PoolDepth {
    bounds: DepthBounds,
    /// Seconds between the starts of consecutive calls.
    interval_s: Ewma,
    last_call: Option<Instant>,
    /// Seconds from launch to a checked, initialised copy.
    spawn_s: Ewma,
    /// Copies (groups) per call.
    groups: Ewma,
    groups_this_call: usize,
    /// Private memory of one ready copy (bytes).
    copy_bytes: Ewma,
}

impl PoolDepth {
    pub fn new(bounds: DepthBounds) -> PoolDepth {
        PoolDepth {
            bounds,
            interval_s: Ewma::default(),
            last_call: None,
            spawn_s: Ewma::default(),
            groups: Ewma::default(),
            groups_this_call: 0,
            copy_bytes: Ewma::default(),
        }
    }

    pub fn bounds(&self) -> DepthBounds {
        self.bounds
    }

    /// A call starts at `now`: the interval since the last one, and the previous call's groups.
    pub fn call_begins(&mut self, now: Instant) {
        if let Some(last) = self.last_call {
            self.interval_s
                .add(now.saturating_duration_since(last).as_secs_f64());
            self.groups.add(self.groups_this_call.max(1) as f64);
        }
        self.last_call = Some(now);
        self.groups_this_call = 0;
    }

    /// The current call took one more copy (one group).
    pub fn group_taken(&mut self) {
        self.groups_this_call += 1;
    }

    /// A copy was spawned for the pool in `took`, holding `private_bytes` once ready.
    pub fn spawned(&mut self, took: Duration, private_bytes: Option<u64>) {
        self.spawn_s.add(took.as_secs_f64());
        if let Some(b) = private_bytes {
            self.copy_bytes.add(b as f64);
        }
    }

    /// The measured private memory of one ready copy (bytes), once one was measured.
    pub fn copy_bytes(&self) -> Option<u64> {
        self.copy_bytes.0.map(|b| b.round() as u64)
    }

    /// Ready copies the memory cap leaves room for (unbounded until a copy was measured).
    pub fn memory_room(&self) -> usize {
        match self.copy_bytes.0 {
            Some(b) if b >= 1.0 => (self.bounds.memory_cap_bytes as f64 / b).floor() as usize,
            _ => usize::MAX,
        }
    }

    /// Calls per second as of `now` (0 before two calls were seen).
    pub fn call_rate(&self, now: Instant) -> f64 {
        let (Some(mean), Some(last)) = (self.interval_s.0, self.last_call) else {
            return 0.0;
        };
        // A pause longer than the average counts at once: the pool shrinks while calls stop.
        let since = now.saturating_duration_since(last).as_secs_f64();
        let interval = mean.max(since);
        if interval <= 0.0 {
            // Calls at the same instant: as fast as can be, the max bounds it.
            return f64::INFINITY;
        }
        1.0 / interval
    }

    /// The depth the pool should have at `now`.
    pub fn target(&self, now: Instant) -> usize {
        let DepthBounds { min, max, .. } = self.bounds;
        let in_flight = self.call_rate(now) * self.spawn_s.0.unwrap_or(0.0);
        let in_flight = if in_flight.is_finite() {
            in_flight.round().min(max as f64) as usize
        } else {
            max
        };
        let groups = self.groups.0.unwrap_or(1.0).ceil().max(1.0) as usize;
        in_flight
            .saturating_add(groups)
            .clamp(min, max.max(min))
            .min(self.memory_room())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth(min: usize, max: usize, cap_mb: u64) -> PoolDepth {
        PoolDepth::new(DepthBounds {
            min,
            max,
            memory_cap_bytes: cap_mb << 20,
        })
    }

    /// `n` calls of `groups` groups each, `every` apart from `t0`; the instant after the last.
    fn calls(d: &mut PoolDepth, t0: Instant, every: Duration, n: u32, groups: usize) -> Instant {
        let mut t = t0;
        for _ in 0..n {
            d.call_begins(t);
            for _ in 0..groups {
                d.group_taken();
            }
            t += every;
        }
        t - every
    }

    #[test]
    fn before_any_call_one_copy_is_kept_within_the_bounds() {
        let now = Instant::now();
        assert_eq!(depth(0, 4, 512).target(now), 1);
        assert_eq!(depth(2, 4, 512).target(now), 2);
        assert_eq!(depth(0, 0, 512).target(now), 0);
    }

    #[test]
    fn the_depth_follows_the_call_rate_times_the_spawn_time() {
        let t0 = Instant::now();
        let mut d = depth(0, 8, 4096);
        d.spawned(Duration::from_millis(300), Some(10 << 20));
        // A call every 100 ms with a 300 ms spawn: 3 copies in flight + 1 group.
        let last = calls(&mut d, t0, Duration::from_millis(100), 20, 1);
        assert_eq!(d.target(last), 4);
        // A call every 2 s: a spawn finishes between two calls, one copy is enough.
        let mut slow = depth(0, 8, 4096);
        slow.spawned(Duration::from_millis(300), Some(10 << 20));
        let last = calls(&mut slow, t0, Duration::from_secs(2), 20, 1);
        assert_eq!(slow.target(last), 1);
        // A call every 500 ms: one spawn in progress when the next call comes.
        let mut mid = depth(0, 8, 4096);
        mid.spawned(Duration::from_millis(300), Some(10 << 20));
        let last = calls(&mut mid, t0, Duration::from_millis(500), 20, 1);
        assert_eq!(mid.target(last), 2);
        // ... and once calls stop for longer than their mean interval, that copy goes.
        assert_eq!(mid.target(last + Duration::from_secs(60)), 1);
        // Three groups per call are three copies per call.
        let mut wide = depth(0, 8, 4096);
        wide.spawned(Duration::from_millis(300), Some(10 << 20));
        let last = calls(&mut wide, t0, Duration::from_secs(60), 10, 3);
        assert_eq!(wide.target(last), 3);
    }

    #[test]
    fn min_and_max_bound_the_depth() {
        let t0 = Instant::now();
        let mut d = depth(2, 3, 4096);
        d.spawned(Duration::from_secs(1), Some(1 << 20));
        let last = calls(&mut d, t0, Duration::from_millis(10), 50, 1);
        assert_eq!(d.target(last), 3, "fast calls: at most max");
        assert_eq!(
            d.target(last + Duration::from_secs(3600)),
            2,
            "no calls: at least min"
        );
    }

    #[test]
    fn the_memory_cap_bounds_the_depth_even_below_min() {
        let t0 = Instant::now();
        let mut d = depth(3, 8, 100);
        d.spawned(Duration::from_secs(1), Some(40 << 20));
        let last = calls(&mut d, t0, Duration::from_millis(10), 50, 1);
        // 100 MiB / 40 MiB: two copies, whatever min and the rate ask for.
        assert_eq!(d.memory_room(), 2);
        assert_eq!(d.target(last), 2);
        assert_eq!(d.target(last + Duration::from_secs(3600)), 2);
        // Copies measured bigger later: the room shrinks with the average.
        for _ in 0..10 {
            d.spawned(Duration::from_secs(1), Some(90 << 20));
        }
        assert_eq!(d.target(last), 1);
    }

    #[test]
    fn the_rate_adapts_within_a_few_calls() {
        let t0 = Instant::now();
        let mut d = depth(0, 16, 4096);
        d.spawned(Duration::from_millis(500), Some(1 << 20));
        let t = calls(&mut d, t0, Duration::from_secs(5), 10, 1);
        assert_eq!(d.target(t), 1);
        // Calls every 50 ms with a 500 ms spawn want 10 + 1 copies: half way after 12 calls,
        // nearly there after 24 (weight 0.3: 0.7^12 of the old interval is left, 1.4 %).
        let t = calls(&mut d, t, Duration::from_millis(50), 12, 1);
        assert!(d.target(t) >= 5, "after 12 fast calls: {}", d.target(t));
        let t = calls(&mut d, t, Duration::from_millis(50), 12, 1);
        assert!(d.target(t) >= 10, "after 24 fast calls: {}", d.target(t));
    }
}
