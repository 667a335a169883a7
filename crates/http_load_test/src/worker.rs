//! A load worker: connections, each with one request in flight.
//!
//! A connection is opened, sends a request, reads the response, and then sends the next
//! request (keep-alive) or is replaced by a new connection. TLS runs through a rustls
//! client connection over the same non-blocking socket. Connections that fail are
//! counted and replaced on the next tick, so a tracker that refuses connections cannot
//! make the load tester spin.
//!
//! With obeying clients (`[clients]`), a connection sends only the announces of
//! clients that are due ([`Obeying`]), one at a time, and waits idle when none is; a
//! response hands the client its interval (or a failure's interval, or a backoff).

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rustls::ClientConnection;
use rustls::pki_types::ServerName;
use shoal_common::Shutdown;
use shoal_load_test_common::LatencyRecorder;
use shoal_load_test_common::Population;
use shoal_load_test_common::{Obeying, ObeyingSettings};

use crate::config::Config;
use crate::requests::{Kind, RequestWriter};
use crate::stats::{Counters, SharedCounters};

/// How often failed connections are replaced and timeouts checked.
const TICK: Duration = Duration::from_millis(20);

enum Transport {
    Plain(TcpStream),
    Tls(TcpStream, Box<ClientConnection>),
}

impl Transport {
    fn socket(&mut self) -> &mut TcpStream {
        match self {
            Self::Plain(stream) | Self::Tls(stream, _) => stream,
        }
    }
}

struct Connection {
    transport: Transport,
    /// Plain bytes not yet written (plain transport only).
    pending: Vec<u8>,
    /// Response bytes received so far.
    received: Vec<u8>,
    /// The kind of the request awaiting its response.
    waiting_for: Option<Kind>,
    sent_at: Instant,
    /// With obeying clients: the client whose announce awaits its response.
    client: Option<u32>,
    /// Its poll token: the slot in the low bits, a count of the slot's connections
    /// above, so that events still queued for a closed connection are not taken for
    /// its successor's.
    token: usize,
}

/// Bits of a poll token that hold the slot.
const SLOT_BITS: u32 = 24;

/// A worker's obeying clients.
#[derive(Debug)]
struct Clients {
    obeying: Obeying,
    /// The population index of the first.
    first: usize,
    /// Clients due and not sent yet, oldest first, with their tickets: their
    /// timeout runs from when they came due, as a client's runs while it waits for
    /// a connection, so a tracker that cannot take connections loses them. The
    /// newest is sent first: a client whose connection attempt finds no room (its
    /// SYN dropped from a full backlog) tries again later, competing afresh, not in
    /// the order it first came; sending the oldest first would hand the tracker the
    /// clients nearest to giving up.
    due: std::collections::VecDeque<(u32, u32)>,
    /// Scratch for [`Obeying::due`].
    fresh: Vec<u32>,
    /// Microseconds count from here.
    epoch: Instant,
}

impl Clients {
    fn micros(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_micros() as u64
    }

    /// The next client due at `now` that has not given up waiting, if any.
    fn next_due(&mut self, now: Instant, counters: &mut Counters) -> Option<u32> {
        let now = self.micros(now);
        // Also counts (and reschedules) the clients queued here whose timeout passed.
        self.fresh.clear();
        self.obeying.due(now, 1024, &mut self.fresh);
        for &client in &self.fresh {
            let ticket = self.obeying.sent(client, now);
            self.due.push_back((client, ticket));
        }
        counters.client_timeouts += self.obeying.take_outcomes().timeouts;
        // Those that gave up are at the front (they came due first).
        while let Some(&(client, ticket)) = self.due.front() {
            if self.obeying.waiting(client, ticket) {
                break;
            }
            self.due.pop_front();
        }
        while let Some((client, ticket)) = self.due.pop_back() {
            if self.obeying.waiting(client, ticket) {
                return Some(client);
            }
        }
        None
    }
}

