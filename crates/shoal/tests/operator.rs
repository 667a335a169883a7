//! What an operator sees of `shoal -c shoal.toml`: every tracker from one file, the
//! monitoring endpoint moving with traffic, systemd's notifications, the environment
//! overriding the file.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BINARY: &str = env!("CARGO_BIN_EXE_shoal");

/// Every tracker on loopback, free ports, metrics on.
const CONFIG: &str = r#"
[metrics]
enabled = true
address = "127.0.0.1:0"
[udp.network]
address_ipv4 = "127.0.0.1:0"
address_ipv6 = "[::1]:0"
[http.network]
address_ipv4 = "127.0.0.1:0"
use_ipv6 = false
[ws.network]
address_ipv4 = "127.0.0.1:0"
use_ipv6 = false
"#;

struct Shoal {
    child: Child,
    lines: mpsc::Receiver<String>,
    dir: PathBuf,
}

impl Shoal {
    fn start(name: &str, config: &str, env: &[(&str, &str)]) -> Self {
        Self::start_with(name, config, env, |_| {})
    }

    /// [`start`](Self::start), with `prepare` setting up the command first.
    fn start_with(
        name: &str,
        config: &str,
        env: &[(&str, &str)],
        prepare: impl FnOnce(&mut Command),
    ) -> Self {
        let dir =
            std::env::temp_dir().join(format!("shoal-operator-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("shoal.toml");
        std::fs::write(&path, config).unwrap();
        let mut command = Command::new(BINARY);
        command
            .arg("-c")
            .arg(&path)
            .env_remove("SHOAL_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (key, value) in env {
            command.env(key, value);
        }
        prepare(&mut command);
        let mut child = command.spawn().unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines, dir }
    }

    /// The first log line containing `needle`, within 10 s.
    fn line_with(&self, needle: &str) -> String {
        self.line_within(needle, Duration::from_secs(10))
    }

    /// The first log line containing `needle`, within `wait`.
    fn line_within(&self, needle: &str, wait: Duration) -> String {
        let deadline = Instant::now() + wait;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return line,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("no log line with {needle:?}");
    }

    /// The address after `prefix` in the first log line that has it.
    fn address_after(&self, prefix: &str) -> SocketAddr {
        let line = self.line_with(prefix);
        let rest = line.split(prefix).nth(1).unwrap();
        rest.split(['/', ' ']).next().unwrap().parse().unwrap()
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill takes plain integers; the pid is our own child's.
        let result = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(result, 0);
    }

    /// Stops it with SIGTERM, checks it exits cleanly, and returns the log lines not
    /// read yet.
    fn stop(mut self) -> Vec<String> {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{status:?}");
                break;
            }
            assert!(Instant::now() < deadline, "shoal did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut rest = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            rest.push(line);
        }
        rest
    }
}

impl Drop for Shoal {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `GET path` on the monitoring endpoint: status line and body.
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The value of the sample line that starts with `series` (name and labels).
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in\n{metrics}"))
}

/// A BEP 15 connect request with `transaction_id`.
fn connect_request(transaction_id: u32) -> Vec<u8> {
    let mut connect = 0x0417_2710_1980u64.to_be_bytes().to_vec();
    connect.extend_from_slice(&0u32.to_be_bytes());
    connect.extend_from_slice(&transaction_id.to_be_bytes());
    connect
}

fn udp_connect(tracker: SocketAddr) {
    let local = if tracker.is_ipv6() {
        "[::1]:0"
    } else {
        "127.0.0.1:0"
    };
    let socket = UdpSocket::bind(local).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let connect = connect_request(9);
    socket.send_to(&connect, tracker).unwrap();
    let mut reply = [0u8; 32];
    assert_eq!(socket.recv(&mut reply).unwrap(), 16);
}

