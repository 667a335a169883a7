//! Messages from the tracker: announce replies, forwarded offers and answers, scrape
//! replies and errors.

use std::borrow::Cow;

use crate::client::ParseError;
use crate::id::Id20;
use crate::wire::{FilesOut, OneOrMany, OneOrManyOut, ScrapeFile, WireIn, WireOut};
use crate::{Action, RawJson};

/// What a tracker sends.
#[derive(Debug)]
pub enum ServerMessage {
    /// The reply to an announce: swarm counts.
    AnnounceResponse(AnnounceResponse),
    /// Another peer's offer, forwarded.
    Offer(ForwardedOffer),
    /// Another peer's answer to one of this peer's offers, forwarded.
    Answer(ForwardedAnswer),
    /// The reply to a scrape.
    Scrape(ScrapeResponse),
    /// A request that was not served.
    Error(ErrorResponse),
}

/// The reply to an announce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnounceResponse {
    /// The torrent.
    pub info_hash: Id20,
    /// Seeders.
    pub complete: u64,
    /// Leechers.
    pub incomplete: u64,
    /// Seconds until the next announce.
    pub interval: u64,
}

/// An offer on its way to the peer chosen for it.
#[derive(Debug)]
pub struct ForwardedOffer {
    /// The torrent.
    pub info_hash: Id20,
    /// The offering peer.
    pub peer_id: Id20,
    /// The offer's id (the answer must name it).
    pub offer_id: Id20,
    /// The session description.
    pub offer: RawJson,
}

/// An answer on its way to the peer that made the offer.
#[derive(Debug)]
pub struct ForwardedAnswer {
    /// The torrent.
    pub info_hash: Id20,
    /// The answering peer.
    pub peer_id: Id20,
    /// The offer answered.
    pub offer_id: Id20,
    /// The session description.
    pub answer: RawJson,
}

/// The reply to a scrape.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrapeResponse {
    /// Counts per torrent.
    pub files: Vec<(Id20, ScrapeFile)>,
}

/// A request that was not served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorResponse {
    /// The request's action, when known.
    pub action: Option<Action>,
    /// The request's torrent, when known (the reference client routes errors by it).
    pub info_hash: Option<Id20>,
    /// Why, for people.
    pub reason: Cow<'static, str>,
    /// Seconds to wait before trying again, when the tracker says (it is busy).
    pub interval: Option<u64>,
}

impl From<ParseError> for ErrorResponse {
    fn from(err: ParseError) -> Self {
        Self {
            action: err.action,
            info_hash: err.info_hash,
            reason: err.reason,
            interval: None,
        }
    }
}

/// Writes a tracker message as JSON.
pub fn write_server_message(message: &ServerMessage, out: &mut Vec<u8>) {
    let wire = match message {
        ServerMessage::AnnounceResponse(response) => WireOut {
            action: Some(Action::Announce),
            info_hash: Some(OneOrManyOut::One(response.info_hash)),
            complete: Some(response.complete),
            incomplete: Some(response.incomplete),
            interval: Some(response.interval),
            ..WireOut::default()
        },
        ServerMessage::Offer(offer) => WireOut {
            action: Some(Action::Announce),
            info_hash: Some(OneOrManyOut::One(offer.info_hash)),
            peer_id: Some(offer.peer_id),
            offer_id: Some(offer.offer_id),
            offer: Some(&offer.offer),
            ..WireOut::default()
        },
        ServerMessage::Answer(answer) => WireOut {
            action: Some(Action::Announce),
            info_hash: Some(OneOrManyOut::One(answer.info_hash)),
            peer_id: Some(answer.peer_id),
            offer_id: Some(answer.offer_id),
            answer: Some(&answer.answer),
            ..WireOut::default()
        },
        ServerMessage::Scrape(scrape) => WireOut {
            action: Some(Action::Scrape),
            files: Some(FilesOut(&scrape.files)),
            ..WireOut::default()
        },
        ServerMessage::Error(error) => WireOut {
            action: error.action,
            info_hash: error.info_hash.map(OneOrManyOut::One),
            failure_reason: Some(&error.reason),
            interval: error.interval,
            ..WireOut::default()
        },
    };
    serde_json::to_writer(out, &wire).expect("writing JSON to memory cannot fail");
}

/// Reads a tracker message (for clients and load testers).
pub fn parse_server_message(bytes: &[u8]) -> Result<ServerMessage, ParseError> {
    let wire: WireIn = serde_json::from_slice(bytes).map_err(|err| ParseError {
        action: None,
        info_hash: None,
        reason: Cow::Owned(format!("invalid message: {err}")),
    })?;
    let info_hash = match wire.info_hash {
        Some(OneOrMany::One(hash)) => Some(hash),
        _ => None,
    };
    if let Some(reason) = wire.failure_reason {
        return Ok(ServerMessage::Error(ErrorResponse {
            action: wire.action,
            info_hash,
            reason: Cow::Owned(reason),
            interval: wire.interval,
        }));
    }
    let missing = |what: &'static str| ParseError {
        action: wire.action,
        info_hash,
        reason: Cow::Borrowed(what),
    };
    match wire.action {
        Some(Action::Scrape) => Ok(ServerMessage::Scrape(ScrapeResponse {
            files: wire.files.unwrap_or_default().0,
        })),
        None => Err(missing("missing action")),
        Some(Action::Announce) => {
            let info_hash = info_hash.ok_or_else(|| missing("missing info_hash"))?;
            if let Some(offer) = wire.offer {
                return Ok(ServerMessage::Offer(ForwardedOffer {
                    info_hash,
                    peer_id: wire.peer_id.ok_or_else(|| missing("missing peer_id"))?,
                    offer_id: wire.offer_id.ok_or_else(|| missing("missing offer_id"))?,
                    offer,
                }));
            }
            if let Some(answer) = wire.answer {
                return Ok(ServerMessage::Answer(ForwardedAnswer {
                    info_hash,
                    peer_id: wire.peer_id.ok_or_else(|| missing("missing peer_id"))?,
                    offer_id: wire.offer_id.ok_or_else(|| missing("missing offer_id"))?,
                    answer,
                }));
            }
            Ok(ServerMessage::AnnounceResponse(AnnounceResponse {
                info_hash,
                complete: wire.complete.unwrap_or(0),
                incomplete: wire.incomplete.unwrap_or(0),
                interval: wire.interval.unwrap_or(0),
            }))
        }
    }
}
