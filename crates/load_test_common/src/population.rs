//! The torrents and peers a load test pretends to be.
//!
//! Built from a fixed seed, so every run, and every tracker compared, sees the same
//! population; `--print-info-hashes` in the load testers prints its torrents for
//! trackers with an allow list.

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use crate::popularity::Weighted;

/// How to build a population.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PopulationShape {
    /// Distinct torrents.
    pub torrents: usize,
    /// Distinct peers.
    pub peers: usize,
    /// Torrent i is drawn with weight 1/(i+1)^shape.
    pub popularity_shape: f64,
    /// Probability that a peer is a seeder.
    pub seeder_probability: f64,
}

/// One simulated peer: it always announces the same torrent, port and status.
#[derive(Clone, Copy, Debug)]
pub struct SimulatedPeer {
    /// Index of its torrent.
    pub torrent: u32,
    /// The port it announces.
    pub port: u16,
    /// Whether it is a seeder (`left=0`).
    pub seeder: bool,
}

/// The torrents and peers of a run.
#[derive(Debug)]
pub struct Population {
    info_hashes: Vec<[u8; 20]>,
    popularity: Weighted,
    peers: Vec<SimulatedPeer>,
}

impl Population {
    /// Builds the population (about a second for a million torrents and two million
    /// peers).
    pub fn new(shape: PopulationShape) -> Self {
        let mut rng = SmallRng::seed_from_u64(0x5b0a_1d5e_ed00_0001);
        let info_hashes = (0..shape.torrents).map(|_| rng.random()).collect();
        let popularity = Weighted::power_law(shape.torrents, shape.popularity_shape);
        let peers = (0..shape.peers)
            .map(|_| SimulatedPeer {
                torrent: popularity.sample(&mut rng) as u32,
                port: rng.random_range(1..=u16::MAX),
                seeder: rng.random_bool(shape.seeder_probability),
            })
            .collect();
        Self {
            info_hashes,
            popularity,
            peers,
        }
    }

    /// The info hashes, in order.
    pub fn info_hashes(&self) -> &[[u8; 20]] {
        &self.info_hashes
    }

    /// Info hash of torrent `index`.
    pub fn info_hash(&self, index: usize) -> &[u8; 20] {
        &self.info_hashes[index]
    }

    /// A torrent drawn by popularity.
    pub fn popular_torrent(&self, rng: &mut SmallRng) -> usize {
        self.popularity.sample(rng)
    }

    /// Number of peers.
    pub fn peer_count(&self) -> usize {
        self.peers.len()
    }

    /// Peer `index`.
    pub fn peer(&self, index: usize) -> SimulatedPeer {
        self.peers[index]
    }

    /// A recognisable peer id for peer `index`: client prefix and its number.
    pub fn peer_id(index: usize) -> [u8; 20] {
        let mut id = *b"-SL0001-000000000000";
        let digits = format!("{:012}", index % 1_000_000_000_000);
        id[8..].copy_from_slice(digits.as_bytes());
        id
    }

    /// Writes the info hashes as hex lines (the access-list format).
    pub fn write_info_hashes(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        for hash in &self.info_hashes {
            let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
            writeln!(out, "{hex}")?;
        }
        Ok(())
    }
}

/// Picks which peer announces next: at random, or every peer in turn.
#[derive(Clone, Debug)]
pub struct PeerPicker {
    sequential: bool,
    next: usize,
    stride: usize,
}

impl PeerPicker {
    /// The picker of worker `worker` of `workers`.
    pub fn new(sequential: bool, worker: usize, workers: usize) -> Self {
        Self {
            sequential,
            next: worker,
            stride: workers.max(1),
        }
    }

    /// The next peer's index.
    pub fn next(&mut self, population: &Population, rng: &mut SmallRng) -> usize {
        if self.sequential {
            let index = self.next % population.peer_count();
            self.next = self.next.wrapping_add(self.stride);
            index
        } else {
            rng.random_range(0..population.peer_count())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: PopulationShape = PopulationShape {
        torrents: 100,
        peers: 1000,
        popularity_shape: 1.0,
        seeder_probability: 0.5,
    };

    #[test]
    fn the_population_is_the_same_every_time() {
        assert_eq!(
            Population::new(SHAPE).info_hashes(),
            Population::new(SHAPE).info_hashes()
        );
        assert_eq!(Population::peer_id(42), *b"-SL0001-000000000042");
    }

    #[test]
    fn sequential_pickers_share_the_peers_between_workers() {
        let population = Population::new(SHAPE);
        let mut rng = SmallRng::seed_from_u64(1);
        let mut seen = std::collections::HashSet::new();
        for worker in 0..3 {
            let mut picker = PeerPicker::new(true, worker, 3);
            for _ in 0..334 {
                seen.insert(picker.next(&population, &mut rng));
            }
        }
        assert_eq!(seen.len(), 1000);
    }
}
