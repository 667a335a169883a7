//! Socket workers: glommio executors (io_uring, one thread each) that accept
//! connections, parse requests, ask swarm workers, and write responses.
//!
//! Each socket worker has its own listening sockets, bound with SO_REUSEPORT to the
//! same addresses, so the kernel spreads connections over the workers. Inside one,
//! every connection is a task ([`connection`]); requests to swarm workers go through
//! the [`router`]; a reply pump task takes replies off the worker's channel.
//!
//! Replies come back through a [`ReplyInbox`] (see `shoal_common::reply_route`).
//!
//! glommio executors can spin before parking; shoal's never do (the default), so a
//! socket worker and a swarm worker can share a core without burning it.

pub mod connection;
pub mod router;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_channel::Sender;
use shoal_common::executor::{accept_connections, run_executor};
use shoal_common::reply_route::{ReplyInbox, reply_channel};
use shoal_common::tls::TlsConfig;
use shoal_common::{AccessControl, Shutdown};
use shoal_swarm::Clock;

use self::router::{LocalSwarm, Router};
use crate::config::Config;
use crate::messages::{SwarmReply, SwarmRequest};
use crate::stats::{SocketCounters, Stats};

/// How a swarm worker returns replies to one socket worker.
pub type ReplyRoute = shoal_common::reply_route::ReplyRoute<Vec<SwarmReply>>;

/// The listening sockets of one socket worker.
#[derive(Debug, Default)]
pub struct Listeners {
    /// Bound, listening sockets (IPv4 and/or IPv6).
    pub sockets: Vec<std::net::TcpListener>,
}

/// A socket worker, ready to run on its own thread.
#[derive(Debug)]
pub struct SocketWorker {
    pub(crate) index: usize,
    pub(crate) config: Arc<Config>,
    pub(crate) listeners: Listeners,
    pub(crate) swarms: Vec<Sender<Vec<SwarmRequest>>>,
    inbox: ReplyInbox<Vec<SwarmReply>>,
    pub(crate) access: Arc<AccessControl>,
    pub(crate) tls: Option<Arc<TlsConfig>>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) stats: Arc<Stats>,
    pub(crate) shutdown: Shutdown,
    pub(crate) local_swarm: Option<LocalSwarm>,
}

/// What one socket worker's tasks share (executor-local).
pub(crate) struct Local {
    pub(crate) config: Arc<Config>,
    pub(crate) router: Rc<RefCell<Router>>,
    pub(crate) access: Arc<AccessControl>,
    pub(crate) tls: Option<Arc<TlsConfig>>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) counters: RefCell<SocketCounters>,
    pub(crate) connections: Cell<usize>,
    pub(crate) full_scrape: RefCell<connection::FullScrapeCache>,
}

/// Builds a socket worker and the route its swarm workers reply by.
#[allow(clippy::too_many_arguments)]
pub fn socket_worker(
    index: usize,
    config: Arc<Config>,
    listeners: Listeners,
    swarms: Vec<Sender<Vec<SwarmRequest>>>,
    local_swarm: Option<LocalSwarm>,
    access: Arc<AccessControl>,
    tls: Option<Arc<TlsConfig>>,
    clock: Arc<Clock>,
    stats: Arc<Stats>,
    shutdown: Shutdown,
) -> anyhow::Result<(SocketWorker, ReplyRoute)> {
    let capacity = swarms.len() * (config.limits.swarm_queue_len + 1) + 64;
    let (route, inbox) = reply_channel(capacity)?;
    let worker = SocketWorker {
        index,
        config,
        listeners,
        swarms,
        inbox,
        access,
        tls,
        clock,
        stats,
        shutdown,
        local_swarm,
    };
    Ok((worker, route))
}

impl SocketWorker {
    /// Runs the executor on the calling thread until shutdown.
    pub fn run(self) -> anyhow::Result<()> {
        let name = format!("socket-{}", self.index);
        let core = self.config.cpu_pinning.core_for(self.index);
        let io_memory = self.config.limits.io_memory;
        run_executor(&name, core, io_memory, self.serve())
    }

    async fn serve(self) -> anyhow::Result<()> {
        let local = Rc::new(Local {
            router: Rc::new(RefCell::new(Router::new(
                self.index as u16,
                self.swarms,
                self.local_swarm,
            ))),
            config: self.config.clone(),
            access: self.access,
            tls: self.tls,
            clock: self.clock,
            counters: RefCell::new(SocketCounters::default()),
            connections: Cell::new(0),
            full_scrape: RefCell::new(connection::FullScrapeCache::default()),
        });

        for socket in self.listeners.sockets {
            let local = local.clone();
            glommio::spawn_local(accept_connections(socket, move |stream, peer| {
                glommio::spawn_local(connection::run(stream, peer, local.clone())).detach();
            }))
            .detach();
        }

        let router = local.router.clone();
        glommio::spawn_local(
            self.inbox
                .pump(move |batch| router.borrow_mut().deliver(batch)),
        )
        .detach();

        // Flush statistics and watch for shutdown.
        let shared = self.stats.socket(self.index);
        while !self.shutdown.is_requested() {
            glommio::timer::sleep(Shutdown::POLL_INTERVAL).await;
            // With no swarm workers this worker keeps the torrents: it cleans them too.
            if let Some((torrents, peers)) = local.router.borrow_mut().clean_local(&local.access) {
                self.stats.swarm(0).publish(torrents, peers);
            }
            let mut counters = local.counters.borrow_mut();
            counters.shed += std::mem::take(&mut local.router.borrow_mut().shed);
            counters.flush_into(shared);
            shared
                .open_connections
                .store(local.connections.get() as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}
