//! One WebSocket connection's rules after its opening request, without I/O.
//!
//! A [`Session`] is fed the bytes its connection reads and the time, takes the
//! messages swarm workers put in its queue, and says what to do next ([`Next`]):
//! write frames by a deadline, wait for the client until a deadline, or close. It
//! never touches a socket or a clock: the task in `socket::connection` drives it on
//! either I/O backend (epoll or io_uring), and the tests below and the
//! `ws_session` fuzz target drive it with no sockets at all. Frames are read where
//! the bytes lie and written straight into the output
//! (`shoal_ws_protocol::frames`): between messages a session holds no buffer of its
//! own, and its output buffer is the worker's, borrowed for a write ([`Host::buffer`]).
//!
//! Closing reasons, each counted: idle timeout, a message or frame over its size
//! limit (close code 1009), a binary message (1003), a protocol error (1002), a full
//! outgoing queue (the client reads too slowly; 1008, and logged), a worker that is
//! full and this connection the quietest (1013), a ban (1008).

use std::cell::RefMut;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use hashbrown::HashMap;
use shoal_common::{TcpNetwork as _, left_out};
use shoal_private::{KeyDigest, Refusal as PrivateRefusal};
use shoal_swarm::ServerTime;
use shoal_worker::{ScrapeSplit, Verdict, shard_for};
use shoal_ws_protocol::frames::{
    Event, FrameError, MessageReader, write_close, write_empty_close, write_pong, write_text,
};
use shoal_ws_protocol::{
    Action, AnnounceEvent, AnnounceRequest, ClientMessage, ErrorResponse, Id20, RawJson,
    ScrapeFile, ScrapeRequest, ScrapeResponse, ServerMessage, parse_client_message,
    write_server_message,
};

use crate::Config;
use crate::messages::{ConnectionRef, RequestKind, SwarmRequest, ToConnection};
use crate::queue::{ConnectionQueue, Overflow};
use crate::stats::SocketCounters;

/// Error reply to a refused info hash.
pub(crate) const NOT_ALLOWED: &str = "info hash not allowed";
/// Error reply when a swarm worker's queue is full.
pub(crate) const BUSY: &str = "tracker busy, come back later";
/// Error reply past limits.max_requests_per_second.
pub(crate) const RATE_LIMITED: &str = "too many requests, slow down";
/// Error reply past per_ip.requests_per_second (all of a client's connections).
pub(crate) const CLIENT_RATE_LIMITED: &str = "too many requests from your address, slow down";
/// Error reply to an answer that is not relayed.
pub(crate) const ANSWER_REFUSED: &str =
    "answer not relayed: no such offer was sent to this peer, or it expired";

/// Error reply to an answer whose session description is too large or not an object.
pub(crate) const DESCRIPTION_REFUSED: &str =
    "answer not relayed: its session description is too large or not a JSON object";

/// Error reply to an announce that would start a torrent while the tracker is full.
pub(crate) const TRACKER_FULL: &str = "tracker full: no new torrents accepted";
/// Error reply to an announce whose peer id another connection owns.
pub(crate) const PEER_ID_TAKEN: &str = "peer_id is in use by another connection";

/// How long writing to a client may take before the connection is given up.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Close codes (RFC 6455, 7.4.1).
mod close_code {
    pub(super) const AWAY: u16 = 1001;
    pub(super) const UNSUPPORTED: u16 = 1003;
    pub(super) const POLICY: u16 = 1008;
    pub(super) const SIZE: u16 = 1009;
    pub(super) const AGAIN: u16 = 1013;
}

