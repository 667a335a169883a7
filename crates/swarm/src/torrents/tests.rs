use std::collections::{BTreeMap, HashSet};
use std::net::Ipv4Addr;

use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::*;
use crate::peer::{V4Addr, V6Addr};
use crate::peer_list::PeerList;

const HASH: InfoHash = [7; 20];
const TIMEOUT: u32 = 100;

fn v4(last: u8, port: u16) -> V4Addr {
    V4Addr::new(Ipv4Addr::new(10, 0, 0, last), port)
}

fn announce(addr: V4Addr, seeder: bool, event: AnnounceEvent) -> Announce<V4Addr, ()> {
    Announce {
        key: addr,
        extra: (),
        event,
        seeder: Some(seeder),
        peers_wanted: 50,
    }
}

struct Harness {
    map: BitTorrentMap<()>,
    rng: SmallRng,
    now: ServerTime,
}

impl Harness {
    fn new() -> Self {
        Self {
            map: TorrentMap::new(TIMEOUT, Capacity::UNLIMITED),
            rng: SmallRng::seed_from_u64(1),
            now: ServerTime(0),
        }
    }

    fn announce<A: ListIn<DualStack<()>>>(
        &mut self,
        request: Announce<A, ()>,
    ) -> (SwarmCounts, Vec<A>) {
        let mut peers = Vec::new();
        let counts = self
            .map
            .announce(&HASH, request, self.now, &mut self.rng, |peer| {
                peers.push(*peer.key())
            })
            .expect("BitTorrent peers are never taken")
            .counts;
        (counts, peers)
    }
}

#[test]
fn second_peer_is_sent_the_first_and_never_itself() {
    let mut h = Harness::new();
    let (counts, peers) = h.announce(announce(v4(1, 1000), false, AnnounceEvent::Started));
    assert_eq!(
        counts,
        SwarmCounts {
            seeders: 0,
            leechers: 1
        }
    );
    assert!(peers.is_empty(), "a lone peer gets nobody, not itself");

    let (counts, peers) = h.announce(announce(v4(2, 1000), true, AnnounceEvent::Started));
    assert_eq!(
        counts,
        SwarmCounts {
            seeders: 1,
            leechers: 1
        }
    );
    assert_eq!(peers, vec![v4(1, 1000)]);

    let (_, peers) = h.announce(announce(v4(1, 1000), false, AnnounceEvent::None));
    assert_eq!(peers, vec![v4(2, 1000)]);
}

#[test]
fn peers_are_keyed_by_ip_and_port() {
    let mut h = Harness::new();
    h.announce(announce(v4(1, 1000), false, AnnounceEvent::Started));
    h.announce(announce(v4(1, 1000), false, AnnounceEvent::None));
    assert_eq!(h.map.peer_count(), 1, "re-announce updates, not duplicates");
    let (counts, peers) = h.announce(announce(v4(1, 1001), false, AnnounceEvent::None));
    assert_eq!(counts.leechers, 2, "same IP, other port is another peer");
    assert_eq!(peers, vec![v4(1, 1000)]);
}

#[test]
fn leecher_becoming_seeder_moves_between_counts() {
    let mut h = Harness::new();
    h.announce(announce(v4(1, 1), false, AnnounceEvent::Started));
    let (counts, _) = h.announce(announce(v4(1, 1), true, AnnounceEvent::None));
    assert_eq!(
        counts,
        SwarmCounts {
            seeders: 1,
            leechers: 0
        }
    );
    let (counts, _) = h.announce(announce(v4(1, 1), false, AnnounceEvent::None));
    assert_eq!(
        counts,
        SwarmCounts {
            seeders: 0,
            leechers: 1
        }
    );
}

#[test]
fn stopped_removes_the_peer_and_sends_nothing() {
    let mut h = Harness::new();
    h.announce(announce(v4(1, 1), false, AnnounceEvent::Started));
    h.announce(announce(v4(2, 1), false, AnnounceEvent::Started));
    let (counts, peers) = h.announce(announce(v4(2, 1), false, AnnounceEvent::Stopped));
    assert_eq!(
        counts,
        SwarmCounts {
            seeders: 0,
            leechers: 1
        }
    );
    assert!(peers.is_empty());
    assert_eq!(h.map.peer_count(), 1);
}

#[test]
fn stopped_for_an_unknown_torrent_creates_nothing() {
    let mut h = Harness::new();
    let (counts, _) = h.announce(announce(v4(1, 1), false, AnnounceEvent::Stopped));
    assert_eq!(counts, SwarmCounts::default());
    assert_eq!(h.map.torrent_count(), 0);
}

