//! One HTTP connection's rules, without I/O.
//!
//! A [`Session`] is fed what its connection reads, the swarm workers' answers and the
//! time, and says what to do next ([`Next`]): read until a deadline, ask swarm
//! workers, write a response, or close. It never touches a socket or a clock: the
//! task in `socket::connection` drives it on either I/O backend (epoll or
//! io_uring), and the tests below and the `http_session` fuzz target drive it with
//! no sockets at all.
//!
//! * Pipelined requests are answered one after another from the same buffer.
//! * Each request must arrive within `network.idle_timeout` of the moment the session
//!   starts waiting for it, however slowly its bytes trickle in, so a slow client holds
//!   a connection for a bounded time.
//! * Anything malformed, oversized or unsupported gets its 4xx status and a bencoded
//!   failure reason, then the connection closes. A refused info hash gets a 200 with a
//!   failure reason (what BEP 3 clients show to users) and the connection stays open.
//! * A client over its request rate gets 429 and the connection closes; a banned
//!   client gets nothing.
//! * A request shed because a swarm worker's queue is full gets 503 and the
//!   connection closes.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use shoal_common::{ClientRefusal, HeaderPosition, ReverseProxy as _};
use shoal_http_protocol::request::ProxyHeader;
use shoal_http_protocol::response::{write_failure_with_interval, write_head, write_scrape_body};
use shoal_http_protocol::{
    AnnounceEvent as WireEvent, AnnounceRequest, AnnounceResponse, InfoHash, ParseLimits,
    ParsedRequest, PeerList, Request, ScrapeStats, parse_request, write_announce, write_failure,
    write_scrape,
};
use shoal_private::{KeyDigest, KeyPlaces, Refusal};
use shoal_swarm::{AnnounceEvent, PeerAddress, PeerLimits, ServerTime};
use shoal_tcp::HeadScan;
use shoal_worker::{ScrapeSplit, Verdict, shard_for};

use crate::Config;
use crate::messages::{
    AnnounceAnswer, AnnounceWork, AnnouncedPeers, CallError, ScrapeCounts, ScrapeWork,
};
use crate::stats::SocketCounters;

/// Reply to a refused info hash.
pub(crate) const NOT_ALLOWED: &str = "info hash not allowed";
/// Reply to a client over per_ip.requests_per_second.
pub(crate) const RATE_LIMITED: &str = "too many requests, slow down";
/// Warning in the reply to a new peer of a full torrent or tracker: sent peers, not
/// stored, told to come back after the longest interval.
pub(crate) const NOT_STORED: &str =
    "tracker full: you were sent peers but not stored; come back later";
/// Reply when a swarm worker's queue is full, with an interval to come back after.
pub(crate) const BUSY: &str = "tracker busy, come back later";

/// What a session needs from the socket worker that runs it: the config, the
/// worker's per-client rates, the access list, its counters and its full-scrape
/// cache.
pub(crate) trait Host {
    /// The tracker's config.
    fn config(&self) -> &Config;
    /// Counts a request from `ip` against its client's rate.
    fn check_rate(&self, ip: IpAddr) -> Verdict;
    /// Whether the access list allows `info_hash`.
    fn allows(&self, info_hash: &InfoHash) -> bool;
    /// Whether the access list allows every one of `info_hashes`.
    fn allows_all(&self, info_hashes: &[InfoHash]) -> bool;
    /// Whether the client rules serve a client with `peer_id` and `user_agent`.
    fn check_client(&self, peer_id: &[u8; 20], user_agent: &[u8]) -> Result<(), ClientRefusal>;
    /// Private mode's decision on `request` with passkey `key` (downloading unless
    /// it says nothing is left), from an IPv6 client when `ipv6`: whether it may be
    /// sent peers (not past its user's peer lists per minute); always `Ok(true)` on a
    /// public tracker. Accepted announces go to accounting, when it is on.
    fn private_announce(
        &self,
        key: Option<KeyDigest>,
        request: &AnnounceRequest,
        ipv6: bool,
    ) -> Result<bool, Refusal>;
    /// Private mode's decision on a scrape of `info_hashes` (none: a full scrape).
    fn private_scrape(
        &self,
        key: Option<KeyDigest>,
        info_hashes: &[InfoHash],
    ) -> Result<(), Refusal>;
    /// Counts into the worker's counters.
    fn count(&self, count: impl FnOnce(&mut SocketCounters));
    /// How many swarm workers share the torrents.
    fn swarm_workers(&self) -> usize;
    /// The worker's last full scrape.
    fn full_scrape(&self) -> &RefCell<FullScrapeCache>;
    /// The tracker's clock, in whole seconds (full scrapes are cached by it).
    fn server_time(&self) -> ServerTime;
    /// Records how long a request took from its whole head to its written response.
    fn record_latency(&self, latency: Duration);
    /// The `interval` and `min interval` of an announce reply to a client over IPv6
    /// when `ipv6`: adapted to load, jittered.
    fn reply_interval(&self, ipv6: bool) -> (u32, u32);
    /// The same for a backoff reply (the request was shed): spread over one to two
    /// intervals.
    fn backoff_interval(&self, ipv6: bool) -> (u32, u32);
    /// The same for a client the tracker is too full to take: the longest interval.
    fn full_interval(&self) -> (u32, u32);
}