fn http_announce(tracker: SocketAddr) {
    let mut stream = TcpStream::connect(tracker).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET /announce?info_hash=%AA%AA%AA%AA%AA%AA%AA%AA%AA%AA%AA%AA%AA%AA%AA%AA%AA%AA%AA%AA\
         &peer_id=-TEST00-aaaaaaaaaaaa&port=6881&left=0&compact=1 HTTP/1.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

#[test]
fn one_file_runs_every_tracker_and_the_metrics_move_with_traffic() {
    let shoal = Shoal::start("metrics", CONFIG, &[]);
    let (first, second) = (
        shoal.address_after("listening on udp://"),
        shoal.address_after("listening on udp://"),
    );
    let (udp, udp6) = if first.is_ipv4() {
        (first, second)
    } else {
        (second, first)
    };
    assert!(udp6.is_ipv6(), "{udp6}");
    let http = shoal.address_after("listening on http://");
    let ws = shoal.address_after("listening on ws://");
    let monitor = shoal.address_after("health on http://");

    let (status, body) = get(monitor, "/health");
    assert_eq!(
        (status.as_str(), body.as_str()),
        ("HTTP/1.1 200 OK", "ok\n")
    );
    let (_, before) = get(monitor, "/metrics");
    assert_eq!(
        sample(
            &before,
            r#"shoal_requests_total{protocol="udp",action="connect",ip_version="4"}"#
        ),
        0.0
    );

    udp_connect(udp);
    udp_connect(udp);
    udp_connect(udp6);
    http_announce(http);
    // Workers add their counts into the shared counters after each round of work, so
    // the last reply may be out a moment before it is counted.
    let deadline = Instant::now() + Duration::from_secs(5);
    let after = loop {
        let (status, after) = get(monitor, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK");
        let http = r#"shoal_peers{protocol="http"}"#;
        let udp = r#"shoal_responses_total{protocol="udp",action="connect",ip_version="6"}"#;
        let announces = r#"shoal_requests_total{protocol="http",action="announce",ip_version="4"}"#;
        let timed = r#"shoal_request_duration_seconds_count{protocol="http"}"#;
        let moved = sample(&after, http) == 1.0
            && sample(&after, udp) == 1.0
            && sample(&after, announces) == 1.0
            && sample(&after, timed) == 1.0;
        if moved || Instant::now() > deadline {
            break after;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        after.contains("# TYPE shoal_requests_total counter"),
        "{after}"
    );
    assert_eq!(
        sample(
            &after,
            r#"shoal_announces_by_client_total{protocol="http",client="other"}"#
        ),
        1.0
    );
    // By IP version: two connects over IPv4, one over IPv6.
    for (series, expected) in [
        (
            r#"shoal_requests_total{protocol="udp",action="connect",ip_version="4"}"#,
            2.0,
        ),
        (
            r#"shoal_requests_total{protocol="udp",action="connect",ip_version="6"}"#,
            1.0,
        ),
        (
            r#"shoal_responses_total{protocol="udp",action="connect",ip_version="4"}"#,
            2.0,
        ),
        (
            r#"shoal_responses_total{protocol="udp",action="connect",ip_version="6"}"#,
            1.0,
        ),
        (
            r#"shoal_requests_total{protocol="http",action="announce",ip_version="4"}"#,
            1.0,
        ),
        (
            r#"shoal_requests_total{protocol="http",action="announce",ip_version="6"}"#,
            0.0,
        ),
        (
            r#"shoal_responses_total{protocol="http",action="announce",ip_version="4"}"#,
            1.0,
        ),
        // 16-byte connect requests and replies.
        (r#"shoal_received_bytes_total{protocol="udp"}"#, 48.0),
        (r#"shoal_sent_bytes_total{protocol="udp"}"#, 48.0),
        // Every request timed, each under the last bound.
        (
            r#"shoal_request_duration_seconds_count{protocol="udp"}"#,
            3.0,
        ),
        (
            r#"shoal_request_duration_seconds_bucket{le="1.0",protocol="udp"}"#,
            3.0,
        ),
        (
            r#"shoal_request_duration_seconds_count{protocol="http"}"#,
            1.0,
        ),
    ] {
        assert_eq!(sample(&after, series), expected, "{series} in\n{after}");
    }
    // The HTTP announce's bytes, both ways, as they crossed the socket.
    assert!(sample(&after, r#"shoal_received_bytes_total{protocol="http"}"#) > 100.0);
    assert!(sample(&after, r#"shoal_sent_bytes_total{protocol="http"}"#) > 50.0);
    assert_eq!(sample(&after, r#"shoal_torrents{protocol="http"}"#), 1.0);
    assert_eq!(sample(&after, r#"shoal_peers{protocol="http"}"#), 1.0);
    assert_eq!(sample(&after, r#"shoal_torrents{protocol="ws"}"#), 0.0);
    // The process's own figures, under the names alert rules everywhere use.
    assert!(sample(&after, "process_resident_memory_bytes{}") > 1e6);
    assert!(
        sample(&after, "process_virtual_memory_bytes{}")
            >= sample(&after, "process_resident_memory_bytes{}")
    );
    // Three trackers' sockets, the metrics listener and the journal at least.
    let open = sample(&after, "process_open_fds{}");
    assert!(open >= 5.0, "{open} descriptors open");
    assert!(sample(&after, "process_max_fds{}") >= open);
    assert!(sample(&after, "process_cpu_seconds_total{}") >= 0.0);
    assert!(sample(&after, "process_start_time_seconds{}") > 1.5e9);
    // The memory thread runs (on by default) and counts its returns; nothing here
    // grows the process enough for one.
    assert_eq!(sample(&after, "shoal_memory_returns_total{}"), 0.0);
    assert_eq!(sample(&after, "shoal_memory_returned_bytes_total{}"), 0.0);
    let threads = std::fs::read_dir(format!("/proc/{}/task", shoal.child.id())).unwrap();
    let names: Vec<String> = threads
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .collect();
    assert!(names.iter().any(|name| name == "memory"), "{names:?}");

    // The WebTorrent tracker serves on its own address from the same process.
    let mut stream = TcpStream::connect(ws).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(b"GET /health HTTP/1.1\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");

    let (_, json) = get(monitor, "/stats.json");
    for key in [
        "\"protocol\":\"udp\"",
        "\"protocol\":\"http\"",
        "\"protocol\":\"ws\"",
        "\"uptime_seconds\"",
        "\"largest_swarms\"",
        "\"latency_seconds\"",
        // The HTTP announce's peer id (-TEST00-) is no client the tracker knows.
        "\"clients\":[{\"announces\":1,\"client\":\"other\"}]",
    ] {
        assert!(json.contains(key), "{key} missing from {json}");
    }
    let (status, page) = get(monitor, "/stats");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(page.contains("<table>"), "{page}");
    assert_eq!(get(monitor, "/nothing").0, "HTTP/1.1 404 Not Found");
    shoal.stop();
}

#[test]
fn systemd_hears_ready_reloading_and_stopping() {
    let dir = std::env::temp_dir().join(format!("shoal-notify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket_path = dir.join("notify.sock");
    let _ = std::fs::remove_file(&socket_path);
    let systemd = UnixDatagram::bind(&socket_path).unwrap();
    systemd
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let next = || {
        let mut buffer = [0u8; 512];
        let n = systemd.recv(&mut buffer).expect("a notification");
        String::from_utf8_lossy(&buffer[..n]).into_owned()
    };

    let shoal = Shoal::start(
        "notify",
        CONFIG,
        &[("NOTIFY_SOCKET", socket_path.to_str().unwrap())],
    );
    // READY=1 only once every tracker is bound and serving.
    let ready = next();
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    assert!(
        ready.contains("UDP tracker, HTTP tracker, WebTorrent tracker"),
        "{ready}"
    );
    let udp = shoal.address_after("listening on udp://");
    udp_connect(udp);

    shoal.signal(libc::SIGUSR1);
    let reloading = next();
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading}"
    );
    assert!(next().starts_with("READY=1"));
    // `kill -HUP` reloads as well, instead of ending the process; the status line
    // still says what is served, then when it reloaded and what (no access list or
    // certificate here: nothing).
    shoal.signal(libc::SIGHUP);
    assert!(next().starts_with("RELOADING=1\n"));
    let again = next();
    assert!(
        again.starts_with(&format!("{ready}; reloaded "))
            && again.ends_with(" UTC: nothing to reload"),
        "{again}"
    );
    udp_connect(udp);

    shoal.stop();
    assert_eq!(next(), "STOPPING=1");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_environment_overrides_the_file_and_mistakes_are_named() {
    // Only the UDP tracker, from the environment; the monitoring endpoint's own
    // module quieted by SHOAL_LOG while the rest logs at info.
    let shoal = Shoal::start(
        "env",
        CONFIG,
        &[
            ("SHOAL__HTTP__ENABLED", "false"),
            ("SHOAL__WS__ENABLED", "false"),
            ("SHOAL_LOG", "info,shoal_process::monitor=warn"),
        ],
    );
    shoal.address_after("listening on udp://");
    let rest = shoal.stop();
    assert!(
        rest.iter().any(|line| line.contains("shoal stopped")),
        "{rest:?}"
    );
    assert!(
        !rest.iter().any(|line| line.contains("listening on http")),
        "{rest:?}"
    );
    assert!(
        !rest.iter().any(|line| line.contains("health on")),
        "{rest:?}"
    );

    let output = Command::new(BINARY)
        .env("SHOAL__UDP__NETWORK__ADRESS_IPV4", "127.0.0.1:1")
        .arg("-P")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("SHOAL__UDP__NETWORK__ADRESS_IPV4") && stderr.contains("adress_ipv4"),
        "{stderr}"
    );

    let printed = Command::new(BINARY)
        .env("SHOAL__UDP__PROTOCOL__ANNOUNCE_INTERVAL", "900")
        .arg("-P")
        .output()
        .unwrap();
    assert!(printed.status.success());
    let text = String::from_utf8_lossy(&printed.stdout);
    let udp_protocol = text.split("[udp.protocol]").nth(1).unwrap();
    assert!(udp_protocol.contains("announce_interval = 900"), "{text}");
}

/// Announces (or with `stopped`, withdraws) one peer in each of `torrents` torrents
/// of the UDP tracker at `tracker`, a window of requests at a time; returns the
/// replies that came back.
fn udp_announce_many(tracker: SocketAddr, torrents: u32, stopped: bool) -> u32 {
    const WINDOW: u32 = 256;
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let connect = connect_request(1);
    socket.send_to(&connect, tracker).unwrap();
    let mut reply = [0u8; 1024];
    assert_eq!(socket.recv(&mut reply).unwrap(), 16);
    let connection_id = reply[8..16].to_vec();
    let mut answered = 0;
    for first in (0..torrents).step_by(WINDOW as usize) {
        let last = (first + WINDOW).min(torrents);
        for torrent in first..last {
            let mut announce = connection_id.clone();
            announce.extend_from_slice(&1u32.to_be_bytes()); // announce
            announce.extend_from_slice(&torrent.to_be_bytes()); // transaction id
            let mut info_hash = [0x5a; 20];
            info_hash[..4].copy_from_slice(&torrent.to_be_bytes());
            announce.extend_from_slice(&info_hash);
            announce.extend_from_slice(b"-TEST00-memorymemory"); // peer id
            announce.extend_from_slice(&[0; 8]); // downloaded
            announce.extend_from_slice(&100u64.to_be_bytes()); // left: a leecher
            announce.extend_from_slice(&[0; 8]); // uploaded
            let event: u32 = if stopped { 3 } else { 2 };
            announce.extend_from_slice(&event.to_be_bytes());
            announce.extend_from_slice(&[0; 8]); // ip (the source's), key
            announce.extend_from_slice(&0u32.to_be_bytes()); // num_want
            announce.extend_from_slice(&6881u16.to_be_bytes());
            socket.send_to(&announce, tracker).unwrap();
        }
        for _ in first..last {
            if socket.recv(&mut reply).is_err() {
                break;
            }
            answered += 1;
        }
    }
    answered
}

/// Polls the monitoring endpoint until `series` satisfies `wanted`, for 20 s.
fn wait_for_sample(monitor: SocketAddr, series: &str, wanted: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let value = sample(&get(monitor, "/metrics").1, series);
        if wanted(value) {
            return value;
        }
        assert!(Instant::now() < deadline, "{series} stayed at {value}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn memory_freed_after_a_busy_spell_goes_back_to_the_system() {
    // A spell of 100,000 torrents, each with a peer that then leaves (and the empty
    // torrents cleaned away, a pass a second here). The memory
    // thread looks every 10 s and gives memory back once the size has settled for
    // 30 s and the peers are at half their peak or fewer: so about 40 s after the
    // spell, and not during it.
    const TORRENTS: u32 = 100_000;
    let config = r#"
[metrics]
enabled = true
address = "127.0.0.1:0"
[memory]
return_after_growth_mib = 1
[udp.network]
address_ipv4 = "127.0.0.1:0"
use_ipv6 = false
[udp.per_ip]
requests_per_second = 0
[udp.statistics]
interval = 0
[udp.cleaning]
interval = 1
[http]
enabled = false
[ws]
enabled = false
"#;
    let shoal = Shoal::start("memory", config, &[]);
    let udp = shoal.address_after("listening on udp://");
    let monitor = shoal.address_after("health on http://");

    let answered = udp_announce_many(udp, TORRENTS, false);
    assert!(
        answered > TORRENTS * 9 / 10,
        "{answered} announces answered"
    );
    let peak = wait_for_sample(monitor, "shoal_peers{protocol=\"udp\"}", |peers| {
        peers >= f64::from(answered)
    });
    udp_announce_many(udp, TORRENTS, true);
    wait_for_sample(monitor, "shoal_peers{protocol=\"udp\"}", |peers| {
        peers <= peak / 10.0
    });
    let metrics = get(monitor, "/metrics").1;
    assert_eq!(
        sample(&metrics, "shoal_memory_returns_total{}"),
        0.0,
        "nothing given back while the spell went on"
    );

    let line = shoal.line_within(
        "gave freed memory back to the system",
        Duration::from_secs(60),
    );
    // "resident A MiB -> B MiB in T ms"
    let sizes: Vec<u64> = line
        .split("resident ")
        .nth(1)
        .unwrap()
        .split(' ')
        .filter_map(|word| word.parse().ok())
        .collect();
    // The empty torrents were cleaned away (a pass a second here), so there is
    // memory to give back: about 21 MiB resident became 10 when this was written.
    assert!(sizes[1] < sizes[0], "{line}");
    let metrics = get(monitor, "/metrics").1;
    assert_eq!(sample(&metrics, "shoal_memory_returns_total{}"), 1.0);
    assert!(sample(&metrics, "shoal_memory_returned_bytes_total{}") >= 0.0);
    shoal.stop();
}

/// The packaged conffiles are short (dpkg asks about an edited conffile on every
/// upgrade that changes it, so the reference of every key is not one): each leaves
/// every key at its default, and its commented examples, once uncommented, are keys
/// that exist and show their defaults.
#[test]
fn the_packaged_configs_change_no_default_and_their_examples_are_the_defaults() {
    let packaging = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging");
    let dir = std::env::temp_dir().join(format!("shoal-packaged-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (file, tracker) in [
        ("shoal.toml", None),
        ("udp.toml", Some("udp")),
        ("http.toml", Some("http")),
        ("ws.toml", Some("ws")),
    ] {
        let run = |args: &[&str]| {
            let output = Command::new(BINARY)
                .args(tracker)
                .args(args)
                .env_remove("SHOAL_LOG")
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "{file} {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8(output.stdout).unwrap()
        };
        let defaults = run(&["-p"]);
        let packaged = packaging.join(file);
        let text = std::fs::read_to_string(&packaged).unwrap();
        assert!(text.lines().count() < 80, "{file} is not short");
        assert!(
            text.contains("/usr/share/doc/shoal/reference/"),
            "{file} names no reference"
        );
        assert_eq!(
            run(&["-c", packaged.to_str().unwrap(), "-P"]),
            defaults,
            "{file} changes a default"
        );
        // The examples, uncommented: "# [section]" and "# key = value" lines, without
        // their trailing comments.
        let examples: String = text
            .lines()
            .filter_map(|line| line.strip_prefix("# "))
            .filter(|rest| {
                rest.starts_with('[')
                    || rest.split_once(" = ").is_some_and(|(key, _)| {
                        key.chars()
                            .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
                    })
            })
            .map(|rest| format!("{}\n", rest.split("  #").next().unwrap().trim_end()))
            .collect();
        assert!(examples.lines().count() >= 5, "{file}: {examples}");
        let uncommented = dir.join(file);
        std::fs::write(&uncommented, &examples).unwrap();
        assert_eq!(
            run(&["-c", uncommented.to_str().unwrap(), "-P"]),
            defaults,
            "{file}'s examples are not the defaults:\n{examples}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `GET target` on the HTTP tracker: the response body.
fn http_get(tracker: SocketAddr, target: &str) -> Vec<u8> {
    let mut stream = TcpStream::connect(tracker).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(stream, "GET {target} HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let at = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    response.split_off(at + 4)
}

#[test]
fn a_restarted_process_keeps_its_http_swarms() {
    let state = std::env::temp_dir().join(format!("shoal-operator-state-{}", std::process::id()));
    std::fs::create_dir_all(&state).unwrap();
    let config = format!(
        "{CONFIG}[udp.state]\ndirectory = \"{dir}\"\n[http.state]\ndirectory = \"{dir}\"\n",
        dir = state.display()
    );
    let hash = "%AA".repeat(20);
    let shoal = Shoal::start("state-1", &config, &[]);
    let http = shoal.address_after("listening on http://");
    // A leecher that completes: one seeder, one download.
    for event in ["started", "completed"] {
        let left = if event == "started" { 100 } else { 0 };
        http_get(
            http,
            &format!(
                "/announce?info_hash={hash}&peer_id=-TEST00-aaaaaaaaaaaa&port=6881&left={left}&event={event}&compact=1"
            ),
        );
    }
    let rest = shoal.stop();
    assert!(
        rest.iter()
            .any(|line| line.contains("state: wrote") && line.contains("http.snapshot")),
        "{rest:?}"
    );
    assert!(state.join("udp.snapshot").is_file());

    let shoal = Shoal::start("state-2", &config, &[]);
    // The addresses are logged as they are bound; the torrents come back as the
    // workers start.
    let http = shoal.address_after("listening on http://");
    let line = shoal.line_with("to the http tracker");
    assert!(line.contains("restored 1 torrents and 1 peers"), "{line}");
    let monitor = shoal.address_after("health on http://");
    // Counted from the start, before any request or cleaning pass.
    let (_, metrics) = get(monitor, "/metrics");
    assert_eq!(sample(&metrics, r#"shoal_torrents{protocol="http"}"#), 1.0);
    assert_eq!(sample(&metrics, r#"shoal_peers{protocol="http"}"#), 1.0);
    let scrape = http_get(http, &format!("/scrape?info_hash={hash}"));
    let scrape = String::from_utf8_lossy(&scrape);
    assert!(
        scrape.contains("8:completei1e") && scrape.contains("10:downloadedi1e"),
        "{scrape}"
    );
    // A newcomer is sent the peer from before the restart.
    let reply = http_get(
        http,
        &format!(
            "/announce?info_hash={hash}&peer_id=-TEST00-bbbbbbbbbbbb&port=7000&left=5&compact=1"
        ),
    );
    let peers = b"5:peers6:";
    let at = reply
        .windows(peers.len())
        .position(|w| w == peers)
        .unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&reply)));
    assert_eq!(
        &reply[at + peers.len()..at + peers.len() + 6],
        &[127, 0, 0, 1, 0x1a, 0xe1]
    );
    shoal.stop();
    std::fs::remove_dir_all(&state).unwrap();
}

/// The HTTP and WebTorrent trackers of one process share its locked-memory limit: with
/// room for one tracker's io_uring buffers and not for two, the first takes io_uring
/// and the second, under `auto`, serves with epoll and says which tracker and why
/// (each checking only its own need, both took io_uring and the second then ran out of
/// locked memory inside glommio).
#[test]
fn trackers_share_the_locked_memory_limit_and_the_one_left_out_serves_with_epoll() {
    use std::os::unix::process::CommandExt as _;
    // Each tracker: 2 socket workers × 1 MiB; with glommio's 512 KiB, one needs
    // 2.5 MiB and both 4.5 MiB. The limit: 3 MiB, soft and hard.
    let config = r#"
[udp]
enabled = false
[http]
socket_workers = 2
[http.limits]
io_memory = 1048576
[http.network]
address_ipv4 = "127.0.0.1:0"
use_ipv6 = false
io_backend = "auto"
[ws]
socket_workers = 2
[ws.limits]
io_memory = 1048576
[ws.network]
address_ipv4 = "127.0.0.1:0"
use_ipv6 = false
io_backend = "auto"
"#;
    let limit = libc::rlimit {
        rlim_cur: 3 << 20,
        rlim_max: 3 << 20,
    };
    let shoal = Shoal::start_with("memlock-shared", config, &[], move |command| {
        // SAFETY: one setrlimit between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    });
    let http_line = shoal.line_with("http: socket workers run on");
    let ws_warning = shoal.line_with("ws: serving with epoll");
    assert!(http_line.contains("io_uring"), "{http_line}");
    assert!(
        ws_warning.contains("plus 2048 KiB the process's other io_uring trackers hold"),
        "{ws_warning}"
    );
    let http = shoal.address_after("listening on http://");
    let ws = shoal.address_after("listening on ws://");
    for addr in [http, ws] {
        TcpStream::connect(addr).unwrap();
    }
    let rest = shoal.stop();
    assert!(
        !rest.iter().any(|line| line.contains("OutOfMemory")),
        "{rest:#?}"
    );
}

/// `method path` with `body` on the admin API, with `token`: status line and body.
fn admin(addr: SocketAddr, token: &str, method: &str, path: &str, body: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (
        head.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    )
}

#[test]
fn the_admin_api_changes_users_live_for_every_private_tracker() {
    use std::os::unix::fs::PermissionsExt as _;
    const TOKEN: &str = "f1e2d3c4b5a69788f1e2d3c4b5a69788";
    const ALICE: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
    const BOB: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90";
    let hash = "aa".repeat(20);
    let files =
        std::env::temp_dir().join(format!("shoal-operator-admin-files-{}", std::process::id()));
    std::fs::create_dir_all(&files).unwrap();
    let (users, torrents, token) = (
        files.join("users"),
        files.join("torrents"),
        files.join("token"),
    );
    std::fs::write(&users, format!("17 {ALICE}\n")).unwrap();
    std::fs::write(&torrents, format!("{hash} 1001\n")).unwrap();
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let private = format!(
        "enabled = true\nusers_path = \"{}\"\ntorrents_path = \"{}\"\n",
        users.display(),
        torrents.display()
    );
    let config = format!(
        "[admin]\nenabled = true\naddress = \"127.0.0.1:0\"\ntoken_path = \"{}\"\nmax_body_bytes = 4096\n{CONFIG}[udp.private]\n{private}[http.private]\n{private}",
        token.display()
    );
    let shoal = Shoal::start("admin", &config, &[]);
    // Addresses are logged as they are bound, the API's once the trackers serve.
    let http = shoal.address_after("listening on http://");
    let api = shoal.address_after("admin API on http://");
    let announce = |key: &str| {
        let reply = http_get(
            http,
            &format!(
                "/{key}/announce?info_hash={}&peer_id=-TEST00-bbbbbbbbbbbb&port=7000&left=5&compact=1",
                "%AA".repeat(20)
            ),
        );
        String::from_utf8_lossy(&reply).into_owned()
    };
    assert!(announce(BOB).contains("passkey not recognised"));

    // Bob is added through the API: the HTTP tracker serves him at once, and the UDP
    // tracker, which names the same files, shares the registry.
    let (status, body) = admin(
        api,
        TOKEN,
        "PUT",
        "/v1/users/18",
        &format!(r#"{{"passkey":"{BOB}"}}"#),
    );
    assert_eq!(status, "HTTP/1.1 201 Created", "{body}");
    assert!(announce(BOB).contains("8:intervali"), "{}", announce(BOB));
    let (_, status_body) = admin(api, TOKEN, "GET", "/v1/status", "");
    assert_eq!(
        status_body.matches(r#""users":2"#).count(),
        2,
        "{status_body}"
    );

    // A reload sent for another file keeps him; the token is needed; bodies are bounded.
    shoal.signal(libc::SIGUSR1);
    shoal.line_with("reload");
    assert!(announce(BOB).contains("8:intervali"));
    let (status, _) = admin(api, "0".repeat(32).as_str(), "DELETE", "/v1/users/18", "");
    assert_eq!(status, "HTTP/1.1 401 Unauthorized");
    let (status, _) = admin(api, TOKEN, "PUT", "/v1/users/18", &"x".repeat(5000));
    assert_eq!(status, "HTTP/1.1 413 Content Too Large");
    // A crowd of silent connections does not lock the API out.
    let silent: Vec<TcpStream> = (0..300).map(|_| TcpStream::connect(api).unwrap()).collect();
    let (status, body) = admin(api, TOKEN, "DELETE", "/v1/users/18", "");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    drop(silent);
    assert!(announce(BOB).contains("passkey not recognised"));
    assert!(announce(ALICE).contains("8:intervali"));
    let rest = shoal.stop();
    assert!(
        !rest
            .iter()
            .any(|line| line.contains(BOB) || line.contains(TOKEN)),
        "{rest:?}"
    );
    std::fs::remove_dir_all(&files).unwrap();
}

/// Resident memory of `pid`, in KiB.
fn resident_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A connection from `ip` (any address of 127.0.0.0/8).
fn connect_from(ip: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((ip, 0)).into()).unwrap();
    socket.connect(&to.into()).unwrap();
    socket.into()
}

#[test]
fn the_admin_api_reads_no_strangers_body_and_bounds_bodies_in_all() {
    use std::os::unix::fs::PermissionsExt as _;
    const TOKEN: &str = "0a1b2c3d4e5f60718293a4b5c6d7e8f9";
    let files =
        std::env::temp_dir().join(format!("shoal-operator-body-files-{}", std::process::id()));
    std::fs::create_dir_all(&files).unwrap();
    let (token, list) = (files.join("token"), files.join("list"));
    std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::write(&list, format!("{}\n", "ee".repeat(20))).unwrap();
    // The body limits at their defaults.
    let config = format!(
        "[admin]\nenabled = true\naddress = \"127.0.0.1:0\"\ntoken_path = \"{}\"\n{CONFIG}\
         [udp.access_list]\nmode = \"allow\"\npath = \"{}\"\n",
        token.display(),
        list.display()
    );
    let shoal = Shoal::start("bodies", &config, &[]);
    let api = shoal.address_after("admin API on http://");
    let read_answer = |mut stream: TcpStream| {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    };

    // 128 strangers (16 from each of 8 addresses, an address's share) announcing
    // 8 MiB bodies and sending them: each refused as its head is whole, none of its
    // body kept.
    let before = resident_kib(shoal.child.id());
    let started = Instant::now();
    let strangers: Vec<TcpStream> = (0..128u8)
        .map(|n| {
            let mut stream = connect_from([127, 0, 3, 1 + n / 16], api);
            stream
                .write_all(b"PUT /v1/users/18 HTTP/1.1\r\nContent-Length: 8388608\r\n\r\n")
                .unwrap();
            // Refused already: writing the body fails part-way, or lands unread.
            let _ = stream.write_all(&[b'x'; 65536]);
            stream
        })
        .collect();
    for stream in strangers {
        let answer = read_answer(stream);
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    }
    shoal.line_with("admin API: a request from 127.0.3.1 without the right token refused");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let grown = resident_kib(shoal.child.id()).saturating_sub(before);
    assert!(grown < 16 << 10, "resident memory grew by {grown} KiB");

    // Bodies being read share a budget (8 MiB): a second 5 MiB body waits its turn.
    let head = |length: usize| {
        format!(
            "POST /v1/access-list HTTP/1.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {length}\r\n\r\n"
        )
    };
    // The documented bulk edit, 100,000 hashes, fits in the default max_body_bytes.
    let hashes: Vec<String> = (0..100_000u32).map(|n| format!("\"{n:040x}\"")).collect();
    let bulk = format!(r#"{{"add": [{}]}}"#, hashes.join(", "));
    assert!(bulk.len() <= 5 << 20, "{}", bulk.len());
    let mut first = TcpStream::connect(api).unwrap();
    first.write_all(head(bulk.len()).as_bytes()).unwrap();
    first.write_all(&bulk.as_bytes()[..1000]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut second = TcpStream::connect(api).unwrap();
    second.write_all(head(bulk.len()).as_bytes()).unwrap();
    let answer = read_answer(second);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    first.write_all(&bulk.as_bytes()[1000..]).unwrap();
    let answer = read_answer(first);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""added":100000"#), "{answer}");
    drop(shoal);
    std::fs::remove_dir_all(&files).unwrap();
}

#[test]
fn an_address_opening_many_connections_gives_way_to_itself_on_the_monitoring_endpoint() {
    let shoal = Shoal::start("churn", CONFIG, &[]);
    let monitor = shoal.address_after("health on http://");
    // An honest client connects, then takes its time; another address opens 300.
    let mut honest = connect_from([127, 0, 0, 1], monitor);
    let crowd: Vec<TcpStream> = (0..300)
        .map(|_| connect_from([127, 0, 0, 2], monitor))
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    honest.write_all(b"GET /health HTTP/1.1\r\n\r\n").unwrap();
    honest
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut answer = String::new();
    let _ = honest.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    drop(crowd);
}

#[test]
fn accounting_batches_wait_for_a_site_that_is_down_across_a_restart() {
    const KEY: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
    let hash = "aa".repeat(20);
    let files = std::env::temp_dir().join(format!("shoal-operator-export-{}", std::process::id()));
    let batches = files.join("batches");
    std::fs::create_dir_all(&batches).unwrap();
    std::fs::write(files.join("users"), format!("17 {KEY}\n")).unwrap();
    std::fs::write(files.join("torrents"), format!("{hash} 1001\n")).unwrap();
    // The site's address, with nothing listening on it yet.
    let site = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let site_address = site.local_addr().unwrap();
    drop(site);
    let config = format!(
        "{CONFIG}[http.private]\nenabled = true\nusers_path = \"{users}\"\ntorrents_path = \"{torrents}\"\n\
         export_directory = \"{batches}\"\nexport_interval = 1\nexport_url = \"http://{site_address}/batches\"\n",
        users = files.join("users").display(),
        torrents = files.join("torrents").display(),
        batches = batches.display(),
    );
    let shoal = Shoal::start("export-1", &config, &[]);
    let http = shoal.address_after("listening on http://");
    for (uploaded, event) in [(0, "&event=started"), (4096, "")] {
        let reply = http_get(
            http,
            &format!(
                "/{KEY}/announce?info_hash={}&peer_id=-qB4650-aaaaaaaaaaaa&port=6881&uploaded={uploaded}&downloaded=0&left=0{event}",
                "%AA".repeat(20)
            ),
        );
        assert!(
            String::from_utf8_lossy(&reply).contains("8:intervali"),
            "{}",
            String::from_utf8_lossy(&reply)
        );
    }
    let rest = shoal.stop();
    assert!(
        rest.iter().any(|line| line.contains(" WARN ")
            && line.contains("accounting batches not yet taken by every target stay in")),
        "the stop says what waits: {rest:#?}"
    );
    let batch_files = || {
        std::fs::read_dir(&batches)
            .unwrap()
            .flatten()
            .filter(|file| file.file_name().to_string_lossy().ends_with(".json"))
            .count()
    };
    assert!(batch_files() > 0, "the batch waits in the directory");
    assert!(batches.join(".http.ledger").is_file(), "baselines kept");

    // The site is up and the tracker starts again: the batch of the last run arrives.
    let listener = std::net::TcpListener::bind(site_address).unwrap();
    let (_, bodies) = shoal_common::testing::post_endpoint_on(listener, vec![204]);
    let shoal = Shoal::start("export-2", &config, &[]);
    shoal.line_with("http: accounting baselines of 1 peers kept from the last run");
    shoal.line_with("accounting batches wait in");
    let (_, body) = bodies.recv_timeout(Duration::from_secs(15)).unwrap();
    assert!(
        body.contains(r#""user":17,"torrent":1001,"uploaded":4096"#),
        "{body}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while batch_files() > 0 {
        assert!(Instant::now() < deadline, "the sent batch is deleted");
        std::thread::sleep(Duration::from_millis(50));
    }
    shoal.stop();
    std::fs::remove_dir_all(&files).unwrap();
}

#[test]
fn a_private_http_tracker_caps_a_users_clients_and_enforces_the_minimum_interval() {
    const KEY: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
    let files =
        std::env::temp_dir().join(format!("shoal-operator-cap-files-{}", std::process::id()));
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("users"), format!("17 {KEY} peers=1\n")).unwrap();
    std::fs::write(
        files.join("torrents"),
        format!("{} 1001\n", "aa".repeat(20)),
    )
    .unwrap();
    let config = format!(
        "{CONFIG}[http.private]\nenabled = true\nusers_path = \"{}\"\ntorrents_path = \"{}\"\nmin_interval = 900\n",
        files.join("users").display(),
        files.join("torrents").display(),
    );
    let shoal = Shoal::start("cap", &config, &[]);
    let http = shoal.address_after("listening on http://");
    let announce = |peer: char, event: &str| {
        let reply = http_get(
            http,
            &format!(
                "/{KEY}/announce?info_hash={}&peer_id=-qB4650-{}&port=6881&uploaded=0&downloaded=0&left=0{event}",
                "%AA".repeat(20),
                peer.to_string().repeat(12)
            ),
        );
        String::from_utf8_lossy(&reply).into_owned()
    };
    assert!(announce('a', "&event=started").contains("8:intervali"));
    assert!(announce('b', "&event=started").contains("too many clients"));
    assert!(announce('a', "").contains("announced too soon"));
    assert!(announce('a', "&event=stopped").contains("8:intervali"));
    assert!(announce('b', "&event=started").contains("8:intervali"));
    shoal.stop();
    std::fs::remove_dir_all(&files).unwrap();
}

#[test]
fn stateless_keys_are_served_without_registration() {
    use std::os::unix::fs::PermissionsExt as _;
    const SECRET: &str = "an operator's secret shared with the site, 32+ bytes";
    let files = std::env::temp_dir().join(format!(
        "shoal-operator-secret-files-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("users"), "# nobody: the keys are stateless\n").unwrap();
    std::fs::write(
        files.join("torrents"),
        format!("{} 1001\n", "aa".repeat(20)),
    )
    .unwrap();
    std::fs::write(files.join("secret"), format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(files.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let config = format!(
        "{CONFIG}[http.private]\nenabled = true\nusers_path = \"{}\"\ntorrents_path = \"{}\"\nkey_secret_path = \"{}\"\n",
        files.join("users").display(),
        files.join("torrents").display(),
        files.join("secret").display(),
    );
    let shoal = Shoal::start("secret", &config, &[]);
    let http = shoal.address_after("listening on http://");
    let announce = |key: &str| {
        let reply = http_get(
            http,
            &format!(
                "/{key}/announce?info_hash={}&peer_id=-qB4650-aaaaaaaaaaaa&port=6881&left=0",
                "%AA".repeat(20)
            ),
        );
        String::from_utf8_lossy(&reply).into_owned()
    };
    let key = shoal_private::derive_key(SECRET.as_bytes(), 42, 1);
    assert!(announce(&key).contains("8:intervali"), "{}", announce(&key));
    let wrong = shoal_private::derive_key(b"not the operator's secret, also 32+ bytes", 42, 1);
    assert!(announce(&wrong).contains("passkey not recognised"));
    shoal.stop();
    std::fs::remove_dir_all(&files).unwrap();
}
