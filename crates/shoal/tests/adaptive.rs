//! The adaptive interval ON (the default) against the real `shoal`: a start on a
//! host busy with something else, a restart that restores peers, and an overload of
//! the UDP tracker that is deterministic (the process is stopped 90% of the time
//! while clients flood it). Every reply's interval is checked: within
//! [`announce_interval`, `interval.max`] whatever happens.

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant};

use shoal_common::testing::Process;
use support::{Announce, Protocol, loopback, start_shoal};

/// Scaled intervals: the base (`announce_interval`) and the longest, per protocol.
const BOUNDS: [(Protocol, u64, u64); 3] = [
    (Protocol::Udp, 60, 360),
    (Protocol::Http, 60, 360),
    (Protocol::Ws, 20, 100),
];

fn bounds(protocol: Protocol) -> (u64, u64) {
    BOUNDS
        .iter()
        .find(|(p, _, _)| *p == protocol)
        .map(|&(_, min, max)| (min, max))
        .unwrap()
}

/// `shoal` with scaled intervals (adaptive, as by default) and swarm snapshots in
/// `dir`; `udp_network` goes into the UDP tracker's `[network]`.
fn start(dir: &std::path::Path, udp_network: &str) -> (Process, Vec<(Protocol, SocketAddr)>) {
    std::fs::create_dir_all(dir.join("state")).unwrap();
    let mut config = String::new();
    for (protocol, min, max) in BOUNDS {
        let name = match protocol {
            Protocol::Udp => "udp",
            Protocol::Http => "http",
            Protocol::Ws => "ws",
        };
        // HTTP's `min interval` may not exceed its interval.
        let min_interval = if protocol == Protocol::Http {
            "min_announce_interval = 30\n"
        } else {
            ""
        };
        let network = if protocol == Protocol::Udp {
            udp_network
        } else {
            ""
        };
        config.push_str(&format!(
            "{}{network}\
             [{name}.protocol]\nannounce_interval = {min}\n{min_interval}\
             [{name}.interval]\nmax = {max}\n\
             [{name}.per_ip]\nrequests_per_second = 1000000\nburst = 1000000\n",
            loopback(name)
        ));
        if protocol != Protocol::Ws {
            config.push_str(&format!(
                "[{name}.state]\ndirectory = \"{}\"\n",
                dir.join("state").display()
            ));
        }
    }
    std::fs::write(dir.join("shoal.toml"), config).unwrap();
    start_shoal(&dir.join("shoal.toml"))
}

/// Announces `count` peers to every tracker, checking each reply's interval.
fn announce_all(trackers: &[(Protocol, SocketAddr)], count: u16, offset: u16) {
    for &(protocol, address) in trackers {
        let (min, max) = bounds(protocol);
        for n in 0..count {
            let mut peer_id = *b"-TR3000-000000000000";
            peer_id[14..].copy_from_slice(format!("{:06}", n + offset).as_bytes());
            let announce = Announce {
                info_hash: [1 + (n % 7) as u8; 20],
                peer_id,
                port: 10_000 + n + offset,
                left: 0,
                ..Announce::default()
            };
            let reply = protocol.announce(address, &announce);
            assert!(reply.failure.is_none(), "{protocol:?}: {reply:?}");
            assert!(
                (min..=max).contains(&reply.interval),
                "{protocol:?}: {} outside [{min}, {max}]",
                reply.interval
            );
        }
    }
}

/// Spins `threads` threads until `stop` is set: a host busy with something else.
fn hog(threads: usize, stop: &Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<()>> {
    (0..threads)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 1u64;
                while !stop.load(Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    std::hint::black_box(x);
                }
            })
        })
        .collect()
}

