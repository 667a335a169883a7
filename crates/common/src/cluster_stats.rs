//! What a tracker's cluster threads count (`[cluster]`): shared by the threads that
//! talk to the store and the shard owners, read by the monitoring endpoint.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::observe::{Observation, Observe};

/// Counters and gauges of one tracker's replication; all zero, and not shown, while
/// clustering is off.
#[derive(Debug, Default)]
pub struct ClusterStats {
    enabled: AtomicBool,
    /// Changes written to the store.
    pub changes_published: AtomicU64,
    /// Bytes of changes written to the store.
    pub bytes_published: AtomicU64,
    /// Changes a shard owner could not hand to the publisher (its queue was full).
    pub changes_dropped_queue: AtomicU64,
    /// Changes dropped from the backlog while the store was unreachable.
    pub changes_dropped_backlog: AtomicU64,
    /// Bytes of changes waiting for the store.
    pub backlog_bytes: AtomicU64,
    /// Stream entries read from other nodes.
    pub entries_received: AtomicU64,
    /// Bytes of changes read from other nodes.
    pub bytes_received: AtomicU64,
    /// Peers added, refreshed or removed by other nodes' changes.
    pub peers_applied: AtomicU64,
    /// Entries that could not be read (damaged, or from an incompatible version).
    pub entries_refused: AtomicU64,
    /// Failed connections and commands.
    pub store_errors: AtomicU64,
    /// Offers and answers written to other nodes' inboxes (WebTorrent).
    pub messages_relayed: AtomicU64,
    /// Bytes of those.
    pub bytes_relayed: AtomicU64,
    /// Offers and answers read from this node's inbox.
    pub messages_received: AtomicU64,
    /// Messages for other nodes dropped: the store was unreachable.
    pub messages_dropped_store: AtomicU64,
    /// Messages for other nodes dropped: the relay writer's queue was full.
    pub messages_dropped_queue: AtomicU64,
    /// Messages from other nodes not delivered: the peer, or its connection, was gone.
    pub messages_undeliverable: AtomicU64,
    /// One bit per connection to the store that works now (see [`set_up`](Self::set_up)).
    store_up: AtomicU64,
    /// The bits of `store_up` that must all be set for the store to count as up: the
    /// publisher's and the reader's, and the relay's two when messages are relayed.
    connections: AtomicU64,
    /// Milliseconds from the newest entry read being written by its node to being
    /// read here.
    pub delay_ms: AtomicU64,
}

/// A copy of [`ClusterStats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterTotals {
    /// See [`ClusterStats::changes_published`].
    pub changes_published: u64,
    /// See [`ClusterStats::bytes_published`].
    pub bytes_published: u64,
    /// See [`ClusterStats::changes_dropped_queue`].
    pub changes_dropped_queue: u64,
    /// See [`ClusterStats::changes_dropped_backlog`].
    pub changes_dropped_backlog: u64,
    /// See [`ClusterStats::backlog_bytes`].
    pub backlog_bytes: u64,
    /// See [`ClusterStats::entries_received`].
    pub entries_received: u64,
    /// See [`ClusterStats::bytes_received`].
    pub bytes_received: u64,
    /// See [`ClusterStats::peers_applied`].
    pub peers_applied: u64,
    /// See [`ClusterStats::entries_refused`].
    pub entries_refused: u64,
    /// See [`ClusterStats::store_errors`].
    pub store_errors: u64,
    /// See [`ClusterStats::messages_relayed`].
    pub messages_relayed: u64,
    /// See [`ClusterStats::bytes_relayed`].
    pub bytes_relayed: u64,
    /// See [`ClusterStats::messages_received`].
    pub messages_received: u64,
    /// See [`ClusterStats::messages_dropped_store`].
    pub messages_dropped_store: u64,
    /// See [`ClusterStats::messages_dropped_queue`].
    pub messages_dropped_queue: u64,
    /// See [`ClusterStats::messages_undeliverable`].
    pub messages_undeliverable: u64,
    /// 1 while every connection to the store works.
    pub store_up: u64,
    /// See [`ClusterStats::delay_ms`].
    pub delay_ms: u64,
}

impl ClusterStats {
    /// Marks clustering on, so that the statistics show it, with `connections` to
    /// the store (bits of [`set_up`](Self::set_up)) that must work for it to count as up.
    pub fn enable(&self, connections: u64) {
        self.connections.store(connections, Relaxed);
        self.enabled.store(true, Relaxed);
    }

    /// Records whether connection `which` (0: publishing, 1: reading the shared
    /// stream, 2: relaying, 3: reading the inbox) works.
    pub fn set_up(&self, which: u32, up: bool) {
        if up {
            self.store_up.fetch_or(1 << which, Relaxed);
        } else {
            self.store_up.fetch_and(!(1 << which), Relaxed);
        }
    }

