//! Helpers for the trackers' integration tests (feature `testing`).

use std::time::{Duration, Instant};

mod pebble;
mod process;
mod site;

pub use pebble::Pebble;
pub use process::Process;
pub use site::{Credited, Site};

/// How long [`eventually`] waits. Generous: it returns as soon as the condition holds,
/// and workers flush statistics every 100 ms, so only a failing test waits this long.
pub const EVENTUALLY: Duration = Duration::from_secs(10);

/// Checks `condition` every 10 ms until it holds or [`EVENTUALLY`] passes; returns
/// whether it held. For what a running tracker does on its own time: counters flushed,
/// gauges published, a cleaning pass.
pub fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + EVENTUALLY;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    condition()
}

/// An HTTP endpoint on a free loopback port that takes POSTs, as a site's does:
/// answers each request with the next of `statuses` (200 once they run out) and hands
/// each one's head and body to the receiver. Its thread ends when the receiver is
/// dropped and the next request comes, or with the test.
pub fn post_endpoint(
    statuses: Vec<u16>,
) -> (
    std::net::SocketAddr,
    std::sync::mpsc::Receiver<(String, String)>,
) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    post_endpoint_on(listener, statuses)
}

/// [`post_endpoint`] on a listener of the caller's (a port it chose before).
pub fn post_endpoint_on(
    listener: std::net::TcpListener,
    statuses: Vec<u16>,
) -> (
    std::net::SocketAddr,
    std::sync::mpsc::Receiver<(String, String)>,
) {
    use std::io::{Read as _, Write as _};
    let address = listener.local_addr().expect("a bound listener");
    let (send, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut statuses = statuses.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut request = Vec::new();
            let mut buffer = [0u8; 4096];
            let whole = loop {
                match stream.read(&mut buffer) {
                    Ok(0) | Err(_) => break None,
                    Ok(read) => request.extend_from_slice(&buffer[..read]),
                }
                let text = String::from_utf8_lossy(&request).into_owned();
                let Some((head, body)) = text.split_once("\r\n\r\n") else {
                    continue;
                };
                let length: usize = head
                    .lines()
                    .find_map(|line| line.strip_prefix("Content-Length: "))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                if body.len() >= length {
                    break Some((head.to_owned(), body.to_owned()));
                }
            };
            let status = statuses.next().unwrap_or(200);
            let _ = write!(stream, "HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n");
            if let Some(request) = whole
                && send.send(request).is_err()
            {
                return;
            }
        }
    });
    (address, received)
}

/// A real `redis-server` on a free loopback port, for the cluster tests; stopped (by
/// its PID) when dropped. `./scripts/test.sh` installs Debian's `redis-server`.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    dir: std::path::PathBuf,
    child: Option<std::process::Child>,
}

impl RedisServer {
    /// Starts one and waits until it answers.
    pub fn start() -> Self {
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            probe.local_addr().expect("its address").port()
        };
        let dir = std::env::temp_dir().join(format!("shoal-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for redis");
        let mut server = Self {
            port,
            dir,
            child: None,
        };
        server.restart();
        server
    }

