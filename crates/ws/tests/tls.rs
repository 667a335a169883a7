//! wss: WebSocket over TLS with a certificate made at test time, and its reload.

mod support;

use std::net::TcpStream;
use std::path::{Path, PathBuf};

use rustls::pki_types::CertificateDer;
use serde_json::json;
use shoal_ws_protocol::ServerMessage;
use support::*;

/// Writes a self-signed certificate for localhost and its key to `dir`; returns the
/// certificate for the client to trust.
fn self_signed(dir: &Path) -> CertificateDer<'static> {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("cert.pem"), certified.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), certified.signing_key.serialize_pem()).unwrap();
    certified.cert.der().clone()
}

fn wss_client(
    addr: std::net::SocketAddr,
    trusted: &CertificateDer<'static>,
) -> Client<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    support::wss_client(addr, trusted, "localhost")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shoal-wss-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn wss_relays_offers_and_reloads_its_certificate() {
    let dir = temp_dir("relay");
    let first = self_signed(&dir);
    let mut config = loopback_config();
    config.network.enable_tls = true;
    config.network.tls_certificate_path = dir.join("cert.pem");
    config.network.tls_private_key_path = dir.join("key.pem");
    let tracker = shoal_ws::start(config).unwrap();
    let addr = shoal_common::testing::ipv4(tracker.local_addrs());
    assert!(tracker.urls()[0].starts_with("wss://127.0.0.1:"));

    let torrent = id("tls torrent");
    let mut alice = wss_client(addr, &first);
    alice.announce(torrent, id("alice"), json!({}));
    assert!(matches!(
        alice.receive(),
        ServerMessage::AnnounceResponse(_)
    ));
    let mut bob = wss_client(addr, &first);
    bob.announce(torrent, id("bob"), json!({"offers": offers("bob", 1)}));
    assert!(matches!(bob.receive(), ServerMessage::AnnounceResponse(_)));
    let ServerMessage::Offer(offer) = alice.receive() else {
        panic!("alice gets bob's offer over wss")
    };
    assert_eq!(offer.peer_id, id("bob"));

    // A new certificate: new connections get it, open ones keep working.
    let second = self_signed(&dir);
    tracker
        .extra()
        .tls
        .as_ref()
        .expect("serving TLS")
        .reload()
        .unwrap();
    let mut carol = wss_client(addr, &second);
    carol.announce(torrent, id("carol"), json!({}));
    assert!(matches!(
        carol.receive(),
        ServerMessage::AnnounceResponse(_)
    ));
    alice.announce(torrent, id("alice"), json!({}));
    assert!(matches!(
        alice.receive(),
        ServerMessage::AnnounceResponse(_)
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}
