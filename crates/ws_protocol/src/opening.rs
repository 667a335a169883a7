//! The HTTP request that opens a WebSocket connection (RFC 6455 §4.2), or asks for a
//! health check, and the response to it. Pure: bytes in, a verdict and the response's
//! bytes out; the connection layer reads and writes.
//!
//! The request is checked here rather than by tungstenite's handshake so that every
//! refusal gets a plain HTTP status with a reason (a 426 names the version spoken), and
//! the health-check path can answer without an upgrade. The accept key comes from
//! tungstenite.

use std::net::IpAddr;

pub use shoal_http_protocol::request::ProxyHeader;
use shoal_http_protocol::request::forwarded_address;
use shoal_private::{KeyDigest, KeyPlaces, Passkey};

/// Most headers in an opening request.
pub const MAX_HEADERS: usize = 32;

/// What the tracker serves besides WebSocket upgrades.
#[derive(Clone, Copy, Debug)]
pub struct OpeningLimits<'a> {
    /// Largest request, in bytes; a longer one is refused with a 431.
    pub max_size: usize,
    /// The health-check path ("" for none).
    pub health_check_path: &'a str,
    /// The header a trusted reverse proxy puts the client's address in, when the
    /// connection comes from one: an upgrade without a valid one is refused.
    pub proxy_header: Option<ProxyHeader<'a>>,
    /// Private mode: where the upgrade's target carries the passkey (`/KEY`,
    /// `/KEY/announce`, `/announce/KEY`, `?passkey=KEY`).
    pub private: Option<KeyPlaces<'a>>,
}

/// A complete opening request, answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opened {
    /// Bytes the request took; what follows is the client's first frames.
    pub len: usize,
    /// What to write back.
    pub response: Vec<u8>,
    /// What was asked.
    pub kind: OpenedKind,
    /// The client's address from the proxy header, when `proxy_header` was given.
    pub forwarded_ip: Option<IpAddr>,
    /// In private mode, the digest of the passkey the upgrade's target carried.
    pub key: Option<KeyDigest>,
    /// The upgrade's `Origin` header, [`normalize`](crate::origin::normalize)d (the
    /// web page that opened it, when a browser did); `None` without one.
    pub origin: Option<String>,
}

/// What an opening request asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenedKind {
    /// A WebSocket: after the response, frames.
    Upgrade,
    /// The health check: close after the response.
    Health,
}

/// An opening request refused: an HTTP error with a reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The status.
    pub status: u16,
    /// Why, in the body.
    pub reason: &'static str,
    extra_header: &'static str,
}

impl Refusal {
    /// A refusal with `status` and `reason`.
    pub fn new(status: u16, reason: &'static str) -> Self {
        Self {
            status,
            reason,
            extra_header: "",
        }
    }

    /// The whole response; the connection closes after it.
    pub fn response(&self) -> Vec<u8> {
        plain_response(self.status, self.extra_header, self.reason)
    }
}