#[test]
fn completed_counts_one_download_per_finishing_peer() {
    let mut h = Harness::new();
    h.announce(announce(v4(1, 1), false, AnnounceEvent::Started));
    h.announce(announce(v4(1, 1), true, AnnounceEvent::Completed));
    // A retransmitted completed from a peer already seeding is not a new download.
    h.announce(announce(v4(1, 1), true, AnnounceEvent::Completed));
    // A peer first seen with completed counts none: it was never seen leeching (fresh
    // peer ids replaying completed would each count one). A tracker restarted without
    // [state] loses the completions of the leechers it forgot.
    for port in 2..50 {
        h.announce(announce(v4(2, port), true, AnnounceEvent::Completed));
    }
    // One that stops and comes back with completed again: none either.
    for _ in 0..10 {
        h.announce(announce(v4(1, 1), true, AnnounceEvent::Stopped));
        h.announce(announce(v4(1, 1), true, AnnounceEvent::Completed));
    }
    assert_eq!(
        h.map.scrape(&HASH),
        ScrapeStats {
            seeders: 49,
            leechers: 0,
            downloads: 1
        }
    );
}

#[test]
fn downloads_survive_the_last_peer_stopping_until_cleaning() {
    let mut h = Harness::new();
    h.announce(announce(v4(1, 1), false, AnnounceEvent::Started));
    h.announce(announce(v4(1, 1), true, AnnounceEvent::Completed));
    h.announce(announce(v4(1, 1), true, AnnounceEvent::Stopped));
    assert_eq!(h.map.scrape(&HASH).downloads, 1);
    h.map.clean(h.now, |_| true);
    assert_eq!(h.map.scrape(&HASH), ScrapeStats::default());
}

#[test]
fn seeders_get_leechers_only_when_there_are_leechers() {
    let mut h = Harness::new();
    for i in 1..=5 {
        h.announce(announce(v4(i, 1), true, AnnounceEvent::Started));
    }
    // Only seeders in the swarm: a seeder is sent the other seeders.
    let (_, peers) = h.announce(announce(v4(1, 1), true, AnnounceEvent::None));
    assert_eq!(peers.len(), 4);

    for i in 10..=12 {
        h.announce(announce(v4(i, 1), false, AnnounceEvent::Started));
    }
    for _ in 0..20 {
        let (_, peers) = h.announce(announce(v4(1, 1), true, AnnounceEvent::None));
        let got: HashSet<_> = peers.into_iter().collect();
        assert_eq!(got, HashSet::from([v4(10, 1), v4(11, 1), v4(12, 1)]));
    }
    // Leechers are sent seeders and leechers.
    let (_, peers) = h.announce(announce(v4(10, 1), false, AnnounceEvent::None));
    assert_eq!(peers.len(), 7);
}

#[test]
fn replies_are_capped_at_peers_wanted_and_vary() {
    let mut h = Harness::new();
    for i in 0..200u16 {
        h.announce(announce(
            v4((i % 250) as u8, 2000 + i),
            false,
            AnnounceEvent::Started,
        ));
    }
    let mut seen = HashSet::new();
    for _ in 0..60 {
        let mut request = announce(v4(0, 2000), false, AnnounceEvent::None);
        request.peers_wanted = 10;
        let (_, peers) = h.announce(request);
        assert_eq!(peers.len(), 10);
        assert!(!peers.contains(&v4(0, 2000)));
        let distinct: HashSet<_> = peers.iter().collect();
        assert_eq!(distinct.len(), 10);
        seen.extend(peers);
    }
    // Ten wanted: groups of two neighbours (a group holds at most a fifth of a
    // reply), five to a reply. 60 replies cover 181-197 peers (median 190) over 400 seeds.
    assert!(
        seen.len() > 170,
        "60 random replies of 10 should cover most of 199 peers, covered {}",
        seen.len()
    );
}

#[test]
fn ipv4_and_ipv6_peers_are_kept_apart_but_counted_together() {
    let mut h = Harness::new();
    let a6 = V6Addr::new("2001:db8::1".parse().unwrap(), 1);
    let b6 = V6Addr::new("2001:db8::2".parse().unwrap(), 1);
    h.announce(announce(v4(1, 1), false, AnnounceEvent::Started));
    let six = |key| Announce {
        key,
        extra: (),
        event: AnnounceEvent::None,
        seeder: Some(true),
        peers_wanted: 50,
    };
    let (counts, peers) = h.announce(six(a6));
    assert!(
        peers.is_empty(),
        "no IPv6 peers yet; IPv4 ones are not sent"
    );
    assert_eq!(
        counts,
        SwarmCounts {
            seeders: 1,
            leechers: 1
        }
    );
    let (_, peers) = h.announce(six(b6));
    assert_eq!(peers, vec![a6]);
    let (_, peers) = h.announce(announce(v4(2, 1), false, AnnounceEvent::None));
    assert_eq!(peers, vec![v4(1, 1)]);
    assert_eq!(
        h.map.scrape(&HASH),
        ScrapeStats {
            seeders: 2,
            leechers: 2,
            downloads: 0
        }
    );
}