/// What a session needs from the socket worker that runs it: the config, per-client
/// rates, the access list, its counters and latency histogram, the router to swarm
/// workers and the budget of close lines in the log.
pub(crate) trait Host {
    /// The tracker's config.
    fn config(&self) -> &Config;
    /// Counts a request from `ip` against its client's rate.
    fn check_rate(&self, ip: IpAddr) -> Verdict;
    /// Whether the access list allows `info_hash`.
    fn allows(&self, info_hash: &[u8; 20]) -> bool;
    /// Whether the client rules serve a client with `peer_id`.
    fn check_client(&self, peer_id: &[u8; 20]) -> Result<(), shoal_common::ClientRefusal>;
    /// Private mode's decision on `announce` with passkey `key` (downloading unless
    /// it says nothing is left), from an IPv6 client when `ipv6`: whether its offers
    /// may be relayed (not past its user's peer lists per minute); always `Ok(true)`
    /// on a public tracker. Accepted announces go to accounting, when it is on.
    fn private_announce(
        &self,
        key: Option<KeyDigest>,
        announce: &AnnounceRequest,
        ipv6: bool,
    ) -> Result<bool, PrivateRefusal>;
    /// Private mode's decision on a scrape of `info_hashes`.
    fn private_scrape(
        &self,
        key: Option<KeyDigest>,
        info_hashes: &[Id20],
    ) -> Result<(), PrivateRefusal>;
    /// The worker's counters.
    fn counters(&self) -> RefMut<'_, SocketCounters>;
    /// Records how long a request took from its read to its reply.
    fn record_latency(&self, latency: Duration);
    /// The tracker's clock, in whole seconds (budgets refill by it).
    fn server_time(&self) -> ServerTime;
    /// How many swarm workers share the torrents.
    fn swarm_workers(&self) -> usize;
    /// Sends `request` to swarm worker `worker` (batched with the round's others).
    fn submit(&self, worker: usize, request: SwarmRequest);
    /// Notes that `queue`'s connection holds `bytes` of a message still arriving.
    fn note_receiving(&self, queue: &ConnectionQueue, bytes: usize);
    /// Forgets a closed connection.
    fn unregister(&self, connection: ConnectionRef);
    /// An empty buffer to write frames into, from the worker's spares: a connection
    /// holds one only while it has something to write.
    fn buffer(&self) -> Vec<u8>;
    /// Gives a buffer back, written out, for another connection's next write.
    fn recycle(&self, buffer: Vec<u8>);
    /// Seconds a client whose request was shed is told to wait: the current interval
    /// spread over one to two.
    fn backoff_interval(&self) -> u32;
    /// Whether a close may be logged at `now` (clients can provoke closes at will),
    /// with the number of closes left out of the log since the last one logged.
    fn may_log_close(&self, now: Instant) -> Option<u32>;
}

/// What the driver does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Write [`Session::output`] by `deadline`, watching the queue for an overflow
    /// meanwhile; then report [`Session::written`] or [`Session::write_failed`].
    Write {
        /// When the write is given up.
        deadline: Instant,
    },
    /// Wait for bytes from the client ([`Session::received`]), messages in the queue,
    /// or `deadline`, whichever comes first; then ask again.
    Wait {
        /// When the connection has been quiet too long.
        deadline: Instant,
    },
    /// The connection ends (after [`Session::leave`]).
    Close,
}

/// What a connection may spend per second: a token bucket refilled every second
/// (requests, or bytes of offers).
struct Budget {
    per_second: u32,
    burst: u32,
    tokens: u32,
    refilled: u32,
}

impl Budget {
    /// A full bucket at `now`.
    fn new(per_second: u32, burst: u32, now: u32) -> Self {
        Self {
            per_second,
            burst,
            tokens: burst,
            refilled: now,
        }
    }

    /// Takes `amount` tokens at `now`, if there are that many (always, with no limit).
    fn take(&mut self, amount: u32, now: u32) -> bool {
        if self.per_second == 0 {
            return true;
        }
        let elapsed = now.saturating_sub(self.refilled);
        if elapsed > 0 {
            self.tokens = self
                .tokens
                .saturating_add(elapsed.saturating_mul(self.per_second))
                .min(self.burst);
            self.refilled = now;
        }
        if self.tokens < amount {
            return false;
        }
        self.tokens -= amount;
        true
    }
}

/// A scrape split over several swarm workers, waiting for their parts.
struct PendingScrape {
    parts_left: usize,
    /// A part was shed; the client got a "busy" error.
    failed: bool,
    files: Vec<(Id20, ScrapeFile)>,
}

