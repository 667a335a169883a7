//! The combined binary.

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BINARY: &str = env!("CARGO_BIN_EXE_shoal");

#[test]
fn help_version_and_unknown_commands() {
    let help = Command::new(BINARY).arg("--help").output().unwrap();
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("shoal udp [OPTIONS]"));
    let version = Command::new(BINARY).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("shoal {}", env!("CARGO_PKG_VERSION"))
    );
    let unknown = Command::new(BINARY).arg("tcp").output().unwrap();
    assert_eq!(unknown.status.code(), Some(2));
}

#[test]
fn http_subcommand_takes_the_http_options() {
    let printed = Command::new(BINARY).args(["http", "-p"]).output().unwrap();
    assert!(printed.status.success());
    assert!(String::from_utf8_lossy(&printed.stdout).contains("announce_path = \"/announce\""));
}

#[test]
fn udp_subcommand_takes_the_udp_options() {
    let printed = Command::new(BINARY).args(["udp", "-p"]).output().unwrap();
    assert!(printed.status.success());
    let text = String::from_utf8_lossy(&printed.stdout);
    assert!(text.contains("announce_interval = 1800"), "{text}");
    let help = Command::new(BINARY)
        .args(["udp", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).starts_with("shoal udp "));
}

#[test]
fn a_start_up_error_names_the_trackers_section() {
    let taken = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = std::env::temp_dir().join(format!("shoal-cli-section-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("shoal.toml");
    std::fs::write(
        &config,
        format!(
            "[udp.network]\naddress_ipv4 = \"127.0.0.1:{port}\"\nuse_ipv6 = false\n\
             [http]\nenabled = false\n[ws]\nenabled = false\n"
        ),
    )
    .unwrap();
    let run = Command::new(BINARY)
        .arg("-c")
        .arg(&config)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        run.status.code(),
        Some(i32::from(shoal_common::EXIT_NOT_STARTED))
    );
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("UDP tracker (under [udp] in the config): cannot bind UDP")
            && stderr.contains("change network.address_ipv4"),
        "{stderr}"
    );
}

/// `shoal` with no arguments serves on the default public addresses; talk to it over
/// 127.0.0.1. Skipped when something else holds the port or the host has no IPv6.
/// A child process that is killed if the test fails before it stops it, so a failed
/// run never leaves a tracker holding the default ports.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = std::process::Child;

    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

