//! One WebSocket connection of a simulated browser: the upgrade, then requests out and
//! messages in until it breaks or the run ends.
//!
//! tungstenite does the framing (client frames masked, pings answered, close
//! handshakes) over `Io`: reads come straight from the [`Transport`], writes land in
//! the connection's `out` buffer, and the connection sends that buffer when it is done
//! with an event. So tungstenite never sees a full socket, and a burst of messages
//! costs one `write` system call.

use std::io::{self, ErrorKind, Read, Write};
use std::time::{Duration, Instant};

use shoal_load_test_common::LatencyRecorder;
use shoal_load_test_common::Population;
use tungstenite::error::ProtocolError;
use tungstenite::protocol::{Role, WebSocketConfig, WebSocketContext};
use tungstenite::{Error as WsError, Message};

use crate::config::Config;
use crate::flow::{Flow, Pace, Request};
use crate::handshake::Upgrade;
use crate::messages::{Client, MessageWriter};
use crate::replies::Reply;
use crate::stats::Counters;
use crate::transport::{TlsClient, Transport};

/// Unsent bytes past which a fixed-rate connection skips requests instead of
/// queueing more: the tracker (or the network) is not taking them.
const MAX_BACKLOG: usize = 256 * 1024;

/// What a connection needs to know, from the config.
#[derive(Debug)]
pub(crate) struct Settings {
    /// How requests are paced.
    pub pace: Pace,
    /// Answer forwarded offers.
    pub answer_offers: bool,
    /// Requests per connection before it only stays open; 0: no limit.
    pub requests_per_connection: u64,
    /// Close the connection once those requests are answered.
    pub close_when_done: bool,
    /// How long opening, and waiting for a reply, may take.
    pub timeout: Duration,
    /// Host header of the upgrade.
    pub host: String,
    /// Path of the upgrade.
    pub path: String,
    /// Framing limits and buffer sizes.
    pub websocket: WebSocketConfig,
}

impl Settings {
    /// The settings `config` asks for.
    pub(crate) fn new(config: &Config) -> Self {
        Self {
            pace: match config.send_period() {
                Some(period) => Pace::Rate { period },
                None => Pace::Replies {
                    in_flight: config.requests.in_flight,
                },
            },
            answer_offers: config.requests.answer_offers,
            requests_per_connection: config.requests.requests_per_connection,
            close_when_done: config.network.close_when_done,
            timeout: Duration::from_millis(config.network.response_timeout_ms),
            host: config.network.host.clone(),
            path: config.network.path.clone(),
            // Each read clears up to read_buffer_size bytes first, and every
            // connection holds one: 16 KiB holds several offers without costing much.
            // Frames go to `out` at once (write_buffer_size 0); `out` is the buffer.
            websocket: WebSocketConfig::default()
                .read_buffer_size(16 * 1024)
                .write_buffer_size(0)
                .max_message_size(Some(4 << 20))
                .max_frame_size(Some(4 << 20)),
        }
    }
}

/// What a worker's connections share.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Builds the messages.
    pub writer: MessageWriter,
    /// The torrents and simulated peers.
    pub population: std::sync::Arc<Population>,
    /// The worker's counters.
    pub counters: Counters,
    /// Reply latencies: from sending a request to reading the reply that ends its
    /// wait (offers forwarded by other peers are not replies and are not timed).
    pub latency: LatencyRecorder,
    /// From the config.
    pub settings: Settings,
}

/// How a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It never opened: refused, TLS or upgrade failure, or too slow to open.
    Failed,
    /// The tracker closed it (close frame, end of stream, or reset).
    ClosedByServer,
    /// An I/O or WebSocket protocol error.
    Broken,
    /// A reply took too long.
    TimedOut,
    /// It sent its requests, had them answered and closed (`close_when_done`).
    Done,
}

enum Phase {
    Upgrading { upgrade: Upgrade, received: Vec<u8> },
    Open(Box<WebSocketContext>),
}