/// One worker thread's state.
pub(crate) struct Worker {
    poll: Poll,
    connections: Vec<Option<Connection>>,
    population: Arc<Population>,
    writer: RequestWriter,
    counters: Counters,
    shared: Arc<SharedCounters>,
    shutdown: Shutdown,
    server: SocketAddr,
    /// The TLS client of each connection slot (each its own session store), and the
    /// server name.
    tls: Option<(Vec<Arc<rustls::ClientConfig>>, ServerName<'static>)>,
    keep_alive: bool,
    timeout: Duration,
    /// Where requests are written.
    scratch: Vec<u8>,
    /// Where responses are read into (apart from `scratch`, whose length is the last
    /// request's).
    read_buffer: Vec<u8>,
    latency: LatencyRecorder,
    /// Connections opened so far, for their tokens.
    opened: usize,
    /// Obeying clients, when `[clients]` has some.
    clients: Option<Clients>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("connections", &self.connections.len())
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker with `connections` connections.
    pub(crate) fn new(
        index: usize,
        connections: usize,
        config: &Config,
        population: Arc<Population>,
        shared: Arc<SharedCounters>,
        latency: LatencyRecorder,
        shutdown: Shutdown,
    ) -> anyhow::Result<Self> {
        let tls = if config.network.tls {
            let name = ServerName::try_from(config.network.tls_server_name.clone())
                .context("network.tls_server_name is not a valid server name")?;
            let base = crate::tls::client_config();
            let per_slot = (0..connections)
                .map(|_| shoal_load_test_common::own_sessions(&base, config.network.tls_resumption))
                .collect();
            Some((per_slot, name))
        } else {
            None
        };
        let clients = (config.clients.count > 0).then(|| {
            let (first, settings): (usize, ObeyingSettings) =
                config.clients.share(index, config.workers);
            Clients {
                obeying: Obeying::new(settings),
                first,
                due: std::collections::VecDeque::new(),
                fresh: Vec::new(),
                epoch: Instant::now(),
            }
        });
        // An obeying client closes its connection when it gives up on the answer.
        let timeout = Duration::from_millis(config.network.response_timeout_ms).min(
            clients
                .as_ref()
                .map_or(Duration::MAX, |clients| clients.obeying.settings().timeout),
        );
        Ok(Self {
            poll: Poll::new().context("cannot create epoll instance")?,
            connections: (0..connections).map(|_| None).collect(),
            writer: RequestWriter::new(config, index, config.workers),
            population,
            counters: Counters::default(),
            shared,
            shutdown,
            server: config.server_address,
            tls,
            keep_alive: config.network.keep_alive,
            timeout,
            scratch: Vec::with_capacity(4096),
            read_buffer: vec![0; 64 * 1024],
            latency,
            opened: 0,
            clients,
        })
    }

    /// Runs until shutdown.
    pub(crate) fn run(mut self) -> anyhow::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut last_tick = Instant::now() - TICK;
        while !self.shutdown.is_requested() {
            let now = Instant::now();
            if now - last_tick >= TICK {
                self.tick(now);
                last_tick = now;
            }
            match self.poll.poll(&mut events, Some(TICK)) {
                Ok(()) => {}
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(err) => return Err(err).context("epoll failed"),
            }
            for event in &events {
                let token = event.token().0;
                let index = token & ((1 << SLOT_BITS) - 1);
                let current = self.connections.get(index).and_then(Option::as_ref);
                if current.is_none_or(|connection| connection.token != token) {
                    continue;
                }
                if let Err(()) = self.service(index) {
                    // A clean close (the response came, the connection was not kept)
                    // is replaced at once; a failed connection waits for the next tick
                    // so that a refusing server cannot make this loop spin.
                    if self.drop_connection(index) {
                        self.open(index, Instant::now());
                    }
                }
            }
            self.counters.flush_into(&self.shared);
        }
        self.latency.flush();
        Ok(())
    }

