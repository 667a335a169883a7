//! The torrents of one swarm worker, as WebTorrent needs them: peers are known by
//! peer id and reached through the connection they announced on; offers are
//! forwarded to random peers and remembered until answered or expired, so an
//! answer is relayed only for an offer the tracker really sent to the answering peer.
//!
//! A pending offer costs 16 bytes, kept with the peer it was sent to: a keyed hash of
//! (offer id, offering peer) and its expiry. Each peer keeps at most
//! `max_pending_offers`, the oldest giving way, so memory stays bounded however many
//! offers clients send and never answer.
//!
//! No I/O and no clock reads: [`Swarms::handle`] takes the time and pushes the
//! messages to send into a vector, so the tests below drive it directly.

use std::hash::Hasher as _;

use hashbrown::HashMap;
use rand::RngExt as _;
use rand::rngs::SmallRng;
use shoal_swarm::ServerTime;
use shoal_ws_protocol::{
    AnnounceEvent, AnnounceRequest, AnnounceResponse, ForwardedAnswer, ForwardedOffer, Id20,
    ScrapeFile, ServerMessage, WebRtcAnswer,
};
use siphasher::sip::SipHasher13;

use crate::messages::{ConnectionRef, RequestKind, SwarmRequest, ToConnection};

/// Timing the swarms need.
#[derive(Clone, Copy, Debug)]
pub struct SwarmSettings {
    /// Seconds between announces, told to clients.
    pub announce_interval: u32,
    /// Seconds after its last announce that a peer is dropped.
    pub peer_timeout: u32,
    /// Seconds an offer can be answered.
    pub offer_lifetime: u32,
    /// Offers waiting for an answer that one peer may have.
    pub max_pending_offers: usize,
}

#[derive(Debug)]
struct Peer {
    id: Id20,
    connection: ConnectionRef,
    expires: ServerTime,
    /// Offers sent to this peer and not answered yet, oldest first.
    offers: Vec<PendingOffer>,
}

/// Where a peer is: which list, and where in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    seeder: bool,
    at: usize,
}

/// An offer forwarded and not yet answered.
#[derive(Clone, Copy, Debug)]
struct PendingOffer {
    /// [`Swarms::offer_key`] of the offer id and the offering peer.
    key: u64,
    expires: ServerTime,
}

#[derive(Debug, Default)]
struct Torrent {
    /// Leechers and seeders apart, so a seeder's offers can go to leechers only;
    /// `index` finds a peer by id, and removal swaps the last of its list in.
    leechers: Vec<Peer>,
    seeders: Vec<Peer>,
    index: HashMap<Id20, Slot>,
    downloads: u64,
}

impl Torrent {
    fn counts(&self) -> ScrapeFile {
        ScrapeFile {
            complete: self.seeders.len() as u64,
            incomplete: self.leechers.len() as u64,
            downloaded: self.downloads,
        }
    }

    fn list(&mut self, seeder: bool) -> &mut Vec<Peer> {
        if seeder {
            &mut self.seeders
        } else {
            &mut self.leechers
        }
    }

    fn get(&self, slot: Slot) -> &Peer {
        if slot.seeder {
            &self.seeders[slot.at]
        } else {
            &self.leechers[slot.at]
        }
    }

    fn get_mut(&mut self, slot: Slot) -> &mut Peer {
        &mut self.list(slot.seeder)[slot.at]
    }

    fn peer(&self, id: &Id20) -> Option<&Peer> {
        self.index.get(id).map(|&slot| self.get(slot))
    }

    /// Removes the peer `id` if it is on `connection` (a peer that moved to another
    /// connection stays).
    fn remove(&mut self, id: &Id20, connection: ConnectionRef) {
        let Some(&slot) = self.index.get(id) else {
            return;
        };
        if self.get(slot).connection == connection {
            self.take(slot);
        }
    }

