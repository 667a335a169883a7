//! The HTTP tracker protocol (BEP 3, 7, 23 and 48) as pure functions of bytes.
//!
//! # Layout
//!
//! * [`request`]: [`parse_request`] turns the bytes read so far into an announce or a
//!   scrape. Incomplete input is `Ok(None)` — the connection layer decides whether to
//!   read more — and every malformed, oversized or unsupported request is an
//!   [`RequestError`] carrying the HTTP status and the failure reason to send back.
//! * [`query`]: percent-decoding and iteration over `key=value` pairs.
//! * [`bencode`]: the small bencode writer responses need.
//! * [`response`]: HTTP responses with bencoded bodies: announce (compact `peers` and
//!   `peers6`, or the dictionary model), scrape, and failure.

pub mod bencode;
pub mod query;
pub mod request;
pub mod response;

pub use request::{
    AnnounceEvent, AnnounceRequest, ParseLimits, ParsedRequest, Request, RequestError,
    ScrapeRequest, USER_AGENT_PREFIX, UserAgent, parse_request,
};
pub use response::{
    AnnounceResponse, PeerList, ScrapeStats, write_announce, write_failure, write_scrape,
};

/// A 20-byte info hash.
pub type InfoHash = [u8; 20];
/// A 20-byte peer id.
pub type PeerId = [u8; 20];
