//! The reader thread: the other nodes' entries from the stream to every shard owner.
//!
//! It follows the stream with `XREAD BLOCK` from the last entry it saw, so after an
//! outage it picks up where it stopped; its own node's entries (same origin) are
//! skipped. Each entry goes to every shard owner, which applies the changes of the
//! torrents it owns; when an owner's queue is full the reader waits (it is the only
//! one slowed, never a request).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{SendTimeoutError, Sender};
use shoal_common::{ClusterStats, Shutdown};

use crate::resp::Reply;
use crate::store::{Connection, StoreAddress};
use crate::{RETRY_AFTER, RemoteChanges, pause, unix_millis};

/// How long one `XREAD` waits for new entries: shutdown is noticed within it.
const BLOCK: Duration = Duration::from_millis(500);
/// Entries per `XREAD`.
const COUNT: &[u8] = b"32";

pub(crate) struct Reader {
    pub(crate) store: StoreAddress,
    pub(crate) key: String,
    pub(crate) origin: String,
    pub(crate) shards: Vec<Sender<Arc<RemoteChanges>>>,
    pub(crate) from: Option<SystemTime>,
    /// Whether it reads this node's inbox (relayed messages) rather than the shared
    /// stream of changes.
    pub(crate) relayed: bool,
    pub(crate) stats: Arc<ClusterStats>,
    pub(crate) shutdown: Shutdown,
}

/// One entry as read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct StreamEntry {
    pub(crate) id: Vec<u8>,
    pub(crate) origin: Vec<u8>,
    pub(crate) written_ms: u64,
    pub(crate) records: Vec<u8>,
    /// Why its fields could not be read: it is skipped (and counted), never retried,
    /// so one bad entry cannot stop the reader.
    pub(crate) refused: Option<String>,
}

impl Reader {
    pub(crate) fn run(self) {
        // Stream ids start with the store's time in milliseconds.
        let mut last_id = match self.from {
            Some(from) => format!("{}-0", unix_millis(from)),
            None => "0-0".to_string(),
        };
        let mut connection: Option<Connection> = None;
        let mut outage_logged = false;
        let block = BLOCK.as_millis().to_string();
        while !self.shutdown.is_requested() {
            let store = match &mut connection {
                Some(store) => store,
                None => match Connection::open(&self.store) {
                    Ok(opened) => connection.insert(opened),
                    Err(error) => {
                        self.failed(&error, &mut outage_logged);
                        pause(&self.shutdown, RETRY_AFTER);
                        continue;
                    }
                },
            };
            let reply = store.blocking(
                &[
                    b"XREAD",
                    b"COUNT",
                    COUNT,
                    b"BLOCK",
                    block.as_bytes(),
                    b"STREAMS",
                    self.key.as_bytes(),
                    last_id.as_bytes(),
                ],
                BLOCK,
            );
            let entries = match reply.and_then(entries_of) {
                Ok(entries) => entries,
                Err(error) => {
                    connection = None;
                    self.failed(&error, &mut outage_logged);
                    pause(&self.shutdown, RETRY_AFTER);
                    continue;
                }
            };
            self.stats.set_up(self.connection_bit(), true);
            if outage_logged {
                log::info!("cluster: reading from {} again", self.store.address);
                outage_logged = false;
            }
            for entry in entries {
                last_id = String::from_utf8_lossy(&entry.id).into_owned();
                if let Some(reason) = &entry.refused {
                    ClusterStats::add(&self.stats.entries_refused, 1);
                    log::warn!("cluster: skipped stream entry {last_id}: {reason}");
                    continue;
                }
                if entry.origin == self.origin.as_bytes() {
                    continue;
                }
                let origin = std::str::from_utf8(&entry.origin)
                    .ok()
                    .and_then(|origin| u64::from_str_radix(origin, 16).ok())
                    .filter(|origin| *origin != 0);
                let Some(origin) = origin else {
                    ClusterStats::add(&self.stats.entries_refused, 1);
                    log::warn!("cluster: skipped stream entry {last_id}: no origin");
                    continue;
                };
                self.hand_out(entry, origin);
            }
        }
    }

    /// Which connection bit of [`ClusterStats::set_up`] this reader is.
    fn connection_bit(&self) -> u32 {
        if self.relayed {
            crate::relay::RELAY_CONNECTION + 1
        } else {
            1
        }
    }

    /// Gives one entry of node `origin` to every shard owner.
    fn hand_out(&self, entry: StreamEntry, origin: u64) {
        let written = UNIX_EPOCH + Duration::from_millis(entry.written_ms);
        if !self.relayed {
            let now = unix_millis(SystemTime::now());
            self.stats.delay_ms.store(
                now.saturating_sub(entry.written_ms),
                std::sync::atomic::Ordering::Relaxed,
            );
            ClusterStats::add(&self.stats.entries_received, 1);
            ClusterStats::add(&self.stats.bytes_received, entry.records.len() as u64);
        }
        let changes = Arc::new(RemoteChanges {
            records: entry.records,
            written,
            origin,
            relayed: self.relayed,
        });
        for shard in &self.shards {
            let mut message = changes.clone();
            loop {
                match shard.send_timeout(message, Shutdown::POLL_INTERVAL) {
                    Ok(()) => break,
                    Err(SendTimeoutError::Timeout(back)) if !self.shutdown.is_requested() => {
                        message = back;
                    }
                    Err(_) => return,
                }
            }
        }
    }