/// An upgraded connection.
pub(crate) struct Session<'a, H: Host> {
    host: &'a H,
    peer: SocketAddr,
    /// In private mode, the digest of the passkey the connection was opened with.
    key: Option<KeyDigest>,
    /// The client's frames; holds bytes only for a frame split across reads or a
    /// message sent in fragments.
    reader: MessageReader,
    /// Bytes that came with the opening request, served by [`Session::start`].
    leftover: Vec<u8>,
    connection: ConnectionRef,
    queue: Rc<ConnectionQueue>,
    /// Frames waiting to be written to the socket: a buffer of the worker's while
    /// there are any, none otherwise.
    out: Vec<u8>,
    /// The info hashes this connection announced, with the peer id used.
    announced: HashMap<Id20, Id20>,
    budget: Budget,
    /// Bytes of offers this connection may have relayed: the flooder pays for its
    /// offers, not the peers they are sent to.
    offer_budget: Budget,
    scrapes: HashMap<u32, PendingScrape>,
    next_scrape: u32,
    closing: bool,
    /// The socket can no longer be written (a write failed or stalled).
    broken: bool,
    /// When the message being handled was read.
    read_at: Instant,
    /// `network.idle_timeout`.
    idle: Duration,
    /// When the client last sent a tracker message (or connected).
    heard: Instant,
    /// How long after `heard` the connection may stay quiet.
    allowed: Duration,
    /// When each announce waiting for its swarm worker's reply was read, oldest first
    /// (for the latency histogram; replies from different swarm workers may overtake
    /// each other, so a time may be matched with a neighbour's reply).
    awaiting_announces: VecDeque<Instant>,
    /// The same for scrapes.
    awaiting_scrapes: VecDeque<Instant>,
    /// Whether the client is on IPv6, for the counters.
    ipv6: u64,
}

/// Which requests a reply answers, for the latency histogram.
#[derive(Clone, Copy)]
enum Awaited {
    Announce,
    Scrape,
}

impl<'a, H: Host> Session<'a, H> {
    /// The session of a connection from `peer` whose queue in the router is `queue`
    /// (registered as `connection`), upgraded at `now` with `leftover` bytes already
    /// read after the opening request. Serve those with [`Session::start`].
    pub(crate) fn new(
        host: &'a H,
        peer: SocketAddr,
        connection: ConnectionRef,
        queue: Rc<ConnectionQueue>,
        leftover: Vec<u8>,
        now: Instant,
    ) -> Self {
        let limits = &host.config().limits;
        let idle = Duration::from_secs(host.config().network.idle_timeout.into());
        Self {
            host,
            peer,
            key: None,
            reader: MessageReader::new(limits.max_frame_size, limits.max_message_size),
            leftover,
            connection,
            queue,
            out: Vec::new(),
            announced: HashMap::new(),
            budget: Budget::new(
                limits.max_requests_per_second,
                limits.request_burst,
                host.server_time().0,
            ),
            offer_budget: Budget::new(
                limits.max_offer_bytes_per_second,
                limits.offer_bytes_burst,
                host.server_time().0,
            ),
            scrapes: HashMap::new(),
            next_scrape: 0,
            closing: false,
            broken: false,
            read_at: now,
            idle,
            heard: now,
            allowed: idle,
            awaiting_announces: VecDeque::new(),
            awaiting_scrapes: VecDeque::new(),
            ipv6: u64::from(peer.ip().to_canonical().is_ipv6()),
        }
    }

    /// The session of a private tracker's connection opened with passkey `key`: its
    /// announces and scrapes are checked against the registry.
    pub(crate) fn with_key(mut self, key: Option<KeyDigest>) -> Self {
        self.key = key;
        self
    }

    /// Serves the frames that arrived with the opening request. A browser announces
    /// as soon as it is connected: until its first message a connection gets the
    /// handshake's time, not the idle timeout's, so slots cannot be held for minutes
    /// by connections that never say anything.
    pub(crate) fn start(&mut self, now: Instant) -> bool {
        let mut leftover = std::mem::take(&mut self.leftover);
        let heard = self.feed(&mut leftover, now);
        if !heard {
            let first_message =
                Duration::from_secs(self.host.config().network.tcp().handshake_deadline().into());
            self.allowed = first_message.min(self.idle);
        }
        heard
    }

