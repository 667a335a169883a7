//! Socket workers: one executor a thread (epoll by default, glommio on io_uring by
//! choice: `shoal_tcp`'s backends) that accept
//! connections, parse requests, ask swarm workers, and write responses.
//!
//! The executors, accept loops, connection limit and TLS handshake are the TCP
//! trackers' shared ones (`shoal_tcp`'s `start` and `accept`); what is HTTP's own is here: each
//! connection ([`connection`]) drives its [`Session`](crate::session::Session), and
//! requests for swarm workers go through the worker's [`router`], which batches them
//! and matches replies to the calls waiting for them. [`HttpTracker`] is what the
//! shared start-up needs to know of all this.

pub(crate) mod connection;
pub(crate) mod router;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Sender;
use futures_lite::{AsyncRead, AsyncWrite};
use shoal_common::{Config, ReverseProxy as _, SummaryLine};
use shoal_process::{Listening, Reload};
use shoal_swarm::{Restored, ServerTime};
use shoal_tcp::{Place, TcpTracker};
use shoal_worker::{LocalSwarm, Snapshot, restore_shard};

use self::connection::{exchange, refuse};
use self::router::Router;
use crate::config::Http;
use crate::messages::{SwarmReply, SwarmRequest};
use crate::session::FullScrapeCache;
use crate::shard::HttpShard;
use crate::stats::{SharedSocketCounters, SocketTotals, summary};

/// One socket worker, as its connection tasks see it.
pub(crate) type Worker = shoal_tcp::Worker<HttpTracker>;

/// What the HTTP tracker keeps per socket worker besides the shared fields.
#[derive(Debug)]
pub(crate) struct PerWorker {
    /// Requests on their way to swarm workers and their replies.
    pub(crate) router: Rc<RefCell<Router>>,
    /// The last full scrape.
    pub(crate) full_scrape: RefCell<FullScrapeCache>,
}

/// The HTTP tracker as the shared TCP start-up sees it.
#[derive(Debug)]
pub(crate) struct HttpTracker;

impl TcpTracker for HttpTracker {
    type Kind = Http;
    type Shard = HttpShard;
    type Counters = SharedSocketCounters;
    type PerWorker = PerWorker;
    type PerTracker = ();

    const NAME: &'static str = "http";

    fn io_memory(config: &Config<Http>) -> usize {
        config.limits.io_memory
    }

    fn shard(
        config: &Config<Http>,
        interval: &std::sync::Arc<shoal_worker::AnnounceInterval>,
    ) -> HttpShard {
        HttpShard::new(shoal_worker::shard_map(config), config.cluster.enabled())
            .with_interval(interval.clone())
    }

    fn restore(
        shard: &mut HttpShard,
        snapshot: &Snapshot,
        now: ServerTime,
        index: usize,
        shards: usize,
    ) -> Restored {
        restore_shard(&mut shard.torrents, snapshot, now, index, shards)
    }

    fn finish(worker: &Worker) {
        if let Some(local) = worker.per_worker.router.borrow_mut().link.local() {
            local.finish();
        }
    }

    fn summary() -> SummaryLine<SocketTotals> {
        summary
    }

    fn describe(config: &Config<Http>, tls: bool, addr: SocketAddr) -> Listening {
        let scheme = if tls { "https" } else { "http" };
        let path = &config.protocol.announce_path;
        Listening {
            url: format!("{scheme}://{addr}"),
            note: format!("announce at {scheme}://{addr}{path}"),
        }
    }

    fn per_tracker(_: &Config<Http>) -> anyhow::Result<(Arc<()>, Vec<Reload>)> {
        Ok((Arc::new(()), Vec::new()))
    }

    fn per_worker(
        index: usize,
        _: &Config<Http>,
        _: &Arc<()>,
        swarms: Vec<Sender<Vec<SwarmRequest>>>,
        local: Option<LocalSwarm<HttpShard>>,
    ) -> PerWorker {
        PerWorker {
            router: Rc::new(RefCell::new(Router::new(index, swarms, local))),
            full_scrape: RefCell::default(),
        }
    }

    async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S) {
        refuse(stream).await;
    }

    async fn serve<'w, S: AsyncRead + AsyncWrite + Unpin>(
        worker: &'w Worker,
        stream: S,
        peer: SocketAddr,
        _: Instant,
        place: Place<'w>,
    ) {
        exchange(stream, peer, worker, place).await;
    }

    fn exempt(config: &Config<Http>, peer: std::net::IpAddr) -> bool {
        config.network.proxy_header_from(peer)
    }

    fn deliver(worker: &Worker, replies: Vec<SwarmReply>) {
        worker.per_worker.router.borrow_mut().deliver(replies);
    }

    fn tick(worker: &Worker) {
        let shed = worker
            .per_worker
            .router
            .borrow_mut()
            .link
            .tick(&worker.context.access);
        worker.count(|counters| counters.shed += shed);
    }
}
