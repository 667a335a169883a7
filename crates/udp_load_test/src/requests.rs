//! What the load tester sends: simulated peers and torrents, drawn per request.

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use shoal_udp_protocol::{
    AnnounceEvent, AnnounceOptions, AnnounceRequest, ConnectRequest, ConnectionId, InfoHash,
    PeerId, Request, TransactionId, action,
};

use crate::config::{PeerOrder, RequestConfig};
use crate::popularity::Weighted;

/// A kind of request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Connect.
    Connect,
    /// Announce.
    Announce,
    /// Scrape.
    Scrape,
}

#[derive(Clone, Copy, Debug)]
struct SimulatedPeer {
    torrent: u32,
    port: u16,
    seeder: bool,
}

/// The torrents and peers of a run, shared by all workers. Built from a fixed seed so
/// that every run (and every tracker compared) sees the same population.
#[derive(Debug)]
pub struct Population {
    info_hashes: Vec<[u8; 20]>,
    popularity: Weighted,
    peers: Vec<SimulatedPeer>,
    config: RequestConfig,
}

impl Population {
    /// Builds the population described by `config`.
    pub fn new(config: &RequestConfig) -> Self {
        let mut rng = SmallRng::seed_from_u64(0x5b0a_1d5e_ed00_0001);
        let info_hashes = (0..config.torrents).map(|_| rng.random()).collect();
        let popularity = Weighted::power_law(config.torrents, config.popularity_shape);
        let peers = (0..config.peers)
            .map(|_| SimulatedPeer {
                torrent: popularity.sample(&mut rng) as u32,
                port: rng.random_range(1..=u16::MAX),
                seeder: rng.random_bool(config.seeder_probability),
            })
            .collect();
        Self {
            info_hashes,
            popularity,
            peers,
            config: config.clone(),
        }
    }
}

impl Population {
    /// The info hashes of the torrents, in order.
    pub fn info_hashes(&self) -> &[[u8; 20]] {
        &self.info_hashes
    }
}

/// Writes requests for one worker.
#[derive(Debug)]
pub struct RequestWriter {
    rng: SmallRng,
    total_weight: u32,
    /// For [`PeerOrder::Sequential`]: the next peer and the stride between this
    /// worker's peers.
    next_peer: usize,
    stride: usize,
}

impl RequestWriter {
    /// The writer of worker `worker` of `workers`, with its own random stream.
    pub fn new(population: &Population, worker: usize, workers: usize) -> Self {
        let c = &population.config;
        Self {
            rng: SmallRng::seed_from_u64(0x10ad_0000 ^ worker as u64),
            total_weight: c.weight_connect + c.weight_announce + c.weight_scrape,
            next_peer: worker,
            stride: workers.max(1),
        }
    }

    /// Appends a connect request.
    pub fn connect(out: &mut Vec<u8>, transaction_id: TransactionId) {
        Request::Connect(ConnectRequest { transaction_id }).write(out);
    }

    /// Appends one request of a kind drawn by the configured weights.
    pub fn write(
        &mut self,
        population: &Population,
        connection_id: ConnectionId,
        transaction_id: TransactionId,
        out: &mut Vec<u8>,
    ) -> Kind {
        let c = &population.config;
        let pick = self.rng.random_range(0..self.total_weight);
        if pick < c.weight_connect {
            Self::connect(out, transaction_id);
            Kind::Connect
        } else if pick < c.weight_connect + c.weight_announce {
            self.announce(population, connection_id, transaction_id, out);
            Kind::Announce
        } else {
            self.scrape(population, connection_id, transaction_id, out);
            Kind::Scrape
        }
    }

