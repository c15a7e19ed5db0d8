//! Metrics in Prometheus' text format: requests by status class and by
//! method, bytes sent, connections, requests in flight, a latency
//! histogram, TLS handshakes, the reverse proxy's upstreams (requests,
//! failures by kind, the time to the answer's head, connections open and
//! idle, requests on fresh and on reused connections), and whatever gauges
//! the application adds (an archive's generation, say).
//!
//! Each worker owns one `WorkerMetrics` and is its only writer: a counter is
//! a relaxed load and store of a word the worker alone changes (no locked
//! instruction, no lock, no allocation per request). A scrape reads every
//! worker's words and adds them up; it may see one worker a request ahead
//! of another, never a torn or lost count.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// A monotonic count written by one thread only.
#[derive(Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the owning worker calls this, so load + store cannot
    /// lose an update, and needs no locked read-modify-write.
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.0
            .store(self.0.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// Sets a gauge's value (only the owning worker calls this).
    #[inline]
    pub(crate) fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Why a request to an upstream failed (`peregrine_upstream_failures_total`'s
/// `kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UpstreamFailure {
    /// The connection could not be made (refused, unreachable).
    Connect,
    /// Connecting, or waiting for the answer, took longer than allowed.
    Timeout,
    /// The answer broke HTTP/1.1's rules (framing, fields, a bad chunk).
    BadAnswer,
    /// The upstream closed or reset the connection before the answer's end.
    Closed,
    /// Every connection was busy and the queue full: 503, never sent.
    QueueFull,
}

impl UpstreamFailure {
    const LABELS: [&'static str; 5] = ["connect", "timeout", "bad_answer", "closed", "queue_full"];
}

/// One upstream's counters in one worker (the proxy's pool for it in that
/// worker), written by that worker only, summed by URL at a scrape.
#[derive(Default)]
pub(crate) struct UpstreamMetrics {
    /// The upstream's URL as configured: the `upstream` label.
    url: Box<str>,
    /// Requests handed to the upstream's pool.
    pub(crate) requests: Counter,
    /// Requests written on a connection opened for them, and on a
    /// kept-alive one (a request sent again counts again).
    pub(crate) fresh: Counter,
    pub(crate) reused: Counter,
    failures: [Counter; UpstreamFailure::LABELS.len()],
    /// The time from the start of the exchange to the answer's head.
    header_buckets: [Counter; LATENCY_BOUNDS_US.len()],
    header_sum_us: Counter,
    header_count: Counter,
    /// Gauges: connections open (idle or busy), and idle.
    pub(crate) open: Counter,
    pub(crate) idle: Counter,
    /// A balance's member (`proxy/balance.rs`): 1 while this worker has
    /// it out (passive health, as of the worker's last choice), and the
    /// times it took it out.
    pub(crate) out: Counter,
    pub(crate) ejections: Counter,
    /// The active check's verdict for it (`proxy/health.rs`), if checked.
    pub(crate) checked: OnceLock<Arc<AtomicBool>>,
}

impl UpstreamMetrics {
    pub(crate) fn fail(&self, kind: UpstreamFailure) {
        self.failures[kind as usize].add(1);
    }

    /// Counts an answer's head, `took` after the exchange began.
    pub(crate) fn header_time(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        if let Some(b) = LATENCY_BOUNDS_US.iter().position(|&bound| us <= bound) {
            self.header_buckets[b].add(1);
        }
        self.header_sum_us.add(us);
        self.header_count.add(1);
    }
}

/// Method labels; anything else counts as `other`.
const METHODS: [&str; 8] = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "other"];

/// Upper bounds of the latency buckets, in microseconds (the last bucket,
/// `+Inf`, is implicit). From 50 µs, where a cached file is answered here,
/// to 10 s, a slow deferred handler.
const LATENCY_BOUNDS_US: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    10_000_000,
];