#[test]
fn expired_peers_are_not_sent_and_are_cleaned_with_their_torrent() {
    let mut h = Harness::new();
    h.announce(announce(v4(1, 1), false, AnnounceEvent::Started));
    h.now = ServerTime(60);
    h.announce(announce(v4(2, 1), false, AnnounceEvent::Started));
    h.now = ServerTime(TIMEOUT + 1);
    let (_, peers) = h.announce(announce(v4(3, 1), false, AnnounceEvent::Started));
    assert_eq!(peers, vec![v4(2, 1)], "peer 1 expired at {TIMEOUT}");

    let report = h.map.clean(h.now, |_| true);
    assert_eq!(
        report,
        CleanReport {
            peers_removed: 1,
            torrents_removed: 0,
            pass_done: true
        }
    );
    assert_eq!(h.map.scrape(&HASH).leechers, 2);

    h.now = ServerTime(1000);
    let report = h.map.clean(h.now, |_| true);
    assert_eq!(
        report,
        CleanReport {
            peers_removed: 2,
            torrents_removed: 1,
            pass_done: true
        }
    );
    assert_eq!(h.map.torrent_count(), 0);
    assert_eq!(h.map.peer_count(), 0);
}

#[test]
fn cleaning_drops_torrents_the_caller_no_longer_allows() {
    let mut h = Harness::new();
    h.announce(announce(v4(1, 1), false, AnnounceEvent::Started));
    let other = [9; 20];
    h.map
        .announce(
            &other,
            announce(v4(1, 1), false, AnnounceEvent::Started),
            h.now,
            &mut h.rng,
            |_| {},
        )
        .unwrap();
    let report = h.map.clean(h.now, |hash| *hash != other);
    assert_eq!(
        report,
        CleanReport {
            peers_removed: 1,
            torrents_removed: 1,
            pass_done: true
        }
    );
    assert_eq!(h.map.torrent_count(), 1);
    assert_eq!(h.map.peer_count(), 1);
}

#[test]
fn peer_limits_resolve_client_requests() {
    let limits = PeerLimits {
        default: 30,
        max: 50,
    };
    assert_eq!(limits.resolve(-1), 30);
    assert_eq!(limits.resolve(0), 30);
    assert_eq!(limits.resolve(10), 10);
    assert_eq!(limits.resolve(500), 50);
    assert_eq!(
        PeerLimits {
            default: 80,
            max: 50
        }
        .resolve(-1),
        50
    );
}

#[derive(Clone, Debug)]
enum Op {
    Announce { peer: u16, seeder: bool, event: u8 },
    Tick(u8),
    Clean,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..120u16, any::<bool>(), 0..4u8)
            .prop_map(|(peer, seeder, event)| Op::Announce { peer, seeder, event }),
        1 => (0..60u8).prop_map(Op::Tick),
        1 => Just(Op::Clean),
    ]
}

proptest! {
    /// The map agrees with a simple model (address → (seeder, expires)) after any
    /// sequence of announces, time steps and cleanings, across the index threshold.
    #[test]
    fn matches_a_simple_model(ops in proptest::collection::vec(op(), 1..400)) {
        let mut h = Harness::new();
        let mut model: BTreeMap<V4Addr, (bool, ServerTime)> = BTreeMap::new();
        let mut downloads = 0u32;
        for op in ops {
            match op {
                Op::Announce { peer, seeder, event } => {
                    let addr = v4((peer % 7) as u8, peer + 1);
                    let event = [AnnounceEvent::None, AnnounceEvent::Started,
                                 AnnounceEvent::Completed, AnnounceEvent::Stopped][event as usize];
                    let (counts, peers) = h.announce(announce(addr, seeder, event));
                    if event == AnnounceEvent::Stopped {
                        model.remove(&addr);
                        prop_assert!(peers.is_empty());
                    } else {
                        let before = model.insert(addr, (seeder, h.now.plus(TIMEOUT)));
                        if event == AnnounceEvent::Completed && before.is_some_and(|(s, _)| !s) {
                            downloads += 1;
                        }
                        prop_assert!(!peers.contains(&addr));
                        let live_leechers = model.iter()
                            .filter(|(a, (s, e))| **a != addr && !*s && *e > h.now).count();
                        for peer in &peers {
                            let (peer_seeder, expires) = model[peer];
                            prop_assert!(expires > h.now);
                            if seeder && live_leechers > 0 {
                                prop_assert!(!peer_seeder);
                            }
                        }
                    }
                    let seeders = model.values().filter(|(s, _)| *s).count() as u32;
                    let leechers = model.len() as u32 - seeders;
                    if model.is_empty() && event == AnnounceEvent::Stopped {
                        prop_assert_eq!(counts.seeders + counts.leechers, 0);
                    } else {
                        prop_assert_eq!(counts, SwarmCounts { seeders, leechers });
                    }
                }
                Op::Tick(seconds) => h.now = h.now.plus(u32::from(seconds)),
                Op::Clean => {
                    h.map.clean(h.now, |_| true);
                    model.retain(|_, (_, expires)| *expires > h.now);
                    if model.is_empty() {
                        downloads = 0;
                    }
                }
            }
            prop_assert_eq!(h.map.peer_count(), model.len());
            if let Some(torrent) = h.map.get(&HASH) {
                torrent.peers().v4().assert_consistent(&h.map.peer_hasher);
                prop_assert_eq!(torrent.scrape_stats().downloads, downloads);
            }
        }
    }
}