#[test]
fn a_busy_start_and_a_restart_with_restored_peers_keep_every_interval_in_bounds() {
    let dir = std::env::temp_dir().join(format!("shoal-adaptive-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // A start on a host whose cores are busy with something else.
    let stop = Arc::new(AtomicBool::new(false));
    let hogs = hog(3, &stop);
    let (process, trackers) = start(&dir, "");
    let until = Instant::now() + Duration::from_secs(5);
    let mut offset = 0;
    while Instant::now() < until {
        announce_all(&trackers, 20, offset);
        offset += 20;
    }
    stop.store(true, Relaxed);
    hogs.into_iter().for_each(|hog| hog.join().unwrap());
    process.stop();
    // Started again: the swarms come back from the snapshots, and clients with them.
    let (mut process, trackers) = start(&dir, "");
    process.line_with("restored");
    for round in 0..5 {
        announce_all(&trackers, 40, round * 40);
        std::thread::sleep(Duration::from_millis(400));
    }
    process.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A UDP client that floods the tracker from one socket and keeps the intervals of
/// the announce replies it reads.
fn flood(tracker: SocketAddr, index: u16, until: Instant, intervals: &mut Vec<u64>) -> u64 {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    // A connection id, retried while the tracker is stopped.
    let mut connection = None;
    let mut reply = [0u8; 2048];
    while connection.is_none() && Instant::now() < until {
        let mut connect = 0x0417_2710_1980u64.to_be_bytes().to_vec();
        connect.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 9]);
        socket.send_to(&connect, tracker).unwrap();
        if let Ok(16) = socket.recv(&mut reply) {
            connection = Some(reply[8..16].to_vec());
        }
    }
    let Some(connection) = connection else {
        return 0;
    };
    socket.set_nonblocking(true).unwrap();
    let mut sent = 0u64;
    while Instant::now() < until {
        for burst in 0..16u32 {
            let mut packet = connection.clone();
            packet.extend_from_slice(&1u32.to_be_bytes());
            packet.extend_from_slice(&burst.to_be_bytes());
            let mut hash = [0u8; 20];
            hash[..2].copy_from_slice(&index.to_be_bytes());
            hash[2..6].copy_from_slice(&(sent as u32).to_be_bytes());
            packet.extend_from_slice(&hash);
            packet.extend_from_slice(b"-TR3000-floodfloodfl");
            packet.extend_from_slice(&[0; 8]); // downloaded
            packet.extend_from_slice(&0u64.to_be_bytes()); // left: seeding
            packet.extend_from_slice(&[0; 8]); // uploaded
            packet.extend_from_slice(&2u32.to_be_bytes()); // started
            packet.extend_from_slice(&[0; 8]); // ip, key
            packet.extend_from_slice(&(-1i32).to_be_bytes());
            packet.extend_from_slice(&(1000 + index).to_be_bytes());
            let _ = socket.send_to(&packet, tracker);
            sent += 1;
        }
        while let Ok(read) = socket.recv(&mut reply) {
            if read >= 20 && reply[..4] == 1u32.to_be_bytes() {
                intervals.push(u64::from(u32::from_be_bytes(
                    reply[8..12].try_into().unwrap(),
                )));
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    sent
}

/// The UDP tracker stopped 90% of the time (SIGSTOP for 45 ms, SIGCONT for 5) while
/// 8 clients flood it: its receive queues overflow, the interval rises, and every
/// reply, before, during and after, is within the bounds.
#[test]
fn an_overloaded_tracker_raises_the_interval_within_its_bounds() {
    let dir = std::env::temp_dir().join(format!("shoal-adaptive-overload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (process, trackers) = start(
        &dir,
        "socket_recv_buffer_size = 65536\noverload_recv_buffer_size = 0\n",
    );
    let udp = trackers[0].1;
    let (min, max) = bounds(Protocol::Udp);
    let pid = process.pid() as libc::pid_t;
    let until = Instant::now() + Duration::from_secs(8);
    let signal = move |signal| {
        // SAFETY: kill takes plain integers; the pid is our own child's.
        unsafe { libc::kill(pid, signal) };
    };
    let throttle = std::thread::spawn(move || {
        while Instant::now() < until {
            signal(libc::SIGSTOP);
            std::thread::sleep(Duration::from_millis(45));
            signal(libc::SIGCONT);
            std::thread::sleep(Duration::from_millis(5));
        }
        signal(libc::SIGCONT);
    });
    let clients: Vec<_> = (0..8u16)
        .map(|index| {
            std::thread::spawn(move || {
                let mut intervals = Vec::new();
                let sent = flood(udp, index, until, &mut intervals);
                (sent, intervals)
            })
        })
        .collect();
    let mut intervals = Vec::new();
    let mut sent = 0;
    for client in clients {
        let (count, got) = client.join().unwrap();
        sent += count;
        intervals.extend(got);
    }
    throttle.join().unwrap();
    // After the surge, announces at rest: still within the bounds.
    let after: Vec<u64> = (0..50u16)
        .map(|n| {
            Protocol::Udp
                .announce(
                    udp,
                    &Announce {
                        port: 30_000 + n,
                        ..Announce::default()
                    },
                )
                .interval
        })
        .collect();
    let log = process.stop();
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "{sent} sent, {} answered, intervals {:?} to {:?}, after {:?}",
        intervals.len(),
        intervals.iter().min(),
        intervals.iter().max(),
        after.iter().max()
    );
    assert!(
        intervals.len() > 100,
        "{} answered of {sent}",
        intervals.len()
    );
    let outside: Vec<&u64> = intervals
        .iter()
        .chain(&after)
        .filter(|interval| !(min..=max).contains(*interval))
        .collect();
    assert!(
        outside.is_empty(),
        "{} replies outside [{min}, {max}], e.g. {:?}",
        outside.len(),
        &outside[..outside.len().min(20)]
    );
    // The overload was seen: the interval rose above the base's jitter.
    let highest = intervals.iter().chain(&after).max().copied().unwrap_or(0);
    assert!(highest > min * 11 / 10, "never rose: {highest} ({log:#?})");
}

/// Sends junk (datagrams no tracker protocol reads) to `tracker` from `sources`
/// (local addresses, each one socket: one 4-tuple each) until `until`; returns how
/// many were sent.
fn junk_flood(tracker: SocketAddr, sources: &[&str], until: Instant) -> u64 {
    let sockets: Vec<UdpSocket> = sources
        .iter()
        .map(|source| {
            let socket = UdpSocket::bind(source).unwrap();
            socket.set_nonblocking(true).unwrap();
            socket
        })
        .collect();
    let junk = [0x5au8; 100];
    let mut sent = 0u64;
    while Instant::now() < until {
        for socket in &sockets {
            for _ in 0..64 {
                if socket.send_to(&junk, tracker).is_ok() {
                    sent += 1;
                }
            }
        }
    }
    sent
}

/// An honest client announcing over `seconds` with its own connection: the
/// intervals of the replies it got (lost requests are retried after 200 ms).
fn honest_intervals(tracker: SocketAddr, seconds: u64, port: u16) -> Vec<u64> {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let until = Instant::now() + Duration::from_secs(seconds);
    let mut reply = [0u8; 2048];
    let mut intervals = Vec::new();
    let mut connection: Option<[u8; 8]> = None;
    let mut n = 0u32;
    while Instant::now() < until {
        n += 1;
        let Some(id) = connection else {
            let mut connect = 0x0417_2710_1980u64.to_be_bytes().to_vec();
            connect.extend_from_slice(&[0, 0, 0, 0]);
            connect.extend_from_slice(&n.to_be_bytes());
            let _ = socket.send_to(&connect, tracker);
            if let Ok(16) = socket.recv(&mut reply) {
                connection = Some(reply[8..16].try_into().unwrap());
            }
            continue;
        };
        let mut packet = id.to_vec();
        packet.extend_from_slice(&1u32.to_be_bytes());
        packet.extend_from_slice(&n.to_be_bytes());
        packet.extend_from_slice(&[0xab; 20]);
        packet.extend_from_slice(b"-TR3000-honesthonest");
        packet.extend_from_slice(&[0; 8]);
        packet.extend_from_slice(&1000u64.to_be_bytes()); // left
        packet.extend_from_slice(&[0; 8]);
        packet.extend_from_slice(&0u32.to_be_bytes());
        packet.extend_from_slice(&[0; 8]);
        packet.extend_from_slice(&(-1i32).to_be_bytes());
        packet.extend_from_slice(&port.to_be_bytes());
        let _ = socket.send_to(&packet, tracker);
        if let Ok(read) = socket.recv(&mut reply)
            && read >= 20
            && reply[..4] == 1u32.to_be_bytes()
            && reply[4..8] == n.to_be_bytes()
        {
            intervals.push(u64::from(u32::from_be_bytes(
                reply[8..12].try_into().unwrap(),
            )));
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    intervals
}

/// The attack of issue 52: with a small receive buffer that never shrinks, 5 s of
/// junk from one spoofable source moved every client from the base interval to the
/// longest (the kernel's drops were all counted as demand), and the capacity learnt
/// fell 157x. Junk from one 4-tuple (one socket worker), from one address's many
/// ports, and from many addresses: the honest client's interval stays within 10% of
/// its value during each flood and after.
#[test]
fn junk_floods_leave_the_interval_where_it_was() {
    let dir = std::env::temp_dir().join(format!("shoal-adaptive-junk-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (process, trackers) = start(
        &dir,
        "socket_recv_buffer_size = 65536\noverload_recv_buffer_size = 0\n",
    );
    let udp = trackers[0].1;
    let (min, _) = bounds(Protocol::Udp);
    // At rest: the base interval and its jitter (10%, only longer at the base).
    let highest_allowed = min * 11 / 10 * 11 / 10;
    let floods: [(&str, Vec<&str>); 3] = [
        ("one 4-tuple", vec!["127.0.0.1:0"]),
        ("one address, many ports", vec!["127.0.0.1:0"; 8]),
        (
            "many addresses",
            vec![
                "127.0.5.1:0",
                "127.0.6.1:0",
                "127.0.7.1:0",
                "127.0.8.1:0",
                "127.0.9.1:0",
                "127.0.10.1:0",
                "127.0.11.1:0",
                "127.0.12.1:0",
            ],
        ),
    ];
    for (name, sources) in floods {
        let until = Instant::now() + Duration::from_secs(5);
        let flooders: Vec<_> = sources
            .chunks(sources.len().div_ceil(2))
            .map(|chunk| {
                let chunk: Vec<String> = chunk.iter().map(|s| s.to_string()).collect();
                std::thread::spawn(move || {
                    let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
                    junk_flood(udp, &chunk, until)
                })
            })
            .collect();
        let during = honest_intervals(udp, 5, 7001);
        let sent: u64 = flooders.into_iter().map(|f| f.join().unwrap()).sum();
        let after = honest_intervals(udp, 5, 7001);
        eprintln!(
            "{name}: {sent} junk datagrams in 5 s; honest intervals during {:?}, after {:?}",
            during.iter().max(),
            after.iter().max()
        );
        assert!(
            !after.is_empty(),
            "{name}: the honest client was not answered after"
        );
        let over: Vec<&u64> = during
            .iter()
            .chain(&after)
            .filter(|&&interval| interval > highest_allowed)
            .collect();
        assert!(
            over.is_empty(),
            "{name}: {} replies over {highest_allowed}, e.g. {:?}",
            over.len(),
            &over[..over.len().min(10)]
        );
    }
    process.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
