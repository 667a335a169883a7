//! Socket workers: one executor a thread (epoll by default, glommio on io_uring by
//! choice: `shoal_tcp`'s backends) that accept
//! connections, run the WebSocket protocol and relay messages.
//!
//! The executors, accept loops, connection limit and TLS handshake are the TCP
//! trackers' shared ones (`shoal_tcp`'s `start` and `accept`); what is WebTorrent's own is here:
//! every connection ([`connection`]) opens with an HTTP request ([`handshake`]), then
//! exchanges WebSocket messages; requests reach swarm workers through the worker's
//! [`router`], and messages from swarm workers come back into each connection's queue.
//! [`WsTracker`] is what the shared start-up needs to know of all this.

pub(crate) mod connection;
pub(crate) mod handshake;
pub(crate) mod router;

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use anyhow::Context as _;
use crossbeam_channel::Sender;
use futures_lite::{AsyncRead, AsyncWrite};
use shoal_common::{Config, LogBudget, ReverseProxy as _, SummaryLine};
use shoal_process::{Listening, Reload};
use shoal_tcp::{Place, TcpTracker};
use shoal_worker::{LocalSwarm, shard_capacity};

use self::connection::{refuse, serve};
use self::router::Router;
use crate::config::Ws;
use crate::messages::{Delivery, SwarmRequest};
use crate::origins::Origins;
use crate::shard::{SwarmSettings, WsShard};
use crate::stats::{SharedSocketCounters, SocketTotals, summary};

/// One socket worker, as its connection tasks see it.
pub(crate) type Worker = shoal_tcp::Worker<WsTracker>;

/// What the WebTorrent tracker keeps per socket worker besides the shared fields.
#[derive(Debug)]
pub(crate) struct PerWorker {
    /// Requests on their way to swarm workers, messages on their way to connections.
    pub(crate) router: Rc<RefCell<Router>>,
    /// Connections closed for a limit of their queue or of the worker's budgets: a
    /// client can provoke these at will, so the log gets a few in a row and then one
    /// now and then (each is counted either way).
    pub(crate) overflow_log: RefCell<LogBudget>,
    /// Which Origins may open connections, and how many each holds.
    pub(crate) origins: Arc<Origins>,
    /// The one buffer the worker's connections read into ([`READ_BUFFER`] bytes),
    /// borrowed for one read and what it brought to be served.
    pub(crate) read_buffer: RefCell<Vec<u8>>,
    /// Buffers to write frames into, lent to connections while they have something
    /// to write.
    pub(crate) write_buffers: RefCell<WriteBuffers>,
}

/// Bytes one read takes from a connection at most: an announce with ten offers
/// (about 10 KB) in one read.
pub(crate) const READ_BUFFER: usize = 64 * 1024;

/// A socket worker's spare write buffers. A connection takes one when it has frames
/// to write and gives it back once they are written and nothing more waits, so only
/// connections whose socket is full hold one; a buffer grown past [`KEPT_CAPACITY`]
/// by a burst is not kept.
#[derive(Debug, Default)]
pub(crate) struct WriteBuffers {
    spare: Vec<Vec<u8>>,
}

/// Capacity up to which a returned buffer is kept for reuse.
const KEPT_CAPACITY: usize = 64 * 1024;
/// Spare buffers kept at most (the most connections written in one round, about).
const SPARES: usize = 256;
/// Capacity of a new buffer: a few messages.
const NEW_CAPACITY: usize = 4 * 1024;

impl WriteBuffers {
    /// An empty buffer: a spare, or a new one.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        self.spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(NEW_CAPACITY))
    }

    /// Keeps `buffer` (emptied) for the next connection that writes, within bounds.
    pub(crate) fn give_back(&mut self, mut buffer: Vec<u8>) {
        if buffer.capacity() == 0 || buffer.capacity() > KEPT_CAPACITY || self.spare.len() >= SPARES
        {
            return;
        }
        buffer.clear();
        self.spare.push(buffer);
    }
}

/// Overflow closes logged in a row, then one per [`OVERFLOW_LOG_REFILL`].
pub(crate) const OVERFLOW_LOG_BURST: u32 = 20;
/// See [`OVERFLOW_LOG_BURST`].
pub(crate) const OVERFLOW_LOG_REFILL: std::time::Duration = std::time::Duration::from_secs(10);

/// The WebTorrent tracker as the shared TCP start-up sees it.
#[derive(Debug)]
pub(crate) struct WsTracker;

