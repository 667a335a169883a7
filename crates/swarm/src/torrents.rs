//! The torrent map: announce, scrape and cleaning over the torrents one swarm worker owns.
//!
//! One storage serves every tracker. A torrent keeps its peers in a [`PeerSet`]: for
//! BitTorrent a [`DualStack`] (IPv4 and IPv6 lists, peers keyed by address), for
//! WebTorrent one [`PeerList`](crate::PeerList) keyed by peer id. What a tracker keeps per peer, and the
//! few rules that depend on it, come from its [`PeerData`]; expiry, selection (never an
//! expired peer), downloads (once per peer) and cleaning are the same for all.

use crate::counts::{ScrapeStats, SwarmCounts};
use std::collections::VecDeque;

use hashbrown::DefaultHashBuilder;
use rand::Rng;

use crate::InfoHash;
use crate::census::Census;
use crate::client_table::{Bucket, ClientTable, client_key};
use crate::partitions::{Keyed, Located, PARTITIONS, Partitions};
use crate::peer::{Peer, PeerData};
use crate::peer_set::{DualStack, ListIn, PeerSet};
use crate::time::ServerTime;

/// Steps of [`TorrentMap::prefetch_announce`].
pub const PREFETCH_STEPS: usize = 4;

/// What an announce says about the peer's state change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AnnounceEvent {
    /// A regular announce.
    #[default]
    None,
    /// The peer started downloading.
    Started,
    /// The peer finished downloading; counts towards the torrent's downloads.
    Completed,
    /// The peer is leaving the swarm.
    Stopped,
}

/// One announce, already checked and resolved by the daemon.
#[derive(Clone, Copy, Debug)]
pub struct Announce<K, X> {
    /// What the peer is known by: where it listens (IP from the packet source, port
    /// from the request) for BitTorrent, its peer id for WebTorrent.
    pub key: K,
    /// Per-peer data to store (e.g. the peer id), `()` when none.
    pub extra: X,
    /// The event the client reported.
    pub event: AnnounceEvent,
    /// Whether the peer has the whole torrent (`left == 0`); `None` when the client
    /// did not say, which keeps what the peer was (a new peer is a leecher).
    pub seeder: Option<bool>,
    /// How many peers to return at most, already capped by configuration.
    pub peers_wanted: usize,
}

/// Why an announce changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The peer it names belongs to someone else ([`PeerData::may_change`]).
    PeerTaken,
    /// It would start a torrent, and the map holds as many as [`Capacity::torrents`]
    /// with none that may give way ([`TorrentMap::announce`]).
    TorrentsFull,
    /// It would start a torrent, and its client started as many as it may lately
    /// ([`NewTorrentLimit`]).
    NewTorrentsLimited,
}

impl Refused {
    /// The reason a client is told, for the refusals of a new torrent.
    pub fn new_torrent_reason(self) -> Option<&'static str> {
        match self {
            Self::PeerTaken => None,
            Self::TorrentsFull => Some("tracker full: no new torrents accepted"),
            Self::NewTorrentsLimited => {
                Some("too many new torrents from your address, try again later")
            }
        }
    }
}

/// What an announce did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Announced {
    /// The torrent's counts afterwards.
    pub counts: SwarmCounts,
    /// Whether the peer is stored now: false when it left (`stopped`), listens nowhere
    /// (port 0), or is new and found no room ([`full`](Self::full)).
    pub stored: bool,
    /// Whether a peer that asked to be stored was not, for lack of room: new, and its
    /// torrent or the map full (see [`Capacity`]); it was still sent peers. Only
    /// this is "the tracker is full": a leaving or unreachable peer is not stored
    /// because it asked not to be.
    pub full: bool,
    /// Whether it counted a download (`Completed` from a peer stored as a leecher
    /// before this announce).
    pub downloaded: bool,
}

