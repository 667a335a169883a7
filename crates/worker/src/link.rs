//! A socket worker's way to the torrents: batches for the swarm workers, or the shard
//! it keeps itself (`swarm_workers = 0`).
//!
//! The TCP trackers' routers hold one: requests of one round of the event loop go
//! into per-swarm-worker batches, the first request of a round asks for a flush (the
//! router schedules it after the tasks ready now), and the flush sends each batch with
//! one channel operation. Batches that meet a full queue come back to the router,
//! which answers "busy" (and counts them shed here) or keeps what must not be lost.

use crossbeam_channel::Sender;
use shoal_common::AccessControl;

use crate::{Batch, LocalSwarm, Outboxes, Sent, Shard};

/// Batches towards the swarm workers, or the local shard.
#[derive(Debug)]
pub struct SwarmLink<S: Shard> {
    outboxes: Outboxes<S::Batch>,
    local: Option<LocalSwarm<S>>,
    flush_scheduled: bool,
    shed: u64,
}

impl<S: Shard> SwarmLink<S>
where
    S::Batch: Batch + Default,
{
    /// Batches for `swarms`, or, when `local` is given, the shard kept here.
    pub fn new(swarms: Vec<Sender<S::Batch>>, local: Option<LocalSwarm<S>>) -> Self {
        Self {
            outboxes: Outboxes::new(swarms, 0),
            local,
            flush_scheduled: false,
            shed: 0,
        }
    }

    /// Number of shards requests are routed over (1 when the torrents are kept here).
    pub fn shards(&self) -> usize {
        if self.local.is_some() {
            1
        } else {
            self.outboxes.shards()
        }
    }

    /// The shard kept here, if this worker keeps the torrents.
    pub fn local(&mut self) -> Option<&mut LocalSwarm<S>> {
        self.local.as_mut()
    }

    /// The open batch for swarm worker `shard`.
    pub fn batch(&mut self, shard: usize) -> &mut S::Batch {
        self.outboxes.open(shard, S::Batch::default)
    }

    /// Notes that a batch holds requests; returns whether the caller must schedule a
    /// [`flush`](Self::flush) (it is the first request since the last one).
    pub fn needs_flush(&mut self) -> bool {
        !std::mem::replace(&mut self.flush_scheduled, true)
    }

    /// Sends every open batch; returns those whose swarm worker's queue was full. A
    /// swarm worker that is gone takes its batch along: the tracker is stopping.
    pub fn flush(&mut self) -> Vec<(usize, S::Batch)> {
        self.flush_scheduled = false;
        let mut full = Vec::new();
        for shard in 0..self.outboxes.shards() {
            if let Ok(Sent::Full(batch)) = self.outboxes.send(shard) {
                full.push((shard, batch));
            }
        }
        full
    }

    /// Whether requests wait in a batch (put back after a full queue).
    pub fn has_waiting(&self) -> bool {
        self.outboxes.has_open()
    }

    /// Counts `requests` shed.
    pub fn count_shed(&mut self, requests: usize) {
        self.shed += requests as u64;
    }

    /// Cleans the local shard if due, and returns the requests shed since the last
    /// call; a socket worker's regular tick.
    pub fn tick(&mut self, access: &AccessControl) -> u64 {
        if let Some(local) = &mut self.local {
            local.clean_if_due(access);
        }
        std::mem::take(&mut self.shed)
    }
}