    fn take(&mut self, slot: Slot) -> Peer {
        let list = self.list(slot.seeder);
        let peer = list.swap_remove(slot.at);
        let moved = list.get(slot.at).map(|moved| moved.id);
        self.index.remove(&peer.id);
        if let Some(moved) = moved {
            self.index.insert(moved, slot);
        }
        peer
    }

    fn put(&mut self, peer: Peer, seeder: bool) {
        let list = self.list(seeder);
        let slot = Slot {
            seeder,
            at: list.len(),
        };
        let id = peer.id;
        list.push(peer);
        self.index.insert(id, slot);
    }

    /// Adds or refreshes a peer; returns whether it is a seeder now (`left` unknown
    /// keeps what it was).
    fn upsert(
        &mut self,
        id: Id20,
        connection: ConnectionRef,
        left: Option<u64>,
        expires: ServerTime,
    ) -> bool {
        let existing = self.index.get(&id).copied();
        let seeder = match (left, existing) {
            (Some(left), _) => left == 0,
            (None, Some(slot)) => slot.seeder,
            (None, None) => false,
        };
        if let Some(slot) = existing
            && slot.seeder == seeder
        {
            let peer = self.get_mut(slot);
            peer.connection = connection;
            peer.expires = expires;
            return seeder;
        }
        let offers = match existing {
            Some(slot) => self.take(slot).offers,
            None => Vec::new(),
        };
        self.put(
            Peer {
                id,
                connection,
                expires,
                offers,
            },
            seeder,
        );
        seeder
    }

    /// Drops peers whose time is up and offers nobody answered in time.
    fn expire(&mut self, now: ServerTime) {
        for seeder in [false, true] {
            let mut at = 0;
            while at < self.list(seeder).len() {
                let peer = &mut self.list(seeder)[at];
                if peer.expires < now {
                    self.take(Slot { seeder, at });
                    continue;
                }
                peer.offers.retain(|offer| offer.expires >= now);
                if peer.offers.is_empty() {
                    peer.offers = Vec::new();
                }
                at += 1;
            }
        }
    }

    fn peer_count(&self) -> usize {
        self.leechers.len() + self.seeders.len()
    }

    fn is_empty(&self) -> bool {
        self.peer_count() == 0
    }
}

/// The torrents of one swarm worker.
#[derive(Debug)]
pub struct Swarms {
    torrents: HashMap<Id20, Torrent>,
    settings: SwarmSettings,
    rng: SmallRng,
    chosen: Vec<Slot>,
    /// SipHash keys for offer keys, random per worker.
    offer_keys: (u64, u64),
}

impl Swarms {
    /// Empty swarms.
    pub fn new(settings: SwarmSettings, mut rng: SmallRng) -> Self {
        Self {
            torrents: HashMap::new(),
            settings,
            offer_keys: (rng.random(), rng.random()),
            rng,
            chosen: Vec::new(),
        }
    }

    /// Serves one request at `now`; the messages it causes go to `out`.
    pub fn handle(
        &mut self,
        request: SwarmRequest,
        now: ServerTime,
        out: &mut Vec<(ConnectionRef, ToConnection)>,
    ) {
        let from = request.from;
        match request.kind {
            RequestKind::Announce(announce) => self.announce(*announce, from, now, out),
            RequestKind::Scrape {
                scrape_id,
                info_hashes,
            } => {
                let files = info_hashes
                    .into_iter()
                    .map(|hash| {
                        let counts = self.torrents.get(&hash).map(Torrent::counts);
                        (hash, counts.unwrap_or_default())
                    })
                    .collect();
                out.push((from, ToConnection::ScrapePart { scrape_id, files }));
            }
            RequestKind::Leave(peers) => {
                for (info_hash, peer_id) in peers {
                    // An emptied torrent stays, downloads count and all, until the
                    // next cleaning (as in the UDP and HTTP trackers).
                    if let Some(torrent) = self.torrents.get_mut(&info_hash) {
                        torrent.remove(&peer_id, from);
                    }
                }
            }
        }
    }

