//! What a tracker's torrents look like to the worker core.
//!
//! A tracker implements [`Shard`] for the torrents one swarm worker owns: serve a batch
//! of requests at a given time, clean, and say how big it is. The worker core does the
//! rest the same way for every tracker: the thread loop, the cleaning schedule, the
//! gauges, and sending each reply to the socket worker it belongs to.

use std::time::{Duration, Instant};

use shoal_swarm::RelayLog;

use shoal_common::{AccessView, GaugeSlot, LargeSwarm, ShardStatus};
use shoal_swarm::{
    BitTorrentMap, Census, ChangeLog, CleanReport, InfoHash, PeerSet, RecordError, Replicated,
    ServerTime, SnapshotData, TorrentMap,
};

/// The torrents of one swarm worker and how to serve requests on them.
pub trait Shard: Send + 'static {
    /// What a socket worker sends in one channel message.
    type Batch: Send + 'static;
    /// What goes back to one socket worker in one channel message.
    type Reply: Send + 'static;

    /// Serves `batch` at `now`. Each reply goes to `reply(socket_worker, reply)`; a
    /// shard that answers requests one by one groups them first ([`ByWorker`]), so
    /// each socket worker gets one message per batch.
    fn handle(
        &mut self,
        batch: Self::Batch,
        now: ServerTime,
        reply: &mut impl FnMut(usize, Self::Reply),
    );

    /// One cleaning step ([`TorrentMap::clean_step`](shoal_swarm::TorrentMap::clean_step)):
    /// drops what expired by `now` and the torrents `access` no longer allows in the
    /// next part of the map; the report says when a pass is done.
    fn clean(&mut self, now: ServerTime, access: &AccessView) -> CleanReport;

    /// Size and refusals, for the statistics ([`status_of`] makes it from a map).
    fn status(&self) -> ShardStatus;

    /// What the last cleaning pass counted ([`TorrentMap::census`]).
    fn census(&self) -> &Census;

    /// Appends the snapshot records of partition `part` at `now`
    /// ([`TorrentMap::write_partition`]); a shard whose peers cannot outlive the
    /// process (WebTorrent's) writes nothing.
    fn snapshot_partition(&self, part: usize, now: ServerTime, out: &mut Vec<u8>) {
        let _ = (part, now, out);
    }

    /// The changes its announces recorded for other nodes (`[cluster]`); `None` for a
    /// shard that records none (clustering off, or WebTorrent's).
    fn change_log(&mut self) -> Option<&mut ChangeLog> {
        None
    }

    /// Applies node `origin`'s changes to the torrents `mine` accepts
    /// ([`TorrentMap::apply_changes`]), written `elapsed` seconds ago.
    fn apply_changes(
        &mut self,
        records: &[u8],
        elapsed: u32,
        origin: u64,
        now: ServerTime,
        mine: &mut dyn FnMut(&InfoHash) -> bool,
    ) -> Result<Replicated, RecordError> {
        let _ = (records, elapsed, origin, now, mine);
        Ok(Replicated::default())
    }

    /// The messages for peers on other nodes its requests produced (WebTorrent's
    /// offers and answers, `[cluster]`); `None` for a shard that relays none.
    fn relay_log(&mut self) -> Option<&mut RelayLog> {
        None
    }

    /// Takes in messages node `origin` relayed to this node for the torrents `mine`
    /// accepts; what they produce for this node's connections waits for
    /// [`flush_replies`](Self::flush_replies).
    fn apply_relayed(
        &mut self,
        records: &[u8],
        origin: u64,
        now: ServerTime,
        mine: &mut dyn FnMut(&InfoHash) -> bool,
    ) -> Result<Delivered, String> {
        let _ = (records, origin, now, mine);
        Ok(Delivered::default())
    }

    /// Sends the replies produced outside [`handle`](Self::handle) (by relayed
    /// messages) to their socket workers.
    fn flush_replies(&mut self, reply: &mut impl FnMut(usize, Self::Reply)) {
        let _ = reply;
    }
}

/// What applying relayed messages did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delivered {
    /// Messages handed to a connection of this node.
    pub delivered: usize,
    /// Messages whose peer, or its connection, was gone.
    pub undeliverable: usize,
}