/// What a WebTorrent tracker keeps per peer, reduced to what the storage's rules look
/// at: the connection that owns the peer id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Owner(u8);

impl PeerData for Owner {
    const SEEDERS_MEET_SEEDERS: bool = false;

    fn may_change(&self, by: &Self) -> bool {
        self == by
    }
}

/// Peers keyed by a peer id (one byte is enough to make ids collide often).
type ById = TorrentMap<PeerList<u8, Owner>>;

#[derive(Clone, Debug)]
enum IdOp {
    Announce {
        id: u8,
        owner: u8,
        seeder: Option<bool>,
        event: u8,
    },
    Leave {
        id: u8,
        owner: u8,
    },
    Tick(u8),
    Clean,
}

fn id_op() -> impl Strategy<Value = IdOp> {
    prop_oneof![
        8 => (0..60u8, 0..3u8, proptest::option::of(any::<bool>()), 0..4u8)
            .prop_map(|(id, owner, seeder, event)| IdOp::Announce { id, owner, seeder, event }),
        2 => (0..60u8, 0..3u8).prop_map(|(id, owner)| IdOp::Leave { id, owner }),
        1 => (0..60u8).prop_map(IdOp::Tick),
        1 => Just(IdOp::Clean),
    ]
}

/// A model peer: owner, seeder, expires.
type ModelPeer = (u8, bool, ServerTime);

proptest! {
    /// The WebTorrent use of the storage (peers by id, owned by a connection, one
    /// list, seeders never sent seeders) agrees with a simple model.
    #[test]
    fn peers_by_id_match_a_simple_model(ops in proptest::collection::vec(id_op(), 1..400)) {
        let mut map = ById::new(TIMEOUT, Capacity::UNLIMITED);
        let mut rng = SmallRng::seed_from_u64(3);
        let mut now = ServerTime(0);
        let mut model: BTreeMap<u8, ModelPeer> = BTreeMap::new();
        let mut downloads = 0u32;
        let free = |peer: Option<&ModelPeer>, owner: u8, now: ServerTime| {
            peer.is_none_or(|&(o, _, expires)| o == owner || expires <= now)
        };
        for op in ops {
            match op {
                IdOp::Announce { id, owner, seeder, event } => {
                    let event = [AnnounceEvent::None, AnnounceEvent::Started,
                                 AnnounceEvent::Completed, AnnounceEvent::Stopped][event as usize];
                    let request = Announce {
                        key: id,
                        extra: Owner(owner),
                        event,
                        seeder,
                        peers_wanted: 10,
                    };
                    let mut sent = Vec::new();
                    let result = map.announce(&HASH, request, now, &mut rng, |peer| {
                        sent.push(*peer.key())
                    });
                    let before = model.get(&id).copied();
                    if !free(before.as_ref(), owner, now) {
                        prop_assert_eq!(result, Err(Refused::PeerTaken));
                        prop_assert!(sent.is_empty());
                    } else if event == AnnounceEvent::Stopped {
                        model.remove(&id);
                        prop_assert!(result.is_ok());
                        prop_assert!(sent.is_empty());
                    } else {
                        let was_seeder = before.is_some_and(|(_, s, _)| s);
                        let is_seeder = seeder.unwrap_or(was_seeder);
                        model.insert(id, (owner, is_seeder, now.plus(TIMEOUT)));
                        if event == AnnounceEvent::Completed && before.is_some_and(|(_, s, _)| !s) {
                            downloads += 1;
                        }
                        prop_assert!(result.is_ok());
                        prop_assert!(!sent.contains(&id));
                        prop_assert!(sent.len() <= 10);
                        for peer in &sent {
                            let (_, peer_seeder, expires) = model[peer];
                            prop_assert!(expires > now, "an expired peer was sent");
                            prop_assert!(!(is_seeder && peer_seeder), "a seeder met a seeder");
                        }
                        let live = model.iter().filter(|&(other, &(_, s, e))| {
                            *other != id && e > now && !(is_seeder && s)
                        }).count();
                        prop_assert_eq!(sent.len(), live.min(10));
                    }
                    if let Ok(Announced { counts, .. }) = result {
                        let seeders = model.values().filter(|(_, s, _)| *s).count() as u32;
                        let leechers = model.len() as u32 - seeders;
                        if map.get(&HASH).is_some() {
                            prop_assert_eq!(counts, SwarmCounts { seeders, leechers });
                        }
                    }
                }
                IdOp::Leave { id, owner } => {
                    let removed = map.remove(&HASH, &id, &Owner(owner), now);
                    let present = model.contains_key(&id);
                    let allowed = free(model.get(&id), owner, now);
                    prop_assert_eq!(removed, present && allowed);
                    if removed {
                        model.remove(&id);
                    }
                }
                IdOp::Tick(seconds) => now = now.plus(u32::from(seconds)),
                IdOp::Clean => {
                    map.clean(now, |_| true);
                    model.retain(|_, (_, _, expires)| *expires > now);
                    if model.is_empty() {
                        downloads = 0;
                    }
                }
            }
            prop_assert_eq!(map.peer_count(), model.len());
            for (id, &(owner, _, _)) in &model {
                let peer = map.peer(&HASH, id);
                prop_assert_eq!(peer.map(|peer| peer.extra), Some(Owner(owner)));
            }
            if let Some(torrent) = map.get(&HASH) {
                torrent.peers().assert_consistent(&map.peer_hasher);
                prop_assert_eq!(torrent.scrape_stats().downloads, downloads);
            }
        }
    }
}

