//! Responses: streaming writers for the tracker and an owned [`Response`] for clients.
//!
//! The tracker never builds a [`Response`]: it calls the `write_*` functions to encode
//! straight into the buffer it sends from, copying peers in their compact form.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use thiserror::Error;

use crate::{ConnectionId, Reader, TransactionId, action};

/// Length of a connect response.
pub const CONNECT_RESPONSE_LEN: usize = 16;
/// Length of an announce response before its peers.
pub const ANNOUNCE_RESPONSE_HEADER_LEN: usize = 20;
/// Length of one scrape response entry.
pub const SCRAPE_ENTRY_LEN: usize = 12;
/// Length of one compact IPv4 peer.
pub const V4_PEER_LEN: usize = 6;
/// Length of one compact IPv6 peer.
pub const V6_PEER_LEN: usize = 18;

/// Writes a connect response.
pub fn write_connect(
    out: &mut Vec<u8>,
    transaction_id: TransactionId,
    connection_id: ConnectionId,
) {
    write_action(out, action::CONNECT, transaction_id);
    out.extend_from_slice(&connection_id.0.to_be_bytes());
}

/// Writes the fixed part of an announce response; the caller appends the peers in
/// compact form (6 bytes each when answering over IPv4, 18 over IPv6).
pub fn write_announce_header(
    out: &mut Vec<u8>,
    transaction_id: TransactionId,
    interval: u32,
    leechers: u32,
    seeders: u32,
) {
    write_action(out, action::ANNOUNCE, transaction_id);
    out.extend_from_slice(&interval.to_be_bytes());
    out.extend_from_slice(&leechers.to_be_bytes());
    out.extend_from_slice(&seeders.to_be_bytes());
}

/// Writes the fixed part of a scrape response; the caller appends one
/// [`write_scrape_entry`] per info hash, in request order.
pub fn write_scrape_header(out: &mut Vec<u8>, transaction_id: TransactionId) {
    write_action(out, action::SCRAPE, transaction_id);
}

/// Writes one torrent's entry of a scrape response.
pub fn write_scrape_entry(out: &mut Vec<u8>, stats: ScrapeStats) {
    out.extend_from_slice(&stats.seeders.to_be_bytes());
    out.extend_from_slice(&stats.completed.to_be_bytes());
    out.extend_from_slice(&stats.leechers.to_be_bytes());
}

/// Writes an error response.
pub fn write_error(out: &mut Vec<u8>, transaction_id: TransactionId, message: &str) {
    write_action(out, action::ERROR, transaction_id);
    out.extend_from_slice(message.as_bytes());
}

fn write_action(out: &mut Vec<u8>, action: u32, transaction_id: TransactionId) {
    out.extend_from_slice(&action.to_be_bytes());
    out.extend_from_slice(&transaction_id.0.to_be_bytes());
}

/// A decoded response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    /// Answer to a connect request.
    Connect(ConnectResponse),
    /// Answer to an announce.
    Announce(AnnounceResponse),
    /// Answer to a scrape.
    Scrape(ScrapeResponse),
    /// The request failed.
    Error(ErrorResponse),
}

/// Answer to a connect request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectResponse {
    /// From the request.
    pub transaction_id: TransactionId,
    /// To use in announces and scrapes.
    pub connection_id: ConnectionId,
}

/// Answer to an announce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnounceResponse {
    /// From the request.
    pub transaction_id: TransactionId,
    /// Seconds the client should wait before announcing again.
    pub interval: u32,
    /// Peers still downloading.
    pub leechers: u32,
    /// Peers with the whole torrent.
    pub seeders: u32,
    /// Peers to connect to, all of one family.
    pub peers: Vec<SocketAddr>,
}

/// Answer to a scrape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScrapeResponse {
    /// From the request.
    pub transaction_id: TransactionId,
    /// One entry per requested info hash, in request order.
    pub torrents: Vec<ScrapeStats>,
}

/// One torrent's scrape entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrapeStats {
    /// Peers with the whole torrent.
    pub seeders: u32,
    /// Times the torrent has been downloaded (announces with event=completed).
    pub completed: u32,
    /// Peers still downloading.
    pub leechers: u32,
}

/// An error reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorResponse {
    /// From the request.
    pub transaction_id: TransactionId,
    /// Human-readable reason.
    pub message: String,
}

/// Which compact peer form an announce response carries. The packet does not say:
/// it follows from the address family the request was sent over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerFamily {
    /// 6 bytes per peer.
    V4,
    /// 18 bytes per peer.
    V6,
}

/// Why bytes are not a valid response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum ResponseParseError {
    /// Shorter than its fixed part.
    #[error("response too short")]
    TooShort,
    /// Unknown action field.
    #[error("unknown action {0}")]
    UnknownAction(u32),
    /// Trailing bytes that are not a whole peer or scrape entry.
    #[error("response length does not match its entries")]
    BadLength,
}

