//! The floor responder answers like a tracker in every mode the benches run it in.

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `shoal_udp_floor`, killed when dropped.
struct Floor {
    child: Child,
    address: String,
}

impl Floor {
    /// Starts the floor on `address` with `options`; `None` (said on stderr) where its
    /// io_uring mode finds io_uring unavailable, the one failure to start that is the
    /// machine's and not the floor's.
    fn start(address: &str, options: &[&str]) -> Option<Self> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shoal_udp_floor"))
            .arg(address)
            .args(options)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start shoal_udp_floor");
        let mut line = String::new();
        BufReader::new(child.stderr.take().expect("stderr"))
            .read_line(&mut line)
            .expect("read its first line");
        if line.starts_with("shoal_udp_floor: io_uring is not available here") {
            shoal_common::testing::skip("io_uring", format!("{options:?}: {}", line.trim()));
            let _ = child.wait();
            return None;
        }
        let address = line
            .trim()
            .strip_prefix("shoal_udp_floor listening on udp://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_string();
        Some(Self { child, address })
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn request(action: u32, transaction: u32, extra: &[u8]) -> Vec<u8> {
    let mut bytes = 0x0417_2710_1980u64.to_be_bytes().to_vec();
    bytes.extend_from_slice(&action.to_be_bytes());
    bytes.extend_from_slice(&transaction.to_be_bytes());
    bytes.extend_from_slice(extra);
    bytes
}

fn announce(transaction: u32, peers_wanted: i32) -> Vec<u8> {
    let mut extra = vec![0u8; 82];
    extra[76..80].copy_from_slice(&peers_wanted.to_be_bytes());
    request(1, transaction, &extra)
}

/// Sends bursts of requests of every kind from `client_address` and checks each
/// reply's action, transaction id and size. 4,800 requests in all: more than the
/// io_uring floor's 4,096 receive buffers, so its ring of them wraps.
fn check_replies(floor: &Floor, client_address: &str) {
    let client = UdpSocket::bind(client_address).expect("bind");
    client
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buffer = [0u8; 2048];
    // Bursts of 60: several requests per batch, few enough for the kernel's default
    // receive buffer.
    for burst in 0..80u32 {
        let mut expected = std::collections::HashMap::new();
        for transaction in burst * 60..(burst + 1) * 60 {
            let (packet, action, len) = match transaction % 3 {
                0 => (request(0, transaction, &[]), 0, 16),
                1 => (announce(transaction, 5), 1, 20 + 5 * 6),
                _ => (request(2, transaction, &[7; 40]), 2, 8 + 2 * 12),
            };
            client.send_to(&packet, &floor.address).expect("send");
            expected.insert(transaction, (action, len));
        }
        while !expected.is_empty() {
            let (len, _) = client
                .recv_from(&mut buffer)
                .unwrap_or_else(|err| panic!("{} replies missing: {err}", expected.len()));
            let action = u32::from_be_bytes(buffer[0..4].try_into().unwrap());
            let transaction = u32::from_be_bytes(buffer[4..8].try_into().unwrap());
            let wanted = expected
                .remove(&transaction)
                .unwrap_or_else(|| panic!("reply to unknown transaction {transaction}"));
            assert_eq!((action, len), wanted, "transaction {transaction}");
        }
    }
    // Not a request: no reply.
    client.send_to(&request(9, 1, &[]), &floor.address).unwrap();
    client.send_to(&announce(2, -1), &floor.address).unwrap();
    let (len, _) = client.recv_from(&mut buffer).expect("reply");
    assert_eq!(len, 20 + 30 * 6, "default peers, and nothing for action 9");
}

#[test]
fn every_mode_answers_like_a_tracker_over_both_families() {
    for options in [
        &[][..],
        &["--batch", "1"],
        &["--batch", "1024", "--busy-poll"],
        &["--one-by-one"],
        &["--io-uring"],
        &["--io-uring", "--batch", "2"],
    ] {
        for (listen, client) in [("127.0.0.1:0", "127.0.0.1:0"), ("[::1]:0", "[::1]:0")] {
            let Some(floor) = Floor::start(listen, options) else {
                continue;
            };
            check_replies(&floor, client);
            drop(floor);
            eprintln!("{options:?} on {listen}: all replies");
        }
    }
}
