//! A load worker: some sockets, each with a window of requests in flight, or sending
//! its share of a fixed rate.
//!
//! Each socket is connected to the tracker, so `sendmmsg`/`recvmmsg` need no addresses
//! and the kernel drops datagrams from anyone else. A socket starts with a connect
//! request; once it has a connection id it sends a full window and then one new request
//! per reply. If a socket hears nothing for the response timeout, its window is written
//! off (counted) and sent again. Connection ids are renewed every minute, as BEP 15
//! clients do.
//!
//! At a fixed rate the worker wakes when its [`FixedRate`] schedule has a request due
//! (epoll rounds that up to a whole millisecond, so above about 1,000 requests a second
//! per worker they go out in ticks of a millisecond), or for replies, and sends what is
//! due over its connected sockets in chunks of up to 64; replies are counted as they
//! come and never trigger a send.
//!
//! A request's transaction id is the time it was sent, in microseconds since the
//! worker started (wrapping every 71 minutes): the tracker echoes it, so each reply's
//! latency is known without keeping anything per request.
//!
//! With obeying clients (`[clients]`), the worker owns its share of them instead: it
//! sends the announces [`Obeying`] has due (over its connected sockets in turn), a
//! client's announce carrying the client's number as its transaction id, and hands
//! each reply back to the client, which comes back after the interval it was given
//! (or backs off).

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mio::net::UdpSocket;
use mio::{Events, Interest, Poll, Token};
use shoal_common::Shutdown;
use shoal_sockets::{RecvBatch, SendBatch};
use shoal_udp_protocol::{ConnectionId, TransactionId, action};
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::Config;
use shoal_load_test_common::FixedRate;
use shoal_load_test_common::LatencyRecorder;
use shoal_load_test_common::Population;
use shoal_load_test_common::{Obeying, ObeyingSettings};

use crate::requests::{Kind, RequestWriter};
use crate::stats::{Counters, SharedCounters};

/// Connection ids are renewed after this long (BEP 15: clients use one for a minute).
const CONNECTION_ID_AGE: Duration = Duration::from_secs(60);
/// Requests written per `sendmmsg`.
const SEND_CHUNK: usize = 64;
/// A window is topped up once this many requests are missing (or half the window, if
/// smaller): refilling after every reply would cost a system call per request against a
/// tracker that answers one datagram at a time.
const REFILL_BATCH: usize = 32;
/// At a fixed rate, how far behind a worker catches up at once (or 64 requests, if
/// more); older requests are skipped, so a descheduled worker does not send a burst
/// its rate never had.
const MAX_CATCH_UP: Duration = Duration::from_millis(10);
/// How long a worker waits for events at most.
const POLL_INTERVAL: Duration = Duration::from_millis(5);

/// A worker's share of a fixed rate.
#[derive(Clone, Copy, Debug)]
struct Rate {
    per_second: f64,
    schedule: FixedRate,
    /// The socket the next chunk goes to.
    next_socket: usize,
}

impl Rate {
    fn new(per_second: f64, now: Instant) -> Self {
        Self {
            per_second,
            schedule: Self::schedule(per_second, now),
            next_socket: 0,
        }
    }

    /// A schedule that starts at `now`.
    fn schedule(per_second: f64, now: Instant) -> FixedRate {
        let catch_up = (per_second * MAX_CATCH_UP.as_secs_f64()).ceil() as u64;
        FixedRate::per_second(per_second, now, catch_up.max(SEND_CHUNK as u64))
    }
}

/// A worker's obeying clients.
#[derive(Debug)]
struct Clients {
    obeying: Obeying,
    /// The population index of the first.
    first: usize,
    /// Scratch: the clients due now.
    due: Vec<u32>,
    /// The socket the next chunk goes to.
    next_socket: usize,
    /// When (microseconds) one client in how many announces again at once.
    restart: Option<(u64, usize)>,
}

struct LoadSocket {
    socket: UdpSocket,
    connection_id: Option<(ConnectionId, Instant)>,
    connect_sent_at: Option<Instant>,
    in_flight: usize,
    last_reply: Instant,
}

