//! The BEP 15 UDP tracker protocol as pure functions of bytes: no sockets, no clock,
//! no allocation when parsing.
//!
//! # Layout
//!
//! * [`request`]: [`Request::parse`] borrows from the packet (scrape info hashes and
//!   BEP 41 options are views into it) and [`Request::write`] encodes one, for clients
//!   and load testers. A parse error says, through [`RequestParseError::reply_to`],
//!   whether the packet carried enough of a header for the tracker to answer with an
//!   error packet; checking the connection id first is the tracker's job.
//! * [`options`]: BEP 41 announce options (URL data), parsed leniently: unknown options
//!   are skipped and a truncated option ends the list without failing the announce.
//! * [`response`]: streaming writers the tracker's hot path uses to encode replies
//!   straight into a send buffer, and an owned [`Response`] for clients and tests.
//!
//! All integers are big-endian, as the BEP says.

pub mod options;
pub mod request;
pub mod response;

pub use options::AnnounceOptions;
pub use request::{
    AnnounceRequest, ConnectRequest, InfoHashes, ParseErrorKind, Request, RequestParseError,
    ScrapeRequest,
};
pub use response::{
    AnnounceResponse, ConnectResponse, ErrorResponse, PeerFamily, Response, ResponseParseError,
    ScrapeResponse, ScrapeStats,
};

/// The magic constant that starts every connect request.
pub const PROTOCOL_ID: u64 = 0x0417_2710_1980;

/// Length of a connect request and of every request header.
pub const HEADER_LEN: usize = 16;
/// Length of an announce request without BEP 41 options.
pub const ANNOUNCE_REQUEST_LEN: usize = 98;
/// Largest number of info hashes a scrape can carry in one 1500-byte Ethernet frame
/// (the BEP's "about 74").
pub const MAX_SCRAPE_HASHES_PER_PACKET: usize = 74;

/// Identifies a connection; issued by the tracker in a connect response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ConnectionId(pub u64);

/// Chosen by the client to match a response to its request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TransactionId(pub u32);

/// A torrent's 20-byte SHA-1 info hash.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InfoHash(pub [u8; 20]);

/// A client's 20-byte peer id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PeerId(pub [u8; 20]);

/// The action field of every packet.
pub mod action {
    /// Connect request or response.
    pub const CONNECT: u32 = 0;
    /// Announce request or response.
    pub const ANNOUNCE: u32 = 1;
    /// Scrape request or response.
    pub const SCRAPE: u32 = 2;
    /// Error response.
    pub const ERROR: u32 = 3;
}

/// The event field of an announce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AnnounceEvent {
    /// 0: a regular announce.
    #[default]
    None,
    /// 1: the download finished.
    Completed,
    /// 2: the download started.
    Started,
    /// 3: the client is leaving the swarm.
    Stopped,
}

impl AnnounceEvent {
    /// The event for a wire value, if valid.
    pub fn from_wire(value: u32) -> Option<Self> {
        Some(match value {
            0 => Self::None,
            1 => Self::Completed,
            2 => Self::Started,
            3 => Self::Stopped,
            _ => return None,
        })
    }

    /// The wire value.
    pub fn to_wire(self) -> u32 {
        match self {
            Self::None => 0,
            Self::Completed => 1,
            Self::Started => 2,
            Self::Stopped => 3,
        }
    }
}

/// Reads big-endian integers from a slice the caller has bounds-checked.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes }
    }

    pub(crate) fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.bytes.split_at(N);
        self.bytes = rest;
        head.try_into().expect("split_at gave N bytes")
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take())
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }

    pub(crate) fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take())
    }

    pub(crate) fn rest(self) -> &'a [u8] {
        self.bytes
    }
}
