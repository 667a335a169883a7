//! Certificates from a real ACME CA (Debian's pebble, with pebble-challtestsrv as its
//! DNS server): a tracker configured with names and the CA's URL only obtains its
//! certificate through TLS-ALPN-01 on its own port, serves it to clients that trust
//! only the CA, renews it while connections stay open, and outlasts the CA being
//! down, at start and at renewal. A name the CA cannot validate fails with the CA's
//! reason.

mod support;

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use shoal_acme::AcmeStatus;
use shoal_common::testing::{Pebble, eventually};
use support::*;

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// Waits up to `seconds` for `condition`.
fn within(seconds: u64, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    condition()
}

fn client_config(root: &CertificateDer<'static>, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(root.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

/// A TLS connection to `addr` for `name`, its handshake done, trusting only `root`.
fn handshake(
    addr: SocketAddr,
    name: &str,
    root: &CertificateDer<'static>,
) -> std::io::Result<TlsStream> {
    let mut tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(10)))?;
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let mut tls = rustls::ClientConnection::new(client_config(root, b"http/1.1"), name).unwrap();
    while tls.is_handshaking() {
        tls.complete_io(&mut tcp)?;
    }
    Ok(rustls::StreamOwned::new(tls, tcp))
}

/// The leaf certificate a connection was shown.
fn served(stream: &TlsStream) -> CertificateDer<'static> {
    stream.conn.peer_certificates().unwrap()[0]
        .clone()
        .into_owned()
}

fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().port()
}

/// A tracker on 127.0.0.1:`port` with a certificate for `names` from `pebble`,
/// kept in `storage`.
fn acme_config(
    port: u16,
    names: &[&str],
    pebble: &Pebble,
    storage: &std::path::Path,
) -> shoal_http::Config {
    let mut config = loopback_config(false);
    config.network.address_ipv4 = SocketAddr::from(([127, 0, 0, 1], port));
    config.per_ip.requests_per_second = 0;
    config.network.enable_tls = true;
    config.network.acme_names = names.iter().map(|name| (*name).to_owned()).collect();
    config.network.acme_directory_url = pebble.directory_url();
    config.network.acme_ca_certificates_path = pebble.api_roots();
    config.network.acme_contact_email = "ops@shoal.test".to_owned();
    config.network.acme_storage_path = storage.to_path_buf();
    config.network.acme_retry_seconds = 1;
    config
}

fn status_of(tracker: &shoal_http::RunningTracker) -> Arc<AcmeStatus> {
    let tls = tracker.extra().tls.as_ref().expect("serving TLS");
    tls.acme_status().expect("ACME on").clone()
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("shoal-acme-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn a_tracker_obtains_serves_and_renews_its_certificate_and_outlasts_the_ca_being_down() {
    let port = free_port();
    // Certificates of 20 seconds: renewed a third of that before they end.
    let mut pebble = Pebble::start(port, 20);
    pebble.stop_ca();
    let storage = temp_dir("renewal");
    let names = ["tracker.shoal.test", "www.shoal.test"];
    let tracker = shoal_http::start(acme_config(port, &names, &pebble, &storage)).unwrap();
    let addr = shoal_common::testing::ipv4(tracker.local_addrs());
    let status = status_of(&tracker);

    // The CA is down at start: attempts fail, retried; no handshake completes meanwhile.
    assert!(eventually(|| status.failed.load(Relaxed) >= 2));
    let reason = status.last_error().unwrap_or_default();
    assert!(reason.contains("cannot connect"), "{reason}");
    let api_root = CertificateDer::from_pem_file(pebble.api_roots()).unwrap();
    assert!(
        handshake(addr, names[0], &api_root).is_err(),
        "no certificate yet"
    );

    pebble.start_ca();
    let issued = within(30, || status.issued.load(Relaxed) >= 1);
    assert!(issued, "{:?}\n{}", status.last_error(), pebble.log());
    let root = CertificateDer::from(pebble.issuing_root());
    for name in names {
        let mut client = Connection::over(handshake(addr, name, &root).unwrap());
        assert_eq!(
            client.get(&announce(&[0x61; 20], 7001, "")).status,
            200,
            "{name}"
        );
    }
    let mut kept = Connection::over(handshake(addr, names[0], &root).unwrap());
    assert_eq!(kept.get(&announce(&[0x61; 20], 7002, "")).status, 200);
    let first = served(&kept.stream);

    // What an operator sees: the expiry in the metrics, the CA's connections counted,
    // the keys readable by the tracker's user only.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let counted = eventually(|| {
        let connections = tracker.stats().requests.connections;
        connections.certificate_expiry > now
            && connections.certificate_expiry <= now + 25
            && connections.acme_issued == 1
            && connections.acme_validations >= 2
    });
    assert!(counted, "{:?}", tracker.stats().requests.connections);
    use std::os::unix::fs::PermissionsExt as _;
    let mode =
        |path: std::path::PathBuf| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(storage.join("http")), 0o700);
    assert_eq!(mode(storage.join("http/private_key.pem")), 0o600);
    assert_eq!(mode(storage.join("http/account.json")), 0o600);

    // The CA is down when the renewal is due: attempts fail and the certificate in
    // force stays in force.
    pebble.stop_ca();
    let failed = status.failed.load(Relaxed);
    assert!(within(30, || status.failed.load(Relaxed) > failed));
    let during =
        handshake(addr, names[0], &root).expect("the certificate in force is still served");
    assert_eq!(served(&during), first);

    // The CA is back (a fresh pebble: new keys, and it knows no account): the tracker
    // makes a new account and renews, and the connection opened before is still served.
    pebble.start_ca();
    let renewed = within(30, || status.issued.load(Relaxed) >= 2);
    assert!(renewed, "{:?}\n{}", status.last_error(), pebble.log());
    let root = CertificateDer::from(pebble.issuing_root());
    let mut client = Connection::over(handshake(addr, names[1], &root).unwrap());
    assert_eq!(client.get(&announce(&[0x61; 20], 7003, "")).status, 200);
    assert_ne!(served(&client.stream), first, "a new certificate");
    assert_eq!(
        kept.get(&announce(&[0x61; 20], 7004, "")).status,
        200,
        "not dropped"
    );
    drop(tracker);
    std::fs::remove_dir_all(&storage).unwrap();
}

#[test]
fn a_challenge_the_ca_cannot_validate_fails_with_its_reason_and_is_retried() {
    let port = free_port();
    let pebble = Pebble::start(port, 3600);
    // The CA looks for this name at an address nobody listens on.
    pebble.map_name("unreachable.shoal.test", "127.0.0.9");
    let storage = temp_dir("refused");
    let tracker = shoal_http::start(acme_config(
        port,
        &["unreachable.shoal.test"],
        &pebble,
        &storage,
    ))
    .unwrap();
    let status = status_of(&tracker);
    assert!(within(30, || status.failed.load(Relaxed) >= 2), "retried");
    let reason = status.last_error().unwrap_or_default();
    assert!(
        reason.contains("the CA refused") && reason.contains("unreachable.shoal.test"),
        "{reason}"
    );
    assert!(
        reason.contains("Failed to connect to 127.0.0.9"),
        "the CA's own reason: {reason}"
    );
    assert_eq!(status.issued.load(Relaxed), 0);
    drop(tracker);
    std::fs::remove_dir_all(&storage).unwrap();
}