/// One worker thread's state.
pub(crate) struct Worker {
    poll: Poll,
    sockets: Vec<LoadSocket>,
    population: Arc<Population>,
    writer: RequestWriter,
    counters: Counters,
    shared: Arc<SharedCounters>,
    shutdown: Shutdown,
    window: usize,
    refill_at: usize,
    /// Set at a fixed rate: then windows and timeouts are not used.
    rate: Option<Rate>,
    timeout: Duration,
    ipv6: bool,
    recv: RecvBatch,
    send: SendBatch,
    out: Vec<u8>,
    ends: Vec<usize>,
    /// Transaction ids count microseconds from here.
    epoch: Instant,
    latency: LatencyRecorder,
    /// Obeying clients, when `[clients]` has some.
    clients: Option<Clients>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("sockets", &self.sockets.len())
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Creates the worker's sockets, connected to the server.
    pub(crate) fn new(
        index: usize,
        config: &Config,
        population: Arc<Population>,
        shared: Arc<SharedCounters>,
        latency: LatencyRecorder,
        shutdown: Shutdown,
    ) -> anyhow::Result<Self> {
        let poll = Poll::new().context("cannot create epoll instance")?;
        let network = &config.network;
        let server = config.server_address;
        let mut sockets = Vec::new();
        for i in 0..network.sockets_per_worker {
            let source = if network.source_ips.is_empty() {
                if server.is_ipv4() {
                    IpAddr::V4(Ipv4Addr::UNSPECIFIED)
                } else {
                    IpAddr::V6(Ipv6Addr::UNSPECIFIED)
                }
            } else {
                network.source_ips
                    [(index * network.sockets_per_worker + i) % network.source_ips.len()]
            };
            let mut socket = UdpSocket::from_std(connected_socket(
                SocketAddr::new(source, 0),
                server,
                network.recv_buffer_size,
            )?);
            poll.registry()
                .register(&mut socket, Token(i), Interest::READABLE)
                .context("cannot register socket")?;
            sockets.push(LoadSocket {
                socket,
                connection_id: None,
                connect_sent_at: None,
                in_flight: 0,
                last_reply: Instant::now(),
            });
        }
        Ok(Self {
            poll,
            sockets,
            writer: RequestWriter::new(&config.requests, index, config.workers),
            population,
            counters: Counters::default(),
            shared,
            shutdown,
            window: network.requests_in_flight,
            refill_at: REFILL_BATCH.min(network.requests_in_flight / 2).max(1),
            rate: (network.requests_per_second > 0).then(|| {
                Rate::new(
                    network.requests_per_second as f64 / config.workers as f64,
                    Instant::now(),
                )
            }),
            timeout: Duration::from_millis(network.response_timeout_ms),
            ipv6: server.is_ipv6(),
            recv: RecvBatch::new(256, 2048),
            send: SendBatch::new(),
            out: Vec::with_capacity(SEND_CHUNK * 1500),
            ends: Vec::with_capacity(SEND_CHUNK),
            epoch: Instant::now(),
            latency,
            clients: (config.clients.count > 0).then(|| {
                let (first, settings): (usize, ObeyingSettings) =
                    config.clients.share(index, config.workers);
                let restart = config.clients.restart_at;
                Clients {
                    obeying: Obeying::new(settings),
                    first,
                    due: Vec::new(),
                    next_socket: 0,
                    restart: (restart > 0)
                        .then(|| (u64::from(restart) * 1_000_000, config.clients.restart_every)),
                }
            }),
        })
    }

    /// Runs until shutdown.
    pub(crate) fn run(mut self) -> anyhow::Result<()> {
        let mut events = Events::with_capacity(64);
        while !self.shutdown.is_requested() {
            let now = Instant::now();
            self.maintain(now);
            let connected = self.sockets.iter().any(|s| s.connection_id.is_some());
            let wait = match (&self.rate, &self.clients) {
                // Rounded up to a whole millisecond by epoll: the rate's tick. Until a
                // connect is answered nothing can be sent, so no tick is needed.
                (Some(rate), _) if connected => rate.schedule.next().saturating_duration_since(now),
                (_, Some(clients)) if connected => {
                    clients.obeying.next_event().map_or(POLL_INTERVAL, |at| {
                        Duration::from_micros(at.saturating_sub(self.micros64(now)))
                    })
                }
                _ => POLL_INTERVAL,
            };
            match self.poll.poll(&mut events, Some(wait.min(POLL_INTERVAL))) {
                Ok(()) => {}
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(err) => return Err(err).context("epoll failed"),
            }
            for event in &events {
                self.drain(event.token().0);
            }
            if self.rate.is_some() {
                self.send_due(Instant::now());
            }
            if self.clients.is_some() {
                self.send_clients(Instant::now());
            }
            self.counters.flush_into(&self.shared);
        }
        self.latency.flush();
        Ok(())
    }

