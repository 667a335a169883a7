//! Messages for one other node: WebTorrent's offers and answers, whose peer holds its
//! connection there (documents/scale-out.md, "WebTorrent across nodes").
//!
//! Membership travels like every tracker's changes (the shared stream, read by every
//! node). Signalling cannot: an offer is for one node, needed within seconds and
//! useless after. So each node has an **inbox** stream of its own,
//! `<name>:<protocol>:inbox:<origin>`, which only it reads (with the same reader as
//! the shared stream); shard owners record messages per destination node in a
//! `RelayLog` (`shoal_swarm`, beside the changes), hand them over between batches, and the **relay writer** thread
//! appends them at once: one pipelined round trip for whatever waits, one `XADD` per
//! destination. Nothing is kept while the store is down: a lost offer costs the
//! offerer one of several, and its next announce sends new ones.
//!
//! ```text
//!  shard owner ──RelayLog──► relay writer ──XADD──► <name>:ws:inbox:<other node>
//!  shard owner ◄──entries─── reader ◄──XREAD BLOCK── <name>:ws:inbox:<this node>
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use shoal_common::{ClusterStats, Shutdown};

use shoal_swarm::Relayed;

use crate::resp::{self, Reply};
use crate::store::{Connection, StoreAddress};
use crate::{RETRY_AFTER, unix_millis};

/// The inbox of node `origin` in cluster `name`'s `protocol` tracker.
pub(crate) fn inbox_key(name: &str, protocol: &str, origin: u64) -> String {
    format!("{name}:{protocol}:inbox:{origin:016x}")
}

/// Destination inboxes written in one round trip at most; more wait for the next.
const BATCHES_PER_ROUND_TRIP: usize = 256;

/// The relay writer thread.
pub(crate) struct RelayWriter {
    pub(crate) store: StoreAddress,
    pub(crate) name: String,
    pub(crate) protocol: &'static str,
    pub(crate) origin: String,
    /// How long a message is worth delivering: entries older are trimmed, and an
    /// inbox nobody writes to expires after it.
    pub(crate) lifetime: Duration,
    pub(crate) messages: Receiver<Relayed>,
    pub(crate) stats: Arc<ClusterStats>,
    pub(crate) shutdown: Shutdown,
}

impl RelayWriter {
    pub(crate) fn run(self) {
        let mut connection: Option<Connection> = None;
        let mut retry_at = Instant::now();
        let mut outage_logged = false;
        while !self.shutdown.is_requested() {
            if connection.is_none() && Instant::now() >= retry_at {
                // Connected ahead of the first message, so that it waits for no
                // connect and `shoal_cluster_store_up` tells the truth.
                match Connection::open(&self.store) {
                    Ok(opened) => {
                        connection = Some(opened);
                        self.stats.set_up(RELAY_CONNECTION, true);
                    }
                    Err(error) => {
                        self.failed(&error, &mut outage_logged);
                        retry_at = Instant::now() + RETRY_AFTER;
                    }
                }
            }
            let first = match self.messages.recv_timeout(Shutdown::POLL_INTERVAL) {
                Ok(first) => first,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let mut batches = vec![first];
            while batches.len() < BATCHES_PER_ROUND_TRIP {
                match self.messages.try_recv() {
                    Ok(more) => batches.push(more),
                    Err(_) => break,
                }
            }
            let by_node = group_by_node(batches);
            let count: usize = by_node.values().map(|(_, count)| count).sum();
            let Some(store) = &mut connection else {
                ClusterStats::add(&self.stats.messages_dropped_store, count as u64);
                continue;
            };
            match self.send(store, &by_node) {
                Ok(bytes) => {
                    ClusterStats::add(&self.stats.messages_relayed, count as u64);
                    ClusterStats::add(&self.stats.bytes_relayed, bytes as u64);
                    if outage_logged {
                        log::info!("cluster: relaying to {} again", self.store.address);
                        outage_logged = false;
                    }
                }
                Err(error) => {
                    connection = None;
                    retry_at = Instant::now() + RETRY_AFTER;
                    ClusterStats::add(&self.stats.messages_dropped_store, count as u64);
                    self.failed(&error, &mut outage_logged);
                }
            }
        }
    }

    /// Appends each node's messages to its inbox in one round trip; returns the
    /// bytes written.
    fn send(
        &self,
        store: &mut Connection,
        by_node: &HashMap<u64, (Vec<u8>, usize)>,
    ) -> anyhow::Result<usize> {
        let now = SystemTime::now();
        let written = unix_millis(now).to_string();
        let lifetime_ms = u64::try_from(self.lifetime.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let oldest_kept = unix_millis(now).saturating_sub(lifetime_ms).to_string();
        let lifetime = lifetime_ms.to_string();
        let mut commands = Vec::new();
        let mut bytes = 0;
        for (node, (records, _)) in by_node {
            let key = inbox_key(&self.name, self.protocol, *node);
            resp::encode(
                &[
                    b"XADD",
                    key.as_bytes(),
                    b"MINID",
                    b"~",
                    oldest_kept.as_bytes(),
                    b"*",
                    b"o",
                    self.origin.as_bytes(),
                    b"t",
                    written.as_bytes(),
                    b"c",
                    records,
                ],
                &mut commands,
            );
            resp::encode(
                &[b"PEXPIRE", key.as_bytes(), lifetime.as_bytes()],
                &mut commands,
            );
            bytes += records.len();
        }
        let replies = store.pipeline(&commands, 2 * by_node.len())?;
        if let Some(error) = replies.into_iter().find_map(|reply| match reply {
            Reply::Error(message) => Some(message),
            _ => None,
        }) {
            anyhow::bail!("the store refused a relayed message: {error}");
        }
        Ok(bytes)
    }

    fn failed(&self, error: &anyhow::Error, outage_logged: &mut bool) {
        ClusterStats::add(&self.stats.store_errors, 1);
        self.stats.set_up(RELAY_CONNECTION, false);
        if !*outage_logged {
            log::warn!(
                "cluster: cannot relay messages through {}: {error:#}; offers and answers \
                 for peers on other nodes are dropped until it is back",
                self.store.address
            );
            *outage_logged = true;
        }
    }
}

/// Which bit of [`ClusterStats::set_up`] the relay writer's connection is (the inbox
/// reader's is the next).
pub(crate) const RELAY_CONNECTION: u32 = 2;

/// One record buffer per destination node.
fn group_by_node(batches: Vec<Relayed>) -> HashMap<u64, (Vec<u8>, usize)> {
    let mut by_node: HashMap<u64, (Vec<u8>, usize)> = HashMap::new();
    for batch in batches {
        let (bytes, count) = by_node.entry(batch.node).or_default();
        if bytes.is_empty() {
            *bytes = batch.bytes;
        } else {
            bytes.extend_from_slice(&batch.bytes);
        }
        *count += batch.count;
    }
    by_node
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_for_one_node_are_written_as_one_and_inboxes_are_named_by_node() {
        let grouped = group_by_node(vec![
            Relayed {
                node: 7,
                bytes: b"x".to_vec(),
                count: 1,
            },
            Relayed {
                node: 7,
                bytes: b"yz".to_vec(),
                count: 2,
            },
        ]);
        assert_eq!(grouped[&7], (b"xyz".to_vec(), 3));
        assert_eq!(
            inbox_key("shoal", "ws", 0xab),
            "shoal:ws:inbox:00000000000000ab"
        );
    }
}
