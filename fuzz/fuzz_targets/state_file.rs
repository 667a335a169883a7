//! Any bytes as a state file, and any header fields around any records under a valid
//! checksum: reading never panics, and what is accepted restores without an error
//! (every field was range-checked before use), its time and age are real times, and
//! no restored peer outlives the map's timeout.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_common::StateKind;
use shoal_swarm::{BitTorrentMap, Capacity, ServerTime, SnapshotData};
use shoal_worker::{Snapshot, write_snapshot};

const TIMEOUT: u32 = 3600;

fuzz_target!(|data: &[u8]| {
    // The bytes as a whole file.
    for kind in [StateKind::Udp, StateKind::Http] {
        if let Ok(snapshot) = Snapshot::decode(data, kind) {
            use_it(&snapshot);
        }
    }
    // The bytes as a written_at, an extras length and records, wrapped in a header
    // with the right checksum, which random bytes would almost never have.
    let Some((head, rest)) = data.split_first_chunk::<9>() else {
        return;
    };
    let written_at = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    let extras_len = usize::from(head[8]).min(rest.len());
    let (extras, records) = rest.split_at(extras_len);
    for kind in [StateKind::Udp, StateKind::Http] {
        let mut file = Vec::new();
        write_snapshot(&mut file, kind, written_at, extras, &[records]).expect("into a Vec");
        if let Ok(snapshot) = Snapshot::decode(&file, kind) {
            assert_eq!(snapshot.records, records);
            use_it(&snapshot);
        }
    }
});

fn use_it(snapshot: &Snapshot) {
    let now = std::time::SystemTime::now();
    let _ = snapshot.taken();
    let age = snapshot.age(now);
    match snapshot.kind {
        StateKind::Udp => restore::<()>(snapshot, age),
        StateKind::Http => restore::<[u8; 20]>(snapshot, age),
    }
}

fn restore<X: SnapshotData>(snapshot: &Snapshot, age: u32) {
    let capacity = Capacity {
        torrents: 16,
        peers: 64,
        peers_per_torrent: 16,
    };
    let mut map = BitTorrentMap::<X>::new(TIMEOUT, capacity);
    let start = ServerTime(10);
    let restored = map
        .restore(&snapshot.records, age, start, |_| true)
        .expect("accepted records restore");
    assert!(restored.peers <= capacity.peers);
    assert!(map.torrent_count() <= capacity.torrents);
    map.clean(start.plus(TIMEOUT + 1), |_| true);
    assert_eq!(map.peer_count(), 0, "a peer outlived the timeout");
}