/// How much one map may hold. What happens at each limit is the documented policy of
/// a full tracker: swarms that exist keep working for the peers they have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capacity {
    /// Torrents; an announce that would start another is refused
    /// ([`Refused::TorrentsFull`]).
    pub torrents: usize,
    /// Peers over all torrents; a new peer past it is answered (sent peers) but not
    /// stored.
    pub peers: usize,
    /// Peers in one torrent (both families); a new peer past it is answered but not
    /// stored.
    pub peers_per_torrent: usize,
}

impl Capacity {
    /// No limits.
    pub const UNLIMITED: Self = Self {
        torrents: usize::MAX,
        peers: usize::MAX,
        peers_per_torrent: usize::MAX,
    };
}

/// What the limits of [`Capacity`] refused since the map was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Announces refused because the map held as many torrents as it may.
    pub torrents: u64,
    /// New peers answered but not stored because their torrent or the map was full.
    pub peers: u64,
    /// Announces refused because their client had started as many torrents as it may
    /// ([`NewTorrentLimit`]).
    pub new_torrents: u64,
    /// Torrents whose peers never came from two clients at once, removed to make room
    /// for a new torrent in a full map.
    pub evicted: u64,
}

/// How many torrents one client, and one network, may start once the map is past half
/// its [`Capacity::torrents`]: a token bucket per client (an IPv4 address or IPv6
/// network, by the announcing peer's address) and one per network (an IPv4 /24, an
/// IPv6 /48: what one site holds, so that the addresses of one allocation count as
/// one), each in a fixed table. Below half, starting torrents costs nothing (a restart
/// without state has every client start its torrents again); past it, a flood of
/// fresh info hashes from a few addresses or networks stops at their allowance instead
/// of filling the map for everyone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewTorrentLimit {
    /// Torrents a client may start per second, on average.
    pub per_second: u32,
    /// Torrents a client may start at once above that rate.
    pub burst: u32,
    /// Clients tracked (slots of the table).
    pub clients: usize,
    /// Bits of an IPv4 address that make one client.
    pub ipv4_prefix_len: u8,
    /// Bits of an IPv6 address that make one client.
    pub ipv6_prefix_len: u8,
    /// Torrents one network may start per second, on average; 0: networks are not
    /// counted.
    pub network_per_second: u32,
    /// Torrents one network may start at once above that rate.
    pub network_burst: u32,
    /// Bits of an IPv4 address that make one network.
    pub network_ipv4_prefix_len: u8,
    /// Bits of an IPv6 address that make one network.
    pub network_ipv6_prefix_len: u8,
}

/// The allowances of [`NewTorrentLimit`].
#[derive(Debug)]
struct NewTorrentBudgets {
    limit: NewTorrentLimit,
    clients: ClientTable<Bucket>,
    networks: ClientTable<Bucket>,
}

impl NewTorrentBudgets {
    fn new(limit: NewTorrentLimit) -> Self {
        let networks = if limit.network_per_second > 0 {
            limit.clients
        } else {
            0
        };
        Self {
            limit,
            clients: ClientTable::new(limit.clients),
            networks: ClientTable::new(networks),
        }
    }

    /// Takes one new torrent from the allowances of the client at `ip` and of its
    /// network; neither is spent when either refuses.
    fn take(&mut self, ip: std::net::IpAddr, now: ServerTime) -> bool {
        let limit = self.limit;
        let key = client_key(ip, limit.ipv4_prefix_len, limit.ipv6_prefix_len);
        let client = self
            .clients
            .entry(key, now, || Bucket::full(limit.burst, now));
        if !client.take(limit.per_second, limit.burst, now) {
            return false;
        }
        if limit.network_per_second == 0 {
            return true;
        }
        let network = client_key(
            ip,
            limit.network_ipv4_prefix_len,
            limit.network_ipv6_prefix_len,
        );
        let network_burst = limit.network_burst;
        let taken = self
            .networks
            .entry(network, now, || Bucket::full(network_burst, now))
            .take(limit.network_per_second, network_burst, now);
        if !taken {
            self.clients
                .entry(key, now, || Bucket::full(limit.burst, now))
                .give_back(limit.burst);
        }
        taken
    }
}

