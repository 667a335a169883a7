//! Socket workers: glommio executors (io_uring, one thread each) that accept
//! connections, run the WebSocket protocol and relay messages.
//!
//! The executors, accept loops, connection limit and TLS handshake are the TCP
//! trackers' shared ones (`shoal_runtime::tcp`); what is WebTorrent's own is here:
//! every connection ([`connection`]) opens with an HTTP request ([`handshake`]), then
//! exchanges WebSocket messages; requests reach swarm workers through the worker's
//! [`router`], and messages from swarm workers come back into each connection's queue.

pub(crate) mod connection;
pub(crate) mod handshake;
pub(crate) mod router;

use std::cell::RefCell;
use std::rc::Rc;

use shoal_common::log_budget::LogBudget;

use self::router::Router;
use crate::tracker::WsTracker;

/// One socket worker's shared state, as its connection tasks see it.
pub(crate) type Worker = shoal_runtime::tcp::Worker<WsTracker>;

/// What the WebTorrent tracker keeps per socket worker besides the shared fields.
#[derive(Debug)]
pub(crate) struct State {
    /// Requests on their way to swarm workers, messages on their way to connections.
    pub(crate) router: Rc<RefCell<Router>>,
    /// Connections closed for a limit of their queue or of the worker's budgets: a
    /// client can provoke these at will, so the log gets a few in a row and then one
    /// now and then (each is counted either way).
    pub(crate) overflow_log: RefCell<LogBudget>,
}

/// Overflow closes logged in a row, then one per [`OVERFLOW_LOG_REFILL`].
pub(crate) const OVERFLOW_LOG_BURST: u32 = 20;
/// See [`OVERFLOW_LOG_BURST`].
pub(crate) const OVERFLOW_LOG_REFILL: std::time::Duration = std::time::Duration::from_secs(10);
