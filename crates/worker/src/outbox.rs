//! Requests on their way from one socket worker to the swarm workers.
//!
//! A socket worker routes each request by info hash ([`shard_for`]) into an open
//! batch for that swarm worker, and sends the batches when its round of work is done
//! (or a batch is full): one channel operation per batch, not per request. Sending
//! never blocks. A swarm worker whose queue is full gets nothing: the batch comes back
//! as [`Sent::Full`] and the socket worker sheds its requests (counting them, and
//! answering "busy" where the protocol can), since a socket worker that waited would
//! stop answering everyone.
//!
//! Emptied batches can be given back ([`Outboxes::recycle`]) and are reused, so a
//! tracker that sends its batches back and forth (UDP) allocates nothing per batch.

use std::hash::BuildHasher as _;
use std::sync::OnceLock;

use crossbeam_channel::{Sender, TrySendError};

/// The swarm worker that owns `info_hash`, out of `shards`.
///
/// Info hashes are chosen by clients, not only SHA-1 digests: taken as they are (their
/// first bytes modulo `shards`), an attacker could send every request to one swarm
/// worker, filling its queue (every torrent on it answered "busy") or its share of the
/// torrent limit at a fraction of the cost of the whole tracker. So they are hashed with
/// a key drawn once per process. Nothing outside the process depends on the choice:
/// a restored snapshot and other nodes' changes are split among the shards by this same
/// function when they arrive.
pub fn shard_for(info_hash: &[u8; 20], shards: usize) -> usize {
    if shards <= 1 {
        return 0;
    }
    static KEYED: OnceLock<hashbrown::DefaultHashBuilder> = OnceLock::new();
    let prefix = u64::from_le_bytes(info_hash[..8].try_into().expect("8 bytes"));
    let hash = KEYED.get_or_init(Default::default).hash_one(prefix);
    ((u128::from(hash) * shards as u128) >> 64) as usize
}

/// A scrape's info hashes grouped by the shard that keeps each ([`shard_for`]): one
/// part per shard touched, in the order the shards were first named, each part's
/// hashes in request order. The same split serves the three trackers; kept between
/// scrapes, it allocates nothing once its buffers have grown.
#[derive(Debug, Default)]
pub struct ScrapeSplit {
    /// Each hash's shard, by position in the request.
    shard_of: Vec<usize>,
    /// Positions in the request, grouped by part.
    positions: Vec<u16>,
    /// Each part's shard and where its positions end.
    parts: Vec<(usize, usize)>,
}

impl ScrapeSplit {
    /// Splits `info_hashes` (at most 65,536 of them) among `shards`.
    pub fn split<'a>(
        &mut self,
        info_hashes: impl IntoIterator<Item = &'a [u8; 20]>,
        shards: usize,
    ) {
        self.shard_of.clear();
        self.positions.clear();
        self.parts.clear();
        for info_hash in info_hashes {
            let shard = shard_for(info_hash, shards);
            self.shard_of.push(shard);
            if !self.parts.iter().any(|&(touched, _)| touched == shard) {
                self.parts.push((shard, 0));
            }
        }
        for part in &mut self.parts {
            for (position, &shard) in self.shard_of.iter().enumerate() {
                if shard == part.0 {
                    self.positions.push(position as u16);
                }
            }
            part.1 = self.positions.len();
        }
    }

    /// Shards touched by the last split.
    pub fn len(&self) -> usize {
        self.parts.len()
    }

    /// Whether the last split had no hashes.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Each part with its own copy of its items: `items` are what was split (the
    /// hashes, or anything in the same order).
    pub fn shares<'s, T: Clone>(
        &'s self,
        items: &'s [T],
    ) -> impl Iterator<Item = (usize, Vec<T>)> + 's {
        self.parts().map(move |(shard, positions)| {
            let share = positions.iter().filter_map(|&p| items.get(usize::from(p)));
            (shard, share.cloned().collect())
        })
    }

    /// Each part: the shard and the positions (in the request) of its hashes.
    pub fn parts(&self) -> impl Iterator<Item = (usize, &[u16])> {
        let mut start = 0;
        self.parts.iter().map(move |&(shard, end)| {
            let positions = &self.positions[start..end];
            start = end;
            (shard, positions)
        })
    }
}

