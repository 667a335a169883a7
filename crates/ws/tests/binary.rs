//! The `shoal_ws` binary: config round trip and errors that name the key.

use std::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_shoal_ws");

#[test]
fn printed_default_config_round_trips_and_bad_values_are_named() {
    let dir = std::env::temp_dir().join(format!("shoal-ws-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let printed = Command::new(BINARY).arg("-p").output().unwrap();
    assert!(printed.status.success());
    let text = String::from_utf8_lossy(&printed.stdout);
    assert!(
        text.contains("# Most offers forwarded from one announce"),
        "{text}"
    );
    let path = dir.join("c.toml");
    std::fs::write(&path, &printed.stdout).unwrap();
    let effective = Command::new(BINARY)
        .arg("-c")
        .arg(&path)
        .arg("-P")
        .output()
        .unwrap();
    assert!(effective.status.success());
    assert_eq!(effective.stdout, printed.stdout);

    std::fs::write(
        &path,
        "[limits]\nmax_outgoing_messages = 0\nunknown_key = 1\n",
    )
    .unwrap();
    let refused = Command::new(BINARY).arg("-c").arg(&path).output().unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("unknown_key"), "{stderr}");
    std::fs::write(&path, "[limits]\nmax_outgoing_messages = 0\n").unwrap();
    let refused = Command::new(BINARY).arg("-c").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("limits.max_outgoing_messages: must be at least 1"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
