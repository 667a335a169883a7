//! A host, a client's framing and a driver for WebSocket sessions without sockets:
//! what the unit tests and the `ws_session` fuzz target run sessions on.

use std::cell::{Cell, RefCell, RefMut};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use shoal_private::{KeyDigest, Refusal as PrivateRefusal, Registry};
use shoal_swarm::ServerTime;
use shoal_worker::Verdict;
use shoal_ws_protocol::{AnnounceRequest, Id20};

use super::{Host, Next, Session};
use crate::Config;
use crate::messages::{ConnectionRef, SwarmRequest};
use crate::queue::{ConnectionQueue, QueueLimit};
use crate::socket::router::Router;
use crate::stats::SocketCounters;

/// A socket worker as far as a session can tell; its router is real (queues, budgets),
/// its swarm workers are `submitted`.
#[derive(Debug)]
pub(crate) struct TestHost {
    pub(crate) config: Config,
    pub(crate) verdict: Cell<Verdict>,
    pub(crate) denied: RefCell<Vec<[u8; 20]>>,
    pub(crate) counters: RefCell<SocketCounters>,
    pub(crate) latencies: RefCell<Vec<Duration>>,
    pub(crate) time: Cell<ServerTime>,
    pub(crate) workers: usize,
    pub(crate) submitted: RefCell<Vec<(usize, SwarmRequest)>>,
    pub(crate) router: RefCell<Router>,
    pub(crate) unregistered: RefCell<Vec<ConnectionRef>>,
    pub(crate) logged: Cell<u32>,
    /// Private mode's registry, when a test turns it on.
    pub(crate) private: Option<Registry>,
    /// The client rules (none unless a test sets some).
    pub(crate) client_rules: shoal_common::ClientRules,
}

impl TestHost {
    pub(crate) fn new(config: Config, workers: usize) -> Self {
        let limits = &config.limits;
        let router = Router::new(
            0,
            Vec::new(),
            None,
            limits.max_outgoing_bytes_per_worker,
            limits.max_incoming_bytes_per_worker,
        );
        Self {
            verdict: Cell::new(Verdict::Allow),
            denied: RefCell::default(),
            counters: RefCell::default(),
            latencies: RefCell::default(),
            time: Cell::new(ServerTime(100)),
            workers,
            submitted: RefCell::default(),
            router: RefCell::new(router),
            unregistered: RefCell::default(),
            logged: Cell::new(0),
            private: None,
            client_rules: shoal_common::ClientRules::default(),
            config,
        }
    }

    /// A connection's place in the router.
    pub(crate) fn register(&self) -> (ConnectionRef, Rc<ConnectionQueue>) {
        let limits = &self.config.limits;
        self.router.borrow_mut().register(QueueLimit {
            messages: limits.max_outgoing_messages,
            bytes: limits.max_outgoing_bytes,
        })
    }

    /// A session from [`CLIENT`], upgraded at `now` with `leftover`.
    pub(crate) fn session(&self, leftover: Vec<u8>, now: Instant) -> Session<'_, Self> {
        let (connection, queue) = self.register();
        Session::new(self, CLIENT, connection, queue, leftover, now)
    }
}

impl Host for TestHost {
    fn config(&self) -> &Config {
        &self.config
    }

    fn check_rate(&self, _: IpAddr) -> Verdict {
        self.verdict.get()
    }

    fn allows(&self, info_hash: &[u8; 20]) -> bool {
        !self.denied.borrow().contains(info_hash)
    }

    fn check_client(&self, peer_id: &[u8; 20]) -> Result<(), shoal_common::ClientRefusal> {
        self.client_rules.check(peer_id, b"")
    }

    fn private_announce(
        &self,
        key: Option<KeyDigest>,
        announce: &AnnounceRequest,
        _ipv6: bool,
    ) -> Result<bool, PrivateRefusal> {
        match &self.private {
            Some(registry) => {
                let leeching = announce.answer.is_none() && announce.left != Some(0);
                registry
                    .announce(key, &announce.info_hash.0, leeching)
                    .map(|_| true)
            }
            None => Ok(true),
        }
    }

    fn private_scrape(
        &self,
        key: Option<KeyDigest>,
        info_hashes: &[Id20],
    ) -> Result<(), PrivateRefusal> {
        match &self.private {
            Some(registry) => registry
                .scrape(key, info_hashes.iter().map(|hash| &hash.0))
                .map(drop),
            None => Ok(()),
        }
    }

    fn counters(&self) -> RefMut<'_, SocketCounters> {
        self.counters.borrow_mut()
    }

    fn record_latency(&self, latency: Duration) {
        self.latencies.borrow_mut().push(latency);
    }

    fn server_time(&self) -> ServerTime {
        self.time.get()
    }

    fn swarm_workers(&self) -> usize {
        self.workers
    }

    fn submit(&self, worker: usize, request: SwarmRequest) {
        self.submitted.borrow_mut().push((worker, request));
    }

    fn note_receiving(&self, queue: &ConnectionQueue, bytes: usize) {
        self.router.borrow().note_receiving(queue, bytes);
    }

    fn unregister(&self, connection: ConnectionRef) {
        self.router.borrow_mut().unregister(connection);
        self.unregistered.borrow_mut().push(connection);
    }

    /// Twice the configured interval: tests tell a backoff reply by it.
    fn backoff_interval(&self) -> u32 {
        2 * self.config.protocol.announce_interval
    }

    fn may_log_close(&self, _: Instant) -> Option<u32> {
        self.logged.set(self.logged.get() + 1);
        Some(0)
    }

    fn buffer(&self) -> Vec<u8> {
        Vec::with_capacity(64)
    }

    fn recycle(&self, buffer: Vec<u8>) {
        assert!(buffer.is_empty(), "a buffer given back must be written out");
    }
}