/// One worker's counters.
#[derive(Default)]
pub(crate) struct WorkerMetrics {
    /// Responses by status class: 1xx .. 5xx.
    by_class: [Counter; 5],
    by_method: [Counter; METHODS.len()],
    /// Bytes written to sockets: heads, bodies, TLS records.
    pub(crate) bytes_sent: Counter,
    pub(crate) conns_accepted: Counter,
    pub(crate) conns_closed: Counter,
    /// Requests handed to a deferred handler, and those since answered or
    /// abandoned: the difference is in flight.
    pub(crate) deferred_started: Counter,
    pub(crate) deferred_ended: Counter,
    latency_buckets: [Counter; LATENCY_BOUNDS_US.len()],
    latency_sum_us: Counter,
    latency_count: Counter,
    pub(crate) tls_handshakes: Counter,
    /// Of those, the ones that resumed a session (a ticket, or TLS 1.2's
    /// session id): a benchmark of full handshakes checks this is 0.
    pub(crate) tls_resumed: Counter,
    /// WebSockets: opened and ended (the difference is open), whole
    /// messages and their payload bytes each way, and published messages
    /// a subscriber did not get because its queue was full.
    pub(crate) ws_opened: Counter,
    pub(crate) ws_closed: Counter,
    pub(crate) ws_messages_in: Counter,
    pub(crate) ws_messages_out: Counter,
    pub(crate) ws_bytes_in: Counter,
    pub(crate) ws_bytes_out: Counter,
    pub(crate) ws_dropped: Counter,
    /// The reverse proxy's WebSocket tunnels (`conn/tunnel.rs`): opened
    /// and ended (the difference is open).
    pub(crate) proxy_tunnels_opened: Counter,
    pub(crate) proxy_tunnels_closed: Counter,
    pub(crate) tls_handshake_failures: Counter,
    /// QUIC (HTTP/3): connections accepted and ended, handshakes
    /// completed, Retry packets sent, datagrams received; packets sent and
    /// lost (each loss is a retransmission of what it carried), from
    /// quinn-proto's statistics as they grow.
    pub(crate) quic_conns_accepted: Counter,
    pub(crate) quic_conns_closed: Counter,
    pub(crate) quic_handshakes: Counter,
    pub(crate) quic_retries: Counter,
    pub(crate) quic_packets_received: Counter,
    pub(crate) quic_packets_sent: Counter,
    pub(crate) quic_packets_lost: Counter,
    /// Refusals and defences against clients that would hold memory or
    /// time (issue "bounded memory"): bodies answered at the head and
    /// discarded, their bytes thrown away, requests ended for arriving too
    /// slowly, bodies refused because the worker's budget was spent,
    /// connections refused past the per-address cap, and connections that
    /// stopped being read while the worker's unsent output was over its
    /// budget.
    pub(crate) bodies_ignored: Counter,
    pub(crate) body_bytes_discarded: Counter,
    pub(crate) slow_requests: Counter,
    pub(crate) budget_refusals: Counter,
    pub(crate) conns_refused_per_address: Counter,
    pub(crate) output_budget_waits: Counter,
    /// Connections closed on a listener that requires the PROXY protocol:
    /// from an untrusted address, or whose header was missing, malformed
    /// or late.
    pub(crate) proxy_refusals: Counter,
    /// Forward-auth checks by outcome (`proxy/auth.rs`): let through (a
    /// 2xx), refused (the service's answer relayed), failed (the service
    /// down, silent or answering 5xx).
    pub(crate) forward_auth_allowed: Counter,
    pub(crate) forward_auth_refused: Counter,
    pub(crate) forward_auth_failed: Counter,
    /// Responses by site (the server's sites, by index: the label is the
    /// site's first name) and status class.
    by_site: Box<[(Box<str>, [Counter; 5])]>,
    /// The reverse proxy's upstreams this worker has a pool for, added as
    /// it makes them (the lock is taken then and at a scrape only).
    upstreams: Mutex<Vec<Arc<UpstreamMetrics>>>,
}

/// The label index of a request method (`other` for the rest).
#[inline]
pub(crate) fn method_index(method: &[u8]) -> usize {
    METHODS[..METHODS.len() - 1]
        .iter()
        .position(|&name| name.as_bytes() == method)
        .unwrap_or(METHODS.len() - 1)
}

impl WorkerMetrics {
    /// Counts one response: its method, status and the microseconds from
    /// the request being ready to be answered to its last byte sent.
    #[inline]
    pub(crate) fn record(&self, method: &[u8], status: u16, us: u64) {
        self.record_index(method_index(method), status, us);
    }

    /// Counts one response of `site` (none: a server of one handler, or a
    /// host no site takes) by its status class.
    #[inline]
    pub(crate) fn record_site(&self, site: Option<u16>, status: u16) {
        if let Some((_, by_class)) = site.and_then(|i| self.by_site.get(usize::from(i))) {
            by_class[usize::from(status / 100).clamp(1, 5) - 1].add(1);
        }
    }