fn announce_in(
    map: &mut BitTorrentMap<()>,
    hash: InfoHash,
    addr: V4Addr,
    rng: &mut SmallRng,
) -> (Result<Announced, Refused>, Vec<V4Addr>) {
    let mut sent = Vec::new();
    let result = map.announce(
        &hash,
        announce(addr, false, AnnounceEvent::Started),
        ServerTime(0),
        rng,
        |peer| sent.push(*peer.key()),
    );
    (result, sent)
}

#[test]
fn a_full_map_refuses_new_torrents_and_keeps_serving_the_old_ones() {
    let capacity = Capacity {
        torrents: 2,
        ..Capacity::UNLIMITED
    };
    let mut map = BitTorrentMap::new(TIMEOUT, capacity);
    let mut rng = SmallRng::seed_from_u64(1);
    // Two swarms of two: neither may give way.
    for hash in [[1; 20], [2; 20]] {
        for peer in 1..=2 {
            assert!(announce_in(&mut map, hash, v4(peer, 1), &mut rng).0.is_ok());
        }
    }
    let (third, _) = announce_in(&mut map, [3; 20], v4(1, 1), &mut rng);
    assert_eq!(third, Err(Refused::TorrentsFull));
    assert_eq!(map.torrent_count(), 2);
    let (old, sent) = announce_in(&mut map, [1; 20], v4(3, 1), &mut rng);
    assert_eq!(
        old.unwrap().counts.leechers,
        3,
        "existing swarms still grow"
    );
    assert_eq!(sent.len(), 2);
    assert_eq!(map.refusals().torrents, 1);
}

/// What a flood of fresh info hashes leaves behind (torrents with one peer that never
/// had a second) gives way, oldest first, to a new torrent in a full map; a torrent
/// that once had two peers, or is down to one, never does.
#[test]
fn a_full_map_makes_room_with_what_a_flood_of_fresh_hashes_left() {
    let capacity = Capacity {
        torrents: 4,
        ..Capacity::UNLIMITED
    };
    let mut map = BitTorrentMap::new(TIMEOUT, capacity);
    let mut rng = SmallRng::seed_from_u64(1);
    // A real swarm that is down to one peer now.
    announce_in(&mut map, [1; 20], v4(1, 1), &mut rng)
        .0
        .unwrap();
    announce_in(&mut map, [1; 20], v4(2, 1), &mut rng)
        .0
        .unwrap();
    map.announce(
        &[1; 20],
        announce(v4(2, 1), false, AnnounceEvent::Stopped),
        ServerTime(0),
        &mut rng,
        |_| {},
    )
    .unwrap();
    // The flood: three fresh hashes, one peer each.
    for n in 10..13 {
        announce_in(&mut map, [n; 20], v4(9, 1), &mut rng)
            .0
            .unwrap();
    }
    assert_eq!(map.torrent_count(), 4);
    // Honest newcomers: each takes the place of the oldest flood torrent.
    announce_in(&mut map, [20; 20], v4(3, 1), &mut rng)
        .0
        .unwrap();
    assert!(map.get(&[10; 20]).is_none(), "the oldest went");
    assert!(map.get(&[11; 20]).is_some());
    // Its second peer comes: from now on it stays, whatever comes.
    announce_in(&mut map, [20; 20], v4(4, 1), &mut rng)
        .0
        .unwrap();
    for n in 30..40 {
        let _ = announce_in(&mut map, [n; 20], v4(9, 1), &mut rng);
    }
    assert!(map.get(&[1; 20]).is_some(), "once crowded, never evicted");
    assert_eq!(map.scrape(&[20; 20]).leechers, 2);
    assert_eq!(map.torrent_count(), 4);
    assert_eq!(map.peer_count(), 1 + 2 + 2);
    // Each flood torrent gave way to the next, oldest first: the last two stay.
    assert!(map.get(&[38; 20]).is_some() && map.get(&[39; 20]).is_some());
    assert_eq!(map.refusals().evicted, 11);
    assert_eq!(map.refusals().torrents, 0);
}