    /// Opens missing connections (with obeying clients, one per client that came
    /// due) and drops those whose response is overdue.
    fn tick(&mut self, now: Instant) {
        for index in 0..self.connections.len() {
            match &self.connections[index] {
                None => self.open(index, now),
                Some(connection)
                    if connection.waiting_for.is_some()
                        && now - connection.sent_at > self.timeout =>
                {
                    self.counters.timeouts += 1;
                    self.connections[index] = None;
                    self.open(index, now);
                }
                Some(_) => {}
            }
        }
    }

    fn open(&mut self, index: usize, now: Instant) {
        // Obeying clients open a connection when one is due, as clients do (a tracker
        // closes connections that stay quiet).
        let client = match &mut self.clients {
            None => None,
            Some(clients) => match clients.next_due(now, &mut self.counters) {
                Some(client) => Some(client),
                None => return,
            },
        };
        let mut socket = match TcpStream::connect(self.server) {
            Ok(socket) => socket,
            Err(_) => {
                self.counters.connection_errors += 1;
                return;
            }
        };
        let _ = socket.set_nodelay(true);
        self.opened += 1;
        let token = index | (self.opened << SLOT_BITS);
        if self
            .poll
            .registry()
            .register(
                &mut socket,
                Token(token),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            self.counters.connection_errors += 1;
            return;
        }
        let transport = match &self.tls {
            None => Transport::Plain(socket),
            Some((configs, name)) => {
                match ClientConnection::new(configs[index].clone(), name.clone()) {
                    Ok(tls) => Transport::Tls(socket, Box::new(tls)),
                    Err(_) => {
                        self.counters.connection_errors += 1;
                        return;
                    }
                }
            }
        };
        self.counters.connections_opened += 1;
        let mut connection = Connection {
            transport,
            pending: Vec::new(),
            received: Vec::new(),
            waiting_for: None,
            sent_at: now,
            client: None,
            token,
        };
        self.queue_request(&mut connection, now, client);
        self.connections[index] = Some(connection);
    }

    /// Queues the next request on `connection`: one drawn by the weights, or the
    /// announce of obeying client `client` (or of the next one due). Returns whether
    /// one was queued (no client due: none).
    fn queue_request(
        &mut self,
        connection: &mut Connection,
        now: Instant,
        client: Option<u32>,
    ) -> bool {
        self.scratch.clear();
        let mut request = std::mem::take(&mut self.scratch);
        let kind = match &mut self.clients {
            None => self.writer.write(&self.population, &mut request),
            Some(clients) => {
                let Some(client) = client.or_else(|| clients.next_due(now, &mut self.counters))
                else {
                    self.scratch = request;
                    return false;
                };
                let peer = (clients.first + client as usize) % self.population.peer_count();
                self.writer
                    .announce_for(&self.population, peer, &mut request);
                connection.client = Some(client);
                Kind::Announce
            }
        };
        match kind {
            Kind::Announce => self.counters.announces_sent += 1,
            Kind::Scrape => self.counters.scrapes_sent += 1,
        }
        match &mut connection.transport {
            Transport::Plain(_) => connection.pending.extend_from_slice(&request),
            Transport::Tls(_, tls) => {
                // rustls holds plaintext written before the handshake completes.
                let _ = tls.writer().write_all(&request);
            }
        }
        self.scratch = request;
        connection.waiting_for = Some(kind);
        connection.sent_at = now;
        true
    }

    /// Closes a connection; returns whether it closed cleanly (no request waiting).
    fn drop_connection(&mut self, index: usize) -> bool {
        let Some(mut connection) = self.connections[index].take() else {
            return false;
        };
        let _ = self
            .poll
            .registry()
            .deregister(connection.transport.socket());
        if connection.waiting_for.is_some() {
            self.counters.connection_errors += 1;
            return false;
        }
        true
    }

