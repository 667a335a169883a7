//! Any bytes as another node's changes (or a snapshot's records): applying them never
//! panics, keeps the capacity limits, and leaves the map's counts true.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_swarm::{BitTorrentMap, Capacity, ServerTime};

fuzz_target!(|data: &[u8]| {
    let Some((&elapsed, records)) = data.split_first() else {
        return;
    };
    let capacity = Capacity {
        torrents: 8,
        peers: 64,
        peers_per_torrent: 16,
    };
    let mut with_ids = BitTorrentMap::<[u8; 20]>::new(3600, capacity);
    let _ = with_ids.apply_changes(records, u32::from(elapsed), ServerTime(5), |_| true);
    check(&with_ids, capacity);
    let mut without = BitTorrentMap::<()>::new(3600, capacity);
    let _ = without.apply_changes(records, u32::from(elapsed), ServerTime(5), |_| true);
    check(&without, capacity);
});

fn check<X: shoal_swarm::PeerData>(map: &BitTorrentMap<X>, capacity: Capacity) {
    assert!(map.torrent_count() <= capacity.torrents);
    assert!(map.peer_count() <= capacity.peers);
    let counted: usize = map
        .scrape_all()
        .iter()
        .map(|(_, stats)| (stats.seeders + stats.leechers) as usize)
        .sum();
    assert_eq!(counted, map.peer_count());
}