    fn announce(
        &mut self,
        mut request: AnnounceRequest,
        from: ConnectionRef,
        now: ServerTime,
        out: &mut Vec<(ConnectionRef, ToConnection)>,
    ) {
        let info_hash = request.info_hash;
        if let Some(answer) = request.answer.take() {
            // The reference tracker sends no announce reply for an answer.
            self.relay_answer(&request, answer, from, now, out);
            return;
        }
        let stopped = request.event == AnnounceEvent::Stopped;
        if stopped && !self.torrents.contains_key(&info_hash) {
            out.push((
                from,
                announce_reply(info_hash, ScrapeFile::default(), &self.settings),
            ));
            return;
        }
        let torrent = self.torrents.entry(info_hash).or_default();
        let mut seeder = false;
        if stopped {
            torrent.remove(&request.peer_id, from);
        } else {
            let expires = now.plus(self.settings.peer_timeout);
            let was_seeder = torrent
                .index
                .get(&request.peer_id)
                .is_some_and(|slot| slot.seeder);
            seeder = torrent.upsert(request.peer_id, from, request.left, expires);
            // A download completes once per peer: a seeder repeating "completed"
            // is not another one.
            if request.event == AnnounceEvent::Completed && !was_seeder {
                torrent.downloads += 1;
            }
        }
        out.push((
            from,
            announce_reply(info_hash, torrent.counts(), &self.settings),
        ));

        if !stopped && !request.offers.is_empty() {
            choose_recipients(
                torrent,
                &request.peer_id,
                seeder,
                request.offers.len(),
                &mut self.rng,
                &mut self.chosen,
            );
            let expires = now.plus(self.settings.offer_lifetime);
            let limit = self.settings.max_pending_offers;
            for (&slot, offer) in self.chosen.iter().zip(request.offers) {
                let key = offer_key(self.offer_keys, &offer.offer_id, &request.peer_id);
                let recipient = torrent.get_mut(slot);
                // Oldest first: expired offers are at the front, and the oldest give
                // way at the limit.
                let stale = recipient
                    .offers
                    .iter()
                    .take_while(|pending| pending.expires < now)
                    .count();
                let excess = (recipient.offers.len() - stale + 1).saturating_sub(limit);
                recipient.offers.drain(..stale + excess);
                recipient.offers.push(PendingOffer { key, expires });
                out.push((
                    recipient.connection,
                    ToConnection::Message(ServerMessage::Offer(ForwardedOffer {
                        info_hash,
                        peer_id: request.peer_id,
                        offer_id: offer.offer_id,
                        offer: offer.offer,
                    })),
                ));
            }
        }
    }

    fn relay_answer(
        &mut self,
        request: &AnnounceRequest,
        answer: WebRtcAnswer,
        from: ConnectionRef,
        now: ServerTime,
        out: &mut Vec<(ConnectionRef, ToConnection)>,
    ) {
        match self.check_answer(request, &answer, from, now) {
            Ok(offerer) => out.push((
                offerer,
                ToConnection::Message(ServerMessage::Answer(ForwardedAnswer {
                    info_hash: request.info_hash,
                    peer_id: request.peer_id,
                    offer_id: answer.offer_id,
                    answer: answer.answer,
                })),
            )),
            Err(reason) => {
                log::debug!("answer refused: {reason}");
                out.push((from, ToConnection::AnswerRefused(request.info_hash)));
            }
        }
    }

