//! The three protocols' clients, as small as a test needs: one announce over UDP
//! (BEP 15, the key as BEP 41 URL data), HTTP (the key in the path) or WebTorrent
//! (the key as the WebSocket URL's path), each answered with what a client reads of
//! the reply.
#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::Path;
use std::time::Duration;

use shoal_common::testing::Process;

/// The `shoal` binary the tests run.
pub const BINARY: &str = env!("CARGO_BIN_EXE_shoal");

/// The `[<tracker>.network]` lines that put it on a free loopback port, IPv4 only.
pub fn loopback(tracker: &str) -> String {
    format!("[{tracker}.network]\naddress_ipv4 = \"127.0.0.1:0\"\nuse_ipv6 = false\n")
}

/// Starts `shoal -c config` and waits until the UDP, HTTP and WebTorrent trackers
/// serve: the process and their addresses, in [`PROTOCOLS`] order.
pub fn start_shoal(config: &Path) -> (Process, Vec<(Protocol, SocketAddr)>) {
    let mut command = std::process::Command::new(BINARY);
    command.arg("-c").arg(config);
    let mut process = Process::start(command);
    let trackers = PROTOCOLS
        .iter()
        .map(|&protocol| (protocol, process.address_after(protocol.listening())))
        .collect();
    (process, trackers)
}

/// `GET path` on `address`: the body.
pub fn get(address: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text.split_once("\r\n\r\n")
        .map_or(text.clone(), |(_, body)| body.to_owned())
}

/// The protocols, for tests that go over each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Udp,
    Http,
    Ws,
}

pub const PROTOCOLS: [Protocol; 3] = [Protocol::Udp, Protocol::Http, Protocol::Ws];

/// One announce.
#[derive(Clone, Copy, Debug)]
pub struct Announce<'a> {
    /// The passkey, in the URL.
    pub key: Option<&'a str>,
    pub info_hash: [u8; 20],
    pub peer_id: [u8; 20],
    pub port: u16,
    pub uploaded: u64,
    pub downloaded: u64,
    pub left: u64,
    /// `started`, `completed`, `stopped`, or "" for none.
    pub event: &'a str,
}

impl Default for Announce<'_> {
    fn default() -> Self {
        Self {
            key: None,
            info_hash: [0xaa; 20],
            peer_id: *b"-TR3000-aaaaaaaaaaaa",
            port: 51413,
            uploaded: 0,
            downloaded: 0,
            left: 1000,
            event: "",
        }
    }
}

/// What a client reads of a reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    /// The refusal, when the announce was refused.
    pub failure: Option<String>,
    /// The warning shown to the user (HTTP's `warning message`), if any.
    pub warning: Option<String>,
    /// The interval it is told to wait.
    pub interval: u64,
    /// Peers returned.
    pub peers: usize,
}

impl Protocol {
    /// Sends `announce` to `tracker` and reads the reply.
    pub fn announce(self, tracker: SocketAddr, announce: &Announce<'_>) -> Reply {
        match self {
            Protocol::Udp => udp(tracker, announce),
            Protocol::Http => http(tracker, announce),
            Protocol::Ws => ws(tracker, announce),
        }
    }

    /// The prefix of the log line that tells the tracker's address.
    pub fn listening(self) -> &'static str {
        match self {
            Protocol::Udp => "listening on udp://",
            Protocol::Http => "listening on http://",
            Protocol::Ws => "listening on ws://",
        }
    }
}

fn percent(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("%{b:02X}")).collect()
}

