//! What one announce costs the swarm store, without sockets or a kernel in the way.
//!
//! Builds the population the UDP load tester simulates (torrents drawn by Zipf
//! popularity, two peers per torrent by default, 75% seeders), lets peers announce at
//! random until the store holds most of them, then times announces served in batches
//! of 64 the way shoal_udp serves a `recvmmsg` batch: each torrent located once, every
//! prefetch step over the batch, then each announce, its reply peers written to a buffer.
//!
//! The floor bench (scripts/bench/floor.py) measures the whole tracker, and its figures
//! swing with this machine's noise; this measures only what the store adds, so a
//! change to it can be judged in seconds:
//!
//!   cargo run --release -p shoal_swarm --example announce_cost -- [TORRENTS [ROUNDS [WANTED [STEPS]]]]
//!
//! It prints nanoseconds per announce for each round and their median. WANTED (30) is
//! the peers each announce asks for: 0 leaves the reply's reads out, so two runs tell
//! the lookup's cost from the reply's. STEPS ([`PREFETCH_STEPS`]) is how many prefetch
//! steps the batch takes: 0 shows what prefetching saves.

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use shoal_swarm::{
    Announce, AnnounceEvent, BitTorrentMap, Capacity, InfoHash, PREFETCH_STEPS, PeerAddr,
    ServerTime, V4Addr,
};

/// Requests served together, as in one `recvmmsg` batch.
const BATCH: usize = 64;
/// Announces timed per round.
const TIMED: usize = 2_000_000;

struct SimulatedPeer {
    torrent: u32,
    key: V4Addr,
    seeder: bool,
}

#[allow(clippy::print_stdout)] // the figures are the output
fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<usize>());
    let torrents = args
        .next()
        .map_or(1_000_000, |a| a.expect("TORRENTS: a number"));
    let rounds = args.next().map_or(5, |a| a.expect("ROUNDS: a number"));
    let wanted = args.next().map_or(30, |a| a.expect("WANTED: a number"));
    let steps = args
        .next()
        .map_or(PREFETCH_STEPS, |a| a.expect("STEPS: a number"))
        .min(PREFETCH_STEPS);
    let peers = 2 * torrents;

    let mut rng = SmallRng::seed_from_u64(1);
    let hashes: Vec<InfoHash> = (0..torrents).map(|_| rng.random()).collect();
    let popularity = Zipf::new(torrents, 1.0);
    // One source address, as the load tester on loopback: a peer is its port.
    let population: Vec<SimulatedPeer> = (0..peers)
        .map(|_| SimulatedPeer {
            torrent: popularity.sample(&mut rng) as u32,
            key: V4Addr::new(Ipv4Addr::LOCALHOST, rng.random()),
            seeder: rng.random_bool(0.75),
        })
        .collect();

    let mut map = BitTorrentMap::<()>::new(3600, Capacity::UNLIMITED);
    let mut reply = Vec::with_capacity(BATCH * 200);
    let now = ServerTime(100);
    let mut batch = Vec::with_capacity(BATCH);
    let mut located = Vec::with_capacity(BATCH);
    let mut serve = |map: &mut BitTorrentMap<()>, batch: &[&SimulatedPeer], rng: &mut SmallRng| {
        located.clear();
        located.extend(
            batch
                .iter()
                .map(|peer| map.locate(&hashes[peer.torrent as usize])),
        );
        for step in 0..steps {
            for (peer, torrent) in batch.iter().zip(&mut located) {
                map.prefetch_announce(step, torrent, &peer.key);
            }
        }
        reply.clear();
        for (peer, torrent) in batch.iter().zip(&located) {
            let announce = Announce {
                key: peer.key,
                extra: (),
                event: AnnounceEvent::None,
                seeder: Some(peer.seeder),
                peers_wanted: wanted,
            };
            let result = map.announce_located(torrent, announce, now, rng, |chosen| {
                reply.extend_from_slice(chosen.key().as_bytes());
            });
            black_box(result.ok());
        }
        black_box(&reply);
    };
    let mut announce_random = |map: &mut BitTorrentMap<()>, count: usize, rng: &mut SmallRng| {
        for _ in 0..count / BATCH {
            batch.clear();
            batch.extend((0..BATCH).map(|_| &population[rng.random_range(0..peers)]));
            serve(map, &batch, rng);
        }
    };

    // The load tester's steady state: every peer picked at random, most already known.
    announce_random(&mut map, 2 * peers, &mut rng);
    let mut costs = Vec::new();
    for round in 1..=rounds {
        let started = Instant::now();
        announce_random(&mut map, TIMED, &mut rng);
        let ns = started.elapsed().as_nanos() as f64 / TIMED as f64;
        println!("round {round}: {ns:.1} ns per announce");
        costs.push(ns);
    }
    costs.sort_by(f64::total_cmp);
    println!(
        "median {:.1} ns per announce ({torrents} torrents, {} peers held)",
        costs[costs.len() / 2],
        map.peer_count()
    );
}

/// Torrent `i` drawn with weight 1/(i+1)^shape, by binary search in the cumulative
/// weights.
struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, shape: f64) -> Self {
        let mut total = 0.0;
        let cumulative = (0..n)
            .map(|i| {
                total += 1.0 / ((i + 1) as f64).powf(shape);
                total
            })
            .collect();
        Self { cumulative }
    }

    fn sample(&self, rng: &mut SmallRng) -> usize {
        let total = *self.cumulative.last().expect("at least one torrent");
        let point = rng.random::<f64>() * total;
        self.cumulative
            .partition_point(|&c| c <= point)
            .min(self.cumulative.len() - 1)
    }
}
