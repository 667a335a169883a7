use rand::SeedableRng as _;
use rand::rngs::SmallRng;

use super::*;
use crate::torrents::{Announce, AnnounceEvent, Capacity};
use crate::{BitTorrentMap, PARTITIONS, PeerAddress};

const TIMEOUT: u32 = 1800;

fn hash(n: u8) -> InfoHash {
    [n; 20]
}

fn v4(n: u8) -> V4Addr {
    V4Addr::new([10, 0, 0, n].into(), 6881)
}

fn v6(n: u8) -> V6Addr {
    V6Addr::new(format!("2001:db8::{n}").parse().unwrap(), 51413)
}

fn announce<X: SnapshotData + Copy>(
    map: &mut BitTorrentMap<X>,
    info_hash: InfoHash,
    peer: PeerAddress,
    extra: X,
    event: AnnounceEvent,
    seeder: bool,
    now: ServerTime,
) {
    fn with<K, X>(key: K, extra: X, event: AnnounceEvent, seeder: bool) -> Announce<K, X> {
        Announce {
            key,
            extra,
            event,
            seeder: Some(seeder),
            peers_wanted: 0,
        }
    }
    let mut rng = SmallRng::seed_from_u64(1);
    match peer {
        PeerAddress::V4(key) => map
            .announce(
                &info_hash,
                with(key, extra, event, seeder),
                now,
                &mut rng,
                |_| {},
            )
            .unwrap(),
        PeerAddress::V6(key) => map
            .announce(
                &info_hash,
                with(key, extra, event, seeder),
                now,
                &mut rng,
                |_| {},
            )
            .unwrap(),
    };
}

fn snapshot<X: SnapshotData>(map: &BitTorrentMap<X>, now: ServerTime) -> Vec<u8> {
    let mut bytes = Vec::new();
    for part in 0..PARTITIONS {
        map.write_partition(part, now, &mut bytes);
    }
    bytes
}

/// Two torrents: one with an IPv4 leecher, an IPv4 seeder that completed, and an IPv6
/// peer; one with a single IPv4 peer that announces later.
fn sample_map(now: ServerTime) -> BitTorrentMap<()> {
    let mut map = BitTorrentMap::new(TIMEOUT, Capacity::UNLIMITED);
    let none = AnnounceEvent::None;
    announce(
        &mut map,
        hash(1),
        PeerAddress::V4(v4(1)),
        (),
        none,
        false,
        now,
    );
    announce(
        &mut map,
        hash(1),
        PeerAddress::V4(v4(2)),
        (),
        none,
        false,
        now,
    );
    let completed = AnnounceEvent::Completed;
    announce(
        &mut map,
        hash(1),
        PeerAddress::V4(v4(2)),
        (),
        completed,
        true,
        now,
    );
    announce(
        &mut map,
        hash(1),
        PeerAddress::V6(v6(3)),
        (),
        none,
        true,
        now,
    );
    let later = now.plus(600);
    announce(
        &mut map,
        hash(2),
        PeerAddress::V4(v4(4)),
        (),
        none,
        false,
        later,
    );
    map
}

#[test]
fn a_map_comes_back_with_its_peers_seeders_downloads_and_time_left() {
    let written_at = ServerTime(100);
    let map = sample_map(written_at);
    let now = written_at.plus(600);
    let bytes = snapshot(&map, now);

    // A new process whose clock started elsewhere, 30 s of wall-clock time later.
    let restart = ServerTime(5);
    let mut restored_map = BitTorrentMap::<()>::new(TIMEOUT, Capacity::UNLIMITED);
    let restored = restored_map.restore(&bytes, 30, restart, |_| true).unwrap();
    assert_eq!(
        restored,
        Restored {
            torrents: 2,
            peers: 4,
            peers_expired: 0,
            over_capacity: 0
        }
    );
    assert_eq!(
        (restored_map.torrent_count(), restored_map.peer_count()),
        (2, 4)
    );
    for info_hash in [hash(1), hash(2)] {
        assert_eq!(restored_map.scrape(&info_hash), map.scrape(&info_hash));
    }
    assert_eq!(restored_map.scrape(&hash(1)).downloads, 1);
    // Time left carries over, less the 30 s the tracker was down.
    let left_then = map.peer(&hash(1), &v4(1)).unwrap().expires().0 - now.0;
    let expires = restored_map.peer(&hash(1), &v4(1)).unwrap().expires();
    assert_eq!(expires, restart.plus(left_then - 30));
    let later_peer = restored_map.peer(&hash(2), &v4(4)).unwrap().expires();
    assert_eq!(later_peer, restart.plus(TIMEOUT - 30));
    assert!(restored_map.peer(&hash(1), &v6(3)).is_some());
    // Written again, the restored map gives the same records (times shifted alike).
    let again = snapshot(&restored_map, restart);
    let mut twice = BitTorrentMap::<()>::new(TIMEOUT, Capacity::UNLIMITED);
    twice.restore(&again, 30, ServerTime(0), |_| true).unwrap();
    assert_eq!(twice.scrape(&hash(1)), map.scrape(&hash(1)));
}

