//! The torrents of one swarm worker, as WebTorrent needs them: peers are known by
//! peer id and reached through the connection they announced on; offers are
//! forwarded to random peers and remembered until answered or expired, so an
//! answer is relayed only for an offer the tracker really sent to the answering peer.
//!
//! Peers live in `shoal_swarm`'s storage, like every tracker's: one list per torrent,
//! keyed by peer id, with the same rules for expiry, selection (never an expired peer),
//! downloads (once per peer) and cleaning as UDP and HTTP. What is WebTorrent's own is
//! [`WsPeer`]: the connection that owns the peer id (nobody else may change, stop or
//! answer for it) and the offers waiting for the peer's answer.
//!
//! A pending offer costs 16 bytes, kept with the peer it was sent to: a keyed hash of
//! (offer id, offering peer) and its expiry. Each peer keeps at most
//! `max_pending_offers`, the oldest giving way, so memory stays bounded however many
//! offers clients send and never answer.
//!
//! In a cluster (`[cluster]`) a torrent also holds the peers of other nodes, each
//! tagged with its node and its connection there ([`WsPeer::node`]), learnt from the
//! shared stream of changes (`nodes`). An offer for such a peer is relayed to its
//! node, which remembers it with the recipient as this node does and delivers it; the
//! answer comes back the same way. So the rules hold across nodes: a peer id belongs
//! to one connection of one node, and an answer is relayed only for an offer that
//! node really delivered to the answering peer.
//!
//! No I/O and no clock reads: [`WsShard::handle`] takes the time and pushes the
//! messages to send into a vector, so the tests below drive it directly.

use std::hash::Hasher as _;

use rand::RngExt as _;
use rand::rngs::SmallRng;
use shoal_common::{AccessView, ShardStatus};
use shoal_swarm::RelayLog;
use shoal_swarm::{
    Announce, AnnounceEvent as SwarmEvent, Announced, Capacity, ChangeLog, CleanReport, InfoHash,
    PeerData, PeerList, RecordError, Refused, RemotePeer, Replicated, ScrapeStats, ServerTime,
    TorrentMap,
};
use shoal_worker::{ByWorker, Delivered, Shard, status_of};
use shoal_ws_protocol::{
    AnnounceEvent, AnnounceRequest, AnnounceResponse, ForwardedAnswer, ForwardedOffer, Id20,
    ScrapeFile, ServerMessage, WebRtcAnswer,
};
use siphasher::sip::SipHasher13;

use crate::messages::{ConnectionRef, Delivery, RequestKind, SwarmRequest, ToConnection};
use crate::nodes::{Change, Kind, PeerOn, Relayed};

/// Timing the swarms need.
#[derive(Clone, Debug)]
pub(crate) struct SwarmSettings {
    /// Seconds between announces told to clients now (adapted to load); WebTorrent
    /// clients get one interval whatever their address family.
    pub interval: std::sync::Arc<shoal_worker::AnnounceInterval>,
    /// Seconds after its last announce that a peer is dropped.
    pub peer_timeout: u32,
    /// Seconds an offer can be answered.
    pub offer_lifetime: u32,
    /// Offers waiting for an answer that one peer may have.
    pub max_pending_offers: usize,
    /// Whether the swarms are shared with other nodes (`[cluster]`): changes are
    /// recorded and messages for other nodes' peers relayed.
    pub clustered: bool,
}

/// What the tracker keeps with each WebTorrent peer.
#[derive(Debug)]
pub(crate) struct WsPeer {
    /// The connection that announced the peer id, and owns it.
    connection: ConnectionRef,
    /// The node that connection is on: 0 for this one, else the other node's origin
    /// (`shoal_cluster::RemoteChanges::origin`).
    node: u64,
    /// Offers sent to this peer and not answered yet, oldest first (only ever for
    /// peers of this node: another node's peer keeps its offers there).
    offers: Vec<PendingOffer>,
}

impl WsPeer {
    /// The data an announce from `connection` of this node brings.
    fn on(connection: ConnectionRef) -> Self {
        Self::remote(0, connection)
    }

    /// A peer on `connection` of node `node`.
    fn remote(node: u64, connection: ConnectionRef) -> Self {
        Self {
            connection,
            node,
            offers: Vec::new(),
        }
    }

    /// Whether it is on this node's connection `connection`.
    fn is_here_on(&self, connection: ConnectionRef) -> bool {
        self.node == 0 && self.connection == connection
    }
}