/// The last full-scrape reply body of one socket worker.
#[derive(Debug, Default)]
pub(crate) struct FullScrapeCache {
    body: Option<(ServerTime, Rc<Vec<u8>>)>,
    building: bool,
}

/// What the driver does next.
#[derive(Debug)]
pub(crate) enum Next {
    /// Read into [`Session::read_buffer`] and report with [`Session::received`]; if
    /// nothing comes by `deadline`, report [`Session::timed_out`].
    Read {
        /// When the request being read must be whole.
        deadline: Instant,
    },
    /// Ask a swarm worker; hand the answer back with [`Session::announced`].
    Announce(AnnounceCall),
    /// Ask swarm workers; hand the answer back with [`Session::scraped`].
    Scrape(ScrapeCall),
    /// Write [`Session::output`] by `deadline`, then report [`Session::written`].
    Write {
        /// When the response must be written.
        deadline: Instant,
    },
    /// Close the connection.
    Close,
}

/// An announce for a swarm worker. It carries what shapes the response, so the
/// answer can only go back to the question it belongs to.
#[derive(Clone, Debug)]
pub(crate) struct AnnounceCall {
    /// The swarm worker that keeps the torrent.
    pub(crate) worker: usize,
    /// The announce.
    pub(crate) work: AnnounceWork,
    compact: bool,
    keep_alive: bool,
}

/// A scrape for one or more swarm workers.
#[derive(Debug)]
pub(crate) struct ScrapeCall {
    /// Each swarm worker's share.
    pub(crate) parts: Vec<(usize, ScrapeWork)>,
    /// For a full scrape: when it was asked, which is when its body was built.
    full: Option<ServerTime>,
    keep_alive: bool,
}

/// A request being served.
#[derive(Clone, Copy, Debug)]
struct Served {
    /// The client (the proxy's header when believed).
    client_ip: IpAddr,
    /// Bytes of the buffer the request took.
    len: usize,
    /// When its head was whole.
    started: Instant,
}

#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Waiting for a request's head, until `deadline`.
    Reading {
        deadline: Instant,
    },
    /// A request is with swarm workers. A driver that asks for the next step before
    /// handing the answer back has dropped the call, and the connection ends.
    Asking(Served),
    /// A response to write by `deadline`; then it is counted for `ip` and the
    /// connection goes on to the next request if `answered` keeps it alive.
    Writing {
        answered: Answered,
        ip: IpAddr,
        served: Option<Served>,
        deadline: Instant,
    },
    Closed,
}

/// What a response answered, for the counters, and whether the connection stays open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answered {
    /// An announce (with peers or a failure reason).
    Announce { keep_alive: bool },
    /// A scrape (with counts or a failure reason).
    Scrape { keep_alive: bool },
    /// A request shed (a swarm worker's queue was full), answered with a failure that
    /// carries the interval to come back after.
    Backoff { keep_alive: bool },
    /// A request refused before it was served (malformed, late, over its rate);
    /// the connection closes.
    Error,
}

