//! A connection's share of its worker's budget for buffered request bodies
//! (`Limits::body_budget_bytes`), for the stream protocols' sessions
//! (HTTP/2, HTTP/3): what the streams hold, the most they may (set by the
//! driver before it feeds the session), and the bodies refused for it.
//! The driver holds `held` against the worker's `BufPool::bodies`
//! (`charge`) after each feed and when the connection ends.

use crate::buffers::BufPool;
use crate::metrics::WorkerMetrics;

/// The 503's reason when the worker's budget for bodies is spent, for
/// every protocol.
pub(crate) const BUDGET_SPENT: &str = "the server is busy: its buffers for request bodies are full; retry later";

/// The reason of a WebSocket's 1013 when a message to assemble does not
/// fit in what the worker's budget leaves (at most 123 bytes: a Close's).
pub(crate) const MESSAGES_SPENT: &str = "the server is busy: its buffers for messages are full; retry later";

/// See the module's documentation.
pub(crate) struct BodyBudget {
    /// Bytes of request bodies the streams hold buffered.
    pub(crate) held: usize,
    /// The most they may come to: what the worker's budget leaves.
    room: usize,
    /// Bodies refused (503) since the driver last counted them.
    refused: u64,
    /// `held` as last charged to the worker.
    charged: usize,
}

impl Default for BodyBudget {
    fn default() -> Self {
        BodyBudget {
            held: 0,
            room: usize::MAX,
            refused: 0,
            charged: 0,
        }
    }
}

impl BodyBudget {
    /// Whether `more` bytes may be buffered; if not, counts a refusal.
    pub(crate) fn admits(&mut self, more: usize) -> bool {
        let fits = self.held + more <= self.room;
        if !fits {
            self.refused += 1;
        }
        fits
    }

    /// Before feeding the session: how much the worker's budget leaves it
    /// (`budget` less what the other connections hold).
    pub(crate) fn set_room(&mut self, pool: &BufPool, budget: usize) {
        let others = pool.bodies - self.charged;
        self.room = budget.saturating_sub(others);
    }

    /// After feeding or answering: holds what the streams hold against
    /// the worker, and counts the refusals.
    pub(crate) fn charge(&mut self, pool: &mut BufPool, metrics: Option<&WorkerMetrics>) {
        pool.bodies = pool.bodies - self.charged + self.held;
        self.charged = self.held;
        let refused = std::mem::take(&mut self.refused);
        if let (true, Some(m)) = (refused > 0, metrics) {
            m.budget_refusals.add(refused);
        }
    }

    /// The connection is gone: what it held goes back to the worker.
    pub(crate) fn release(&mut self, pool: &mut BufPool) {
        pool.bodies -= std::mem::take(&mut self.charged);
    }
}
