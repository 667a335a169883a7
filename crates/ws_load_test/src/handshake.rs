//! The client side of the WebSocket opening handshake (RFC 6455 section 4.1).
//!
//! Written here rather than driven through tungstenite's blocking-style handshake
//! machine because a connection's bytes already flow through our own non-blocking
//! [`Transport`](crate::transport::Transport): the request is bytes to send, the
//! response is bytes to check, and whatever follows the response is handed to
//! tungstenite as the first WebSocket bytes.

use tungstenite::handshake::client::generate_key;
use tungstenite::handshake::derive_accept_key;

/// Largest response head we accept.
const MAX_RESPONSE: usize = 16 * 1024;

/// An upgrade in progress: the accept key the server must send back.
#[derive(Debug)]
pub(crate) struct Upgrade {
    expected_accept: String,
}

/// Why an upgrade failed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum UpgradeError {
    /// Not an HTTP response, or too long.
    Malformed,
    /// A status other than 101 (e.g. 503 when the tracker is full).
    Status(u16),
    /// 101 without `Upgrade: websocket` or with the wrong `Sec-WebSocket-Accept`.
    NotWebSocket,
}

impl Upgrade {
    /// Starts an upgrade: appends the request to `out`.
    pub(crate) fn start(host: &str, path: &str, out: &mut Vec<u8>) -> Self {
        let key = generate_key();
        out.extend_from_slice(
            format!(
                "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n\
                 Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n\
                 Sec-WebSocket-Version: 13\r\nUser-Agent: shoal_ws_load_test\r\n\r\n"
            )
            .as_bytes(),
        );
        Self {
            expected_accept: derive_accept_key(key.as_bytes()),
        }
    }

    /// Checks the response at the start of `received`: `Ok(None)` while incomplete,
    /// else the length of the response head (WebSocket frames follow it).
    pub(crate) fn check(&self, received: &[u8]) -> Result<Option<usize>, UpgradeError> {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        let head = match response.parse(received) {
            Ok(httparse::Status::Complete(head)) => head,
            Ok(httparse::Status::Partial) if received.len() <= MAX_RESPONSE => return Ok(None),
            Ok(httparse::Status::Partial) | Err(_) => return Err(UpgradeError::Malformed),
        };
        match response.code {
            Some(101) => {}
            Some(code) => return Err(UpgradeError::Status(code)),
            None => return Err(UpgradeError::Malformed),
        }
        let header = |name: &str| {
            response
                .headers
                .iter()
                .find(|header| header.name.eq_ignore_ascii_case(name))
                .map(|header| header.value)
        };
        let upgraded = header("upgrade")
            .is_some_and(|value| value.trim_ascii().eq_ignore_ascii_case(b"websocket"));
        let accepted = header("sec-websocket-accept")
            .is_some_and(|value| value.trim_ascii() == self.expected_accept.as_bytes());
        if upgraded && accepted {
            Ok(Some(head))
        } else {
            Err(UpgradeError::NotWebSocket)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(request: &[u8]) -> String {
        let text = std::str::from_utf8(request).unwrap();
        let line = text
            .lines()
            .find_map(|line| line.strip_prefix("Sec-WebSocket-Key: "))
            .unwrap();
        line.to_string()
    }

    #[test]
    fn a_matching_101_completes_the_upgrade() {
        let mut out = Vec::new();
        let upgrade = Upgrade::start("localhost", "/announce", &mut out);
        assert!(out.starts_with(b"GET /announce HTTP/1.1\r\nHost: localhost\r\n"));
        assert!(out.ends_with(b"\r\n\r\n"));
        let accept = derive_accept_key(key_of(&out).as_bytes());
        let response = format!(
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: WebSocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {accept}\r\n\r\n"
        );
        let mut bytes = response.into_bytes();
        let head = bytes.len();
        // A text frame "{}" right behind the response.
        bytes.extend_from_slice(b"\x81\x02{}");
        assert_eq!(upgrade.check(&bytes[..20]), Ok(None));
        assert_eq!(upgrade.check(&bytes), Ok(Some(head)));
    }

    #[test]
    fn refusals_and_wrong_keys_fail() {
        let mut out = Vec::new();
        let upgrade = Upgrade::start("localhost", "/", &mut out);
        assert_eq!(
            upgrade.check(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n"),
            Err(UpgradeError::Status(503))
        );
        assert_eq!(
            upgrade.check(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: nope\r\n\r\n"
            ),
            Err(UpgradeError::NotWebSocket)
        );
        assert_eq!(
            upgrade.check(b"SSH-2.0\r\n\r\n"),
            Err(UpgradeError::Malformed)
        );
        assert_eq!(
            upgrade.check(&vec![b'a'; MAX_RESPONSE + 1]),
            Err(UpgradeError::Malformed)
        );
    }
}