/// Completed downloads of a torrent, with whether it was ever crowded (two clients'
/// peers at once, or a download counted) in the top bit: a torrent that never was is
/// what a flood of fresh info hashes leaves behind, even one announced from two ports
/// of one address, and may give way in a full map. While it is not crowded its count
/// is 0 and the low bits hold a tag of the one client its peers come from; once it is,
/// they hold the count (saturating below the top bit). One word, so that a torrent
/// stays 72 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Downloads(u32);

impl Downloads {
    const CROWDED: u32 = 1 << 31;
    const LOW: u32 = !Self::CROWDED;

    /// The count.
    pub(crate) fn count(self) -> u32 {
        if self.crowded() {
            self.0 & Self::LOW
        } else {
            0
        }
    }

    /// Adds `more`, saturating; a download makes the torrent crowded.
    pub(crate) fn add(&mut self, more: u32) {
        if more == 0 {
            return;
        }
        self.mark_crowded();
        self.0 = Self::CROWDED | self.count().saturating_add(more).min(Self::LOW);
    }

    /// Raises the count to `at_least`.
    pub(crate) fn raise_to(&mut self, at_least: u32) {
        self.add(at_least.saturating_sub(self.count()));
    }

    /// Whether the torrent was ever crowded.
    fn crowded(self) -> bool {
        self.0 & Self::CROWDED != 0
    }

    /// Marks it crowded (its count 0 if it was not).
    fn mark_crowded(&mut self) {
        if !self.crowded() {
            self.0 = Self::CROWDED;
        }
    }

    /// Notes a peer of the client tagged `tag` (never 0) stored in the torrent, which
    /// holds it `alone` or beside others: alone, the torrent is that client's; beside
    /// peers of another client, it is crowded.
    fn note_client(&mut self, tag: u32, alone: bool) {
        if self.crowded() {
            return;
        }
        let held = self.0 & Self::LOW;
        if alone || held == 0 {
            self.0 = tag;
        } else if held != tag {
            self.mark_crowded();
        }
    }
}

/// The tag [`Downloads`] keeps of a client (an IPv4 address, an IPv6 /64): 31 bits,
/// never 0. Two clients share a tag about once in two billion, which keeps their
/// torrent evictable: no attacker can choose that for someone else's torrent, and it
/// cannot make one client look like two.
fn client_tag(ip: std::net::IpAddr) -> u32 {
    let key = client_key(ip, 32, 64);
    let folded = (key as u64) ^ ((key >> 64) as u64);
    let mixed = folded.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((mixed >> 33) as u32 & Downloads::LOW) | 1
}

/// The number of peers to return for a client's request, from configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerLimits {
    /// Used when the client asks for zero or a negative number (BEP 15 uses -1).
    pub default: usize,
    /// Upper bound on any reply.
    pub max: usize,
}

impl PeerLimits {
    /// The number of peers to send for a request of `requested`.
    pub fn resolve(&self, requested: i64) -> usize {
        if requested <= 0 {
            self.default.min(self.max)
        } else {
            usize::try_from(requested)
                .unwrap_or(usize::MAX)
                .min(self.max)
        }
    }
}

/// What a cleaning pass removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// Peers that had not announced within the peer timeout, plus the peers of
    /// torrents removed by the access list.
    pub peers_removed: usize,
    /// Torrents that had no peers left or are no longer allowed.
    pub torrents_removed: usize,
    /// Whether this step finished a pass over the whole map.
    pub pass_done: bool,
}

/// One torrent: its info hash, its peers and its downloads counter.
///
/// The info hash is kept inside the record, not beside it in a pair, so that the
/// fields pack around it: 72 bytes for a BitTorrent torrent (a test keeps it so),
/// where an (info hash, torrent) pair took 80.
#[derive(Debug)]
pub struct Torrent<S> {
    pub(crate) info_hash: InfoHash,
    pub(crate) peers: S,
    pub(crate) downloads: Downloads,
}

