//! wss with a certificate the tracker obtained itself from a real ACME CA (Debian's
//! pebble): peers that trust only that CA relay an offer through it.

mod support;

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;
use serde_json::json;
use shoal_acme::AcmeStatus;
use shoal_common::testing::Pebble;
use shoal_ws_protocol::ServerMessage;
use support::*;

const NAME: &str = "wss.shoal.test";

fn wss_client(
    addr: SocketAddr,
    root: &CertificateDer<'static>,
) -> Client<rustls::StreamOwned<rustls::ClientConnection, TcpStream>> {
    support::wss_client(addr, root, NAME)
}

/// Waits up to 30 s for `status` to count `issued` certificates; asserts it did.
fn wait_for_issued(status: &AcmeStatus, issued: u64, pebble: &Pebble) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while status.issued.load(Relaxed) < issued && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        status.issued.load(Relaxed),
        issued,
        "{:?}\n{}",
        status.last_error(),
        pebble.log()
    );
}

#[test]
fn wss_is_served_with_a_certificate_obtained_from_the_ca() {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let mut pebble = Pebble::start(port, 3600);
    let storage = std::env::temp_dir().join(format!("shoal-wss-acme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&storage);
    let mut config = loopback_config();
    config.network.address_ipv4 = SocketAddr::from(([127, 0, 0, 1], port));
    config.network.enable_tls = true;
    config.network.acme_names = vec![NAME.to_owned()];
    config.network.acme_directory_url = pebble.directory_url();
    config.network.acme_ca_certificates_path = pebble.api_roots();
    config.network.acme_storage_path = storage.clone();
    config.network.acme_retry_seconds = 1;
    let tracker = shoal_ws::start(config.clone()).unwrap();
    let addr = shoal_common::testing::ipv4(tracker.local_addrs());
    let tls = tracker.extra().tls.as_ref().expect("serving TLS");
    let status = tls.acme_status().expect("ACME on").clone();
    wait_for_issued(&status, 1, &pebble);
    assert!(
        storage.join("ws/certificate.pem").exists(),
        "kept under the tracker's name"
    );

    let root = CertificateDer::from(pebble.issuing_root());
    let torrent = id("acme torrent");
    let mut alice = wss_client(addr, &root);
    alice.announce(torrent, id("alice"), json!({}));
    assert!(matches!(
        alice.receive(),
        ServerMessage::AnnounceResponse(_)
    ));
    let mut bob = wss_client(addr, &root);
    bob.announce(torrent, id("bob"), json!({"offers": offers("bob", 1)}));
    assert!(matches!(bob.receive(), ServerMessage::AnnounceResponse(_)));
    let ServerMessage::Offer(offer) = alice.receive() else {
        panic!("alice gets bob's offer over wss")
    };
    assert_eq!(offer.peer_id, id("bob"));
    drop((alice, bob));
    tracker.stop().unwrap();

    // A restart serves the kept certificate at once and orders nothing, even with
    // the CA down.
    pebble.stop_ca();
    let tracker = shoal_ws::start(config.clone()).unwrap();
    let addr = shoal_common::testing::ipv4(tracker.local_addrs());
    let mut carol = wss_client(addr, &root);
    carol.announce(torrent, id("carol"), json!({}));
    assert!(matches!(
        carol.receive(),
        ServerMessage::AnnounceResponse(_)
    ));
    std::thread::sleep(Duration::from_millis(1500));
    let tls = tracker.extra().tls.as_ref().expect("serving TLS");
    let status = tls.acme_status().expect("ACME on");
    assert_eq!(
        (status.issued.load(Relaxed), status.failed.load(Relaxed)),
        (0, 0),
        "no order while the kept certificate is good"
    );
    drop(carol);
    tracker.stop().unwrap();

    // A kept key that is not the certificate's: ordered anew at start (from a CA that
    // restarted and no longer knows the account), not left unserved until renewal.
    let other_key = rcgen::KeyPair::generate().unwrap();
    std::fs::write(
        storage.join("ws/private_key.pem"),
        other_key.serialize_pem(),
    )
    .unwrap();
    pebble.start_ca();
    let tracker = shoal_ws::start(config).unwrap();
    let addr = shoal_common::testing::ipv4(tracker.local_addrs());
    let tls = tracker.extra().tls.as_ref().expect("serving TLS");
    let status = tls.acme_status().expect("ACME on").clone();
    wait_for_issued(&status, 1, &pebble);
    let root = CertificateDer::from(pebble.issuing_root());
    let mut dave = wss_client(addr, &root);
    dave.announce(torrent, id("dave"), json!({}));
    assert!(matches!(dave.receive(), ServerMessage::AnnounceResponse(_)));
    drop(dave);
    tracker.stop().unwrap();
    std::fs::remove_dir_all(&storage).unwrap();
}
