//! The `shoal_http` binary's I/O backends: the default, epoll, serves without a word
//! about io_uring; where io_uring is refused, as in a container under Docker's default
//! seccomp profile or with too little locked memory, `auto` serves with epoll and says
//! why, and a forced `io_uring` stops with the reason.

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use support::*;

const BINARY: &str = env!("CARGO_BIN_EXE_shoal_http");

fn config_file(name: &str, network_extra: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("shoal-http-backend-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("http.toml");
    std::fs::write(
        &path,
        format!(
            "socket_workers = 2\n[network]\naddress_ipv4 = \"127.0.0.1:0\"\nuse_ipv6 = false\n\
             {network_extra}\n[statistics]\ninterval = 0\n"
        ),
    )
    .unwrap();
    path
}

/// A child tracker, killed if the test fails before it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The tracker binary with `config`, under a seccomp filter that refuses io_uring.
fn without_io_uring(config: &PathBuf) -> Command {
    let mut command = Command::new(BINARY);
    command.arg("-c").arg(config);
    // SAFETY: only prctl calls between fork and exec.
    unsafe {
        command.pre_exec(|| shoal_common::testing::refuse_io_uring());
    }
    command
}

/// Starts `command`, reads its log until it listens, and returns the log lines before
/// that and the address.
fn start(mut command: Command) -> (Child, Vec<String>, SocketAddr) {
    let mut child = Child(command.stderr(Stdio::piped()).spawn().unwrap());
    let mut log = BufReader::new(child.0.stderr.take().unwrap());
    let mut lines = Vec::new();
    let addr = loop {
        let mut line = String::new();
        assert!(
            log.read_line(&mut line).unwrap() > 0,
            "the tracker ended before it listened: {lines:#?}"
        );
        if let Some(url) = line.trim().split("listening on http://").nth(1) {
            break url.split('/').next().unwrap().parse().unwrap();
        }
        lines.push(line);
    };
    std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));
    (child, lines, addr)
}

fn announces_twice(addr: SocketAddr) {
    let mut connection = Connection::open(addr);
    for port in [6881, 6882] {
        let response = connection.get(&announce(&[7; 20], port, "&compact=1"));
        assert_eq!(response.status, 200);
        assert!(int(&response, "interval") > 0, "{:?}", response.body);
    }
}

#[test]
fn auto_serves_with_epoll_where_seccomp_refuses_io_uring() {
    let config = config_file("seccomp-auto", "io_backend = \"auto\"");
    let (_child, log, addr) = start(without_io_uring(&config));
    // Said at info level: epoll is what containers run on, not a fault.
    assert!(
        log.iter().any(|line| line.contains(" INFO ")
            && line.contains("serving with epoll")
            && line.contains("io_uring")),
        "{log:#?}"
    );
    assert!(!log.iter().any(|line| line.contains(" WARN ")), "{log:#?}");
    announces_twice(addr);
}

#[test]
fn forced_io_uring_stops_with_the_reason_where_seccomp_refuses_it() {
    let config = config_file("seccomp-forced", "io_backend = \"io_uring\"");
    let output = without_io_uring(&config).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(i32::from(shoal_common::EXIT_NOT_STARTED)),
        "{stderr}"
    );
    assert!(stderr.contains("io_uring"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");
}

/// The default backend is epoll, chosen without trying io_uring: no word about
/// io_uring, no warning, and it serves even where seccomp refuses io_uring.
#[test]
fn the_default_backend_is_epoll_and_needs_no_io_uring() {
    let config = config_file("default", "");
    let (_child, log, addr) = start(without_io_uring(&config));
    assert!(
        log.iter()
            .any(|line| line.contains(" INFO ") && line.contains("socket workers run on epoll")),
        "{log:#?}"
    );
    assert!(
        !log.iter().any(|line| line.contains("io_uring")),
        "{log:#?}"
    );
    assert!(!log.iter().any(|line| line.contains("WARN")), "{log:#?}");
    announces_twice(addr);
}

#[test]
fn epoll_chosen_by_config_serves_without_a_warning() {
    let config = config_file("epoll", "io_backend = \"epoll\"");
    let mut command = Command::new(BINARY);
    command.arg("-c").arg(&config);
    let (_child, log, addr) = start(command);
    assert!(
        log.iter()
            .any(|line| line.contains("socket workers run on epoll")),
        "{log:#?}"
    );
    assert!(!log.iter().any(|line| line.contains("WARN")), "{log:#?}");
    announces_twice(addr);
}

#[test]
fn auto_serves_with_epoll_when_too_little_memory_can_be_locked() {
    let config = config_file("memlock-auto", "io_backend = \"auto\"");
    std::fs::write(
        &config,
        std::fs::read_to_string(&config).unwrap() + "[limits]\nio_memory = 4194304\n",
    )
    .unwrap();
    if !shoal_common::testing::memlock_can_be_lowered() {
        shoal_common::testing::skip("memlock", "`sh -c 'ulimit -l 1024'` fails");
        return;
    }
    let mut command = Command::new("sh");
    command.arg("-c").arg(format!(
        "ulimit -l 1024 && exec '{BINARY}' -c '{}'",
        config.display()
    ));
    let (_child, log, addr) = start(command);
    assert!(
        log.iter()
            .any(|line| line.contains("serving with epoll") && line.contains("RLIMIT_MEMLOCK")),
        "{log:#?}"
    );
    announces_twice(addr);
}
