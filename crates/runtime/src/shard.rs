//! What a tracker's torrents look like to the runtime.
//!
//! A tracker implements [`Shard`] for the torrents one swarm worker owns: serve a batch
//! of requests at a given time, clean, and say how big it is. The runtime does the
//! rest the same way for every tracker: the thread loop, the cleaning schedule, the
//! gauges, and sending each reply to the socket worker it belongs to.

use shoal_common::access_list::AccessSnapshot;
use shoal_swarm::{CleanReport, ServerTime};

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

    /// Drops what expired by `now` and the torrents `access` no longer allows.
    fn clean(&mut self, now: ServerTime, access: &AccessSnapshot) -> CleanReport;

    /// Torrents and peers, for the statistics.
    fn sizes(&self) -> (usize, usize);
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

/// When the next cleaning pass is due.
#[derive(Clone, Copy, Debug)]
pub struct CleaningSchedule {
    every: u32,
    next: ServerTime,
}

impl CleaningSchedule {
    /// A pass every `every` seconds, the first `every` seconds after `now`.
    pub fn new(every: u32, now: ServerTime) -> Self {
        Self {
            every,
            next: now.plus(every),
        }
    }

    /// Whether a pass is due at `now`; if so, the next one is scheduled.
    pub fn due(&mut self, now: ServerTime) -> bool {
        if now < self.next {
            return false;
        }
        self.next = now.plus(self.every);
        true
    }
}

/// Cleans `shard` at `now` against the current access list and logs what went.
pub(crate) fn clean<S: Shard>(
    shard: &mut S,
    now: ServerTime,
    access: &shoal_common::AccessControl,
) -> CleanReport {
    let report = shard.clean(now, &access.snapshot());
    let (torrents, peers) = shard.sizes();
    log::debug!(
        "cleaned {} peers and {} torrents; {torrents} torrents and {peers} peers remain",
        report.peers_removed,
        report.torrents_removed,
    );
    report
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
    fn cleaning_is_due_every_interval() {
        let mut schedule = CleaningSchedule::new(10, ServerTime(5));
        assert!(!schedule.due(ServerTime(14)));
        assert!(schedule.due(ServerTime(15)));
        assert!(!schedule.due(ServerTime(24)));
        // A late check schedules from when it ran.
        assert!(schedule.due(ServerTime(40)));
        assert!(!schedule.due(ServerTime(49)));
        assert!(schedule.due(ServerTime(50)));
    }
}