impl<S: PeerSet> Torrent<S> {
    /// A torrent without peers or downloads.
    pub(crate) fn new(info_hash: InfoHash) -> Self {
        Self {
            info_hash,
            peers: S::default(),
            downloads: Downloads::default(),
        }
    }

    /// Notes a peer stored in the torrent from `client` (its address, when its key
    /// carries one): once it holds peers of two clients at once (without addresses to
    /// tell, two peers), or counted a download, it is crowded and from then on never
    /// gives way to a newcomer in a full map.
    pub(crate) fn note_crowd(&mut self, client: Option<std::net::IpAddr>) {
        match client {
            Some(ip) => self
                .downloads
                .note_client(client_tag(ip), self.peers.len() <= 1),
            None if self.peers.len() >= 2 => self.downloads.mark_crowded(),
            None => {}
        }
    }

    /// Whether it may give way to a new torrent in a full map: never crowded (its
    /// peers, however many, from one client).
    fn may_give_way(&self) -> bool {
        !self.downloads.crowded()
    }

    /// The torrent's info hash.
    pub fn info_hash(&self) -> &InfoHash {
        &self.info_hash
    }

    /// Counts over every list.
    pub fn counts(&self) -> SwarmCounts {
        self.peers.counts()
    }

    /// Scrape figures.
    pub fn scrape_stats(&self) -> ScrapeStats {
        let SwarmCounts { seeders, leechers } = self.counts();
        ScrapeStats {
            seeders,
            leechers,
            downloads: self.downloads.count(),
        }
    }

    /// The peers.
    pub fn peers(&self) -> &S {
        &self.peers
    }
}

impl<S> Keyed for Torrent<S> {
    fn key(&self) -> &InfoHash {
        &self.info_hash
    }
}

/// The torrents of one swarm worker, BitTorrent style: peers by address, IPv4 and IPv6
/// apart, with `X` kept per peer.
pub type BitTorrentMap<X> = TorrentMap<DualStack<X>>;

/// The torrents of one swarm worker.
#[derive(Debug)]
pub struct TorrentMap<S> {
    pub(crate) torrents: Partitions<Torrent<S>>,
    /// Hashes peer keys for the per-torrent indexes; seeded at random per map so
    /// that keys cannot be chosen to collide.
    pub(crate) peer_hasher: DefaultHashBuilder,
    peer_timeout: u32,
    pub(crate) capacity: Capacity,
    pub(crate) peers: usize,
    refusals: Refusals,
    /// The partition the next cleaning step walks.
    next_clean: usize,
    /// What the pass under way has counted so far.
    counting: Census,
    /// What the last finished pass counted.
    census: Census,
    /// Torrents started by announces, oldest first, that may give way when the map is
    /// full ([`Torrent::may_give_way`] is checked when one is taken: the others are
    /// stale entries, dropped then or when the queue is tidied).
    fresh: VecDeque<InfoHash>,
    /// Per-client allowances for new torrents, when limited.
    new_torrents: Option<NewTorrentBudgets>,
}

/// Entries of the fresh queue looked at for one torrent that may give way; past it a
/// new torrent is refused, so a queue of stale entries cannot make an announce slow.
const EVICTION_TRIES: usize = 64;

impl<S: PeerSet> TorrentMap<S> {
    /// An empty map whose peers expire `peer_timeout` seconds after their last
    /// announce, holding at most `capacity`.
    pub fn new(peer_timeout: u32, capacity: Capacity) -> Self {
        Self {
            torrents: Partitions::default(),
            peer_hasher: DefaultHashBuilder::default(),
            peer_timeout,
            capacity,
            peers: 0,
            refusals: Refusals::default(),
            next_clean: 0,
            counting: Census::default(),
            census: Census::default(),
            fresh: VecDeque::new(),
            new_torrents: None,
        }
    }

