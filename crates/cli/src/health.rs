//! The health endpoints served on the `--metrics` listener, as Kubernetes
//! names them:
//!
//! - `/livez`: 200 while every worker of the serving generation has
//!   turned its loop within [`LIVE_WITHIN`] or waits for events; 503 once
//!   one is stuck (a handler that never returns, a deadlock). Restart me.
//! - `/readyz`: 200 while the process serves and would go on: listeners
//!   up and the root or archive loaded (a generation has started: a
//!   failure there ends the process), every automatic-HTTPS name holding
//!   its certificate; 503 from the first moment of a drain (SIGTERM, an
//!   upgrade: [`begin_drain`]), before any listener closes, so that a load
//!   balancer stops sending first. Send me traffic.
//! - `/healthz`: what it always was, "the process serves", now an alias
//!   of `/livez` (200 while draining and while certificates are awaited,
//!   as before; 503 for a stuck worker, which it did not see).
//!
//! The state is the process's (statics): the generation serving now,
//! replaced at each reload, and one drain flag.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use peregrine::{Health, Request, Response};

/// A worker whose loop has not turned for this long is stuck (issue 30's
/// 2 s: ten times the longest turn a healthy worker takes under load).
pub(crate) const LIVE_WITHIN: Duration = Duration::from_secs(2);

/// Set at the first moment of a drain; never cleared (a process drains
/// once).
static DRAINING: AtomicBool = AtomicBool::new(false);

/// The generation serving now.
static SERVING: Mutex<Option<Health>> = Mutex::new(None);

/// The process is going away (SIGTERM, SIGINT, or handing its sockets to
/// a new binary): `/readyz` answers 503 from now on. Call it before
/// anything stops accepting.
pub(crate) fn begin_drain() {
    DRAINING.store(true, Ordering::Release);
}

/// Whether [`begin_drain`] was called.
pub(crate) fn is_draining() -> bool {
    DRAINING.load(Ordering::Acquire)
}

/// A generation has started and serves from now on.
pub(crate) fn serving(health: Health) {
    *SERVING.lock().unwrap_or_else(|e| e.into_inner()) = Some(health);
}

fn current() -> Option<Health> {
    SERVING.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// `/livez` (and `/healthz`).
pub(crate) fn livez(_: &Request<'_>) -> Response {
    let Some(health) = current() else {
        return answer(503, "starting\n".into());
    };
    match health.n_stuck(LIVE_WITHIN) {
        0 => answer(200, "ok\n".into()),
        n => answer(
            503,
            format!(
                "stuck: {n} of {} workers did not turn their loop within {} s\n",
                health.n_workers(),
                LIVE_WITHIN.as_secs()
            ),
        ),
    }
}

/// `/readyz`.
pub(crate) fn readyz(_: &Request<'_>) -> Response {
    if is_draining() {
        return answer(503, "draining\n".into());
    }
    let Some(health) = current() else {
        return answer(503, "starting\n".into());
    };
    if health.is_draining() {
        return answer(503, "draining\n".into());
    }
    let waiting = health.waiting_names();
    if !waiting.is_empty() {
        return answer(
            503,
            format!("waiting for the first certificate of {}\n", waiting.join(", ")),
        );
    }
    answer(200, "ok\n".into())
}

fn answer(status: u16, text: String) -> Response {
    Response::text(text)
        .with_status(status)
        .with_header("Cache-Control", "no-store")
}
