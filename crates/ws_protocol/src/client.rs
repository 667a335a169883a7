//! Messages from clients: announce (plain, with offers, or carrying an answer) and
//! scrape.

use std::borrow::Cow;

use crate::id::Id20;
use crate::wire::{OneOrMany, OneOrManyOut, WireIn, WireOfferOut, WireOut};
use crate::{Action, RawJson};

/// What a client sends.
#[derive(Debug)]
pub enum ClientMessage {
    /// An announce.
    Announce(AnnounceRequest),
    /// A scrape.
    Scrape(ScrapeRequest),
}

/// `event` of an announce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AnnounceEvent {
    /// The first announce.
    Started,
    /// The peer leaves the swarm.
    Stopped,
    /// The download finished.
    Completed,
    /// A regular re-announce (`"update"`, or no event at all).
    #[default]
    Update,
}

impl AnnounceEvent {
    fn parse(text: Option<&str>) -> Option<Self> {
        Some(match text {
            None | Some("" | "update" | "empty") => Self::Update,
            Some("started") => Self::Started,
            Some("stopped") => Self::Stopped,
            Some("completed") => Self::Completed,
            Some(_) => return None,
        })
    }

    fn as_wire(self) -> Option<&'static str> {
        match self {
            Self::Started => Some("started"),
            Self::Stopped => Some("stopped"),
            Self::Completed => Some("completed"),
            Self::Update => None,
        }
    }
}

/// A WebRTC offer the announcing peer wants forwarded to some other peer.
#[derive(Debug)]
pub struct Offer {
    /// Chosen by the offering peer; the answer names it.
    pub offer_id: Id20,
    /// The session description, forwarded untouched.
    pub offer: RawJson,
}

/// An answer to an offer the tracker forwarded.
#[derive(Debug)]
pub struct WebRtcAnswer {
    /// The peer that made the offer.
    pub to_peer_id: Id20,
    /// Which of its offers this answers.
    pub offer_id: Id20,
    /// The session description, forwarded untouched.
    pub answer: RawJson,
}

/// An announce.
#[derive(Debug)]
pub struct AnnounceRequest {
    /// The torrent.
    pub info_hash: Id20,
    /// The announcing peer.
    pub peer_id: Id20,
    /// What happened.
    pub event: AnnounceEvent,
    /// Bytes left to download; `None` when not sent (or not known).
    pub left: Option<u64>,
    /// Bytes uploaded, as reported.
    pub uploaded: Option<u64>,
    /// Bytes downloaded, as reported.
    pub downloaded: Option<u64>,
    /// How many peers the client wants offers sent to.
    pub numwant: Option<u64>,
    /// Offers to forward, one per peer.
    pub offers: Vec<Offer>,
    /// An answer to relay, when this announce carries one.
    pub answer: Option<WebRtcAnswer>,
}

/// A scrape.
#[derive(Debug)]
pub struct ScrapeRequest {
    /// The torrents; empty when the client named none (a full scrape).
    pub info_hashes: Vec<Id20>,
}

/// A message that cannot be served, with what is known of it so the error reply can
/// name the request (the reference client ignores replies without its info hash).
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct ParseError {
    /// The action, when it was readable.
    pub action: Option<Action>,
    /// The info hash, when it was readable.
    pub info_hash: Option<Id20>,
    /// Why.
    pub reason: Cow<'static, str>,
}

impl ParseError {
    fn new(wire: &WireIn, reason: &'static str) -> Self {
        Self {
            action: wire.action,
            info_hash: match wire.info_hash {
                Some(OneOrMany::One(hash)) => Some(hash),
                _ => None,
            },
            reason: Cow::Borrowed(reason),
        }
    }
}

/// Reads one client message (a WebSocket text message).
pub fn parse_client_message(bytes: &[u8]) -> Result<ClientMessage, ParseError> {
    let wire: WireIn = serde_json::from_slice(bytes).map_err(|err| ParseError {
        action: None,
        info_hash: None,
        reason: Cow::Owned(format!("invalid message: {err}")),
    })?;
    match wire.action {
        None => Err(ParseError::new(&wire, "missing action")),
        Some(Action::Scrape) => Ok(ClientMessage::Scrape(ScrapeRequest {
            info_hashes: match wire.info_hash {
                None => Vec::new(),
                Some(OneOrMany::One(hash)) => vec![hash],
                Some(OneOrMany::Many(hashes)) => hashes,
            },
        })),
        Some(Action::Announce) => parse_announce(wire).map(ClientMessage::Announce),
    }
}

fn parse_announce(mut wire: WireIn) -> Result<AnnounceRequest, ParseError> {
    let Some(OneOrMany::One(info_hash)) = wire.info_hash else {
        return Err(ParseError::new(&wire, "an announce needs one info_hash"));
    };
    let Some(peer_id) = wire.peer_id else {
        return Err(ParseError::new(&wire, "an announce needs a peer_id"));
    };
    let Some(event) = AnnounceEvent::parse(wire.event.as_deref()) else {
        return Err(ParseError::new(&wire, "unknown event"));
    };
    let answer = match (wire.answer.take(), wire.to_peer_id, wire.offer_id) {
        (None, _, _) => None,
        (Some(answer), Some(to_peer_id), Some(offer_id)) => Some(WebRtcAnswer {
            to_peer_id,
            offer_id,
            answer,
        }),
        (Some(_), _, _) => {
            return Err(ParseError::new(
                &wire,
                "an answer needs to_peer_id and offer_id",
            ));
        }
    };
    Ok(AnnounceRequest {
        info_hash,
        peer_id,
        event,
        left: wire.left,
        uploaded: wire.uploaded,
        downloaded: wire.downloaded,
        numwant: wire.numwant,
        offers: wire
            .offers
            .unwrap_or_default()
            .into_iter()
            .map(|offer| Offer {
                offer_id: offer.offer_id,
                offer: offer.offer,
            })
            .collect(),
        answer,
    })
}

/// Writes a client message as JSON (for load testers and tests).
pub fn write_client_message(message: &ClientMessage, out: &mut Vec<u8>) {
    let wire = match message {
        ClientMessage::Scrape(scrape) => WireOut {
            action: Some(Action::Scrape),
            info_hash: match scrape.info_hashes.as_slice() {
                [] => None,
                [one] => Some(OneOrManyOut::One(*one)),
                many => Some(OneOrManyOut::Many(many)),
            },
            ..WireOut::default()
        },
        ClientMessage::Announce(announce) => WireOut {
            action: Some(Action::Announce),
            info_hash: Some(OneOrManyOut::One(announce.info_hash)),
            peer_id: Some(announce.peer_id),
            event: announce.event.as_wire(),
            left: announce.left,
            uploaded: announce.uploaded,
            downloaded: announce.downloaded,
            numwant: announce.numwant,
            offers: (!announce.offers.is_empty()).then(|| {
                announce
                    .offers
                    .iter()
                    .map(|offer| WireOfferOut {
                        offer: &offer.offer,
                        offer_id: offer.offer_id,
                    })
                    .collect()
            }),
            to_peer_id: announce.answer.as_ref().map(|answer| answer.to_peer_id),
            offer_id: announce.answer.as_ref().map(|answer| answer.offer_id),
            answer: announce.answer.as_ref().map(|answer| &*answer.answer),
            ..WireOut::default()
        },
    };
    serde_json::to_writer(out, &wire).expect("writing JSON to memory cannot fail");
}