    /// Adds `value` to `counter`.
    pub fn add(counter: &AtomicU64, value: u64) {
        counter.fetch_add(value, Relaxed);
    }

    /// The values now; `None` while clustering is off.
    pub fn totals(&self) -> Option<ClusterTotals> {
        if !self.enabled.load(Relaxed) {
            return None;
        }
        let get = |value: &AtomicU64| value.load(Relaxed);
        Some(ClusterTotals {
            changes_published: get(&self.changes_published),
            bytes_published: get(&self.bytes_published),
            changes_dropped_queue: get(&self.changes_dropped_queue),
            changes_dropped_backlog: get(&self.changes_dropped_backlog),
            backlog_bytes: get(&self.backlog_bytes),
            entries_received: get(&self.entries_received),
            bytes_received: get(&self.bytes_received),
            peers_applied: get(&self.peers_applied),
            entries_refused: get(&self.entries_refused),
            store_errors: get(&self.store_errors),
            messages_relayed: get(&self.messages_relayed),
            bytes_relayed: get(&self.bytes_relayed),
            messages_received: get(&self.messages_received),
            messages_dropped_store: get(&self.messages_dropped_store),
            messages_dropped_queue: get(&self.messages_dropped_queue),
            messages_undeliverable: get(&self.messages_undeliverable),
            store_up: u64::from({
                let needed = get(&self.connections);
                get(&self.store_up) & needed == needed
            }),
            delay_ms: get(&self.delay_ms),
        })
    }
}

impl Observe for ClusterTotals {
    fn observe(&self, out: &mut Observation) {
        out.counter(
            "shoal_cluster_published_changes",
            "Peer changes this node wrote to the cluster store.",
            &[],
            self.changes_published,
        );
        out.counter(
            "shoal_cluster_published_bytes",
            "Bytes of peer changes this node wrote to the cluster store.",
            &[],
            self.bytes_published,
        );
        for (reason, value) in [
            ("queue_full", self.changes_dropped_queue),
            ("backlog_full", self.changes_dropped_backlog),
        ] {
            out.counter(
                "shoal_cluster_dropped_changes",
                "Peer changes never published: the publisher's queue was full, or the backlog kept while the store was down overflowed.",
                &[("reason", reason)],
                value,
            );
        }
        out.gauge(
            "shoal_cluster_backlog_bytes",
            "Bytes of peer changes waiting for the cluster store.",
            &[],
            self.backlog_bytes as f64,
        );
        out.counter(
            "shoal_cluster_received_entries",
            "Stream entries of other nodes' changes read from the cluster store.",
            &[],
            self.entries_received,
        );
        out.counter(
            "shoal_cluster_received_bytes",
            "Bytes of other nodes' changes read from the cluster store.",
            &[],
            self.bytes_received,
        );
        out.counter(
            "shoal_cluster_applied_peers",
            "Peers added, refreshed or removed here by other nodes' changes.",
            &[],
            self.peers_applied,
        );
        out.counter(
            "shoal_cluster_refused_entries",
            "Stream entries that could not be read (damaged, or from another version).",
            &[],
            self.entries_refused,
        );
        out.counter(
            "shoal_cluster_store_errors",
            "Failed connections to, and commands on, the cluster store.",
            &[],
            self.store_errors,
        );
        for (direction, value) in [
            ("sent", self.messages_relayed),
            ("received", self.messages_received),
        ] {
            out.counter(
                "shoal_cluster_relayed_messages",
                "WebTorrent offers and answers for peers on other nodes, written to their inboxes (sent) or read from this node's (received).",
                &[("direction", direction)],
                value,
            );
        }
        out.counter(
            "shoal_cluster_relayed_bytes",
            "Bytes of offers and answers written to other nodes' inboxes.",
            &[],
            self.bytes_relayed,
        );
        for (reason, value) in [
            ("store_down", self.messages_dropped_store),
            ("queue_full", self.messages_dropped_queue),
            ("gone", self.messages_undeliverable),
        ] {
            out.counter(
                "shoal_cluster_dropped_messages",
                "Offers and answers between nodes not delivered: the store was unreachable, the relay's queue was full, or the peer or its connection was gone.",
                &[("reason", reason)],
                value,
            );
        }
        out.gauge(
            "shoal_cluster_store_up",
            "1 while every connection of this node to the cluster store works (publishing and reading; relaying too for WebTorrent).",
            &[],
            self.store_up as f64,
        );
        out.gauge(
            "shoal_cluster_delay_seconds",
            "Age of the newest change read from another node when it was read: the replication delay.",
            &[],
            self.delay_ms as f64 / 1e3,
        );
    }
}
