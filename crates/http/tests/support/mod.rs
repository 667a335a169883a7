//! An HTTP tracker client for the integration tests.
#![allow(dead_code, unreachable_pub)] // each test binary uses a different subset

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use shoal_http::Config;
use shoal_http_protocol::bencode::Value;
use shoal_http_protocol::query::encode;
use shoal_http_protocol::response::{HttpResponse, parse_response};

/// A config on free loopback ports, quiet, small io_uring memory.
pub fn loopback_config(ipv6: bool) -> Config {
    let mut config = Config::default();
    config.network.address_ipv4 = "127.0.0.1:0".parse().unwrap();
    config.network.use_ipv6 = ipv6;
    config.network.address_ipv6 = "[::1]:0".parse().unwrap();
    config.statistics.interval = 0;
    config.limits.io_memory = 256 * 1024;
    config.network.io_backend = shoal_common::testing::io_backend_under_test();
    config
}

/// A connection that reads whole HTTP responses.
pub struct Connection<S> {
    pub stream: S,
    buffer: Vec<u8>,
}

impl Connection<TcpStream> {
    pub fn open(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Self::over(stream)
    }
}

impl<S: Read + Write> Connection<S> {
    pub fn over(stream: S) -> Self {
        Self {
            stream,
            buffer: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
        self.stream.flush().unwrap();
    }

    /// The next response, or `None` if the server closed the connection first.
    pub fn response(&mut self) -> Option<HttpResponse> {
        loop {
            if let Some(response) = parse_response(&self.buffer).unwrap() {
                self.buffer.drain(..response.len);
                return Some(response);
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buffer.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Whether the server closed the connection (reads end of stream).
    pub fn closed(&mut self) -> bool {
        let mut chunk = [0u8; 64];
        matches!(self.stream.read(&mut chunk), Ok(0) | Err(_))
    }

    pub fn get(&mut self, target: &str) -> HttpResponse {
        self.send(format!("GET {target} HTTP/1.1\r\nHost: tracker\r\n\r\n").as_bytes());
        self.response().expect("a response")
    }
}

/// An announce URL path and query.
pub fn announce(info_hash: &[u8; 20], port: u16, extra: &str) -> String {
    let peer_id = format!("-SH0001-{port:012}");
    format!(
        "/announce?info_hash={}&peer_id={}&port={port}&uploaded=0&downloaded=0&left=100{extra}",
        encode(info_hash),
        encode(peer_id.as_bytes())
    )
}

pub fn scrape(hashes: &[[u8; 20]]) -> String {
    let query: Vec<String> = hashes
        .iter()
        .map(|h| format!("info_hash={}", encode(h)))
        .collect();
    format!("/scrape?{}", query.join("&"))
}

pub fn int(response: &HttpResponse, key: &str) -> i64 {
    response
        .body
        .get(key)
        .and_then(Value::as_int)
        .unwrap_or_else(|| panic!("no {key} in {:?}", response.body))
}

pub fn bytes<'a>(response: &'a HttpResponse, key: &str) -> &'a [u8] {
    response
        .body
        .get(key)
        .and_then(Value::as_bytes)
        .unwrap_or_else(|| panic!("no {key} in {:?}", response.body))
}

pub fn failure(response: &HttpResponse) -> String {
    String::from_utf8_lossy(bytes(response, "failure reason")).into_owned()
}

/// Compact IPv4 peers as socket addresses.
pub fn compact_v4(peers: &[u8]) -> Vec<SocketAddr> {
    peers
        .chunks_exact(6)
        .map(|c| SocketAddr::from(([c[0], c[1], c[2], c[3]], u16::from_be_bytes([c[4], c[5]]))))
        .collect()
}