    /// `host:port`, as `[cluster] store` takes it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stops it (SIGTERM by PID, then waits). Its data goes with it: nothing is saved.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill(2) on the PID of a child we started and have not reaped.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port (empty), and waits until it answers.
    pub fn restart(&mut self) {
        self.stop();
        let child = std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect(
                "cannot run redis-server: install it (Debian: apt-get install redis-server; \
                 ./scripts/test.sh does)",
            );
        self.child = Some(child);
        let answered = eventually(|| {
            use std::io::{Read as _, Write as _};
            let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
                return false;
            };
            let mut reply = [0u8; 7];
            stream.write_all(b"PING\r\n").is_ok()
                && stream.read_exact(&mut reply).is_ok()
                && &reply == b"+PONG\r\n"
        });
        assert!(
            answered,
            "redis-server did not answer on port {}",
            self.port
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The I/O backend the TCP trackers' integration tests run on: `SHOAL_TEST_IO_BACKEND`
/// (`auto`, `io_uring` or `epoll`; `./scripts/test.sh` runs those tests with the
/// default, epoll, and again with `io_uring`), the default when unset.
pub fn io_backend_under_test() -> crate::IoBackend {
    match std::env::var("SHOAL_TEST_IO_BACKEND").as_deref() {
        Ok("epoll") => crate::IoBackend::Epoll,
        Ok("io_uring") => crate::IoBackend::IoUring,
        Ok("auto") => crate::IoBackend::Auto,
        Err(_) => crate::IoBackend::default(),
        Ok(other) => panic!("SHOAL_TEST_IO_BACKEND: {other}? (auto, io_uring or epoll)"),
    }
}

/// Makes the calling process refuse `io_uring_setup` with EPERM from now on, as
/// Docker's and containerd's default seccomp profiles do: for a child process, called
/// in `CommandExt::pre_exec` (it only makes two `prctl` calls, safe after `fork`).
/// The filter is inherited by everything the process starts and cannot be lifted.
///
/// # Safety
///
/// Only for a process about to exec a tracker under test: every later `io_uring_setup`
/// of the process fails.
pub unsafe fn refuse_io_uring() -> std::io::Result<()> {
    /// One classic BPF instruction (`struct sock_filter`).
    #[repr(C)]
    struct Instruction {
        code: u16,
        jump_if_true: u8,
        jump_if_false: u8,
        k: u32,
    }
    /// A BPF program (`struct sock_fprog`).
    #[repr(C)]
    struct Program {
        len: u16,
        filter: *const Instruction,
    }
    const LOAD_WORD_AT: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS
    const JUMP_IF_EQUAL: u16 = 0x05 | 0x10; // BPF_JMP | BPF_JEQ | BPF_K
    const RETURN: u16 = 0x06; // BPF_RET | BPF_K
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    const SECCOMP_MODE_FILTER: libc::c_ulong = 2;
    // seccomp_data starts with the system call number.
    let filter = [
        Instruction {
            code: LOAD_WORD_AT,
            jump_if_true: 0,
            jump_if_false: 0,
            k: 0,
        },
        Instruction {
            code: JUMP_IF_EQUAL,
            jump_if_true: 0,
            jump_if_false: 1,
            k: libc::SYS_io_uring_setup as u32,
        },
        Instruction {
            code: RETURN,
            jump_if_true: 0,
            jump_if_false: 0,
            k: RET_ERRNO | libc::EPERM as u32,
        },
        Instruction {
            code: RETURN,
            jump_if_true: 0,
            jump_if_false: 0,
            k: RET_ALLOW,
        },
    ];
    let program = Program {
        len: filter.len() as u16,
        filter: filter.as_ptr(),
    };
    // SAFETY: plain prctl calls; the program outlives the call that copies it in.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                SECCOMP_MODE_FILTER,
                &raw const program,
                0,
                0,
            ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The sum of `"field":<number>` over the accounting batch files (`*.json`) in `dir`:
/// what a site would credit from them.
pub fn credited(dir: &std::path::Path, field: &str) -> u64 {
    let pattern = format!("\"{field}\":");
    let mut sum = 0;
    for file in std::fs::read_dir(dir).unwrap().flatten() {
        if file.path().extension().is_none_or(|ext| ext != "json") {
            continue;
        }
        let text = std::fs::read_to_string(file.path()).unwrap();
        for (at, _) in text.match_indices(&pattern) {
            let digits: String = text[at + pattern.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            sum += digits.parse::<u64>().unwrap();
        }
    }
    sum
}

/// The fenced blocks of `language` in `markdown` (a fence may be indented, as in a
/// list), each with the 1-based line number of its first line and its lines: for the
/// tests that run the documents' examples.
pub fn markdown_blocks(markdown: &str, language: &str) -> Vec<(usize, Vec<String>)> {
    let opening = format!("```{language}");
    let mut found = Vec::new();
    let mut current: Option<(usize, Vec<String>)> = None;
    for (index, line) in markdown.lines().enumerate() {
        let fence = line.trim();
        match &mut current {
            None if fence == opening => current = Some((index + 2, Vec::new())),
            None => {}
            Some(_) if fence == "```" => found.extend(current.take()),
            Some((_, lines)) => lines.push(line.to_owned()),
        }
    }
    found
}

/// The conditions a test may be skipped for: a name and what is missing. One list for
/// the Rust tests and the end-to-end scripts (`skip_loudly` in
/// scripts/e2e/lib/common.bash names the same conditions); scripts/test.sh says which
/// of them its machine may lack.
pub const SKIP_CONDITIONS: &[(&str, &str)] = &[
    ("ipv6", "no IPv6 loopback (::1)"),
    ("root", "not running as root"),
    (
        "memlock",
        "the locked-memory limit (ulimit -l) cannot be lowered",
    ),
    (
        "default-ports",
        "the default ports (6969, 8000) are taken on this machine",
    ),
    ("io_uring", "io_uring cannot be set up here"),
    (
        "namespaces",
        "no private network or mount namespace (unshare)",
    ),
];

/// The IPv4 address among a running tracker's bound addresses (`local_addrs()`).
pub fn ipv4(addrs: &[std::net::SocketAddr]) -> std::net::SocketAddr {
    addrs
        .iter()
        .copied()
        .find(std::net::SocketAddr::is_ipv4)
        .expect("the tracker listens on IPv4")
}

/// The IPv6 address among a running tracker's bound addresses (`local_addrs()`).
pub fn ipv6(addrs: &[std::net::SocketAddr]) -> std::net::SocketAddr {
    addrs
        .iter()
        .copied()
        .find(std::net::SocketAddr::is_ipv6)
        .expect("the tracker listens on IPv6")
}

/// Whether this host has an IPv6 loopback (`::1` can be bound): the test of the
/// `ipv6` skip condition.
pub fn ipv6_loopback() -> bool {
    std::net::UdpSocket::bind("[::1]:0").is_ok()
}

/// Whether a child shell can lower its locked-memory limit to 1 MiB (`ulimit -l
/// 1024`): the test of the `memlock` skip condition. Asked apart from the tracker it
/// is for, whose own advice names `ulimit -l`.
pub fn memlock_can_be_lowered() -> bool {
    std::process::Command::new("sh")
        .args(["-c", "ulimit -l 1024"])
        .status()
        .is_ok_and(|status| status.success())
}

/// Skips the calling test for `condition` (a name in [`SKIP_CONDITIONS`]), `detail`
/// saying what was found; the caller returns right after.
///
/// A skip is a failure unless the run allows it: scripts/test.sh (and so CI) sets
/// `SHOAL_TEST_SKIPS` to the conditions its machine may lack (none by default), and a
/// skip for any other condition panics, so that a regression that looks like a
/// missing condition (an IPv6 start-up failure, say) cannot read green. An allowed
/// skip is appended to the file `SHOAL_TEST_SKIP_LOG` names, for the run's summary.
/// Without `SHOAL_TEST_SKIPS` (a plain `cargo test`), the skip is printed and passes.
pub fn skip(condition: &str, detail: impl std::fmt::Display) {
    assert!(
        SKIP_CONDITIONS.iter().any(|(name, _)| *name == condition),
        "skip condition {condition:?} is not one of SKIP_CONDITIONS"
    );
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let line = format!("skipped {test} ({condition}): {detail}");
    if let Some(allowed) = std::env::var_os("SHOAL_TEST_SKIPS") {
        let allowed = allowed.to_string_lossy().into_owned();
        if !skip_allowed(condition, &allowed) {
            panic!(
                "{line}; this run allows no skip for {condition:?} \
                 (SHOAL_TEST_SKIPS={allowed:?}, set in scripts/test.sh): make the \
                 machine meet it, or name the condition there if the machine cannot"
            );
        }
        if let Some(log) = std::env::var_os("SHOAL_TEST_SKIP_LOG") {
            use std::io::Write as _;
            let appended = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .and_then(|mut file| writeln!(file, "{line}"));
            if let Err(err) = appended {
                panic!("{line}; cannot note the skip in {log:?}: {err}");
            }
        }
    }
    eprintln!("{line}");
}

/// Whether `allowed` (comma-separated condition names, blanks around them ignored)
/// names `condition`.
fn skip_allowed(condition: &str, allowed: &str) -> bool {
    allowed.split(',').any(|name| name.trim() == condition)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_is_allowed_only_for_a_named_condition() {
        assert!(!skip_allowed("ipv6", ""));
        assert!(!skip_allowed("ipv6", "root,namespaces"));
        assert!(!skip_allowed("ipv6", "ipv66"));
        assert!(skip_allowed("ipv6", "ipv6"));
        assert!(skip_allowed("ipv6", "root, ipv6 "));
    }

    #[test]
    #[should_panic(expected = "not one of SKIP_CONDITIONS")]
    fn an_unknown_condition_is_a_mistake() {
        skip("no-such-condition", "");
    }
}