    /// Counters for one more upstream pool of this worker's.
    pub(crate) fn upstream(&self, url: &str) -> Arc<UpstreamMetrics> {
        let m = Arc::new(UpstreamMetrics {
            url: url.into(),
            ..UpstreamMetrics::default()
        });
        self.upstreams.lock().unwrap_or_else(|e| e.into_inner()).push(m.clone());
        m
    }

    /// As `record`, with the method's label index.
    #[inline]
    pub(crate) fn record_index(&self, method: usize, status: u16, us: u64) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.by_class[class].add(1);
        self.by_method[method.min(METHODS.len() - 1)].add(1);
        // The histogram keeps per-bucket counts; a scrape makes them
        // cumulative, as Prometheus wants.
        if let Some(b) = LATENCY_BOUNDS_US.iter().position(|&bound| us <= bound) {
            self.latency_buckets[b].add(1);
        }
        self.latency_sum_us.add(us);
        self.latency_count.add(1);
    }
}

/// A label's value escaped for the text format (`\\`, `"` and newline).
fn label_value(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return value.into();
    }
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
        .into()
}

/// A value the application reports at each scrape.
struct Extra {
    name: String,
    /// `site="a.test"`, or empty.
    labels: String,
    help: String,
    kind: &'static str,
    read: Box<dyn Fn() -> u64 + Send + Sync>,
}

/// A server's metrics: give it to [`crate::Server::metrics`], then serve
/// [`Metrics::render`] wherever scrapes come from (the command line's
/// `--metrics ADDR` serves it at `/metrics`).
pub struct Metrics {
    workers: Mutex<Vec<Arc<WorkerMetrics>>>,
    extras: Mutex<Vec<Extra>>,
    started: Instant,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Empty metrics, the clock of `uptime` starting now.
    pub fn new() -> Self {
        Metrics {
            workers: Mutex::new(Vec::new()),
            extras: Mutex::new(Vec::new()),
            started: Instant::now(),
        }
    }

