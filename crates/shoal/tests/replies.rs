//! What clients are told, over each protocol of the `shoal` binary with its default
//! settings: a leaving or unreachable peer is not "full", a peer a full swarm could
//! not store is, and is counted.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use shoal_common::testing::Process;
use support::{Announce, Protocol, Reply, get, loopback, start_shoal};

/// `shoal` on loopback with `extra` config (defaults otherwise), metrics on.
fn start(
    name: &str,
    extra: &str,
) -> (
    Process,
    Vec<(Protocol, SocketAddr)>,
    SocketAddr,
    std::path::PathBuf,
) {
    let dir = std::env::temp_dir().join(format!("shoal-replies-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = format!(
        "[metrics]\nenabled = true\naddress = \"127.0.0.1:0\"\n{}{}{}{extra}",
        loopback("udp"),
        loopback("http"),
        loopback("ws")
    );
    std::fs::write(dir.join("shoal.toml"), config).unwrap();
    let (mut process, trackers) = start_shoal(&dir.join("shoal.toml"));
    let metrics = process.address_after("health on http://");
    (process, trackers, metrics, dir)
}

/// The announce interval a protocol is configured with by default.
fn configured(protocol: Protocol) -> u64 {
    match protocol {
        Protocol::Udp | Protocol::Http => 1800,
        Protocol::Ws => 120,
    }
}

/// Whether `reply` is an ordinary one: served, no warning, the configured interval
/// (jitter of 10% at most) and not the longest.
fn ordinary(protocol: Protocol, reply: &Reply) -> bool {
    let interval = configured(protocol);
    reply.failure.is_none()
        && reply.warning.is_none()
        && reply.interval >= interval * 9 / 10
        && reply.interval <= interval * 11 / 10
}

fn metric(address: SocketAddr, series: &str) -> f64 {
    get(address, "/metrics")
        .lines()
        .filter(|line| line.starts_with(series))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Transmission 3.00 adds a torrent with `stopped` then `started`: neither is told
/// the tracker is full, over any protocol; nor is an announce from port 0.
#[test]
fn a_leaving_peer_is_not_told_the_tracker_is_full() {
    let (process, trackers, metrics, dir) = start("leaving", "");
    for &(protocol, address) in &trackers {
        let mut announce = Announce {
            info_hash: [protocol as u8 + 1; 20],
            event: "stopped",
            ..Announce::default()
        };
        let stopped = protocol.announce(address, &announce);
        assert!(
            ordinary(protocol, &stopped),
            "{protocol:?} stopped: {stopped:?}"
        );
        announce.event = "started";
        let started = protocol.announce(address, &announce);
        assert!(
            ordinary(protocol, &started),
            "{protocol:?} started: {started:?}"
        );
        announce.event = "stopped";
        let stopped = protocol.announce(address, &announce);
        assert!(
            ordinary(protocol, &stopped),
            "{protocol:?} left: {stopped:?}"
        );
        if protocol != Protocol::Ws {
            // Listening nowhere: sent peers, not stored, and not full either.
            let unreachable = Announce {
                port: 0,
                event: "",
                ..announce
            };
            let reply = protocol.announce(address, &unreachable);
            assert!(ordinary(protocol, &reply), "{protocol:?} port 0: {reply:?}");
        }
    }
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        metric(
            metrics,
            "shoal_refused_total{protocol=\"udp\",reason=\"peer_limit\"}"
        ) + metric(
            metrics,
            "shoal_refused_total{protocol=\"http\",reason=\"peer_limit\"}"
        ) + metric(
            metrics,
            "shoal_refused_total{protocol=\"ws\",reason=\"peer_limit\"}"
        ),
        0.0
    );
    process.stop();
    let _ = std::fs::remove_dir_all(dir);
}

/// A swarm at `capacity.max_peers_per_torrent`: a new peer is sent peers, told to
/// come back after the longest interval (HTTP also warns), and counted; a peer
/// already stored, and one leaving, are answered as usual.
#[test]
fn a_peer_a_full_swarm_cannot_store_is_told_and_counted() {
    let capacity = "[udp.capacity]\nmax_peers_per_torrent = 1\n\
                    [http.capacity]\nmax_peers_per_torrent = 1\n\
                    [ws.capacity]\nmax_peers_per_torrent = 1\n";
    let (process, trackers, metrics, dir) = start("full", capacity);
    for &(protocol, address) in &trackers {
        let first = Announce {
            info_hash: [0x10 + protocol as u8; 20],
            peer_id: *b"-TR3000-firstfirstfi",
            port: 6001,
            event: "started",
            ..Announce::default()
        };
        // A WebTorrent peer lives as long as its connection: kept open.
        let mut kept =
            (protocol == Protocol::Ws).then(|| support::WsConnection::open(address, None).unwrap());
        let reply = match &mut kept {
            Some(connection) => connection.announce(&first),
            None => protocol.announce(address, &first),
        };
        assert!(ordinary(protocol, &reply), "{protocol:?}: {reply:?}");
        let second = Announce {
            peer_id: *b"-TR3000-secondsecond",
            port: 6002,
            ..first
        };
        let full = protocol.announce(address, &second);
        assert!(full.failure.is_none(), "{protocol:?}: {full:?}");
        assert!(
            full.interval > configured(protocol) * 2,
            "{protocol:?} full: {full:?}"
        );
        if protocol == Protocol::Http {
            assert!(
                full.warning
                    .as_deref()
                    .is_some_and(|w| w.contains("tracker full")),
                "{full:?}"
            );
        }
        // The one stored, again, and leaving: as usual.
        let again = Announce { event: "", ..first };
        let reply = match &mut kept {
            Some(connection) => connection.announce(&again),
            None => protocol.announce(address, &again),
        };
        assert!(ordinary(protocol, &reply), "{protocol:?}: {reply:?}");
        let leaving = Announce {
            event: "stopped",
            ..second
        };
        assert!(ordinary(protocol, &protocol.announce(address, &leaving)));
    }
    let counted = || {
        ["udp", "http", "ws"]
            .iter()
            .map(|tracker| {
                metric(
                    metrics,
                    &format!("shoal_refused_total{{protocol=\"{tracker}\",reason=\"peer_limit\"}}"),
                )
            })
            .collect::<Vec<f64>>()
    };
    assert!(
        shoal_common::testing::eventually(|| counted() == [1.0, 1.0, 1.0]),
        "{:?}",
        counted()
    );
    process.stop();
    let _ = std::fs::remove_dir_all(dir);
}