    /// Uses up the pending offer an answer answers and returns the offerer's
    /// connection, or says why the answer must not be relayed.
    fn check_answer(
        &mut self,
        request: &AnnounceRequest,
        answer: &WebRtcAnswer,
        from: ConnectionRef,
        now: ServerTime,
    ) -> Result<ConnectionRef, &'static str> {
        let key = offer_key(self.offer_keys, &answer.offer_id, &answer.to_peer_id);
        let torrent = self
            .torrents
            .get_mut(&request.info_hash)
            .ok_or("unknown torrent")?;
        // The answering peer must be the one the offer went to, on this connection.
        let &slot = torrent
            .index
            .get(&request.peer_id)
            .ok_or("the answering peer is not in the swarm")?;
        if torrent.get(slot).connection != from {
            return Err("the answering peer announced on another connection");
        }
        let pending = torrent
            .get(slot)
            .offers
            .iter()
            .position(|pending| pending.key == key && pending.expires >= now)
            .ok_or("no such offer pending for the answering peer")?;
        let offerer = torrent
            .peer(&answer.to_peer_id)
            .map(|peer| peer.connection)
            .ok_or("the offering peer left")?;
        let answerer = torrent.get_mut(slot);
        answerer.offers.remove(pending);
        answerer.expires = now.plus(self.settings.peer_timeout);
        Ok(offerer)
    }

    /// Drops peers that stopped announcing, offers nobody answered in time, torrents
    /// left empty and torrents `allowed` refuses (the access list changed). Returns
    /// the torrents and peers kept.
    pub fn clean(&mut self, now: ServerTime, allowed: impl Fn(&Id20) -> bool) -> (usize, usize) {
        let mut peers = 0;
        self.torrents.retain(|info_hash, torrent| {
            if !allowed(info_hash) {
                return false;
            }
            torrent.expire(now);
            peers += torrent.peer_count();
            !torrent.is_empty()
        });
        (self.torrents.len(), peers)
    }
}

/// Who made which offer, in 8 bytes. Keyed (random keys per swarm worker), so a
/// client cannot craft another (offer id, offerer) pair with the same key.
fn offer_key(keys: (u64, u64), offer_id: &Id20, offerer: &Id20) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(keys.0, keys.1);
    hasher.write(&offer_id.0);
    hasher.write(&offerer.0);
    hasher.finish()
}

fn announce_reply(info_hash: Id20, counts: ScrapeFile, settings: &SwarmSettings) -> ToConnection {
    ToConnection::Message(ServerMessage::AnnounceResponse(AnnounceResponse {
        info_hash,
        complete: counts.complete,
        incomplete: counts.incomplete,
        interval: settings.announce_interval.into(),
    }))
}

