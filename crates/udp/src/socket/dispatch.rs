//! What a socket worker does with each datagram, apart from the socket itself.
//!
//! Connect requests are answered here. Announces and scrapes are checked (connection
//! id, access list, size) and appended to the open [`Job`] of the swarm worker that owns
//! the info hash; [`Dispatcher::flush_jobs`] sends the jobs. A scrape spanning several
//! swarm workers is split and registered in [`PendingScrapes`] to be merged.
//!
//! Nothing here blocks: when a swarm worker's queue is full the job is dropped and its
//! requests counted as shed. Clients retry; a tracker that stalled its socket workers
//! instead would drop everything, connects included.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Sender;
use shoal_common::{AccessControl, ClientRules, Traffic};
use shoal_private::{
    Accounts, ClientAnnounce, Event as LedgerEvent, KeyPlaces, Passkey, Registry, Sessions,
};
use shoal_swarm::{AnnounceEvent, PeerAddress, PeerLimits, ServerTime};
use shoal_udp_protocol::response::{write_announce_header, write_connect, write_error};
use shoal_udp_protocol::{AnnounceRequest, Request, ScrapeRequest, TransactionId};
use shoal_worker::{
    AnnounceInterval, Family, Outboxes, RateTable, ScrapeSplit, Sent, SwarmWorkerGone, Verdict,
    shard_for,
};

use crate::config::Config;
use crate::connection_id::ConnectionIds;
use crate::messages::{
    AnnounceWork, Job, MAX_JOB_REQUESTS, Replies, ReplyKind, RequestKind, ScrapeHash, SwarmRequest,
};
use crate::socket::scrapes::PendingScrapes;
use crate::stats::SocketCounters;

/// Jobs kept for reuse beyond those in flight.
const POOL_SIZE: usize = 64;

/// Error reply text for a refused info hash.
pub(crate) const NOT_ALLOWED: &str = "info hash not allowed";

/// Error reply to a scrape on a private tracker: a UDP scrape has no room for a key
/// (BEP 41 options follow announces only), so it could reveal any torrent's counts.
pub(crate) const PRIVATE_SCRAPE: &str = "scrape needs a passkey: scrape over HTTP";

/// Private mode's part of a dispatcher.
#[derive(Debug)]
struct PrivateGate {
    registry: Arc<Registry>,
    /// The clients of each user in each torrent: the peer cap, the minimum interval.
    sessions: Option<Arc<Sessions>>,
    /// Accounting, when it is on.
    accounts: Option<Arc<Accounts>>,
    /// The query parameter that may carry the key.
    parameter: String,
    /// Scratch: the announce's URL data, joined when a client split it.
    url: Vec<u8>,
}

/// What decides whether a request is served, shared by every socket worker.
#[derive(Clone, Debug)]
pub(crate) struct Gates {
    pub(crate) access: Arc<AccessControl>,
    pub(crate) client_rules: Arc<ClientRules>,
    /// Private mode's users and torrents; `None` for a public tracker.
    pub(crate) private: Option<Arc<Registry>>,
    /// Private mode's clients per user and torrent.
    pub(crate) sessions: Option<Arc<Sessions>>,
    /// Private mode's accounting, when it is on.
    pub(crate) accounts: Option<Arc<Accounts>>,
    /// The announce interval given now (backoff replies carry it).
    pub(crate) interval: Arc<AnnounceInterval>,
}

