//! Socket workers: own the UDP sockets, turn datagrams into work and send every reply.
//!
//! Each socket worker has its own IPv4 and/or IPv6 socket bound with SO_REUSEPORT to
//! the same address, so the kernel spreads clients over the workers. One round of the
//! loop:
//!
//! 1. wait in `poll` (only a look while there is known work, and not even that while
//!    every socket is known to have more to read; see `shoal_sockets::wait_for_sockets` for why not epoll);
//! 2. read up to [`MAX_READS_PER_ROUND`] datagrams per socket, [`RECV_BATCH`] per
//!    `recvmmsg`, handing them to the [`Dispatcher`]; after each batch, send the jobs
//!    built so far and every reply that is ready, so swarm workers start early and
//!    replies do not wait behind a long burst;
//! 3. send the jobs, the replies swarm workers returned, and merged scrapes, with one
//!    `sendmmsg` per family and batch.
//!
//! A socket is read until it would block, or remembered as still readable if the
//! round's budget ran out. Swarm workers wake a sleeping socket worker through its
//! [`Doorbell`], and only when it is asleep, so under load a reply batch costs no
//! system call beyond its sends.

mod bind;
pub(crate) mod dispatch;
mod outbound;
pub(crate) mod overload;
pub(crate) mod scrapes;

use std::io::ErrorKind;
use std::os::fd::AsRawFd as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use crossbeam_channel::Receiver;
use shoal_common::{AccessControl, Shutdown};
use shoal_sockets::RecvBatch;
use shoal_swarm::Clock;
use shoal_worker::{DropWeigher, LocalSwarm, ReplyRoute, Wake, reply_channel};

pub(crate) use self::bind::bind_socket;
use self::dispatch::Dispatcher;
use self::outbound::{Endpoint, Endpoints, Outbound};
use self::overload::QueueGuard;
pub(crate) use self::overload::QueueSizes;
use crate::messages::{Job, Replies};
use crate::shard::UdpShard;
use shoal_sockets::{Doorbell, Want, wait_for_sockets};

/// Datagrams read from one socket per round before the loop looks at everything else.
const MAX_READS_PER_ROUND: usize = 1024;
/// Datagrams per `recvmmsg`.
const RECV_BATCH: usize = 64;
/// Receive slots are at least this long; any valid announce fits.
const MIN_RECV_SLOT: usize = 2048;

/// The receive slot size for a config: room for a scrape one hash over the limit, so
/// that it still gets a "too many info hashes" reply; longer datagrams are dropped.
pub(crate) fn recv_slot_len(max_scrape_torrents: usize) -> usize {
    (shoal_udp_protocol::HEADER_LEN + 20 * (max_scrape_torrents + 1)).max(MIN_RECV_SLOT)
}

/// The sockets of one worker, one per family in use.
#[derive(Debug, Default)]
pub(crate) struct WorkerSockets {
    /// The IPv4 socket.
    pub(crate) v4: Option<std::net::UdpSocket>,
    /// The IPv6 socket.
    pub(crate) v6: Option<std::net::UdpSocket>,
}

/// The torrents of a socket worker that keeps them itself (`swarm_workers = 0`): its
/// jobs go through a channel to itself and are served at the end of each round.
pub(crate) struct LocalTorrents {
    /// Jobs the dispatcher sent to "swarm worker 0".
    pub(crate) requests: Receiver<Job>,
    /// The torrents.
    pub(crate) swarm: LocalSwarm<UdpShard>,
    /// The access list, for cleaning.
    pub(crate) access: Arc<AccessControl>,
}

/// A socket worker, ready to run on its own thread.
pub(crate) struct SocketWorker {
    doorbell: Arc<Doorbell>,
    endpoints: Endpoints,
    wake: Arc<Wake>,
    returned_jobs: Receiver<Job>,
    local: Option<LocalTorrents>,
    dispatcher: Dispatcher,
    clock: Arc<Clock>,
    shutdown: Shutdown,
    shared_counters: Arc<crate::stats::Stats>,
    index: usize,
    recv: RecvBatch,
    outbound: Outbound,
    /// Jobs back from swarm workers (or the local torrents), to send and recycle.
    ready: Vec<Job>,
    /// Replies made on this thread: connects, errors, merged scrapes.
    own_replies: Replies,
    /// The receive queue of each endpoint, watched for overflow.
    queues: [Option<QueueGuard>; 2],
    /// Each endpoint's kernel drops weighed by what was read around them, for the
    /// adaptive interval.
    drop_weighers: [DropWeigher; 2],
    /// When the queues are looked at next.
    next_queue_check: Instant,
    /// When the worker last stopped waiting for datagrams.
    working_since: Instant,
}