/// A shard whose torrents are a [`BitTorrentMap`] (UDP's and HTTP's): it says how to
/// serve a batch and where its map and change log are, and [`Shard`] comes from that
/// once, for both trackers.
pub trait BitTorrentShard: Send + 'static {
    /// What a socket worker sends in one channel message.
    type Batch: Send + 'static;
    /// What goes back to one socket worker in one channel message.
    type Reply: Send + 'static;
    /// What each peer keeps besides its address.
    type Extra: SnapshotData;

    /// Serves `batch` at `now` ([`Shard::handle`]).
    fn handle(
        &mut self,
        batch: Self::Batch,
        now: ServerTime,
        reply: &mut impl FnMut(usize, Self::Reply),
    );

    /// The torrents.
    fn torrents(&self) -> &BitTorrentMap<Self::Extra>;

    /// The torrents, to change.
    fn torrents_mut(&mut self) -> &mut BitTorrentMap<Self::Extra>;

    /// The changes recorded for other nodes, when the swarms are shared.
    fn changes(&mut self) -> Option<&mut ChangeLog>;
}

impl<T: BitTorrentShard> Shard for T {
    type Batch = T::Batch;
    type Reply = T::Reply;

    fn handle(
        &mut self,
        batch: T::Batch,
        now: ServerTime,
        reply: &mut impl FnMut(usize, T::Reply),
    ) {
        BitTorrentShard::handle(self, batch, now, reply);
    }

    fn clean(&mut self, now: ServerTime, access: &AccessView) -> CleanReport {
        self.torrents_mut()
            .clean_step(now, |info_hash| access.allows(info_hash))
    }

    fn status(&self) -> ShardStatus {
        status_of(self.torrents())
    }

    fn census(&self) -> &Census {
        self.torrents().census()
    }

    fn snapshot_partition(&self, part: usize, now: ServerTime, out: &mut Vec<u8>) {
        self.torrents().write_partition(part, now, out);
    }

    fn change_log(&mut self) -> Option<&mut ChangeLog> {
        self.changes()
    }

    fn apply_changes(
        &mut self,
        records: &[u8],
        elapsed: u32,
        _origin: u64,
        now: ServerTime,
        mine: &mut dyn FnMut(&InfoHash) -> bool,
    ) -> Result<Replicated, RecordError> {
        self.torrents_mut()
            .apply_changes(records, elapsed, now, mine)
    }
}

/// The status of a shard that keeps its torrents in `map`.
pub fn status_of<S: PeerSet>(map: &TorrentMap<S>) -> ShardStatus {
    let refusals = map.refusals();
    ShardStatus {
        torrents: map.torrent_count() as u64,
        peers: map.peer_count() as u64,
        torrents_refused: refusals.torrents,
        peers_refused: refusals.peers,
        new_torrents_refused: refusals.new_torrents,
        torrents_evicted: refusals.evicted,
        seeders: map.census().seeders,
        leechers: map.census().leechers,
    }
}

/// The largest swarms of a census, as the statistics keep them.
fn largest_of(census: &Census) -> Vec<LargeSwarm> {
    census
        .largest
        .iter()
        .map(|swarm| LargeSwarm {
            info_hash: swarm.info_hash,
            seeders: swarm.stats.seeders,
            leechers: swarm.stats.leechers,
            downloads: swarm.stats.downloads,
        })
        .collect()
}

/// Items grouped by the socket worker they go to: the replies a shard collects while
/// it serves one batch, sent as one message per socket worker afterwards.
#[derive(Debug)]
pub struct ByWorker<T> {
    groups: Vec<Vec<T>>,
}

impl<T> Default for ByWorker<T> {
    fn default() -> Self {
        Self { groups: Vec::new() }
    }
}

impl<T> ByWorker<T> {
    /// Adds `item` for `worker`.
    pub fn push(&mut self, worker: usize, item: T) {
        if worker >= self.groups.len() {
            self.groups.resize_with(worker + 1, Vec::new);
        }
        self.groups[worker].push(item);
    }