#[test]
fn past_half_its_capacity_a_map_limits_the_torrents_each_client_starts() {
    let capacity = Capacity {
        torrents: 100,
        ..Capacity::UNLIMITED
    };
    let limit = NewTorrentLimit {
        per_second: 1,
        burst: 5,
        clients: 64,
        ipv4_prefix_len: 32,
        ipv6_prefix_len: 64,
        network_per_second: 0,
        network_burst: 0,
        network_ipv4_prefix_len: 24,
        network_ipv6_prefix_len: 48,
    };
    let mut map = BitTorrentMap::new(TIMEOUT, capacity).with_new_torrent_limit(limit);
    let mut rng = SmallRng::seed_from_u64(1);
    // Below half, starting costs nothing.
    for n in 0..50u8 {
        announce_in(&mut map, [n; 20], v4(1, 1), &mut rng)
            .0
            .unwrap();
    }
    // Past it, the burst, then refusals; another client has its own allowance.
    let started = (50..70u8)
        .filter(|n| {
            announce_in(&mut map, [*n; 20], v4(1, 1), &mut rng)
                .0
                .is_ok()
        })
        .count();
    assert_eq!(started, 5);
    let (refused, _) = announce_in(&mut map, [99; 20], v4(1, 2), &mut rng);
    assert_eq!(refused, Err(Refused::NewTorrentsLimited));
    assert!(
        announce_in(&mut map, [98; 20], v4(2, 1), &mut rng)
            .0
            .is_ok()
    );
    // Torrents that exist are served whatever the allowance.
    assert!(announce_in(&mut map, [3; 20], v4(1, 1), &mut rng).0.is_ok());
    assert_eq!(map.refusals().new_torrents, 16);
}

#[test]
fn the_downloads_count_saturates_below_the_crowd_bit() {
    let mut downloads = Downloads::default();
    downloads.add(u32::MAX);
    assert_eq!(downloads.count(), (1 << 31) - 1);
    assert!(downloads.crowded(), "a download makes a torrent crowded");
    downloads.add(5);
    assert_eq!(downloads.count(), (1 << 31) - 1);
    let mut raised = Downloads::default();
    raised.raise_to(7);
    raised.raise_to(3);
    assert_eq!(raised.count(), 7);
    // A client's tag is no count, and crowding starts the count at 0.
    let mut tagged = Downloads::default();
    tagged.note_client(0x7fff_ffff, true);
    assert_eq!(tagged.count(), 0);
    tagged.note_client(0x7fff_ffff, false);
    assert!(!tagged.crowded(), "the same client again");
    tagged.note_client(3, false);
    assert!(tagged.crowded());
    assert_eq!(tagged.count(), 0);
    tagged.add(2);
    assert_eq!(tagged.count(), 2);
}

/// A torrent announced from two ports of one address (or many addresses of one IPv6
/// /64) is what a flood makes to look like a swarm: it stays lone and gives way in a
/// full map; a swarm of two clients does not.
#[test]
fn a_swarm_whose_peers_come_from_one_client_gives_way() {
    let capacity = Capacity {
        torrents: 4,
        ..Capacity::UNLIMITED
    };
    let mut map = BitTorrentMap::new(TIMEOUT, capacity);
    let mut rng = SmallRng::seed_from_u64(1);
    let v6 = |last: u16, port: u16| {
        V6Addr::new(
            std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 7, 0, 0, 0, last),
            port,
        )
    };
    // The flood: each torrent with two (or five) peers of one client.
    for n in 10..12u8 {
        for port in 1..=2 {
            announce_in(&mut map, [n; 20], v4(9, port), &mut rng)
                .0
                .unwrap();
        }
    }
    for n in 12..14u8 {
        for last in 1..=5 {
            map.announce(
                &[n; 20],
                Announce {
                    key: v6(last, 6881),
                    extra: (),
                    event: AnnounceEvent::Started,
                    seeder: Some(false),
                    peers_wanted: 50,
                },
                ServerTime(0),
                &mut rng,
                |_| {},
            )
            .unwrap();
        }
    }
    assert_eq!(map.torrent_count(), 4);
    // An honest swarm of two addresses: stored, in place of the oldest flood torrent,
    // and then kept whatever comes.
    announce_in(&mut map, [20; 20], v4(3, 1), &mut rng)
        .0
        .unwrap();
    announce_in(&mut map, [20; 20], v4(4, 1), &mut rng)
        .0
        .unwrap();
    assert!(map.get(&[10; 20]).is_none());
    for n in 30..40u8 {
        for port in 1..=2 {
            let _ = announce_in(&mut map, [n; 20], v4(9, port), &mut rng);
        }
    }
    assert_eq!(map.scrape(&[20; 20]).leechers, 2);
    assert!(map.get(&[12; 20]).is_none() && map.get(&[13; 20]).is_none());
    assert_eq!(map.refusals().torrents, 0);
    // A lone client whose peer leaves, then another's alone: still one client's.
    map.announce(
        &[39; 20],
        announce(v4(9, 1), false, AnnounceEvent::Stopped),
        ServerTime(0),
        &mut rng,
        |_| {},
    )
    .unwrap();
    map.announce(
        &[39; 20],
        announce(v4(9, 2), false, AnnounceEvent::Stopped),
        ServerTime(0),
        &mut rng,
        |_| {},
    )
    .unwrap();
    announce_in(&mut map, [39; 20], v4(5, 1), &mut rng)
        .0
        .unwrap();
    assert!(map.get(&[39; 20]).unwrap().may_give_way());
}

