//! Socket workers: glommio executors (io_uring, one thread each) that accept
//! connections, parse requests, ask swarm workers, and write responses.
//!
//! Each socket worker has its own listening sockets, bound with SO_REUSEPORT to the
//! same addresses, so the kernel spreads connections over the workers. Inside one,
//! every connection is a task ([`connection`]); requests to swarm workers go through
//! the [`router`]; a reply pump task takes replies off the worker's channel.
//!
//! Waking: a swarm worker that sends replies writes one byte to the worker's end of a
//! socket pair, but only when the pump has said it is waiting for one (the `waiting`
//! flag, set before the pump checks the channel a last time), so a busy worker costs
//! its swarm workers no system calls.
//!
//! glommio executors can spin before parking; shoal's never do (the default), so a
//! socket worker and a swarm worker can share a core without burning it.

pub mod connection;
pub mod router;

use std::cell::{Cell, RefCell};
use std::io::Write as _;
use std::os::fd::{FromRawFd as _, IntoRawFd as _};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use crossbeam_channel::{Receiver, Sender};
use futures_lite::AsyncReadExt as _;
use glommio::net::{TcpListener, UnixStream};
use glommio::{LocalExecutorBuilder, Placement};
use shoal_common::{AccessControl, Shutdown};
use shoal_swarm::Clock;

use self::router::{LocalSwarm, Router};
use crate::config::Config;
use crate::messages::{SwarmReply, SwarmRequest};
use crate::stats::{SocketCounters, Stats};
use crate::tls::TlsConfig;

/// How a swarm worker returns replies to one socket worker.
#[derive(Debug, Clone)]
pub struct ReplyRoute {
    /// The socket worker's reply channel.
    pub replies: Sender<Vec<SwarmReply>>,
    wake: Arc<WakeSignal>,
}

#[derive(Debug)]
struct WakeSignal {
    waiting: AtomicBool,
    writer: StdUnixStream,
}

impl ReplyRoute {
    /// Wakes the socket worker's reply pump if it is waiting.
    pub fn wake_if_waiting(&self) {
        if self.wake.waiting.swap(false, Ordering::SeqCst) {
            let _ = (&self.wake.writer).write(&[1]);
        }
    }
}

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
    pub(crate) replies: Receiver<Vec<SwarmReply>>,
    wake_reader: StdUnixStream,
    wake: Arc<WakeSignal>,
    pub(crate) access: Arc<AccessControl>,
    pub(crate) tls: Option<Arc<TlsConfig>>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) stats: Arc<Stats>,
    pub(crate) shutdown: Shutdown,
    pub(crate) core: Option<usize>,
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
    let (reply_sender, replies) = crossbeam_channel::bounded(capacity);
    let (wake_reader, writer) =
        StdUnixStream::pair().context("cannot create a wake-up socket pair")?;
    writer
        .set_nonblocking(true)
        .context("cannot make the wake-up socket non-blocking")?;
    let wake = Arc::new(WakeSignal {
        waiting: AtomicBool::new(false),
        writer,
    });
    let core = config.cpu_pinning.core_for(index);
    let route = ReplyRoute {
        replies: reply_sender,
        wake: wake.clone(),
    };
    let worker = SocketWorker {
        index,
        config,
        listeners,
        swarms,
        replies,
        wake_reader,
        wake,
        access,
        tls,
        clock,
        stats,
        shutdown,
        core,
        local_swarm,
    };
    Ok((worker, route))
}

impl SocketWorker {
    /// Runs the executor on the calling thread until shutdown.
    pub fn run(self) -> anyhow::Result<()> {
        let placement = match self.core {
            Some(core) => Placement::Fixed(core),
            None => Placement::Unbound,
        };
        let executor = LocalExecutorBuilder::new(placement)
            .name(&format!("socket-{}", self.index))
            .io_memory(self.config.limits.io_memory)
            .make()
            .map_err(|err| anyhow::anyhow!("cannot start the io_uring executor: {err}"))?;
        executor.run(self.serve())
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
            // SAFETY: the descriptor comes from a listening std socket we own and give up.
            let listener = unsafe { TcpListener::from_raw_fd(socket.into_raw_fd()) };
            let local = local.clone();
            glommio::spawn_local(accept_loop(listener, local)).detach();
        }

        // SAFETY: the descriptor comes from a std UnixStream we own and give up.
        let wake_reader = unsafe { UnixStream::from_raw_fd(self.wake_reader.into_raw_fd()) };
        glommio::spawn_local(reply_pump(
            self.replies,
            wake_reader,
            self.wake,
            local.router.clone(),
        ))
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

async fn accept_loop(listener: TcpListener, local: Rc<Local>) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let peer = match stream.peer_addr() {
                    Ok(peer) => peer,
                    Err(_) => continue,
                };
                glommio::spawn_local(connection::run(stream, peer, local.clone())).detach();
            }
            Err(err) => {
                // EMFILE and friends: back off briefly instead of spinning.
                log::warn!("accept failed: {err}");
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Takes reply batches off the channel and hands them to the router.
async fn reply_pump(
    replies: Receiver<Vec<SwarmReply>>,
    mut wake_reader: UnixStream,
    wake: Arc<WakeSignal>,
    router: Rc<RefCell<Router>>,
) {
    let mut scratch = [0u8; 64];
    loop {
        while let Ok(batch) = replies.try_recv() {
            router.borrow_mut().deliver(batch);
        }
        wake.waiting.store(true, Ordering::SeqCst);
        // A batch sent after the loop above finds `waiting` set and writes a byte.
        if !replies.is_empty() {
            wake.waiting.store(false, Ordering::SeqCst);
            continue;
        }
        match wake_reader.read(&mut scratch).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