    /// Writes what can be written, reads what arrived, handles complete responses.
    fn service(&mut self, index: usize) -> Result<(), ()> {
        let Some(mut connection) = self.connections[index].take() else {
            return Ok(());
        };
        let result = self.service_connection(&mut connection);
        self.connections[index] = Some(connection);
        result
    }

    fn service_connection(&mut self, connection: &mut Connection) -> Result<(), ()> {
        loop {
            write_out(connection)?;
            let closed = read_in(connection, &mut self.read_buffer)?;
            // Reading may have finished a TLS handshake step that has bytes to send
            // (and releases plaintext rustls held back); no further event would come.
            write_out(connection)?;
            let mut handled_any = false;
            while let Some((len, close)) = self.take_response(connection)? {
                connection.received.drain(..len);
                handled_any = true;
                if close || !self.keep_alive {
                    // Finished and closing: the caller replaces it (no request is
                    // waiting, so it is not counted as an error).
                    return Err(());
                }
                if !self.queue_request(connection, Instant::now(), None) {
                    // No obeying client due: closed, and opened again for the next.
                    return Err(());
                }
            }
            if closed {
                return Err(());
            }
            if !handled_any {
                return Ok(());
            }
        }
    }

    /// Parses one complete response at the start of `received`: its length and whether
    /// the server closes the connection after it.
    fn take_response(&mut self, connection: &mut Connection) -> Result<Option<(usize, bool)>, ()> {
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut response = httparse::Response::new(&mut headers);
        let head = match response.parse(&connection.received) {
            Ok(httparse::Status::Complete(head)) => head,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(()),
        };
        let mut content_length = None;
        let mut close = false;
        for header in response.headers.iter() {
            if header.name.eq_ignore_ascii_case("content-length") {
                content_length = std::str::from_utf8(header.value)
                    .ok()
                    .and_then(|v| v.trim().parse::<usize>().ok());
            } else if header.name.eq_ignore_ascii_case("connection") {
                close = header.value.eq_ignore_ascii_case(b"close");
            }
        }
        let body_len = content_length.ok_or(())?;
        let Some(body) = connection.received.get(head..head + body_len) else {
            return Ok(None);
        };
        let kind = connection.waiting_for.take().ok_or(())?;
        // From queueing the request (on a new connection: before connecting) to the
        // whole response read.
        let now = Instant::now();
        if self.clients.is_none() {
            self.latency.record(connection.sent_at, now);
        }
        if let (Some(clients), Some(client)) = (&mut self.clients, connection.client.take()) {
            let interval = integer_after(body, b"8:interval");
            let at = clients.micros(now);
            let failed = response.code != Some(200) || body.starts_with(b"d14:failure reason");
            let taken = if failed {
                clients.obeying.refused(client, interval, at)
            } else {
                clients
                    .obeying
                    .answered(client, interval.unwrap_or(1800), at)
            };
            // An obeying client's latency runs from when it came due (its wait for a
            // connection included); an answer after it gave up is not one.
            if let Some(micros) = taken {
                self.latency.record_micros(now, micros);
            }
            if let (Some(_), Some(interval)) = (taken, interval) {
                self.counters.interval_sum += u64::from(interval);
                self.counters.intervals += 1;
            }
        }
        if response.code != Some(200) {
            self.counters.http_errors += 1;
        } else if body.starts_with(b"d14:failure reason") {
            self.counters.failures += 1;
        } else {
            match kind {
                Kind::Announce => {
                    self.counters.announce_responses += 1;
                    self.counters.peers_received += count_peers(body);
                }
                Kind::Scrape => self.counters.scrape_responses += 1,
            }
        }
        Ok(Some((head + body_len, close)))
    }
}

