//! Origin rules and per-Origin connection caps against a running tracker: the
//! upgrade's Origin header decides whether a connection opens.

mod support;

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use shoal_common::testing::eventually;
use shoal_ws_protocol::ServerMessage;
use support::{Client, id, loopback_config, upgrade_with_header};

/// Opens a connection with `origin` as its Origin header (none when `None`): the
/// client, or the HTTP status and body it was refused with.
fn open(addr: SocketAddr, origin: Option<&str>) -> Result<Client<TcpStream>, (u16, String)> {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    upgrade_with_header(tcp, addr, origin.map(|origin| ("Origin", origin)))
}

struct RulesFile(PathBuf);

impl Drop for RulesFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn origins_are_allowed_denied_capped_and_reloaded() {
    let rules =
        RulesFile(std::env::temp_dir().join(format!("shoal-ws-origins-{}", std::process::id())));
    std::fs::write(
        &rules.0,
        "# the site that embeds the tracker, and non-browser clients\n\
         allow https://site.example\n\
         allow none\n\
         deny *.abuse.example\n",
    )
    .unwrap();
    let mut config = loopback_config();
    config.network.origins_path = rules.0.clone();
    config.network.max_connections_per_origin = 2;
    let tracker = shoal_ws::start(config).unwrap();
    let addr = shoal_common::testing::ipv4(tracker.local_addrs());

    // Allowed: the site (up to its cap) and clients without an Origin, which serve.
    let mut first = open(addr, Some("https://site.example")).expect("the site is allowed");
    let second = open(addr, Some("https://SITE.example/")).expect("the same origin");
    let none = open(addr, None).expect("clients without an Origin are allowed");
    first.announce(id("torrent"), id("alice"), json!({}));
    assert!(matches!(
        first.receive(),
        ServerMessage::AnnounceResponse(_)
    ));

    // Refused: the site past its cap (503), a denied and an unlisted Origin (403).
    let (status, body) = open(addr, Some("https://site.example")).err().unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("too many connections from this origin"),
        "{body}"
    );
    for origin in ["https://x.abuse.example", "https://other.example", "null"] {
        let (status, body) = open(addr, Some(origin)).err().unwrap();
        assert_eq!(status, 403, "{origin}: {body}");
        assert!(body.contains("does not serve this origin"), "{body}");
    }
    // Clients without an Origin are never capped.
    let _more: Vec<_> = (0..3).map(|_| open(addr, None).unwrap()).collect();

    // A connection that closes gives its place back.
    drop(first);
    assert!(eventually(|| open(addr, Some("https://site.example"))
        .is_ok_and(|c| {
            drop(c);
            true
        })));

    // Counted (the counters reach the statistics at each worker tick).
    assert!(eventually(|| {
        let stats = tracker.stats().requests;
        stats.origin_refused == 3 && stats.origin_full >= 1
    }));

    // SIGUSR1's reload: the new rules apply to new upgrades; open connections stay.
    std::fs::write(&rules.0, "allow *\n").unwrap();
    let said: Vec<Option<String>> = tracker.reload_hooks().iter().map(|hook| hook()).collect();
    assert!(
        said.iter()
            .flatten()
            .any(|line| line == "ws origin rules: 1"),
        "{said:?}"
    );
    assert!(open(addr, Some("https://other.example")).is_ok());
    assert_eq!(open(addr, None).err().unwrap().0, 403);
    // A broken file keeps the rules in force.
    std::fs::write(&rules.0, "allow\n").unwrap();
    let said: Vec<Option<String>> = tracker.reload_hooks().iter().map(|hook| hook()).collect();
    assert!(
        said.iter()
            .flatten()
            .any(|line| line.contains("origin rules kept (1)")),
        "{said:?}"
    );
    assert!(open(addr, Some("https://other.example")).is_ok());
    drop((second, none));
}

#[test]
fn a_missing_rules_file_stops_the_start_with_the_reason() {
    let mut config = loopback_config();
    config.network.origins_path = "/nonexistent/shoal-origins".into();
    let err = format!("{:#}", shoal_ws::start(config).err().unwrap());
    assert!(err.contains("network.origins_path"), "{err}");
}