impl Response {
    /// Decodes a response that arrived over `family`.
    pub fn parse(bytes: &[u8], family: PeerFamily) -> Result<Self, ResponseParseError> {
        if bytes.len() < 8 {
            return Err(ResponseParseError::TooShort);
        }
        let mut reader = Reader::new(bytes);
        let action = reader.u32();
        let transaction_id = TransactionId(reader.u32());
        let body = reader.rest();
        match action {
            action::CONNECT => {
                if bytes.len() < CONNECT_RESPONSE_LEN {
                    return Err(ResponseParseError::TooShort);
                }
                let connection_id = ConnectionId(Reader::new(body).u64());
                Ok(Self::Connect(ConnectResponse {
                    transaction_id,
                    connection_id,
                }))
            }
            action::ANNOUNCE => {
                if bytes.len() < ANNOUNCE_RESPONSE_HEADER_LEN {
                    return Err(ResponseParseError::TooShort);
                }
                let mut reader = Reader::new(body);
                let interval = reader.u32();
                let leechers = reader.u32();
                let seeders = reader.u32();
                let peer_bytes = reader.rest();
                let peer_len = match family {
                    PeerFamily::V4 => V4_PEER_LEN,
                    PeerFamily::V6 => V6_PEER_LEN,
                };
                if !peer_bytes.len().is_multiple_of(peer_len) {
                    return Err(ResponseParseError::BadLength);
                }
                let peers = peer_bytes
                    .chunks_exact(peer_len)
                    .map(compact_peer)
                    .collect();
                Ok(Self::Announce(AnnounceResponse {
                    transaction_id,
                    interval,
                    leechers,
                    seeders,
                    peers,
                }))
            }
            action::SCRAPE => {
                if !body.len().is_multiple_of(SCRAPE_ENTRY_LEN) {
                    return Err(ResponseParseError::BadLength);
                }
                let torrents = body
                    .chunks_exact(SCRAPE_ENTRY_LEN)
                    .map(|entry| {
                        let mut entry = Reader::new(entry);
                        ScrapeStats {
                            seeders: entry.u32(),
                            completed: entry.u32(),
                            leechers: entry.u32(),
                        }
                    })
                    .collect();
                Ok(Self::Scrape(ScrapeResponse {
                    transaction_id,
                    torrents,
                }))
            }
            action::ERROR => Ok(Self::Error(ErrorResponse {
                transaction_id,
                message: String::from_utf8_lossy(body).into_owned(),
            })),
            other => Err(ResponseParseError::UnknownAction(other)),
        }
    }

    /// Appends the encoded response to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Self::Connect(r) => write_connect(out, r.transaction_id, r.connection_id),
            Self::Announce(r) => {
                write_announce_header(out, r.transaction_id, r.interval, r.leechers, r.seeders);
                for peer in &r.peers {
                    match peer {
                        SocketAddr::V4(addr) => out.extend_from_slice(&addr.ip().octets()),
                        SocketAddr::V6(addr) => out.extend_from_slice(&addr.ip().octets()),
                    }
                    out.extend_from_slice(&peer.port().to_be_bytes());
                }
            }
            Self::Scrape(r) => {
                write_scrape_header(out, r.transaction_id);
                for stats in &r.torrents {
                    write_scrape_entry(out, *stats);
                }
            }
            Self::Error(r) => write_error(out, r.transaction_id, &r.message),
        }
    }

    /// The transaction id the response echoes.
    pub fn transaction_id(&self) -> TransactionId {
        match self {
            Self::Connect(r) => r.transaction_id,
            Self::Announce(r) => r.transaction_id,
            Self::Scrape(r) => r.transaction_id,
            Self::Error(r) => r.transaction_id,
        }
    }
}

fn compact_peer(bytes: &[u8]) -> SocketAddr {
    let (ip, port) = bytes.split_at(bytes.len() - 2);
    let port = u16::from_be_bytes([port[0], port[1]]);
    match <[u8; 4]>::try_from(ip) {
        Ok(v4) => SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(v4), port)),
        Err(_) => {
            let v6: [u8; 16] = ip.try_into().expect("18-byte peer");
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(v6), port, 0, 0))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announce_response_layout() {
        let mut out = Vec::new();
        write_announce_header(&mut out, TransactionId(1), 1800, 3, 4);
        out.extend_from_slice(&[10, 0, 0, 1, 0x1a, 0xe1]);
        assert_eq!(&out[..8], &[0, 0, 0, 1, 0, 0, 0, 1]);
        assert_eq!(&out[8..20], &[0, 0, 7, 8, 0, 0, 0, 3, 0, 0, 0, 4]);
        let parsed = Response::parse(&out, PeerFamily::V4).unwrap();
        let Response::Announce(announce) = parsed else {
            panic!()
        };
        assert_eq!(announce.peers, vec!["10.0.0.1:6881".parse().unwrap()]);
        assert_eq!(
            Response::parse(&out, PeerFamily::V6),
            Err(ResponseParseError::BadLength)
        );
    }

    #[test]
    fn error_response_carries_its_message() {
        let mut out = Vec::new();
        write_error(&mut out, TransactionId(9), "info hash not allowed");
        let parsed = Response::parse(&out, PeerFamily::V4).unwrap();
        assert_eq!(
            parsed,
            Response::Error(ErrorResponse {
                transaction_id: TransactionId(9),
                message: "info hash not allowed".into()
            })
        );
    }
}
