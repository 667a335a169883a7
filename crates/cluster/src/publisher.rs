//! The publisher thread: this node's changes into the stream, one entry per interval.
//!
//! Changes from every shard owner are gathered into entries of at most
//! [`ENTRY_LIMIT`] bytes, sealed with the time they were sealed, and sent with one
//! pipelined round trip per interval: an `XADD` per entry (trimming what is older
//! than a peer can live) and one `PEXPIRE`. While the store cannot be reached, sealed
//! entries wait in a backlog bounded by `[cluster] backlog`; the oldest go first when
//! it overflows, each one counted.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use shoal_common::{ClusterStats, LogBudget, Shutdown, left_out};

use crate::resp::{self, Reply};
use crate::store::{Connection, StoreAddress};
use crate::{Changes, RETRY_AFTER, unix_millis};

/// The most bytes of changes in one stream entry: small enough that a shard owner
/// applies one in a fraction of a millisecond.
pub(crate) const ENTRY_LIMIT: usize = 64 << 10;
/// How long the publisher waits at shutdown for the shard owners' last changes.
const FINAL_HAND_OVER: Duration = Duration::from_millis(500);
/// The most entries sent in one round trip.
const ENTRIES_PER_ROUND_TRIP: usize = 64;

pub(crate) struct Publisher {
    pub(crate) store: StoreAddress,
    pub(crate) key: String,
    pub(crate) origin: String,
    pub(crate) node: String,
    pub(crate) retention: Duration,
    pub(crate) interval: Duration,
    pub(crate) backlog_limit: usize,
    pub(crate) changes: Receiver<Changes>,
    pub(crate) stats: Arc<ClusterStats>,
    pub(crate) shutdown: Shutdown,
}

/// A sealed entry.
struct Entry {
    bytes: Vec<u8>,
    changes: usize,
    written: SystemTime,
}

/// Entries waiting for the store, oldest first.
struct Backlog {
    entries: VecDeque<Entry>,
    bytes: usize,
    /// Drops are logged a few at first, then once a minute (they come every seal
    /// while the store stays down).
    drops_logged: LogBudget,
}

impl Default for Backlog {
    fn default() -> Self {
        Self {
            entries: VecDeque::new(),
            bytes: 0,
            drops_logged: LogBudget::new(3, Duration::from_secs(60)),
        }
    }
}