    /// Limits the torrents each client may start once the map is past half its
    /// capacity ([`NewTorrentLimit`]).
    pub fn with_new_torrent_limit(mut self, limit: NewTorrentLimit) -> Self {
        self.new_torrents = Some(NewTorrentBudgets::new(limit));
        self
    }

    /// Whether a torrent may start now for a peer at `client` (its address, when a
    /// peer key carries one): room in the map, made if needed by removing the oldest
    /// torrent that may give way, and the client's allowance once the map is past
    /// half full. Counts what it refused.
    fn may_start(
        &mut self,
        client: Option<std::net::IpAddr>,
        now: ServerTime,
    ) -> Result<(), Refused> {
        let capacity = self.capacity.torrents;
        if let (Some(budgets), Some(ip)) = (&mut self.new_torrents, client)
            && self.torrents.len() >= capacity / 2
            && !budgets.take(ip, now)
        {
            self.refusals.new_torrents += 1;
            return Err(Refused::NewTorrentsLimited);
        }
        if self.torrents.len() < capacity || self.evict_one() {
            return Ok(());
        }
        self.refusals.torrents += 1;
        Err(Refused::TorrentsFull)
    }

    /// Removes the oldest torrent started by an announce that may still give way;
    /// false when none was found within [`EVICTION_TRIES`] entries.
    fn evict_one(&mut self) -> bool {
        for _ in 0..EVICTION_TRIES {
            let Some(info_hash) = self.fresh.pop_front() else {
                return false;
            };
            let at = self.torrents.locate(&info_hash);
            if !self.torrents.get_at(&at).is_some_and(Torrent::may_give_way) {
                continue;
            }
            let torrent = self.torrents.remove_at(&at).expect("found");
            self.peers -= torrent.peers.len();
            self.refusals.evicted += 1;
            return true;
        }
        false
    }

    /// Notes a torrent just started, which may give way later. The queue is tidied
    /// when it grows past twice the torrents: entries of torrents gone or crowded
    /// since go (amortised over the starts that grew it).
    fn started(&mut self, info_hash: InfoHash) {
        self.fresh.push_back(info_hash);
        if self.fresh.len() > 2 * self.torrents.len() + 1024 {
            let torrents = &self.torrents;
            self.fresh
                .retain(|hash| torrents.get(hash).is_some_and(Torrent::may_give_way));
            self.fresh.shrink_to(2 * self.fresh.len() + 1024);
        }
    }

    /// Number of torrents.
    pub fn torrent_count(&self) -> usize {
        self.torrents.len()
    }

    /// Number of peers over all torrents and lists.
    pub fn peer_count(&self) -> usize {
        self.peers
    }

    /// Seeders, leechers and the largest swarms, as the last finished cleaning pass
    /// counted them (empty until one finished).
    pub fn census(&self) -> &Census {
        &self.census
    }

    /// What the limits refused so far.
    pub fn refusals(&self) -> Refusals {
        self.refusals
    }

    /// A torrent, for inspection.
    pub fn get(&self, info_hash: &InfoHash) -> Option<&Torrent<S>> {
        self.torrents.get(info_hash)
    }

    /// Seconds a peer lives after its last announce.
    pub fn peer_timeout(&self) -> u32 {
        self.peer_timeout
    }

    /// Sets how long peers announcing from now on live (the adaptive interval gives
    /// longer intervals under load; peers must outlive them).
    pub fn set_peer_timeout(&mut self, peer_timeout: u32) {
        self.peer_timeout = peer_timeout;
    }

    /// When a peer that announces at `now` expires.
    pub fn expiry(&self, now: ServerTime) -> ServerTime {
        now.plus(self.peer_timeout)
    }