    /// Hands every non-empty group to `send`, leaving all groups empty.
    pub fn send_all(&mut self, send: &mut impl FnMut(usize, Vec<T>)) {
        for (worker, group) in self.groups.iter_mut().enumerate() {
            if !group.is_empty() {
                send(worker, std::mem::take(group));
            }
        }
    }
}

/// When cleaning passes start, and how far the current one got.
///
/// A pass starts every `every` seconds and goes a step at a time; whoever owns the
/// shard calls `clean_some` between batches of requests, so a big map is cleaned in
/// slices of at most `CLEANING_SLICE` and requests never wait for a whole pass.
#[derive(Clone, Copy, Debug)]
pub struct CleaningSchedule {
    every: u32,
    next: ServerTime,
    in_pass: bool,
    /// What the current pass removed so far.
    removed: CleanReport,
}

/// The longest a cleaning slice runs before requests are served again.
/// At 100 µs (a few partition steps) a request that arrives during a slice waits about
/// as long as for a batch of other requests; at 1 ms the slice was the p99.9 latency
/// (documents/benchmarks/cleaning-2026-11-23.md).
pub(crate) const CLEANING_SLICE: Duration = Duration::from_micros(100);

impl CleaningSchedule {
    /// A pass every `every` seconds, the first `every` seconds after `now`.
    pub fn new(every: u32, now: ServerTime) -> Self {
        Self {
            every,
            next: now.plus(every),
            in_pass: false,
            removed: CleanReport::default(),
        }
    }

    /// Whether a pass is under way (its owner should not sleep long).
    pub fn in_pass(&self) -> bool {
        self.in_pass
    }

    /// Whether cleaning is due at `now`: a pass under way, or one that starts now.
    pub fn due(&mut self, now: ServerTime) -> bool {
        if !self.in_pass && now >= self.next {
            self.in_pass = true;
            self.next = now.plus(self.every);
        }
        self.in_pass
    }
}

/// Cleans `shard` for at most [`CLEANING_SLICE`] if cleaning is due at `now`; returns
/// whether it did any. At the end of a pass, the largest swarms go to `gauges`.
pub(crate) fn clean_some<S: Shard>(
    shard: &mut S,
    schedule: &mut CleaningSchedule,
    now: ServerTime,
    access: &shoal_common::AccessControl,
    gauges: &GaugeSlot,
) -> bool {
    if !schedule.due(now) {
        return false;
    }
    let access = access.view();
    let started = Instant::now();
    loop {
        let step = shard.clean(now, &access);
        schedule.removed.peers_removed += step.peers_removed;
        schedule.removed.torrents_removed += step.torrents_removed;
        if step.pass_done {
            let ShardStatus {
                torrents, peers, ..
            } = shard.status();
            log::debug!(
                "cleaned {} peers and {} torrents; {torrents} torrents and {peers} peers remain",
                schedule.removed.peers_removed,
                schedule.removed.torrents_removed,
            );
            schedule.removed = CleanReport::default();
            schedule.in_pass = false;
            gauges.publish_largest(largest_of(shard.census()));
            return true;
        }
        if started.elapsed() >= CLEANING_SLICE {
            return true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_go_out_once_each_and_empty_ones_not_at_all() {
        let mut groups = ByWorker::default();
        groups.push(2, 'a');
        groups.push(0, 'b');
        groups.push(2, 'c');
        let mut sent = Vec::new();
        groups.send_all(&mut |worker, items| sent.push((worker, items)));
        assert_eq!(sent, vec![(0, vec!['b']), (2, vec!['a', 'c'])]);
        groups.send_all(&mut |_, _| panic!("nothing left to send"));
    }

    #[test]
    fn a_pass_starts_every_interval_and_lasts_until_it_is_done() {
        let mut schedule = CleaningSchedule::new(10, ServerTime(5));
        assert!(!schedule.due(ServerTime(14)));
        assert!(schedule.due(ServerTime(15)));
        assert!(schedule.due(ServerTime(16)), "still in the pass");
        schedule.in_pass = false;
        assert!(!schedule.due(ServerTime(24)));
        // A late start schedules the next from when it started.
        assert!(schedule.due(ServerTime(40)));
        schedule.in_pass = false;
        assert!(!schedule.due(ServerTime(49)));
        assert!(schedule.due(ServerTime(50)));
    }
}