impl Answered {
    fn keeps_alive(self) -> bool {
        match self {
            Self::Announce { keep_alive }
            | Self::Scrape { keep_alive }
            | Self::Backoff { keep_alive } => keep_alive,
            Self::Error => false,
        }
    }
}

/// One connection's requests and responses.
#[derive(Debug)]
pub(crate) struct Session {
    peer: SocketAddr,
    /// Whether `peer` is a trusted proxy whose header names the client.
    believe_proxy: bool,
    idle: Duration,
    buffer: Vec<u8>,
    filled: usize,
    /// Where the search for the end of the head got to, so a head is parsed only
    /// once it may be whole, not again after every byte.
    scan: HeadScan,
    out: Vec<u8>,
    /// A body many responses share (a cached full scrape), written from where it is
    /// kept, not copied into each connection's buffer.
    shared_body: Option<Rc<Vec<u8>>>,
    phase: Phase,
}

impl Session {
    /// A session for a connection from `peer`, accepted at `now`.
    pub(crate) fn new(peer: SocketAddr, config: &Config, now: Instant) -> Self {
        let idle = Duration::from_secs(config.network.idle_timeout.into());
        Self {
            peer,
            believe_proxy: config.network.proxy_header_from(peer.ip()),
            idle,
            buffer: vec![0; config.limits.max_request_size],
            filled: 0,
            scan: HeadScan::new(),
            out: Vec::with_capacity(1024),
            shared_body: None,
            phase: Phase::Reading {
                deadline: now + idle,
            },
        }
    }

    /// What to do next at `now`: parses a request when one may be whole.
    pub(crate) fn next(&mut self, host: &impl Host, now: Instant) -> Next {
        if let Phase::Reading { .. } = self.phase
            && let Some(call) = self.parse(host, now)
        {
            return call;
        }
        match self.phase {
            Phase::Reading { deadline } => Next::Read { deadline },
            Phase::Writing { deadline, .. } => Next::Write { deadline },
            Phase::Asking(_) | Phase::Closed => {
                self.phase = Phase::Closed;
                Next::Close
            }
        }
    }

    /// Where the driver reads to (empty when the buffer is full: a read then ends
    /// the connection, as a request that does not fit was already refused).
    pub(crate) fn read_buffer(&mut self) -> &mut [u8] {
        &mut self.buffer[self.filled..]
    }

    /// `read` bytes arrived in [`Session::read_buffer`]; 0 means the client closed.
    pub(crate) fn received(&mut self, read: usize) {
        if !matches!(self.phase, Phase::Reading { .. }) {
            return;
        }
        if read == 0 {
            self.phase = Phase::Closed;
        } else {
            self.filled = (self.filled + read).min(self.buffer.len());
        }
    }

    /// The read deadline passed: a request begun gets 408, an idle connection closes.
    pub(crate) fn timed_out(&mut self, host: &impl Host, now: Instant) {
        if !matches!(self.phase, Phase::Reading { .. }) {
            return;
        }
        if self.filled == 0 {
            self.phase = Phase::Closed;
            return;
        }
        host.count(|counters| counters.timeouts += 1);
        self.out.clear();
        write_failure(&mut self.out, 408, "request not completed in time", false);
        self.write_error(self.peer.ip(), now);
    }

    /// The response to write: the head (or the whole of it) and a shared body.
    pub(crate) fn output(&self) -> (&[u8], Option<&[u8]>) {
        (&self.out, self.shared_body.as_deref().map(Vec::as_slice))
    }

    /// The response was written at `now`: counted, and the next request is awaited
    /// if the connection stays open.
    pub(crate) fn written(&mut self, host: &impl Host, now: Instant) {
        let Phase::Writing {
            answered,
            ip,
            served,
            ..
        } = self.phase
        else {
            return;
        };
        count_response(host, answered, ip);
        self.out.clear();
        self.shared_body = None;
        let Some(served) = served else {
            self.phase = Phase::Closed;
            return;
        };
        host.record_latency(now.saturating_duration_since(served.started));
        if !answered.keeps_alive() {
            self.phase = Phase::Closed;
            return;
        }
        self.buffer.copy_within(served.len..self.filled, 0);
        self.filled -= served.len;
        self.scan = HeadScan::new();
        self.phase = Phase::Reading {
            deadline: now + self.idle,
        };
    }

