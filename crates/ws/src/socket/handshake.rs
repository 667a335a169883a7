//! The HTTP request that opens a connection, read under the handshake deadline and
//! answered; the parsing and the answer are `shoal_ws_protocol::opening`'s.

use std::time::Instant;

use futures_lite::{AsyncRead, AsyncReadExt as _, AsyncWrite};
use shoal_common::executor::{before, write_all_before as write_all};
use shoal_common::http_head::HeadScan;
use shoal_ws_protocol::opening::{OpenedKind, OpeningLimits, Refusal, parse_opening};

use super::Worker;

/// How the opening request ended.
pub(crate) enum Opening {
    /// Upgraded: these bytes arrived after the request (the first frames).
    Upgraded(Vec<u8>),
    /// Answered over plain HTTP (health check or refusal); close the connection.
    Answered,
}

/// Reads the opening request until `deadline` (however slowly its bytes come) and
/// answers it.
pub(crate) async fn open<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    local: &Worker,
    peer: std::net::SocketAddr,
    deadline: Instant,
) -> Opening {
    let config = &local.config;
    let limits = OpeningLimits {
        max_size: config.limits.max_handshake_size,
        health_check_path: &config.network.health_check_path,
    };
    let mut buffer = vec![0u8; limits.max_size];
    let mut filled = 0;
    // Parsed only once the head may be whole: not again after every byte.
    let mut scan = HeadScan::new();
    loop {
        let worth_parsing = scan.worth_parsing(&buffer[..filled], filled == buffer.len());
        match worth_parsing.then(|| parse_opening(&buffer[..filled], &limits)) {
            Some(Ok(Some(opened))) => {
                if !write_all(stream, &opened.response, deadline).await {
                    return Opening::Answered;
                }
                return match opened.kind {
                    OpenedKind::Upgrade => Opening::Upgraded(buffer[opened.len..filled].to_vec()),
                    OpenedKind::Health => {
                        let mut counters = local.counters.borrow_mut();
                        counters.health_checks += 1;
                        counters.health_checks_v6 += u64::from(peer.ip().to_canonical().is_ipv6());
                        Opening::Answered
                    }
                };
            }
            None | Some(Ok(None)) => {}
            Some(Err(refusal)) => {
                local.counters.borrow_mut().bad_handshakes += 1;
                let _ = write_all(stream, &refusal.response(), deadline).await;
                return Opening::Answered;
            }
        }
        match before(deadline, stream.read(&mut buffer[filled..])).await {
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