impl PeerData for WsPeer {
    /// An offer between two seeders would connect browsers with nothing to trade.
    const SEEDERS_MEET_SEEDERS: bool = false;

    fn may_change(&self, by: &Self) -> bool {
        self.node == by.node && self.connection == by.connection
    }

    /// Only the node that holds a peer speaks for it: never for this node's own, and
    /// a peer held by one node is not taken over by another while it lives.
    fn may_replicate(&self, incoming: &Self) -> bool {
        self.node != 0 && self.node == incoming.node
    }

    fn refresh(&mut self, _: Self) {
        // Same connection (may_change said so); the pending offers stay.
    }

    fn tidy(&mut self, now: ServerTime) {
        self.offers.retain(|offer| offer.expires >= now);
        if self.offers.is_empty() {
            self.offers = Vec::new();
        }
    }
}

/// An offer forwarded and not yet answered.
#[derive(Clone, Copy, Debug)]
struct PendingOffer {
    /// [`offer_key`] of the offer id, the offering peer and its connection.
    key: u64,
    expires: ServerTime,
    /// The connection it came from, in short ([`sender_tag`]): which offers one sender
    /// holds at a recipient. Fits in the padding: a pending offer stays 16 bytes.
    sender: u32,
}

const _: () = assert!(std::mem::size_of::<PendingOffer>() == 16);

/// How many of a recipient's pending offers one connection may hold: a quarter (at
/// least one). Past it that connection's own oldest gives way, so a sender flooding a
/// peer with offers cannot push out everyone else's before they are answered.
fn per_sender_limit(limit: usize) -> usize {
    (limit / 4).max(1)
}

/// A connection of node `node` (0: this one) in 32 bits, for
/// [`PendingOffer::sender`]; two that share one only share a per-sender limit.
fn sender_tag(node: u64, connection: ConnectionRef) -> u32 {
    (connection.id as u32)
        ^ (u32::from(connection.worker) << 20)
        ^ (node as u32)
        ^ (node >> 32) as u32
}

/// The torrents of one swarm worker: `shoal_swarm`'s map, one peer list per torrent.
type Torrents = TorrentMap<PeerList<Id20, WsPeer>>;

/// The torrents of one swarm worker.
#[derive(Debug)]
pub(crate) struct WsShard {
    torrents: Torrents,
    settings: SwarmSettings,
    rng: SmallRng,
    /// SipHash keys for offer keys, random per worker.
    offer_keys: (u64, u64),
    /// Messages of the request being served.
    produced: Vec<(ConnectionRef, ToConnection)>,
    /// Messages of the batch being served, by socket worker (or of messages other
    /// nodes relayed, until [`Shard::flush_replies`]).
    deliveries: ByWorker<Delivery>,
    /// Changes for the other nodes, when the swarms are shared.
    changes: Option<ChangeLog>,
    /// Offers and answers for peers of other nodes, when the swarms are shared.
    relay: Option<RelayLog>,
}

impl Shard for WsShard {
    type Batch = Vec<SwarmRequest>;
    type Reply = Vec<Delivery>;

    fn handle(
        &mut self,
        batch: Vec<SwarmRequest>,
        now: ServerTime,
        reply: &mut impl FnMut(usize, Vec<Delivery>),
    ) {
        let mut produced = std::mem::take(&mut self.produced);
        for request in batch {
            self.serve(request, now, &mut produced);
            for (to, message) in produced.drain(..) {
                self.deliveries
                    .push(usize::from(to.worker), (to.id, message));
            }
        }
        self.produced = produced;
        self.deliveries.send_all(reply);
    }

    fn clean(&mut self, now: ServerTime, access: &AccessView) -> CleanReport {
        self.torrents
            .clean_step(now, |info_hash| access.allows(info_hash))
    }

    fn status(&self) -> ShardStatus {
        status_of(&self.torrents)
    }

    fn census(&self) -> &shoal_swarm::Census {
        self.torrents.census()
    }

    fn change_log(&mut self) -> Option<&mut ChangeLog> {
        self.changes.as_mut()
    }