    /// The answer to `call` came back at `now`.
    pub(crate) fn announced(
        &mut self,
        call: AnnounceCall,
        answer: Result<AnnounceAnswer, CallError>,
        host: &impl Host,
        now: Instant,
    ) {
        let Phase::Asking(served) = self.phase else {
            return;
        };
        let keep_alive = call.keep_alive;
        match answer {
            Err(CallError::Busy) => return self.busy(served, host, keep_alive, now),
            // Full: told so, with the longest interval (clients that honour a
            // failure's interval do not come back before there may be room).
            Ok(AnnounceAnswer::Refused(reason)) => {
                let (interval, min_interval) = host.full_interval();
                write_failure_with_interval(
                    &mut self.out,
                    reason,
                    interval,
                    min_interval,
                    keep_alive,
                );
            }
            Ok(AnnounceAnswer::Peers {
                complete,
                incomplete,
                peers,
                full,
            }) => {
                let (interval, min_interval) = if full {
                    host.full_interval()
                } else {
                    host.reply_interval(served.client_ip.to_canonical().is_ipv6())
                };
                with_peer_list(&peers, call.compact, call.work.peer, |peers| {
                    let response = AnnounceResponse {
                        interval,
                        min_interval,
                        complete,
                        incomplete,
                        peers,
                        warning: full.then_some(NOT_STORED),
                    };
                    write_announce(&mut self.out, &response, keep_alive);
                });
            }
        }
        self.respond(Answered::Announce { keep_alive }, served, now);
    }

    /// The answer to `call` came back at `now`.
    pub(crate) fn scraped(
        &mut self,
        call: ScrapeCall,
        answer: Result<ScrapeCounts, CallError>,
        host: &impl Host,
        now: Instant,
    ) {
        let Phase::Asking(served) = self.phase else {
            return;
        };
        if call.full.is_some() {
            host.full_scrape().borrow_mut().building = false;
        }
        let counts = match answer {
            Ok(counts) => counts,
            Err(CallError::Busy) => return self.busy(served, host, call.keep_alive, now),
        };
        let mut files = counts
            .into_iter()
            .map(|(hash, stats)| (hash, wire_stats(stats)))
            .collect();
        let keep_alive = call.keep_alive;
        match call.full {
            None => write_scrape(&mut self.out, &mut files, keep_alive),
            Some(asked) => {
                let mut body = Vec::new();
                write_scrape_body(&mut body, &mut files);
                let body = Rc::new(body);
                host.full_scrape().borrow_mut().body = Some((asked, body.clone()));
                write_head(&mut self.out, 200, keep_alive, body.len());
                self.shared_body = Some(body);
            }
        }
        self.respond(Answered::Scrape { keep_alive }, served, now);
    }

    /// Parses the buffer if a head may be whole; serves what it holds. Returns a call
    /// for swarm workers, or `None` when the phase says what comes next.
    fn parse(&mut self, host: &impl Host, now: Instant) -> Option<Next> {
        let full = self.filled == self.buffer.len();
        if self.filled == 0 || !self.scan.worth_parsing(&self.buffer[..self.filled], full) {
            return None;
        }
        let config = host.config();
        let paths = [
            config.protocol.announce_path.as_str(),
            config.protocol.scrape_path.as_str(),
        ];
        let limits = ParseLimits {
            announce_path: &config.protocol.announce_path,
            scrape_path: &config.protocol.scrape_path,
            max_request_len: config.limits.max_request_size,
            max_headers: config.limits.max_headers,
            max_scrape_torrents: config.protocol.max_scrape_torrents,
            // Only a trusted proxy's header is believed; anyone else is served as
            // themselves.
            proxy_header: self.believe_proxy.then(|| ProxyHeader {
                name: &config.network.reverse_proxy_ip_header,
                use_last: config.network.reverse_proxy_ip_header_position == HeaderPosition::Last,
            }),
            private: config.private.enabled.then_some(KeyPlaces {
                paths: &paths,
                parameter: &config.private.key_parameter,
                bare: false,
            }),
        };
        match parse_request(&self.buffer[..self.filled], &limits) {
            Ok(Some(parsed)) => self.serve(parsed, host, now),
            Ok(None) => None,
            Err(err) => {
                host.count(|counters| counters.bad_requests += 1);
                self.out.clear();
                write_failure(&mut self.out, err.status, &err.reason, false);
                self.write_error(self.peer.ip(), now);
                None
            }
        }
    }