/// Reads the opening request at the start of `buffer`: `Ok(None)` while it is
/// incomplete (read more), the answer once it is complete, or why it is refused.
pub fn parse_opening(buffer: &[u8], limits: &OpeningLimits<'_>) -> Result<Option<Opened>, Refusal> {
    let buffer = &buffer[..buffer.len().min(limits.max_size)];
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(buffer) {
        Ok(httparse::Status::Complete(len)) => {
            let (response, kind, forwarded_ip) = answer(&request, limits)?;
            let key = limits.private.as_ref().and_then(|places| {
                let target = request.path.unwrap_or("/").as_bytes();
                places.locate(target).key.map(Passkey::digest)
            });
            let origin = request
                .headers
                .iter()
                .find(|header| header.name.eq_ignore_ascii_case("origin"))
                .map(|header| crate::origin::normalize(header.value));
            Ok(Some(Opened {
                len,
                response,
                kind,
                forwarded_ip,
                key,
                origin,
            }))
        }
        Ok(httparse::Status::Partial) if buffer.len() >= limits.max_size => {
            Err(Refusal::new(431, "request too large"))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(Refusal::new(431, "too many headers")),
        Err(_) => Err(Refusal::new(400, "malformed request")),
    }
}

/// The response to a complete request: a 101 upgrade (with the client's address from
/// a trusted proxy's header), or a health check's 200.
fn answer(
    request: &httparse::Request<'_, '_>,
    limits: &OpeningLimits<'_>,
) -> Result<(Vec<u8>, OpenedKind, Option<IpAddr>), Refusal> {
    if request.method != Some("GET") {
        return Err(Refusal {
            extra_header: "Allow: GET\r\n",
            ..Refusal::new(405, "only GET is served")
        });
    }
    let path = request.path.unwrap_or("/");
    let path = path.split_once('?').map_or(path, |(path, _)| path);
    let health = limits.health_check_path;
    if !health.is_empty() && path == health {
        return Ok((plain_response(200, "", "ok"), OpenedKind::Health, None));
    }
    let header = |name: &str| {
        request
            .headers
            .iter()
            .find(|header| header.name.eq_ignore_ascii_case(name))
            .and_then(|header| std::str::from_utf8(header.value).ok())
    };
    let has_token = |name: &str, token: &str| {
        header(name).is_some_and(|value| {
            value
                .split(',')
                .any(|item| item.trim().eq_ignore_ascii_case(token))
        })
    };
    if !has_token("upgrade", "websocket") || !has_token("connection", "upgrade") {
        return Err(Refusal {
            extra_header: "Upgrade: websocket\r\n",
            ..Refusal::new(426, "this is a WebSocket tracker: upgrade to websocket")
        });
    }
    if header("sec-websocket-version").map(str::trim) != Some("13") {
        return Err(Refusal {
            extra_header: "Sec-WebSocket-Version: 13\r\n",
            ..Refusal::new(426, "unsupported WebSocket version (13 is served)")
        });
    }
    let Some(key) = header("sec-websocket-key")
        .map(str::trim)
        .filter(|key| !key.is_empty())
    else {
        return Err(Refusal::new(400, "missing Sec-WebSocket-Key"));
    };
    let forwarded_ip = match &limits.proxy_header {
        None => None,
        Some(proxy) => Some(
            request
                .headers
                .iter()
                .rev()
                .find(|header| header.name.eq_ignore_ascii_case(proxy.name))
                .and_then(|header| forwarded_address(header.value, proxy.use_last))
                .ok_or(Refusal::new(
                    400,
                    "missing or invalid client address header from the proxy",
                ))?,
        ),
    };
    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    );
    Ok((response.into_bytes(), OpenedKind::Upgrade, forwarded_ip))
}

