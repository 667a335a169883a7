//! Attacks on a running HTTP tracker, each with the defence it must meet: a flood of
//! fresh info hashes, one address over its request rate, connections opened without
//! end, one address taking every connection, every slot held by idle connections, a forged proxy header from a direct connection, and a request dripped
//! a byte at a time.

mod support;

use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use shoal_common::testing::eventually;
use shoal_http::RunningTracker;
use support::*;

fn start(config: shoal_http::Config) -> RunningTracker {
    shoal_http::start(config).expect("tracker starts")
}

fn v4(tracker: &RunningTracker) -> SocketAddr {
    shoal_common::testing::ipv4(tracker.local_addrs())
}

fn unlimited() -> shoal_http::Config {
    let mut config = loopback_config(false);
    config.per_ip.requests_per_second = 0;
    config
}

fn hash(n: u32) -> [u8; 20] {
    let mut hash = [0x30; 20];
    hash[..4].copy_from_slice(&n.to_be_bytes());
    hash
}

/// A connection from the loopback address `local` (another client for the limits).
fn open_from(local: &str, server: SocketAddr) -> Connection<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("{local}:0").parse().unwrap();
    socket.bind(&local.into()).unwrap();
    socket.connect(&server.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    Connection::over(stream)
}

/// A fresh-hash flood fills the tracker and no further: what it leaves behind gives
/// way to an honest swarm, its client runs out of allowance once the tracker is half
/// full, and only a tracker full of real swarms refuses a new torrent.
#[test]
fn a_flood_of_fresh_info_hashes_gives_way_and_real_swarms_do_not() {
    let mut config = unlimited();
    config.capacity.max_torrents = 20;
    config.capacity.new_torrents_burst = 15;
    let tracker = start(config);
    let server = v4(&tracker);
    let mut flooder = open_from("127.0.21.1", server);
    // 10 free (below half), then the burst of 15: the rest is refused.
    let mut refused = 0;
    for n in 0..40 {
        let response = flooder.get(&announce(&hash(n), 1, ""));
        if failure_or_empty(&response) == "too many new torrents from your address, try again later"
        {
            refused += 1;
        }
    }
    assert_eq!(refused, 15);
    assert!(eventually(|| {
        let stats = tracker.stats();
        stats.torrents == 20 && stats.torrents_evicted == 5 && stats.new_torrents_refused == 15
    }));
    // An honest swarm starts in the full tracker, and stays.
    let mut first = open_from("127.0.21.2", server);
    assert_eq!(
        int(&first.get(&announce(&hash(100), 7001, "")), "incomplete"),
        1
    );
    let mut second = open_from("127.0.21.3", server);
    let joined = second.get(&announce(&hash(100), 7002, ""));
    assert_eq!(int(&joined, "incomplete"), 2);
    // Every torrent a real swarm: a new one is refused.
    let mut crowd = open_from("127.0.21.4", server);
    for n in 20..40 {
        crowd.get(&announce(&hash(n), 9, ""));
    }
    let refused = crowd.get(&announce(&hash(999), 9, ""));
    assert!(
        failure(&refused) == "tracker full: no new torrents accepted"
            || failure(&refused) == "too many new torrents from your address, try again later",
        "{}",
        failure(&refused)
    );
    let known = crowd.get(&announce(&hash(100), 9, ""));
    assert_eq!(int(&known, "incomplete"), 3, "known torrents keep working");
}

/// The failure reason of a response, or "" for a served announce.
fn failure_or_empty(response: &shoal_http_protocol::response::HttpResponse) -> String {
    if response.body.get("failure reason").is_some() {
        failure(response)
    } else {
        String::new()
    }
}

