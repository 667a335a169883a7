//! A small synchronous WebSocket client (tungstenite) for driving the tracker.

#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::{Value, json};
use shoal_ws_protocol::{Id20, ServerMessage, parse_server_message};
use tungstenite::protocol::CloseFrame;
use tungstenite::{Message, WebSocket};

/// A config on a free loopback port, without rate limits or statistics lines.
pub fn loopback_config() -> shoal_ws::Config {
    let mut config = shoal_ws::Config::default();
    config.network.address_ipv4 = "127.0.0.1:0".parse().unwrap();
    config.network.use_ipv6 = false;
    config.statistics.interval = 0;
    config.limits.max_requests_per_second = 0;
    config.network.io_backend = shoal_common::testing::io_backend_under_test();
    config
}

/// An id from a short label, padded to 20 bytes.
pub fn id(label: &str) -> Id20 {
    let mut bytes = [b'.'; 20];
    bytes[..label.len()].copy_from_slice(label.as_bytes());
    Id20(bytes)
}

/// The wire form of an id.
pub fn chars(id: Id20) -> String {
    id.to_chars()
}

/// One client connection.
pub struct Client<S: Read + Write> {
    pub socket: WebSocket<S>,
}

/// Opens a ws:// connection.
pub fn connect(addr: SocketAddr) -> Client<TcpStream> {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    Client::over(tcp, &format!("ws://{addr}/announce"))
}

impl<S: Read + Write> Client<S> {
    /// A client over a socket already upgraded.
    pub fn from_socket(socket: tungstenite::WebSocket<S>) -> Self {
        Self { socket }
    }

    /// Upgrades `stream` to a WebSocket.
    pub fn over(stream: S, url: &str) -> Self {
        let (socket, response) = tungstenite::client::client(url, stream).unwrap();
        assert_eq!(response.status(), 101);
        Self { socket }
    }

    pub fn send(&mut self, message: Value) {
        self.socket
            .send(Message::text(message.to_string()))
            .unwrap();
    }

    /// The next message, parsed; panics on timeout or close.
    pub fn receive(&mut self) -> ServerMessage {
        loop {
            match self.socket.read().expect("a message") {
                Message::Text(text) => return parse_server_message(text.as_bytes()).unwrap(),
                Message::Ping(_) | Message::Pong(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// The next message as JSON text.
    pub fn receive_text(&mut self) -> String {
        match self.socket.read().expect("a message") {
            Message::Text(text) => text.to_string(),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// The close frame the server sends next (skipping other messages).
    pub fn close_frame(&mut self) -> Option<CloseFrame> {
        loop {
            match self.socket.read() {
                Ok(Message::Close(frame)) => return frame,
                Ok(_) => {}
                Err(err) => panic!("no close frame: {err}"),
            }
        }
    }

    pub fn announce(&mut self, info_hash: Id20, peer_id: Id20, extra: Value) {
        let mut message = json!({
            "action": "announce",
            "info_hash": chars(info_hash),
            "peer_id": chars(peer_id),
            "uploaded": 0,
            "downloaded": 0,
            "left": 100,
        });
        for (key, value) in extra.as_object().unwrap() {
            message[key] = value.clone();
        }
        self.send(message);
    }
}

/// `count` offers with ids made from `label`.
pub fn offers(label: &str, count: usize) -> Value {
    Value::Array(
        (0..count)
            .map(|n| {
                json!({
                    "offer": {"type": "offer", "sdp": format!("v=0 {label} {n}")},
                    "offer_id": chars(id(&format!("{label}{n}"))),
                })
            })
            .collect(),
    )
}

/// One offer whose session description is `size` bytes: what fills a slow reader.
pub fn big_offer(size: usize) -> Value {
    json!([{"offer": {"type": "offer", "sdp": "x".repeat(size)}, "offer_id": chars(id("big"))}])
}

/// A connection to `addr` that announced `peer` in `torrent` and read its reply.
pub fn joined(addr: SocketAddr, torrent: Id20, peer: &str) -> Client<TcpStream> {
    let mut client = connect(addr);
    client.announce(torrent, id(peer), json!({}));
    client.receive();
    client
}

/// A client that joins `torrent` as `peer` over a connection whose kernel receive
/// buffer is small, so what it does not read waits in the tracker soon.
pub fn joined_small(server: SocketAddr, torrent: Id20, peer: &str) -> Client<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut client = Client::over(stream, &format!("ws://{server}/announce"));
    client.announce(torrent, id(peer), json!({}));
    client.receive();
    client
}

/// Announces `offers` in `torrent` from `sender` (reading each reply), at most `max`
/// times and until `done` says so; returns how many were sent.
pub fn offer_until(
    sender: &mut Client<TcpStream>,
    torrent: Id20,
    offers: &Value,
    max: usize,
    mut done: impl FnMut() -> bool,
) -> usize {
    let mut sent = 0;
    while sent < max && !done() {
        sender.announce(torrent, id("sender"), json!({ "offers": offers }));
        sender.receive();
        sent += 1;
    }
    sent
}

/// Whether a read failed only because nothing arrived within the read timeout.
pub fn timed_out(err: &tungstenite::Error) -> bool {
    matches!(err, tungstenite::Error::Io(err)
        if matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut))
}

/// Upgrades `stream` (a connection to `server`) with `header` added to the request
/// when given: the client, or the status and body of the refusal.
pub fn upgrade_with_header(
    stream: TcpStream,
    server: SocketAddr,
    header: Option<(&'static str, &str)>,
) -> Result<Client<TcpStream>, (u16, String)> {
    use tungstenite::client::IntoClientRequest as _;
    let mut request = format!("ws://{server}/announce")
        .into_client_request()
        .unwrap();
    if let Some((name, value)) = header {
        request.headers_mut().insert(name, value.parse().unwrap());
    }
    match tungstenite::client::client(request, stream) {
        Ok((socket, _)) => Ok(Client::from_socket(socket)),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
            let body = response
                .body()
                .as_deref()
                .map(|body| String::from_utf8_lossy(body).into_owned())
                .unwrap_or_default();
            Err((response.status().as_u16(), body))
        }
        Err(other) => panic!("upgrade failed without a status: {other}"),
    }
}

/// A wss:// connection to `addr` for server name `name`, trusting only `trusted`.
pub fn wss_client(
    addr: SocketAddr,
    trusted: &rustls::pki_types::CertificateDer<'static>,
    name: &str,
) -> Client<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.clone()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let server_name = rustls::pki_types::ServerName::try_from(name.to_owned()).unwrap();
    let tls = rustls::ClientConnection::new(std::sync::Arc::new(config), server_name).unwrap();
    Client::over(
        rustls::StreamOwned::new(tls, tcp),
        &format!("wss://{name}:{}/announce", addr.port()),
    )
}
