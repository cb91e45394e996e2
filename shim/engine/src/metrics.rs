//! Prometheus metrics (issue 11, docs/operations.md): `--metrics-listen ADDR` serves
//! `GET /metrics` in the text exposition format (prometheus-client's OpenMetrics encoder).
//!
//! Label values come only from the signed manifest (the release's `name@version`), the
//! policy (declared hosts; an undeclared host is the fixed label `undeclared`, counted so by
//! the broker) and fixed names in this crate (verdicts, outcomes, limits). Nothing a copy
//! sends or says ever becomes a label value or a sample.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::error::{MetricsError, RunError};
use crate::observe::{CallObserver, CallView, RuntimeView};
use crate::runtime::Outcome;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReleaseLabels {
    pub release: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub release: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerdictLabels {
    pub release: String,
    pub host: String,
    pub verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    pub release: String,
    pub limit: String,
}

type HistFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Fork of a checked copy: tens of microseconds (pool) to hundreds of milliseconds.
fn fork_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.5, 12))
}

/// A copy's life, fork to teardown: milliseconds to the call deadline.
fn lifetime_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.5, 14))
}

fn copies_buckets() -> Histogram {
    Histogram::new([1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0])
}

/// Every metric of one `germline run` or `germline serve` process.
pub struct Metrics {
    registry: Registry,
    fork_seconds: HistFamily<ReleaseLabels>,
    copy_lifetime_seconds: HistFamily<ReleaseLabels>,
    copies_per_call: HistFamily<ReleaseLabels>,
    calls: Family<OutcomeLabels, Counter>,
    requests: Family<VerdictLabels, Counter>,
    limit_refusals: Family<LimitLabels, Counter>,
    item_bytes: Family<ReleaseLabels, Counter>,
    checks_failed: Family<ReleaseLabels, Counter>,
    pool_depth: Family<ReleaseLabels, Gauge>,
    dampening_penalty: Family<ReleaseLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    suppressed: Family<ReleaseLabels, Gauge>,
    /// Broker counts already added to `requests` (the broker's are running totals).
    seen: Mutex<BTreeMap<(String, String, String), u64>>,
    /// The brokers' control sockets and the releases by digest (labels of their rows).
    brokers: Mutex<Vec<PathBuf>>,
    releases: Mutex<BTreeMap<String, String>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("germline");
        let fork_seconds: HistFamily<ReleaseLabels> = Family::new_with_constructor(fork_buckets);
        let copy_lifetime_seconds: HistFamily<ReleaseLabels> =
            Family::new_with_constructor(lifetime_buckets);
        let copies_per_call: HistFamily<ReleaseLabels> =
            Family::new_with_constructor(copies_buckets);
        let calls = Family::<OutcomeLabels, Counter>::default();
        let requests = Family::<VerdictLabels, Counter>::default();
        let limit_refusals = Family::<LimitLabels, Counter>::default();
        let item_bytes = Family::<ReleaseLabels, Counter>::default();
        let checks_failed = Family::<ReleaseLabels, Counter>::default();
        let pool_depth = Family::<ReleaseLabels, Gauge>::default();
        let dampening_penalty =
            Family::<ReleaseLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        let suppressed = Family::<ReleaseLabels, Gauge>::default();
        registry.register(
            "fork_seconds",
            "Time to hand out a checked, data-free copy (pool or fresh fork)",
            fork_seconds.clone(),
        );
        registry.register(
            "copy_lifetime_seconds",
            "A call's copy from fork to teardown",
            copy_lifetime_seconds.clone(),
        );
        registry.register(
            "copies_per_call",
            "Copies (Plan groups) one tools/call ran",
            copies_per_call.clone(),
        );
        registry.register("calls", "tools/call by outcome", calls.clone());
        registry.register(
            "broker_requests",
            "Copies' requests by broker verdict (delivered, replayed, placeholder, denied, \
             malformed, trigger); host is a declared host or `undeclared`",
            requests.clone(),
        );
        registry.register(
            "limit_refusals",
            "Calls refused by a [limits] value of the policy",
            limit_refusals.clone(),
        );
        registry.register(
            "item_bytes_delivered",
            "Bytes of items delivered into copies",
            item_bytes.clone(),
        );
        registry.register(
            "checks_failed",
            "Copies the germline's checks refused",
            checks_failed.clone(),
        );
        registry.register(
            "pool_depth",
            "Pre-forked, checked, data-free copies ready",
            pool_depth.clone(),
        );
        registry.register(
            "dampening_penalty",
            "The release's dampening penalty P (Appendix B-E; suppressed from S until below R)",
            dampening_penalty.clone(),
        );
        registry.register(
            "release_suppressed",
            "1 while dampening refuses the release's calls",
            suppressed.clone(),
        );
        Self {
            registry,
            fork_seconds,
            copy_lifetime_seconds,
            copies_per_call,
            calls,
            requests,
            limit_refusals,
            item_bytes,
            checks_failed,
            pool_depth,
            dampening_penalty,
            suppressed,
            seen: Mutex::new(BTreeMap::new()),
            brokers: Mutex::new(Vec::new()),
            releases: Mutex::new(BTreeMap::new()),
        }
    }

    /// A release this process serves, and the broker its copies use.
    pub fn add_release(&self, digest: &str, label: &str, broker: PathBuf) {
        if let Ok(mut r) = self.releases.lock() {
            r.insert(digest.to_string(), label.to_string());
        }
        if let Ok(mut b) = self.brokers.lock() {
            if !b.contains(&broker) {
                b.push(broker);
            }
        }
    }

    fn rl(release: &str) -> ReleaseLabels {
        ReleaseLabels {
            release: release.to_string(),
        }
    }

    /// One `tools/call` of `release` ended with `r`.
    pub fn call(&self, release: &str, r: &Result<Outcome, RunError>) {
        let outcome = match r {
            Ok(o) if o.result.get("isError") == Some(&serde_json::Value::Bool(true)) => {
                "tool_error"
            }
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        };
        self.calls
            .get_or_create(&OutcomeLabels {
                release: release.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
        let Ok(o) = r else { return };
        let l = Self::rl(release);
        self.copies_per_call
            .get_or_create(&l)
            .observe(o.copies as f64);
        // Phases run per copy: fork, broker, copy, copy.*, broker.end_copy.
        let mut life: Option<u64> = None;
        for (name, us) in &o.phases {
            match *name {
                "fork" => {
                    if let Some(t) = life.take() {
                        self.copy_lifetime_seconds
                            .get_or_create(&l)
                            .observe(t as f64 / 1e6);
                    }
                    self.fork_seconds
                        .get_or_create(&l)
                        .observe(*us as f64 / 1e6);
                    life = Some(*us);
                }
                "broker" | "copy" => {
                    if let Some(t) = &mut life {
                        *t += us;
                    }
                }
                _ => {}
            }
        }
        if let Some(t) = life {
            self.copy_lifetime_seconds
                .get_or_create(&l)
                .observe(t as f64 / 1e6);
        }
    }

    /// A limit (its fixed name) refused a call of `release`.
    pub fn limit(&self, release: &str, limit: &'static str) {
        self.limit_refusals
            .get_or_create(&LimitLabels {
                release: release.to_string(),
                limit: limit.to_string(),
            })
            .inc();
    }

    pub fn item_bytes(&self, release: &str, n: u64) {
        self.item_bytes.get_or_create(&Self::rl(release)).inc_by(n);
    }

    pub fn check_failed(&self, release: &str) {
        self.checks_failed.get_or_create(&Self::rl(release)).inc();
    }

    pub fn pool_depth(&self, release: &str, n: usize) {
        self.pool_depth
            .get_or_create(&Self::rl(release))
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Pulls the brokers' request counts (rows of releases this process serves only).
    fn pull_brokers(&self) {
        let brokers = self.brokers.lock().map(|b| b.clone()).unwrap_or_default();
        let releases = self.releases.lock().map(|r| r.clone()).unwrap_or_default();
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        for sock in brokers {
            let Ok(client) = germline_broker::control::BrokerClient::connect(&sock) else {
                continue;
            };
            let Ok(rows) = client.stats() else { continue };
            for (digest, host, verdict, n) in rows {
                let Some(release) = releases.get(&digest) else {
                    continue;
                };
                let key = (release.clone(), host, verdict);
                let before = seen.get(&key).copied().unwrap_or(0);
                if n > before {
                    self.requests
                        .get_or_create(&VerdictLabels {
                            release: key.0.clone(),
                            host: key.1.clone(),
                            verdict: key.2.clone(),
                        })
                        .inc_by(n - before);
                    seen.insert(key, n);
                }
            }
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        self.pull_brokers();
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Metrics observe a runtime's calls, its verdicts and its pool.
impl CallObserver for Arc<Metrics> {
    /// Records a finished `tools/call`.
    fn after_call(&mut self, rt: &RuntimeView<'_>, call: &CallView<'_>) {
        let release = rt.release.label();
        let r = call.result;
        self.call(&release, r);
        note_dampening(self, rt);
        if let Err(RunError::Limit(hit)) = r {
            self.limit(&release, hit.name);
        }
        if let Some(g) = rt.germline {
            self.pool_depth(&release, g.pool_len());
        }
    }

    fn after_verdict(&mut self, rt: &RuntimeView<'_>) {
        note_dampening(self, rt);
    }

    fn after_idle(&mut self, rt: &RuntimeView<'_>) {
        if let Some(g) = rt.germline {
            self.pool_depth(&rt.release.label(), g.pool_len());
        }
    }
}

/// The release's dampening state as the evidence layer holds it now (after a call's
/// admission, and again after its re-runs' verdicts).
fn note_dampening(m: &Metrics, rt: &RuntimeView<'_>) {
    let labels = ReleaseLabels {
        release: rt.release.label(),
    };
    let (p, s) = rt
        .evidence
        .ledger
        .releases
        .get(&rt.release.digest)
        .map_or((0.0, false), |st| (st.penalty.value, st.penalty.suppressed));
    m.dampening_penalty.get_or_create(&labels).set(p);
    m.suppressed.get_or_create(&labels).set(i64::from(s));
}

/// Serves `GET /metrics` on `addr` for the life of the process: hyper 1 (HTTP/1.1) on a
/// current-thread tokio runtime on a thread of its own, so a scrape never runs on, or waits
/// for, the call path (it reads the registry under its own locks).
pub fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<SocketAddr, MetricsError> {
    let listen = |source| MetricsError::Listen { addr, source };
    let l = std::net::TcpListener::bind(addr).map_err(listen)?;
    let local = l.local_addr().map_err(listen)?;
    l.set_nonblocking(true).map_err(listen)?;
    if !local.ip().is_loopback() {
        eprintln!("germline: warning: metrics on {local}, not loopback (no authentication)");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(MetricsError::Thread)?;
    std::thread::Builder::new()
        .name("germline-metrics".into())
        .spawn(move || {
            rt.block_on(async move {
                let l = match tokio::net::TcpListener::from_std(l) {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("germline: metrics on {local}: {e}");
                        return;
                    }
                };
                loop {
                    let Ok((stream, _)) = l.accept().await else {
                        continue;
                    };
                    let m = metrics.clone();
                    tokio::spawn(async move {
                        let svc = hyper::service::service_fn(move |req| {
                            let m = m.clone();
                            async move { Ok::<_, std::convert::Infallible>(answer(&req, &m)) }
                        });
                        let conn = hyper::server::conn::http1::Builder::new()
                            .timer(TokioTimer::new())
                            .header_read_timeout(Duration::from_secs(5))
                            .keep_alive(false)
                            .serve_connection(TokioIo::new(stream), svc);
                        // A scrape that stalls is dropped; nothing waits on it.
                        let _ = tokio::time::timeout(Duration::from_secs(10), conn).await;
                    });
                }
            })
        })
        .map_err(MetricsError::Thread)?;
    Ok(local)
}

/// The one resource: `GET /metrics` in the OpenMetrics text format; anything else is told so.
fn answer<B>(req: &Request<B>, metrics: &Metrics) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.render(),
        ),
        (&Method::GET, _) => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "GET /metrics\n".to_string(),
        ),
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET /metrics\n".to_string(),
        ),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_call_moves_the_counters_and_histograms() {
        let m = Metrics::new();
        let o = Outcome {
            result: json!({"content": []}),
            label: None,
            copies: 2,
            triggers: 0,
            phases: vec![
                ("plan", 10),
                ("fork", 500),
                ("broker", 100),
                ("copy", 4000),
                ("fork", 700),
                ("broker", 100),
                ("copy", 3000),
                ("total", 9000),
            ],
            notifications: vec![],
        };
        m.call("office@1.0", &Ok(o));
        m.call(
            "office@1.0",
            &Err(RunError::Limit(crate::limits::LimitHit {
                name: "calls_per_second",
                value: "1".into(),
                detail: String::new(),
            })),
        );
        m.limit("office@1.0", "calls_per_second");
        m.item_bytes("office@1.0", 42);
        let t = m.render();
        assert!(
            t.contains(r#"germline_calls_total{release="office@1.0",outcome="ok"} 1"#),
            "{t}"
        );
        assert!(t.contains(r#"outcome="limit"} 1"#), "{t}");
        assert!(
            t.contains(r#"germline_fork_seconds_count{release="office@1.0"} 2"#),
            "{t}"
        );
        assert!(
            t.contains(r#"germline_copy_lifetime_seconds_sum{release="office@1.0"} 0.0084"#),
            "{t}"
        );
        assert!(t.contains(r#"germline_item_bytes_delivered_total{release="office@1.0"} 42"#));
        assert!(t.contains(r#"limit="calls_per_second"} 1"#));
    }
}
