//! Socket workers: own the UDP sockets, turn datagrams into work and send every reply.
//!
//! Each socket worker has its own IPv4 and/or IPv6 socket bound with SO_REUSEPORT to
//! the same address, so the kernel spreads clients over the workers. One round of the
//! loop:
//!
//! 1. wait in `epoll` (skipped while there is known work);
//! 2. read up to [`MAX_READS_PER_ROUND`] datagrams per socket, handing them to the
//!    [`Dispatcher`]; every [`MAX_JOB_REQUESTS`] datagrams, send the jobs built so far
//!    and the replies that came back, so swarm workers start early and replies do not
//!    wait behind a long burst;
//! 3. send the jobs, the replies swarm workers returned, and merged scrapes.
//!
//! Sockets are edge-triggered: a socket is read until it would block, or remembered as
//! still readable if the round's budget ran out. Swarm workers wake a sleeping socket
//! worker through a [`mio::Waker`], and only when it is asleep, so under load a reply
//! batch costs no system call beyond its sends.

mod bind;
pub mod dispatch;
pub mod scrapes;

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use crossbeam_channel::{Receiver, Sender};
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token, Waker};
use shoal_common::Shutdown;
use shoal_swarm::Clock;

pub use self::bind::bind_socket;
use self::dispatch::Dispatcher;
use crate::messages::{Job, MAX_JOB_REQUESTS, Replies, ReplyKind};
use crate::stats::SocketCounters;

/// Datagrams read from one socket per round before the loop looks at everything else.
pub const MAX_READS_PER_ROUND: usize = 1024;
/// Largest datagram read in full; longer ones are truncated (and then fail to parse or
/// lose trailing options). A 255-hash scrape is 5116 bytes.
const RECV_BUFFER_LEN: usize = 8192;

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

/// One family's socket with its readiness and queued replies.
struct Endpoint {
    socket: UdpSocket,
    token: Token,
    /// Not yet read to `WouldBlock` since its last readiness event.
    readable: bool,
    /// Replies waiting for room in the kernel's send buffer.
    queue: VecDeque<(SocketAddr, Vec<u8>, ReplyKind)>,
    /// Whether epoll reports writability (wanted only while `queue` is non-empty).
    watching_writable: bool,
}

/// A socket worker, ready to run on its own thread.
pub struct SocketWorker {
    poll: Poll,
    endpoints: [Option<Endpoint>; 2],
    wake: Arc<WakeSignal>,
    returned_jobs: Receiver<Job>,
    dispatcher: Dispatcher,
    clock: Arc<Clock>,
    shutdown: Shutdown,
    shared_counters: Arc<crate::stats::Stats>,
    index: usize,
    send_queue_len: usize,
    recv_buffer: Vec<u8>,
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
                endpoints[slot] = Some(Endpoint {
                    socket,
                    token,
                    readable: true,
                    queue: VecDeque::new(),
                    watching_writable: false,
                });
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
            send_queue_len: parts.send_queue_len,
            recv_buffer: vec![0; RECV_BUFFER_LEN],
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
        for count in 1..=MAX_READS_PER_ROUND {
            let endpoint = self.endpoints[slot].as_mut().expect("slot in use");
            match endpoint.socket.recv_from(&mut self.recv_buffer) {
                Ok((len, client)) => {
                    self.dispatcher.handle_packet(
                        &self.recv_buffer[..len],
                        client,
                        now,
                        &mut self.local,
                    );
                }
                Err(err) if err.kind() == ErrorKind::WouldBlock => {
                    endpoint.readable = false;
                    return Ok(());
                }
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(err) => {
                    // E.g. ECONNREFUSED left by an ICMP error for an earlier reply.
                    log::debug!("recv_from failed: {err}");
                }
            }
            if count % MAX_JOB_REQUESTS == 0 {
                self.hand_off()?;
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
            self.send_all(&job.replies);
            self.dispatcher.finish_job(job, &mut self.local);
        }
        let local = std::mem::take(&mut self.local);
        self.send_all(&local);
        self.local = local;
        self.local.clear();
        Ok(())
    }

    /// Sends every packet of `replies`.
    fn send_all(&mut self, replies: &Replies) {
        for (bytes, packet) in replies.iter_packets() {
            send(
                &mut self.endpoints,
                &mut self.dispatcher.counters,
                self.send_queue_len,
                packet.client,
                bytes,
                packet.kind,
            );
        }
    }

    /// Retries replies queued while a send buffer was full.
    fn retry_queued(&mut self) {
        for endpoint in self.endpoints.iter_mut().flatten() {
            while let Some((client, bytes, kind)) = endpoint.queue.front() {
                match endpoint.socket.send_to(bytes, *client) {
                    Ok(_) => count_reply(&mut self.dispatcher.counters, *kind),
                    Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => self.dispatcher.counters.send_failures += 1,
                }
                endpoint.queue.pop_front();
            }
            // Ask epoll for writability exactly while replies wait for it.
            let want_writable = !endpoint.queue.is_empty();
            if want_writable != endpoint.watching_writable {
                let interest = if want_writable {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                if self
                    .poll
                    .registry()
                    .reregister(&mut endpoint.socket, endpoint.token, interest)
                    .is_ok()
                {
                    endpoint.watching_writable = want_writable;
                }
            }
        }
    }
}

/// Sends one reply over the socket of the client's family, queueing it if the kernel's
/// buffer is full.
fn send(
    endpoints: &mut [Option<Endpoint>; 2],
    counters: &mut SocketCounters,
    queue_len: usize,
    client: SocketAddr,
    bytes: &[u8],
    kind: ReplyKind,
) {
    let slot = usize::from(client.is_ipv6());
    let Some(endpoint) = endpoints[slot].as_mut() else {
        counters.send_failures += 1;
        return;
    };
    if endpoint.queue.is_empty() {
        match endpoint.socket.send_to(bytes, client) {
            Ok(_) => {
                count_reply(counters, kind);
                return;
            }
            Err(err) if err.kind() == ErrorKind::WouldBlock => {}
            Err(err) => {
                log::debug!("send_to {client} failed: {err}");
                counters.send_failures += 1;
                return;
            }
        }
    }
    if endpoint.queue.len() < queue_len {
        endpoint.queue.push_back((client, bytes.to_vec(), kind));
    } else {
        counters.send_failures += 1;
    }
}

fn count_reply(counters: &mut SocketCounters, kind: ReplyKind) {
    match kind {
        ReplyKind::Connect => counters.connect_replies += 1,
        ReplyKind::Announce => counters.announce_replies += 1,
        ReplyKind::Scrape => counters.scrape_replies += 1,
        ReplyKind::Error => counters.error_replies += 1,
    }
}
