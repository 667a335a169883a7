//! The HTTP request that opens a connection, read under the handshake deadline and
//! answered; the parsing and the answer are `shoal_ws_protocol::opening`'s.

use std::net::SocketAddr;
use std::time::Instant;

use futures_lite::{AsyncRead, AsyncReadExt as _, AsyncWrite};
use shoal_common::{HeaderPosition, ReverseProxy as _};
use shoal_private::{KeyDigest, KeyPlaces};
use shoal_tcp::{HeadScan, before, write_all_before as write_all};
use shoal_worker::{ConnectionSlot, OverLimit, Verdict};
use shoal_ws_protocol::opening::{OpenedKind, OpeningLimits, ProxyHeader, Refusal, parse_opening};

use super::Worker;
use crate::origins::{OriginSlot, OriginVerdict};

/// How the opening request ended.
pub(crate) enum Opening {
    /// Upgraded.
    Upgraded {
        /// The bytes that arrived after the request (the first frames).
        leftover: Vec<u8>,
        /// The client: the TCP peer, or behind a trusted proxy the address its header
        /// gave (with the proxy connection's port).
        client: SocketAddr,
        /// The client's place in the per-client connection limit, held while the
        /// connection is open, when it came through a proxy (a direct client's is
        /// taken at accept).
        slot: Option<ConnectionSlot>,
        /// In private mode, the digest of the passkey the connection was opened
        /// with (its user was registered and enabled then).
        key: Option<KeyDigest>,
        /// Its place in its Origin's connection cap, held while it is open, when
        /// caps are on and it has an Origin.
        origin_slot: Option<OriginSlot>,
    },
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
        proxy_header: config
            .network
            .proxy_header_from(peer.ip())
            .then(|| ProxyHeader {
                name: &config.network.reverse_proxy_ip_header,
                use_last: config.network.reverse_proxy_ip_header_position == HeaderPosition::Last,
            }),
        private: config.private.enabled.then_some(KeyPlaces {
            paths: &["/announce"],
            parameter: &config.private.key_parameter,
            bare: true,
        }),
    };
    let mut buffer = vec![0u8; limits.max_size];
    let mut filled = 0;
    // Parsed only once the head may be whole: not again after every byte.
    let mut scan = HeadScan::new();
    loop {
        let worth_parsing = scan.worth_parsing(&buffer[..filled], filled == buffer.len());
        match worth_parsing.then(|| parse_opening(&buffer[..filled], &limits)) {
            Some(Ok(Some(opened))) => {
                // Through a trusted proxy, the limits the TCP peer skipped at accept
                // apply to the client it names.
                let mut slot = None;
                if let Some(ip) = opened.forwarded_ip {
                    match admit_forwarded(local, ip) {
                        Ok(admitted) => slot = Some(admitted),
                        Err(refusal) => {
                            if let Some(refusal) = refusal {
                                let _ = write_all(stream, &refusal.response(), deadline).await;
                            }
                            return Opening::Answered;
                        }
                    }
                }
                // The web page that opened it (before any state is kept for it).
                let mut origin_slot = None;
                if opened.kind == OpenedKind::Upgrade {
                    match local.per_worker.origins.admit(opened.origin.as_deref()) {
                        Ok(slot) => origin_slot = slot,
                        Err(verdict) => {
                            let refusal = match verdict {
                                OriginVerdict::Refused(_) => {
                                    local.counters.borrow_mut().origin_refused += 1;
                                    Refusal::new(403, "this tracker does not serve this origin")
                                }
                                OriginVerdict::Full => {
                                    local.counters.borrow_mut().origin_full += 1;
                                    Refusal::new(503, "too many connections from this origin")
                                }
                            };
                            let _ = write_all(stream, &refusal.response(), deadline).await;
                            return Opening::Answered;
                        }
                    }
                }
                // Private mode: only a registered, enabled user's key opens a
                // connection; each announce on it is checked again.
                if opened.kind == OpenedKind::Upgrade
                    && let Some(registry) = &local.context.private
                    && let Err(refusal) = registry.user(opened.key)
                {
                    local.counters.borrow_mut().private_refused += 1;
                    let refusal = Refusal::new(403, refusal.reason());
                    let _ = write_all(stream, &refusal.response(), deadline).await;
                    return Opening::Answered;
                }
                if !write_all(stream, &opened.response, deadline).await {
                    return Opening::Answered;
                }
                return match opened.kind {
                    OpenedKind::Upgrade => Opening::Upgraded {
                        leftover: buffer[opened.len..filled].to_vec(),
                        client: SocketAddr::new(
                            opened.forwarded_ip.unwrap_or(peer.ip()),
                            peer.port(),
                        ),
                        slot,
                        key: opened.key,
                        origin_slot,
                    },
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

/// The per-client limits for a client a trusted proxy names: its request rate (an
/// opening counts as a request, as a direct connection does at accept) and its open
/// connections. `Err(None)`: banned or over its rate, closed without a word;
/// `Err(Some(refusal))`: too many connections, answered with a 503.
fn admit_forwarded(
    local: &Worker,
    ip: std::net::IpAddr,
) -> Result<ConnectionSlot, Option<Refusal>> {
    if local.check_rate(ip) != Verdict::Allow {
        return Err(None);
    }
    local.connections_per_ip.open(ip).map_err(|over| {
        local.count(|counters| counters.refused_per_ip += 1);
        Some(Refusal::new(
            503,
            match over {
                OverLimit::Client => "too many connections from your address",
                OverLimit::Network => "too many connections from your network",
            },
        ))
    })
}