    fn apply_changes(
        &mut self,
        records: &[u8],
        elapsed: u32,
        origin: u64,
        now: ServerTime,
        mine: &mut dyn FnMut(&InfoHash) -> bool,
    ) -> Result<Replicated, RecordError> {
        let mut done = Replicated::default();
        for change in Change::read_all(records)? {
            if !mine(&change.info_hash.0) {
                continue;
            }
            let peer = RemotePeer {
                key: change.peer_id,
                left: change.left,
                seeder: change.seeder,
                extra: WsPeer::remote(origin, change.connection),
                downloads: u32::from(change.downloaded),
            };
            done.add(
                self.torrents
                    .apply_remote_peer(&change.info_hash.0, peer, elapsed, now),
            );
        }
        Ok(done)
    }

    fn relay_log(&mut self) -> Option<&mut RelayLog> {
        self.relay.as_mut()
    }

    fn apply_relayed(
        &mut self,
        records: &[u8],
        origin: u64,
        now: ServerTime,
        mine: &mut dyn FnMut(&InfoHash) -> bool,
    ) -> Result<Delivered, String> {
        let mut done = Delivered::default();
        let mut produced = std::mem::take(&mut self.produced);
        for message in Relayed::read_all(records)? {
            if !mine(&message.info_hash.0) {
                continue;
            }
            let delivered = match message.kind {
                Kind::Offer => self.take_in_offer(message, origin, now, &mut produced),
                Kind::Answer => self.take_in_answer(message, &mut produced),
            };
            if delivered {
                done.delivered += 1;
            } else {
                done.undeliverable += 1;
            }
            for (to, message) in produced.drain(..) {
                self.deliveries
                    .push(usize::from(to.worker), (to.id, message));
            }
        }
        self.produced = produced;
        Ok(done)
    }

    fn flush_replies(&mut self, reply: &mut impl FnMut(usize, Vec<Delivery>)) {
        self.deliveries.send_all(reply);
    }
}

impl WsShard {
    /// Empty swarms holding at most `capacity`.
    pub(crate) fn new(settings: SwarmSettings, capacity: Capacity, mut rng: SmallRng) -> Self {
        Self {
            torrents: Torrents::new(settings.peer_timeout, capacity),
            offer_keys: (rng.random(), rng.random()),
            rng,
            produced: Vec::new(),
            deliveries: ByWorker::default(),
            changes: settings.clustered.then(ChangeLog::default),
            relay: settings.clustered.then(RelayLog::default),
            settings,
        }
    }

