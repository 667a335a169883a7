//! Socket workers: glommio executors (io_uring, one thread each) that accept
//! connections, parse requests, ask swarm workers, and write responses.
//!
//! The executors, accept loops, connection limit and TLS handshake are the TCP
//! trackers' shared ones (`shoal_runtime::tcp`); what is HTTP's own is here: each
//! connection ([`connection`]) drives its [`Session`](crate::session::Session), and
//! requests for swarm workers go through the worker's [`router`], which batches them
//! and matches replies to the calls waiting for them.

pub(crate) mod connection;
pub(crate) mod router;

use std::cell::RefCell;
use std::rc::Rc;

use self::router::Router;
use crate::session::FullScrapeCache;
use crate::tracker::HttpTracker;

/// One socket worker's shared state, as its connection tasks see it.
pub(crate) type Worker = shoal_runtime::tcp::Worker<HttpTracker>;

/// What the HTTP tracker keeps per socket worker besides the shared fields.
#[derive(Debug)]
pub(crate) struct State {
    /// Requests on their way to swarm workers and their replies.
    pub(crate) router: Rc<RefCell<Router>>,
    /// The last full scrape.
    pub(crate) full_scrape: RefCell<FullScrapeCache>,
}