    fn failed(&self, error: &anyhow::Error, outage_logged: &mut bool) {
        ClusterStats::add(&self.stats.store_errors, 1);
        self.stats.set_up(self.connection_bit(), false);
        if !*outage_logged {
            log::warn!(
                "cluster: cannot read from {}: {error:#}; serving what this node knows, \
                 retrying every second",
                self.store.address
            );
            *outage_logged = true;
        }
    }
}

/// The entries of an `XREAD` reply on one stream (none when it timed out).
pub(crate) fn entries_of(reply: Reply) -> anyhow::Result<Vec<StreamEntry>> {
    let mut entries = Vec::new();
    for stream in reply.ok()?.into_array()? {
        let mut stream = stream.into_array()?.into_iter();
        let (Some(_key), Some(items), None) = (stream.next(), stream.next(), stream.next()) else {
            anyhow::bail!("an XREAD stream that is not [key, entries]");
        };
        for item in items.into_array()? {
            let mut item = item.into_array()?.into_iter();
            let (Some(id), Some(fields), None) = (item.next(), item.next(), item.next()) else {
                anyhow::bail!("a stream entry that is not [id, fields]");
            };
            let id = id.into_bulk()?;
            entries.push(
                entry_of(id.clone(), fields).unwrap_or_else(|error| StreamEntry {
                    id,
                    origin: Vec::new(),
                    written_ms: 0,
                    records: Vec::new(),
                    refused: Some(format!("{error:#}")),
                }),
            );
        }
    }
    Ok(entries)
}

fn entry_of(id: Vec<u8>, fields: Reply) -> anyhow::Result<StreamEntry> {
    let mut entry = StreamEntry {
        id,
        origin: Vec::new(),
        written_ms: 0,
        records: Vec::new(),
        refused: None,
    };
    let mut fields = fields.into_array()?.into_iter();
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        let value = value.into_bulk()?;
        match name.into_bulk()?.as_slice() {
            b"o" => entry.origin = value,
            b"t" => {
                entry.written_ms = std::str::from_utf8(&value)
                    .ok()
                    .and_then(|text| text.parse().ok())
                    .ok_or_else(|| anyhow::anyhow!("an entry whose time is not a number"))?;
            }
            b"c" => entry.records = value,
            _ => {} // the node's name, and fields a later version may add
        }
    }
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(bytes: &[u8]) -> Reply {
        Reply::Bulk(bytes.to_vec())
    }

    #[test]
    fn an_xread_reply_gives_its_entries_in_order() {
        let entry = |id: &[u8], records: &[u8]| {
            Reply::Array(vec![
                bulk(id),
                Reply::Array(vec![
                    bulk(b"o"),
                    bulk(b"abc"),
                    bulk(b"n"),
                    bulk(b"node-a"),
                    bulk(b"t"),
                    bulk(b"1700000000123"),
                    bulk(b"c"),
                    bulk(records),
                ]),
            ])
        };
        let reply = Reply::Array(vec![Reply::Array(vec![
            bulk(b"shoal:udp:changes"),
            Reply::Array(vec![entry(b"1-0", b"xy"), entry(b"2-0", b"z")]),
        ])]);
        let entries = entries_of(reply).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].id, b"1-0");
        assert_eq!(entries[0].origin, b"abc");
        assert_eq!(entries[0].written_ms, 1_700_000_000_123);
        assert_eq!(entries[1].records, b"z");
    }

    #[test]
    fn a_timed_out_read_has_no_entries_odd_shapes_are_errors_and_bad_entries_are_marked() {
        assert!(entries_of(Reply::Nil).unwrap().is_empty());
        assert!(entries_of(Reply::Error("WRONGTYPE".into())).is_err());
        assert!(entries_of(Reply::Array(vec![Reply::Array(vec![bulk(b"k")])])).is_err());
        let bad_time = Reply::Array(vec![Reply::Array(vec![
            bulk(b"k"),
            Reply::Array(vec![Reply::Array(vec![
                bulk(b"1-0"),
                Reply::Array(vec![bulk(b"t"), bulk(b"soon")]),
            ])]),
        ])]);
        let entries = entries_of(bad_time).unwrap();
        assert_eq!(
            entries[0].id, b"1-0",
            "a bad entry keeps its id, to be skipped"
        );
        assert!(
            entries[0]
                .refused
                .as_deref()
                .unwrap()
                .contains("not a number")
        );
    }
}