/// A client address for tests.
pub(crate) const CLIENT: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 50_001);

/// A client frame: FIN set, `opcode`, masked as clients must.
#[cfg(test)]
pub(crate) fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x80 | opcode];
    let len = payload.len();
    if len < 126 {
        frame.push(0x80 | len as u8);
    } else if len <= usize::from(u16::MAX) {
        frame.push(0x80 | 126);
        frame.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        frame.push(0x80 | 127);
        frame.extend_from_slice(&(len as u64).to_be_bytes());
    }
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// A server frame read back: its opcode and payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ServerFrame {
    pub(crate) opcode: u8,
    pub(crate) payload: Vec<u8>,
}

#[cfg(test)]
impl ServerFrame {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.payload).into_owned()
    }

    /// The close code of a close frame.
    pub(crate) fn close_code(&self) -> Option<u16> {
        (self.opcode == 8 && self.payload.len() >= 2)
            .then(|| u16::from_be_bytes([self.payload[0], self.payload[1]]))
    }
}

/// Splits what a server wrote into frames; each must be whole, final and unmasked,
/// as a server's are.
pub(crate) fn server_frames(mut bytes: &[u8]) -> Vec<ServerFrame> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        assert!(bytes.len() >= 2, "a partial frame header");
        assert_eq!(bytes[0] & 0xF0, 0x80, "FIN set, no extension bits");
        assert_eq!(bytes[1] & 0x80, 0, "server frames are not masked");
        let opcode = bytes[0] & 0x0F;
        let (len, header) = match bytes[1] & 0x7F {
            126 => (usize::from(u16::from_be_bytes([bytes[2], bytes[3]])), 4),
            127 => {
                let raw: [u8; 8] = bytes[2..10].try_into().expect("8 bytes");
                (u64::from_be_bytes(raw) as usize, 10)
            }
            len => (usize::from(len), 2),
        };
        assert!(bytes.len() >= header + len, "a whole frame");
        frames.push(ServerFrame {
            opcode,
            payload: bytes[header..header + len].to_vec(),
        });
        bytes = &bytes[header + len..];
    }
    frames
}

/// What a driven session wrote, and how it ended.
#[derive(Debug, Default)]
pub(crate) struct Transcript {
    pub(crate) frames: Vec<ServerFrame>,
    pub(crate) closed: bool,
    /// The last wait's deadline, when it ended waiting.
    pub(crate) waiting_until: Option<Instant>,
}

/// Drives `session` at `now`: writes everything it has (each write succeeding), and
/// stops when it waits or closes.
pub(crate) fn step(session: &mut Session<'_, TestHost>, now: Instant, into: &mut Transcript) {
    for _ in 0..10_000 {
        match session.next(now) {
            Next::Write { deadline } => {
                assert!(deadline > now);
                into.frames.extend(server_frames(session.output()));
                session.written();
            }
            Next::Wait { deadline } => {
                assert!(deadline > now, "waiting for a deadline already passed");
                into.waiting_until = Some(deadline);
                return;
            }
            Next::Close => {
                into.closed = true;
                return;
            }
        }
    }
    panic!("a session that neither waits nor closes");
}

/// Runs a session over fuzzed input: the first byte chooses the host, the rest is the
/// client's byte stream split into reads (a length byte, then that many bytes); swarm
/// workers answer every request at once. Every frame written must be a whole, final, unmasked server
/// frame; the session must wait or close after each read, never loop; after it closed
/// nothing more is read.
#[cfg(fuzzing)]
pub(crate) fn fuzz(data: &[u8]) {
    use crate::messages::{RequestKind, ToConnection};
    use shoal_ws_protocol::{AnnounceResponse, ServerMessage};

    let Some((&knobs, mut rest)) = data.split_first() else {
        return;
    };
    let mut config = Config::default();
    config.limits.max_message_size = 512 + usize::from(knobs & 0x0F) * 256;
    config.limits.max_frame_size = config.limits.max_message_size;
    config.limits.max_outgoing_messages = 1 + usize::from(knobs >> 5);
    let host = TestHost::new(config, usize::from((knobs >> 4) & 1) + 1);
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    let mut transcript = Transcript::default();
    session.start(start);
    step(&mut session, start, &mut transcript);
    let mut now = start;
    while let Some((&len, tail)) = rest.split_first() {
        if transcript.closed {
            break;
        }
        let len = usize::from(len).min(tail.len());
        now += Duration::from_millis(10);
        session.received(&mut tail[..len].to_vec(), now);
        rest = &tail[len..];
        // Whatever the client asked, the swarm workers answer at once.
        let asked: Vec<_> = host.submitted.borrow_mut().drain(..).collect();
        for (_, request) in asked {
            let reply = match request.kind {
                RequestKind::Announce(announce) => {
                    ToConnection::Message(ServerMessage::AnnounceResponse(AnnounceResponse {
                        info_hash: announce.info_hash,
                        complete: 1,
                        incomplete: 2,
                        interval: 120,
                    }))
                }
                RequestKind::Scrape {
                    scrape_id,
                    info_hashes,
                } => ToConnection::ScrapePart {
                    scrape_id,
                    files: info_hashes
                        .into_iter()
                        .map(|h| (h, Default::default()))
                        .collect(),
                },
                RequestKind::Leave(_) => continue,
            };
            session.queue().push(reply);
        }
        step(&mut session, now, &mut transcript);
    }
    session.leave();
}