/// A batch of requests for one swarm worker.
pub trait Batch: Send + 'static {
    /// Requests in the batch.
    fn len(&self) -> usize;
    /// Whether it has no requests.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Empties it for reuse, keeping its buffers.
    fn clear(&mut self);
}

impl<T: Send + 'static> Batch for Vec<T> {
    fn len(&self) -> usize {
        Vec::len(self)
    }

    fn clear(&mut self) {
        Vec::clear(self);
    }
}

/// What became of a batch.
#[derive(Debug)]
pub enum Sent<B> {
    /// It is on its way (or there was nothing to send).
    Sent,
    /// The swarm worker's queue is full: here it is back, to shed.
    Full(B),
}

/// A swarm worker's channel is closed: the tracker is stopping or failing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwarmWorkerGone;

impl std::fmt::Display for SwarmWorkerGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a swarm worker is gone")
    }
}

impl std::error::Error for SwarmWorkerGone {}

/// One socket worker's open batches, one per swarm worker.
#[derive(Debug)]
pub struct Outboxes<B> {
    senders: Vec<Sender<B>>,
    open: Vec<Option<B>>,
    pool: Vec<B>,
    pool_size: usize,
}

impl<B: Batch> Outboxes<B> {
    /// Outboxes to the swarm workers behind `senders`, keeping up to `pool_size`
    /// emptied batches for reuse.
    pub fn new(senders: Vec<Sender<B>>, pool_size: usize) -> Self {
        Self {
            open: senders.iter().map(|_| None).collect(),
            senders,
            pool: Vec::new(),
            pool_size,
        }
    }

    /// Number of swarm workers.
    pub fn shards(&self) -> usize {
        self.senders.len()
    }

    /// The open batch for `shard`, opened (from the pool, or by `make`) if needed.
    pub fn open(&mut self, shard: usize, make: impl FnOnce() -> B) -> &mut B {
        let pool = &mut self.pool;
        self.open[shard].get_or_insert_with(|| pool.pop().unwrap_or_else(make))
    }

    /// Whether any batch holds requests.
    pub fn has_open(&self) -> bool {
        self.open.iter().flatten().any(|batch| !batch.is_empty())
    }

    /// Sends `shard`'s open batch if it holds requests.
    pub fn send(&mut self, shard: usize) -> Result<Sent<B>, SwarmWorkerGone> {
        let Some(batch) = self.open[shard].take() else {
            return Ok(Sent::Sent);
        };
        if batch.is_empty() {
            self.open[shard] = Some(batch);
            return Ok(Sent::Sent);
        }
        match self.senders[shard].try_send(batch) {
            Ok(()) => Ok(Sent::Sent),
            Err(TrySendError::Full(batch)) => Ok(Sent::Full(batch)),
            Err(TrySendError::Disconnected(_)) => Err(SwarmWorkerGone),
        }
    }

    /// Sends every open batch; batches that found a full queue go to `shed`.
    pub fn send_all(&mut self, mut shed: impl FnMut(usize, B)) -> Result<(), SwarmWorkerGone> {
        for shard in 0..self.senders.len() {
            if let Sent::Full(batch) = self.send(shard)? {
                shed(shard, batch);
            }
        }
        Ok(())
    }