#[test]
fn one_address_over_its_rate_gets_429_then_a_ban() {
    let mut config = loopback_config(false);
    config.per_ip.requests_per_second = 5;
    config.per_ip.burst = 5;
    config.per_ip.ban_after = 2;
    let tracker = start(config);
    let server = v4(&tracker);
    let mut statuses = Vec::new();
    for second in 0..3 {
        let mut client = open_from("127.0.0.5", server);
        for _ in 0..10 {
            let Some(response) = ({
                client
                    .send(format!("GET {} HTTP/1.1\r\n\r\n", announce(&hash(1), 1, "")).as_bytes());
                client.response()
            }) else {
                break;
            };
            statuses.push(response.status);
            if response.status == 429 {
                assert_eq!(failure(&response), "too many requests, slow down");
                break; // a 429 closes the connection
            }
        }
        if second < 2 {
            tracker.clock().advance(1);
        }
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    assert!(eventually(|| tracker.stats().requests.connections.bans == 1));
    // Banned: a new connection is closed without a word.
    let mut banned = open_from("127.0.0.5", server);
    banned.send(format!("GET {} HTTP/1.1\r\n\r\n", announce(&hash(1), 1, "")).as_bytes());
    assert!(banned.response().is_none());
    // Another address is another client.
    let mut other = open_from("127.0.0.6", server);
    assert_eq!(other.get(&announce(&hash(1), 2, "")).status, 200);
}

#[test]
fn connections_count_against_the_rate_so_handshakes_are_not_free() {
    // Opening a connection spends a token as a request does: a client that only
    // opens connections (TLS handshakes it aborts, or nothing at all) is limited and
    // banned like one that sends requests.
    let mut config = loopback_config(false);
    config.per_ip.requests_per_second = 1;
    config.per_ip.burst = 3;
    let tracker = start(config);
    let server = v4(&tracker);
    let answered: Vec<bool> = (0..4)
        .map(|_| {
            let mut client = open_from("127.0.0.7", server);
            client.send(format!("GET {} HTTP/1.1\r\n\r\n", announce(&hash(1), 1, "")).as_bytes());
            client.response().is_some()
        })
        .collect();
    // Three tokens: the first connection and its request, the second connection;
    // its request and everything after are over the rate (unless a second passed).
    assert!(answered[0], "{answered:?}");
    assert!(!answered[3], "{answered:?}");
    assert!(eventually(|| tracker
        .stats()
        .requests
        .connections
        .per_ip_limited
        >= 2));
}

#[test]
fn one_address_cannot_take_every_connection() {
    let mut config = unlimited();
    config.per_ip.max_connections = 3;
    let tracker = start(config);
    let server = v4(&tracker);
    let mut held: Vec<_> = (0..3).map(|_| open_from("127.0.0.7", server)).collect();
    for client in &mut held {
        assert_eq!(client.get(&announce(&hash(1), 1, "")).status, 200);
    }
    let mut fourth = open_from("127.0.0.7", server);
    fourth.send(b"GET /scrape HTTP/1.1\r\n\r\n");
    let response = fourth.response().expect("a refusal");
    assert_eq!(response.status, 503);
    let mut other = open_from("127.0.0.8", server);
    assert_eq!(other.get(&announce(&hash(1), 2, "")).status, 200);
    assert!(eventually(|| tracker
        .stats()
        .requests
        .connections
        .refused_per_ip
        == 1));
    // Closing one frees a slot.
    drop(held.pop());
    assert!(eventually(|| {
        let mut again = open_from("127.0.0.7", server);
        again.send(b"GET /scrape HTTP/1.1\r\n\r\n");
        again.response().is_some_and(|r| r.status == 200)
    }));
}

#[test]
fn a_full_worker_closes_the_connection_waiting_longest_instead_of_turning_newcomers_away() {
    // Whoever holds every slot and only keeps each alive with a request now and then
    // must not lock everyone else out: the connection that has waited longest for its
    // next request gives way.
    let mut config = unlimited();
    config.socket_workers = 1;
    config.network.max_connections = 2;
    let tracker = start(config);
    let server = v4(&tracker);
    let mut oldest = Connection::open(server);
    assert_eq!(oldest.get(&announce(&hash(1), 1, "")).status, 200);
    // Begins its next request and stops: still waiting for a whole head.
    oldest.send(b"GET /ann");
    let mut younger = Connection::open(server);
    assert_eq!(younger.get(&announce(&hash(1), 2, "")).status, 200);
    std::thread::sleep(Duration::from_millis(100));
    // Both wait for a request; a newcomer is served, not refused.
    let mut newcomer = Connection::open(server);
    assert_eq!(newcomer.get(&announce(&hash(1), 3, "")).status, 200);
    // The oldest was closed to make room; the younger still serves.
    oldest.send(b"ounce HTTP/1.1\r\n\r\n");
    assert!(
        oldest.response().is_none(),
        "the oldest waiting connection was closed"
    );
    assert_eq!(younger.get(&announce(&hash(1), 2, "")).status, 200);
    assert!(eventually(|| tracker
        .stats()
        .requests
        .connections
        .idle_evicted
        == 1));
    assert_eq!(tracker.stats().requests.connections.refused, 0);
}

#[test]
fn a_client_at_its_own_limit_makes_nobody_give_way() {
    let mut config = unlimited();
    config.socket_workers = 1;
    config.network.max_connections = 2;
    config.per_ip.max_connections = 1;
    let tracker = start(config);
    let server = v4(&tracker);
    let mut greedy = open_from("127.0.0.30", server);
    assert_eq!(greedy.get(&announce(&hash(1), 1, "")).status, 200);
    let mut other = open_from("127.0.0.31", server);
    assert_eq!(other.get(&announce(&hash(1), 2, "")).status, 200);
    // The worker is full, and the greedy client at its own limit: refused, and the
    // other client's waiting connection stays.
    let mut more = open_from("127.0.0.30", server);
    more.send(b"GET /scrape HTTP/1.1\r\n\r\n");
    assert_eq!(more.response().expect("a refusal").status, 503);
    assert_eq!(other.get(&announce(&hash(1), 2, "")).status, 200);
    assert_eq!(tracker.stats().requests.connections.idle_evicted, 0);
}

#[test]
fn a_proxy_header_from_anyone_but_a_trusted_proxy_is_ignored() {
    let mut config = unlimited();
    config.network.reverse_proxy_ip_header = "X-Forwarded-For".into();
    config.network.reverse_proxy_trusted = vec!["10.0.0.0/8".parse().unwrap()];
    let tracker = start(config);
    let mut client = Connection::open(v4(&tracker));
    // A direct client claims to be someone else: served as itself.
    client.send(
        format!(
            "GET {} HTTP/1.1\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n",
            announce(&hash(1), 7001, "")
        )
        .as_bytes(),
    );
    assert_eq!(client.response().unwrap().status, 200);
    let second = client.get(&announce(&hash(1), 7002, ""));
    assert_eq!(
        compact_v4(bytes(&second, "peers")),
        vec!["127.0.0.1:7001".parse::<SocketAddr>().unwrap()]
    );
}

#[test]
fn a_request_dripped_a_byte_at_a_time_gets_no_more_time() {
    let mut config = unlimited();
    config.network.idle_timeout = 1;
    let tracker = start(config);
    let mut stream = TcpStream::connect(v4(&tracker)).unwrap();
    let started = Instant::now();
    let request = format!("GET {} HTTP/1.1\r\n", announce(&hash(1), 1, ""));
    let mut closed = false;
    for byte in request.bytes().cycle().take(400) {
        if stream.write_all(&[byte]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        if started.elapsed() > Duration::from_secs(4) {
            break;
        }
    }
    let mut connection = Connection::over(stream);
    let closed = closed || connection.response().is_some_and(|r| r.status == 408);
    assert!(closed, "still open after {:?}", started.elapsed());
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(eventually(|| tracker.stats().requests.timeouts >= 1));
}

/// Bytes the kernel holds for the tracker's connections on `port`: each socket's
/// send queue (written, not yet taken by the client) and receive queue (sent by the
/// client, not yet read by the tracker), from /proc/net/tcp.
fn kernel_bytes_on(server: SocketAddr) -> (u64, usize) {
    let SocketAddr::V4(server) = server else {
        panic!("an IPv4 tracker address");
    };
    // As /proc/net/tcp writes it: the address's bytes as a little-endian word, the
    // port big-endian. The address counts too: a client socket of another test, bound
    // to another loopback address, may have the same port number.
    let local = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(server.ip().octets()),
        server.port()
    );
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let mut bytes = 0;
    let mut sockets = 0;
    for line in table.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // Established connections of the tracker (not the listener, state 0A).
        if fields[1] != local || fields[3] != "01" {
            continue;
        }
        let (tx, rx) = fields[4].split_once(':').unwrap();
        bytes += u64::from_str_radix(tx, 16).unwrap() + u64::from_str_radix(rx, 16).unwrap();
        sockets += 1;
    }
    (bytes, sockets)
}