    /// `info_hash` with its hash in this map, for [`prefetch_announce`] and
    /// [`announce_located`]: a batch hashes each info hash once.
    ///
    /// [`prefetch_announce`]: Self::prefetch_announce
    /// [`announce_located`]: Self::announce_located
    pub fn locate(&self, info_hash: &InfoHash) -> Located {
        self.torrents.locate(info_hash)
    }

    /// Starts fetching what an announce to a located torrent from the peer `key` will
    /// read, in [`PREFETCH_STEPS`] steps, so that a batch of announces waits on memory
    /// together rather than once per request.
    ///
    /// Serve a batch as: step 0 for every announce, then step 1 for every announce,
    /// and so on, then the announces themselves. Each step reads only what the step
    /// before fetched, and asks for the next level: step 0 the index slot of the
    /// torrent (its address needs no memory read), step 1 the torrent the slot names,
    /// step 2 the torrent's first peers or, in a swarm large enough to have an index,
    /// the index slot `key` is probed at, and step 3 the peer that slot names. Step 1
    /// also notes in `torrent` where the torrent is, so the steps after it and the
    /// announce check that place instead of searching the index again. Hints only:
    /// skipping a step changes nothing but speed.
    pub fn prefetch_announce<K: ListIn<S>>(&self, step: usize, torrent: &mut Located, key: &K) {
        match step {
            0 => self.torrents.prefetch_slot(torrent),
            1 => self.torrents.prefetch_value(torrent),
            _ => {
                let found = self.torrents.get_at(torrent);
                if let Some(list) = found.and_then(|t| K::list(&t.peers))
                    && let Some(position) = list.prefetch(step - 2, key, &self.peer_hasher)
                {
                    torrent.peer_hint = position as u32;
                }
            }
        }
    }

    /// The peer known by `key` in torrent `info_hash`.
    pub fn peer<K: ListIn<S>>(&self, info_hash: &InfoHash, key: &K) -> Option<&Peer<K, S::Data>> {
        let list = K::list(&self.torrents.get(info_hash)?.peers)?;
        let position = list.find(key, &self.peer_hasher)?;
        Some(&list.peers()[position])
    }

    /// The peer known by `key` in torrent `info_hash`, to change its expiry or data.
    pub fn peer_mut<K: ListIn<S>>(
        &mut self,
        info_hash: &InfoHash,
        key: &K,
    ) -> Option<&mut Peer<K, S::Data>> {
        let torrent = self.torrents.get_mut(info_hash)?;
        let list = K::list_mut(&mut torrent.peers);
        let position = list.find(key, &self.peer_hasher)?;
        Some(list.get_mut(position))
    }

    /// Records an announce and calls `emit` for each peer chosen for the reply.
    ///
    /// The peer is inserted, refreshed or, on `Stopped`, removed; `Completed` from a
    /// peer not already known as a seeder counts one download. Returns the torrent's
    /// counts after the update, including the announcer when it is stored; a new peer
    /// past a [`Capacity`] limit is sent peers but not stored. Refused (nothing changed,
    /// nobody emitted): a peer that belongs to someone else, and a new torrent when
    /// the map is full. A peer that timed out belongs to nobody: whoever announces it
    /// next takes it over. A peer others cannot reach ([`ListIn::reachable`]: port 0)
    /// is sent peers of a torrent that exists and changes nothing.
    pub fn announce<K: ListIn<S>>(
        &mut self,
        info_hash: &InfoHash,
        announce: Announce<K, S::Data>,
        now: ServerTime,
        rng: &mut impl Rng,
        emit: impl FnMut(&mut Peer<K, S::Data>),
    ) -> Result<Announced, Refused> {
        let torrent = self.locate(info_hash);
        self.announce_located(&torrent, announce, now, rng, emit)
    }

