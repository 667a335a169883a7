//! Socket workers: glommio executors (io_uring, one thread each) that accept
//! connections, run the WebSocket protocol and relay messages.
//!
//! Each socket worker has its own listening sockets, bound with SO_REUSEPORT to the
//! same addresses, so the kernel spreads connections over the workers. Inside one,
//! every connection is a task ([`connection`]) that opens with an HTTP request
//! ([`handshake`]); requests reach swarm workers through the [`router`], and messages
//! from swarm workers come back through a reply inbox
//! (`shoal_common::reply_route`) into each connection's queue.

pub mod connection;
pub mod handshake;
pub(crate) mod io;
pub mod router;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_channel::Sender;
use shoal_common::executor::{accept_connections, run_executor};
use shoal_common::reply_route::{ReplyInbox, ReplyRoute, reply_channel};
use shoal_common::tls::TlsConfig;
use shoal_common::{AccessControl, Shutdown};
use shoal_swarm::Clock;

use self::router::{LocalSwarm, Router};
use crate::config::Config;
use crate::messages::{Delivery, SwarmRequest};
use crate::stats::{SocketCounters, Stats};

/// The listening sockets of one socket worker.
#[derive(Debug, Default)]
pub struct Listeners {
    /// Bound, listening sockets (IPv4 and/or IPv6).
    pub sockets: Vec<std::net::TcpListener>,
}

/// A socket worker, ready to run on its own thread.
#[derive(Debug)]
pub struct SocketWorker {
    index: usize,
    config: Arc<Config>,
    listeners: Listeners,
    swarms: Vec<Sender<Vec<SwarmRequest>>>,
    inbox: ReplyInbox<Vec<Delivery>>,
    access: Arc<AccessControl>,
    tls: Option<Arc<TlsConfig>>,
    clock: Arc<Clock>,
    stats: Arc<Stats>,
    shutdown: Shutdown,
    local_swarm: Option<LocalSwarm>,
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
}

/// What a socket worker needs besides its sockets.
#[derive(Debug)]
pub struct SocketWorkerParts {
    /// The config.
    pub config: Arc<Config>,
    /// The swarm workers' request channels (empty when `local_swarm` is set).
    pub swarms: Vec<Sender<Vec<SwarmRequest>>>,
    /// The torrents, when this worker keeps them itself.
    pub local_swarm: Option<LocalSwarm>,
    /// The access list.
    pub access: Arc<AccessControl>,
    /// TLS, when serving wss.
    pub tls: Option<Arc<TlsConfig>>,
    /// The clock.
    pub clock: Arc<Clock>,
    /// Statistics.
    pub stats: Arc<Stats>,
    /// The shutdown flag.
    pub shutdown: Shutdown,
}

/// Builds socket worker `index` and the route swarm workers reach it by.
pub fn socket_worker(
    index: usize,
    listeners: Listeners,
    parts: SocketWorkerParts,
) -> anyhow::Result<(SocketWorker, ReplyRoute<Vec<Delivery>>)> {
    let capacity = parts.swarms.len() * (parts.config.limits.swarm_queue_len + 1) + 64;
    let (route, inbox) = reply_channel(capacity)?;
    let worker = SocketWorker {
        index,
        config: parts.config,
        listeners,
        swarms: parts.swarms,
        inbox,
        access: parts.access,
        tls: parts.tls,
        clock: parts.clock,
        stats: parts.stats,
        shutdown: parts.shutdown,
        local_swarm: parts.local_swarm,
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

        // Flush statistics, retry held-back requests, clean local torrents, and watch
        // for shutdown.
        let shared = self.stats.socket(self.index);
        while !self.shutdown.is_requested() {
            glommio::timer::sleep(Shutdown::POLL_INTERVAL).await;
            let mut router = local.router.borrow_mut();
            if router.has_waiting() {
                router.flush();
            }
            if let Some((torrents, peers)) = router.clean_local(&local.access) {
                self.stats.swarm(0).publish(torrents, peers);
            }
            let mut counters = local.counters.borrow_mut();
            counters.shed += std::mem::take(&mut router.shed);
            counters.flush_into(shared);
            shared
                .open_connections
                .store(local.connections.get() as u64, Ordering::Relaxed);
        }
        Ok(())
    }
}
