//! Socket workers: own the UDP sockets, turn datagrams into work and send every reply.
//!
//! Each socket worker has its own IPv4 and/or IPv6 socket bound with SO_REUSEPORT to
//! the same address, so the kernel spreads clients over the workers. One round of the
//! loop:
//!
//! 1. wait in `epoll` (skipped while there is known work);
//! 2. read up to [`MAX_READS_PER_ROUND`] datagrams per socket, [`RECV_BATCH`] per
//!    `recvmmsg`, handing them to the [`Dispatcher`]; after each batch, send the jobs
//!    built so far and every reply that is ready, so swarm workers start early and
//!    replies do not wait behind a long burst;
//! 3. send the jobs, the replies swarm workers returned, and merged scrapes, with one
//!    `sendmmsg` per family and batch.
//!
//! Sockets are edge-triggered: a socket is read until it would block, or remembered as
//! still readable if the round's budget ran out. Swarm workers wake a sleeping socket
//! worker through a [`mio::Waker`], and only when it is asleep, so under load a reply
//! batch costs no system call beyond its sends.

mod bind;
pub mod dispatch;
mod outbound;
pub mod scrapes;

use std::io::ErrorKind;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use crossbeam_channel::{Receiver, Sender};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};
use shoal_common::Shutdown;
use shoal_common::udp_batch::RecvBatch;
use shoal_swarm::Clock;

pub use self::bind::bind_socket;
use self::dispatch::Dispatcher;
use self::outbound::{Endpoint, Endpoints, Outbound};
use crate::messages::{Job, Replies};

/// Datagrams read from one socket per round before the loop looks at everything else.
pub const MAX_READS_PER_ROUND: usize = 1024;
/// Datagrams per `recvmmsg`.
pub const RECV_BATCH: usize = 64;
/// Receive slots are at least this long; any valid announce fits.
const MIN_RECV_SLOT: usize = 2048;

/// The receive slot size for a config: room for a scrape one hash over the limit, so
/// that it still gets a "too many info hashes" reply; longer datagrams are dropped.
pub fn recv_slot_len(max_scrape_torrents: usize) -> usize {
    (shoal_udp_protocol::HEADER_LEN + 20 * (max_scrape_torrents + 1)).max(MIN_RECV_SLOT)
}

const V4: Token = Token(0);
const V6: Token = Token(1);
const WAKE: Token = Token(2);

/// Lets swarm workers wake a socket worker that waits in `epoll`.
#[derive(Debug)]
pub struct WakeSignal {
    sleeping: AtomicBool,
    waker: Waker,
}

/// How a swarm worker returns jobs to one socket worker.
#[derive(Debug, Clone)]
pub struct ReplyRoute {
    /// The socket worker's channel of returned jobs.
    pub jobs: Sender<Job>,
    /// Its wake-up signal.
    pub wake: Arc<WakeSignal>,
}

impl ReplyRoute {
    /// Wakes the socket worker if it is waiting in `epoll`.
    pub fn wake_if_sleeping(&self) {
        if self.wake.sleeping.swap(false, Ordering::SeqCst) {
            let _ = self.wake.waker.wake();
        }
    }
}

/// The sockets of one worker, one per family in use.
#[derive(Debug, Default)]
pub struct WorkerSockets {
    /// The IPv4 socket.
    pub v4: Option<std::net::UdpSocket>,
    /// The IPv6 socket.
    pub v6: Option<std::net::UdpSocket>,
}

/// A socket worker, ready to run on its own thread.
pub struct SocketWorker {
    poll: Poll,
    endpoints: Endpoints,
    wake: Arc<WakeSignal>,
    returned_jobs: Receiver<Job>,
    dispatcher: Dispatcher,
    clock: Arc<Clock>,
    shutdown: Shutdown,
    shared_counters: Arc<crate::stats::Stats>,
    index: usize,
    recv: RecvBatch,
    outbound: Outbound,
    /// Replies made on this thread: connects, errors, merged scrapes.
    local: Replies,
}

impl std::fmt::Debug for SocketWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketWorker")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// What [`SocketWorker::new`] needs.
#[derive(Debug)]
pub struct SocketWorkerParts {
    /// Worker index.
    pub index: usize,
    /// Its sockets.
    pub sockets: WorkerSockets,
    /// Where swarm workers return its jobs.
    pub returned_jobs: Receiver<Job>,
    /// Per-datagram logic.
    pub dispatcher: Dispatcher,
    /// Time source.
    pub clock: Arc<Clock>,
    /// Shutdown flag.
    pub shutdown: Shutdown,
    /// Statistics.
    pub stats: Arc<crate::stats::Stats>,
    /// Limit on queued replies per socket.
    pub send_queue_len: usize,
    /// Receive slot size (see [`recv_slot_len`]).
    pub recv_slot_len: usize,
}

