//! Telling systemd how start-up, reloads and shutdown go (`Type=notify` units).
//!
//! systemd passes a datagram socket in `NOTIFY_SOCKET`; a tracker sends `READY=1` once
//! every socket is bound and privileges are dropped, `RELOADING=1` (with the monotonic
//! time systemd asks for) and `READY=1` around a SIGUSR1 reload, `STOPPING=1` when it
//! begins to shut down, and `WATCHDOG=1` at half the `WatchdogSec=` interval while it
//! is healthy. Without `NOTIFY_SOCKET` (not under systemd, or `Type=simple`) every call
//! does nothing. The protocol is a few lines over a Unix socket, so it is written here
//! rather than pulled in with a dependency.

use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Sends `state` (newline-separated `KEY=value` lines) to the service manager, if
/// there is one. Failures are logged, never fatal: a tracker serves without systemd.
pub fn notify_systemd(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(err) = send(&path, state) {
        log::warn!("cannot notify systemd ({}): {err}", path.to_string_lossy());
    }
}

fn send(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    let bytes = path.as_bytes();
    let address = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(std::path::Path::new(path))?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.send_to_addr(state.as_bytes(), &address)?;
    Ok(())
}

/// The status line of the last [`notify_ready`], sent again after a reload.
static STATUS: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// `READY=1` with a status line `systemctl status` shows.
pub fn notify_ready(status: &str) {
    status.clone_into(&mut STATUS.lock().unwrap_or_else(|e| e.into_inner()));
    notify_systemd(&format!("READY=1\nSTATUS={status}"));
}

/// `READY=1` after a reload, with the status line the process had before it (what
/// it serves) followed by when it last reloaded and what, so that `systemctl status`
/// answers "did my reload take?" without the journal.
pub(crate) fn notify_reloaded(done: &[String]) {
    let status = STATUS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let status = status_after_reload(&status, done, std::time::SystemTime::now());
    notify_systemd(&format!("READY=1\nSTATUS={status}"));
}

fn status_after_reload(serving: &str, done: &[String], now: std::time::SystemTime) -> String {
    let what = if done.is_empty() {
        "nothing to reload".to_owned()
    } else {
        done.join(", ")
    };
    let at = crate::logging::utc_timestamp(now);
    // "2026-11-27T10:31:05.123Z": the second is precise enough for a status line.
    let at = at.get(..19).unwrap_or(&at).replace('T', " ");
    format!("{serving}; reloaded {at} UTC: {what}")
}

/// `RELOADING=1` with the current `CLOCK_MONOTONIC` time, as systemd 253+ expects.
pub(crate) fn notify_reloading() {
    notify_systemd(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()));
}

/// `STOPPING=1`.
pub fn notify_stopping() {
    notify_systemd("STOPPING=1");
}

/// The watchdog interval systemd asks for (`WATCHDOG_USEC`, for this process).
pub fn watchdog_interval() -> Option<Duration> {
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && pid.parse::<u32>().ok() != Some(std::process::id())
    {
        return None;
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec))
}

fn monotonic_usec() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_status_after_a_reload_says_when_and_what() {
        let at = std::time::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let done = vec![
            "udp access list: 3 info hashes".to_owned(),
            "http TLS certificate reloaded".to_owned(),
        ];
        assert_eq!(
            status_after_reload("serving udp", &done, at),
            "serving udp; reloaded 2026-11-18 11:06:40 UTC: udp access list: 3 info hashes, \
             http TLS certificate reloaded"
        );
        assert_eq!(
            status_after_reload("serving udp", &[], at),
            "serving udp; reloaded 2026-11-18 11:06:40 UTC: nothing to reload"
        );
    }

    use super::*;

    #[test]
    fn states_reach_a_named_socket() {
        let dir = std::env::temp_dir().join(format!("shoal-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).unwrap();
        send(path.as_os_str(), "READY=1\nSTATUS=ok").unwrap();
        let mut buffer = [0u8; 256];
        let n = listener.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..n], b"READY=1\nSTATUS=ok");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn states_reach_an_abstract_socket() {
        let name = format!("shoal-notify-test-{}", std::process::id());
        let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&address).unwrap();
        send(std::ffi::OsStr::new(&format!("@{name}")), "STOPPING=1").unwrap();
        let mut buffer = [0u8; 64];
        let n = listener.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..n], b"STOPPING=1");
    }

    #[test]
    fn the_monotonic_clock_moves() {
        let first = monotonic_usec();
        std::thread::sleep(Duration::from_millis(2));
        assert!(monotonic_usec() > first);
    }
}