#[test]
fn peers_whose_time_ran_out_while_down_are_dropped_and_counts_stay() {
    let now = ServerTime(1000);
    let map = sample_map(now);
    let bytes = snapshot(&map, now.plus(600));
    // Down long enough for the first torrent's peers (announced 600 s before the
    // snapshot) to expire, but not the second's.
    let mut restored_map = BitTorrentMap::<()>::new(TIMEOUT, Capacity::UNLIMITED);
    let restored = restored_map
        .restore(&bytes, TIMEOUT - 600, ServerTime(0), |_| true)
        .unwrap();
    assert_eq!(restored.peers, 1);
    assert_eq!(restored.peers_expired, 3);
    // The first torrent stays for its download count; the second keeps its peer.
    assert_eq!(restored_map.scrape(&hash(1)).downloads, 1);
    assert_eq!(restored_map.scrape(&hash(1)).seeders, 0);
    assert_eq!(restored_map.scrape(&hash(2)).leechers, 1);
    // Nothing left at all: nothing restored.
    let mut empty = BitTorrentMap::<()>::new(TIMEOUT, Capacity::UNLIMITED);
    let restored = empty
        .restore(&bytes, TIMEOUT, ServerTime(0), |_| true)
        .unwrap();
    assert_eq!((restored.torrents, empty.torrent_count()), (1, 1));
    assert_eq!(empty.peer_count(), 0);
}

#[test]
fn records_split_over_any_number_of_maps() {
    let now = ServerTime(10);
    let mut map = BitTorrentMap::<()>::new(TIMEOUT, Capacity::UNLIMITED);
    for n in 0..50u8 {
        for p in 0..3 {
            announce(
                &mut map,
                hash(n),
                PeerAddress::V4(v4(p)),
                (),
                AnnounceEvent::None,
                p == 0,
                now,
            );
        }
    }
    let bytes = snapshot(&map, now);
    let shards = 3;
    let mut maps: Vec<BitTorrentMap<()>> = (0..shards)
        .map(|_| BitTorrentMap::new(TIMEOUT, Capacity::UNLIMITED))
        .collect();
    for (index, shard) in maps.iter_mut().enumerate() {
        shard
            .restore(&bytes, 0, now, |info_hash| {
                usize::from(info_hash[0]) % shards == index
            })
            .unwrap();
    }
    assert_eq!(maps.iter().map(|m| m.torrent_count()).sum::<usize>(), 50);
    assert_eq!(maps.iter().map(|m| m.peer_count()).sum::<usize>(), 150);
    assert_eq!(maps[1].scrape(&hash(4)).seeders, 1);
    assert_eq!(maps[1].scrape(&hash(4)).leechers, 2);
}

