//! `shoal health [-c FILE]`: asks a running shoal's monitoring endpoint for `/health`
//! and exits 0 when it answers 200, 1 otherwise. For container health checks
//! (`HEALTHCHECK`, Kubernetes `exec` probes) in images that carry no HTTP client: the
//! address comes from the same config (and `SHOAL__` variables) the tracker reads, so
//! the check follows the config without being told the port.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use shoal_common::MetricsConfig;

/// How long the whole check may take: a probe that hangs is a failed probe.
const TIMEOUT: Duration = Duration::from_secs(3);

/// The largest answer read: `/health` says "ok" or names the unhealthy trackers.
const MAX_ANSWER: u64 = 4096;

pub(crate) const USAGE: &str = "\
shoal health: ask a running shoal whether every tracker is healthy

Usage: shoal health [-c FILE]

Reads the config as the tracker does (FILE, then SHOAL__ variables) and asks its
monitoring endpoint ([metrics] address; enabled = true) for /health. A wildcard
address (0.0.0.0, [::]) is asked on loopback. Exit status: 0 when it answers
200 OK, 1 when it answers otherwise, cannot be reached within 3 s, or the
endpoint is off; 2 for a command-line mistake.
";

/// Runs the check for `metrics`, printing what it found.
#[allow(clippy::print_stdout, clippy::print_stderr)] // the answer is the output
pub(crate) fn run(metrics: &MetricsConfig) -> ExitCode {
    if !metrics.enabled {
        eprintln!(
            "shoal health: the monitoring endpoint is off ([metrics] enabled = false, or \
             SHOAL__METRICS__ENABLED): nothing answers /health"
        );
        return ExitCode::FAILURE;
    }
    let address = reachable(metrics.address);
    match ask(address) {
        Ok((200, body)) => {
            print!("{body}");
            ExitCode::SUCCESS
        }
        Ok((status, body)) => {
            eprintln!("shoal health: http://{address}/health answered {status}: {body}");
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("shoal health: cannot ask http://{address}/health: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The address to connect to for one the endpoint listens on: a wildcard is asked on
/// loopback of the same family.
fn reachable(listening: SocketAddr) -> SocketAddr {
    let ip = match listening.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listening.port())
}

/// One `GET /health`; the status code and the body.
fn ask(address: SocketAddr) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&address, TIMEOUT)?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    stream.write_all(b"GET /health HTTP/1.0\r\nHost: shoal\r\n\r\n")?;
    let mut answer = String::new();
    stream.take(MAX_ANSWER).read_to_string(&mut answer)?;
    parse_answer(&answer).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not an HTTP answer: {:?}",
                answer.lines().next().unwrap_or("")
            ),
        )
    })
}

/// `HTTP/1.x CODE ...` and the body after the blank line.
fn parse_answer(answer: &str) -> Option<(u16, String)> {
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status_line = head.lines().next()?;
    let mut words = status_line.split(' ');
    if !words.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code = words.next()?.parse().ok()?;
    Some((code, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    #[test]
    fn a_wildcard_is_asked_on_loopback() {
        assert_eq!(
            reachable("0.0.0.0:9969".parse().unwrap()),
            "127.0.0.1:9969".parse().unwrap()
        );
        assert_eq!(
            reachable("[::]:9969".parse().unwrap()),
            "[::1]:9969".parse().unwrap()
        );
        assert_eq!(
            reachable("10.0.0.7:9969".parse().unwrap()),
            "10.0.0.7:9969".parse().unwrap()
        );
    }

    #[test]
    fn answers_are_read_by_status() {
        assert_eq!(
            parse_answer("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"),
            Some((200, "ok\n".into()))
        );
        assert_eq!(
            parse_answer("HTTP/1.1 503 Service Unavailable\r\n\r\nunhealthy: udp\n"),
            Some((503, "unhealthy: udp\n".into()))
        );
        assert_eq!(parse_answer("SSH-2.0-OpenSSH\r\n\r\n"), None);
        assert_eq!(parse_answer("HTTP/1.1 200 OK\r\n"), None);
    }

    /// A one-shot server answering `answer`; its address.
    fn serve_once(answer: &'static str) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 256];
            let n = stream.read(&mut request).unwrap();
            assert!(request[..n].starts_with(b"GET /health HTTP/1.0\r\n"));
            stream.write_all(answer.as_bytes()).unwrap();
        });
        address
    }

    fn metrics(address: SocketAddr) -> MetricsConfig {
        MetricsConfig {
            enabled: true,
            address,
        }
    }

    #[test]
    fn the_exit_status_follows_the_answer() {
        let healthy = serve_once("HTTP/1.1 200 OK\r\n\r\nok\n");
        assert_eq!(run(&metrics(healthy)), ExitCode::SUCCESS);
        let unhealthy = serve_once("HTTP/1.1 503 Service Unavailable\r\n\r\nunhealthy: ws\n");
        assert_eq!(run(&metrics(unhealthy)), ExitCode::FAILURE);
        // Nothing listening: a port just closed.
        let closed = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        assert_eq!(run(&metrics(closed)), ExitCode::FAILURE);
        let mut off = metrics(closed);
        off.enabled = false;
        assert_eq!(run(&off), ExitCode::FAILURE);
    }
}