#[test]
fn no_arguments_runs_with_built_in_defaults() {
    let mut child = KillOnDrop(
        Command::new(BINARY)
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut listening = Vec::new();
    let mut failure = None;
    for line in stderr.lines().map_while(Result::ok) {
        if let Some(addr) = line.split("listening on ").nth(1) {
            listening.push(addr.to_string());
        }
        if line.contains("cannot bind") {
            failure = Some(line);
            break;
        }
        if listening.len() == 6 {
            break;
        }
    }
    if let Some(failure) = failure {
        let _ = child.wait();
        shoal_common::testing::skip(
            "default-ports",
            format!("the default address is not available here: {failure}"),
        );
        return;
    }
    assert_eq!(
        listening,
        vec![
            "udp://0.0.0.0:6969",
            "udp://[::]:6969",
            "http://0.0.0.0:6969",
            "http://[::]:6969",
            "ws://0.0.0.0:8000",
            "ws://[::]:8000"
        ]
    );

    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut connect = Vec::new();
    connect.extend_from_slice(&0x0417_2710_1980u64.to_be_bytes());
    connect.extend_from_slice(&0u32.to_be_bytes());
    connect.extend_from_slice(&77u32.to_be_bytes());
    socket.send_to(&connect, "127.0.0.1:6969").unwrap();
    let mut reply = [0u8; 64];
    let (len, _) = socket.recv_from(&mut reply).unwrap();
    assert_eq!(len, 16);
    assert_eq!(&reply[4..8], &77u32.to_be_bytes());

    let mut http = std::net::TcpStream::connect("127.0.0.1:6969").unwrap();
    http.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::io::Write::write_all(&mut http, b"GET /scrape HTTP/1.1\r\n\r\n").unwrap();
    let mut head = [0u8; 12];
    std::io::Read::read_exact(&mut http, &mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");

    let mut ws = std::net::TcpStream::connect("127.0.0.1:8000").unwrap();
    ws.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::io::Write::write_all(&mut ws, b"GET /health HTTP/1.1\r\n\r\n").unwrap();
    std::io::Read::read_exact(&mut ws, &mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");

    // SAFETY: kill takes plain integers; the pid is our own child's.
    let result = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(result, 0);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        assert!(Instant::now() < deadline, "shoal did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A fatal start-up error is reported once, as an error line of the log (it was also
/// printed again below it).
#[test]
fn a_fatal_start_up_error_is_reported_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = std::env::temp_dir().join(format!("shoal-cli-fatal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("shoal.toml");
    std::fs::write(
        &path,
        format!(
            "[udp]\nenabled = false\n[ws]\nenabled = false\n[http.network]\n\
             address_ipv4 = \"127.0.0.1:{port}\"\nuse_ipv6 = false\n"
        ),
    )
    .unwrap();
    let output = Command::new(BINARY)
        .arg("-c")
        .arg(&path)
        .env_remove("SHOAL_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(i32::from(shoal_common::EXIT_NOT_STARTED)),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("Address already in use").count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr
            .lines()
            .any(|line| line.contains("ERROR") && line.contains("HTTP tracker (under [http]")),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The shipped units do not restart on the exit status of a run that never served (a
/// config error would only repeat), and do restart on other failures.
#[test]
fn the_units_do_not_restart_a_tracker_that_could_not_start() {
    let units = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/systemd");
    let mut seen = 0;
    for entry in std::fs::read_dir(&units).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|ext| ext != "service") {
            continue;
        }
        let unit = std::fs::read_to_string(&path).unwrap();
        assert!(
            unit.lines().any(|line| line == "Restart=on-failure"),
            "{}",
            path.display()
        );
        assert!(
            unit.lines().any(|line| line
                == format!(
                    "RestartPreventExitStatus={}",
                    shoal_common::EXIT_NOT_STARTED
                )),
            "{}",
            path.display()
        );
        seen += 1;
    }
    assert_eq!(seen, 4);
}

/// `-P` run as root checks the files for the user the tracker becomes (here
/// `[privileges] user = "nobody"`): a users file only root can read, an export
/// directory it cannot write and a world-readable admin token are each named, with
/// the exit status the units do not restart on; made right, the same config passes.
#[test]
fn print_config_as_root_checks_the_files_for_the_user_the_tracker_becomes() {
    use std::os::unix::fs::PermissionsExt as _;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        shoal_common::testing::skip("root", "only root can check files for another user");
        return;
    }
    let dir = std::env::temp_dir().join(format!("shoal-cli-file-user-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("export")).unwrap();
    let mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    mode(&dir, 0o755);
    std::fs::write(
        dir.join("users.txt"),
        "1 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
    )
    .unwrap();
    std::fs::write(dir.join("torrents.txt"), "").unwrap();
    std::fs::write(dir.join("admin.token"), format!("{}\n", "t".repeat(32))).unwrap();
    mode(&dir.join("users.txt"), 0o600);
    mode(&dir.join("torrents.txt"), 0o644);
    mode(&dir.join("admin.token"), 0o644);
    mode(&dir.join("export"), 0o755);
    let config = dir.join("shoal.toml");
    std::fs::write(
        &config,
        format!(
            "[privileges]\ndrop_privileges = true\nuser = \"nobody\"\n\
             [admin]\nenabled = true\ntoken_path = \"{d}/admin.token\"\n\
             [udp]\nenabled = false\n[ws]\nenabled = false\n\
             [http.private]\nenabled = true\nusers_path = \"{d}/users.txt\"\n\
             torrents_path = \"{d}/torrents.txt\"\nexport_directory = \"{d}/export\"\n\
             export_url = \"http://127.0.0.1:9/credit\"\n",
            d = dir.display()
        ),
    )
    .unwrap();
    let check = || {
        Command::new(BINARY)
            .arg("-c")
            .arg(&config)
            .arg("-P")
            .env_remove("SHOAL_LOG")
            .output()
            .unwrap()
    };
    let refused = check();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(
        refused.status.code(),
        Some(i32::from(shoal_common::EXIT_NOT_STARTED)),
        "{stderr}"
    );
    for needle in [
        "users_path: user nobody (privileges.user) cannot read",
        "users.txt: mode 600",
        "export_directory: user nobody (privileges.user) cannot create files in",
        "token_path",
        "may be read by any local user (mode 644)",
        "files checked for this process and for user nobody",
    ] {
        assert!(stderr.contains(needle), "{needle:?} in {stderr}");
    }
    assert!(!stderr.contains("torrents_path"), "{stderr}");
    mode(&dir.join("users.txt"), 0o644);
    mode(&dir.join("admin.token"), 0o600);
    std::os::unix::fs::chown(dir.join("admin.token"), Some(65534), None).unwrap();
    std::os::unix::fs::chown(dir.join("export"), Some(65534), None).unwrap();
    let passed = check();
    assert!(
        passed.status.success(),
        "{}",
        String::from_utf8_lossy(&passed.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every binary's help names every top-level section of its printed config and every
/// reload signal, so that neither can drift from the config.
#[test]
fn help_names_every_section_and_the_reload_signals() {
    let shoal = env!("CARGO_BIN_EXE_shoal");
    for args in [vec![], vec!["udp"], vec!["http"], vec!["ws"]] {
        let help = Command::new(shoal)
            .args(&args)
            .arg("--help")
            .output()
            .unwrap();
        let printed = Command::new(shoal).args(&args).arg("-p").output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout).replace('\n', " ");
        let printed = String::from_utf8_lossy(&printed.stdout);
        let mut sections = 0;
        for line in printed.lines() {
            if line.starts_with('[') && !line.contains('.') {
                sections += 1;
                assert!(
                    help.contains(line),
                    "{args:?}: {line} not in the help: {help}"
                );
            }
        }
        assert!(sections >= 5, "{args:?}: {sections} sections");
        for needle in [
            "SIGUSR1",
            "SIGHUP",
            "TLS certificates",
            "private mode",
            "Origin rules",
        ] {
            assert!(help.contains(needle), "{args:?}: {needle} not in {help}");
        }
    }
}