impl Publisher {
    pub(crate) fn run(self) {
        let mut open = Entry {
            bytes: Vec::new(),
            changes: 0,
            written: SystemTime::now(),
        };
        let mut backlog = Backlog::default();
        let mut connection: Option<Connection> = None;
        let mut retry_at = Instant::now();
        let mut next_flush = Instant::now() + self.interval;
        let mut outage_logged = false;
        let mut owners_gone = false;
        loop {
            let stopping = self.shutdown.is_requested() || owners_gone;
            if stopping {
                // What the shard owners hand over as they stop: wait for all of them
                // to let go of their ends (or a little while), then publish it.
                let until = Instant::now() + FINAL_HAND_OVER;
                while let Ok(changes) = self
                    .changes
                    .recv_timeout(until.saturating_duration_since(Instant::now()))
                {
                    self.add(&mut open, &mut backlog, changes);
                }
            } else {
                let wait = next_flush.saturating_duration_since(Instant::now());
                match self.changes.recv_timeout(wait.min(Shutdown::POLL_INTERVAL)) {
                    Ok(changes) => {
                        self.add(&mut open, &mut backlog, changes);
                        // Take what else waits, without waiting: the flush below must
                        // come on time however steadily changes arrive.
                        while let Ok(changes) = self.changes.try_recv() {
                            self.add(&mut open, &mut backlog, changes);
                        }
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => owners_gone = true,
                }
                if Instant::now() < next_flush && !owners_gone {
                    continue;
                }
            }
            next_flush = Instant::now() + self.interval;
            self.seal(&mut open, &mut backlog);
            let may_try = connection.is_some() || Instant::now() >= retry_at || stopping;
            // Connect even with nothing to send, so that an idle node's
            // `shoal_cluster_store_up` tells the truth.
            let work = !backlog.entries.is_empty() || (connection.is_none() && !stopping);
            if work && may_try {
                match self.send(&mut connection, &mut backlog) {
                    Ok(()) if outage_logged => {
                        log::info!("cluster: publishing to {} again", self.store.address);
                        outage_logged = false;
                    }
                    Ok(()) => {}
                    Err(error) => {
                        connection = None;
                        retry_at = Instant::now() + RETRY_AFTER;
                        ClusterStats::add(&self.stats.store_errors, 1);
                        self.stats.set_up(0, false);
                        if !outage_logged {
                            log::warn!(
                                "cluster: cannot publish to {}: {error:#}; serving on, keeping \
                                 changes (up to {} bytes) until it is back",
                                self.store.address,
                                self.backlog_limit
                            );
                            outage_logged = true;
                        }
                    }
                }
            }
            if stopping {
                let unsent: usize = backlog.entries.iter().map(|entry| entry.changes).sum();
                if unsent > 0 {
                    log::warn!("cluster: {unsent} changes not published at shutdown");
                }
                return;
            }
        }
    }

    /// Adds changes to the open entry, sealing it first when they would not fit.
    fn add(&self, open: &mut Entry, backlog: &mut Backlog, changes: Changes) {
        if !open.bytes.is_empty() && open.bytes.len() + changes.bytes.len() > ENTRY_LIMIT {
            self.seal(open, backlog);
        }
        open.bytes.extend_from_slice(&changes.bytes);
        open.changes += changes.count;
    }

    /// Moves the open entry into the backlog, dropping the oldest entries past the
    /// limit.
    fn seal(&self, open: &mut Entry, backlog: &mut Backlog) {
        if open.bytes.is_empty() {
            return;
        }
        let entry = Entry {
            bytes: std::mem::take(&mut open.bytes),
            changes: std::mem::take(&mut open.changes),
            written: SystemTime::now(),
        };
        backlog.bytes += entry.bytes.len();
        backlog.entries.push_back(entry);
        let mut dropped = 0;
        while backlog.bytes > self.backlog_limit {
            let Some(oldest) = backlog.entries.pop_front() else {
                break;
            };
            backlog.bytes -= oldest.bytes.len();
            dropped += oldest.changes;
            ClusterStats::add(&self.stats.changes_dropped_backlog, oldest.changes as u64);
        }
        if dropped > 0
            && let Some(unlogged) = backlog.drops_logged.take(std::time::Instant::now())
        {
            log::warn!(
                "cluster: the backlog kept while the store is unreachable passed {} bytes: dropped its oldest {dropped} changes (other nodes miss those peers until they announce again){}",
                self.backlog_limit,
                left_out(unlogged),
            );
        }
        self.stats
            .backlog_bytes
            .store(backlog.bytes as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sends the backlog, a round trip per [`ENTRIES_PER_ROUND_TRIP`] entries.
    fn send(
        &self,
        connection: &mut Option<Connection>,
        backlog: &mut Backlog,
    ) -> anyhow::Result<()> {
        let store = match connection {
            Some(store) => store,
            None => {
                let opened = Connection::open(&self.store)?;
                self.stats.set_up(0, true);
                connection.insert(opened)
            }
        };
        while !backlog.entries.is_empty() {
            let count = backlog.entries.len().min(ENTRIES_PER_ROUND_TRIP);
            let mut commands = Vec::new();
            let oldest_kept = unix_millis(SystemTime::now())
                .saturating_sub(u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX))
                .to_string();
            for entry in backlog.entries.iter().take(count) {
                let written = unix_millis(entry.written).to_string();
                resp::encode(
                    &[
                        b"XADD",
                        self.key.as_bytes(),
                        b"MINID",
                        b"~",
                        oldest_kept.as_bytes(),
                        b"*",
                        b"o",
                        self.origin.as_bytes(),
                        b"n",
                        self.node.as_bytes(),
                        b"t",
                        written.as_bytes(),
                        b"c",
                        &entry.bytes,
                    ],
                    &mut commands,
                );
            }
            let retention = self.retention.as_millis().max(1).to_string();
            resp::encode(
                &[b"PEXPIRE", self.key.as_bytes(), retention.as_bytes()],
                &mut commands,
            );
            let replies = store.pipeline(&commands, count + 1)?;
            if let Some(error) = replies.into_iter().find_map(|reply| match reply {
                Reply::Error(message) => Some(message),
                _ => None,
            }) {
                anyhow::bail!("the store refused a change entry: {error}");
            }
            for entry in backlog.entries.drain(..count) {
                backlog.bytes -= entry.bytes.len();
                ClusterStats::add(&self.stats.changes_published, entry.changes as u64);
                ClusterStats::add(&self.stats.bytes_published, entry.bytes.len() as u64);
            }
            self.stats
                .backlog_bytes
                .store(backlog.bytes as u64, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }
}