    /// Serves a whole request.
    fn serve(&mut self, parsed: ParsedRequest, host: &impl Host, now: Instant) -> Option<Next> {
        let keep_alive = parsed.keep_alive && host.config().network.keep_alive;
        let served = Served {
            client_ip: parsed.forwarded_ip.unwrap_or(self.peer.ip()),
            len: parsed.len,
            started: now,
        };
        self.out.clear();
        self.shared_body = None;
        let ip = served.client_ip.to_canonical();
        match host.check_rate(ip) {
            Verdict::Allow => {}
            Verdict::Limited => {
                write_failure(&mut self.out, 429, RATE_LIMITED, false);
                self.respond(Answered::Error, served, now);
                return None;
            }
            // Banned: no answer, the connection closes.
            Verdict::Banned | Verdict::NewBan => {
                self.phase = Phase::Closed;
                return None;
            }
        }
        let ipv6 = u64::from(ip.is_ipv6());
        let key = parsed.key;
        match parsed.request {
            Request::Announce(request) => {
                host.count(|counters| {
                    counters.announces += 1;
                    counters.announces_v6 += ipv6;
                    counters.clients.count(&request.peer_id);
                });
                if !host.allows(&request.info_hash) {
                    host.count(|counters| counters.access_denied += 1);
                    write_failure(&mut self.out, 200, NOT_ALLOWED, keep_alive);
                    self.respond(Answered::Announce { keep_alive }, served, now);
                    return None;
                }
                if let Err(refusal) =
                    host.check_client(&request.peer_id, parsed.user_agent.as_bytes())
                {
                    host.count(|counters| counters.client_refused += 1);
                    self.refuse_with_interval(refusal.reason(), host, keep_alive, ip.is_ipv6());
                    self.respond(Answered::Announce { keep_alive }, served, now);
                    return None;
                }
                let mut request = request;
                match host.private_announce(key, &request, ip.is_ipv6()) {
                    Ok(true) => {}
                    Ok(false) => request.numwant = Some(0),
                    Err(refusal) => {
                        self.refuse_privately(refusal, host, keep_alive, ip.is_ipv6());
                        self.respond(Answered::Announce { keep_alive }, served, now);
                        return None;
                    }
                }
                let call = announce_call(&request, ip, keep_alive, host);
                self.phase = Phase::Asking(served);
                Some(Next::Announce(call))
            }
            Request::Scrape(request) => {
                host.count(|counters| {
                    counters.scrapes += 1;
                    counters.scrapes_v6 += ipv6;
                });
                if let Err(refusal) = host.private_scrape(key, &request.info_hashes) {
                    self.refuse_privately(refusal, host, keep_alive, ip.is_ipv6());
                    self.respond(Answered::Scrape { keep_alive }, served, now);
                    return None;
                }
                if request.info_hashes.is_empty() {
                    return self.full_scrape(keep_alive, served, host, now);
                }
                if !host.allows_all(&request.info_hashes) {
                    host.count(|counters| counters.access_denied += 1);
                    write_failure(&mut self.out, 200, NOT_ALLOWED, keep_alive);
                    self.respond(Answered::Scrape { keep_alive }, served, now);
                    return None;
                }
                let mut split = ScrapeSplit::default();
                split.split(&request.info_hashes, host.swarm_workers());
                let parts = split
                    .shares(&request.info_hashes)
                    .map(|(worker, hashes)| (worker, ScrapeWork::Torrents(hashes)))
                    .collect();
                self.phase = Phase::Asking(served);
                Some(Next::Scrape(ScrapeCall {
                    parts,
                    full: None,
                    keep_alive,
                }))
            }
        }
    }

