//! Torrents kept by a socket worker itself (`swarm_workers = 0` with one socket
//! worker): no hand-off to another thread, no context switch per batch, which is the
//! fastest way to use a single core.
//!
//! The socket worker serves its requests straight from the shard and cleans it on the
//! same schedule a swarm worker would; the gauges are those of swarm worker 0.

use std::sync::Arc;

use shoal_common::{AccessControl, GaugeSlot};
use shoal_swarm::{Clock, ServerTime};

use crate::replica::ShardDuties;
use crate::shard::{CleaningSchedule, Shard, clean_some};
use crate::swarm_worker::publish;

/// A shard inside a socket worker.
#[derive(Debug)]
pub struct LocalSwarm<S> {
    shard: S,
    clock: Arc<Clock>,
    cleaning: CleaningSchedule,
    gauges: GaugeSlot,
    duties: ShardDuties,
}

impl<S: Shard> LocalSwarm<S> {
    /// `shard`, cleaned every `clean_every` seconds of `clock`, reporting to `gauges`
    /// (at once: a shard restored from a snapshot is counted before its first request).
    pub fn new(shard: S, clock: Arc<Clock>, clean_every: u32, gauges: GaugeSlot) -> Self {
        publish(&shard, &gauges);
        Self {
            cleaning: CleaningSchedule::new(clean_every, clock.now()),
            shard,
            clock,
            gauges,
            duties: ShardDuties::default(),
        }
    }

    /// Does `duties` between batches: snapshots (`[state]`), replication
    /// (`[cluster]`).
    #[must_use]
    pub fn with_duties(mut self, duties: ShardDuties) -> Self {
        self.duties = duties;
        self
    }

    /// At shutdown: saves the whole shard when snapshots are on, hands the last
    /// changes to the cluster.
    pub fn finish(&mut self) {
        self.duties.finish(&mut self.shard, self.clock.now());
    }

    /// Runs `serve` on the shard at the current time and publishes its size.
    pub fn serve<T>(&mut self, serve: impl FnOnce(&mut S, ServerTime) -> T) -> T {
        let result = serve(&mut self.shard, self.clock.now());
        publish(&self.shard, &self.gauges);
        result
    }

    /// Serves a batch as a swarm worker would, handing the replies to `reply`.
    pub fn handle(&mut self, batch: S::Batch, reply: &mut impl FnMut(usize, S::Reply)) {
        self.serve(|shard, now| shard.handle(batch, now, reply));
        self.duties.relay(&mut self.shard);
    }

    /// Cleans a slice of the shard if a pass is due, and writes a slice of a snapshot
    /// if one is; call it often (every round of a socket worker's loop, and at least
    /// every [`Shutdown::POLL_INTERVAL`](shoal_common::Shutdown::POLL_INTERVAL)).
    pub fn clean_if_due(&mut self, access: &AccessControl) {
        self.duties.step(&mut self.shard, self.clock.now());
        if clean_some(
            &mut self.shard,
            &mut self.cleaning,
            self.clock.now(),
            access,
            &self.gauges,
        ) {
            publish(&self.shard, &self.gauges);
        }
    }

    /// Hands the replies produced between batches (by messages other nodes relayed)
    /// to `reply`.
    pub fn flush_replies(&mut self, reply: &mut impl FnMut(usize, S::Reply)) {
        self.shard.flush_replies(reply);
    }

    /// Whether a cleaning pass or a snapshot is under way (its owner should come back
    /// soon).
    pub fn cleaning(&self) -> bool {
        self.cleaning.in_pass() || self.duties.busy()
    }

    /// The longest its owner may sleep: shorter while it replicates, so that other
    /// nodes' changes arrive on time.
    pub fn longest_wait(&self, otherwise: std::time::Duration) -> std::time::Duration {
        self.duties.longest_wait(otherwise)
    }
}
