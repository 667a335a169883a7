//! What a message from the tracker is, and how it is counted.

use shoal_ws_protocol::{Action, ForwardedOffer, Id20, ServerMessage, parse_server_message};

use crate::flow::Request;
use crate::stats::Counters;

/// One message from the tracker.
#[derive(Debug)]
pub(crate) enum Reply {
    /// The reply to an announce in this torrent (one of ours, or, from some trackers,
    /// one of our answers).
    Announce(Id20),
    /// The reply to one of our scrapes.
    Scrape,
    /// A "failure reason": a request (or an answer) that was not served.
    Error {
        /// The action it refuses, when named.
        action: Option<Action>,
        /// The torrent, when named.
        info_hash: Option<Id20>,
    },
    /// Another peer's offer, to answer.
    Offer(ForwardedOffer),
    /// An answer to one of our offers.
    Answer,
    /// Not a WebTorrent message.
    Unreadable,
}

impl Reply {
    /// Reads one text message.
    pub(crate) fn read(text: &[u8]) -> Self {
        match parse_server_message(text) {
            Ok(ServerMessage::AnnounceResponse(response)) => Self::Announce(response.info_hash),
            Ok(ServerMessage::Scrape(_)) => Self::Scrape,
            Ok(ServerMessage::Error(error)) => Self::Error {
                action: error.action,
                info_hash: error.info_hash,
            },
            Ok(ServerMessage::Offer(offer)) => Self::Offer(offer),
            Ok(ServerMessage::Answer(_)) => Self::Answer,
            Err(_) => Self::Unreadable,
        }
    }

    /// The request it may be the reply to (offers and answers come from other peers,
    /// whenever they announce).
    pub(crate) fn reply_to(&self) -> Option<Request> {
        match *self {
            Self::Announce(info_hash) => Some(Request::Announce(Some(info_hash))),
            Self::Scrape => Some(Request::Scrape),
            Self::Error { action, info_hash } => Some(match action {
                Some(Action::Announce) => Request::Announce(info_hash),
                Some(Action::Scrape) => Request::Scrape,
                None => Request::Any,
            }),
            Self::Offer(_) | Self::Answer | Self::Unreadable => None,
        }
    }

    /// Counts it.
    pub(crate) fn count(&self, counters: &mut Counters) {
        let counter = match self {
            Self::Announce(_) => &mut counters.announce_replies,
            Self::Scrape => &mut counters.scrape_replies,
            Self::Error { .. } => &mut counters.error_replies,
            Self::Offer(_) => &mut counters.offers_received,
            Self::Answer => &mut counters.answers_received,
            Self::Unreadable => &mut counters.unreadable,
        };
        *counter += 1;
    }
}

#[cfg(test)]
mod tests {
    use shoal_ws_protocol::{
        AnnounceResponse, ErrorResponse, ForwardedAnswer, ScrapeFile, ScrapeResponse,
        write_server_message,
    };

    use super::*;
    use crate::messages::fake_session_description;

    fn wire(message: &ServerMessage) -> Vec<u8> {
        let mut out = Vec::new();
        write_server_message(message, &mut out);
        out
    }

    #[test]
    fn every_kind_of_message_is_counted_in_its_place() {
        let hash = Id20([1; 20]);
        let messages = [
            ServerMessage::AnnounceResponse(AnnounceResponse {
                info_hash: hash,
                complete: 1,
                incomplete: 2,
                interval: 120,
            }),
            ServerMessage::Offer(ForwardedOffer {
                info_hash: hash,
                peer_id: Id20([2; 20]),
                offer_id: Id20([3; 20]),
                offer: fake_session_description("offer", 100),
            }),
            ServerMessage::Answer(ForwardedAnswer {
                info_hash: hash,
                peer_id: Id20([2; 20]),
                offer_id: Id20([3; 20]),
                answer: fake_session_description("answer", 100),
            }),
            ServerMessage::Scrape(ScrapeResponse {
                files: vec![(hash, ScrapeFile::default())],
            }),
            ServerMessage::Error(ErrorResponse {
                action: Some(Action::Announce),
                info_hash: Some(hash),
                reason: "too many requests".into(),
                interval: None,
            }),
        ];
        let mut counters = Counters::default();
        let mut replies_to = Vec::new();
        for message in &messages {
            let reply = Reply::read(&wire(message));
            replies_to.extend(reply.reply_to());
            reply.count(&mut counters);
            if let (Reply::Offer(offer), ServerMessage::Offer(sent)) = (&reply, message) {
                assert_eq!(
                    (offer.peer_id, offer.offer_id),
                    (sent.peer_id, sent.offer_id)
                );
            }
        }
        Reply::read(b"{\"action\":").count(&mut counters);
        assert_eq!(
            replies_to,
            [
                Request::Announce(Some(hash)),
                Request::Scrape,
                Request::Announce(Some(hash))
            ]
        );
        assert_eq!(
            counters,
            Counters {
                announce_replies: 1,
                offers_received: 1,
                answers_received: 1,
                scrape_replies: 1,
                error_replies: 1,
                unreadable: 1,
                ..Counters::default()
            }
        );
    }
}