/// Writes pending bytes until done or the socket is full.
fn write_out(connection: &mut Connection) -> Result<(), ()> {
    match &mut connection.transport {
        Transport::Plain(socket) => {
            while !connection.pending.is_empty() {
                match socket.write(&connection.pending) {
                    Ok(0) => return Err(()),
                    Ok(n) => {
                        connection.pending.drain(..n);
                    }
                    Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                    Err(err) if err.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return Err(()),
                }
            }
        }
        Transport::Tls(socket, tls) => {
            while tls.wants_write() {
                match tls.write_tls(socket) {
                    Ok(_) => {}
                    Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                    Err(err) if err.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return Err(()),
                }
            }
        }
    }
    Ok(())
}

/// Reads everything available; returns whether the peer closed the connection.
fn read_in(connection: &mut Connection, scratch: &mut [u8]) -> Result<bool, ()> {
    match &mut connection.transport {
        Transport::Plain(socket) => loop {
            match socket.read(scratch) {
                Ok(0) => return Ok(true),
                Ok(n) => connection.received.extend_from_slice(&scratch[..n]),
                Err(err) if err.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Err(()),
            }
        },
        Transport::Tls(socket, tls) => {
            let mut closed = false;
            loop {
                match tls.read_tls(socket) {
                    Ok(0) => {
                        closed = true;
                        break;
                    }
                    Ok(_) => {}
                    Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                    Err(err) if err.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return Err(()),
                }
            }
            tls.process_new_packets().map_err(|_| ())?;
            loop {
                match tls.reader().read(scratch) {
                    Ok(0) => return Ok(true),
                    Ok(n) => connection.received.extend_from_slice(&scratch[..n]),
                    Err(err) if err.kind() == ErrorKind::WouldBlock => return Ok(closed),
                    // Closed without close_notify: a close like any other here; what
                    // arrived before it is still parsed.
                    Err(err) if err.kind() == ErrorKind::UnexpectedEof => return Ok(true),
                    Err(_) => return Err(()),
                }
            }
        }
    }
}

/// Peers in an announce response body: compact `peers` (6 bytes each), `peers6` (18
/// bytes each), or dictionaries (one `ip` key each).
fn count_peers(body: &[u8]) -> u64 {
    let mut count = 0;
    if let Some(len) = string_after(body, b"5:peers") {
        count += len as u64 / 6;
    } else {
        count += body.windows(5).filter(|window| window == b"d2:ip").count() as u64;
    }
    if let Some(len) = string_after(body, b"6:peers6") {
        count += len as u64 / 18;
    }
    count
}

/// The integer right after `key` (`8:intervali1800e`), if one follows.
fn integer_after(body: &[u8], key: &[u8]) -> Option<u32> {
    let at = body.windows(key.len()).position(|w| w == key)? + key.len();
    let rest = body.get(at..)?.strip_prefix(b"i")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if rest.get(digits) != Some(&b'e') {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// The length of the byte string right after `key`, if one follows.
fn string_after(body: &[u8], key: &[u8]) -> Option<usize> {
    let at = body.windows(key.len()).position(|w| w == key)? + key.len();
    let digits = body[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || body.get(at + digits) != Some(&b':') {
        return None;
    }
    std::str::from_utf8(&body[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_read_from_replies_and_failures() {
        assert_eq!(
            integer_after(b"d8:intervali1800e5:peers0:e", b"8:interval"),
            Some(1800)
        );
        assert_eq!(
            integer_after(
                b"d14:failure reason4:busy8:intervali3600e12:min intervali1800ee",
                b"8:interval"
            ),
            Some(3600)
        );
        assert_eq!(integer_after(b"d8:intervali-1e", b"8:interval"), None);
        assert_eq!(integer_after(b"d5:peers0:e", b"8:interval"), None);
    }

    #[test]
    fn peers_are_counted_in_every_form() {
        assert_eq!(count_peers(b"d5:peers12:aaaaaabbbbbbe"), 2);
        assert_eq!(count_peers(b"d5:peers0:6:peers618:aaaaaaaaaaaaaaaaaae"), 1);
        assert_eq!(
            count_peers(b"d5:peersld2:ip1:a4:porti1eed2:ip1:b4:porti2eeee"),
            2
        );
    }
}