fn plain_response(status: u16, extra_header: &str, body: &str) -> Vec<u8> {
    let phrase = match status {
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        426 => "Upgrade Required",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    };
    format!(
        "HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n{extra_header}\r\n{body}\n",
        body.len() + 1
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: OpeningLimits<'static> = OpeningLimits {
        max_size: 1024,
        health_check_path: "/health",
        proxy_header: None,
        private: None,
    };

    const UPGRADE: &str = "GET /announce HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\n\
        Connection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\n\
        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

    #[test]
    fn an_upgrade_gets_the_accept_key_and_leaves_the_frames() {
        let mut bytes = UPGRADE.as_bytes().to_vec();
        bytes.extend_from_slice(b"\x81\x00");
        let opened = parse_opening(&bytes, &LIMITS).unwrap().unwrap();
        assert_eq!(opened.kind, OpenedKind::Upgrade);
        assert_eq!(opened.len, UPGRADE.len());
        assert_eq!(opened.origin, None);
        let from_page =
            UPGRADE.replace("Host: t\r\n", "Host: t\r\norigin: HTTPS://App.Example/\r\n");
        let opened = parse_opening(from_page.as_bytes(), &LIMITS)
            .unwrap()
            .unwrap();
        assert_eq!(opened.origin.as_deref(), Some("https://app.example"));
        let text = String::from_utf8(opened.response).unwrap();
        // RFC 6455's own example key and answer.
        assert!(text.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
    }

    #[test]
    fn behind_a_trusted_proxy_the_client_address_comes_from_its_header() {
        let limits = OpeningLimits {
            proxy_header: Some(ProxyHeader {
                name: "X-Forwarded-For",
                use_last: true,
            }),
            ..LIMITS
        };
        let through = |headers: &str| {
            let text = UPGRADE.replace("Host: t\r\n", &format!("Host: t\r\n{headers}"));
            parse_opening(text.as_bytes(), &limits)
        };
        let opened = through("x-forwarded-for: 203.0.113.5, 198.51.100.7\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(opened.forwarded_ip, Some("198.51.100.7".parse().unwrap()));
        // The last line of the header is the one the proxy in front appended.
        let opened = through("X-Forwarded-For: 192.0.2.1\r\nX-Forwarded-For: 192.0.2.2\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(opened.forwarded_ip, Some("192.0.2.2".parse().unwrap()));
        for bad in [
            "",
            "X-Forwarded-For: nonsense\r\n",
            "X-Forwarded-For: 0.0.0.0\r\n",
        ] {
            assert_eq!(through(bad).unwrap_err().status, 400, "{bad:?}");
        }
        // Health checks need no address; without a proxy there is none.
        let health = parse_opening(b"GET /health HTTP/1.1\r\n\r\n", &limits);
        assert_eq!(health.unwrap().unwrap().forwarded_ip, None);
        let direct = parse_opening(UPGRADE.as_bytes(), &LIMITS).unwrap().unwrap();
        assert_eq!(direct.forwarded_ip, None);
    }

    #[test]
    fn incomplete_requests_wait_and_bad_ones_are_refused_with_a_status() {
        assert_eq!(parse_opening(&UPGRADE.as_bytes()[..30], &LIMITS), Ok(None));
        let status = |text: &str| parse_opening(text.as_bytes(), &LIMITS).unwrap_err().status;
        assert_eq!(status("POST / HTTP/1.1\r\n\r\n"), 405);
        assert_eq!(status("GET / HTTP/1.1\r\n\r\n"), 426);
        assert_eq!(status(&UPGRADE.replace("13", "8")), 426);
        assert_eq!(status(&UPGRADE.replace("Sec-WebSocket-Key", "X-Key")), 400);
        assert_eq!(status("\x00\x01 garbage\r\n\r\n"), 400);
        let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(2000));
        assert_eq!(status(&huge), 431);
        let many: String = (0..40).map(|i| format!("X{i}: y\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\n{many}\r\n")), 431);
    }

    #[test]
    fn the_health_check_answers_without_an_upgrade() {
        let opened = parse_opening(b"GET /health?x=1 HTTP/1.1\r\n\r\n", &LIMITS)
            .unwrap()
            .unwrap();
        assert_eq!(opened.kind, OpenedKind::Health);
        assert!(opened.response.starts_with(b"HTTP/1.1 200 OK"));
    }

    #[test]
    fn in_private_mode_the_upgrade_carries_the_key_digest() {
        const KEY: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
        let private = OpeningLimits {
            private: Some(KeyPlaces {
                paths: &["/announce"],
                parameter: "passkey",
                bare: true,
            }),
            ..LIMITS
        };
        let digest = Passkey::new(KEY.as_bytes()).map(Passkey::digest);
        for target in [
            format!("/{KEY}"),
            format!("/{KEY}/announce"),
            format!("/announce?passkey={KEY}"),
        ] {
            let request = UPGRADE.replacen("/announce", &target, 1);
            let opened = parse_opening(request.as_bytes(), &private)
                .unwrap()
                .unwrap();
            assert_eq!(opened.key, digest, "{target}");
        }
        let opened = parse_opening(UPGRADE.as_bytes(), &private)
            .unwrap()
            .unwrap();
        assert_eq!(opened.key, None);
        // Public mode looks for no key.
        let request = UPGRADE.replacen("/announce", &format!("/{KEY}"), 1);
        assert_eq!(
            parse_opening(request.as_bytes(), &LIMITS)
                .unwrap()
                .unwrap()
                .key,
            None
        );
    }
}
