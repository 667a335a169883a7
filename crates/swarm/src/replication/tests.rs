use super::*;
use crate::torrents::Capacity;
use crate::{BitTorrentMap, V4Addr, V6Addr};

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

fn all(_: &InfoHash) -> bool {
    true
}

fn map() -> BitTorrentMap<[u8; 20]> {
    BitTorrentMap::new(TIMEOUT, Capacity::UNLIMITED)
}

#[test]
fn a_change_adds_the_peer_with_its_time_left_and_its_data() {
    let mut log = ChangeLog::default();
    log.record(&hash(1), &v4(1), 600, true, &[7; 20], 1);
    log.record(&hash(1), &v6(2), 600, false, &[8; 20], 0);
    assert_eq!(log.changes(), 2);
    let mut map = map();
    let now = ServerTime(50);
    let done = map.apply_changes(&log.take(), 100, now, all).unwrap();
    assert!(log.is_empty());
    assert_eq!(done.peers_added, 2);
    assert_eq!(done.downloads, 1);
    assert_eq!(map.peer_count(), 2);
    let stats = map.scrape(&hash(1));
    assert_eq!((stats.seeders, stats.leechers, stats.downloads), (1, 1, 1));
    let peer = map.peer(&hash(1), &v4(1)).unwrap();
    assert_eq!(
        peer.expires(),
        ServerTime(550),
        "600 s left, written 100 s ago"
    );
    assert_eq!(peer.extra, [7; 20]);
    assert_eq!(map.peer(&hash(1), &v6(2)).unwrap().extra, [8; 20]);
}

#[test]
fn a_refresh_keeps_the_later_expiry_and_takes_the_seeder_state() {
    let mut map = map();
    let mut log = ChangeLog::default();
    log.record(&hash(1), &v4(1), 900, false, &[1; 20], 0);
    map.apply_changes(&log.take(), 0, ServerTime(0), all)
        .unwrap();
    // An older change arriving late cannot shorten the peer's life.
    log.record(&hash(1), &v4(1), 300, true, &[2; 20], 0);
    let done = map
        .apply_changes(&log.take(), 0, ServerTime(10), all)
        .unwrap();
    assert_eq!(done.peers_refreshed, 1);
    assert_eq!(map.peer_count(), 1);
    let peer = map.peer(&hash(1), &v4(1)).unwrap();
    assert_eq!(peer.expires(), ServerTime(900));
    assert_eq!(peer.extra, [2; 20]);
    assert_eq!(map.scrape(&hash(1)).seeders, 1);
    // A later one lengthens it.
    log.record(&hash(1), &v4(1), 1800, true, &[2; 20], 0);
    map.apply_changes(&log.take(), 0, ServerTime(20), all)
        .unwrap();
    assert_eq!(
        map.peer(&hash(1), &v4(1)).unwrap().expires(),
        ServerTime(1820)
    );
}

#[test]
fn a_change_with_no_time_left_removes_the_peer() {
    let mut map = map();
    let mut log = ChangeLog::default();
    log.record(&hash(1), &v4(1), 900, false, &[1; 20], 0);
    log.record(&hash(1), &v4(2), 900, false, &[1; 20], 0);
    log.record(&hash(1), &v4(1), 0, false, &[1; 20], 0);
    let done = map
        .apply_changes(&log.take(), 0, ServerTime(0), all)
        .unwrap();
    assert_eq!((done.peers_added, done.peers_removed), (2, 1));
    assert_eq!(map.peer_count(), 1);
    assert!(map.peer(&hash(1), &v4(1)).is_none());
    // Leaving a torrent this map never had creates nothing.
    log.record(&hash(9), &v4(1), 0, false, &[1; 20], 0);
    let done = map
        .apply_changes(&log.take(), 0, ServerTime(0), all)
        .unwrap();
    assert_eq!(done, Replicated::default());
    assert!(map.get(&hash(9)).is_none());
}

#[test]
fn downloads_add_up_and_expired_changes_add_no_peer() {
    let mut map = map();
    let mut log = ChangeLog::default();
    log.record(&hash(1), &v4(1), 60, true, &[1; 20], 1);
    log.record(&hash(2), &v4(2), 60, false, &[1; 20], 0);
    // Written 61 s ago: both peers expired on the way, the download still counts.
    let done = map
        .apply_changes(&log.take(), 61, ServerTime(0), all)
        .unwrap();
    assert_eq!((done.peers_added, done.peers_expired), (0, 2));
    assert_eq!(done.downloads, 1);
    assert_eq!(map.scrape(&hash(1)).downloads, 1);
    assert!(map.get(&hash(2)).is_none(), "nothing worth a torrent");
    log.record(&hash(1), &v4(3), 60, true, &[1; 20], 1);
    map.apply_changes(&log.take(), 0, ServerTime(0), all)
        .unwrap();
    assert_eq!(map.scrape(&hash(1)).downloads, 2);
}

#[test]
fn only_the_torrents_mine_accepts_are_applied() {
    let mut map = map();
    let mut log = ChangeLog::default();
    log.record(&hash(1), &v4(1), 60, false, &[1; 20], 0);
    log.record(&hash(2), &v4(1), 60, false, &[1; 20], 0);
    map.apply_changes(&log.take(), 0, ServerTime(0), |info_hash| {
        info_hash == &hash(2)
    })
    .unwrap();
    assert!(map.get(&hash(1)).is_none());
    assert_eq!(map.peer_count(), 1);
}