    /// A new worker's counters (called once per worker at start), with
    /// counters for each of the server's sites, by their labels.
    pub(crate) fn add_worker<'a>(&self, sites: impl Iterator<Item = &'a str>) -> Arc<WorkerMetrics> {
        let w = Arc::new(WorkerMetrics {
            by_site: sites.map(|label| (label.into(), Default::default())).collect(),
            ..WorkerMetrics::default()
        });
        self.workers.lock().unwrap_or_else(|e| e.into_inner()).push(w.clone());
        w
    }

    /// Adds a gauge read at each scrape, in place of any gauge or counter
    /// of the same name. `name` should follow Prometheus' rules
    /// (`[a-z_][a-z0-9_]*`).
    pub fn gauge(&self, name: &str, help: &str, read: impl Fn() -> u64 + Send + Sync + 'static) {
        self.extra(name, &[], help, "gauge", Box::new(read));
    }

    /// Adds a counter (a value that only grows) read at each scrape, in
    /// place of any of the same name.
    pub fn counter(&self, name: &str, help: &str, read: impl Fn() -> u64 + Send + Sync + 'static) {
        self.extra(name, &[], help, "counter", Box::new(read));
    }

    /// [`Metrics::gauge`] for one set of label values (`[("site",
    /// "example.com")]`), in place of the one with the same name and
    /// labels; the others of that name stay.
    pub fn gauge_with(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        help: &str,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        self.extra(name, labels, help, "gauge", Box::new(read));
    }

    /// [`Metrics::counter`] for one set of label values.
    pub fn counter_with(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        help: &str,
        read: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        self.extra(name, labels, help, "counter", Box::new(read));
    }

    /// Removes every gauge and counter added under `name`, whatever its
    /// labels (a site that is no longer served).
    pub fn remove(&self, name: &str) {
        self.extras
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|e| e.name != name);
    }

    fn extra(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        help: &str,
        kind: &'static str,
        read: Box<dyn Fn() -> u64 + Send + Sync>,
    ) {
        let mut rendered = String::new();
        for (i, (label, value)) in labels.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            let _ = write!(rendered, "{sep}{label}=\"{}\"", label_value(value));
        }
        let mut extras = self.extras.lock().unwrap_or_else(|e| e.into_inner());
        extras.retain(|e| !(e.name == name && e.labels == rendered));
        // Next to the others of its name, so that one HELP heads them.
        let at = extras
            .iter()
            .rposition(|e| e.name == name)
            .map_or(extras.len(), |i| i + 1);
        extras.insert(
            at,
            Extra {
                name: name.to_owned(),
                labels: rendered,
                help: help.to_owned(),
                kind,
                read,
            },
        );
    }

    /// Every metric in Prometheus' text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        // Held while rendering (a scrape is rare; workers take the lock only
        // when they start): a copy of the list would add to the reference
        // counts that tell running workers apart.
        let workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        let sum = |f: &dyn Fn(&WorkerMetrics) -> u64| workers.iter().map(|w| f(w)).fold(0u64, u64::wrapping_add);
        let mut out = String::with_capacity(4096);
        let head = |out: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        head(
            &mut out,
            "peregrine_requests_total",
            "counter",
            "Responses sent, by status class.",
        );
        for (i, class) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().enumerate() {
            let n = sum(&|w| w.by_class[i].get());
            let _ = writeln!(out, "peregrine_requests_total{{class=\"{class}\"}} {n}");
        }
        head(
            &mut out,
            "peregrine_requests_by_method_total",
            "counter",
            "Responses sent, by request method.",
        );
        for (i, method) in METHODS.iter().enumerate() {
            let n = sum(&|w| w.by_method[i].get());
            let _ = writeln!(out, "peregrine_requests_by_method_total{{method=\"{method}\"}} {n}");
        }
        let simple: [(&str, &str, &str, u64); 30] = [
            (
                "peregrine_sent_bytes_total",
                "counter",
                "Bytes written to client sockets (heads, bodies, TLS records).",
                sum(&|w| w.bytes_sent.get()),
            ),
            (
                "peregrine_connections_accepted_total",
                "counter",
                "Connections accepted.",
                sum(&|w| w.conns_accepted.get()),
            ),
            (
                "peregrine_connections_open",
                "gauge",
                "Connections open now.",
                sum(&|w| w.conns_accepted.get().wrapping_sub(w.conns_closed.get())),
            ),
            (
                "peregrine_requests_in_flight",
                "gauge",
                "Requests waiting for a deferred handler's answer.",
                sum(&|w| w.deferred_started.get().wrapping_sub(w.deferred_ended.get())),
            ),
            (
                "peregrine_websockets_open",
                "gauge",
                "WebSockets open now.",
                sum(&|w| w.ws_opened.get().wrapping_sub(w.ws_closed.get())),
            ),
            (
                "peregrine_websockets_opened_total",
                "counter",
                "WebSocket handshakes accepted.",
                sum(&|w| w.ws_opened.get()),
            ),
            (
                "peregrine_proxy_websockets_open",
                "gauge",
                "WebSockets the reverse proxy passes through to upstreams, open now.",
                sum(&|w| w.proxy_tunnels_opened.get().wrapping_sub(w.proxy_tunnels_closed.get())),
            ),
            (
                "peregrine_proxy_websockets_opened_total",
                "counter",
                "WebSockets the reverse proxy opened to upstreams (upstream answered 101).",
                sum(&|w| w.proxy_tunnels_opened.get()),
            ),
            (
                "peregrine_websocket_messages_received_total",
                "counter",
                "Whole WebSocket messages received.",
                sum(&|w| w.ws_messages_in.get()),
            ),
            (
                "peregrine_websocket_messages_sent_total",
                "counter",
                "WebSocket messages queued to clients (published ones counted per subscriber).",
                sum(&|w| w.ws_messages_out.get()),
            ),
            (
                "peregrine_websocket_received_bytes_total",
                "counter",
                "Payload bytes of the WebSocket messages received.",
                sum(&|w| w.ws_bytes_in.get()),
            ),
            (
                "peregrine_websocket_sent_bytes_total",
                "counter",
                "Bytes of the WebSocket frames queued to clients.",
                sum(&|w| w.ws_bytes_out.get()),
            ),
            (
                "peregrine_websocket_published_dropped_total",
                "counter",
                "Published messages a subscriber missed because its send queue was full.",
                sum(&|w| w.ws_dropped.get()),
            ),
            (
                "peregrine_quic_connections_accepted_total",
                "counter",
                "QUIC (HTTP/3) connections accepted.",
                sum(&|w| w.quic_conns_accepted.get()),
            ),
            (
                "peregrine_quic_connections_open",
                "gauge",
                "QUIC (HTTP/3) connections open now.",
                sum(&|w| w.quic_conns_accepted.get().wrapping_sub(w.quic_conns_closed.get())),
            ),
            (
                "peregrine_quic_handshakes_total",
                "counter",
                "QUIC handshakes completed.",
                sum(&|w| w.quic_handshakes.get()),
            ),
            (
                "peregrine_quic_retries_total",
                "counter",
                "QUIC Retry packets sent (address validation under a flood of Initials).",
                sum(&|w| w.quic_retries.get()),
            ),
            (
                "peregrine_quic_datagrams_received_total",
                "counter",
                "UDP datagrams received on QUIC sockets.",
                sum(&|w| w.quic_packets_received.get()),
            ),
            (
                "peregrine_quic_packets_sent_total",
                "counter",
                "QUIC packets sent.",
                sum(&|w| w.quic_packets_sent.get()),
            ),
            (
                "peregrine_quic_packets_lost_total",
                "counter",
                "QUIC packets declared lost (their frames retransmitted).",
                sum(&|w| w.quic_packets_lost.get()),
            ),
            (
                "peregrine_request_bodies_ignored_total",
                "counter",
                "Requests answered at their head whose body nobody reads (discarded, or refused by RST_STREAM/STOP_SENDING).",
                sum(&|w| w.bodies_ignored.get()),
            ),
            (
                "peregrine_request_body_bytes_discarded_total",
                "counter",
                "Bytes of unread HTTP/1.1 request bodies read and thrown away after their answer.",
                sum(&|w| w.body_bytes_discarded.get()),
            ),
            (
                "peregrine_slow_requests_total",
                "counter",
                "Requests (or HTTP/2 header blocks) ended for arriving slower than the minimum rate or past their timeout.",
                sum(&|w| w.slow_requests.get()),
            ),
            (
                "peregrine_body_budget_refusals_total",
                "counter",
                "Request bodies refused with 503 because the worker's budget for buffered bodies was spent.",
                sum(&|w| w.budget_refusals.get()),
            ),
            (
                "peregrine_connections_refused_per_address_total",
                "counter",
                "Connections closed at accept because their address (IPv6: its /64) had conns_per_ip_max open.",
                sum(&|w| w.conns_refused_per_address.get()),
            ),
            (
                "peregrine_output_budget_waits_total",
                "counter",
                "Times a connection stopped being read because the worker's unsent output was over its budget.",
                sum(&|w| w.output_budget_waits.get()),
            ),
            (
                "peregrine_proxy_protocol_refusals_total",
                "counter",
                "Connections closed unanswered on a PROXY protocol listener: an untrusted source, or a header missing, malformed or late.",
                sum(&|w| w.proxy_refusals.get()),
            ),
            (
                "peregrine_forward_auth_allowed_total",
                "counter",
                "Requests a forward-auth service let through (2xx).",
                sum(&|w| w.forward_auth_allowed.get()),
            ),
            (
                "peregrine_forward_auth_refused_total",
                "counter",
                "Requests a forward-auth service refused (its answer, not 2xx nor 5xx, sent to the client).",
                sum(&|w| w.forward_auth_refused.get()),
            ),
            (
                "peregrine_forward_auth_failed_total",
                "counter",
                "Forward-auth checks that failed: the service down (502), silent (504), full (503) or answering 5xx.",
                sum(&|w| w.forward_auth_failed.get()),
            ),
        ];
        for (name, kind, help, value) in simple {
            head(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
        head(
            &mut out,
            "peregrine_request_duration_seconds",
            "histogram",
            "Time from a request being ready to its response being queued.",
        );
        let mut cumulative = 0u64;
        for (i, bound) in LATENCY_BOUNDS_US.iter().enumerate() {
            cumulative = cumulative.wrapping_add(sum(&|w| w.latency_buckets[i].get()));
            let le = Duration::from_micros(*bound).as_secs_f64();
            let _ = writeln!(
                out,
                "peregrine_request_duration_seconds_bucket{{le=\"{le}\"}} {cumulative}"
            );
        }
        let count = sum(&|w| w.latency_count.get());
        let _ = writeln!(out, "peregrine_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}");
        let seconds = sum(&|w| w.latency_sum_us.get()) as f64 / 1e6;
        let _ = writeln!(out, "peregrine_request_duration_seconds_sum {seconds}");
        let _ = writeln!(out, "peregrine_request_duration_seconds_count {count}");
        head(
            &mut out,
            "peregrine_tls_handshakes_total",
            "counter",
            "TLS handshakes, by result.",
        );
        let ok = sum(&|w| w.tls_handshakes.get());
        let failed = sum(&|w| w.tls_handshake_failures.get());
        let _ = writeln!(out, "peregrine_tls_handshakes_total{{result=\"ok\"}} {ok}");
        let _ = writeln!(out, "peregrine_tls_handshakes_total{{result=\"failed\"}} {failed}");
        head(
            &mut out,
            "peregrine_tls_handshakes_by_kind_total",
            "counter",
            "TLS handshakes completed, full or resumed (a session ticket or id).",
        );
        let resumed = sum(&|w| w.tls_resumed.get());
        let full = ok.saturating_sub(resumed);
        let _ = writeln!(out, "peregrine_tls_handshakes_by_kind_total{{kind=\"full\"}} {full}");
        let _ = writeln!(
            out,
            "peregrine_tls_handshakes_by_kind_total{{kind=\"resumed\"}} {resumed}"
        );
        head(
            &mut out,
            "peregrine_tls_ktls_total",
            "counter",
            "Kernel TLS (kTLS), per process: keys handed to the kernel (enabled), large files kept in user space (fallback), keys refused (failed), and what clients ended kTLS connections with.",
        );
        for event in crate::tls::ktls::Event::ALL {
            let _ = writeln!(
                out,
                "peregrine_tls_ktls_total{{event=\"{}\"}} {}",
                event.label(),
                crate::tls::ktls::counted(event)
            );
        }
        // A worker holds its counters while it runs: those only kept here
        // belong to workers that have finished (after a reload, say), whose
        // counts still add to the totals.
        let running = workers.iter().filter(|w| Arc::strong_count(w) > 1).count();
        head(&mut out, "peregrine_workers", "gauge", "Worker threads running.");
        let _ = writeln!(out, "peregrine_workers {running}");
        head(
            &mut out,
            "peregrine_uptime_seconds",
            "gauge",
            "Seconds since the metrics were made.",
        );
        let _ = writeln!(out, "peregrine_uptime_seconds {}", self.started.elapsed().as_secs());
        // Per site, summed over the workers of every generation by label.
        let mut by_site: Vec<(&str, [u64; 5])> = Vec::new();
        for w in workers.iter() {
            for (label, counts) in w.by_site.iter() {
                let at = match by_site.iter().position(|(l, _)| *l == &**label) {
                    Some(at) => at,
                    None => {
                        by_site.push((label, [0; 5]));
                        by_site.len() - 1
                    }
                };
                for (sum, c) in by_site[at].1.iter_mut().zip(counts) {
                    *sum = sum.wrapping_add(c.get());
                }
            }
        }
        if !by_site.is_empty() {
            head(
                &mut out,
                "peregrine_site_requests_total",
                "counter",
                "Responses sent, by site (its first name) and status class.",
            );
            for (label, counts) in by_site {
                for (class, n) in ["1xx", "2xx", "3xx", "4xx", "5xx"].iter().zip(counts) {
                    let _ = writeln!(
                        out,
                        "peregrine_site_requests_total{{site=\"{}\",class=\"{class}\"}} {n}",
                        label_value(label)
                    );
                }
            }
        }
        render_upstreams(&mut out, &workers);
        let extras = self.extras.lock().unwrap_or_else(|e| e.into_inner());
        for (i, extra) in extras.iter().enumerate() {
            if i == 0 || extras[i - 1].name != extra.name {
                head(&mut out, &extra.name, extra.kind, &extra.help);
            }
            match extra.labels.as_str() {
                "" => writeln!(out, "{} {}", extra.name, (extra.read)()),
                labels => writeln!(out, "{}{{{labels}}} {}", extra.name, (extra.read)()),
            }
            .unwrap_or(());
        }
        out
    }
}