/// Per-datagram logic of one socket worker.
#[derive(Debug)]
pub(crate) struct Dispatcher {
    socket_worker: usize,
    pub(crate) ids: ConnectionIds,
    access: Arc<AccessControl>,
    /// Which clients are served (`[clients]`).
    client_rules: Arc<ClientRules>,
    /// Private mode; `None` for a public tracker.
    private: Option<PrivateGate>,
    peer_limits: PeerLimits,
    max_scrape_torrents: usize,
    outboxes: Outboxes<Job>,
    /// Request rates and bans per client.
    clients: RateTable,
    /// Scrapes waiting for parts.
    pub(crate) scrapes: PendingScrapes,
    /// What happened, flushed into shared statistics by the socket worker.
    pub(crate) counters: SocketCounters,
    /// Bytes and latencies, flushed with `counters`.
    pub(crate) traffic: Traffic,
    /// When the batch of datagrams being handled was read; a job takes the time of
    /// its first request, for the latency histogram.
    pub(crate) batch_read_at: Instant,
    /// Scratch: the scrape being split by swarm worker.
    split: ScrapeSplit,
    /// The announce interval given now, for backoff replies.
    interval: Arc<AnnounceInterval>,
    /// Spreads backoff replies' intervals (xorshift; not a secret).
    spread: u64,
}

impl Dispatcher {
    /// A dispatcher for socket worker `socket_worker` sending to `swarms`.
    pub(crate) fn new(
        socket_worker: usize,
        config: &Config,
        ids: ConnectionIds,
        gates: Gates,
        swarms: Vec<Sender<Job>>,
    ) -> Self {
        let Gates {
            access,
            client_rules,
            private,
            sessions,
            accounts,
            interval,
        } = gates;
        Self {
            socket_worker,
            ids,
            access,
            client_rules,
            private: private.map(|registry| PrivateGate {
                registry,
                sessions,
                accounts,
                parameter: config.private.key_parameter.clone(),
                url: Vec::new(),
            }),
            peer_limits: PeerLimits {
                default: config.protocol.default_peers,
                max: config.protocol.max_peers,
            },
            max_scrape_torrents: config.protocol.max_scrape_torrents,
            outboxes: Outboxes::new(swarms, POOL_SIZE),
            clients: RateTable::new(&config.per_ip),
            scrapes: PendingScrapes::new(config.limits.max_pending_scrapes),
            counters: SocketCounters::default(),
            traffic: Traffic::default(),
            batch_read_at: Instant::now(),
            split: ScrapeSplit::default(),
            interval,
            spread: 0x9e37_79b9_7f4a_7c15 ^ (socket_worker as u64 + 1).wrapping_mul(0xff51_afd7),
        }
    }

    /// Handles one datagram from `client`; replies made here go into `out`.
    pub(crate) fn handle_packet(
        &mut self,
        packet: &[u8],
        client: SocketAddr,
        now: ServerTime,
        out: &mut Replies,
    ) {
        let ipv6 = u64::from(client.is_ipv6());
        self.counters.received += 1;
        self.counters.received_v6 += ipv6;
        self.traffic.bytes_received += packet.len() as u64;
        // A UDP source address proves nothing until the packet carries a connection id
        // issued to it: anyone can forge a victim's address. So connects, bad
        // connection ids and unreadable packets are answered or dropped without
        // charging the address they claim (else a few forged packets would get a
        // victim limited or banned); only requests that proved their address count
        // against its rate, and only those can start a ban.
        match Request::parse(packet) {
            Ok(Request::Connect(request)) => {
                self.counters.connect_requests += 1;
                self.counters.connect_requests_v6 += ipv6;
                // A client banned for what it did from a proven address gets nothing,
                // not even a connection id; looking the ban up counts nothing.
                if self.clients.is_banned(client.ip(), now) {
                    self.counters.banned += 1;
                    return;
                }
                write_connect(
                    &mut out.bytes,
                    request.transaction_id,
                    self.ids.issue(client.ip(), now),
                );
                out.finish_packet(client, ReplyKind::Connect);
            }
            Ok(Request::Announce(request)) => {
                self.counters.announce_requests += 1;
                self.counters.announce_requests_v6 += ipv6;
                if self.proven(request.connection_id, client, now) {
                    self.announce(&request, client, now, out);
                }
            }
            Ok(Request::Scrape(request)) => {
                self.counters.scrape_requests += 1;
                self.counters.scrape_requests_v6 += ipv6;
                if self.proven(request.connection_id, client, now) {
                    self.scrape(&request, client, now, out);
                }
            }
            Err(err) => {
                self.counters.invalid_requests += 1;
                // Only a client that proved its address gets an error reply; anything
                // else could be a forged source address we would be bouncing packets at.
                if let Some((connection_id, transaction_id)) = err.reply_to
                    && self.proven(connection_id, client, now)
                {
                    error_reply(out, client, transaction_id, &err.kind.to_string());
                }
            }
        }
    }