    fn announce(
        &mut self,
        population: &Population,
        connection_id: ConnectionId,
        transaction_id: TransactionId,
        out: &mut Vec<u8>,
    ) {
        let index = match population.config.peer_order {
            PeerOrder::Random => self.rng.random_range(0..population.peers.len()),
            PeerOrder::Sequential => {
                let index = self.next_peer % population.peers.len();
                self.next_peer = self.next_peer.wrapping_add(self.stride);
                index
            }
        };
        let peer = population.peers[index];
        let request = AnnounceRequest {
            connection_id,
            transaction_id,
            info_hash: InfoHash(population.info_hashes[peer.torrent as usize]),
            peer_id: peer_id(index),
            downloaded: 0,
            left: if peer.seeder { 0 } else { 1 << 20 },
            uploaded: 0,
            event: AnnounceEvent::None,
            ip_address: 0,
            key: index as u32,
            peers_wanted: population.config.peers_wanted,
            port: peer.port,
            options: AnnounceOptions(&[]),
        };
        Request::Announce(request).write(out);
    }

    fn scrape(
        &mut self,
        population: &Population,
        connection_id: ConnectionId,
        transaction_id: TransactionId,
        out: &mut Vec<u8>,
    ) {
        // Written field by field so the hashes need no intermediate buffer.
        out.extend_from_slice(&connection_id.0.to_be_bytes());
        out.extend_from_slice(&action::SCRAPE.to_be_bytes());
        out.extend_from_slice(&transaction_id.0.to_be_bytes());
        let count = self
            .rng
            .random_range(1..=population.config.scrape_max_torrents);
        for _ in 0..count {
            let torrent = population.popularity.sample(&mut self.rng);
            out.extend_from_slice(&population.info_hashes[torrent]);
        }
    }
}

/// A recognisable peer id: client prefix and the simulated peer's number.
fn peer_id(index: usize) -> PeerId {
    let mut id = *b"-SL0001-000000000000";
    let digits = format!("{:012}", index % 1_000_000_000_000);
    id[8..].copy_from_slice(digits.as_bytes());
    PeerId(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small_config() -> RequestConfig {
        RequestConfig {
            torrents: 100,
            peers: 1000,
            ..RequestConfig::default()
        }
    }

    #[test]
    fn requests_parse_and_follow_the_weights() {
        let population = Population::new(&small_config());
        let mut writer = RequestWriter::new(&population, 0, 1);
        let mut counts = [0usize; 3];
        let mut out = Vec::new();
        for i in 0..10_200u32 {
            out.clear();
            let kind = writer.write(&population, ConnectionId(9), TransactionId(i), &mut out);
            let request = Request::parse(&out).expect("valid request");
            match (kind, request) {
                (Kind::Connect, Request::Connect(_)) => counts[0] += 1,
                (Kind::Announce, Request::Announce(a)) => {
                    assert_eq!(a.peers_wanted, 30);
                    assert!(a.port >= 1);
                    counts[1] += 1;
                }
                (Kind::Scrape, Request::Scrape(s)) => {
                    assert!((1..=10).contains(&s.info_hashes.len()));
                    counts[2] += 1;
                }
                (kind, request) => panic!("{kind:?} wrote {request:?}"),
            }
        }
        // Weights 1 : 100 : 1.
        assert!(
            (50..200).contains(&counts[0]) && (50..200).contains(&counts[2]),
            "{counts:?}"
        );
    }

    #[test]
    fn sequential_order_visits_every_peer_once_per_pass() {
        let config = RequestConfig {
            peer_order: PeerOrder::Sequential,
            weight_connect: 0,
            weight_scrape: 0,
            ..small_config()
        };
        let population = Population::new(&config);
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for worker in 0..3 {
            let mut writer = RequestWriter::new(&population, worker, 3);
            for _ in 0..(1000 / 3 + 1) {
                out.clear();
                writer.write(&population, ConnectionId(1), TransactionId(0), &mut out);
                let Ok(Request::Announce(announce)) = Request::parse(&out) else {
                    panic!()
                };
                seen.insert(announce.peer_id);
            }
        }
        assert_eq!(seen.len(), 1000);
    }

    #[test]
    fn the_population_is_the_same_every_time() {
        let a = Population::new(&small_config());
        let b = Population::new(&small_config());
        assert_eq!(a.info_hashes, b.info_hashes);
        assert_eq!(peer_id(42).0, *b"-SL0001-000000000042");
    }
}