#[test]
fn past_half_its_capacity_a_network_has_an_allowance_of_its_own() {
    let capacity = Capacity {
        torrents: 1000,
        ..Capacity::UNLIMITED
    };
    let limit = NewTorrentLimit {
        per_second: 1,
        burst: 5,
        clients: 256,
        ipv4_prefix_len: 32,
        ipv6_prefix_len: 64,
        network_per_second: 2,
        network_burst: 12,
        network_ipv4_prefix_len: 24,
        network_ipv6_prefix_len: 48,
    };
    let mut map = BitTorrentMap::new(TIMEOUT, capacity).with_new_torrent_limit(limit);
    let mut rng = SmallRng::seed_from_u64(1);
    let mut next = 0u32;
    let mut start = |map: &mut BitTorrentMap<()>, addr: V4Addr, now: u32| {
        next += 1;
        let mut hash = [0u8; 20];
        hash[..4].copy_from_slice(&next.to_le_bytes());
        map.announce(
            &hash,
            announce(addr, false, AnnounceEvent::Started),
            ServerTime(now),
            &mut rng,
            |_| {},
        )
    };
    for n in 0..500u32 {
        start(&mut map, v4((n % 200) as u8 + 1, 1), 0).unwrap();
    }
    // Ten addresses of one /24, five each allowed alone: the network's 12 in all.
    let started = (0..50u8)
        .filter(|n| start(&mut map, v4(n % 10 + 1, 1), 0).is_ok())
        .count();
    assert_eq!(started, 12);
    // A refusal by the network leaves the client's own allowance whole: another
    // network's address is still served, and a second later the first network's rate.
    let elsewhere = V4Addr::new(Ipv4Addr::new(10, 0, 1, 1), 1);
    assert!((0..5).all(|_| start(&mut map, elsewhere, 0).is_ok()));
    let later = (0..10u8)
        .filter(|n| start(&mut map, v4(n + 20, 1), 1).is_ok())
        .count();
    assert_eq!(later, 2);
    assert_eq!(map.refusals().new_torrents, 38 + 8);
}

#[test]
fn a_full_swarm_answers_newcomers_without_storing_them() {
    let capacity = Capacity {
        peers_per_torrent: 3,
        ..Capacity::UNLIMITED
    };
    let mut map = BitTorrentMap::new(TIMEOUT, capacity);
    let mut rng = SmallRng::seed_from_u64(1);
    for n in 1..=3 {
        assert!(
            announce_in(&mut map, HASH, v4(n, 1), &mut rng)
                .0
                .unwrap()
                .stored
        );
    }
    let (late, sent) = announce_in(&mut map, HASH, v4(9, 1), &mut rng);
    let late = late.unwrap();
    assert!(!late.stored && late.full);
    assert_eq!(late.counts.leechers, 3);
    assert_eq!(sent.len(), 3, "it is still sent the swarm's peers");
    // A newcomer that leaves, or listens nowhere, is not stored and not full either.
    for (peer, event) in [
        (v4(10, 1), AnnounceEvent::Stopped),
        (v4(11, 0), AnnounceEvent::Started),
    ] {
        let answered = map
            .announce(
                &HASH,
                announce(peer, false, event),
                ServerTime(0),
                &mut rng,
                |_| {},
            )
            .unwrap();
        assert!(!answered.stored && !answered.full, "{event:?}");
    }
    // Known peers re-announce as before, and one leaving makes room.
    assert!(
        announce_in(&mut map, HASH, v4(2, 1), &mut rng)
            .0
            .unwrap()
            .stored
    );
    map.announce(
        &HASH,
        announce(v4(1, 1), false, AnnounceEvent::Stopped),
        ServerTime(0),
        &mut rng,
        |_| {},
    )
    .unwrap();
    assert!(
        announce_in(&mut map, HASH, v4(9, 1), &mut rng)
            .0
            .unwrap()
            .stored
    );
    assert_eq!(map.refusals().peers, 1);
}

#[test]
fn the_peer_limit_counts_every_torrent() {
    let capacity = Capacity {
        peers: 2,
        ..Capacity::UNLIMITED
    };
    let mut map = BitTorrentMap::new(TIMEOUT, capacity);
    let mut rng = SmallRng::seed_from_u64(1);
    assert!(
        announce_in(&mut map, [1; 20], v4(1, 1), &mut rng)
            .0
            .unwrap()
            .stored
    );
    assert!(
        announce_in(&mut map, [2; 20], v4(1, 1), &mut rng)
            .0
            .unwrap()
            .stored
    );
    let (third, _) = announce_in(&mut map, [3; 20], v4(1, 1), &mut rng);
    assert!(!third.unwrap().stored);
    assert_eq!(map.peer_count(), 2);
}