impl std::fmt::Debug for SocketWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketWorker")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// What [`SocketWorker::new`] needs.
pub(crate) struct SocketWorkerParts {
    /// Worker index.
    pub(crate) index: usize,
    /// Its sockets.
    pub(crate) sockets: WorkerSockets,
    /// Jobs swarm workers can have in flight back to it at once.
    pub(crate) reply_capacity: usize,
    /// The torrents, when it keeps them itself.
    pub(crate) local: Option<LocalTorrents>,
    /// Per-datagram logic.
    pub(crate) dispatcher: Dispatcher,
    /// Time source.
    pub(crate) clock: Arc<Clock>,
    /// Shutdown flag.
    pub(crate) shutdown: Shutdown,
    /// Statistics.
    pub(crate) stats: Arc<crate::stats::Stats>,
    /// Limit on queued replies per socket.
    pub(crate) send_queue_len: usize,
    /// Receive slot size (see [`recv_slot_len`]).
    pub(crate) recv_slot_len: usize,
    /// What the receive queues may shrink to, and the limit on growing them back.
    pub(crate) queue_sizes: QueueSizes,
}

impl SocketWorker {
    /// Registers the sockets and creates the channel swarm workers return jobs by.
    pub(crate) fn new(parts: SocketWorkerParts) -> anyhow::Result<(Self, ReplyRoute<Job>)> {
        let doorbell = Arc::new(Doorbell::new().context("cannot create eventfd")?);
        let wake = {
            let doorbell = doorbell.clone();
            Wake::new(move || doorbell.ring())
        };
        let (route, returned_jobs) = reply_channel(parts.reply_capacity, wake.clone());
        let endpoints =
            [parts.sockets.v4, parts.sockets.v6].map(|socket| socket.map(Endpoint::new));
        let queues = endpoints.each_ref().map(|endpoint| {
            endpoint
                .as_ref()
                .map(|e| QueueGuard::new(&e.socket, parts.queue_sizes))
        });
        {
            let doorbell = doorbell.clone();
            parts.shutdown.on_request(move || doorbell.ring());
        }
        let worker = Self {
            doorbell,
            endpoints,
            wake,
            returned_jobs,
            local: parts.local,
            dispatcher: parts.dispatcher,
            clock: parts.clock,
            shutdown: parts.shutdown,
            shared_counters: parts.stats,
            index: parts.index,
            recv: RecvBatch::new(RECV_BATCH, parts.recv_slot_len),
            outbound: Outbound::new(parts.send_queue_len),
            ready: Vec::new(),
            own_replies: Replies::default(),
            queues,
            drop_weighers: Default::default(),
            next_queue_check: Instant::now(),
            working_since: Instant::now(),
        };
        Ok((worker, route))
    }

    /// Runs until shutdown.
    pub(crate) fn run(mut self) -> anyhow::Result<()> {
        let mut last_expiry = self.clock.now();
        while !self.shutdown.is_requested() {
            self.wait()?;
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
            // The torrents kept here are cleaned a slice per round.
            if let Some(local) = &mut self.local {
                local.swarm.clean_if_due(&local.access);
            }
            // Flushing first hands this round's reads to the drop weighers before
            // the check weighs; the drops it counts are flushed the next round.
            self.flush_counters();
            self.check_queues();
        }
        if let Some(local) = &mut self.local {
            local.swarm.finish();
        }
        Ok(())
    }

    /// Learns which sockets have datagrams: sleeps while there is nothing to do, only
    /// looks while there is, and skips even that while every socket is known to have
    /// more to read.
    fn wait(&mut self) -> anyhow::Result<()> {
        let timeout = if self.has_work() {
            let endpoints = self.endpoints.iter().flatten();
            if endpoints.clone().all(|e| e.readable && !e.wants_writable()) {
                return Ok(());
            }
            Duration::ZERO
        } else {
            self.wake.going_to_sleep();
            // A job returned after the check above finds the flag set and rings.
            if self.returned_jobs.is_empty() {
                self.local
                    .as_ref()
                    .map_or(Shutdown::POLL_INTERVAL, |local| {
                        local.swarm.longest_wait(Shutdown::POLL_INTERVAL)
                    })
            } else {
                Duration::ZERO
            }
        };
        let wants = self.endpoints.each_ref().map(|endpoint| {
            endpoint.as_ref().map(|e| Want {
                fd: e.socket.as_raw_fd(),
                writable: e.wants_writable(),
            })
        });
        // The time since the last wait was work: the adaptive interval's busy share.
        let waiting_from = Instant::now();
        self.shared_counters.socket_busy(
            self.index,
            waiting_from.saturating_duration_since(self.working_since),
        );
        let ready = wait_for_sockets(wants, &self.doorbell, timeout).context("poll failed")?;
        self.working_since = Instant::now();
        self.wake.awake();
        for (endpoint, ready) in self.endpoints.iter_mut().zip(ready) {
            if let Some(endpoint) = endpoint {
                endpoint.readable |= ready.readable;
            }
        }
        Ok(())
    }

    fn has_work(&self) -> bool {
        self.endpoints.iter().flatten().any(|e| e.readable)
            || !self.returned_jobs.is_empty()
            || self
                .local
                .as_ref()
                .is_some_and(|local| local.swarm.cleaning())
    }