    /// What to do next at `now`: the messages waiting in the queue become frames,
    /// and what is to be written, the close, or how long to wait for the client
    /// follows.
    pub(crate) fn next(&mut self, now: Instant) -> Next {
        if self.broken {
            return Next::Close;
        }
        loop {
            while let Some(message) = self.queue.pop() {
                self.write_delivery(message, now);
            }
            if self.queue.overflowed() && !self.closing {
                let reason = self.report_overflow(now);
                self.close(close_code::POLICY, reason);
            }
            self.queue.set_writing(self.out.len());
            if !self.out.is_empty() {
                return Next::Write {
                    deadline: now + WRITE_TIMEOUT,
                };
            }
            if self.closing {
                return Next::Close;
            }
            let deadline = self.heard + self.allowed;
            if now >= deadline {
                self.host.counters().idle_timeouts += 1;
                self.close(close_code::AWAY, "idle timeout");
                continue;
            }
            return Next::Wait { deadline };
        }
    }

    /// Bytes read from the client at `now`; returns whether a tracker message was
    /// among them (idleness is measured in tracker messages, not bytes: a client that
    /// drips bytes, or only pings, does not keep its slot).
    /// The bytes are the driver's read buffer: frames are unmasked in it.
    pub(crate) fn received(&mut self, bytes: &mut [u8], now: Instant) -> bool {
        let heard = self.feed(bytes, now);
        if heard {
            self.heard = now;
            self.allowed = self.idle;
        }
        heard
    }

    /// The frames to write ([`Next::Write`]).
    pub(crate) fn output(&self) -> &[u8] {
        &self.out
    }

    /// The queue the driver watches while it waits: for messages, and while it writes,
    /// for an overflow.
    pub(crate) fn queue(&self) -> &Rc<ConnectionQueue> {
        &self.queue
    }

    /// The output was written.
    pub(crate) fn written(&mut self) {
        self.out.clear();
        if self.queue.is_empty() {
            // Nothing more to write soon: the buffer goes back to the worker.
            self.host.recycle(std::mem::take(&mut self.out));
        }
        self.queue.set_writing(0);
    }

    /// The write did not finish by its deadline (`stalled`), or the queue overflowed
    /// meanwhile, or the socket failed: the connection ends, counted and logged for
    /// the first two.
    pub(crate) fn write_failed(&mut self, stalled: bool, now: Instant) {
        if self.queue.overflowed() {
            self.report_overflow(now);
        } else if stalled {
            self.report_stalled(now);
        }
        self.queue.set_writing(0);
        self.out.clear();
        self.host.recycle(std::mem::take(&mut self.out));
        self.closing = true;
        self.broken = true;
    }

    /// A newcomer took the connection's place (counted then): the worker was full
    /// and this connection had been quiet the longest.
    pub(crate) fn evicted(&mut self) {
        if !self.closing {
            self.close(close_code::AGAIN, "tracker full, try again later");
        }
    }

    /// Counts and logs a client that read nothing of a write for [`WRITE_TIMEOUT`]:
    /// while a write waits, nothing more is read from the connection (no request of
    /// its is served), so a client that sends and never reads holds only its socket's
    /// buffers, and then not for long.
    fn report_stalled(&self, now: Instant) {
        self.host.counters().slow_readers += 1;
        self.log_close(now, || {
            format!("it read nothing for {} s", WRITE_TIMEOUT.as_secs())
        });
    }

    /// Logs why the connection closes, within the worker's budget for such lines
    /// (clients can provoke them at will).
    fn log_close(&self, now: Instant, why: impl FnOnce() -> String) {
        if let Some(unlogged) = self.host.may_log_close(now) {
            log::info!(
                "closing the connection of {}: {}{}",
                self.peer,
                why(),
                left_out(unlogged)
            );
        }
    }