#[test]
fn the_capacity_limits_hold() {
    let capacity = Capacity {
        torrents: 1,
        peers: 2,
        peers_per_torrent: 2,
    };
    let mut map = BitTorrentMap::<[u8; 20]>::new(TIMEOUT, capacity);
    let mut log = ChangeLog::default();
    for n in 1..=3 {
        log.record(&hash(1), &v4(n), 60, false, &[1; 20], 0);
    }
    log.record(&hash(2), &v4(1), 60, false, &[1; 20], 0);
    let done = map
        .apply_changes(&log.take(), 0, ServerTime(0), all)
        .unwrap();
    assert_eq!((done.peers_added, done.over_capacity), (2, 2));
    assert_eq!(map.peer_count(), 2);
    assert_eq!(map.torrent_count(), 1);
}

#[test]
fn damaged_bytes_stop_at_the_damage_after_applying_what_came_before() {
    let mut log = ChangeLog::default();
    log.record(&hash(1), &v4(1), 60, false, &[1; 20], 0);
    let whole = log.len();
    log.record(&hash(2), &v4(2), 60, false, &[1; 20], 0);
    let mut bytes = log.take();
    bytes.truncate(bytes.len() - 1);
    let mut map = map();
    let error = map
        .apply_changes(&bytes, 0, ServerTime(0), all)
        .unwrap_err();
    assert_eq!(error, RecordError::Truncated { at: whole });
    assert_eq!(map.peer_count(), 1);
    // A seeder flag that is not 0 or 1.
    log.record(&hash(3), &v4(3), 60, true, &[1; 20], 0);
    let mut bytes = log.take();
    bytes[HEAD_AND_V4_KEY + 4] = 7;
    assert!(matches!(
        map.apply_changes(&bytes, 0, ServerTime(0), all),
        Err(RecordError::BadSeederFlag { .. })
    ));
}

/// Where a one-IPv4-peer change's time left starts.
const HEAD_AND_V4_KEY: usize = crate::snapshot::HEAD + 6;

#[test]
fn a_snapshot_record_applies_as_changes() {
    // The same bytes the state file holds: what a node would publish to catch up.
    let mut source = BitTorrentMap::<()>::new(TIMEOUT, Capacity::UNLIMITED);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
    for n in 1..=3 {
        let announce = crate::Announce {
            key: v4(n),
            extra: (),
            event: crate::AnnounceEvent::None,
            seeder: Some(n == 1),
            peers_wanted: 0,
        };
        source
            .announce(&hash(1), announce, ServerTime(0), &mut rng, |_| {})
            .unwrap();
    }
    let mut bytes = Vec::new();
    for part in 0..crate::PARTITIONS {
        source.write_partition(part, ServerTime(0), &mut bytes);
    }
    let mut copy = BitTorrentMap::<()>::new(TIMEOUT, Capacity::UNLIMITED);
    let done = copy.apply_changes(&bytes, 0, ServerTime(0), all).unwrap();
    assert_eq!(done.peers_added, 3);
    assert_eq!(copy.scrape(&hash(1)), source.scrape(&hash(1)));
}

use rand::SeedableRng as _;

#[test]
fn a_change_from_an_older_node_adds_no_peer_on_port_zero() {
    let zero_v4 = V4Addr::new([10, 0, 0, 1].into(), 0);
    let zero_v6 = V6Addr::new("2001:db8::2".parse().unwrap(), 0);
    let mut log = ChangeLog::default();
    // `record` writes what it is given, as a node from before the rule did.
    log.record(&hash(1), &zero_v4, 600, true, &[7; 20], 0);
    log.record(&hash(1), &zero_v6, 600, false, &[8; 20], 0);
    log.record(&hash(2), &zero_v4, 600, false, &[7; 20], 0);
    log.record(&hash(2), &v4(3), 600, false, &[9; 20], 0);
    let mut map = map();
    let done = map
        .apply_changes(&log.take(), 0, ServerTime(0), all)
        .unwrap();
    assert_eq!(done.peers_added, 1);
    assert_eq!(map.peer_count(), 1);
    assert_eq!(map.torrent_count(), 1, "no torrent for port-0 peers alone");
    assert!(map.peer(&hash(2), &zero_v4).is_none());
    assert!(map.peer(&hash(2), &v4(3)).is_some());
}

#[test]
fn a_relay_log_keeps_one_buffer_per_node_in_order() {
    let mut log = RelayLog::default();
    assert!(log.is_empty());
    log.record(7, |out| out.extend_from_slice(b"a"));
    log.record(9, |out| out.extend_from_slice(b"b"));
    log.record(7, |out| out.extend_from_slice(b"c"));
    let taken = log.take();
    assert!(log.is_empty());
    assert_eq!(taken.len(), 2);
    assert_eq!(
        (taken[0].node, &taken[0].bytes[..], taken[0].count),
        (7, &b"ac"[..], 2)
    );
    assert_eq!(
        (taken[1].node, &taken[1].bytes[..], taken[1].count),
        (9, &b"b"[..], 1)
    );
}
