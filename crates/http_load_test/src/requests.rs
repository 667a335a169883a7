//! HTTP requests for the shared simulated population.

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use shoal_http_protocol::query::encode;
use shoal_load_test_common::{PeerPicker, Population, PopulationShape};

use crate::config::Config;

/// The kind of a request, to classify its response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An announce.
    Announce,
    /// A scrape.
    Scrape,
}

/// The population a config describes.
pub(crate) fn population(config: &Config) -> Population {
    let r = &config.requests;
    Population::new(PopulationShape {
        torrents: r.torrents,
        peers: r.peers,
        popularity_shape: r.popularity_shape,
        seeder_probability: r.seeder_probability,
    })
}

/// Writes HTTP requests for one worker.
#[derive(Debug)]
pub(crate) struct RequestWriter {
    rng: SmallRng,
    peers: PeerPicker,
    announce_path: String,
    scrape_path: String,
    tail: String,
    weight_announce: u32,
    total_weight: u32,
    scrape_max: usize,
    peers_wanted: i32,
    compact: bool,
}

impl RequestWriter {
    /// The writer of worker `worker` of `workers`.
    pub(crate) fn new(config: &Config, worker: usize, workers: usize) -> Self {
        let r = &config.requests;
        let close = if config.network.keep_alive {
            ""
        } else {
            "Connection: close\r\n"
        };
        Self {
            rng: SmallRng::seed_from_u64(0x4077_0000 ^ worker as u64),
            peers: PeerPicker::new(false, worker, workers),
            announce_path: r.announce_path.clone(),
            scrape_path: r.scrape_path.clone(),
            tail: format!(" HTTP/1.1\r\nHost: {}\r\n{close}\r\n", config.network.host),
            weight_announce: r.weight_announce,
            total_weight: r.weight_announce + r.weight_scrape,
            scrape_max: r.scrape_max_torrents,
            peers_wanted: r.peers_wanted,
            compact: r.compact,
        }
    }

    /// Appends one request.
    pub(crate) fn write(&mut self, population: &Population, out: &mut Vec<u8>) -> Kind {
        use std::io::Write as _;
        if self.rng.random_range(0..self.total_weight) < self.weight_announce {
            let index = self.peers.next(population, &mut self.rng);
            self.announce_for(population, index, out);
            Kind::Announce
        } else {
            let _ = write!(out, "GET {}?", self.scrape_path);
            for i in 0..self.rng.random_range(1..=self.scrape_max) {
                let torrent = population.popular_torrent(&mut self.rng);
                let _ = write!(
                    out,
                    "{}info_hash={}",
                    if i == 0 { "" } else { "&" },
                    encode(population.info_hash(torrent))
                );
            }
            out.extend_from_slice(self.tail.as_bytes());
            Kind::Scrape
        }
    }

    /// Appends an announce of simulated peer `index`.
    pub(crate) fn announce_for(
        &mut self,
        population: &Population,
        index: usize,
        out: &mut Vec<u8>,
    ) {
        use std::io::Write as _;
        {
            let peer = population.peer(index);
            let _ = write!(
                out,
                "GET {}?info_hash={}&peer_id={}&port={}&uploaded=0&downloaded=0&left={}&numwant={}&compact={}{}",
                self.announce_path,
                encode(population.info_hash(peer.torrent as usize)),
                encode(&Population::peer_id(index)),
                peer.port,
                if peer.seeder { 0 } else { 1 << 20 },
                self.peers_wanted,
                u8::from(self.compact),
                self.tail,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use shoal_http_protocol::{ParseLimits, Request, parse_request};

    use super::*;

    #[test]
    fn requests_parse() {
        let mut config = Config::default();
        config.requests.torrents = 50;
        config.requests.peers = 200;
        config.requests.weight_scrape = 50;
        let population = population(&config);
        let mut writer = RequestWriter::new(&config, 0, 1);
        let limits = ParseLimits {
            announce_path: "/announce",
            scrape_path: "/scrape",
            max_request_len: 8192,
            max_headers: 16,
            max_scrape_torrents: 100,
            proxy_header: None,
            private: None,
        };
        let (mut announces, mut scrapes) = (0, 0);
        for _ in 0..1000 {
            let mut out = Vec::new();
            let kind = writer.write(&population, &mut out);
            let parsed = parse_request(&out, &limits).unwrap().unwrap();
            assert_eq!(parsed.len, out.len());
            match (kind, parsed.request) {
                (Kind::Announce, Request::Announce(a)) => {
                    assert_eq!(a.numwant, Some(30));
                    announces += 1;
                }
                (Kind::Scrape, Request::Scrape(s)) => {
                    assert!((1..=10).contains(&s.info_hashes.len()));
                    scrapes += 1;
                }
                (kind, request) => panic!("{kind:?} wrote {request:?}"),
            }
        }
        assert!(announces > 300 && scrapes > 300, "{announces} {scrapes}");
    }
}
