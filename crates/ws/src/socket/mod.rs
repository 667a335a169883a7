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

use self::router::Router;
use crate::tracker::WsTracker;

/// One socket worker's shared state, as its connection tasks see it.
pub(crate) type Worker = shoal_runtime::tcp::Worker<WsTracker>;

/// What the WebTorrent tracker keeps per socket worker besides the shared fields.
#[derive(Debug)]
pub(crate) struct State {
    /// Requests on their way to swarm workers, messages on their way to connections.
    pub(crate) router: Rc<RefCell<Router>>,
}
