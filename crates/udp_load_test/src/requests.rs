//! What the UDP load tester sends: requests for the shared simulated population.

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use shoal_load_test_common::{PeerPicker, Population, PopulationShape};
use shoal_udp_protocol::{
    AnnounceEvent, AnnounceOptions, AnnounceRequest, ConnectRequest, ConnectionId, InfoHash,
    PeerId, Request, TransactionId, action,
};

use crate::config::{PeerOrder, RequestConfig};

/// A kind of request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Connect.
    Connect,
    /// Announce.
    Announce,
    /// Scrape.
    Scrape,
}

/// The population a request config describes.
pub(crate) fn population(config: &RequestConfig) -> Population {
    Population::new(PopulationShape {
        torrents: config.torrents,
        peers: config.peers,
        popularity_shape: config.popularity_shape,
        seeder_probability: config.seeder_probability,
    })
}

/// Writes requests for one worker.
#[derive(Debug)]
pub(crate) struct RequestWriter {
    config: RequestConfig,
    rng: SmallRng,
    total_weight: u32,
    peers: PeerPicker,
    /// Scratch: an announce's BEP 41 options (the URL data with its passkey).
    options: Vec<u8>,
}

impl RequestWriter {
    /// The writer of worker `worker` of `workers`, with its own random stream.
    pub(crate) fn new(config: &RequestConfig, worker: usize, workers: usize) -> Self {
        Self {
            config: config.clone(),
            rng: SmallRng::seed_from_u64(0x10ad_0000 ^ worker as u64),
            total_weight: config.weight_connect + config.weight_announce + config.weight_scrape,
            peers: PeerPicker::new(config.peer_order == PeerOrder::Sequential, worker, workers),
            options: Vec::new(),
        }
    }

    /// The passkey of user `user`: the number as 32 lowercase hex digits.
    pub(crate) fn passkey(user: usize) -> [u8; 32] {
        let mut key = [0u8; 32];
        let digits = b"0123456789abcdef";
        let mut value = user as u128;
        for byte in key.iter_mut().rev() {
            *byte = digits[(value & 0xf) as usize];
            value >>= 4;
        }
        key
    }

    /// Appends a connect request.
    pub(crate) fn connect(out: &mut Vec<u8>, transaction_id: TransactionId) {
        Request::Connect(ConnectRequest { transaction_id }).write(out);
    }

    /// Appends one request of a kind drawn by the configured weights.
    pub(crate) fn write(
        &mut self,
        population: &Population,
        connection_id: ConnectionId,
        transaction_id: TransactionId,
        out: &mut Vec<u8>,
    ) -> Kind {
        let pick = self.rng.random_range(0..self.total_weight);
        if pick < self.config.weight_connect {
            Self::connect(out, transaction_id);
            Kind::Connect
        } else if pick < self.config.weight_connect + self.config.weight_announce {
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
        let index = self.peers.next(population, &mut self.rng);
        self.announce_for(population, index, connection_id, transaction_id, out);
    }

    /// Appends an announce of simulated peer `index`.
    pub(crate) fn announce_for(
        &mut self,
        population: &Population,
        index: usize,
        connection_id: ConnectionId,
        transaction_id: TransactionId,
        out: &mut Vec<u8>,
    ) {
        let peer = population.peer(index);
        // Private mode: peer `index` is user `index % passkeys`, whose key goes in the
        // URL data as libtorrent sends it.
        self.options.clear();
        if self.config.passkeys > 0 {
            let mut url = [0u8; 42];
            url[0] = b'/';
            url[1..33].copy_from_slice(&Self::passkey(index % self.config.passkeys));
            url[33..].copy_from_slice(b"/announce");
            AnnounceOptions::write_url_data(&url, &mut self.options);
        }
        let request = AnnounceRequest {
            connection_id,
            transaction_id,
            info_hash: InfoHash(*population.info_hash(peer.torrent as usize)),
            peer_id: PeerId(Population::peer_id(index)),
            downloaded: 0,
            left: if peer.seeder { 0 } else { 1 << 20 },
            uploaded: 0,
            event: AnnounceEvent::None,
            ip_address: 0,
            key: index as u32,
            peers_wanted: self.config.peers_wanted,
            port: peer.port,
            options: AnnounceOptions(&self.options),
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
        let count = self.rng.random_range(1..=self.config.scrape_max_torrents);
        for _ in 0..count {
            let torrent = population.popular_torrent(&mut self.rng);
            out.extend_from_slice(population.info_hash(torrent));
        }
    }
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
        let config = small_config();
        let population = population(&config);
        let mut writer = RequestWriter::new(&config, 0, 1);
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
        let population = population(&config);
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for worker in 0..3 {
            let mut writer = RequestWriter::new(&config, worker, 3);
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
    fn private_announces_carry_their_users_key_in_url_data() {
        assert_eq!(
            &RequestWriter::passkey(0x2a),
            b"0000000000000000000000000000002a"
        );
        let config = RequestConfig {
            passkeys: 10,
            weight_connect: 0,
            weight_scrape: 0,
            ..small_config()
        };
        let population = population(&config);
        let mut writer = RequestWriter::new(&config, 0, 1);
        let mut out = Vec::new();
        writer.write(&population, ConnectionId(1), TransactionId(2), &mut out);
        let Ok(Request::Announce(announce)) = Request::parse(&out) else {
            panic!("not an announce")
        };
        let url = announce.options.url_data_joined();
        assert_eq!(url.len(), 42);
        assert!(
            url.starts_with(b"/") && url.ends_with(b"/announce"),
            "{url:?}"
        );
    }
}
