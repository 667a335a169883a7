//! The `shoal_http` binary: config round trip and the locked-memory check.

use std::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_shoal_http");

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("shoal-http-bin-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn printed_default_config_round_trips() {
    let dir = temp_dir("round-trip");
    let printed = Command::new(BINARY).arg("-p").output().unwrap();
    assert!(printed.status.success());
    let path = dir.join("c.toml");
    std::fs::write(&path, &printed.stdout).unwrap();
    let effective = Command::new(BINARY)
        .arg("-c")
        .arg(&path)
        .arg("-P")
        .output()
        .unwrap();
    assert!(
        effective.status.success(),
        "{}",
        String::from_utf8_lossy(&effective.stderr)
    );
    assert_eq!(effective.stdout, printed.stdout);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn too_little_locked_memory_for_a_forced_io_uring_fails_with_the_fix() {
    let dir = temp_dir("memlock");
    let path = dir.join("c.toml");
    std::fs::write(
        &path,
        "socket_workers = 4\n[network]\naddress_ipv4 = \"127.0.0.1:0\"\nuse_ipv6 = false\n\
         io_backend = \"io_uring\"\n[limits]\nio_memory = 4194304\n",
    )
    .unwrap();
    if !shoal_common::testing::memlock_can_be_lowered() {
        shoal_common::testing::skip("memlock", "`sh -c 'ulimit -l 1024'` fails");
        return;
    }
    // Lower both limits in a child shell, then start the tracker there.
    let output = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -l 1024 && exec '{BINARY}' -c '{}'",
            path.display()
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(i32::from(shoal_common::EXIT_NOT_STARTED)),
        "{stderr}"
    );
    assert!(
        stderr.contains("locked-memory limit (RLIMIT_MEMLOCK) is 1024 KiB"),
        "{stderr}"
    );
    assert!(
        stderr.contains("4 socket worker(s) × limits.io_memory = 4096 KiB"),
        "{stderr}"
    );
    assert!(stderr.contains("LimitMEMLOCK="), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `-P` checks the files a config names, as the start would read them: a missing
/// access list or certificate is reported with the config's other problems (it passed
/// `-P` before and failed the first start).
#[test]
fn check_reports_missing_files() {
    let dir = temp_dir("check-files");
    let path = dir.join("c.toml");
    std::fs::write(
        &path,
        format!(
            "[network]\nenable_tls = true\ntls_certificate_path = \"{0}/cert.pem\"\n\
             tls_private_key_path = \"{0}/key.pem\"\n\
             [access_list]\nmode = \"allow\"\npath = \"{0}/allowed.txt\"\n",
            dir.display()
        ),
    )
    .unwrap();
    let output = Command::new(BINARY)
        .arg("-c")
        .arg(&path)
        .arg("-P")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(i32::from(shoal_common::EXIT_NOT_STARTED)),
        "{stderr}"
    );
    for needle in [
        "network.tls_certificate_path",
        "cert.pem does not exist",
        "network.tls_private_key_path",
        "key.pem does not exist",
        "access_list.path",
        "allowed.txt does not exist",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
