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

#[test]
fn connections_mid_handshake_are_not_closed_for_a_newcomer_who_gets_a_503() {
    // Only connections waiting for a request give way to newcomers; one in its TLS
    // handshake has its own deadline. With every slot in a handshake, a newcomer is
    // refused (in plain HTTP: no handshake is spent on it).
    let dir = temp_dir("full");
    make_certificate(&dir, "full CA");
    let mut config = loopback_config(false);
    config.socket_workers = 1;
    config.network.max_connections = 2;
    config.network.enable_tls = true;
    config.network.tls_certificate_path = dir.join("cert.pem");
    config.network.tls_private_key_path = dir.join("key.pem");
    let tracker = shoal_http::start(config).unwrap();
    let addr = tracker.ipv4_addr().unwrap();
    let _handshaking: Vec<_> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
    assert!(eventually(|| tracker.stats().requests.accepted == 2));
    let mut third = Connection::over(TcpStream::connect(addr).unwrap());
    let response = third.response().expect("a refusal");
    assert_eq!(
        (response.status, failure(&response).as_str()),
        (503, "too many connections")
    );
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
    let addr = tracker.ipv4_addr().unwrap();

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
    tracker.tls().unwrap().reload().unwrap();
    let mut client = connect(addr, &second_ca);
    assert_eq!(client.get(&announce(&torrent, 7003, "")).status, 200);
    let mut stale = connect(addr, &first_ca);
    let err = std::io::Write::write_all(&mut stale.stream, b"GET / HTTP/1.1\r\n\r\n")
        .and_then(|()| std::io::Write::flush(&mut stale.stream))
        .expect_err("the old certificate is no longer served");
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");

    std::fs::write(dir.join("key.pem"), "not a key").unwrap();
    assert!(tracker.tls().unwrap().reload().is_err());
    let mut client = connect(addr, &second_ca);
    assert_eq!(client.get(&announce(&torrent, 7004, "")).status, 200);
    assert!(eventually(|| tracker.stats().requests.tls_failures >= 2));
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
        err.contains("cannot read certificate file") && err.contains("missing.pem"),
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
