//! A host and a driver for sessions without sockets: what the unit tests and the
//! `http_session` fuzz target run sessions on.

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use shoal_http_protocol::{AnnounceRequest, InfoHash};
use shoal_private::{KeyDigest, Refusal, Registry};
use shoal_swarm::ServerTime;
use shoal_worker::Verdict;

use super::{AnnounceCall, FullScrapeCache, Host, Next, Session};
use crate::Config;
use crate::messages::{AnnounceAnswer, CallError, ScrapeCounts, ScrapeWork};
use crate::stats::SocketCounters;

/// A socket worker as far as a session can tell.
#[derive(Debug)]
pub(crate) struct TestHost {
    pub(crate) config: Config,
    pub(crate) verdict: Cell<Verdict>,
    pub(crate) denied: RefCell<Vec<InfoHash>>,
    pub(crate) counters: RefCell<SocketCounters>,
    pub(crate) workers: usize,
    pub(crate) cache: RefCell<FullScrapeCache>,
    pub(crate) time: Cell<ServerTime>,
    pub(crate) latencies: RefCell<Vec<Duration>>,
    /// Private mode's registry, when a test turns it on.
    pub(crate) private: Option<Registry>,
    /// The client rules (none unless a test sets some).
    pub(crate) client_rules: shoal_common::ClientRules,
}

impl TestHost {
    pub(crate) fn new(config: Config, workers: usize) -> Self {
        Self {
            config,
            verdict: Cell::new(Verdict::Allow),
            denied: RefCell::default(),
            counters: RefCell::default(),
            workers,
            cache: RefCell::default(),
            time: Cell::new(ServerTime(100)),
            latencies: RefCell::default(),
            private: None,
            client_rules: shoal_common::ClientRules::default(),
        }
    }
}

impl Host for TestHost {
    fn config(&self) -> &Config {
        &self.config
    }

    fn check_rate(&self, _: IpAddr) -> Verdict {
        self.verdict.get()
    }

    fn allows(&self, info_hash: &InfoHash) -> bool {
        !self.denied.borrow().contains(info_hash)
    }

    fn check_client(
        &self,
        peer_id: &[u8; 20],
        user_agent: &[u8],
    ) -> Result<(), shoal_common::ClientRefusal> {
        self.client_rules.check(peer_id, user_agent)
    }

    fn allows_all(&self, info_hashes: &[InfoHash]) -> bool {
        info_hashes.iter().all(|hash| self.allows(hash))
    }

    fn private_announce(
        &self,
        key: Option<KeyDigest>,
        request: &AnnounceRequest,
        _ipv6: bool,
    ) -> Result<bool, Refusal> {
        match &self.private {
            Some(registry) => registry
                .announce(key, &request.info_hash, request.left != Some(0))
                .map(|_| true),
            None => Ok(true),
        }
    }

    fn private_scrape(
        &self,
        key: Option<KeyDigest>,
        info_hashes: &[InfoHash],
    ) -> Result<(), Refusal> {
        match &self.private {
            Some(registry) => registry.scrape(key, info_hashes).map(drop),
            None => Ok(()),
        }
    }

    fn count(&self, count: impl FnOnce(&mut SocketCounters)) {
        count(&mut self.counters.borrow_mut());
    }

    fn swarm_workers(&self) -> usize {
        self.workers
    }

    fn full_scrape(&self) -> &RefCell<FullScrapeCache> {
        &self.cache
    }

    fn server_time(&self) -> ServerTime {
        self.time.get()
    }

    fn record_latency(&self, latency: Duration) {
        self.latencies.borrow_mut().push(latency);
    }

    /// The configured intervals, unjittered: tests read exact values.
    fn reply_interval(&self, _ipv6: bool) -> (u32, u32) {
        let protocol = &self.config.protocol;
        (protocol.announce_interval, protocol.min_announce_interval)
    }

    /// Six times the configured intervals: tests tell a full reply by it.
    fn full_interval(&self) -> (u32, u32) {
        let protocol = &self.config.protocol;
        (
            6 * protocol.announce_interval,
            6 * protocol.min_announce_interval,
        )
    }

    /// Twice the configured intervals: tests tell a backoff reply by it.
    fn backoff_interval(&self, _ipv6: bool) -> (u32, u32) {
        let protocol = &self.config.protocol;
        (
            2 * protocol.announce_interval,
            2 * protocol.min_announce_interval,
        )
    }
}

/// What a driven session did.
#[derive(Debug, Default)]
pub(crate) struct Transcript {
    /// Each write: the head (or whole response) and the shared body after it.
    pub(crate) writes: Vec<Vec<u8>>,
    /// Announces asked, with their swarm worker.
    pub(crate) announces: Vec<AnnounceCall>,
    /// Scrape shares asked.
    pub(crate) scrapes: Vec<Vec<(usize, ScrapeWork)>>,
    /// Whether it ended by closing (rather than waiting for more bytes).
    pub(crate) closed: bool,
}

/// How a driven session's swarm workers answer.
pub(crate) trait SwarmWorkers {
    fn announce(&mut self, call: &AnnounceCall) -> Result<AnnounceAnswer, CallError>;
    fn scrape(&mut self, parts: &[(usize, ScrapeWork)]) -> Result<ScrapeCounts, CallError>;
}

/// What the driver does when the input runs out while the session reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AtEnd {
    /// Leave it reading.
    Wait,
    /// The client closes.
    Close,
    /// The deadline passes.
    TimeOut,
}

