//! A BEP 15 client and helpers for the integration tests.
#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use shoal_udp::Config;
use shoal_udp_protocol::*;

/// How long a test waits for a reply that should come.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// A config listening on 127.0.0.1 (and optionally ::1) on free ports, quiet.
pub fn loopback_config(ipv6: bool) -> Config {
    let mut config = Config::default();
    config.network.address_ipv4 = "127.0.0.1:0".parse().unwrap();
    config.network.use_ipv6 = ipv6;
    config.network.address_ipv6 = "[::1]:0".parse().unwrap();
    config.network.socket_recv_buffer_size = 0;
    config.statistics.interval = 0;
    config
}

/// A UDP tracker client on its own socket.
pub struct Client {
    pub socket: UdpSocket,
    server: SocketAddr,
    family: PeerFamily,
    next_transaction: u32,
}

impl Client {
    pub fn new(server: SocketAddr) -> Self {
        let local = if server.is_ipv4() {
            "127.0.0.1:0"
        } else {
            "[::1]:0"
        };
        Self::from(local, server)
    }

    /// A client on its own socket bound to `local` (another loopback address is
    /// another client as far as per-client limits go).
    pub fn from(local: &str, server: SocketAddr) -> Self {
        let socket = UdpSocket::bind(local).unwrap();
        socket.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        let family = if server.is_ipv4() {
            PeerFamily::V4
        } else {
            PeerFamily::V6
        };
        Self {
            socket,
            server,
            family,
            next_transaction: 1,
        }
    }

    pub fn transaction(&mut self) -> TransactionId {
        self.next_transaction += 1;
        TransactionId(self.next_transaction)
    }

    pub fn send(&self, packet: &[u8]) {
        self.socket.send_to(packet, self.server).unwrap();
    }

    pub fn send_request(&self, request: &Request<'_>) {
        let mut packet = Vec::new();
        request.write(&mut packet);
        self.send(&packet);
    }

    /// The next reply, or `None` after `timeout`.
    pub fn recv_within(&self, timeout: Duration) -> Option<Response> {
        let deadline = Instant::now() + timeout;
        let mut buffer = [0u8; 4096];
        let result = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break None;
            }
            self.socket.set_read_timeout(Some(left)).unwrap();
            match self.socket.recv_from(&mut buffer) {
                Ok((len, _)) => {
                    let response = Response::parse(&buffer[..len], self.family);
                    break Some(response.expect("valid response"));
                }
                // A signal meant for another test's child can land on this thread.
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break None,
            }
        };
        self.socket.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
        result
    }

    pub fn recv(&self) -> Response {
        self.recv_within(REPLY_TIMEOUT)
            .expect("a reply within the timeout")
    }

    pub fn connect(&mut self) -> ConnectionId {
        let transaction_id = self.transaction();
        self.send_request(&Request::Connect(ConnectRequest { transaction_id }));
        match self.recv() {
            Response::Connect(reply) if reply.transaction_id == transaction_id => {
                reply.connection_id
            }
            other => panic!("expected a connect reply, got {other:?}"),
        }
    }

    /// [`connect`](Self::connect), sent again (up to `attempts` times) when no reply
    /// comes in time: a tracker flooded on purpose may drop a connect, as UDP allows.
    pub fn connect_retrying(&mut self, attempts: u32) -> ConnectionId {
        for _ in 1..attempts {
            let transaction_id = self.transaction();
            self.send_request(&Request::Connect(ConnectRequest { transaction_id }));
            if let Some(Response::Connect(reply)) = self.recv_within(REPLY_TIMEOUT)
                && reply.transaction_id == transaction_id
            {
                return reply.connection_id;
            }
        }
        self.connect()
    }

    pub fn send_announce(&mut self, id: ConnectionId, announce: Announce) -> TransactionId {
        let transaction_id = self.transaction();
        self.send_request(&Request::Announce(announce.request(id, transaction_id)));
        transaction_id
    }

    pub fn announce(&mut self, id: ConnectionId, announce: Announce) -> AnnounceResponse {
        let transaction_id = self.send_announce(id, announce);
        match self.recv() {
            Response::Announce(reply) if reply.transaction_id == transaction_id => reply,
            other => panic!("expected an announce reply, got {other:?}"),
        }
    }

    pub fn scrape(&mut self, id: ConnectionId, hashes: &[[u8; 20]]) -> Response {
        let transaction_id = self.transaction();
        let flat = hashes.concat();
        self.send_request(&Request::Scrape(ScrapeRequest {
            connection_id: id,
            transaction_id,
            info_hashes: InfoHashes::new(&flat),
        }));
        let reply = self.recv();
        assert_eq!(reply.transaction_id(), transaction_id);
        reply
    }

    pub fn scrape_stats(&mut self, id: ConnectionId, hash: [u8; 20]) -> ScrapeStats {
        match self.scrape(id, &[hash]) {
            Response::Scrape(reply) => reply.torrents[0],
            other => panic!("expected a scrape reply, got {other:?}"),
        }
    }
}

/// The parts of an announce tests vary.
#[derive(Clone, Debug)]
pub struct Announce {
    pub info_hash: [u8; 20],
    pub port: u16,
    pub left: u64,
    pub event: AnnounceEvent,
    pub peers_wanted: i32,
    /// Bytes uploaded so far (the session's total).
    pub uploaded: u64,
    /// BEP 41 options (URL data), as written after the announce body.
    pub options: Vec<u8>,
}

impl Announce {
    pub fn new(info_hash: [u8; 20], port: u16) -> Self {
        Self {
            info_hash,
            port,
            left: 1000,
            event: AnnounceEvent::Started,
            peers_wanted: -1,
            uploaded: 0,
            options: Vec::new(),
        }
    }

    /// With the announce URL's path and query as BEP 41 URL data, as libtorrent sends
    /// it (a private tracker's passkey travels there).
    pub fn url(mut self, url: &str) -> Self {
        self.options.clear();
        AnnounceOptions::write_url_data(url.as_bytes(), &mut self.options);
        self
    }

    pub fn seeding(mut self) -> Self {
        self.left = 0;
        self
    }

    pub fn event(mut self, event: AnnounceEvent) -> Self {
        self.event = event;
        self
    }

    pub fn request(
        &self,
        connection_id: ConnectionId,
        transaction_id: TransactionId,
    ) -> AnnounceRequest<'_> {
        AnnounceRequest {
            connection_id,
            transaction_id,
            info_hash: InfoHash(self.info_hash),
            peer_id: PeerId(*b"-SH0001-testtesttest"),
            downloaded: 0,
            left: self.left,
            uploaded: self.uploaded,
            event: self.event,
            ip_address: 0,
            key: 0,
            peers_wanted: self.peers_wanted,
            port: self.port,
            options: AnnounceOptions(&self.options),
        }
    }
}