#[test]
fn cut_or_damaged_records_are_refused_not_misread() {
    let now = ServerTime(10);
    let bytes = snapshot(&sample_map(now), now);
    // Where the first of the two records ends.
    let mut records = Records::<()>::new(&bytes);
    records.next().unwrap().unwrap();
    let boundary = records.at;
    for cut in 1..bytes.len() {
        let mut map = BitTorrentMap::<()>::new(TIMEOUT, Capacity::UNLIMITED);
        match map.restore(&bytes[..cut], 0, now, |_| true) {
            Ok(_) => assert_eq!(cut, boundary, "a cut at {cut} read as whole"),
            Err(RecordError::Truncated { .. }) => assert_ne!(cut, boundary),
            Err(other) => panic!("a cut at {cut} gave {other}"),
        }
    }
    // A peer count far beyond the bytes is a truncation, not an allocation.
    let mut huge = bytes.clone();
    huge[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut map = BitTorrentMap::<()>::new(TIMEOUT, Capacity::UNLIMITED);
    assert_eq!(
        map.restore(&huge, 0, now, |_| true),
        Err(RecordError::Truncated { at: 0 })
    );
    // A seeder flag that is neither 0 nor 1.
    let mut flag = bytes.clone();
    flag[HEAD + V4_KEY + 4] = 7;
    assert_eq!(
        map.restore(&flag, 0, now, |_| true),
        Err(RecordError::BadSeederFlag {
            at: HEAD + V4_KEY + 4
        })
    );
}

#[test]
fn peer_ids_come_back_with_http_peers() {
    let now = ServerTime(10);
    let mut map = BitTorrentMap::<[u8; 20]>::new(TIMEOUT, Capacity::UNLIMITED);
    let id = *b"-TEST00-abcdefghijkl";
    announce(
        &mut map,
        hash(9),
        PeerAddress::V6(v6(1)),
        id,
        AnnounceEvent::Started,
        false,
        now,
    );
    let bytes = snapshot(&map, now);
    assert_eq!(bytes.len(), HEAD + peer_width::<[u8; 20]>(V6_KEY));
    let mut restored = BitTorrentMap::<[u8; 20]>::new(TIMEOUT, Capacity::UNLIMITED);
    restored.restore(&bytes, 0, now, |_| true).unwrap();
    assert_eq!(restored.peer(&hash(9), &v6(1)).unwrap().extra, id);
}

#[test]
fn capacity_limits_hold_while_restoring() {
    let now = ServerTime(10);
    let bytes = snapshot(&sample_map(now), now);
    // Four peers over two torrents into room for two peers, in whatever order the
    // records come.
    let capacity = Capacity {
        torrents: 2,
        peers: 2,
        peers_per_torrent: 10,
    };
    let mut map = BitTorrentMap::<()>::new(TIMEOUT, capacity);
    let restored = map.restore(&bytes, 0, now, |_| true).unwrap();
    assert_eq!((map.torrent_count(), map.peer_count()), (2, 2));
    assert_eq!((restored.peers, restored.over_capacity), (2, 2));
    // Room for one torrent: the other's peers are dropped and counted.
    let capacity = Capacity {
        torrents: 1,
        ..Capacity::UNLIMITED
    };
    let mut map = BitTorrentMap::<()>::new(TIMEOUT, capacity);
    let restored = map.restore(&bytes, 0, now, |_| true).unwrap();
    assert_eq!(map.torrent_count(), 1);
    assert_eq!(restored.peers + restored.over_capacity, 4);
    assert_eq!(map.peer_count(), restored.peers);
}

/// `bytes` with every `from` replaced by `to` (addresses in their wire form).
fn replaced(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let mut at = 0;
    while let Some(found) = out[at..].windows(from.len()).position(|w| w == from) {
        out[at + found..at + found + to.len()].copy_from_slice(to);
        at += found + to.len();
    }
    out
}

#[test]
fn peers_on_port_zero_from_older_records_are_not_restored() {
    let now = ServerTime(100);
    let bytes = snapshot(&sample_map(now), now);
    // As an older tracker wrote them: 10.0.0.1 and 2001:db8::3 announced port 0.
    let zero_v4 = V4Addr::new([10, 0, 0, 1].into(), 0);
    let zero_v6 = V6Addr::new("2001:db8::3".parse().unwrap(), 0);
    let bytes = replaced(&bytes, &v4(1).0, &zero_v4.0);
    let bytes = replaced(&bytes, &v6(3).0, &zero_v6.0);
    let mut map = BitTorrentMap::<()>::new(TIMEOUT, Capacity::UNLIMITED);
    let restored = map.restore(&bytes, 0, now, |_| true).unwrap();
    assert_eq!((restored.torrents, restored.peers), (2, 2));
    assert_eq!(map.peer_count(), 2);
    assert!(map.peer(&hash(1), &zero_v4).is_none());
    assert!(map.peer(&hash(1), &zero_v6).is_none());
    assert!(map.peer(&hash(1), &v4(2)).is_some(), "the others come back");
}

#[test]
fn a_record_cannot_make_a_peer_outlive_the_maps_timeout() {
    let now = ServerTime(10);
    let mut bytes = snapshot(&sample_map(now), now);
    // The first peer's seconds left, raised to the most a u32 holds.
    let left = HEAD + V4_KEY;
    bytes[left..left + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut map = BitTorrentMap::<()>::new(TIMEOUT, Capacity::UNLIMITED);
    map.restore(&bytes, 0, now, |_| true).unwrap();
    // Cleaning at the timeout's end leaves no peer of the first torrent.
    map.clean(now.plus(TIMEOUT + 1), |_| true);
    let left = map.scrape(&hash(1));
    assert_eq!(left.leechers + left.seeders, 0, "{left:?}");
}

#[test]
fn records_are_checked_whole_before_use() {
    let now = ServerTime(10);
    let bytes = snapshot(&sample_map(now), now);
    assert_eq!(check_records::<()>(&bytes), Ok(2));
    assert_eq!(check_records::<()>(&[]), Ok(0));
    assert!(check_records::<()>(&bytes[..bytes.len() - 1]).is_err());
    // Records of UDP peers are not records of HTTP peers (20 more bytes each).
    assert!(check_records::<[u8; 20]>(&bytes).is_err());
}