    /// Whether a request carrying `id` may be served: the id was issued to `client`'s
    /// address (else it is dropped, and counted, but charged to no one), and that
    /// client, now proven, is within its rate and not banned. Over-the-rate and banned
    /// clients are dropped before any work: replying to a flood would double it.
    fn proven(
        &mut self,
        id: shoal_udp_protocol::ConnectionId,
        client: SocketAddr,
        now: ServerTime,
    ) -> bool {
        if !self.ids.is_valid(id, client.ip(), now) {
            self.counters.bad_connection_ids += 1;
            return false;
        }
        match self.clients.check(client.ip(), now) {
            Verdict::Allow => true,
            Verdict::Limited => {
                self.counters.per_ip_limited += 1;
                false
            }
            Verdict::Banned => {
                self.counters.banned += 1;
                false
            }
            Verdict::NewBan => {
                self.counters.bans += 1;
                self.counters.banned += 1;
                self.clients
                    .log_ban(client.ip(), "too many requests", client);
                false
            }
        }
    }

    fn announce(
        &mut self,
        request: &AnnounceRequest<'_>,
        client: SocketAddr,
        now: ServerTime,
        out: &mut Replies,
    ) {
        let info_hash = request.info_hash.0;
        self.counters.clients.count(&request.peer_id.0);
        if !self.access.allows(&info_hash) {
            self.counters.access_denied += 1;
            error_reply(out, client, request.transaction_id, NOT_ALLOWED);
            return;
        }
        if let Err(refusal) = self.client_rules.check(&request.peer_id.0, b"") {
            self.counters.client_refused += 1;
            error_reply(out, client, request.transaction_id, refusal.reason());
            return;
        }
        let mut peers_wanted = self.peer_limits.resolve(i64::from(request.peers_wanted)) as u16;
        if let Some(gate) = &mut self.private {
            // The key travels in the BEP 41 URL data: the announce URL's path and
            // query, split over options when longer than one.
            gate.url.clear();
            for piece in request.options.url_data() {
                gate.url.extend_from_slice(piece);
            }
            let places = KeyPlaces {
                paths: &["/announce"],
                parameter: &gate.parameter,
                bare: true,
            };
            let key = places.locate(&gate.url).key.map(Passkey::digest);
            let event = ledger_event(request.event);
            let decision = gate
                .registry
                .announce(key, &info_hash, request.left > 0)
                .and_then(|grant| match &gate.accounts {
                    // Totals no client reaches are refused before anything counts them.
                    Some(accounts) => accounts
                        .check_totals(request.uploaded, request.downloaded)
                        .map(|()| grant),
                    None => Ok(grant),
                })
                .and_then(|grant| match &gate.sessions {
                    Some(sessions) => {
                        let announce = ClientAnnounce {
                            peer_id: &request.peer_id.0,
                            info_hash: &info_hash,
                            ipv6: client.is_ipv6(),
                            event,
                            wants_peers: peers_wanted > 0,
                        };
                        let admitted = sessions.admit(&grant, announce, now.0)?;
                        if !admitted.peers {
                            peers_wanted = 0;
                        }
                        Ok(grant)
                    }
                    None => Ok(grant),
                });
            match decision {
                Ok(grant) => {
                    if let Some(accounts) = &gate.accounts {
                        accounts.report(grant.report(
                            request.peer_id.0,
                            request.uploaded,
                            request.downloaded,
                            request.left,
                            event,
                        ));
                    }
                }
                Err(refusal) => {
                    self.counters.private_refused += 1;
                    error_reply(out, client, request.transaction_id, refusal.reason());
                    return;
                }
            }
        }
        let work = AnnounceWork {
            info_hash,
            peer: PeerAddress::new(client.ip(), request.port),
            event: swarm_event(request.event),
            seeder: request.left == 0,
            peers_wanted,
        };
        let worker = shard_for(&info_hash, self.outboxes.shards());
        self.push(
            worker,
            SwarmRequest {
                client,
                transaction_id: request.transaction_id,
                kind: RequestKind::Announce(work),
            },
            out,
        );
    }

