//! `germline serve`'s connection table: caps in total and per client address, idle timeouts,
//! and which connection gives way when a new one comes past a cap (docs/operations.md).
//!
//! A connection is *busy* from the moment its request's headers are read until its response
//! has been written (the response body holds a [`Busy`] guard), and *idle* otherwise: new,
//! between keep-alive requests, or still sending headers. Only idle connections are closed to
//! make room, least recently used first, so holding connections open without completing
//! requests cannot keep anyone out; and an idle connection is closed once it has been idle for
//! the header timeout (never served a request) or the keep-alive timeout (served one).

use std::collections::HashMap;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::Notify;

use crate::http::ConnLimits;

/// What one connection's task and its requests share.
#[derive(Debug, Default)]
pub struct Slot {
    /// Requests of it in progress (0 or 1 with HTTP/1.1 without pipelining).
    busy: AtomicU32,
    /// Set when the table closed it (idle too long, or room for a new one).
    pub close: Notify,
}

impl Slot {
    pub fn is_busy(&self) -> bool {
        self.busy.load(Ordering::Acquire) > 0
    }
}

#[derive(Debug)]
struct Entry {
    client: IpAddr,
    slot: Arc<Slot>,
    /// When it last became idle (accepted, or its last response written).
    since: Instant,
    /// It has served a request (the keep-alive timeout applies, not the header timeout).
    served: bool,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtCap {
    Total,
    Client,
}

/// The open connections.
#[derive(Debug)]
pub struct Conns {
    open: HashMap<u64, Entry>,
    next: u64,
    limits: ConnLimits,
}

/// The client address a cap counts: an IPv4-mapped IPv6 address as IPv4.
fn client_of(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

impl Conns {
    pub fn new(limits: ConnLimits) -> Conns {
        Conns {
            open: HashMap::new(),
            next: 0,
            limits,
        }
    }

    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Closes the least recently used idle connection among those `pick` accepts.
    fn close_oldest_idle(&mut self, pick: impl Fn(&Entry) -> bool) -> bool {
        let oldest = self
            .open
            .iter()
            .filter(|(_, e)| !e.slot.is_busy() && pick(e))
            .min_by_key(|(id, e)| (e.since, **id))
            .map(|(id, _)| *id);
        match oldest.and_then(|id| self.open.remove(&id)) {
            Some(e) => {
                e.slot.close.notify_one();
                true
            }
            None => false,
        }
    }

    /// Admits a connection from `ip`, closing an idle one if a cap is reached; `Err` if a cap
    /// is reached and every connection it counts is busy.
    pub fn admit(&mut self, ip: IpAddr, now: Instant) -> Result<(u64, Arc<Slot>), AtCap> {
        let client = client_of(ip);
        let mine = self.open.values().filter(|e| e.client == client).count();
        if mine >= self.limits.max_per_client.max(1)
            && !self.close_oldest_idle(|e| e.client == client)
        {
            return Err(AtCap::Client);
        }
        if self.open.len() >= self.limits.max_total.max(1) && !self.close_oldest_idle(|_| true) {
            return Err(AtCap::Total);
        }
        self.next += 1;
        let slot = Arc::new(Slot::default());
        self.open.insert(
            self.next,
            Entry {
                client,
                slot: slot.clone(),
                since: now,
                served: false,
            },
        );
        Ok((self.next, slot))
    }

    /// The connection's task ended.
    pub fn gone(&mut self, id: u64) {
        self.open.remove(&id);
    }

    /// A response of connection `id` was written (or dropped): it is idle from `now`.
    fn idle(&mut self, id: u64, now: Instant) {
        if let Some(e) = self.open.get_mut(&id) {
            e.since = now;
            e.served = true;
        }
    }

    /// Closes the connections idle past their timeout; how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let (header, keepalive) = (self.limits.header_timeout, self.limits.keepalive_timeout);
        let old: Vec<u64> = self
            .open
            .iter()
            .filter(|(_, e)| {
                let limit = if e.served { keepalive } else { header };
                !e.slot.is_busy() && now.saturating_duration_since(e.since) >= limit
            })
            .map(|(id, _)| *id)
            .collect();
        for id in &old {
            if let Some(e) = self.open.remove(id) {
                e.slot.close.notify_one();
            }
        }
        old.len()
    }

    /// How often [`Conns::expire`] should run.
    pub fn tick(&self) -> Duration {
        (self
            .limits
            .header_timeout
            .min(self.limits.keepalive_timeout)
            / 4)
        .clamp(Duration::from_millis(100), Duration::from_secs(1))
    }
}

/// The shared table.
pub type Table = Arc<Mutex<Conns>>;

pub fn lock(t: &Table) -> MutexGuard<'_, Conns> {
    t.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Marks connection `id` busy while it lives: made when a request's headers are read, moved
/// into its response's body, dropped when the body is written (or the request abandoned).
#[derive(Debug)]
pub struct Busy {
    table: Table,
    id: u64,
    slot: Arc<Slot>,
}

impl Busy {
    pub fn new(table: Table, id: u64, slot: Arc<Slot>) -> Busy {
        slot.busy.fetch_add(1, Ordering::AcqRel);
        Busy { table, id, slot }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.slot.busy.fetch_sub(1, Ordering::AcqRel);
        lock(&self.table).idle(self.id, Instant::now());
    }
}

/// A response body that keeps its connection busy until it has been written.
#[derive(Debug)]
pub struct Tracked {
    body: crate::sse::Out,
    _busy: Option<Busy>,
}

impl Tracked {
    pub fn new(body: crate::sse::Out, busy: Option<Busy>) -> Tracked {
        Tracked { body, _busy: busy }
    }
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, per: usize) -> ConnLimits {
        ConnLimits {
            max_total: total,
            max_per_client: per,
            header_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn idle_connections_give_way_oldest_first_busy_ones_never() {
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_millis(n);
        let mut c = Conns::new(limits(3, 3));
        let (a, sa) = c.admit(ip("10.0.0.1"), s(0)).expect("a");
        let (_, sb) = c.admit(ip("10.0.0.2"), s(1)).expect("b");
        let (_, sc) = c.admit(ip("10.0.0.3"), s(2)).expect("c");
        // Full: the oldest idle one (a) is closed for the newcomer.
        let (_, sd) = c.admit(ip("10.0.0.4"), s(3)).expect("d");
        assert_eq!(c.len(), 3);
        assert!(!c.open.contains_key(&a));
        let table: Table = Arc::new(Mutex::new(c));
        // Every one busy: the next is refused (the overflow answers it).
        let busy: Vec<Busy> = [(2, sb), (3, sc), (4, sd)]
            .into_iter()
            .map(|(id, slot)| Busy::new(table.clone(), id, slot))
            .collect();
        assert_eq!(
            lock(&table).admit(ip("10.0.0.5"), s(4)).map(|_| ()),
            Err(AtCap::Total)
        );
        drop(busy);
        assert!(lock(&table).admit(ip("10.0.0.5"), s(5)).is_ok());
        drop(sa);
    }

    #[test]
    fn one_client_address_cannot_take_every_connection() {
        let t0 = Instant::now();
        let table: Table = Arc::new(Mutex::new(Conns::new(limits(10, 2))));
        let mut held = Vec::new();
        for n in 0..2u64 {
            let (id, slot) = lock(&table)
                .admit(ip("127.0.0.1"), t0 + Duration::from_millis(n))
                .expect("within the cap");
            held.push(Busy::new(table.clone(), id, slot));
        }
        // Its third waits for one of its own (all busy), not for the others' room.
        assert_eq!(
            lock(&table).admit(ip("127.0.0.1"), t0).map(|_| ()),
            Err(AtCap::Client)
        );
        assert_eq!(
            lock(&table).admit(ip("::ffff:127.0.0.1"), t0).map(|_| ()),
            Err(AtCap::Client),
            "an IPv4-mapped address is the same client"
        );
        assert!(lock(&table).admit(ip("127.0.0.2"), t0).is_ok());
        // Once one of its requests ends, its idle connection gives way to its new one.
        held.pop();
        assert!(lock(&table).admit(ip("127.0.0.1"), t0).is_ok());
        assert_eq!(lock(&table).len(), 3);
    }

    #[test]
    fn idle_connections_expire_by_the_header_or_keepalive_timeout() {
        let t0 = Instant::now();
        let table: Table = Arc::new(Mutex::new(Conns::new(limits(10, 10))));
        let (fresh, _) = lock(&table).admit(ip("10.0.0.1"), t0).expect("fresh");
        let (kept, ks) = lock(&table).admit(ip("10.0.0.1"), t0).expect("kept");
        let (working, ws) = lock(&table).admit(ip("10.0.0.1"), t0).expect("working");
        drop(Busy::new(table.clone(), kept, ks.clone()));
        let _held = Busy::new(table.clone(), working, ws);
        let later = Instant::now() + Duration::from_secs(11);
        assert_eq!(lock(&table).expire(later), 1, "the never-served one");
        assert!(!lock(&table).open.contains_key(&fresh));
        assert!(lock(&table).open.contains_key(&kept));
        assert_eq!(lock(&table).expire(later + Duration::from_secs(20)), 1);
        assert!(!lock(&table).open.contains_key(&kept));
        assert_eq!(
            lock(&table).expire(later + Duration::from_secs(3600)),
            0,
            "a busy connection never expires"
        );
    }
}