    /// Writes private mode's refusal, with the interval to come back after: a client
    /// with a bad key would otherwise retry at once.
    fn refuse_privately(
        &mut self,
        refusal: Refusal,
        host: &impl Host,
        keep_alive: bool,
        ipv6: bool,
    ) {
        host.count(|counters| counters.private_refused += 1);
        self.refuse_with_interval(refusal.reason(), host, keep_alive, ipv6);
    }

    /// Writes a failure that carries the announce interval (clients that honour it
    /// wait that long before trying again).
    fn refuse_with_interval(
        &mut self,
        reason: &str,
        host: &impl Host,
        keep_alive: bool,
        ipv6: bool,
    ) {
        let (interval, min_interval) = host.reply_interval(ipv6);
        write_failure_with_interval(&mut self.out, reason, interval, min_interval, keep_alive);
    }

    /// Full scrapes are built at most once per `full_scrape_interval` per socket
    /// worker and reused in between. The body (about 70 bytes a torrent) is shared,
    /// not copied into `out`: a copy per connection, held while a client that never
    /// reads keeps its response waiting, would let a few thousand connections hold
    /// gigabytes.
    fn full_scrape(
        &mut self,
        keep_alive: bool,
        served: Served,
        host: &impl Host,
        now: Instant,
    ) -> Option<Next> {
        let protocol = &host.config().protocol;
        let answered = Answered::Scrape { keep_alive };
        if !protocol.full_scrape {
            write_failure(&mut self.out, 200, "full scrape is disabled", keep_alive);
            self.respond(answered, served, now);
            return None;
        }
        let time = host.server_time();
        let (cached, building) = {
            let cache = host.full_scrape().borrow();
            let cached = cache.body.as_ref().and_then(|(built, body)| {
                let fresh = time
                    .seconds_since(*built)
                    .is_some_and(|age| age < protocol.full_scrape_interval);
                (fresh || cache.building).then(|| body.clone())
            });
            (cached, cache.building)
        };
        if let Some(body) = cached {
            write_head(&mut self.out, 200, keep_alive, body.len());
            self.shared_body = Some(body);
            self.respond(answered, served, now);
            return None;
        }
        if building {
            let reason = "full scrape is being prepared, try again shortly";
            write_failure(&mut self.out, 200, reason, keep_alive);
            self.respond(answered, served, now);
            return None;
        }
        host.full_scrape().borrow_mut().building = true;
        host.count(|counters| counters.full_scrapes += 1);
        self.phase = Phase::Asking(served);
        Some(Next::Scrape(ScrapeCall {
            parts: (0..host.swarm_workers())
                .map(|worker| (worker, ScrapeWork::All))
                .collect(),
            full: Some(time),
            keep_alive,
        }))
    }

    /// A swarm worker's queue was full: a failure that carries the interval to come
    /// back after, spread over one to two intervals (libtorrent, Transmission and
    /// rtorrent wait that long; a 503 or a closed connection is retried within
    /// seconds). The connection stays open.
    fn busy(&mut self, served: Served, host: &impl Host, keep_alive: bool, now: Instant) {
        self.out.clear();
        self.shared_body = None;
        let (interval, min_interval) =
            host.backoff_interval(served.client_ip.to_canonical().is_ipv6());
        write_failure_with_interval(&mut self.out, BUSY, interval, min_interval, keep_alive);
        self.respond(Answered::Backoff { keep_alive }, served, now);
    }

    /// `out` (and a shared body) answer the request being served.
    fn respond(&mut self, answered: Answered, served: Served, now: Instant) {
        self.phase = Phase::Writing {
            answered,
            ip: served.client_ip,
            served: Some(served),
            deadline: now + self.idle,
        };
    }

    /// `out` answers bytes that were no request (malformed, or late) from `ip`; the
    /// connection closes after it.
    fn write_error(&mut self, ip: IpAddr, now: Instant) {
        self.phase = Phase::Writing {
            answered: Answered::Error,
            ip,
            served: None,
            deadline: now + self.idle,
        };
    }
}