    /// Reads from the socket in `slot` until it would block or the budget runs out.
    fn read(&mut self, slot: usize) -> anyhow::Result<()> {
        let mut read = 0;
        while read < MAX_READS_PER_ROUND {
            let endpoint = self.endpoints[slot].as_mut().expect("slot in use");
            match self.recv.recv(&endpoint.socket) {
                Ok(count) => {
                    read += count;
                    // Per batch: a reply sent earlier in this round may already have
                    // been answered by a request that must see a later time.
                    let now = self.clock.now();
                    self.dispatcher.batch_read_at = Instant::now();
                    for datagram in self.recv.iter() {
                        let Some(client) = datagram.source else {
                            continue;
                        };
                        if datagram.truncated {
                            self.dispatcher.counters.received += 1;
                            self.dispatcher.counters.received_v6 += u64::from(client.is_ipv6());
                            self.dispatcher.counters.invalid_requests += 1;
                            self.dispatcher.traffic.bytes_received += datagram.bytes.len() as u64;
                            continue;
                        }
                        self.dispatcher.handle_packet(
                            datagram.bytes,
                            client,
                            now,
                            &mut self.own_replies,
                        );
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

    /// Sends the open jobs (serving them here when this worker keeps the torrents),
    /// then every reply that is ready.
    fn hand_off(&mut self) -> anyhow::Result<()> {
        self.dispatcher.flush_jobs(&mut self.own_replies)?;
        if let Some(local) = &mut self.local {
            while let Ok(job) = local.requests.try_recv() {
                local.swarm.handle(job, &mut |_, job| self.ready.push(job));
            }
        }
        self.ready.extend(self.returned_jobs.try_iter());
        // Counters before replies: whoever sees a reply sees what led to it counted.
        self.flush_counters();
        let sending_at = Instant::now();
        for job in &self.ready {
            if let Some(read_at) = job.read_at {
                self.dispatcher.traffic.record_latency(
                    sending_at.saturating_duration_since(read_at),
                    job.replies.packets.len() as u64,
                );
            }
            self.dispatcher
                .merge_scrape_parts(job, &mut self.own_replies);
        }
        // Connect replies, errors and merged scrapes: answered by this worker since
        // the last batch was read.
        self.dispatcher.traffic.record_latency(
            sending_at.saturating_duration_since(self.dispatcher.batch_read_at),
            self.own_replies.packets.len() as u64,
        );
        // Every reply of the round in one `sendmmsg` per family (and 64 packets): each
        // call also wakes the clients' sockets, so fewer calls cost less on both sides.
        self.outbound.send(
            &mut self.endpoints,
            &self.ready,
            &self.own_replies,
            &mut self.dispatcher.counters,
            &mut self.dispatcher.traffic,
        );
        for job in self.ready.drain(..) {
            self.dispatcher.recycle(job);
        }
        self.own_replies.clear();
        Ok(())
    }

    /// Every [`overload::CHECK_INTERVAL`]: counts what the kernel dropped and shrinks
    /// or restores each receive queue ([`overload`]). Every round: stamps this
    /// worker's heartbeat (`shoal_common::heartbeat`) with the same reading of the clock.
    fn check_queues(&mut self) {
        let now = Instant::now();
        self.shared_counters.socket_beat(self.index, now);
        if now < self.next_queue_check {
            return;
        }
        self.next_queue_check = now + overload::CHECK_INTERVAL;
        // Slot 1 is the IPv6 socket (`outbound::Endpoints`).
        for (slot, (endpoint, queue)) in self.endpoints.iter().zip(&mut self.queues).enumerate() {
            if let (Some(endpoint), Some(queue)) = (endpoint, queue) {
                let checked = queue.check(&endpoint.socket, now);
                let demand = self.drop_weighers[slot].weigh(checked.drops);
                let counters = &mut self.dispatcher.counters;
                counters.kernel_drops += checked.drops;
                counters.kernel_drops_demand += demand;
                if slot == 1 {
                    counters.kernel_drops_v6 += checked.drops;
                    counters.kernel_drops_demand_v6 += demand;
                }
                counters.queue_shrinks += u64::from(checked.shrunk);
                counters.queue_restores += u64::from(checked.restored);
            }
        }
    }

    /// Adds what this worker counted into the shared statistics, after handing what
    /// it read to the drop weighers.
    fn flush_counters(&mut self) {
        let counters = &self.dispatcher.counters;
        let v6 = (
            counters.received_v6,
            counters.announce_replies_v6 + counters.shed_v6,
        );
        let all = (counters.received, counters.announce_replies + counters.shed);
        let v4 = (all.0.saturating_sub(v6.0), all.1.saturating_sub(v6.1));
        for (weigher, (read, demand)) in self.drop_weighers.iter_mut().zip([v4, v6]) {
            weigher.note(read, demand);
        }
        self.dispatcher
            .counters
            .flush_into(self.shared_counters.socket(self.index));
        self.dispatcher
            .traffic
            .flush_into(self.shared_counters.traffic(self.index));
    }

    /// Retries replies queued while a send buffer was full.
    fn retry_queued(&mut self) {
        self.outbound.retry_queued(
            &mut self.endpoints,
            &mut self.dispatcher.counters,
            &mut self.dispatcher.traffic,
        );
    }
}