    /// Connects sockets that need an id and refills windows that went quiet.
    fn maintain(&mut self, now: Instant) {
        for index in 0..self.sockets.len() {
            let socket = &mut self.sockets[index];
            let stale_id = socket
                .connection_id
                .is_none_or(|(_, at)| now - at > CONNECTION_ID_AGE);
            let connect_pending = socket
                .connect_sent_at
                .is_some_and(|at| now - at < self.timeout);
            if stale_id && !connect_pending {
                socket.connect_sent_at = Some(now);
                self.send_connect(index);
            }
            if self.rate.is_some() || self.clients.is_some() {
                // A fixed rate and clients send on schedule, never to refill a window.
                continue;
            }
            let socket = &mut self.sockets[index];
            if socket.connection_id.is_some() && now - socket.last_reply > self.timeout {
                if socket.in_flight > 0 {
                    self.counters.timeouts += 1;
                }
                socket.in_flight = 0;
                socket.last_reply = now;
            }
            self.top_up(index);
        }
    }

    /// Sends the requests a window is missing, once enough are.
    fn top_up(&mut self, index: usize) {
        let missing = self.window.saturating_sub(self.sockets[index].in_flight);
        if missing >= self.refill_at && self.sockets[index].connection_id.is_some() {
            self.send_requests(index, missing);
        }
    }

    /// Reads every queued reply of socket `index`, then tops its window up.
    fn drain(&mut self, index: usize) {
        loop {
            match self.recv.recv(&self.sockets[index].socket) {
                Ok(count) => {
                    let now = Instant::now();
                    let now_micros = self.micros(now);
                    for datagram in self.recv.iter() {
                        if let Some(clients) = &mut self.clients {
                            let micros = now_micros64(self.epoch, now);
                            obey(
                                clients,
                                &mut self.counters,
                                &mut self.latency,
                                datagram.bytes,
                                now,
                                micros,
                            );
                        } else if let Some(sent) = datagram.bytes.get(4..8) {
                            let sent = u32::from_be_bytes(sent.try_into().expect("4 bytes"));
                            let micros = now_micros.wrapping_sub(sent);
                            self.latency.record_micros(now, u64::from(micros));
                        }
                        count_reply(
                            &mut self.counters,
                            &mut self.sockets[index],
                            self.ipv6,
                            datagram.bytes,
                            now,
                        );
                    }
                    let socket = &mut self.sockets[index];
                    socket.in_flight = socket.in_flight.saturating_sub(count);
                    socket.last_reply = now;
                }
                Err(err) if err.kind() == ErrorKind::WouldBlock => {
                    if self.rate.is_none() && self.clients.is_none() {
                        self.top_up(index);
                    }
                    return;
                }
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(err) => {
                    // ECONNREFUSED: nothing listens there (yet); keep trying.
                    log::debug!("receive failed: {err}");
                    return;
                }
            }
        }
    }

    fn send_connect(&mut self, index: usize) {
        self.out.clear();
        self.ends.clear();
        let transaction_id = self.transaction();
        RequestWriter::connect(&mut self.out, transaction_id);
        self.ends.push(self.out.len());
        if self.flush(index) == 1 {
            self.counters.connect_sent += 1;
        }
    }