    /// [`announce`](Self::announce) to a torrent [located](Self::locate) in this map.
    pub fn announce_located<K: ListIn<S>>(
        &mut self,
        located: &Located,
        announce: Announce<K, S::Data>,
        now: ServerTime,
        rng: &mut impl Rng,
        emit: impl FnMut(&mut Peer<K, S::Data>),
    ) -> Result<Announced, Refused> {
        let hasher = &self.peer_hasher;
        if announce.event == AnnounceEvent::Stopped {
            // Leaving: never create a torrent for it, and send no peers.
            let Some(torrent) = self.torrents.get_mut_at(located) else {
                return Ok(Announced::default());
            };
            let list = K::list_mut(&mut torrent.peers);
            if let Some(position) = list.find_hinted(&announce.key, located.peer_hint(), hasher) {
                if !may_change(&list.peers()[position], &announce.extra, now) {
                    return Err(Refused::PeerTaken);
                }
                list.remove(position, hasher);
                self.peers -= 1;
            }
            return Ok(Announced {
                counts: torrent.counts(),
                stored: false,
                full: false,
                downloaded: false,
            });
        }

        if !announce.key.reachable() {
            // Listening nowhere (port 0): sent peers, never stored or handed out, and
            // no torrent is started for it.
            let Some(torrent) = self.torrents.get_mut_at(located) else {
                return Ok(Announced::default());
            };
            if K::list(&torrent.peers).is_some() {
                let seeder = announce.seeder.unwrap_or(false);
                let list = K::list_mut(&mut torrent.peers);
                list.select(None, seeder, announce.peers_wanted, now, rng, emit);
            }
            return Ok(Announced {
                counts: torrent.counts(),
                stored: false,
                full: false,
                downloaded: false,
            });
        }

        let expires = now.plus(self.peer_timeout);
        // A new torrent must be allowed (a hint makes the lookup a compare).
        let starts = self.torrents.get_at(located).is_none();
        if starts {
            self.may_start(announce.key.client(), now)?;
            self.started(*located.info_hash());
        }
        let hasher = &self.peer_hasher;
        let torrent = self
            .torrents
            .get_or_insert_at(located, true, Torrent::new)
            .expect("may insert");
        let room = self.peers < self.capacity.peers
            && torrent.peers.len() < self.capacity.peers_per_torrent;
        let list = K::list_mut(&mut torrent.peers);
        let found = list.find_hinted(&announce.key, located.peer_hint(), hasher);
        let known = found.is_some();
        let (position, seeder, was_seeder) = match found {
            Some(position) => {
                let was_seeder = list.is_seeder_at(position);
                let peer = list.get_mut(position);
                if peer.expires() > now {
                    if !peer.extra.may_change(&announce.extra) {
                        return Err(Refused::PeerTaken);
                    }
                    peer.extra.refresh(announce.extra);
                } else {
                    // Timed out, if not cleaned yet: whoever announces it now owns it.
                    peer.extra = announce.extra;
                }
                peer.set_expires(expires);
                let seeder = announce.seeder.unwrap_or(was_seeder);
                (
                    Some(list.set_seeder(position, seeder, hasher)),
                    seeder,
                    was_seeder,
                )
            }
            None if room => {
                let seeder = announce.seeder.unwrap_or(false);
                let peer = Peer::new(announce.key, expires, announce.extra);
                self.peers += 1;
                (Some(list.insert(peer, seeder, hasher)), seeder, false)
            }
            None => {
                // Full: answered, not stored; it gets in when others leave.
                self.refusals.peers += 1;
                (None, announce.seeder.unwrap_or(false), false)
            }
        };
        list.select(position, seeder, announce.peers_wanted, now, rng, emit);
        // A download is a peer seen leeching that completes: a new peer announcing
        // `completed` (fresh peer ids, or one that stopped and came back) counts none.
        let downloaded = known && announce.event == AnnounceEvent::Completed && !was_seeder;
        if downloaded {
            torrent.downloads.add(1);
        }
        if position.is_some() {
            torrent.note_crowd(announce.key.client());
        }
        Ok(Announced {
            counts: torrent.counts(),
            stored: position.is_some(),
            full: position.is_none(),
            downloaded,
        })
    }