    /// Keeps an emptied batch for reuse (if the pool has room).
    pub fn recycle(&mut self, mut batch: B) {
        if self.pool.len() < self.pool_size {
            batch.clear();
            self.pool.push(batch);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(i: u32) -> [u8; 20] {
        let mut hash = [0u8; 20];
        hash[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
        hash
    }

    #[test]
    fn a_scrape_splits_into_one_part_per_shard_in_request_order() {
        let hashes: Vec<_> = (0..40).map(hash).collect();
        let mut split = ScrapeSplit::default();
        split.split(&hashes, 3);
        let parts: Vec<_> = split.parts().map(|(s, p)| (s, p.to_vec())).collect();
        // Each shard once, in the order its first hash came.
        let mut first_seen = Vec::new();
        for h in &hashes {
            let shard = shard_for(h, 3);
            if !first_seen.contains(&shard) {
                first_seen.push(shard);
            }
        }
        assert_eq!(
            parts.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            first_seen
        );
        assert_eq!(split.len(), 3);
        // Every position once, in its own shard's part, ascending within a part.
        let mut all: Vec<u16> = parts.iter().flat_map(|(_, p)| p.clone()).collect();
        for (shard, positions) in &parts {
            assert!(positions.windows(2).all(|w| w[0] < w[1]));
            assert!(
                positions
                    .iter()
                    .all(|&p| shard_for(&hashes[usize::from(p)], 3) == *shard)
            );
        }
        all.sort_unstable();
        assert_eq!(all, (0..40).collect::<Vec<u16>>());
        // Reused: the next split starts afresh.
        split.split(&hashes[..1], 3);
        assert_eq!(
            split.parts().map(|(_, p)| p.to_vec()).collect::<Vec<_>>(),
            [vec![0]]
        );
        split.split(&[], 3);
        assert!(split.is_empty());
    }

    #[test]
    fn info_hashes_spread_over_shards() {
        let mut counts = [0; 4];
        for i in 0..4000u32 {
            let mut hash = [0u8; 20];
            hash[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
            counts[shard_for(&hash, 4)] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
        assert_eq!(shard_for(&[9; 20], 1), 0);
        // Hashes an attacker picked to share their first bytes' residue (all 0 mod
        // 4 as they come) still spread.
        let mut counts = [0; 4];
        for i in 0..4000u32 {
            let mut hash = [0u8; 20];
            hash[..4].copy_from_slice(&(i * 4).to_le_bytes());
            counts[shard_for(&hash, 4)] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
        // Stable within the process: every caller agrees.
        assert_eq!(shard_for(&[7; 20], 5), shard_for(&[7; 20], 5));
    }

    #[test]
    fn batches_go_whole_and_a_full_queue_hands_them_back() {
        let (sender, receiver) = crossbeam_channel::bounded::<Vec<u32>>(1);
        let mut outboxes = Outboxes::new(vec![sender], 4);
        outboxes.open(0, Vec::new).extend([1, 2]);
        outboxes.open(0, Vec::new).push(3);
        assert!(outboxes.has_open());
        let mut shed = Vec::new();
        outboxes.send_all(|_, batch| shed.push(batch)).unwrap();
        assert_eq!(receiver.try_recv().unwrap(), vec![1, 2, 3]);
        assert!(!outboxes.has_open());

        outboxes.open(0, Vec::new).push(4);
        outboxes.send_all(|_, batch| shed.push(batch)).unwrap();
        outboxes.open(0, Vec::new).push(5);
        outboxes.send_all(|_, batch| shed.push(batch)).unwrap();
        assert_eq!(shed, vec![vec![5]], "the queue held one batch");

        drop(receiver);
        outboxes.open(0, Vec::new).push(6);
        assert_eq!(outboxes.send(0).unwrap_err(), SwarmWorkerGone);
    }

    #[test]
    fn recycled_batches_are_reused_empty() {
        let (sender, _receiver) = crossbeam_channel::bounded::<Vec<u32>>(1);
        let mut outboxes = Outboxes::new(vec![sender], 1);
        outboxes.recycle(Vec::with_capacity(100));
        outboxes.recycle(vec![1]); // over the pool size: dropped
        let batch = outboxes.open(0, Vec::new);
        assert!(batch.is_empty());
        assert!(batch.capacity() >= 100);
    }
}