    fn scrape(
        &mut self,
        request: &ScrapeRequest<'_>,
        client: SocketAddr,
        now: ServerTime,
        out: &mut Replies,
    ) {
        let hashes = request.info_hashes;
        if hashes.len() > self.max_scrape_torrents {
            let message = format!(
                "too many info hashes in scrape (at most {})",
                self.max_scrape_torrents
            );
            error_reply(out, client, request.transaction_id, &message);
            return;
        }
        if self.private.is_some() {
            self.counters.private_refused += 1;
            error_reply(out, client, request.transaction_id, PRIVATE_SCRAPE);
            return;
        }
        if self.access.mode() != shoal_common::AccessListMode::Off {
            let access = self.access.view();
            if !hashes.iter().all(|hash| access.allows(hash)) {
                self.counters.access_denied += 1;
                error_reply(out, client, request.transaction_id, NOT_ALLOWED);
                return;
            }
        }

        self.split.split(hashes.iter(), self.outboxes.shards());

        // One swarm worker (always, when there is only one) writes the whole reply;
        // otherwise each writes counts for its share and the parts are merged here.
        let slot = match self.split.len() {
            1 => None,
            parts => {
                let started = self.scrapes.start(
                    client,
                    request.transaction_id,
                    hashes.len(),
                    parts as u32,
                    now,
                );
                let Some(slot) = started else {
                    self.counters.shed += 1;
                    return;
                };
                Some(slot)
            }
        };
        // Each share goes into its worker's open job contiguously, so it is one range
        // of that job's hash list.
        let split = std::mem::take(&mut self.split);
        for (worker, positions) in split.parts() {
            let job = self.open_job(worker);
            let start = job.scrape_hashes.len() as u32;
            for &position in positions {
                if let Some(info_hash) = hashes.get(usize::from(position)) {
                    job.scrape_hashes.push(ScrapeHash {
                        position: position as u8,
                        info_hash: *info_hash,
                    });
                }
            }
            let hashes = start..job.scrape_hashes.len() as u32;
            let kind = match slot {
                None => RequestKind::Scrape { hashes },
                Some(slot) => RequestKind::ScrapePart { slot, hashes },
            };
            self.push(
                worker,
                SwarmRequest {
                    client,
                    transaction_id: request.transaction_id,
                    kind,
                },
                out,
            );
        }
        self.split = split;
    }

    fn open_job(&mut self, worker: usize) -> &mut Job {
        let socket_worker = self.socket_worker;
        self.outboxes.open(worker, || Job::new(socket_worker))
    }

    fn push(&mut self, worker: usize, request: SwarmRequest, out: &mut Replies) {
        let read_at = self.batch_read_at;
        let job = self.open_job(worker);
        if job.requests.is_empty() {
            job.read_at = Some(read_at);
        }
        job.requests.push(request);
        if job.requests.len() >= MAX_JOB_REQUESTS {
            // A full job goes now; a gone swarm worker surfaces at the next flush.
            if let Ok(Sent::Full(job)) = self.outboxes.send(worker) {
                self.shed(job, out);
            }
        }
    }

