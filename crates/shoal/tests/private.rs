//! Private mode through the `shoal` binary, as a site runs it: the UDP, HTTP and
//! WebTorrent trackers of one process sharing one registry, keys of every form, the
//! admin API changing users live.

mod support;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use shoal_common::testing::Process;
use support::{Announce, Protocol, Reply, loopback, start_shoal};

const TOKEN: &str = "f1e2d3c4b5a69788f1e2d3c4b5a69788";
/// The file key of user 17, and of user 19.
const SEVENTEEN: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
const NINETEEN: &str = "ccccccccccccccccccccccccccccccc1";
/// The key user 20 is given through the API.
const TWENTY: &str = "dddddddddddddddddddddddddddddd20";

/// A private `shoal` with every tracker on loopback, the admin API, stateless keys.
struct Site {
    dir: PathBuf,
    secret: Vec<u8>,
    process: Option<Process>,
    trackers: Vec<(Protocol, SocketAddr)>,
    api: SocketAddr,
}

impl Site {
    fn start(name: &str, users: &str, secret_file: &[u8]) -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("shoal-private-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("users"), users).unwrap();
        std::fs::write(dir.join("torrents"), format!("{} 1001\n", "aa".repeat(20))).unwrap();
        std::fs::write(dir.join("secret"), secret_file).unwrap();
        std::fs::write(dir.join("token"), format!("{TOKEN}\n")).unwrap();
        for file in ["secret", "token"] {
            std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(0o600))
                .unwrap();
        }
        let private = format!(
            "enabled = true\nusers_path = \"{}\"\ntorrents_path = \"{}\"\nkey_secret_path = \"{}\"\n",
            dir.join("users").display(),
            dir.join("torrents").display(),
            dir.join("secret").display(),
        );
        let config = format!(
            "[admin]\nenabled = true\naddress = \"127.0.0.1:0\"\ntoken_path = \"{}\"\n\
             {}{}{}[udp.private]\n{private}[http.private]\n{private}[ws.private]\n{private}",
            dir.join("token").display(),
            loopback("udp"),
            loopback("http"),
            loopback("ws")
        );
        std::fs::write(dir.join("shoal.toml"), config).unwrap();
        let (mut process, trackers) = start_shoal(&dir.join("shoal.toml"));
        let api = process.address_after("admin API on http://");
        // The secret as the tracker uses it: the file's bytes, trailing whitespace off.
        let secret = secret_file.trim_ascii_end().to_vec();
        Self {
            dir,
            secret,
            process: Some(process),
            trackers,
            api,
        }
    }

    /// The stateless key of `user` at `version`.
    fn stateless(&self, user: u32, version: u16) -> String {
        shoal_private::derive_key(&self.secret, user, version)
    }

    /// `method path` with `body` on the admin API: the status line and the body.
    fn admin(&self, method: &str, path: &str, body: &str) -> (String, String) {
        let mut stream = TcpStream::connect(self.api).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
        (
            head.lines().next().unwrap_or("").to_owned(),
            body.to_owned(),
        )
    }

    /// Stops the process cleanly; its log, in which no key may appear.
    fn stop(mut self, keys: &[&str]) -> Vec<String> {
        let log = self.process.take().expect("running").stop();
        for key in keys {
            assert!(
                !log.iter().any(|line| line.contains(key)),
                "{key} in {log:#?}"
            );
        }
        log
    }

    /// What each protocol answers `announce` with.
    fn each(&self, announce: &Announce<'_>) -> Vec<(Protocol, Reply)> {
        self.trackers
            .iter()
            .map(|&(protocol, address)| (protocol, protocol.announce(address, announce)))
            .collect()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A leecher announcing with `key`.
fn leech(key: &str) -> Announce<'_> {
    Announce {
        key: Some(key),
        left: 1000,
        ..Announce::default()
    }
}

/// A seeder with peer id `peer` announcing with `key`.
fn seed(key: &str, peer: u8) -> Announce<'_> {
    Announce {
        key: Some(key),
        left: 0,
        peer_id: [peer; 20],
        ..Announce::default()
    }
}

/// Checks that every protocol refused `announce` with a reason containing `reason`
/// (`None`: served), saying which key form and restriction failed.
fn expect(site: &Site, case: &str, announce: &Announce<'_>, reason: Option<&str>) {
    for (protocol, reply) in site.each(announce) {
        match (reason, &reply.failure) {
            (None, None) => assert!(reply.interval > 0, "{case} over {protocol:?}: {reply:?}"),
            (Some(reason), Some(failure)) => assert!(
                failure.contains(reason),
                "{case} over {protocol:?}: refused with {failure:?}, not {reason:?}"
            ),
            _ => panic!("{case} over {protocol:?}: wanted {reason:?}, got {reply:?}"),
        }
    }
}

