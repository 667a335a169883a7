//! The WebTorrent tracker protocol: the JSON messages browsers and the reference
//! JavaScript client (`bittorrent-tracker`) exchange with a tracker over WebSocket.
//! Pure functions of bytes: no sockets, no clock.
//!
//! # Layout
//!
//! * [`id`]: 20-byte ids (info hashes, peer ids, offer ids) in their wire form, a
//!   JSON string of 20 characters, one per byte (U+0000 to U+00FF).
//! * [`client`]: what a client sends: announce (with offers, or with an answer) and
//!   scrape; [`parse_client_message`] and, for load testers, [`write_client_message`].
//! * [`server`]: what a tracker sends: announce replies, forwarded offers and answers,
//!   scrape replies and errors; [`write_server_message`] and, for clients,
//!   [`parse_server_message`].
//! * [`opening`]: the HTTP request that opens a connection (a WebSocket upgrade or a
//!   health check) and the response to it.
//! * [`origin`]: which web pages (the upgrade's `Origin`) may open connections.
//! * [`frames`]: WebSocket frames on the server's side (RFC 6455), without buffers of
//!   their own while a connection is between messages.
//! * `wire` (private): the one flat JSON object both directions are read from and
//!   written as, so every field's spelling lives in one place.
//!
//! Offers and answers (WebRTC session descriptions) are kept as the raw JSON the
//! client sent: the tracker forwards them without looking inside.

pub mod client;
pub mod frames;
pub mod id;
pub mod opening;
pub mod origin;
pub mod server;
mod wire;

pub use client::{
    AnnounceEvent, AnnounceRequest, ClientMessage, Offer, ParseError, ScrapeRequest, WebRtcAnswer,
    parse_client_message, write_client_message,
};
pub use id::Id20;
pub use server::{
    AnnounceResponse, ErrorResponse, ForwardedAnswer, ForwardedOffer, ScrapeResponse,
    ServerMessage, parse_server_message, write_server_message,
};
pub use wire::ScrapeFile;

/// Raw JSON (an offer or answer session description), forwarded untouched.
pub type RawJson = Box<serde_json::value::RawValue>;

/// Which request a message is; errors name it so clients can match them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// An announce (also carries offers and answers).
    Announce,
    /// A scrape.
    Scrape,
}