/// Puts into `chosen` up to `wanted` random peers other than `announcer`; a seeder
/// is only given leechers (two seeders have nothing to trade).
fn choose_recipients(
    torrent: &Torrent,
    announcer: &Id20,
    seeder: bool,
    wanted: usize,
    rng: &mut SmallRng,
    chosen: &mut Vec<Slot>,
) {
    chosen.clear();
    // Candidates are numbered leechers first, then seeders.
    let leechers = torrent.leechers.len();
    let count = if seeder {
        leechers
    } else {
        leechers + torrent.seeders.len()
    };
    let slot = |n: usize| Slot {
        seeder: n >= leechers,
        at: if n >= leechers { n - leechers } else { n },
    };
    let others = |slot: &Slot| torrent.get(*slot).id != *announcer;
    if count <= wanted + 1 {
        chosen.extend((0..count).map(slot).filter(others).take(wanted));
        return;
    }
    // One more than needed, in case the announcer is among them. Few picks out of a
    // big swarm: Floyd's algorithm, no allocation proportional to the swarm.
    let picks = rand::seq::index::sample(rng, count, wanted + 1);
    chosen.extend(picks.into_iter().map(slot).filter(others).take(wanted));
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng as _;
    use serde_json::value::RawValue;
    use shoal_ws_protocol::{Offer, ScrapeFile};

    use super::*;

    const SETTINGS: SwarmSettings = SwarmSettings {
        announce_interval: 120,
        peer_timeout: 300,
        offer_lifetime: 60,
        max_pending_offers: 3,
    };
    const HASH: Id20 = Id20([7; 20]);

    fn swarms() -> Swarms {
        Swarms::new(SETTINGS, SmallRng::seed_from_u64(1))
    }

    fn conn(id: u64) -> ConnectionRef {
        ConnectionRef { worker: 0, id }
    }

    fn peer(n: u8) -> Id20 {
        Id20([n; 20])
    }

    fn sdp(text: &str) -> Box<RawValue> {
        RawValue::from_string(format!("{{\"type\":\"offer\",\"sdp\":\"{text}\"}}")).unwrap()
    }

    fn announce(peer_id: Id20, left: Option<u64>, offers: usize) -> AnnounceRequest {
        AnnounceRequest {
            info_hash: HASH,
            peer_id,
            event: AnnounceEvent::Started,
            left,
            uploaded: None,
            downloaded: None,
            numwant: None,
            offers: (0..offers)
                .map(|n| Offer {
                    offer_id: Id20([100 + n as u8; 20]),
                    offer: sdp(&format!("offer {n}")),
                })
                .collect(),
            answer: None,
        }
    }

    fn send(
        swarms: &mut Swarms,
        from: ConnectionRef,
        kind: RequestKind,
        now: u32,
    ) -> Vec<(ConnectionRef, ToConnection)> {
        let mut out = Vec::new();
        swarms.handle(SwarmRequest { from, kind }, ServerTime(now), &mut out);
        out
    }

    fn announce_kind(request: AnnounceRequest) -> RequestKind {
        RequestKind::Announce(Box::new(request))
    }

    fn counts(out: &[(ConnectionRef, ToConnection)]) -> (u64, u64) {
        out.iter()
            .find_map(|(_, message)| match message {
                ToConnection::Message(ServerMessage::AnnounceResponse(reply)) => {
                    Some((reply.complete, reply.incomplete))
                }
                _ => None,
            })
            .expect("an announce reply")
    }

    fn offers(out: &[(ConnectionRef, ToConnection)]) -> Vec<(ConnectionRef, Id20)> {
        out.iter()
            .filter_map(|(to, message)| match message {
                ToConnection::Message(ServerMessage::Offer(offer)) => Some((*to, offer.offer_id)),
                _ => None,
            })
            .collect()
    }

    fn answer(from: Id20, to: Id20, offer_id: Id20) -> AnnounceRequest {
        AnnounceRequest {
            answer: Some(WebRtcAnswer {
                to_peer_id: to,
                offer_id,
                answer: sdp("answer"),
            }),
            event: AnnounceEvent::Update,
            ..announce(from, None, 0)
        }
    }

    #[test]
    fn offers_go_to_other_peers_and_answers_come_back_once() {
        let mut swarms = swarms();
        send(
            &mut swarms,
            conn(1),
            announce_kind(announce(peer(1), Some(5), 0)),
            0,
        );
        send(
            &mut swarms,
            conn(2),
            announce_kind(announce(peer(2), Some(0), 0)),
            0,
        );
        let out = send(
            &mut swarms,
            conn(3),
            announce_kind(announce(peer(3), Some(9), 5)),
            1,
        );
        assert_eq!(counts(&out), (1, 2));
        let sent = offers(&out);
        // Two other peers: two of the five offers are forwarded, one to each.
        assert_eq!(sent.len(), 2);
        let mut recipients: Vec<u64> = sent.iter().map(|(to, _)| to.id).collect();
        recipients.sort_unstable();
        assert_eq!(recipients, [1, 2]);

        let (to, offer_id) = sent.iter().find(|(to, _)| to.id == 2).copied().unwrap();
        let relayed = send(
            &mut swarms,
            to,
            announce_kind(answer(peer(2), peer(3), offer_id)),
            2,
        );
        assert_eq!(relayed.len(), 1, "an answer gets no announce reply");
        match &relayed[0] {
            (target, ToConnection::Message(ServerMessage::Answer(answer))) => {
                assert_eq!(*target, conn(3));
                assert_eq!(answer.peer_id, peer(2));
                assert_eq!(answer.offer_id, offer_id);
            }
            other => panic!("expected a relayed answer, got {other:?}"),
        }
        // The same answer again: the offer was used up.
        let again = send(
            &mut swarms,
            to,
            announce_kind(answer(peer(2), peer(3), offer_id)),
            2,
        );
        assert!(matches!(
            again[..],
            [(_, ToConnection::AnswerRefused(HASH))]
        ));
    }

    #[test]
    fn answers_to_offers_never_sent_expired_or_from_elsewhere_are_refused() {
        let mut swarms = swarms();
        send(
            &mut swarms,
            conn(1),
            announce_kind(announce(peer(1), Some(5), 0)),
            0,
        );
        let out = send(
            &mut swarms,
            conn(2),
            announce_kind(announce(peer(2), Some(5), 1)),
            0,
        );
        let (to, offer_id) = offers(&out)[0];
        assert_eq!(to, conn(1));
        let refused = |out: Vec<(ConnectionRef, ToConnection)>| {
            matches!(out[..], [(_, ToConnection::AnswerRefused(_))])
        };
        // Wrong offer id, wrong offerer, a peer claiming another's id from another
        // connection, an unknown torrent.
        assert!(refused(send(
            &mut swarms,
            conn(1),
            announce_kind(answer(peer(1), peer(2), Id20([9; 20]))),
            1
        )));
        assert!(refused(send(
            &mut swarms,
            conn(1),
            announce_kind(answer(peer(1), peer(5), offer_id)),
            1
        )));
        assert!(refused(send(
            &mut swarms,
            conn(9),
            announce_kind(answer(peer(1), peer(2), offer_id)),
            1
        )));
        let mut elsewhere = answer(peer(1), peer(2), offer_id);
        elsewhere.info_hash = Id20([8; 20]);
        assert!(refused(send(
            &mut swarms,
            conn(1),
            announce_kind(elsewhere),
            1
        )));
        // Past the offer's lifetime.
        assert!(refused(send(
            &mut swarms,
            conn(1),
            announce_kind(answer(peer(1), peer(2), offer_id)),
            61
        )));
    }

    #[test]
    fn the_oldest_pending_offers_give_way_at_the_limit() {
        let mut swarms = swarms();
        send(
            &mut swarms,
            conn(1),
            announce_kind(announce(peer(1), Some(5), 0)),
            0,
        );
        // Four announces of one offer each from peer 2: all go to peer 1, who may
        // hold three.
        let mut sent = Vec::new();
        for n in 0..4u8 {
            let mut request = announce(peer(2), Some(5), 1);
            request.offers[0].offer_id = Id20([50 + n; 20]);
            sent.extend(offers(&send(
                &mut swarms,
                conn(2),
                announce_kind(request),
                n.into(),
            )));
        }
        assert_eq!(sent.len(), 4);
        let first = send(
            &mut swarms,
            conn(1),
            announce_kind(answer(peer(1), peer(2), sent[0].1)),
            5,
        );
        assert!(matches!(first[..], [(_, ToConnection::AnswerRefused(_))]));
        let last = send(
            &mut swarms,
            conn(1),
            announce_kind(answer(peer(1), peer(2), sent[3].1)),
            5,
        );
        assert!(
            matches!(last[..], [(to, ToConnection::Message(ServerMessage::Answer(_)))] if to == conn(2))
        );
    }

    #[test]
    fn seeders_are_not_offered_to_seeders() {
        let mut swarms = swarms();
        for n in 1..=20 {
            send(
                &mut swarms,
                conn(n.into()),
                announce_kind(announce(peer(n), Some(0), 0)),
                0,
            );
        }
        send(
            &mut swarms,
            conn(21),
            announce_kind(announce(peer(21), Some(1), 0)),
            0,
        );
        let out = send(
            &mut swarms,
            conn(22),
            announce_kind(announce(peer(22), Some(0), 3)),
            0,
        );
        assert_eq!(offers(&out), [(conn(21), Id20([100; 20]))]);
        let out = send(
            &mut swarms,
            conn(23),
            announce_kind(announce(peer(23), Some(1), 10)),
            0,
        );
        assert_eq!(offers(&out).len(), 10);
        assert!(offers(&out).iter().all(|(to, _)| to.id != 23));
    }

    #[test]
    fn stopped_leave_and_cleaning_remove_peers() {
        let mut swarms = swarms();
        send(
            &mut swarms,
            conn(1),
            announce_kind(announce(peer(1), Some(5), 0)),
            0,
        );
        send(
            &mut swarms,
            conn(2),
            announce_kind(announce(peer(2), Some(5), 0)),
            0,
        );
        send(
            &mut swarms,
            conn(3),
            announce_kind(announce(peer(3), Some(0), 0)),
            0,
        );
        let mut stopped = announce(peer(1), Some(5), 0);
        stopped.event = AnnounceEvent::Stopped;
        assert_eq!(
            counts(&send(&mut swarms, conn(1), announce_kind(stopped), 1)),
            (1, 1)
        );
        // A leave from another connection does not remove peer 2.
        send(
            &mut swarms,
            conn(9),
            RequestKind::Leave(vec![(HASH, peer(2))]),
            1,
        );
        send(
            &mut swarms,
            conn(3),
            RequestKind::Leave(vec![(HASH, peer(3))]),
            1,
        );
        let out = send(
            &mut swarms,
            conn(5),
            RequestKind::Scrape {
                scrape_id: 4,
                info_hashes: vec![HASH, Id20([1; 20])],
            },
            1,
        );
        match &out[..] {
            [
                (
                    to,
                    ToConnection::ScrapePart {
                        scrape_id: 4,
                        files,
                    },
                ),
            ] => {
                assert_eq!(*to, conn(5));
                assert_eq!(
                    files[0],
                    (
                        HASH,
                        ScrapeFile {
                            complete: 0,
                            incomplete: 1,
                            downloaded: 0
                        }
                    )
                );
                assert_eq!(files[1].1, ScrapeFile::default());
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(swarms.clean(ServerTime(300), |_| true), (1, 1));
        assert_eq!(swarms.clean(ServerTime(301), |_| true), (0, 0));
    }

    #[test]
    fn completed_counts_downloads_and_left_moves_peers_between_counts() {
        let mut swarms = swarms();
        send(
            &mut swarms,
            conn(1),
            announce_kind(announce(peer(1), Some(5), 0)),
            0,
        );
        let mut completed = announce(peer(1), Some(0), 0);
        completed.event = AnnounceEvent::Completed;
        assert_eq!(
            counts(&send(&mut swarms, conn(1), announce_kind(completed), 1)),
            (1, 0)
        );
        // An announce without `left` keeps the peer's state.
        let mut update = announce(peer(1), None, 0);
        update.event = AnnounceEvent::Update;
        assert_eq!(
            counts(&send(&mut swarms, conn(1), announce_kind(update), 2)),
            (1, 0)
        );
        // "completed" again from a known seeder is not another download.
        let mut again = announce(peer(1), Some(0), 0);
        again.event = AnnounceEvent::Completed;
        send(&mut swarms, conn(1), announce_kind(again), 2);
        let out = send(
            &mut swarms,
            conn(1),
            RequestKind::Scrape {
                scrape_id: 0,
                info_hashes: vec![HASH],
            },
            2,
        );
        let [(_, ToConnection::ScrapePart { files, .. })] = &out[..] else {
            panic!()
        };
        assert_eq!(files[0].1.downloaded, 1);
    }
}