fn http(tracker: SocketAddr, announce: &Announce<'_>) -> Reply {
    let key = announce
        .key
        .map(|key| format!("/{key}"))
        .unwrap_or_default();
    let event = if announce.event.is_empty() {
        String::new()
    } else {
        format!("&event={}", announce.event)
    };
    let target = format!(
        "{key}/announce?info_hash={}&peer_id={}&port={}&uploaded={}&downloaded={}&left={}&compact=1{event}",
        percent(&announce.info_hash),
        percent(&announce.peer_id),
        announce.port,
        announce.uploaded,
        announce.downloaded,
        announce.left
    );
    let mut stream = TcpStream::connect(tracker).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let at = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head")
        + 4;
    let body = &response[at..];
    let string = |key: &str| -> Option<String> {
        let pattern = format!("{}:{key}", key.len());
        let start = find(body, pattern.as_bytes())? + pattern.len();
        let colon = start + body[start..].iter().position(|&b| b == b':')?;
        let len: usize = std::str::from_utf8(&body[start..colon])
            .ok()?
            .parse()
            .ok()?;
        Some(String::from_utf8_lossy(body.get(colon + 1..colon + 1 + len)?).into_owned())
    };
    let int = |key: &str| -> Option<u64> {
        let pattern = format!("{}:{key}i", key.len());
        let start = find(body, pattern.as_bytes())? + pattern.len();
        let end = start + body[start..].iter().position(|&b| b == b'e')?;
        std::str::from_utf8(&body[start..end]).ok()?.parse().ok()
    };
    Reply {
        failure: string("failure reason"),
        warning: string("warning message"),
        interval: int("interval").unwrap_or(0),
        peers: string("peers").map_or(0, |peers| peers.len() / 6),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn udp(tracker: SocketAddr, announce: &Announce<'_>) -> Reply {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut connect = 0x0417_2710_1980u64.to_be_bytes().to_vec();
    connect.extend_from_slice(&0u32.to_be_bytes());
    connect.extend_from_slice(&7u32.to_be_bytes());
    socket.send_to(&connect, tracker).unwrap();
    let mut reply = [0u8; 2048];
    let read = socket.recv(&mut reply).unwrap();
    assert_eq!(read, 16, "a connect reply");
    let connection = &reply[8..16];
    let event = match announce.event {
        "completed" => 1u32,
        "started" => 2,
        "stopped" => 3,
        _ => 0,
    };
    let mut packet = connection.to_vec();
    packet.extend_from_slice(&1u32.to_be_bytes());
    packet.extend_from_slice(&8u32.to_be_bytes());
    packet.extend_from_slice(&announce.info_hash);
    packet.extend_from_slice(&announce.peer_id);
    packet.extend_from_slice(&announce.downloaded.to_be_bytes());
    packet.extend_from_slice(&announce.left.to_be_bytes());
    packet.extend_from_slice(&announce.uploaded.to_be_bytes());
    packet.extend_from_slice(&event.to_be_bytes());
    packet.extend_from_slice(&0u32.to_be_bytes()); // IP
    packet.extend_from_slice(&0u32.to_be_bytes()); // key
    packet.extend_from_slice(&(-1i32).to_be_bytes()); // peers wanted
    packet.extend_from_slice(&announce.port.to_be_bytes());
    if let Some(key) = announce.key {
        // BEP 41 URL data: `/<key>`, then the end of options.
        let url = format!("/{key}");
        packet.extend_from_slice(&[2, url.len() as u8]);
        packet.extend_from_slice(url.as_bytes());
        packet.push(0);
    }
    socket.send_to(&packet, tracker).unwrap();
    let read = socket.recv(&mut reply).unwrap();
    let action = u32::from_be_bytes(reply[..4].try_into().unwrap());
    match action {
        1 => Reply {
            interval: u64::from(u32::from_be_bytes(reply[8..12].try_into().unwrap())),
            peers: (read - 20) / 6,
            ..Reply::default()
        },
        3 => Reply {
            failure: Some(String::from_utf8_lossy(&reply[8..read]).into_owned()),
            ..Reply::default()
        },
        other => panic!("action {other} in {:?}", &reply[..read]),
    }
}

/// 20 bytes as the JSON string WebTorrent sends (one character per byte).
fn chars(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}

fn ws(tracker: SocketAddr, announce: &Announce<'_>) -> Reply {
    match WsConnection::open(tracker, announce.key) {
        Ok(mut connection) => connection.announce(announce),
        Err(refused) => refused,
    }
}

/// A WebTorrent connection kept open: its peers live as long as it does.
pub struct WsConnection(TcpStream);

impl WsConnection {
    /// Opens and upgrades a connection with `key` as the URL's path; the refusal as a
    /// reply if the upgrade is refused.
    pub fn open(tracker: SocketAddr, key: Option<&str>) -> Result<Self, Reply> {
        let mut stream = TcpStream::connect(tracker).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let path = key
            .map(|key| format!("/{key}"))
            .unwrap_or("/announce".into());
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if stream.read(&mut byte).unwrap() == 0 {
                break;
            }
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        if !head.starts_with("HTTP/1.1 101") {
            // Refused before the upgrade: the reason is the body.
            let mut body = String::new();
            let _ = stream.read_to_string(&mut body);
            return Err(Reply {
                failure: Some(format!(
                    "{} {}",
                    head.lines().next().unwrap_or(""),
                    body.trim()
                )),
                ..Reply::default()
            });
        }
        Ok(Self(stream))
    }

    /// Announces on this connection and reads the reply.
    pub fn announce(&mut self, announce: &Announce<'_>) -> Reply {
        let event = if announce.event.is_empty() {
            String::new()
        } else {
            format!(r#","event":"{}""#, announce.event)
        };
        let message = format!(
            r#"{{"action":"announce","info_hash":{},"peer_id":{},"uploaded":{},"downloaded":{},"left":{},"numwant":5{event}}}"#,
            json_string(&chars(&announce.info_hash)),
            json_string(&chars(&announce.peer_id)),
            announce.uploaded,
            announce.downloaded,
            announce.left
        );
        send_text(&mut self.0, message.as_bytes());
        let text = read_text(&mut self.0);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        Reply {
            failure: value["failure reason"].as_str().map(str::to_owned),
            warning: value["warning message"].as_str().map(str::to_owned),
            interval: value["interval"].as_u64().unwrap_or(0),
            peers: 0,
        }
    }
}

fn json_string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// Sends one masked text frame.
fn send_text(stream: &mut TcpStream, payload: &[u8]) {
    let mut frame = vec![0x81];
    match payload.len() {
        len @ 0..=125 => frame.push(0x80 | len as u8),
        len => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(len as u16).to_be_bytes());
        }
    }
    let mask = [0x12, 0x34, 0x56, 0x78];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    stream.write_all(&frame).unwrap();
}

/// Reads the next text frame (unmasked, as servers send).
fn read_text(stream: &mut TcpStream) -> String {
    loop {
        let mut head = [0u8; 2];
        stream.read_exact(&mut head).unwrap();
        let len = match head[1] & 0x7f {
            126 => {
                let mut len = [0u8; 2];
                stream.read_exact(&mut len).unwrap();
                u64::from(u16::from_be_bytes(len))
            }
            127 => {
                let mut len = [0u8; 8];
                stream.read_exact(&mut len).unwrap();
                u64::from_be_bytes(len)
            }
            len => u64::from(len),
        };
        let mut payload = vec![0u8; len as usize];
        stream.read_exact(&mut payload).unwrap();
        if head[0] & 0x0f == 1 {
            return String::from_utf8(payload).unwrap();
        }
        assert_ne!(head[0] & 0x0f, 8, "closed: {payload:?}");
    }
}
