//! The `shoal_ws` binary: config round trip and errors that name the key, and what a
//! connection costs the process in memory.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use serde_json::json;
use support::*;

const BINARY: &str = env!("CARGO_BIN_EXE_shoal_ws");

#[test]
fn printed_default_config_round_trips_and_bad_values_are_named() {
    let dir = std::env::temp_dir().join(format!("shoal-ws-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let printed = Command::new(BINARY).arg("-p").output().unwrap();
    assert!(printed.status.success());
    let text = String::from_utf8_lossy(&printed.stdout);
    assert!(
        text.contains("# Most offers forwarded from one announce"),
        "{text}"
    );
    let path = dir.join("c.toml");
    std::fs::write(&path, &printed.stdout).unwrap();
    let effective = Command::new(BINARY)
        .arg("-c")
        .arg(&path)
        .arg("-P")
        .output()
        .unwrap();
    assert!(effective.status.success());
    assert_eq!(effective.stdout, printed.stdout);

    std::fs::write(
        &path,
        "[limits]\nmax_outgoing_messages = 0\nunknown_key = 1\n",
    )
    .unwrap();
    let refused = Command::new(BINARY).arg("-c").arg(&path).output().unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("unknown_key"), "{stderr}");
    std::fs::write(&path, "[limits]\nmax_outgoing_messages = 0\n").unwrap();
    let refused = Command::new(BINARY).arg("-c").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("limits.max_outgoing_messages: must be between 1 and 1048576"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The process's resident memory in KiB.
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A child process that is killed if the test fails before it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How a client sends its one large message in [`memory_after_one_large_message`].
#[derive(Clone, Copy)]
enum Sending {
    /// As a browser does: the message alone.
    Alone,
    /// In one write with the first byte of the next frame's header, so that the
    /// stream is never between messages after a read.
    WithTheNextHeadersFirstByte,
}

/// Bytes more per connection, resident, after 150 connections that announced once
/// each sent one announce padded to about 60 KB (as an announce with many offers is
/// large), one after the other.
fn memory_after_one_large_message(sending: Sending) -> u64 {
    let dir = std::env::temp_dir().join(format!(
        "shoal-ws-rss-{}-{}",
        std::process::id(),
        sending as u8
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("ws.toml");
    std::fs::write(
        &config,
        "[network]\naddress_ipv4 = \"127.0.0.1:0\"\nuse_ipv6 = false\n\
         [per_ip]\nrequests_per_second = 0\n[statistics]\ninterval = 0\n",
    )
    .unwrap();
    let mut child = Child(
        Command::new(BINARY)
            .arg("-c")
            .arg(&config)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut log = BufReader::new(child.0.stderr.take().unwrap());
    let addr: SocketAddr = loop {
        let mut line = String::new();
        assert!(log.read_line(&mut line).unwrap() > 0, "no address logged");
        if let Some(url) = line.trim().split("listening on ws://").nth(1) {
            break url.parse().unwrap();
        }
    };
    std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));

    // Connections that announced once, as browsers do.
    const CONNECTIONS: usize = 150;
    let torrent = id("torrent");
    let mut clients: Vec<_> = (0..CONNECTIONS)
        .map(|n| {
            let mut client = connect(addr);
            client.announce(torrent, id(&format!("peer{n}")), json!({"numwant": 0}));
            client.receive();
            client
        })
        .collect();
    let before = resident_kib(child.0.id());
    for (n, client) in clients.iter_mut().enumerate() {
        let announce = json!({
            "action": "announce",
            "info_hash": chars(torrent),
            "peer_id": chars(id(&format!("peer{n}"))),
            "numwant": 0,
        });
        let padded = format!("{}{announce}", " ".repeat(60_000));
        match sending {
            Sending::Alone => client
                .socket
                .send(tungstenite::Message::text(padded))
                .unwrap(),
            Sending::WithTheNextHeadersFirstByte => {
                // A masked text frame (the zero mask leaves the payload as it is).
                let mut bytes = vec![0x81, 0x80 | 126];
                bytes.extend_from_slice(&u16::try_from(padded.len()).unwrap().to_be_bytes());
                bytes.extend_from_slice(&[0; 4]);
                bytes.extend_from_slice(padded.as_bytes());
                bytes.push(0x81);
                client.socket.get_mut().write_all(&bytes).unwrap();
            }
        }
        client.receive();
    }
    let after = resident_kib(child.0.id());
    drop(clients);
    std::fs::remove_dir_all(&dir).unwrap();
    (after.saturating_sub(before)) * 1024 / CONNECTIONS as u64
}

/// Kept, each connection would hold its 60 KB read buffer: 9 MB over the 150.
const LASTING_PER_CONNECTION: u64 = 16 * 1024;

#[test]
fn a_large_message_leaves_no_lasting_memory_in_its_connection() {
    let per_connection = memory_after_one_large_message(Sending::Alone);
    assert!(
        per_connection < LASTING_PER_CONNECTION,
        "{per_connection} bytes more per connection after one large message each"
    );
}

#[test]
fn a_large_message_with_the_next_one_begun_leaves_no_lasting_memory_either() {
    let per_connection = memory_after_one_large_message(Sending::WithTheNextHeadersFirstByte);
    assert!(
        per_connection < LASTING_PER_CONNECTION,
        "{per_connection} bytes more per connection after one large message each, \
         the next begun in the same write"
    );
}

/// `shoal_ws` where io_uring is refused, as in a container under Docker's or podman's
/// default seccomp profile: `auto` serves with epoll and says so at info level (no
/// warning: it is the container's normal state), and a browser's announce is answered.
#[test]
fn auto_serves_with_epoll_where_seccomp_refuses_io_uring() {
    use std::os::unix::process::CommandExt as _;
    let dir = std::env::temp_dir().join(format!("shoal-ws-seccomp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("ws.toml");
    std::fs::write(
        &config,
        "[network]\naddress_ipv4 = \"127.0.0.1:0\"\nuse_ipv6 = false\nio_backend = \"auto\"\n\
         [statistics]\ninterval = 0\n",
    )
    .unwrap();
    let mut command = Command::new(BINARY);
    command.arg("-c").arg(&config).stderr(Stdio::piped());
    // SAFETY: only prctl calls between fork and exec.
    unsafe {
        command.pre_exec(|| shoal_common::testing::refuse_io_uring());
    }
    let mut child = Child(command.spawn().unwrap());
    let mut log = BufReader::new(child.0.stderr.take().unwrap());
    let mut lines = Vec::new();
    let addr: SocketAddr = loop {
        let mut line = String::new();
        assert!(
            log.read_line(&mut line).unwrap() > 0,
            "the tracker ended before it listened: {lines:#?}"
        );
        if let Some(url) = line.trim().split("listening on ws://").nth(1) {
            break url.parse().unwrap();
        }
        lines.push(line);
    };
    std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));
    assert!(
        lines
            .iter()
            .any(|line| line.contains(" INFO ") && line.contains("ws: serving with epoll")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|line| line.contains(" WARN ")),
        "{lines:#?}"
    );
    let mut client = connect(addr);
    client.announce(id("torrent"), id("peer"), json!({"numwant": 0}));
    let answer = client.receive_text();
    assert!(answer.contains("\"interval\""), "{answer}");
    std::fs::remove_dir_all(&dir).unwrap();
}