impl SocketWorker {
    /// Registers the sockets and creates the wake-up signal.
    pub fn new(parts: SocketWorkerParts) -> anyhow::Result<(Self, Arc<WakeSignal>)> {
        let poll = Poll::new().context("cannot create epoll instance")?;
        let waker = Waker::new(poll.registry(), WAKE).context("cannot create waker")?;
        let wake = Arc::new(WakeSignal {
            sleeping: AtomicBool::new(false),
            waker,
        });
        let mut endpoints = [None, None];
        for (slot, socket, token) in [(0, parts.sockets.v4, V4), (1, parts.sockets.v6, V6)] {
            if let Some(socket) = socket {
                let mut socket = UdpSocket::from_std(socket);
                poll.registry()
                    .register(&mut socket, token, Interest::READABLE)
                    .context("cannot register socket with epoll")?;
                endpoints[slot] = Some(Endpoint::new(socket, token));
            }
        }
        let shutdown_wake = wake.clone();
        parts.shutdown.on_request(move || {
            let _ = shutdown_wake.waker.wake();
        });
        let worker = Self {
            poll,
            endpoints,
            wake: wake.clone(),
            returned_jobs: parts.returned_jobs,
            dispatcher: parts.dispatcher,
            clock: parts.clock,
            shutdown: parts.shutdown,
            shared_counters: parts.stats,
            index: parts.index,
            recv: RecvBatch::new(RECV_BATCH, parts.recv_slot_len),
            outbound: Outbound::new(parts.send_queue_len),
            local: Replies::default(),
        };
        Ok((worker, wake))
    }

    /// Runs until shutdown.
    pub fn run(mut self) -> anyhow::Result<()> {
        let mut events = Events::with_capacity(16);
        let mut last_expiry = self.clock.now();
        while !self.shutdown.is_requested() {
            let timeout = if self.has_work() {
                Duration::ZERO
            } else {
                self.wake.sleeping.store(true, Ordering::SeqCst);
                // A job returned after the check above finds `sleeping` set and wakes us.
                if self.returned_jobs.is_empty() {
                    Shutdown::POLL_INTERVAL
                } else {
                    Duration::ZERO
                }
            };
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(err) => return Err(err).context("epoll failed"),
            }
            self.wake.sleeping.store(false, Ordering::SeqCst);
            for event in &events {
                for endpoint in self.endpoints.iter_mut().flatten() {
                    if event.token() == endpoint.token && event.is_readable() {
                        endpoint.readable = true;
                    }
                }
            }

            for slot in 0..2 {
                if self.endpoints[slot].as_ref().is_some_and(|e| e.readable) {
                    self.read(slot)?;
                }
            }
            self.hand_off()?;
            self.retry_queued();

            let now = self.clock.now();
            if now != last_expiry {
                self.dispatcher.counters.scrapes_timed_out +=
                    self.dispatcher.scrapes.expire(now) as u64;
                last_expiry = now;
            }
            self.dispatcher
                .counters
                .flush_into(self.shared_counters.socket(self.index));
        }
        Ok(())
    }

    fn has_work(&self) -> bool {
        self.endpoints.iter().flatten().any(|e| e.readable) || !self.returned_jobs.is_empty()
    }

    /// Reads from the socket in `slot` until it would block or the budget runs out.
    fn read(&mut self, slot: usize) -> anyhow::Result<()> {
        let now = self.clock.now();
        let mut read = 0;
        while read < MAX_READS_PER_ROUND {
            let endpoint = self.endpoints[slot].as_mut().expect("slot in use");
            match self.recv.recv(&endpoint.socket) {
                Ok(count) => {
                    read += count;
                    for datagram in self.recv.iter() {
                        let Some(client) = datagram.source else {
                            continue;
                        };
                        if datagram.truncated {
                            self.dispatcher.counters.received += 1;
                            self.dispatcher.counters.invalid_requests += 1;
                            continue;
                        }
                        self.dispatcher
                            .handle_packet(datagram.bytes, client, now, &mut self.local);
                    }
                    self.hand_off()?;
                }
                Err(err) if err.kind() == ErrorKind::WouldBlock => {
                    endpoint.readable = false;
                    return Ok(());
                }
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(err) => {
                    // E.g. ECONNREFUSED left by an ICMP error for an earlier reply;
                    // reading again returns the next datagram.
                    log::debug!("recvmmsg failed: {err}");
                    read += 1;
                }
            }
        }
        Ok(())
    }

    /// Sends the open jobs, then every reply that is ready.
    fn hand_off(&mut self) -> anyhow::Result<()> {
        self.dispatcher
            .flush_jobs()
            .map_err(|_| anyhow::anyhow!("a swarm worker is gone"))?;
        while let Ok(job) = self.returned_jobs.try_recv() {
            self.outbound.send(
                &mut self.endpoints,
                &job.replies,
                &mut self.dispatcher.counters,
            );
            self.dispatcher.finish_job(job, &mut self.local);
        }
        self.outbound.send(
            &mut self.endpoints,
            &self.local,
            &mut self.dispatcher.counters,
        );
        self.local.clear();
        Ok(())
    }

    /// Retries replies queued while a send buffer was full.
    fn retry_queued(&mut self) {
        self.outbound.retry_queued(
            &mut self.endpoints,
            self.poll.registry(),
            &mut self.dispatcher.counters,
        );
    }
}