    /// Counts and logs why the connection's queue overflowed; returns the reason for
    /// its close frame.
    fn report_overflow(&self, now: Instant) -> &'static str {
        let limits = &self.host.config().limits;
        let reason = self.queue.overflow_reason();
        {
            let mut counters = self.host.counters();
            match reason {
                Some(Overflow::Sender) => counters.slow_senders += 1,
                _ => counters.slow_readers += 1,
            }
        }
        self.log_close(now, || match reason {
            Some(Overflow::Sender) => format!(
                "its message under way had been arriving longest when this worker's {} bytes of messages still arriving were exceeded",
                limits.max_incoming_bytes_per_worker,
            ),
            Some(Overflow::Worker) => format!(
                "it held the most of this worker's {} bytes waiting to be written",
                limits.max_outgoing_bytes_per_worker,
            ),
            Some(Overflow::Connection) | None => format!(
                "it reads too slowly (over {} messages or {} bytes waiting)",
                limits.max_outgoing_messages, limits.max_outgoing_bytes,
            ),
        });
        match reason {
            Some(Overflow::Sender) => "message arriving too slowly",
            _ => "reading too slowly",
        }
    }

    /// The buffer to write frames into: the worker's, taken when the first frame
    /// since the last write is written.
    fn out(&mut self) -> &mut Vec<u8> {
        if self.out.capacity() == 0 {
            self.out = self.host.buffer();
        }
        &mut self.out
    }

    /// Serves every whole message in `bytes` (read just now); returns whether there
    /// was a tracker message among them. What did not arrive whole waits in the
    /// reader for the next read, counted against the worker's budget for messages
    /// still arriving.
    fn feed(&mut self, bytes: &mut [u8], now: Instant) -> bool {
        let mut reader = std::mem::take(&mut self.reader);
        let mut heard = false;
        let mut at = 0;
        while !self.closing {
            match reader.next(bytes, &mut at) {
                Ok(None) => break,
                Ok(Some(Event::Text(text))) => {
                    heard = true;
                    self.on_text(text, now);
                }
                Ok(Some(Event::Binary)) => {
                    self.host.counters().bad_messages += 1;
                    self.close(close_code::UNSUPPORTED, "binary messages are not supported");
                }
                Ok(Some(Event::Ping(payload))) => write_pong(self.out(), payload),
                Ok(Some(Event::Pong)) => {}
                Ok(Some(Event::Close(code))) => {
                    // The client's close handshake: echo its code, then end.
                    match code {
                        Some(code) => write_close(self.out(), code, ""),
                        None => write_empty_close(self.out()),
                    }
                    self.closing = true;
                }
                Err(FrameError::TooBig) => {
                    self.host.counters().oversized_messages += 1;
                    self.close(close_code::SIZE, "message too big");
                }
                Err(error) => {
                    self.host.counters().bad_messages += 1;
                    self.close(error.close_code(), "WebSocket protocol error");
                }
            }
        }
        self.reader = reader;
        self.host.note_receiving(&self.queue, self.reader.held());
        heard
    }

    /// Sends a close frame; the connection ends once it is written.
    fn close(&mut self, code: u16, reason: &'static str) {
        write_close(self.out(), code, reason);
        self.closing = true;
    }

    fn on_text(&mut self, bytes: &[u8], now: Instant) {
        self.read_at = now;
        match self.host.check_rate(self.peer.ip()) {
            Verdict::Allow => {}
            Verdict::Limited => return self.refuse(Action::Announce, None, CLIENT_RATE_LIMITED),
            Verdict::Banned | Verdict::NewBan => {
                return self.close(close_code::POLICY, "banned");
            }
        }
        match parse_client_message(bytes) {
            Err(err) => {
                self.host.counters().bad_messages += 1;
                self.reply_error(err.into());
            }
            Ok(ClientMessage::Announce(announce)) => self.announce(announce),
            Ok(ClientMessage::Scrape(scrape)) => self.scrape(scrape),
        }
    }

    /// Answers the message being handled with `error`, here and now.
    fn reply_error(&mut self, error: ErrorResponse) {
        self.queue
            .push(ToConnection::Message(ServerMessage::Error(error)));
        // Answered within the read that brought it.
        self.host.record_latency(Duration::ZERO);
    }

    /// Records the latency of the oldest request of `kind` waiting for a reply.
    fn answered(&mut self, kind: Awaited, now: Instant) {
        let waiting = match kind {
            Awaited::Announce => &mut self.awaiting_announces,
            Awaited::Scrape => &mut self.awaiting_scrapes,
        };
        if let Some(read_at) = waiting.pop_front() {
            self.host
                .record_latency(now.saturating_duration_since(read_at));
        }
    }

    fn refuse(&mut self, action: Action, info_hash: Option<Id20>, reason: &'static str) {
        self.reply_error(ErrorResponse {
            action: Some(action),
            info_hash,
            reason: reason.into(),
            interval: None,
        });
    }

    fn announce(&mut self, mut announce: AnnounceRequest) {
        let info_hash = announce.info_hash;
        let is_answer = announce.answer.is_some();
        {
            let mut counters = self.host.counters();
            if is_answer {
                counters.answers += 1;
                counters.answers_v6 += self.ipv6;
            } else {
                counters.announces += 1;
                counters.announces_v6 += self.ipv6;
                counters.clients.count(&announce.peer_id.0);
            }
        }
        // Answers count too: each is a message the tracker relays.
        if !self.budget.take(1, self.host.server_time().0) {
            self.host.counters().rate_limited += 1;
            return self.refuse(Action::Announce, Some(info_hash), RATE_LIMITED);
        }
        // Only a peer this connection announced can answer in a torrent: anything else
        // is refused here, without a trip to a swarm worker.
        if is_answer && self.announced.get(&info_hash) != Some(&announce.peer_id) {
            self.host.counters().answers_refused += 1;
            return self.refuse(Action::Announce, Some(info_hash), ANSWER_REFUSED);
        }
        if !self.host.allows(&info_hash.0) {
            self.host.counters().access_denied += 1;
            return self.refuse(Action::Announce, Some(info_hash), NOT_ALLOWED);
        }
        if let Err(refusal) = self.host.check_client(&announce.peer_id.0) {
            self.host.counters().client_refused += 1;
            return self.refuse(Action::Announce, Some(info_hash), refusal.reason());
        }
        match self
            .host
            .private_announce(self.key, &announce, self.ipv6 != 0)
        {
            Ok(true) => {}
            // Past its user's peer lists: served, its offers relayed to no one.
            Ok(false) => announce.offers.clear(),
            Err(refusal) => {
                self.host.counters().private_refused += 1;
                return self.refuse(Action::Announce, Some(info_hash), refusal.reason());
            }
        }
        // Session descriptions are relayed untouched: only sizes a browser sends, and
        // JSON objects, are.
        let max_description = self.host.config().limits.max_description_size;
        let fits = |description: &RawJson| {
            let text = description.get();
            text.len() <= max_description && text.starts_with('{')
        };
        if let Some(answer) = &announce.answer
            && !fits(&answer.answer)
        {
            self.host.counters().oversized_messages += 1;
            return self.refuse(Action::Announce, Some(info_hash), DESCRIPTION_REFUSED);
        }
        let offers = announce.offers.len();
        announce.offers.retain(|offer| fits(&offer.offer));
        self.host.counters().oversized_messages += (offers - announce.offers.len()) as u64;
        let workers = self.host.swarm_workers();
        let worker = shard_for(&info_hash.0, workers);
        if is_answer {
            // An answer is relayed, nothing more (the swarm ignores its event): a
            // "stopped" on it must not end this connection's part in the torrent
            // while its peer stays in the swarm, left behind when it closes.
        } else if announce.event == AnnounceEvent::Stopped {
            // Only a stop of the peer this connection announced ends its part in the
            // torrent; a stop under another peer id removes nothing of ours.
            if self.announced.get(&info_hash) == Some(&announce.peer_id) {
                self.announced.remove(&info_hash);
            }
        } else {
            let limit = self.host.config().limits.max_torrents_per_connection;
            match self.announced.get(&info_hash) {
                None if self.announced.len() >= limit => {
                    self.host.counters().too_many_torrents += 1;
                    return self.refuse(
                        Action::Announce,
                        Some(info_hash),
                        "too many torrents on one connection",
                    );
                }
                Some(old) if *old != announce.peer_id => {
                    // The client changed its peer id: the old one leaves now.
                    let leave = RequestKind::Leave(vec![(info_hash, *old)]);
                    self.send(worker, leave);
                }
                _ => {}
            }
            self.announced.insert(info_hash, announce.peer_id);
        }
        let wanted = announce
            .numwant
            .map_or(usize::MAX, |wanted| wanted.min(usize::MAX as u64) as usize);
        announce
            .offers
            .truncate(wanted.min(self.host.config().protocol.max_offers));
        // Within the connection's offer budget, in order; the rest are not forwarded.
        let now = self.host.server_time().0;
        let offers = announce.offers.len();
        let budget = &mut self.offer_budget;
        let within = announce
            .offers
            .iter()
            .take_while(|offer| {
                let bytes = u32::try_from(offer.offer.get().len()).unwrap_or(u32::MAX);
                budget.take(bytes, now)
            })
            .count();
        announce.offers.truncate(within);
        self.host.counters().offers_over_budget += (offers - within) as u64;
        if !is_answer {
            // An answer is relayed, not answered: it has no reply to time.
            self.awaiting_announces.push_back(self.read_at);
        }
        self.send(worker, RequestKind::Announce(Box::new(announce)));
    }

    fn scrape(&mut self, scrape: ScrapeRequest) {
        {
            let mut counters = self.host.counters();
            counters.scrapes += 1;
            counters.scrapes_v6 += self.ipv6;
        }
        if !self.budget.take(1, self.host.server_time().0) {
            self.host.counters().rate_limited += 1;
            return self.refuse(Action::Scrape, None, RATE_LIMITED);
        }
        let hashes = scrape.info_hashes;
        if hashes.is_empty() {
            return self.refuse(
                Action::Scrape,
                None,
                "a scrape must name info hashes (full scrapes are not served)",
            );
        }
        if hashes.len() > self.host.config().protocol.max_scrape_torrents {
            return self.refuse(Action::Scrape, None, "too many info hashes in one scrape");
        }
        if !hashes.iter().all(|hash| self.host.allows(&hash.0)) {
            self.host.counters().access_denied += 1;
            return self.refuse(Action::Scrape, None, NOT_ALLOWED);
        }
        if let Err(refusal) = self.host.private_scrape(self.key, &hashes) {
            self.host.counters().private_refused += 1;
            return self.refuse(Action::Scrape, None, refusal.reason());
        }
        let workers = self.host.swarm_workers();
        let mut split = ScrapeSplit::default();
        split.split(hashes.iter().map(|hash| &hash.0), workers);
        let parts: Vec<(usize, Vec<Id20>)> = split.shares(&hashes).collect();
        let scrape_id = self.next_scrape;
        self.next_scrape = self.next_scrape.wrapping_add(1);
        self.awaiting_scrapes.push_back(self.read_at);
        if parts.len() > 1 {
            self.scrapes.insert(
                scrape_id,
                PendingScrape {
                    parts_left: parts.len(),
                    failed: false,
                    files: Vec::new(),
                },
            );
        }
        for (worker, info_hashes) in parts {
            self.send(
                worker,
                RequestKind::Scrape {
                    scrape_id,
                    info_hashes,
                },
            );
        }
    }

    fn send(&self, worker: usize, kind: RequestKind) {
        let request = SwarmRequest {
            from: self.connection,
            kind,
        };
        self.host.submit(worker, request);
    }

    /// Turns a message from the queue into a frame in `out`.
    fn write_delivery(&mut self, delivery: ToConnection, now: Instant) {
        let message = match delivery {
            ToConnection::Message(message) => {
                let mut counters = self.host.counters();
                match message {
                    ServerMessage::Offer(_) => counters.offers_forwarded += 1,
                    ServerMessage::Answer(_) => counters.answers_relayed += 1,
                    _ => {}
                }
                drop(counters);
                if matches!(message, ServerMessage::AnnounceResponse(_)) {
                    self.answered(Awaited::Announce, now);
                }
                message
            }
            ToConnection::AnswerRefused(info_hash) => {
                self.host.counters().answers_refused += 1;
                error_message(Action::Announce, Some(info_hash), ANSWER_REFUSED)
            }
            ToConnection::PeerIdTaken(info_hash) => {
                self.host.counters().peer_ids_taken += 1;
                self.answered(Awaited::Announce, now);
                error_message(Action::Announce, Some(info_hash), PEER_ID_TAKEN)
            }
            ToConnection::TrackerFull(info_hash, interval) => {
                self.answered(Awaited::Announce, now);
                ServerMessage::Error(ErrorResponse {
                    action: Some(Action::Announce),
                    info_hash: Some(info_hash),
                    reason: TRACKER_FULL.into(),
                    interval: Some(u64::from(interval)),
                })
            }
            ToConnection::Shed {
                info_hash,
                scrape_id,
            } => {
                // Told when to come back (the WebTorrent client waits for the interval
                // of an error, as of an announce reply).
                let interval = Some(u64::from(self.host.backoff_interval()));
                let Some(scrape_id) = scrape_id else {
                    self.answered(Awaited::Announce, now);
                    return self.write_message(&busy_message(
                        Action::Announce,
                        info_hash,
                        interval,
                    ));
                };
                match self.scrapes.get_mut(&scrape_id) {
                    None => {
                        self.answered(Awaited::Scrape, now);
                        busy_message(Action::Scrape, None, interval)
                    }
                    Some(pending) => {
                        // One busy part fails the whole scrape, with one error.
                        pending.parts_left -= 1;
                        let first = !pending.failed;
                        pending.failed = true;
                        if pending.parts_left == 0 {
                            self.scrapes.remove(&scrape_id);
                        }
                        if !first {
                            return;
                        }
                        self.answered(Awaited::Scrape, now);
                        busy_message(Action::Scrape, None, interval)
                    }
                }
            }
            ToConnection::ScrapePart { scrape_id, files } => {
                let message = match self.scrapes.get_mut(&scrape_id) {
                    None => ServerMessage::Scrape(ScrapeResponse { files }),
                    Some(pending) => {
                        pending.parts_left -= 1;
                        if !pending.failed {
                            pending.files.extend(files);
                        }
                        if pending.parts_left > 0 {
                            return;
                        }
                        let pending = self.scrapes.remove(&scrape_id).expect("present");
                        if pending.failed {
                            return;
                        }
                        ServerMessage::Scrape(ScrapeResponse {
                            files: pending.files,
                        })
                    }
                };
                self.answered(Awaited::Scrape, now);
                message
            }
        };
        self.write_message(&message);
    }

    fn write_message(&mut self, message: &ServerMessage) {
        {
            let mut counted = self.host.counters();
            let counters = &mut *counted;
            let (all, ipv6) = match message {
                ServerMessage::AnnounceResponse(_) => (
                    &mut counters.announce_responses,
                    &mut counters.announce_responses_v6,
                ),
                ServerMessage::Offer(_) => (
                    &mut counters.offer_responses,
                    &mut counters.offer_responses_v6,
                ),
                ServerMessage::Answer(_) => (
                    &mut counters.answer_responses,
                    &mut counters.answer_responses_v6,
                ),
                ServerMessage::Scrape(_) => (
                    &mut counters.scrape_responses,
                    &mut counters.scrape_responses_v6,
                ),
                // A shed request's busy reply, with the interval to come back after.
                ServerMessage::Error(error) if error.reason == BUSY => (
                    &mut counters.backoff_responses,
                    &mut counters.backoff_responses_v6,
                ),
                ServerMessage::Error(_) => (
                    &mut counters.error_responses,
                    &mut counters.error_responses_v6,
                ),
            };
            *all += 1;
            *ipv6 += self.ipv6;
        }
        write_text(self.out(), |out| write_server_message(message, out));
    }

    /// The connection is closing: its peers leave their swarms now.
    pub(crate) fn leave(&mut self) {
        self.host.unregister(self.connection);
        let workers = self.host.swarm_workers();
        let mut parts: Vec<Vec<(Id20, Id20)>> = vec![Vec::new(); workers];
        for (info_hash, peer_id) in self.announced.drain() {
            parts[shard_for(&info_hash.0, workers)].push((info_hash, peer_id));
        }
        for (worker, peers) in parts.into_iter().enumerate() {
            if !peers.is_empty() {
                self.send(worker, RequestKind::Leave(peers));
            }
        }
    }
}

fn error_message(action: Action, info_hash: Option<Id20>, reason: &'static str) -> ServerMessage {
    ServerMessage::Error(ErrorResponse {
        action: Some(action),
        info_hash,
        reason: reason.into(),
        interval: None,
    })
}

/// The reply to a shed request: busy, with the `interval` to come back after.
fn busy_message(action: Action, info_hash: Option<Id20>, interval: Option<u64>) -> ServerMessage {
    ServerMessage::Error(ErrorResponse {
        action: Some(action),
        info_hash,
        reason: BUSY.into(),
        interval,
    })
}

#[cfg(any(test, fuzzing))]
pub(crate) mod rig;
#[cfg(test)]
mod tests;