    /// Serves one request at `now`; the messages it causes go to `out`.
    pub(crate) fn serve(
        &mut self,
        request: SwarmRequest,
        now: ServerTime,
        out: &mut Vec<(ConnectionRef, ToConnection)>,
    ) {
        // Peers live as long as the longest interval a reply gives now, plus the grace.
        self.torrents
            .set_peer_timeout(self.settings.interval.peer_timeout());
        let from = request.from;
        match request.kind {
            RequestKind::Announce(announce) => self.announce(*announce, from, now, out),
            RequestKind::Scrape {
                scrape_id,
                info_hashes,
            } => {
                let files = info_hashes
                    .into_iter()
                    .map(|hash| (hash, scrape_file(self.torrents.scrape(&hash.0))))
                    .collect();
                out.push((from, ToConnection::ScrapePart { scrape_id, files }));
            }
            RequestKind::Leave(peers) => {
                for (info_hash, peer_id) in peers {
                    // Only the connection's own peers; an emptied torrent stays,
                    // downloads count and all, until the next cleaning.
                    if self
                        .torrents
                        .remove(&info_hash.0, &peer_id, &WsPeer::on(from), now)
                    {
                        self.record_change(info_hash, peer_id, 0, false, false, from);
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
        let offerer = request.peer_id;
        let offer_expires = now.plus(self.settings.offer_lifetime);
        let limit = self.settings.max_pending_offers;
        let keys = self.offer_keys;
        let seeder = request.left.map(|left| left == 0);
        let mut offers = request.offers.into_iter();
        let relay = &mut self.relay;
        let event = match request.event {
            AnnounceEvent::Started => SwarmEvent::Started,
            AnnounceEvent::Stopped => SwarmEvent::Stopped,
            AnnounceEvent::Completed => SwarmEvent::Completed,
            AnnounceEvent::Update => SwarmEvent::None,
        };
        let announce = Announce {
            key: offerer,
            extra: WsPeer::on(from),
            event,
            seeder,
            peers_wanted: offers.len(),
        };
        // Each chosen peer is sent one offer, and remembers it; a peer of another
        // node is sent it through that node, which remembers it there.
        let result =
            self.torrents
                .announce(&info_hash.0, announce, now, &mut self.rng, |recipient| {
                    let Some(offer) = offers.next() else { return };
                    let to = recipient.extra.connection;
                    if recipient.extra.node != 0 {
                        if let Some(relay) = relay.as_mut() {
                            let message = Relayed {
                                kind: Kind::Offer,
                                info_hash,
                                to: PeerOn {
                                    peer_id: *recipient.key(),
                                    connection: to,
                                },
                                from: PeerOn {
                                    peer_id: offerer,
                                    connection: from,
                                },
                                seeder: seeder.unwrap_or(false),
                                offer_id: offer.offer_id,
                                description: offer.offer,
                            };
                            relay.record(recipient.extra.node, |bytes| message.write(bytes));
                        }
                        return;
                    }
                    let key = offer_key(keys, &offer.offer_id, &offerer, 0, from);
                    let sender = sender_tag(0, from);
                    remember_offer(
                        &mut recipient.extra.offers,
                        PendingOffer {
                            key,
                            expires: offer_expires,
                            sender,
                        },
                        limit,
                        now,
                    );
                    out.push((
                        to,
                        ToConnection::Message(ServerMessage::Offer(ForwardedOffer {
                            info_hash,
                            peer_id: offerer,
                            offer_id: offer.offer_id,
                            offer: offer.offer,
                        })),
                    ));
                });
        let reply = match result {
            Ok(announced) => {
                let Announced {
                    counts,
                    stored,
                    full,
                    ..
                } = announced;
                if event == SwarmEvent::Stopped {
                    self.record_change(info_hash, offerer, 0, false, false, from);
                } else if stored {
                    let left = self.torrents.peer_timeout();
                    let seeder = seeder.unwrap_or(false);
                    let downloaded = announced.downloaded;
                    self.record_change(info_hash, offerer, left, seeder, downloaded, from);
                }
                let counts = ScrapeStats {
                    seeders: counts.seeders,
                    leechers: counts.leechers,
                    downloads: 0,
                };
                // A new peer of a full swarm (sent offers, not stored) comes back after
                // the longest interval; a leaving one is told the usual interval.
                let interval = &self.settings.interval;
                let random = self.rng.random();
                let given = if full {
                    interval.for_full(random)
                } else {
                    interval.for_reply(shoal_worker::Family::V4, random)
                };
                announce_reply(info_hash, scrape_file(counts), given)
            }
            Err(Refused::PeerTaken) => ToConnection::PeerIdTaken(info_hash),
            // A WebTorrent peer id carries no address: no allowance is kept for it.
            Err(Refused::TorrentsFull | Refused::NewTorrentsLimited) => {
                let interval = self.settings.interval.for_full(self.rng.random());
                ToConnection::TrackerFull(info_hash, interval)
            }
        };
        out.push((from, reply));
    }

    /// Records a change of peer `peer_id` on this node's `connection` for the other
    /// nodes, when the swarms are shared.
    fn record_change(
        &mut self,
        info_hash: Id20,
        peer_id: Id20,
        left: u32,
        seeder: bool,
        downloaded: bool,
        connection: ConnectionRef,
    ) {
        if let Some(changes) = &mut self.changes {
            let change = Change {
                info_hash,
                peer_id,
                left,
                seeder,
                downloaded,
                connection,
            };
            changes.record_with(|bytes| change.write(bytes));
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
            Ok((0, offerer)) => out.push((
                offerer,
                ToConnection::Message(ServerMessage::Answer(ForwardedAnswer {
                    info_hash: request.info_hash,
                    peer_id: request.peer_id,
                    offer_id: answer.offer_id,
                    answer: answer.answer,
                })),
            )),
            Ok((node, offerer)) => {
                // Checked here, where the offer was delivered; the offerer's node
                // hands it to the connection that made the offer, if still there.
                if let Some(relay) = &mut self.relay {
                    let message = Relayed {
                        kind: Kind::Answer,
                        info_hash: request.info_hash,
                        to: PeerOn {
                            peer_id: answer.to_peer_id,
                            connection: offerer,
                        },
                        from: PeerOn {
                            peer_id: request.peer_id,
                            connection: from,
                        },
                        seeder: false,
                        offer_id: answer.offer_id,
                        description: answer.answer,
                    };
                    relay.record(node, |bytes| message.write(bytes));
                }
            }
            Err(reason) => {
                log::debug!("answer refused: {reason}");
                out.push((from, ToConnection::AnswerRefused(request.info_hash)));
            }
        }
    }

    /// Uses up the pending offer an answer answers and returns the offerer's node (0:
    /// this one) and connection there, or says why the answer must not be relayed.
    fn check_answer(
        &mut self,
        request: &AnnounceRequest,
        answer: &WebRtcAnswer,
        from: ConnectionRef,
        now: ServerTime,
    ) -> Result<(u64, ConnectionRef), &'static str> {
        let info_hash = &request.info_hash.0;
        let (node, offerer) = self
            .torrents
            .peer(info_hash, &answer.to_peer_id)
            .map(|peer| (peer.extra.node, peer.extra.connection))
            .ok_or("the offering peer left")?;
        let key = offer_key(
            self.offer_keys,
            &answer.offer_id,
            &answer.to_peer_id,
            node,
            offerer,
        );
        let expires = self.torrents.expiry(now);
        // The answering peer must be the one the offer went to, on this connection.
        let answerer = self
            .torrents
            .peer_mut(info_hash, &request.peer_id)
            .ok_or("the answering peer is not in the swarm")?;
        if !answerer.extra.is_here_on(from) {
            return Err("the answering peer announced on another connection");
        }
        let pending = answerer
            .extra
            .offers
            .iter()
            .position(|pending| pending.key == key && pending.expires >= now)
            .ok_or("no such offer pending for the answering peer (or from its connection)")?;
        answerer.extra.offers.remove(pending);
        answerer.set_expires(expires);
        Ok((node, offerer))
    }

    /// An offer another node (`origin`) relayed for a peer here: delivered to the
    /// peer's connection and remembered with it, as this node's own offers are, so
    /// that only the answer to it is relayed back. The offerer is taken into the
    /// swarm as that node's peer at once (the shared stream may bring it later than
    /// the answer comes). False when the recipient, or its connection, is gone.
    fn take_in_offer(
        &mut self,
        message: Relayed,
        origin: u64,
        now: ServerTime,
        out: &mut Vec<(ConnectionRef, ToConnection)>,
    ) -> bool {
        let info_hash = &message.info_hash.0;
        let here = self
            .torrents
            .peer(info_hash, &message.to.peer_id)
            .is_some_and(|peer| {
                peer.expires() > now && peer.extra.is_here_on(message.to.connection)
            });
        if !here {
            return false;
        }
        let offerer = RemotePeer {
            key: message.from.peer_id,
            left: self.torrents.peer_timeout(),
            seeder: message.seeder,
            extra: WsPeer::remote(origin, message.from.connection),
            downloads: 0,
        };
        self.torrents.apply_remote_peer(info_hash, offerer, 0, now);
        let key = offer_key(
            self.offer_keys,
            &message.offer_id,
            &message.from.peer_id,
            origin,
            message.from.connection,
        );
        let pending = PendingOffer {
            key,
            expires: now.plus(self.settings.offer_lifetime),
            sender: sender_tag(origin, message.from.connection),
        };
        let limit = self.settings.max_pending_offers;
        let Some(recipient) = self.torrents.peer_mut(info_hash, &message.to.peer_id) else {
            return false;
        };
        remember_offer(&mut recipient.extra.offers, pending, limit, now);
        out.push((
            message.to.connection,
            ToConnection::Message(ServerMessage::Offer(ForwardedOffer {
                info_hash: message.info_hash,
                peer_id: message.from.peer_id,
                offer_id: message.offer_id,
                offer: message.description,
            })),
        ));
        true
    }

    /// An answer another node checked against the offer it delivered: handed to the
    /// connection that made the offer, if that connection still holds the peer id.
    fn take_in_answer(
        &mut self,
        message: Relayed,
        out: &mut Vec<(ConnectionRef, ToConnection)>,
    ) -> bool {
        let offerer_here = self
            .torrents
            .peer(&message.info_hash.0, &message.to.peer_id)
            .is_some_and(|peer| peer.extra.is_here_on(message.to.connection));
        if offerer_here {
            out.push((
                message.to.connection,
                ToConnection::Message(ServerMessage::Answer(ForwardedAnswer {
                    info_hash: message.info_hash,
                    peer_id: message.from.peer_id,
                    offer_id: message.offer_id,
                    answer: message.description,
                })),
            ));
        }
        offerer_here
    }
}

/// Adds an offer to a recipient's pending ones, oldest first: expired offers at the
/// front go; a sender at its share gives way with its own oldest; else, at the limit,
/// the oldest of all does.
fn remember_offer(
    pending: &mut Vec<PendingOffer>,
    offer: PendingOffer,
    limit: usize,
    now: ServerTime,
) {
    let stale = pending
        .iter()
        .take_while(|pending| pending.expires < now)
        .count();
    pending.drain(..stale);
    let (mut own, mut oldest_own) = (0, None);
    for (at, pending) in pending.iter().enumerate() {
        if pending.sender == offer.sender {
            own += 1;
            oldest_own.get_or_insert(at);
        }
    }
    match oldest_own {
        Some(at) if own >= per_sender_limit(limit) => {
            pending.remove(at);
        }
        _ if pending.len() >= limit => {
            pending.remove(0);
        }
        _ => {}
    }
    pending.push(offer);
}

/// Who made which offer, in 8 bytes. Keyed (random keys per swarm worker), so a
/// client cannot craft another (offer id, offerer) pair with the same key.
/// What a pending offer is known by: its id, the offering peer and the connection
/// it came from. With the connection in it, an answer goes only to the connection that
/// made the offer: if that connection closed and another took the peer id over, the
/// key no longer matches and the answer is refused instead of handed to the newcomer.
fn offer_key(
    keys: (u64, u64),
    offer_id: &Id20,
    offerer: &Id20,
    node: u64,
    from: ConnectionRef,
) -> u64 {
    let mut hasher = SipHasher13::new_with_keys(keys.0, keys.1);
    hasher.write(&offer_id.0);
    hasher.write(&offerer.0);
    hasher.write_u64(node);
    hasher.write_u16(from.worker);
    hasher.write_u64(from.id);
    hasher.finish()
}

fn scrape_file(stats: ScrapeStats) -> ScrapeFile {
    ScrapeFile {
        complete: stats.seeders.into(),
        incomplete: stats.leechers.into(),
        downloaded: stats.downloads.into(),
    }
}

fn announce_reply(info_hash: Id20, counts: ScrapeFile, interval: u32) -> ToConnection {
    ToConnection::Message(ServerMessage::AnnounceResponse(AnnounceResponse {
        info_hash,
        complete: counts.complete,
        incomplete: counts.incomplete,
        interval: interval.into(),
    }))
}

/// Settings for tests and fuzzing: a fixed 120 s interval (no adapting, no jitter),
/// 300 s peers, 60 s offers.
#[cfg(any(test, fuzzing))]
fn fixed_settings(max_pending_offers: usize, clustered: bool) -> SwarmSettings {
    SwarmSettings {
        interval: std::sync::Arc::new(shoal_worker::AnnounceInterval::new(
            shoal_worker::IntervalSettings {
                adaptive: false,
                min: 120,
                max: 120,
                target_load: 0.7,
                jitter_percent: 0,
                grace: 180,
                min_share: 0.5,
                ceiling: u32::MAX,
            },
        )),
        peer_timeout: 300,
        offer_lifetime: 60,
        max_pending_offers,
        clustered,
    }
}

/// `fuzz/fuzz_targets/ws_cluster.rs`: any bytes as another node's changes and as
/// messages it relayed, into a clustered shard that holds one peer of its own
/// (torrent `[7; 20]`, peer `[1; 20]`, connection 0/1, which relayed messages can name):
/// never a panic, the counts stay true, and every message delivered goes to that one
/// connection.
#[cfg(fuzzing)]
pub(crate) fn fuzz_cluster(data: &[u8]) {
    use rand::SeedableRng as _;
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let (changes, relayed) = rest.split_at(usize::from(split).min(rest.len()));
    let settings = fixed_settings(4, true);
    let capacity = Capacity {
        torrents: 8,
        peers: 64,
        peers_per_torrent: 16,
    };
    let mut shard = WsShard::new(settings, capacity, SmallRng::seed_from_u64(1));
    let here = ConnectionRef { worker: 0, id: 1 };
    let request = AnnounceRequest {
        info_hash: Id20([7; 20]),
        peer_id: Id20([1; 20]),
        event: AnnounceEvent::Started,
        left: Some(1),
        uploaded: None,
        downloaded: None,
        numwant: None,
        offers: Vec::new(),
        answer: None,
    };
    let mut out = Vec::new();
    shard.serve(
        SwarmRequest {
            from: here,
            kind: RequestKind::Announce(Box::new(request)),
        },
        ServerTime(5),
        &mut out,
    );
    let _ = shard.apply_changes(changes, 0, 0xa, ServerTime(5), &mut |_| true);
    let _ = shard.apply_relayed(relayed, 0xa, ServerTime(6), &mut |_| true);
    let mut delivered = Vec::new();
    shard.flush_replies(&mut |worker, deliveries| delivered.push((worker, deliveries)));
    for (worker, deliveries) in delivered {
        assert_eq!(worker, 0);
        assert!(deliveries.iter().all(|(id, _)| *id == 1));
    }
    assert!(shard.torrents.torrent_count() <= capacity.torrents);
    assert!(shard.torrents.peer_count() <= capacity.peers);
    let counted: usize = shard
        .torrents
        .scrape_all()
        .iter()
        .map(|(_, stats)| (stats.seeders + stats.leechers) as usize)
        .sum();
    assert_eq!(counted, shard.torrents.peer_count());
}

#[cfg(test)]
mod cluster_tests;

#[cfg(test)]
mod tests {
    use rand::SeedableRng as _;
    use serde_json::value::RawValue;
    use shoal_ws_protocol::{Offer, ScrapeFile};

    use super::*;

    pub(super) fn settings() -> SwarmSettings {
        fixed_settings(3, false)
    }
    const HASH: Id20 = Id20([7; 20]);

    fn swarms() -> WsShard {
        WsShard::new(settings(), Capacity::UNLIMITED, SmallRng::seed_from_u64(1))
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

    pub(super) fn send(
        swarms: &mut WsShard,
        from: ConnectionRef,
        kind: RequestKind,
        now: u32,
    ) -> Vec<(ConnectionRef, ToConnection)> {
        let mut out = Vec::new();
        swarms.serve(SwarmRequest { from, kind }, ServerTime(now), &mut out);
        out
    }

    fn announce_kind(request: AnnounceRequest) -> RequestKind {
        RequestKind::Announce(Box::new(request))
    }

    pub(super) fn counts(out: &[(ConnectionRef, ToConnection)]) -> (u64, u64) {
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
        // Peers live until peer_timeout (300) after their announce, as in every
        // tracker: present at 299, gone at 300.
        let everything = shoal_common::AccessControl::with_list(
            shoal_common::AccessListMode::Off,
            shoal_common::AccessList::default(),
        )
        .view();
        let sizes = |swarms: &WsShard| {
            let status = swarms.status();
            (status.torrents, status.peers)
        };
        swarms
            .torrents
            .clean(ServerTime(299), |hash| everything.allows(hash));
        assert_eq!(sizes(&swarms), (1, 1));
        swarms
            .torrents
            .clean(ServerTime(300), |hash| everything.allows(hash));
        assert_eq!(sizes(&swarms), (0, 0));
    }

    #[test]
    fn a_peer_id_belongs_to_its_connection_until_it_times_out() {
        let mut swarms = swarms();
        send(
            &mut swarms,
            conn(1),
            announce_kind(announce(peer(1), Some(5), 0)),
            0,
        );
        // Another connection can neither take the peer id over nor stop it.
        let taken = |out: Vec<(ConnectionRef, ToConnection)>| matches!(out[..], [(to, ToConnection::PeerIdTaken(HASH))] if to == conn(9));
        assert!(taken(send(
            &mut swarms,
            conn(9),
            announce_kind(announce(peer(1), Some(0), 0)),
            1
        )));
        let mut stopped = announce(peer(1), Some(5), 0);
        stopped.event = AnnounceEvent::Stopped;
        assert!(taken(send(&mut swarms, conn(9), announce_kind(stopped), 1)));
        // Offers for peer 1 still go to connection 1.
        let out = send(
            &mut swarms,
            conn(2),
            announce_kind(announce(peer(2), Some(5), 1)),
            2,
        );
        assert_eq!(offers(&out), [(conn(1), Id20([100; 20]))]);
        // Once it timed out, the peer id is free for anyone.
        let out = send(
            &mut swarms,
            conn(9),
            announce_kind(announce(peer(1), Some(5), 0)),
            300,
        );
        assert_eq!(counts(&out), (0, 2));
        let out = send(
            &mut swarms,
            conn(2),
            announce_kind(announce(peer(2), Some(5), 1)),
            301,
        );
        assert_eq!(offers(&out), [(conn(9), Id20([100; 20]))]);
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