    /// Sends the requests the fixed rate has due at `now`, a chunk per connected
    /// socket in turn; what cannot go out is counted as skipped.
    fn send_due(&mut self, now: Instant) {
        let Some(rate) = &mut self.rate else {
            return;
        };
        let connected = self
            .sockets
            .iter()
            .filter(|socket| socket.connection_id.is_some())
            .count();
        if connected == 0 {
            // Nothing can be sent before a connect reply: the schedule starts then.
            rate.schedule = Rate::schedule(rate.per_second, now);
            return;
        }
        let due = rate.schedule.due(now);
        self.counters.skipped += due.skipped;
        let mut left = due.send as usize;
        let mut index = rate.next_socket;
        while left > 0 {
            index = (index + 1) % self.sockets.len();
            if self.sockets[index].connection_id.is_none() {
                continue;
            }
            let chunk = left.min(SEND_CHUNK);
            let sent = self.send_requests(index, chunk);
            self.counters.skipped += (chunk - sent) as u64;
            left -= chunk;
        }
        if let Some(rate) = &mut self.rate {
            rate.next_socket = index;
        }
    }

    /// Sends the announces of the clients due at `now`, a chunk per connected socket
    /// in turn; an announce that cannot go out is lost as a dropped datagram would be
    /// (its client times out and backs off). Starts a restart wave when it is due.
    fn send_clients(&mut self, now: Instant) {
        let now_micros = self.micros64(now);
        let Some(clients) = &mut self.clients else {
            return;
        };
        if let Some((at, every)) = clients.restart
            && now_micros >= at
        {
            let restarted = clients
                .obeying
                .restart(now_micros, every, Duration::from_secs(1));
            log::info!("{restarted} clients restart at once");
            clients.restart = None;
        }
        if !self.sockets.iter().any(|s| s.connection_id.is_some()) {
            return;
        }
        loop {
            let Some(clients) = &mut self.clients else {
                return;
            };
            clients.due.clear();
            clients
                .obeying
                .due(now_micros, SEND_CHUNK, &mut clients.due);
            self.counters.timeouts += clients.obeying.take_outcomes().timeouts;
            if clients.due.is_empty() {
                return;
            }
            let mut index = clients.next_socket;
            let connection_id = loop {
                index = (index + 1) % self.sockets.len();
                if let Some((id, _)) = self.sockets[index].connection_id {
                    break id;
                }
            };
            clients.next_socket = index;
            self.out.clear();
            self.ends.clear();
            for &client in &clients.due {
                let peer = (clients.first + client as usize) % self.population.peer_count();
                self.writer.announce_for(
                    &self.population,
                    peer,
                    connection_id,
                    TransactionId(client),
                    &mut self.out,
                );
                self.ends.push(self.out.len());
            }
            let sent = self.flush(index);
            self.counters.announce_sent += sent as u64;
            let Some(clients) = &mut self.clients else {
                return;
            };
            self.counters.skipped += (clients.due.len() - sent) as u64;
            for &client in &clients.due {
                clients.obeying.sent(client, now_micros);
            }
        }
    }

    /// Writes and sends `count` requests on socket `index`; returns how many went.
    fn send_requests(&mut self, index: usize, count: usize) -> usize {
        let Some((connection_id, _)) = self.sockets[index].connection_id else {
            return 0;
        };
        let mut left = count;
        let mut total = 0;
        while left > 0 {
            self.out.clear();
            self.ends.clear();
            let mut kinds = [0u64; 3];
            // One clock read per chunk: the chunk goes out in one system call.
            let transaction_id = self.transaction();
            for _ in 0..left.min(SEND_CHUNK) {
                let kind = self.writer.write(
                    &self.population,
                    connection_id,
                    transaction_id,
                    &mut self.out,
                );
                kinds[kind as usize] += 1;
                self.ends.push(self.out.len());
            }
            let written = self.ends.len();
            let sent = self.flush(index);
            // Count what went out; with a partial send, the shortfall is taken from
            // announces first (what nearly every request is), then scrapes, then
            // connects, so the counts never go below what was written.
            let mut short = (written - sent) as u64;
            for kind in [Kind::Announce, Kind::Scrape, Kind::Connect] {
                let taken = short.min(kinds[kind as usize]);
                kinds[kind as usize] -= taken;
                short -= taken;
            }
            self.counters.connect_sent += kinds[Kind::Connect as usize];
            self.counters.scrape_sent += kinds[Kind::Scrape as usize];
            self.counters.announce_sent += kinds[Kind::Announce as usize];
            total += sent;
            if sent < written {
                return total;
            }
            left -= written;
        }
        total
    }