/// One connection.
pub(crate) struct Connection {
    transport: Transport,
    phase: Phase,
    /// Bytes for the tracker not yet taken by the socket.
    out: Vec<u8>,
    flow: Flow,
    started: Instant,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("open", &self.is_open())
            .field("flow", &self.flow)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// A connection on a socket that is connecting; the upgrade request waits in
    /// `out` until the socket is ready.
    pub(crate) fn new(
        socket: mio::net::TcpStream,
        tls: Option<&TlsClient>,
        settings: &Settings,
        now: Instant,
    ) -> Result<Self, rustls::Error> {
        let mut out = Vec::with_capacity(8 * 1024);
        let upgrade = Upgrade::start(&settings.host, &settings.path, &mut out);
        Ok(Self {
            transport: Transport::new(socket, tls)?,
            phase: Phase::Upgrading {
                upgrade,
                received: Vec::new(),
            },
            out,
            flow: Flow::new(settings.pace, now),
            started: now,
        })
    }

    /// The socket, to (de)register it.
    pub(crate) fn socket(&mut self) -> &mut mio::net::TcpStream {
        self.transport.socket()
    }

    /// Whether the WebSocket upgrade is done.
    pub(crate) fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open(_))
    }

    /// Handles a readiness event: finishes the upgrade, reads and handles messages,
    /// sends the requests due, writes what it can.
    pub(crate) fn service(
        &mut self,
        client: &mut Client,
        shared: &mut Shared,
        now: Instant,
    ) -> Result<(), Ended> {
        let result = self.service_inner(client, shared, now);
        self.count_bytes(&mut shared.counters);
        result
    }

    /// Periodic work: timeouts, and requests due in fixed-rate mode.
    pub(crate) fn tick(
        &mut self,
        client: &mut Client,
        shared: &mut Shared,
        now: Instant,
    ) -> Result<(), Ended> {
        let timeout = shared.settings.timeout;
        if !self.is_open() {
            return if now.saturating_duration_since(self.started) > timeout {
                Err(Ended::Failed)
            } else {
                Ok(())
            };
        }
        if self.flow.timed_out(now, timeout) {
            return Err(Ended::TimedOut);
        }
        if !matches!(shared.settings.pace, Pace::Rate { .. }) {
            // Paced by replies: requests go out as replies are read, never on a tick.
            return Ok(());
        }
        let result = self.send_due(client, shared, now).and_then(|()| {
            self.transport
                .send(&mut self.out)
                .map_err(|_| Ended::Broken)
        });
        self.count_bytes(&mut shared.counters);
        result
    }

    fn count_bytes(&mut self, counters: &mut Counters) {
        let (read, written) = self.transport.take_byte_counts();
        counters.bytes_received += read;
        counters.bytes_sent += written;
    }

    fn service_inner(
        &mut self,
        client: &mut Client,
        shared: &mut Shared,
        now: Instant,
    ) -> Result<(), Ended> {
        if !self.is_open() && !self.finish_upgrade(client, shared, now)? {
            return Ok(());
        }
        self.read_messages(client, shared, now)?;
        self.send_due(client, shared, now)?;
        let done = self.done(client, &shared.settings);
        if done && let Phase::Open(websocket) = &mut self.phase {
            let mut io = Io {
                transport: &mut self.transport,
                out: &mut self.out,
            };
            let _ = websocket.close(&mut io, None);
            let _ = websocket.flush(&mut io);
        }
        self.transport
            .send(&mut self.out)
            .map_err(|_| Ended::Broken)?;
        if done { Err(Ended::Done) } else { Ok(()) }
    }

    /// Whether a `close_when_done` connection has sent all its requests and had them
    /// answered.
    fn done(&self, client: &Client, settings: &Settings) -> bool {
        settings.close_when_done
            && self.is_open()
            && client.allowed(1, settings.requests_per_connection) == 0
            && self.flow.in_flight() == 0
    }

    /// Sends the upgrade request and checks the response; returns whether the
    /// connection is open now.
    fn finish_upgrade(
        &mut self,
        client: &mut Client,
        shared: &mut Shared,
        now: Instant,
    ) -> Result<bool, Ended> {
        let Phase::Upgrading { upgrade, received } = &mut self.phase else {
            return Ok(true);
        };
        self.transport
            .send(&mut self.out)
            .map_err(|_| Ended::Failed)?;
        let mut buf = [0; 4096];
        let closed = loop {
            match self.transport.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => received.extend_from_slice(&buf[..n]),
                Err(err) if err.kind() == ErrorKind::WouldBlock => break false,
                Err(_) => return Err(Ended::Failed),
            }
        };
        let head = match upgrade.check(received) {
            Ok(Some(head)) => head,
            Ok(None) if closed => return Err(Ended::Failed),
            Ok(None) => {
                // Reading may have moved the TLS handshake on; its reply goes now.
                self.transport
                    .send(&mut self.out)
                    .map_err(|_| Ended::Failed)?;
                return Ok(false);
            }
            Err(_) => return Err(Ended::Failed),
        };
        // Frames that came with the response are the first WebSocket bytes.
        let first_frames = received.split_off(head);
        self.phase = Phase::Open(Box::new(WebSocketContext::from_partially_read(
            first_frames,
            Role::Client,
            Some(shared.settings.websocket),
        )));
        shared.counters.connections_opened += 1;
        client.reconnected();
        self.flow = Flow::new(shared.settings.pace, now);
        Ok(true)
    }

    /// Handles every message that has arrived, answering offers.
    fn read_messages(
        &mut self,
        client: &mut Client,
        shared: &mut Shared,
        now: Instant,
    ) -> Result<(), Ended> {
        let Phase::Open(websocket) = &mut self.phase else {
            return Ok(());
        };
        let mut io = Io {
            transport: &mut self.transport,
            out: &mut self.out,
        };
        loop {
            match websocket.read(&mut io) {
                Ok(Message::Text(text)) => {
                    let reply = Reply::read(text.as_bytes());
                    reply.count(&mut shared.counters);
                    if let Some(request) = reply.reply_to()
                        && let Some(sent) = self.flow.replied(request, now)
                    {
                        shared.latency.record(sent, now);
                    }
                    if let Reply::Offer(offer) = &reply
                        && shared.settings.answer_offers
                    {
                        shared.writer.write_answer(client, offer);
                        websocket
                            .write(&mut io, shared.writer.take_message())
                            .map_err(|_| Ended::Broken)?;
                        shared.counters.answers_sent += 1;
                    }
                }
                Ok(Message::Binary(_)) => shared.counters.unreadable += 1,
                Ok(Message::Close(_)) => {
                    // tungstenite queued the reply to the close; send it and go.
                    let _ = websocket.flush(&mut io);
                    let _ = io.transport.send(io.out);
                    return Err(Ended::ClosedByServer);
                }
                // Pings are answered by tungstenite; pongs need nothing.
                Ok(_) => {}
                Err(WsError::Io(err)) if err.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(
                    WsError::ConnectionClosed
                    | WsError::AlreadyClosed
                    | WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake),
                ) => return Err(Ended::ClosedByServer),
                Err(WsError::Io(err))
                    if matches!(
                        err.kind(),
                        ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
                    ) =>
                {
                    return Err(Ended::ClosedByServer);
                }
                Err(_) => return Err(Ended::Broken),
            }
        }
    }

    /// Writes the requests due now.
    fn send_due(
        &mut self,
        client: &mut Client,
        shared: &mut Shared,
        now: Instant,
    ) -> Result<(), Ended> {
        let Phase::Open(websocket) = &mut self.phase else {
            return Ok(());
        };
        let due = self.flow.due(now, self.out.len() > MAX_BACKLOG);
        shared.counters.skipped += due.skipped;
        let send = client.allowed(due.send as usize, shared.settings.requests_per_connection);
        let mut io = Io {
            transport: &mut self.transport,
            out: &mut self.out,
        };
        for _ in 0..send {
            let request = shared.writer.write_request(client, &shared.population);
            match request {
                Request::Scrape => shared.counters.scrapes_sent += 1,
                _ => shared.counters.announces_sent += 1,
            }
            websocket
                .write(&mut io, shared.writer.take_message())
                .map_err(|_| Ended::Broken)?;
            self.flow.sent(request, now);
        }
        Ok(())
    }
}

/// tungstenite's view of a connection: reads from the transport, writes into `out`.
struct Io<'a> {
    transport: &'a mut Transport,
    out: &'a mut Vec<u8>,
}

impl Read for Io<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.transport.read(buf)
    }
}

impl Write for Io<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