/// The attack of issue 41: clients that pipeline requests and never read made the
/// kernel hold megabytes for each (1,000 of them pinned 2 GB of the host's TCP
/// memory). Each connection's buffers are capped now, and a connection whose replies
/// are not read is not read either, so what the kernel holds stays within
/// connections × the two buffers.
#[test]
fn clients_that_pipeline_and_never_read_hold_only_their_buffers() {
    let mut config = unlimited();
    config.socket_workers = 1;
    let (send, receive) = (
        config.network.socket_send_buffer_size,
        config.network.socket_recv_buffer_size,
    );
    let tracker = start(config);
    let server = v4(&tracker);
    let request = format!("GET {} HTTP/1.1\r\n\r\n", scrape(&[hash(1)]));
    let pipelined = request.repeat(4 << 20 >> 6).into_bytes();
    let clients: Vec<TcpStream> = (0..100)
        .map(|n| {
            let socket =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            // The client's own buffers small, so that the kernel's bytes counted on the
            // tracker's side are the tracker's.
            socket.set_recv_buffer_size(4096).unwrap();
            let local: SocketAddr = format!("127.0.10.{}:0", n % 50 + 1).parse().unwrap();
            socket.bind(&local.into()).unwrap();
            socket.connect(&server.into()).unwrap();
            socket.set_nonblocking(true).unwrap();
            let mut stream: TcpStream = socket.into();
            // As much as the kernel takes, within a second.
            let started = Instant::now();
            let mut sent = 0;
            while sent < pipelined.len() && started.elapsed() < Duration::from_secs(1) {
                match stream.write(&pipelined[sent..]) {
                    Ok(written) => sent += written,
                    Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(err) => panic!("{err}"),
                }
            }
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let (held, sockets) = kernel_bytes_on(server);
    assert_eq!(sockets, clients.len());
    // The kernel may use up to twice a buffer's size for data and its bookkeeping.
    let bound = clients.len() as u64 * 2 * (send + receive) as u64;
    assert!(held <= bound, "{held} bytes held, over {bound}");
    // Far less than the clients tried to send: they were not read meanwhile.
    assert!(held > 0);
    drop(clients);
}
