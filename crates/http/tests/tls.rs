//! HTTPS with a certificate made at test time, a real rustls client, and reload.

mod support;

use shoal_common::testing::eventually;
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use support::*;

/// A CA and a leaf for `localhost` and 127.0.0.1 signed by it; writes the leaf's chain
/// and key to `dir` and returns the CA certificate for clients to trust.
fn make_certificate(dir: &Path, ca_name: &str) -> CertificateDer<'static> {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_params =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = leaf_params.signed_by(&leaf_key, &ca).unwrap();
    std::fs::write(dir.join("cert.pem"), leaf.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), leaf_key.serialize_pem()).unwrap();
    ca.der().clone()
}

fn client_config(trusted: &CertificateDer<'static>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn connect(addr: std::net::SocketAddr, trusted: &CertificateDer<'static>) -> Connection<TlsStream> {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = rustls::ClientConnection::new(client_config(trusted), name).unwrap();
    Connection::over(rustls::StreamOwned::new(tls, tcp))
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("shoal-https-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A TCP connection from the loopback address `local` that sends the first 5 bytes
/// of a TLS record (a handshake record's header) and stalls.
fn stalled_handshake(local: &str, server: std::net::SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: std::net::SocketAddr = format!("{local}:0").parse().unwrap();
    socket.bind(&local.into()).unwrap();
    socket.connect(&server.into()).unwrap();
    let mut stream: TcpStream = socket.into();
    std::io::Write::write_all(&mut stream, &[0x16, 0x03, 0x01, 0x02, 0x00]).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// Whether the tracker closed `stream` without sending anything (no plaintext on a
/// TLS port), within the read timeout.
fn closed_silently(stream: &mut TcpStream) -> bool {
    let mut answer = Vec::new();
    match std::io::Read::read_to_end(stream, &mut answer) {
        Ok(_) => answer.is_empty(),
        Err(err) => err.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

fn tls_config(dir: &Path) -> shoal_http::Config {
    let mut config = loopback_config(false);
    config.socket_workers = 1;
    config.per_ip.requests_per_second = 0;
    config.network.enable_tls = true;
    config.network.tls_certificate_path = dir.join("cert.pem");
    config.network.tls_private_key_path = dir.join("key.pem");
    config
}

/// The attack of issue 41: connections that each send 5 bytes of a TLS record header,
/// from many addresses, held every slot until the handshake deadline, and the honest
/// client was refused in plaintext. Now the handshake under way longest gives way to
/// the newcomer.
#[test]
fn stalled_handshakes_from_many_addresses_give_way_to_an_honest_client() {
    let dir = temp_dir("stalled");
    let ca = make_certificate(&dir, "stalled CA");
    let mut config = tls_config(&dir);
    config.network.max_connections = 80;
    let tracker = shoal_http::start(config).unwrap();
    let addr = shoal_common::testing::ipv4(tracker.local_addrs());
    let mut stalled: Vec<TcpStream> = (0..80)
        .map(|n| stalled_handshake(&format!("127.0.1.{}", n % 40 + 1), addr))
        .collect();
    assert!(eventually(
        || tracker.stats().requests.connections.accepted == 80
    ));
    // Each honest client stays connected, so each needs a place of its own.
    let mut honest = Vec::new();
    for attempt in 0..5u16 {
        let mut client = connect(addr, &ca);
        let torrent = [0x41; 20];
        let response = client.get(&announce(&torrent, 7000 + attempt, ""));
        assert_eq!(response.status, 200, "attempt {attempt}");
        honest.push(client);
    }
    // The oldest stalled handshakes were closed for them, without a byte.
    assert!(closed_silently(&mut stalled[0]));
    let evicted = eventually(|| tracker.stats().requests.connections.idle_evicted == 5);
    let requests = tracker.stats().requests;
    assert!(evicted, "{requests:?}");
    assert_eq!(requests.connections.refused, 0, "{requests:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn handshakes_under_way_are_capped_per_client_and_per_worker() {
    let dir = temp_dir("capped");
    let ca = make_certificate(&dir, "capped CA");
    let mut config = tls_config(&dir);
    config.network.max_tls_handshakes = 4;
    config.network.max_tls_handshakes_per_client = 2;
    let tracker = shoal_http::start(config).unwrap();
    let addr = shoal_common::testing::ipv4(tracker.local_addrs());
    // A client's third handshake under way is closed at once, without a byte.
    let _first = stalled_handshake("127.0.2.1", addr);
    let _second = stalled_handshake("127.0.2.1", addr);
    let mut third = stalled_handshake("127.0.2.1", addr);
    assert!(closed_silently(&mut third));
    assert!(eventually(|| tracker
        .stats()
        .requests
        .connections
        .refused_per_ip
        == 1));
    // Two more clients fill the worker's four; a fifth handshake closes the oldest.
    let _others: Vec<TcpStream> = ["127.0.2.2", "127.0.2.2"]
        .iter()
        .map(|local| stalled_handshake(local, addr))
        .collect();
    let mut honest = connect(addr, &ca);
    assert_eq!(honest.get(&announce(&[0x42; 20], 7001, "")).status, 200);
    assert!(eventually(|| tracker
        .stats()
        .requests
        .connections
        .idle_evicted
        == 1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_refusal_on_a_tls_port_is_a_close_not_plaintext() {
    // A client at its own connection limit is refused; on a TLS port that is a close,
    // not an HTTP 503 the client would read as garbage ("wrong version number").
    let dir = temp_dir("refused");
    make_certificate(&dir, "refused CA");
    let mut config = tls_config(&dir);
    config.per_ip.max_connections = 1;
    let tracker = shoal_http::start(config).unwrap();
    let addr = shoal_common::testing::ipv4(tracker.local_addrs());
    let _held = stalled_handshake("127.0.3.1", addr);
    assert!(eventually(
        || tracker.stats().requests.connections.accepted == 1
    ));
    let mut refused = stalled_handshake("127.0.3.1", addr);
    assert!(closed_silently(&mut refused));
    assert!(eventually(|| tracker
        .stats()
        .requests
        .connections
        .refused_per_ip
        == 1));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn https_announce_scrape_keep_alive_and_certificate_reload() {
    let dir = temp_dir("reload");
    let first_ca = make_certificate(&dir, "first CA");
    let mut config = loopback_config(false);
    config.network.enable_tls = true;
    config.network.tls_certificate_path = dir.join("cert.pem");
    config.network.tls_private_key_path = dir.join("key.pem");
    let tracker = shoal_http::start(config).unwrap();
    let addr = shoal_common::testing::ipv4(tracker.local_addrs());

    let mut client = connect(addr, &first_ca);
    let torrent = [0x31; 20];
    assert_eq!(
        int(&client.get(&announce(&torrent, 7001, "")), "incomplete"),
        1
    );
    let response = client.get(&announce(&torrent, 7002, ""));
    assert_eq!(
        compact_v4(bytes(&response, "peers")),
        vec!["127.0.0.1:7001".parse().unwrap()]
    );
    assert!(!response.close, "keep-alive over TLS");
    assert!(client.get(&scrape(&[torrent])).body.get("files").is_some());

    // Plain HTTP on the TLS port is not served: the answer, if any, is a TLS alert.
    let mut plain = TcpStream::connect(addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    std::io::Write::write_all(
        &mut plain,
        format!("GET {} HTTP/1.1\r\n\r\n", announce(&torrent, 1, "")).as_bytes(),
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = std::io::Read::read_to_end(&mut plain, &mut answer);
    assert!(
        !answer.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    assert!(
        answer.is_empty() || answer[0] == 0x15,
        "a TLS alert record or nothing"
    );

    // New certificate from another CA: after a reload, new connections get it; a
    // broken file keeps the current one.
    let second_ca = make_certificate(&dir, "second CA");
    tracker
        .extra()
        .tls
        .as_ref()
        .expect("serving TLS")
        .reload()
        .unwrap();
    let mut client = connect(addr, &second_ca);
    assert_eq!(client.get(&announce(&torrent, 7003, "")).status, 200);
    let mut stale = connect(addr, &first_ca);
    let err = std::io::Write::write_all(&mut stale.stream, b"GET / HTTP/1.1\r\n\r\n")
        .and_then(|()| std::io::Write::flush(&mut stale.stream))
        .expect_err("the old certificate is no longer served");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");

    std::fs::write(dir.join("key.pem"), "not a key").unwrap();
    assert!(
        tracker
            .extra()
            .tls
            .as_ref()
            .expect("serving TLS")
            .reload()
            .is_err()
    );
    let mut client = connect(addr, &second_ca);
    assert_eq!(client.get(&announce(&torrent, 7004, "")).status, 200);
    assert!(eventually(|| tracker
        .stats()
        .requests
        .connections
        .tls_failures
        >= 2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unusable_certificates_stop_the_start_with_a_reason() {
    let dir = temp_dir("broken");
    make_certificate(&dir, "CA");
    let mut config = loopback_config(false);
    config.network.enable_tls = true;
    config.network.tls_certificate_path = dir.join("missing.pem");
    config.network.tls_private_key_path = dir.join("key.pem");
    let err = format!("{:#}", shoal_http::start(config.clone()).unwrap_err());
    assert!(
        err.contains("tls_certificate_path") && err.contains("missing.pem does not exist"),
        "{err}"
    );

    // A key that does not belong to the certificate.
    let other = temp_dir("other");
    make_certificate(&other, "CA");
    config.network.tls_certificate_path = dir.join("cert.pem");
    config.network.tls_private_key_path = other.join("key.pem");
    let err = format!("{:#}", shoal_http::start(config).unwrap_err());
    assert!(err.contains("cannot be used together"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&other).unwrap();
}

/// A client config trusting `trusted` that speaks only `version`, keeping sessions to
/// resume as browsers and libcurl do.
fn client_config_for(
    trusted: &CertificateDer<'static>,
    version: &'static rustls::SupportedProtocolVersion,
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// One announce over a new connection made with `config`; whether its handshake
/// resumed a session.
fn announce_resumed(
    addr: std::net::SocketAddr,
    config: &Arc<rustls::ClientConfig>,
    port: u16,
) -> bool {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = rustls::ClientConnection::new(config.clone(), name).unwrap();
    let mut client = Connection::over(rustls::StreamOwned::new(tls, tcp));
    // The response is read after the ticket (TLS 1.3 sends it after the handshake).
    assert_eq!(client.get(&announce(&[0x41; 20], port, "")).status, 200);
    client.stream.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed)
}

#[test]
fn returning_clients_resume_from_tickets_over_tls_1_3_and_1_2_across_a_reload() {
    let dir = temp_dir("resume");
    let ca = make_certificate(&dir, "resumption CA");
    let tracker = shoal_http::start(tls_config(&dir)).unwrap();
    let addr = shoal_common::testing::ipv4(tracker.local_addrs());
    let tls = tracker.extra().tls.as_ref().expect("serving TLS");
    for (version, first_port) in [
        (&rustls::version::TLS13, 8100),
        (&rustls::version::TLS12, 8200),
    ] {
        let config = client_config_for(&ca, version);
        assert!(
            !announce_resumed(addr, &config, first_port),
            "the first is full"
        );
        assert!(
            announce_resumed(addr, &config, first_port + 1),
            "{version:?}: resumed"
        );
        // A certificate reload keeps the ticket keys: sessions still resume.
        tls.reload().unwrap();
        assert!(
            announce_resumed(addr, &config, first_port + 2),
            "{version:?}: after a reload"
        );
    }
    // A client with no session does a full handshake.
    assert!(!announce_resumed(addr, &client_config(&ca), 8300));
    assert!(eventually(|| {
        let counted = tracker.stats().requests.connections;
        counted.tls_full == 3 && counted.tls_resumed == 4 && counted.tls_handshake_micros > 0
    }));
    let metrics = tracker.stats().requests.connections;
    assert_eq!(metrics.tls_failures, 0, "{metrics:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