const DISABLED: &str = "account disabled";
const UNKNOWN: &str = "passkey not recognised";
const NO_LEECH: &str = "downloading is disabled";
const OVER_CAP: &str = "too many clients";

/// Every key form of a user (a passkey from the file, one set through the API,
/// stateless keys of the current and of a retired version) is held to that user's
/// restrictions (disabled, seeding only, retired versions, the peer cap, deleted),
/// over UDP, HTTP and WebTorrent.
#[test]
fn every_key_form_is_held_to_its_users_restrictions_on_every_protocol() {
    let site = Site::start(
        "matrix",
        &format!("17 {SEVENTEEN} noleech\n18 - version=2 peers=1\n19 {NINETEEN} disabled\n"),
        b"0123456789abcdef0123456789abcdef an operator's secret\n",
    );
    let (s17_0, s18_1, s18_2, s19_0, s20_0) = (
        site.stateless(17, 0),
        site.stateless(18, 1),
        site.stateless(18, 2),
        site.stateless(19, 0),
        site.stateless(20, 0),
    );
    // Seeding only: the file key and the stateless key alike.
    expect(
        &site,
        "17 file key, leeching",
        &leech(SEVENTEEN),
        Some(NO_LEECH),
    );
    expect(
        &site,
        "17 stateless, leeching",
        &leech(&s17_0),
        Some(NO_LEECH),
    );
    expect(&site, "17 stateless, seeding", &seed(&s17_0, 1), None);
    // Disabled: the file key and the stateless key alike.
    expect(&site, "19 file key", &seed(NINETEEN, 2), Some(DISABLED));
    expect(&site, "19 stateless", &seed(&s19_0, 2), Some(DISABLED));
    // A retired version; the cap of one client per torrent, per protocol.
    expect(&site, "18 retired version", &seed(&s18_1, 3), Some(UNKNOWN));
    expect(&site, "18 current version", &seed(&s18_2, 3), None);
    expect(&site, "18 second client", &seed(&s18_2, 4), Some(OVER_CAP));
    // User 20 through the API: a passkey; then disabled without naming the key.
    let (status, _) = site.admin(
        "PUT",
        "/v1/users/20",
        &format!(r#"{{"passkey":"{TWENTY}"}}"#),
    );
    assert_eq!(status, "HTTP/1.1 201 Created");
    expect(&site, "20 API key", &leech(TWENTY), None);
    expect(&site, "20 stateless", &seed(&s20_0, 5), None);
    site.admin("PUT", "/v1/users/20", r#"{"disabled":true}"#);
    expect(
        &site,
        "20 API key, disabled",
        &seed(TWENTY, 6),
        Some(DISABLED),
    );
    expect(
        &site,
        "20 stateless, disabled",
        &seed(&s20_0, 6),
        Some(DISABLED),
    );
    let (_, user) = site.admin("GET", "/v1/users/20", "");
    assert!(user.contains(r#""has_passkey":true"#), "{user}");
    site.admin("PUT", "/v1/users/20", r#"{"disabled":false}"#);
    expect(&site, "20 API key, enabled again", &leech(TWENTY), None);
    // User 18 gets a passkey and is disabled in one PUT: the retired version stays
    // retired, every other key is disabled.
    site.admin(
        "PUT",
        "/v1/users/18",
        r#"{"passkey":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb18","disabled":true}"#,
    );
    expect(
        &site,
        "18 retired, disabled",
        &seed(&s18_1, 7),
        Some(UNKNOWN),
    );
    expect(
        &site,
        "18 current, disabled",
        &seed(&s18_2, 7),
        Some(DISABLED),
    );
    expect(
        &site,
        "18 API key, disabled",
        &seed("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb18", 7),
        Some(DISABLED),
    );
    // Deleted: no key of theirs works, stateless keys included.
    let (status, _) = site.admin("DELETE", "/v1/users/18", "");
    assert_eq!(status, "HTTP/1.1 200 OK");
    expect(
        &site,
        "18 deleted, stateless",
        &seed(&s18_2, 8),
        Some(UNKNOWN),
    );
    expect(
        &site,
        "18 deleted, API key",
        &seed("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbb18", 8),
        Some(UNKNOWN),
    );
    // A user nobody registered: stateless keys are unrestricted.
    expect(
        &site,
        "42 stateless, leeching",
        &leech(&site.stateless(42, 9)),
        None,
    );
    site.stop(&[SEVENTEEN, NINETEEN, TWENTY, &s18_2, &s20_0]);
}
