//! The `shoal_udp` binary as an operator uses it: CLI, config files, signals.

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use shoal_udp_protocol::AnnounceEvent;
use shoal_udp_protocol::Response;
use support::*;

const BINARY: &str = env!("CARGO_BIN_EXE_shoal_udp");

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("shoal-udp-bin-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(args: &[&str]) -> Output {
    Command::new(BINARY).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A running `shoal_udp` child, killed on drop if still running.
struct Tracker {
    child: Child,
    addrs: Vec<SocketAddr>,
    log: mpsc::Receiver<String>,
}

impl Tracker {
    /// Starts the binary with `config` and waits until it logs every address it listens on.
    fn start(config: &Path, expected_addrs: usize) -> Self {
        let mut child = Command::new(BINARY)
            .arg("-c")
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (sender, log) = mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut tracker = Self {
            child,
            addrs: Vec::new(),
            log,
        };
        while tracker.addrs.len() < expected_addrs {
            let line = tracker
                .next_line(Duration::from_secs(10))
                .expect("the tracker logs its addresses");
            if let Some(addr) = line.split("listening on udp://").nth(1) {
                tracker.addrs.push(addr.trim().parse().unwrap());
            }
        }
        tracker
    }

    fn next_line(&self, timeout: Duration) -> Option<String> {
        self.log.recv_timeout(timeout).ok()
    }

    /// Waits for a log line containing `needle`.
    fn wait_for_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Some(line) = self.next_line(deadline.saturating_duration_since(Instant::now())) {
            if line.contains(needle) {
                return line;
            }
        }
        panic!("no log line containing {needle:?}");
    }

    /// Sends SIGUSR1 until the tracker answers with a line containing `needle`: one
    /// sent while it is still starting finds nothing to reload yet.
    fn reload(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            self.signal(libc::SIGUSR1);
            while let Some(line) =
                self.next_line(deadline.saturating_duration_since(Instant::now()))
            {
                if line.contains(needle) {
                    return line;
                }
                if line.contains("nothing to reload (yet)") {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no log line containing {needle:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill takes plain integers; the pid is our own child's.
        let result = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(result, 0);
    }

    /// Waits for the process to exit; returns its status.
    fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the tracker did not exit within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The default config with loopback addresses on free ports.
fn loopback_config_text() -> String {
    let output = run(&["-p"]);
    assert!(output.status.success());
    text(&output.stdout)
        .replace(
            "address_ipv4 = \"0.0.0.0:6969\"",
            "address_ipv4 = \"127.0.0.1:0\"",
        )
        .replace("use_ipv6 = true", "use_ipv6 = false")
}

#[test]
fn help_version_and_usage_errors() {
    let help = run(&["--help"]);
    assert!(help.status.success());
    assert!(text(&help.stdout).contains("-p, --print-default-config"));
    let version = run(&["-V"]);
    assert_eq!(
        text(&version.stdout).trim(),
        format!("shoal_udp {}", env!("CARGO_PKG_VERSION"))
    );
    let bad = run(&["--frobnicate"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("unexpected argument \"--frobnicate\""));
}

#[test]
fn printed_default_config_round_trips() {
    let dir = temp_dir("round-trip");
    let printed = run(&["-p"]);
    assert!(printed.status.success());
    let path = dir.join("c.toml");
    std::fs::write(&path, &printed.stdout).unwrap();
    let effective = run(&["-c", path.to_str().unwrap(), "-P"]);
    assert!(effective.status.success(), "{}", text(&effective.stderr));
    assert_eq!(text(&effective.stdout), text(&printed.stdout));
    // Every key is documented: each `key = value` line follows a comment.
    let printed = text(&printed.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.contains(" = ") && !line.starts_with('#') {
            assert!(lines[i - 1].starts_with('#'), "undocumented key: {line}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_misspelt_key_fails_with_its_name_and_file() {
    let dir = temp_dir("typo");
    let path = dir.join("typo.toml");
    std::fs::write(&path, "sokcet_workers = 2\n").unwrap();
    let output = run(&["-c", path.to_str().unwrap()]);
    assert_eq!(
        output.status.code(),
        Some(i32::from(shoal_common::EXIT_NOT_STARTED))
    );
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("line 1: unknown key `sokcet_workers`; did you mean `socket_workers`?"),
        "{stderr}"
    );
    assert!(stderr.contains("typo.toml"), "{stderr}");

    std::fs::write(&path, "[protocol]\nmax_peers = 0\n").unwrap();
    let stderr = text(&run(&["-c", path.to_str().unwrap()]).stderr);
    assert!(
        stderr.contains("protocol.max_peers: must be between 1 and"),
        "{stderr}"
    );

    let stderr = text(&run(&["-c", dir.join("missing.toml").to_str().unwrap()]).stderr);
    assert!(
        stderr.contains("cannot read config file") && stderr.contains("missing.toml"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn serves_reloads_on_sigusr1_and_stops_on_sigterm() {
    let dir = temp_dir("signals");
    let first = [0x01; 20];
    let second = [0x02; 20];
    let list = dir.join("allowed");
    std::fs::write(&list, hex(&first)).unwrap();
    let config = loopback_config_text()
        .replace("mode = \"off\"", "mode = \"allow\"")
        .replace("path = \"\"", &format!("path = \"{}\"", list.display()));
    let path = dir.join("c.toml");
    std::fs::write(&path, config).unwrap();

    let mut tracker = Tracker::start(&path, 1);
    let mut client = Client::new(tracker.addrs[0]);
    let id = client.connect();
    assert_eq!(client.announce(id, Announce::new(first, 1)).leechers, 1);
    client.send_announce(id, Announce::new(second, 1));
    assert!(matches!(client.recv(), Response::Error(e) if e.message == "info hash not allowed"));

    std::fs::write(&list, format!("{}\n{}\n", hex(&first), hex(&second))).unwrap();
    tracker.reload("access list reloaded");
    assert_eq!(
        client
            .announce(id, Announce::new(second, 1).event(AnnounceEvent::None))
            .leechers,
        1
    );

    std::fs::write(&list, "garbage\n").unwrap();
    tracker.signal(libc::SIGUSR1);
    let line = tracker.wait_for_log("access list not reloaded");
    assert!(line.contains("line 1"), "{line}");
    assert_eq!(
        client.announce(id, Announce::new(second, 2)).leechers,
        2,
        "old list kept"
    );

    let started = Instant::now();
    tracker.signal(libc::SIGTERM);
    let status = tracker.wait_exit(Duration::from_secs(3));
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "shutdown took {:?}",
        started.elapsed()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn listens_on_ipv4_and_ipv6_loopback() {
    if !shoal_common::testing::ipv6_loopback() {
        shoal_common::testing::skip("ipv6", "::1 cannot be bound");
        return;
    }
    let dir = temp_dir("dual");
    let config = loopback_config_text()
        .replace("use_ipv6 = false", "use_ipv6 = true")
        .replace("address_ipv6 = \"[::]:6969\"", "address_ipv6 = \"[::1]:0\"");
    let path = dir.join("c.toml");
    std::fs::write(&path, config).unwrap();
    let tracker = Tracker::start(&path, 2);
    for addr in &tracker.addrs {
        let mut client = Client::new(*addr);
        let id = client.connect();
        // 1,800 s, moved by up to 10% (jitter).
        let interval = client.announce(id, Announce::new([0x44; 20], 1)).interval;
        assert!((1620..=1980).contains(&interval), "{interval}");
    }
    assert!(tracker.addrs[1].is_ipv6());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn drops_privileges_after_binding() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        shoal_common::testing::skip("root", "dropping privileges needs root");
        return;
    }
    let dir = temp_dir("privileges");
    let config =
        loopback_config_text().replace("drop_privileges = false", "drop_privileges = true");
    let path = dir.join("c.toml");
    std::fs::write(&path, config).unwrap();
    let tracker = Tracker::start(&path, 1);
    tracker.wait_for_log("dropped privileges: running as user nobody");
    let status = std::fs::read_to_string(format!("/proc/{}/status", tracker.child.id())).unwrap();
    let uid_line = status
        .lines()
        .find(|line| line.starts_with("Uid:"))
        .unwrap();
    assert!(
        uid_line.split_whitespace().skip(1).all(|uid| uid != "0"),
        "{uid_line}"
    );
    // Still serving.
    let mut client = Client::new(tracker.addrs[0]);
    let id = client.connect();
    assert_eq!(
        client.announce(id, Announce::new([0x55; 20], 1)).leechers,
        1
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn hex(hash: &[u8; 20]) -> String {
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

/// Starts the binary on `config` and waits for a log line containing `needle`.
fn start_and_wait(config: &Path, needle: &str) -> (Tracker, String) {
    let tracker = Tracker::start(config, 1);
    let line = tracker.wait_for_log(needle);
    (tracker, line)
}

fn stop(mut tracker: Tracker) {
    tracker.signal(libc::SIGTERM);
    let status = tracker.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_restart_keeps_swarms_download_counts_and_connection_ids() {
    let dir = temp_dir("state");
    let state = dir.join("state");
    std::fs::create_dir(&state).unwrap();
    let config = loopback_config_text().replace(
        "directory = \"\"",
        &format!("directory = \"{}\"", state.display()),
    );
    assert!(config.contains(&state.display().to_string()), "{config}");
    // Written by three swarm worker threads, read back by a socket worker that keeps
    // the torrents itself: the snapshot does not depend on the sharding.
    let threaded = dir.join("threaded.toml");
    std::fs::write(
        &threaded,
        config.replace("swarm_workers = 0", "swarm_workers = 3"),
    )
    .unwrap();
    let path = dir.join("c.toml");
    std::fs::write(&path, config).unwrap();
    let torrent = [0x5a; 20];

    let (tracker, _) = start_and_wait(&threaded, "state: no snapshot");
    let mut seeder = Client::new(tracker.addrs[0]);
    let seeder_id = seeder.connect();
    seeder.announce(seeder_id, Announce::new(torrent, 7001));
    seeder.announce(
        seeder_id,
        Announce::new(torrent, 7001)
            .seeding()
            .event(AnnounceEvent::Completed),
    );
    let mut leecher = Client::new(tracker.addrs[0]);
    let leecher_id = leecher.connect();
    let reply = leecher.announce(leecher_id, Announce::new(torrent, 7002));
    assert_eq!((reply.seeders, reply.leechers), (1, 1));
    stop(tracker);
    assert!(state.join("udp.snapshot").is_file());

    // The new process answers the old connection id, with the same swarm and count.
    let (tracker, line) = start_and_wait(&path, "state: restored");
    assert!(line.contains("1 torrents and 2 peers"), "{line}");
    let mut old_client = Client::new(tracker.addrs[0]);
    let stats = old_client.scrape_stats(leecher_id, torrent);
    assert_eq!(
        (stats.seeders, stats.leechers, stats.completed),
        (1, 1, 1),
        "counts kept, and the connection id issued before the restart accepted"
    );
    let mut newcomer = Client::new(tracker.addrs[0]);
    let id = newcomer.connect();
    let reply = newcomer.announce(id, Announce::new(torrent, 7003));
    let mut ports: Vec<u16> = reply.peers.iter().map(|peer| peer.port()).collect();
    ports.sort_unstable();
    assert_eq!(ports, [7001, 7002], "the peers from before the restart");
    stop(tracker);

    // A damaged snapshot is refused, kept aside, and the tracker starts empty.
    let file = state.join("udp.snapshot");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let (tracker, line) = start_and_wait(&path, "state: refused");
    assert!(
        line.contains("checksum") && line.contains("udp.snapshot"),
        "{line}"
    );
    let kept: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("udp.snapshot.refused-"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let mut client = Client::new(tracker.addrs[0]);
    let id = client.connect();
    let stats = client.scrape_stats(id, torrent);
    assert_eq!((stats.seeders, stats.leechers, stats.completed), (0, 0, 0));
    stop(tracker);
    std::fs::remove_dir_all(&dir).unwrap();
}