    /// Sends the packets in `out`; returns how many went.
    fn flush(&mut self, index: usize) -> usize {
        let (out, ends) = (&self.out, &self.ends);
        let packets = ends.iter().scan(0, |start, &end| {
            let packet = &out[*start..end];
            *start = end;
            Some((None, packet))
        });
        let sent = match self.send.send(&self.sockets[index].socket, packets) {
            Ok(sent) => sent,
            Err(err) => {
                if err.kind() != ErrorKind::WouldBlock {
                    log::debug!("send failed: {err}");
                }
                0
            }
        };
        self.sockets[index].in_flight += sent;
        sent
    }

    /// The transaction id of a request sent now: the time.
    fn transaction(&self) -> TransactionId {
        TransactionId(self.micros(Instant::now()))
    }

    /// `at` in microseconds since the worker started, wrapping.
    fn micros(&self, at: Instant) -> u32 {
        at.saturating_duration_since(self.epoch).as_micros() as u32
    }

    /// `at` in microseconds since the worker started.
    fn micros64(&self, at: Instant) -> u64 {
        now_micros64(self.epoch, at)
    }
}

/// `at` in microseconds since `epoch`.
fn now_micros64(epoch: Instant, at: Instant) -> u64 {
    at.saturating_duration_since(epoch).as_micros() as u64
}

/// Hands a reply to the client whose number is its transaction id: an announce reply
/// (a backoff reply too) brings it back after its interval, an error makes it back
/// off. Connect replies and the counts are [`count_reply`]'s.
fn obey(
    clients: &mut Clients,
    counters: &mut Counters,
    latency: &mut LatencyRecorder,
    bytes: &[u8],
    now: Instant,
    now_micros: u64,
) {
    if bytes.len() < 8 {
        return;
    }
    let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let client = word(4);
    let taken = match word(0) {
        action::ANNOUNCE if bytes.len() >= 20 => {
            let interval = word(8);
            let taken = clients.obeying.answered(client, interval, now_micros);
            if taken.is_some() {
                counters.interval_sum += u64::from(interval);
                counters.intervals += 1;
            }
            taken
        }
        action::ERROR => clients.obeying.refused(client, None, now_micros),
        _ => None,
    };
    if let Some(micros) = taken {
        latency.record_micros(now, micros);
    }
}

/// Counts one reply; a connect reply gives the socket its connection id.
fn count_reply(
    counters: &mut Counters,
    socket: &mut LoadSocket,
    ipv6: bool,
    bytes: &[u8],
    now: Instant,
) {
    if bytes.len() < 8 {
        counters.invalid_replies += 1;
        return;
    }
    let peer_len = if ipv6 { 18 } else { 6 };
    match u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) {
        action::CONNECT if bytes.len() >= 16 => {
            counters.connect_replies += 1;
            let id = u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes"));
            socket.connection_id = Some((ConnectionId(id), now));
            socket.connect_sent_at = None;
        }
        action::ANNOUNCE if bytes.len() >= 20 => {
            counters.announce_replies += 1;
            counters.peers_received += ((bytes.len() - 20) / peer_len) as u64;
        }
        action::SCRAPE => counters.scrape_replies += 1,
        action::ERROR => {
            counters.error_replies += 1;
            if counters.error_replies == 1 {
                log::warn!("error reply: {}", String::from_utf8_lossy(&bytes[8..]));
            }
        }
        _ => counters.invalid_replies += 1,
    }
}

fn connected_socket(
    local: SocketAddr,
    server: SocketAddr,
    recv_buffer: usize,
) -> anyhow::Result<std::net::UdpSocket> {
    let socket = Socket::new(
        Domain::for_address(server),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    socket.set_nonblocking(true)?;
    if recv_buffer > 0 {
        let _ = socket.set_recv_buffer_size(recv_buffer);
    }
    socket
        .bind(&local.into())
        .with_context(|| format!("cannot bind {local}"))?;
    socket
        .connect(&server.into())
        .with_context(|| format!("cannot connect to {server}"))?;
    Ok(socket.into())
}