    /// Sends every open job to its swarm worker; backoff replies for the announces
    /// of a job that could not go go into `out`.
    pub(crate) fn flush_jobs(&mut self, out: &mut Replies) -> Result<(), SwarmWorkerGone> {
        let mut shed = Vec::new();
        self.outboxes.send_all(|_, job| shed.push(job))?;
        for job in shed {
            self.shed(job, out);
        }
        Ok(())
    }

    /// Sheds a job whose swarm worker's queue was full. Its announces are answered
    /// here with a backoff reply: the current interval spread over one to two (so
    /// clients answered faster than the swarm workers serve come back no faster than
    /// they can), no peers, nothing stored; libtorrent and the others wait that long,
    /// where an unanswered announce is retried within seconds. Its scrapes are dropped
    /// (a scrape reply has no interval, and made-up counts would mislead), and the
    /// scrapes waiting for a part of it cancelled. Every request is counted as shed.
    fn shed(&mut self, job: Job, out: &mut Replies) {
        for request in &job.requests {
            let ipv6 = request.client.is_ipv6();
            self.counters.shed += 1;
            self.counters.shed_v6 += u64::from(ipv6);
            match &request.kind {
                RequestKind::Announce(_) => {
                    let family = if ipv6 { Family::V6 } else { Family::V4 };
                    let spread = self.next_spread();
                    let interval = self.interval.for_backoff(family, spread);
                    write_announce_header(&mut out.bytes, request.transaction_id, interval, 0, 0);
                    out.finish_packet(request.client, ReplyKind::Backoff);
                }
                RequestKind::ScrapePart { slot, .. } => self.scrapes.cancel(*slot),
                RequestKind::Scrape { .. } => {}
            }
        }
        self.outboxes.recycle(job);
    }

    /// The next number of the spread of backoff intervals (xorshift64*).
    fn next_spread(&mut self) -> u32 {
        self.spread ^= self.spread >> 12;
        self.spread ^= self.spread << 25;
        self.spread ^= self.spread >> 27;
        (self.spread.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32) as u32
    }

    /// Merges the scrape parts a job brought back from a swarm worker into `out`.
    pub(crate) fn merge_scrape_parts(&mut self, job: &Job, out: &mut Replies) {
        let replies = &job.replies;
        for part in &replies.scrape_parts {
            let stats = &replies.scrape_stats[part.stats.start as usize..part.stats.end as usize];
            self.scrapes.add_part(part.slot, stats, out);
        }
    }

    /// Keeps a job whose replies were sent, for reuse.
    pub(crate) fn recycle(&mut self, job: Job) {
        self.outboxes.recycle(job);
    }
}

fn error_reply(
    out: &mut Replies,
    client: SocketAddr,
    transaction_id: TransactionId,
    message: &str,
) {
    write_error(&mut out.bytes, transaction_id, message);
    out.finish_packet(client, ReplyKind::Error);
}

fn ledger_event(event: shoal_udp_protocol::AnnounceEvent) -> LedgerEvent {
    match event {
        shoal_udp_protocol::AnnounceEvent::None => LedgerEvent::None,
        shoal_udp_protocol::AnnounceEvent::Started => LedgerEvent::Started,
        shoal_udp_protocol::AnnounceEvent::Completed => LedgerEvent::Completed,
        shoal_udp_protocol::AnnounceEvent::Stopped => LedgerEvent::Stopped,
    }
}

fn swarm_event(event: shoal_udp_protocol::AnnounceEvent) -> AnnounceEvent {
    match event {
        shoal_udp_protocol::AnnounceEvent::None => AnnounceEvent::None,
        shoal_udp_protocol::AnnounceEvent::Started => AnnounceEvent::Started,
        shoal_udp_protocol::AnnounceEvent::Completed => AnnounceEvent::Completed,
        shoal_udp_protocol::AnnounceEvent::Stopped => AnnounceEvent::Stopped,
    }
}

#[cfg(any(test, fuzzing))]
pub(crate) mod rig;
#[cfg(test)]
mod tests;