/// Drives `session` on `host`: each of `reads` arrives as one read, `step` after the
/// last; `swarms` answers calls. Ends when the session closes or, input spent,
/// `at_end` says so. At most `max_steps` steps (a session that loops fails).
pub(crate) fn drive(
    session: &mut Session,
    host: &TestHost,
    reads: &[&[u8]],
    swarms: &mut impl SwarmWorkers,
    at_end: AtEnd,
    start: Instant,
) -> Transcript {
    let mut transcript = Transcript::default();
    let mut reads = reads.iter();
    let mut now = start;
    let mut ended = false;
    for _ in 0..100_000 {
        now += Duration::from_millis(1);
        match session.next(host, now) {
            Next::Read { deadline } => {
                assert!(deadline > now, "a deadline in the past while reading");
                match reads.next() {
                    Some(bytes) => {
                        let buffer = session.read_buffer();
                        let read = bytes.len().min(buffer.len());
                        buffer[..read].copy_from_slice(&bytes[..read]);
                        session.received(read);
                    }
                    None if ended || at_end == AtEnd::Wait => return transcript,
                    None => {
                        ended = true;
                        match at_end {
                            AtEnd::Close => session.received(0),
                            _ => {
                                now = deadline;
                                session.timed_out(host, now);
                            }
                        }
                    }
                }
            }
            Next::Announce(call) => {
                let answer = swarms.announce(&call);
                transcript.announces.push(call.clone());
                session.announced(call, answer, host, now);
            }
            Next::Scrape(call) => {
                let answer = swarms.scrape(&call.parts);
                transcript.scrapes.push(call.parts.clone());
                session.scraped(call, answer, host, now);
            }
            Next::Write { deadline } => {
                assert!(deadline > now, "a write deadline in the past");
                let (head, body) = session.output();
                let mut written = head.to_vec();
                written.extend_from_slice(body.unwrap_or_default());
                transcript.writes.push(written);
                session.written(host, now);
            }
            Next::Close => {
                transcript.closed = true;
                return transcript;
            }
        }
    }
    panic!("the session neither closed nor waited within 100,000 steps");
}

/// A client address for tests.
pub(crate) const CLIENT: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 50_000);

/// Runs a session over fuzzed input: the first bytes choose the host and how the swarm
/// workers answer, the rest is split into reads. Every response written must be one
/// whole HTTP response whose Content-Length is its body's length, and the session
/// must end or wait, never loop.
#[cfg(fuzzing)]
pub(crate) fn fuzz(data: &[u8]) {
    use crate::messages::AnnouncedPeers;
    let Some((&knobs, rest)) = data.split_first() else {
        return;
    };
    let mut config = Config::default();
    config.protocol.full_scrape = knobs & 1 != 0;
    config.network.keep_alive = knobs & 2 == 0;
    config.limits.max_request_size = 256 + usize::from(knobs >> 4) * 64;
    let host = TestHost::new(config, usize::from((knobs >> 2) & 3) + 1);
    if knobs & 0x80 != 0 {
        host.verdict.set(Verdict::Limited);
    }
    struct Fuzzed(u8);
    impl SwarmWorkers for Fuzzed {
        fn announce(&mut self, call: &AnnounceCall) -> Result<AnnounceAnswer, CallError> {
            self.0 = self.0.wrapping_add(1);
            match self.0 % 4 {
                0 => Err(CallError::Busy),
                1 => Ok(AnnounceAnswer::Refused("full")),
                2 => Ok(AnnounceAnswer::Peers {
                    complete: 1,
                    incomplete: 2,
                    peers: AnnouncedPeers::Compact(vec![7; 6 * usize::from(self.0 % 5) + 1]),
                    full: self.0 % 3 == 0,
                }),
                _ => Ok(AnnounceAnswer::Peers {
                    complete: 3,
                    incomplete: 4,
                    peers: AnnouncedPeers::WithIds(vec![(
                        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 1),
                        call.work.peer_id,
                    )]),
                    full: false,
                }),
            }
        }

        fn scrape(&mut self, parts: &[(usize, ScrapeWork)]) -> Result<ScrapeCounts, CallError> {
            self.0 = self.0.wrapping_add(1);
            if self.0 % 3 == 0 {
                return Err(CallError::Busy);
            }
            Ok(parts
                .iter()
                .flat_map(|(_, work)| match work {
                    ScrapeWork::Torrents(hashes) => hashes.clone(),
                    ScrapeWork::All => vec![[1; 20], [2; 20]],
                })
                .map(|hash| (hash, shoal_swarm::ScrapeStats::default()))
                .collect())
        }
    }
    // Reads: a length byte, then that many bytes.
    let mut reads = Vec::new();
    let mut rest = rest;
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        reads.push(&tail[..len]);
        rest = &tail[len..];
    }
    let start = Instant::now();
    let mut session = Session::new(CLIENT, &host.config, start);
    let at_end = [AtEnd::Wait, AtEnd::Close, AtEnd::TimeOut][usize::from(knobs % 3)];
    let transcript = drive(
        &mut session,
        &host,
        &reads,
        &mut Fuzzed(knobs),
        at_end,
        start,
    );
    for write in &transcript.writes {
        check_response(write);
    }
}

/// Checks that `response` is one whole HTTP response: a head, and a body of exactly
/// its Content-Length.
#[cfg(any(test, fuzzing))]
pub(crate) fn check_response(response: &[u8]) {
    assert!(
        response.starts_with(b"HTTP/1.1 "),
        "not a response: {response:?}"
    );
    let end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head that ends")
        + 4;
    let head = std::str::from_utf8(&response[..end]).expect("an ASCII head");
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("Content-Length: "))
        .expect("a Content-Length")
        .trim()
        .parse()
        .expect("a number");
    assert_eq!(response.len() - end, length, "body length in {head:?}");
}
