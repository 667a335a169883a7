//! What travels between socket workers and swarm workers.
//!
//! Socket workers send batches of [`SwarmRequest`] over each swarm worker's bounded
//! channel. A swarm worker answers with [`Delivery`]s: messages addressed to any
//! connection of any socket worker (the announcer's reply, offers to other peers,
//! answers to the offering peer), grouped per socket worker, one batch per worker.

use shoal_ws_protocol::{AnnounceRequest, Id20, ScrapeFile, ServerMessage};

/// A connection of a socket worker: where messages go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ConnectionRef {
    /// The socket worker.
    pub worker: u16,
    /// The connection, unique within its worker for the life of the process.
    pub id: u64,
}

/// One request for a swarm worker.
#[derive(Debug)]
pub(crate) struct SwarmRequest {
    /// The connection it came from.
    pub from: ConnectionRef,
    /// What to do.
    pub kind: RequestKind,
}

/// What a swarm worker is asked.
#[derive(Debug)]
pub(crate) enum RequestKind {
    /// An announce, checked by the socket worker (access list, rate, offers capped).
    Announce(Box<AnnounceRequest>),
    /// Counts for these torrents: the part of scrape `scrape_id` this worker owns.
    Scrape {
        /// Which scrape of the connection.
        scrape_id: u32,
        /// The torrents.
        info_hashes: Vec<Id20>,
    },
    /// The connection closed: these (info hash, peer id) leave their swarms. Never
    /// shed: a full queue keeps it for the next flush, or its peers would linger.
    Leave(Vec<(Id20, Id20)>),
}

/// A message for one connection.
#[derive(Debug)]
pub(crate) enum ToConnection {
    /// A message to write as it is (announce reply, offer, answer, error).
    Message(ServerMessage),
    /// An answer that was not relayed: no such offer was sent to the answering peer,
    /// or it expired.
    AnswerRefused(Id20),
    /// An announce refused: its peer id belongs to a peer announced on another
    /// connection (until that connection closes or the peer times out).
    PeerIdTaken(Id20),
    /// An announce refused: it would start a torrent while the tracker is full; the
    /// interval to come back after (the longest).
    TrackerFull(Id20, u32),
    /// A request was shed: its swarm worker's queue was full.
    Shed {
        /// The announce's torrent.
        info_hash: Option<Id20>,
        /// The scrape it was part of.
        scrape_id: Option<u32>,
    },
    /// One swarm worker's part of a scrape.
    ScrapePart {
        /// Which scrape of the connection.
        scrape_id: u32,
        /// Counts.
        files: Vec<(Id20, ScrapeFile)>,
    },
}

impl ToConnection {
    /// About how many bytes the message takes once written: what the outgoing queue
    /// of a connection is limited by. Session descriptions are counted in full; the
    /// rest of a message is a small JSON object.
    pub(crate) fn weight(&self) -> usize {
        const OBJECT: usize = 160;
        match self {
            Self::Message(ServerMessage::Offer(offer)) => OBJECT + offer.offer.get().len(),
            Self::Message(ServerMessage::Answer(answer)) => OBJECT + answer.answer.get().len(),
            Self::Message(ServerMessage::Error(error)) => OBJECT + error.reason.len(),
            Self::ScrapePart { files, .. } => OBJECT + files.len() * 100,
            _ => OBJECT,
        }
    }
}

/// A message and the connection (of the receiving socket worker) it is for.
pub(crate) type Delivery = (u64, ToConnection);