#[test]
fn cleaning_steps_cover_the_map_once_per_pass() {
    let mut map = BitTorrentMap::new(TIMEOUT, Capacity::UNLIMITED);
    let mut rng = SmallRng::seed_from_u64(1);
    for i in 0..2000u32 {
        let mut hash = [0u8; 20];
        hash[..4].copy_from_slice(&i.to_le_bytes());
        announce_in(&mut map, hash, v4(1, 1), &mut rng).0.unwrap();
    }
    let late = ServerTime(TIMEOUT + 1);
    let (mut torrents, mut steps) = (0, 0);
    loop {
        let step = map.clean_step(late, |_| true);
        steps += 1;
        torrents += step.torrents_removed;
        assert!(
            step.torrents_removed < 100,
            "a step walks a small part of the map"
        );
        if step.pass_done {
            break;
        }
    }
    assert_eq!(steps, crate::PARTITIONS);
    assert_eq!(torrents, 2000);
    assert_eq!((map.torrent_count(), map.peer_count()), (0, 0));
}

#[test]
fn prefetching_changes_nothing_a_batch_sees() {
    // Two maps fed the same announces; one is asked to prefetch every step for every
    // announce first, over missing torrents, small lists, indexed lists and an
    // IPv6 list that does not exist yet.
    let mut plain = Harness::new();
    let mut prefetched = Harness::new();
    for round in 0..3u8 {
        for i in 0..(crate::peer_list::INDEX_FROM as u8 + 8) {
            let request = announce(
                v4(i, 1000 + u16::from(round)),
                i % 3 == 0,
                AnnounceEvent::None,
            );
            let (mut torrent, mut missing) = (
                prefetched.map.locate(&HASH),
                prefetched.map.locate(&[9; 20]),
            );
            for step in 0..PREFETCH_STEPS {
                let map = &prefetched.map;
                map.prefetch_announce(step, &mut torrent, &request.key);
                map.prefetch_announce(step, &mut torrent, &V6Addr([1; 18]));
                map.prefetch_announce(step, &mut missing, &v4(2, 2));
            }
            assert_eq!(plain.announce(request), prefetched.announce(request));
        }
    }
    assert!(prefetched.map.get(&[9; 20]).is_none());
    assert_eq!(plain.map.peer_count(), prefetched.map.peer_count());
}

#[test]
fn a_torrent_packs_around_its_info_hash() {
    // Every byte here is a byte per torrent: info hash, IPv4 list inline, IPv6 list
    // boxed, downloads.
    assert_eq!(size_of::<Torrent<DualStack<()>>>(), 72);
    // WebTorrent's one list keys peers by id.
    assert_eq!(size_of::<Torrent<PeerList<[u8; 20], ()>>>(), 64);
}

#[test]
fn a_peer_on_port_0_is_sent_peers_but_never_stored() {
    let mut h = Harness::new();
    // Before the torrent exists: nothing sent, and no torrent started for it.
    let (counts, peers) = h.announce(announce(v4(9, 0), false, AnnounceEvent::Started));
    assert_eq!(counts, SwarmCounts::default());
    assert!(peers.is_empty());
    assert_eq!(h.map.torrent_count(), 0, "port 0 starts no torrent");

    h.announce(announce(v4(1, 1000), true, AnnounceEvent::Started));
    h.announce(announce(v4(2, 1000), false, AnnounceEvent::Started));
    let (counts, peers) = h.announce(announce(v4(9, 0), false, AnnounceEvent::Completed));
    assert_eq!(
        counts,
        SwarmCounts {
            seeders: 1,
            leechers: 1
        },
        "not counted"
    );
    assert_eq!(peers.len(), 2, "sent the swarm's peers");
    assert!(h.map.peer(&HASH, &v4(9, 0)).is_none(), "not stored");
    assert_eq!(h.map.peer_count(), 2);
    assert_eq!(
        h.map.scrape(&HASH).downloads,
        0,
        "a completion not stored is not counted"
    );
    assert_eq!(
        h.map.refusals(),
        Refusals::default(),
        "not a refusal: nothing was full"
    );

    // A seeder on port 0 is sent leechers only, as any seeder.
    let (_, peers) = h.announce(announce(v4(9, 0), true, AnnounceEvent::None));
    assert_eq!(peers, vec![v4(2, 1000)]);

    // Nobody is ever sent it.
    let (_, peers) = h.announce(announce(v4(3, 1000), false, AnnounceEvent::Started));
    assert!(!peers.contains(&v4(9, 0)));

    // An IPv6 peer on port 0 with no IPv6 list yet: counts, no peers, no list made.
    let v6 = V6Addr::new(std::net::Ipv6Addr::LOCALHOST, 0);
    let (counts, peers) = h.announce(Announce {
        key: v6,
        extra: (),
        event: AnnounceEvent::Started,
        seeder: Some(false),
        peers_wanted: 50,
    });
    assert_eq!(counts.seeders + counts.leechers, 3);
    assert!(peers.is_empty());
    assert!(h.map.get(&HASH).unwrap().peers().v6().is_none());
}