/// Writes the 503 that answers a connection over the limit, before it is closed.
pub(crate) fn refusal() -> Vec<u8> {
    let mut out = Vec::new();
    write_failure(&mut out, 503, "too many connections", false);
    out
}

/// The swarm worker's share of an announce from `ip`.
fn announce_call(
    request: &AnnounceRequest,
    ip: IpAddr,
    keep_alive: bool,
    host: &impl Host,
) -> AnnounceCall {
    let protocol = &host.config().protocol;
    let limits = PeerLimits {
        default: protocol.default_peers,
        max: protocol.max_peers,
    };
    let work = AnnounceWork {
        info_hash: request.info_hash,
        peer: PeerAddress::new(ip, request.port),
        peer_id: request.peer_id,
        event: match request.event {
            WireEvent::None => AnnounceEvent::None,
            WireEvent::Started => AnnounceEvent::Started,
            WireEvent::Completed => AnnounceEvent::Completed,
            WireEvent::Stopped => AnnounceEvent::Stopped,
        },
        seeder: request.left == Some(0),
        peers_wanted: limits.resolve(request.numwant.unwrap_or(0)) as u16,
        with_peer_ids: !request.compact && !request.no_peer_id,
    };
    AnnounceCall {
        worker: shard_for(&request.info_hash, host.swarm_workers()),
        work,
        compact: request.compact,
        keep_alive,
    }
}

/// Hands `write` the peers as the client asked for them: compact bytes of the
/// announcer's family, or dictionaries (with peer ids unless `no_peer_id`).
fn with_peer_list(
    peers: &AnnouncedPeers,
    compact: bool,
    announcer: PeerAddress,
    write: impl FnOnce(PeerList<'_>),
) {
    let v4 = matches!(announcer, PeerAddress::V4(_));
    match peers {
        AnnouncedPeers::Compact(bytes) if compact && v4 => write(PeerList::CompactV4(bytes)),
        AnnouncedPeers::Compact(bytes) if compact => write(PeerList::CompactV6(bytes)),
        AnnouncedPeers::Compact(bytes) => {
            // compact=0 with no_peer_id: dictionaries without ids.
            let width = if v4 { 6 } else { 18 };
            let dictionaries: Vec<_> = bytes
                .chunks_exact(width)
                .map(|chunk| {
                    let (ip, port) = chunk.split_at(width - 2);
                    let ip = match <[u8; 4]>::try_from(ip) {
                        Ok(v4) => IpAddr::from(v4),
                        Err(_) => IpAddr::from(<[u8; 16]>::try_from(ip).unwrap_or_default()),
                    };
                    (ip, u16::from_be_bytes([port[0], port[1]]), None)
                })
                .collect();
            write(PeerList::Dictionaries(&dictionaries));
        }
        AnnouncedPeers::WithIds(list) => {
            let dictionaries: Vec<_> = list
                .iter()
                .map(|(addr, id)| (addr.ip(), addr.port(), Some(*id)))
                .collect();
            write(PeerList::Dictionaries(&dictionaries));
        }
    }
}

/// Counts a response written to a client at `ip`.
fn count_response(host: &impl Host, answered: Answered, ip: IpAddr) {
    let ipv6 = u64::from(ip.to_canonical().is_ipv6());
    host.count(|counters| {
        let (all, v6) = match answered {
            Answered::Announce { .. } => (
                &mut counters.announce_responses,
                &mut counters.announce_responses_v6,
            ),
            Answered::Scrape { .. } => (
                &mut counters.scrape_responses,
                &mut counters.scrape_responses_v6,
            ),
            Answered::Backoff { .. } => (
                &mut counters.backoff_responses,
                &mut counters.backoff_responses_v6,
            ),
            Answered::Error => (
                &mut counters.error_responses,
                &mut counters.error_responses_v6,
            ),
        };
        *all += 1;
        *v6 += ipv6;
    });
}

fn wire_stats(stats: shoal_swarm::ScrapeStats) -> ScrapeStats {
    ScrapeStats {
        complete: stats.seeders,
        downloaded: stats.downloads,
        incomplete: stats.leechers,
    }
}

#[cfg(any(test, fuzzing))]
pub(crate) mod rig;
#[cfg(test)]
mod tests;
