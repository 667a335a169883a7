//! Requests: connect, announce and scrape.

use thiserror::Error;

use crate::options::AnnounceOptions;
use crate::{
    ANNOUNCE_REQUEST_LEN, AnnounceEvent, ConnectionId, HEADER_LEN, InfoHash, PROTOCOL_ID, PeerId,
    Reader, TransactionId, action,
};

/// A parsed request, borrowing from the packet it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// Asks for a connection id.
    Connect(ConnectRequest),
    /// Joins or refreshes a swarm and asks for peers.
    Announce(AnnounceRequest<'a>),
    /// Asks for the counts of one or more torrents.
    Scrape(ScrapeRequest<'a>),
}

/// Connect request (16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    /// Echoed in the response.
    pub transaction_id: TransactionId,
}

/// Announce request (98 bytes, then optional BEP 41 options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnounceRequest<'a> {
    /// From an earlier connect response.
    pub connection_id: ConnectionId,
    /// Echoed in the response.
    pub transaction_id: TransactionId,
    /// The torrent.
    pub info_hash: InfoHash,
    /// The client's peer id.
    pub peer_id: PeerId,
    /// Bytes downloaded so far.
    pub downloaded: u64,
    /// Bytes left to download; 0 means the client is a seeder.
    pub left: u64,
    /// Bytes uploaded so far.
    pub uploaded: u64,
    /// What happened since the last announce.
    pub event: AnnounceEvent,
    /// An IPv4 address the client claims; 0 means "the packet's source". Trackers on
    /// public addresses ignore it, since honouring it would let anyone add any address.
    pub ip_address: u32,
    /// A random key clients may use to prove identity across IP changes.
    pub key: u32,
    /// Peers wanted; -1 (or any value ≤ 0) means the tracker's default.
    pub peers_wanted: i32,
    /// The port the client accepts peer connections on.
    pub port: u16,
    /// BEP 41 options that followed the announce body.
    pub options: AnnounceOptions<'a>,
}

/// Scrape request (16 bytes, then 20 bytes per info hash).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrapeRequest<'a> {
    /// From an earlier connect response.
    pub connection_id: ConnectionId,
    /// Echoed in the response.
    pub transaction_id: TransactionId,
    /// The torrents asked about, at least one.
    pub info_hashes: InfoHashes<'a>,
}

/// The info hashes of a scrape: a view into the packet, 20 bytes each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InfoHashes<'a>(&'a [u8]);

impl<'a> InfoHashes<'a> {
    /// A view of `bytes`, which must be a whole number of 20-byte hashes.
    ///
    /// # Panics
    /// If the length is not a multiple of 20.
    pub fn new(bytes: &'a [u8]) -> Self {
        assert_eq!(bytes.len() % 20, 0, "info hashes are 20 bytes each");
        Self(bytes)
    }

