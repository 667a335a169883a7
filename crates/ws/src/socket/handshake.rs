//! The HTTP request that opens a connection: a WebSocket upgrade (RFC 6455 §4.2) or
//! a health check.
//!
//! The request is read and checked here, not by tungstenite's handshake, so every
//! refusal gets a plain HTTP status with a reason (a 426 names the version we speak)
//! and the health-check path can answer without an upgrade. The accept key comes
//! from tungstenite.

use std::time::Instant;

use futures_lite::{AsyncRead, AsyncReadExt as _, AsyncWrite};

use shoal_common::executor::{within, write_all_before as write_all};

use super::Worker;

/// How the opening request ended.
pub(crate) enum Opening {
    /// Upgraded: these bytes arrived after the request (the first frames).
    Upgraded(Vec<u8>),
    /// Answered over plain HTTP (health check or refusal); close the connection.
    Answered,
}

/// Most headers in an upgrade request.
const MAX_HEADERS: usize = 32;

/// Reads the opening request until `deadline` and answers it.
pub(crate) async fn open<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    local: &Worker,
    deadline: Instant,
) -> Opening {
    let max = local.config.limits.max_handshake_size;
    let mut buffer = vec![0u8; max];
    let mut filled = 0;
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        let refusal = match request.parse(&buffer[..filled]) {
            Ok(httparse::Status::Complete(length)) => match answer(&request, local) {
                Ok(response) => {
                    let upgraded = response.starts_with(b"HTTP/1.1 101");
                    let leftover = buffer[length..filled].to_vec();
                    if !write_all(stream, &response, deadline).await {
                        return Opening::Answered;
                    }
                    return if upgraded {
                        Opening::Upgraded(leftover)
                    } else {
                        Opening::Answered
                    };
                }
                Err(refusal) => Some(refusal),
            },
            Ok(httparse::Status::Partial) if filled == max => {
                Some(Refusal::new(431, "request too large"))
            }
            Ok(httparse::Status::Partial) => None,
            Err(httparse::Error::TooManyHeaders) => Some(Refusal::new(431, "too many headers")),
            Err(_) => Some(Refusal::new(400, "malformed request")),
        };
        if let Some(refusal) = refusal {
            local.counters.borrow_mut().bad_handshakes += 1;
            let _ = write_all(stream, &refusal.response(), deadline).await;
            return Opening::Answered;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match within(left, stream.read(&mut buffer[filled..])).await {
            Some(Ok(0)) | Some(Err(_)) => return Opening::Answered,
            Some(Ok(read)) => filled += read,
            None => {
                if filled > 0 {
                    local.counters.borrow_mut().bad_handshakes += 1;
                    let refusal = Refusal::new(408, "request not completed in time");
                    let _ = write_all(
                        stream,
                        &refusal.response(),
                        Instant::now() + std::time::Duration::from_secs(1),
                    )
                    .await;
                }
                return Opening::Answered;
            }
        }
    }
}

/// An HTTP error reply.
pub(crate) struct Refusal {
    status: u16,
    reason: &'static str,
    extra_header: &'static str,
}

impl Refusal {
    pub(crate) fn new(status: u16, reason: &'static str) -> Self {
        Self {
            status,
            reason,
            extra_header: "",
        }
    }

    /// The whole response; the connection closes after it.
    pub(crate) fn response(&self) -> Vec<u8> {
        plain_response(self.status, self.extra_header, self.reason)
    }
}

fn plain_response(status: u16, extra_header: &str, body: &str) -> Vec<u8> {
    let phrase = match status {
        200 => "OK",
        400 => "Bad Request",
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

/// The response to a complete request: a 101 upgrade, or a health check's 200.
fn answer(request: &httparse::Request<'_, '_>, local: &Worker) -> Result<Vec<u8>, Refusal> {
    if request.method != Some("GET") {
        return Err(Refusal {
            extra_header: "Allow: GET\r\n",
            ..Refusal::new(405, "only GET is served")
        });
    }
    let path = request.path.unwrap_or("/");
    let path = path.split_once('?').map_or(path, |(path, _)| path);
    let health = &local.config.network.health_check_path;
    if !health.is_empty() && path == health {
        local.counters.borrow_mut().health_checks += 1;
        return Ok(plain_response(200, "", "ok"));
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
    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
    Ok(format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    )
    .into_bytes())
}