impl TcpTracker for WsTracker {
    type Kind = Ws;
    type Shard = WsShard;
    type Counters = SharedSocketCounters;
    type PerWorker = PerWorker;
    type PerTracker = Origins;

    const NAME: &'static str = "ws";

    fn io_memory(config: &Config<Ws>) -> usize {
        config.limits.io_memory
    }

    fn per_tracker(config: &Config<Ws>) -> anyhow::Result<(Arc<Origins>, Vec<Reload>)> {
        let network = &config.network;
        let origins = Arc::new(
            Origins::load(&network.origins_path, network.max_connections_per_origin)
                .context("cannot load the origin rules (network.origins_path)")?,
        );
        let reload = origins.clone();
        let reloads = vec![Arc::new(move || reload.reload_and_log(Self::NAME)) as Reload];
        Ok((origins, reloads))
    }

    fn shard(
        config: &Config<Ws>,
        interval: &std::sync::Arc<shoal_worker::AnnounceInterval>,
    ) -> WsShard {
        let settings = SwarmSettings {
            interval: interval.clone(),
            peer_timeout: config.cleaning.peer_timeout,
            offer_lifetime: config.protocol.offer_lifetime,
            max_pending_offers: config.protocol.max_pending_offers,
            clustered: config.cluster.enabled(),
        };
        WsShard::new(settings, shard_capacity(config), rand::make_rng())
    }

    fn summary() -> SummaryLine<SocketTotals> {
        summary
    }

    fn describe(_: &Config<Ws>, tls: bool, addr: SocketAddr) -> Listening {
        let scheme = if tls { "wss" } else { "ws" };
        Listening {
            url: format!("{scheme}://{addr}"),
            note: String::new(),
        }
    }

    fn per_worker(
        index: usize,
        config: &Config<Ws>,
        origins: &Arc<Origins>,
        swarms: Vec<Sender<Vec<SwarmRequest>>>,
        local: Option<LocalSwarm<WsShard>>,
    ) -> PerWorker {
        let limits = &config.limits;
        let router = Router::new(
            index,
            swarms,
            local,
            limits.max_outgoing_bytes_per_worker,
            limits.max_incoming_bytes_per_worker,
        );
        PerWorker {
            router: Rc::new(RefCell::new(router)),
            overflow_log: RefCell::new(LogBudget::new(OVERFLOW_LOG_BURST, OVERFLOW_LOG_REFILL)),
            origins: origins.clone(),
            read_buffer: RefCell::new(vec![0; READ_BUFFER]),
            write_buffers: RefCell::new(WriteBuffers::default()),
        }
    }

    async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S) {
        refuse(stream).await;
    }

    fn exempt(config: &Config<Ws>, peer: std::net::IpAddr) -> bool {
        config.network.proxy_header_from(peer)
    }

    async fn serve<'w, S: AsyncRead + AsyncWrite + Unpin>(
        worker: &'w Worker,
        stream: S,
        peer: SocketAddr,
        deadline: Instant,
        place: Place<'w>,
    ) {
        serve(stream, peer, worker, deadline, place).await;
    }

    fn deliver(worker: &Worker, deliveries: Vec<Delivery>) {
        worker.per_worker.router.borrow_mut().deliver(deliveries);
    }

    fn tick(worker: &Worker) {
        let mut router = worker.per_worker.router.borrow_mut();
        // Leave notices a full queue turned back go out again.
        if router.link.has_waiting() {
            router.flush();
        }
        let shed = router.link.tick(&worker.context.access);
        // What messages relayed by other nodes produced for the torrents kept here.
        let mut relayed = Vec::new();
        if let Some(local) = router.link.local() {
            local.flush_replies(&mut |_, deliveries| relayed.push(deliveries));
        }
        for deliveries in relayed {
            router.deliver(deliveries);
        }
        worker.count(|counters| counters.shed += shed);
        worker.counters.borrow_mut().offers_dropped += router.take_offers_dropped();
        // A gauge: set, not added like the counters flushed after this tick.
        worker
            .context
            .stats
            .socket(worker.index)
            .outgoing_bytes
            .store(router.outgoing_bytes() as u64, Ordering::Relaxed);
        worker
            .context
            .stats
            .socket(worker.index)
            .incoming_bytes
            .store(router.incoming_bytes() as u64, Ordering::Relaxed);
    }
}