    /// Number of hashes.
    pub fn len(&self) -> usize {
        self.0.len() / 20
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The info hash at `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&'a [u8; 20]> {
        let bytes = self.0.get(index * 20..index * 20 + 20)?;
        bytes.try_into().ok()
    }

    /// The hashes in request order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a [u8; 20]> + 'a {
        self.0
            .chunks_exact(20)
            .map(|chunk| chunk.try_into().expect("20-byte chunk"))
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
}

/// Why a packet is not a valid request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error("{kind}")]
pub struct RequestParseError {
    /// What is wrong.
    pub kind: ParseErrorKind,
    /// The header fields an error reply needs, when the packet had a full header and
    /// was not a connect request. The tracker must still check the connection id before
    /// replying, or anyone could bounce error packets off it at a forged address.
    pub reply_to: Option<(ConnectionId, TransactionId)>,
}

/// What is wrong with a request. The `Display` text is what an error reply says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum ParseErrorKind {
    /// Shorter than the 16-byte header.
    #[error("packet too short")]
    TooShort,
    /// A connect request without the protocol magic.
    #[error("not a BEP 15 connect request")]
    NotBep15,
    /// An action other than connect, announce or scrape.
    #[error("unknown action")]
    UnknownAction(u32),
    /// An announce shorter than 98 bytes.
    #[error("announce request too short")]
    AnnounceTooShort,
    /// An event value other than 0–3.
    #[error("invalid event")]
    InvalidEvent(u32),
    /// A scrape with no info hash.
    #[error("scrape request without info hashes")]
    ScrapeWithoutHashes,
    /// A scrape whose length is not 16 + 20·n.
    #[error("scrape request with a partial info hash")]
    ScrapePartialHash,
}

impl ParseErrorKind {
    fn replyable(
        self,
        connection_id: ConnectionId,
        transaction_id: TransactionId,
    ) -> RequestParseError {
        RequestParseError {
            kind: self,
            reply_to: Some((connection_id, transaction_id)),
        }
    }

    fn silent(self) -> RequestParseError {
        RequestParseError {
            kind: self,
            reply_to: None,
        }
    }
}

impl<'a> Request<'a> {
    /// Parses one packet.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, RequestParseError> {
        if bytes.len() < HEADER_LEN {
            return Err(ParseErrorKind::TooShort.silent());
        }
        let mut header = Reader::new(bytes);
        let first = header.u64();
        let action = header.u32();
        let transaction_id = TransactionId(header.u32());
        let body = header.rest();
        let connection_id = ConnectionId(first);

        match action {
            action::CONNECT => {
                if first != PROTOCOL_ID {
                    return Err(ParseErrorKind::NotBep15.silent());
                }
                // Bytes after the 16-byte request are ignored, as most trackers do.
                Ok(Self::Connect(ConnectRequest { transaction_id }))
            }
            action::ANNOUNCE => {
                if bytes.len() < ANNOUNCE_REQUEST_LEN {
                    return Err(
                        ParseErrorKind::AnnounceTooShort.replyable(connection_id, transaction_id)
                    );
                }
                let mut body = Reader::new(body);
                let info_hash = InfoHash(body.take());
                let peer_id = PeerId(body.take());
                let downloaded = body.u64();
                let left = body.u64();
                let uploaded = body.u64();
                let event_value = body.u32();
                let Some(event) = AnnounceEvent::from_wire(event_value) else {
                    return Err(ParseErrorKind::InvalidEvent(event_value)
                        .replyable(connection_id, transaction_id));
                };
                let ip_address = body.u32();
                let key = body.u32();
                let peers_wanted = body.u32() as i32;
                let port = body.u16();
                Ok(Self::Announce(AnnounceRequest {
                    connection_id,
                    transaction_id,
                    info_hash,
                    peer_id,
                    downloaded,
                    left,
                    uploaded,
                    event,
                    ip_address,
                    key,
                    peers_wanted,
                    port,
                    options: AnnounceOptions(body.rest()),
                }))
            }
            action::SCRAPE => {
                if body.is_empty() {
                    return Err(ParseErrorKind::ScrapeWithoutHashes
                        .replyable(connection_id, transaction_id));
                }
                if !body.len().is_multiple_of(20) {
                    return Err(
                        ParseErrorKind::ScrapePartialHash.replyable(connection_id, transaction_id)
                    );
                }
                Ok(Self::Scrape(ScrapeRequest {
                    connection_id,
                    transaction_id,
                    info_hashes: InfoHashes(body),
                }))
            }
            other => {
                Err(ParseErrorKind::UnknownAction(other).replyable(connection_id, transaction_id))
            }
        }
    }

    /// Appends the encoded request to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Self::Connect(request) => {
                write_header(out, PROTOCOL_ID, action::CONNECT, request.transaction_id);
            }
            Self::Announce(request) => {
                write_header(
                    out,
                    request.connection_id.0,
                    action::ANNOUNCE,
                    request.transaction_id,
                );
                out.extend_from_slice(&request.info_hash.0);
                out.extend_from_slice(&request.peer_id.0);
                out.extend_from_slice(&request.downloaded.to_be_bytes());
                out.extend_from_slice(&request.left.to_be_bytes());
                out.extend_from_slice(&request.uploaded.to_be_bytes());
                out.extend_from_slice(&request.event.to_wire().to_be_bytes());
                out.extend_from_slice(&request.ip_address.to_be_bytes());
                out.extend_from_slice(&request.key.to_be_bytes());
                out.extend_from_slice(&request.peers_wanted.to_be_bytes());
                out.extend_from_slice(&request.port.to_be_bytes());
                out.extend_from_slice(request.options.0);
            }
            Self::Scrape(request) => {
                write_header(
                    out,
                    request.connection_id.0,
                    action::SCRAPE,
                    request.transaction_id,
                );
                out.extend_from_slice(request.info_hashes.0);
            }
        }
    }
}

fn write_header(out: &mut Vec<u8>, first: u64, action: u32, transaction_id: TransactionId) {
    out.extend_from_slice(&first.to_be_bytes());
    out.extend_from_slice(&action.to_be_bytes());
    out.extend_from_slice(&transaction_id.0.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(first: u64, action: u32, tx: u32) -> Vec<u8> {
        let mut out = Vec::new();
        write_header(&mut out, first, action, TransactionId(tx));
        out
    }

    #[test]
    fn connect_needs_the_protocol_magic() {
        let packet = header(PROTOCOL_ID, action::CONNECT, 77);
        assert_eq!(
            Request::parse(&packet),
            Ok(Request::Connect(ConnectRequest {
                transaction_id: TransactionId(77)
            }))
        );
        let err = Request::parse(&header(1234, action::CONNECT, 77)).unwrap_err();
        assert_eq!(err, ParseErrorKind::NotBep15.silent());
    }

    #[test]
    fn short_packets_cannot_be_answered() {
        for len in 0..HEADER_LEN {
            let packet = vec![0; len];
            assert_eq!(Request::parse(&packet).unwrap_err().reply_to, None);
        }
    }

    #[test]
    fn malformed_requests_with_a_header_can_be_answered() {
        let expect = Some((ConnectionId(9), TransactionId(5)));
        let mut short_announce = header(9, action::ANNOUNCE, 5);
        short_announce.extend_from_slice(&[0; 40]);
        let err = Request::parse(&short_announce).unwrap_err();
        assert_eq!(
            (err.kind, err.reply_to),
            (ParseErrorKind::AnnounceTooShort, expect)
        );

        let err = Request::parse(&header(9, action::SCRAPE, 5)).unwrap_err();
        assert_eq!(
            (err.kind, err.reply_to),
            (ParseErrorKind::ScrapeWithoutHashes, expect)
        );

        let mut partial = header(9, action::SCRAPE, 5);
        partial.extend_from_slice(&[1; 30]);
        let err = Request::parse(&partial).unwrap_err();
        assert_eq!(
            (err.kind, err.reply_to),
            (ParseErrorKind::ScrapePartialHash, expect)
        );

        let err = Request::parse(&header(9, 7, 5)).unwrap_err();
        assert_eq!(
            (err.kind, err.reply_to),
            (ParseErrorKind::UnknownAction(7), expect)
        );
        assert_eq!(err.to_string(), "unknown action");
    }

    #[test]
    fn invalid_event_is_reported() {
        let mut packet = header(9, action::ANNOUNCE, 5);
        packet.extend_from_slice(&[0; 40 + 24]);
        packet.extend_from_slice(&4u32.to_be_bytes());
        packet.extend_from_slice(&[0; 14]);
        assert_eq!(packet.len(), ANNOUNCE_REQUEST_LEN);
        let err = Request::parse(&packet).unwrap_err();
        assert_eq!(err.kind, ParseErrorKind::InvalidEvent(4));
        assert!(err.reply_to.is_some());
    }

    #[test]
    fn announce_fields_are_read_big_endian() {
        let mut packet = header(0x0102_0304_0506_0708, action::ANNOUNCE, 0xdead_beef);
        packet.extend_from_slice(&[0xaa; 20]);
        packet.extend_from_slice(&[0xbb; 20]);
        packet.extend_from_slice(&1u64.to_be_bytes());
        packet.extend_from_slice(&2u64.to_be_bytes());
        packet.extend_from_slice(&3u64.to_be_bytes());
        packet.extend_from_slice(&2u32.to_be_bytes());
        packet.extend_from_slice(&[127, 0, 0, 1]);
        packet.extend_from_slice(&0x1234_5678u32.to_be_bytes());
        packet.extend_from_slice(&(-1i32).to_be_bytes());
        packet.extend_from_slice(&6881u16.to_be_bytes());
        let Request::Announce(announce) = Request::parse(&packet).unwrap() else {
            panic!()
        };
        assert_eq!(announce.connection_id, ConnectionId(0x0102_0304_0506_0708));
        assert_eq!(announce.transaction_id, TransactionId(0xdead_beef));
        assert_eq!(announce.info_hash, InfoHash([0xaa; 20]));
        assert_eq!(announce.peer_id, PeerId([0xbb; 20]));
        assert_eq!(
            (announce.downloaded, announce.left, announce.uploaded),
            (1, 2, 3)
        );
        assert_eq!(announce.event, AnnounceEvent::Started);
        assert_eq!(announce.ip_address, 0x7f00_0001);
        assert_eq!(announce.key, 0x1234_5678);
        assert_eq!(announce.peers_wanted, -1);
        assert_eq!(announce.port, 6881);
        assert!(announce.options.0.is_empty());
    }
}