    /// Removes the peer known by `key` from torrent `info_hash` if `by` may
    /// ([`PeerData::may_change`]; anyone may once the peer timed out at `now`); returns
    /// whether it was there and removed. An emptied torrent stays, with its downloads
    /// count, until the next cleaning.
    pub fn remove<K: ListIn<S>>(
        &mut self,
        info_hash: &InfoHash,
        key: &K,
        by: &S::Data,
        now: ServerTime,
    ) -> bool {
        let Some(torrent) = self.torrents.get_mut(info_hash) else {
            return false;
        };
        let list = K::list_mut(&mut torrent.peers);
        match list.find(key, &self.peer_hasher) {
            Some(position) if may_change(&list.peers()[position], by, now) => {
                list.remove(position, &self.peer_hasher);
                self.peers -= 1;
                true
            }
            _ => false,
        }
    }

    /// Scrape figures for one torrent; zeros for an unknown one.
    pub fn scrape(&self, info_hash: &InfoHash) -> ScrapeStats {
        self.torrents
            .get(info_hash)
            .map(Torrent::scrape_stats)
            .unwrap_or_default()
    }

    /// Scrape figures for every torrent (a "full scrape").
    pub fn scrape_all(&self) -> Vec<(InfoHash, ScrapeStats)> {
        self.torrents
            .iter()
            .map(|(hash, torrent)| (*hash, torrent.scrape_stats()))
            .collect()
    }

    /// One cleaning step: in the next of the map's [`PARTITIONS`] partitions, removes
    /// expired peers, torrents left without peers, and torrents for which
    /// `keep_torrent` says no (e.g. no longer on the access list). A pass is
    /// [`PARTITIONS`] steps; `pass_done` in the report says when one ended. Requests
    /// can be served between steps, so cleaning a big map never stalls them for long.
    pub fn clean_step(
        &mut self,
        now: ServerTime,
        mut keep_torrent: impl FnMut(&InfoHash) -> bool,
    ) -> CleanReport {
        let hasher = &self.peer_hasher;
        let counting = &mut self.counting;
        let mut report = CleanReport::default();
        self.torrents
            .retain_part(self.next_clean, |info_hash, torrent| {
                if !keep_torrent(info_hash) {
                    report.peers_removed += torrent.peers.len();
                    report.torrents_removed += 1;
                    return false;
                }
                report.peers_removed += torrent.peers.remove_expired(now, hasher);
                let keep = !torrent.peers.is_empty();
                report.torrents_removed += usize::from(!keep);
                if keep {
                    counting.count(info_hash, torrent.scrape_stats());
                }
                keep
            });
        self.peers -= report.peers_removed;
        self.next_clean = (self.next_clean + 1) % PARTITIONS;
        report.pass_done = self.next_clean == 0;
        if report.pass_done {
            self.census = std::mem::take(&mut self.counting);
        }
        report
    }

    /// A whole cleaning pass at once, [`PARTITIONS`] steps of
    /// [`clean_step`](Self::clean_step) (for tests, and maps too small to matter).
    pub fn clean(
        &mut self,
        now: ServerTime,
        mut keep_torrent: impl FnMut(&InfoHash) -> bool,
    ) -> CleanReport {
        let mut total = CleanReport {
            pass_done: true,
            ..CleanReport::default()
        };
        for _ in 0..PARTITIONS {
            let step = self.clean_step(now, &mut keep_torrent);
            total.peers_removed += step.peers_removed;
            total.torrents_removed += step.torrents_removed;
        }
        total
    }
}

/// Whether `by` may change or remove `peer` at `now`: its owner may, and anyone once
/// it timed out (a peer that stopped announcing belongs to nobody).
fn may_change<K, X: PeerData>(peer: &Peer<K, X>, by: &X, now: ServerTime) -> bool {
    peer.expires() <= now || peer.extra.may_change(by)
}

#[cfg(test)]
mod tests;