/// The reverse proxy's series, per upstream URL, summed over the workers
/// (of every generation: counters keep growing across a reload; the pool
/// gauges count running workers only, whose connections are open).
fn render_upstreams(out: &mut String, workers: &[Arc<WorkerMetrics>]) {
    struct Sum {
        requests: u64,
        fresh: u64,
        reused: u64,
        failures: [u64; UpstreamFailure::LABELS.len()],
        buckets: [u64; LATENCY_BOUNDS_US.len()],
        sum_us: u64,
        count: u64,
        open: u64,
        idle: u64,
        out: u64,
        ejections: u64,
        checked: Option<bool>,
    }
    let mut by_url: Vec<(Box<str>, Sum)> = Vec::new();
    for w in workers {
        let running = Arc::strong_count(w) > 1;
        for u in w.upstreams.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let at = match by_url.iter().position(|(url, _)| *url == u.url) {
                Some(at) => at,
                None => {
                    by_url.push((
                        u.url.clone(),
                        Sum {
                            requests: 0,
                            fresh: 0,
                            reused: 0,
                            failures: [0; UpstreamFailure::LABELS.len()],
                            buckets: [0; LATENCY_BOUNDS_US.len()],
                            sum_us: 0,
                            count: 0,
                            open: 0,
                            idle: 0,
                            out: 0,
                            ejections: 0,
                            checked: None,
                        },
                    ));
                    by_url.len() - 1
                }
            };
            let s = &mut by_url[at].1;
            s.requests = s.requests.wrapping_add(u.requests.get());
            s.fresh = s.fresh.wrapping_add(u.fresh.get());
            s.reused = s.reused.wrapping_add(u.reused.get());
            for (sum, c) in s.failures.iter_mut().zip(&u.failures) {
                *sum = sum.wrapping_add(c.get());
            }
            for (sum, c) in s.buckets.iter_mut().zip(&u.header_buckets) {
                *sum = sum.wrapping_add(c.get());
            }
            s.sum_us = s.sum_us.wrapping_add(u.header_sum_us.get());
            s.count = s.count.wrapping_add(u.header_count.get());
            s.ejections = s.ejections.wrapping_add(u.ejections.get());
            if running {
                s.open = s.open.wrapping_add(u.open.get());
                s.idle = s.idle.wrapping_add(u.idle.get());
                s.out = s.out.wrapping_add(u.out.get());
                if let Some(flag) = u.checked.get() {
                    s.checked = Some(flag.load(Ordering::Relaxed));
                }
            }
        }
    }
    if by_url.is_empty() {
        return;
    }
    let head = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    head(
        out,
        "peregrine_upstream_requests_total",
        "counter",
        "Requests the reverse proxy handed to an upstream (by its URL as configured).",
    );
    for (url, s) in &by_url {
        let _ = writeln!(
            out,
            "peregrine_upstream_requests_total{{upstream=\"{}\"}} {}",
            label_value(url),
            s.requests
        );
    }
    head(
        out,
        "peregrine_upstream_connection_requests_total",
        "counter",
        "Requests written to an upstream, on a connection opened for them (fresh) or kept alive (reused).",
    );
    for (url, s) in &by_url {
        let url = label_value(url);
        for (kind, n) in [("fresh", s.fresh), ("reused", s.reused)] {
            let _ = writeln!(
                out,
                "peregrine_upstream_connection_requests_total{{upstream=\"{url}\",connection=\"{kind}\"}} {n}"
            );
        }
    }
    head(
        out,
        "peregrine_upstream_failures_total",
        "counter",
        "Requests an upstream failed, by kind: connect, timeout, bad_answer, closed (before the answer's end), queue_full (503, never sent).",
    );
    for (url, s) in &by_url {
        let url = label_value(url);
        for (kind, n) in UpstreamFailure::LABELS.iter().zip(s.failures) {
            let _ = writeln!(
                out,
                "peregrine_upstream_failures_total{{upstream=\"{url}\",kind=\"{kind}\"}} {n}"
            );
        }
    }
    head(
        out,
        "peregrine_upstream_header_duration_seconds",
        "histogram",
        "Time from the start of an upstream exchange (connecting, or writing on a kept-alive connection) to the answer's head.",
    );
    for (url, s) in &by_url {
        let url = label_value(url);
        let mut cumulative = 0u64;
        for (bound, n) in LATENCY_BOUNDS_US.iter().zip(s.buckets) {
            cumulative = cumulative.wrapping_add(n);
            let le = Duration::from_micros(*bound).as_secs_f64();
            let _ = writeln!(
                out,
                "peregrine_upstream_header_duration_seconds_bucket{{upstream=\"{url}\",le=\"{le}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "peregrine_upstream_header_duration_seconds_bucket{{upstream=\"{url}\",le=\"+Inf\"}} {}",
            s.count
        );
        let _ = writeln!(
            out,
            "peregrine_upstream_header_duration_seconds_sum{{upstream=\"{url}\"}} {}",
            s.sum_us as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "peregrine_upstream_header_duration_seconds_count{{upstream=\"{url}\"}} {}",
            s.count
        );
    }
    for (name, help, open) in [
        (
            "peregrine_upstream_connections_open",
            "Connections to an upstream open now (idle or busy), over the workers.",
            true,
        ),
        (
            "peregrine_upstream_connections_idle",
            "Connections to an upstream kept alive and idle now, over the workers.",
            false,
        ),
    ] {
        head(out, name, "gauge", help);
        for (url, s) in &by_url {
            let n = if open { s.open } else { s.idle };
            let _ = writeln!(out, "{name}{{upstream=\"{}\"}} {n}", label_value(url));
        }
    }
    // Health, for the members of a balance (several upstreams on a route).
    if by_url.iter().any(|(_, s)| s.checked.is_some()) {
        head(
            out,
            "peregrine_upstream_healthy",
            "gauge",
            "The active health check's verdict for an upstream: 1 in, 0 out (checked upstreams only).",
        );
        for (url, s) in by_url.iter().filter(|(_, s)| s.checked.is_some()) {
            let up = u64::from(s.checked == Some(true));
            let _ = writeln!(
                out,
                "peregrine_upstream_healthy{{upstream=\"{}\"}} {up}",
                label_value(url)
            );
        }
    }
    head(
        out,
        "peregrine_upstream_out_workers",
        "gauge",
        "Workers that have taken an upstream out of their choice after failures (passive health), as of their last choice.",
    );
    for (url, s) in &by_url {
        let _ = writeln!(
            out,
            "peregrine_upstream_out_workers{{upstream=\"{}\"}} {}",
            label_value(url),
            s.out
        );
    }
    head(
        out,
        "peregrine_upstream_ejections_total",
        "counter",
        "Times a worker took an upstream out of its choice after failures (passive health).",
    );
    for (url, s) in &by_url {
        let _ = writeln!(
            out,
            "peregrine_upstream_ejections_total{{upstream=\"{}\"}} {}",
            label_value(url),
            s.ejections
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_are_summed_and_the_histogram_is_cumulative() {
        let m = Metrics::new();
        let (a, b) = (m.add_worker(std::iter::empty()), m.add_worker(std::iter::empty()));
        a.record(b"GET", 200, 0);
        b.record(b"GET", 404, 0);
        b.record(b"BREW", 501, 3_000_000);
        a.bytes_sent.add(100);
        b.bytes_sent.add(23);
        a.conns_accepted.add(3);
        a.conns_closed.add(1);
        m.gauge("peregrine_archive_generation", "The archive's generation.", || 6);
        m.gauge("peregrine_archive_generation", "The archive's generation.", || 7);
        drop(m.add_worker(std::iter::empty())); // a worker that has finished
        let text = m.render();
        for line in [
            "peregrine_requests_total{class=\"2xx\"} 1",
            "peregrine_requests_total{class=\"4xx\"} 1",
            "peregrine_requests_total{class=\"5xx\"} 1",
            "peregrine_requests_by_method_total{method=\"GET\"} 2",
            "peregrine_requests_by_method_total{method=\"other\"} 1",
            "peregrine_sent_bytes_total 123",
            "peregrine_connections_open 2",
            "peregrine_request_duration_seconds_bucket{le=\"2.5\"} 2",
            "peregrine_request_duration_seconds_bucket{le=\"10\"} 3",
            "peregrine_request_duration_seconds_bucket{le=\"+Inf\"} 3",
            "peregrine_request_duration_seconds_count 3",
            "# TYPE peregrine_archive_generation gauge",
            "peregrine_archive_generation 7",
            "peregrine_workers 2",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        // A gauge added again replaces the first; a finished worker is not counted.
        assert!(!text.contains("peregrine_archive_generation 6"), "{text}");
    }
}
