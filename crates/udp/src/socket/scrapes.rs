//! Scrapes spread over several swarm workers, waiting for their parts.
//!
//! Each such scrape takes a slot holding the reply address and one entry per info hash.
//! Parts fill in their entries; the last one completes the reply. A part that never
//! comes back (its job was shed, or the swarm worker is slow) leaves the slot to be
//! expired after [`PART_TIMEOUT`]. Slots are reused; a generation number per slot makes
//! sure a late part of an expired scrape cannot fill in a newer one.

use std::net::SocketAddr;

use shoal_swarm::{ScrapeStats, ServerTime};
use shoal_udp_protocol::TransactionId;
use shoal_udp_protocol::response::{write_scrape_entry, write_scrape_header};

use crate::messages::{PositionedStats, Replies, ReplyKind, ScrapeSlot, wire_stats};

/// Seconds a scrape may wait for its parts.
pub(crate) const PART_TIMEOUT: u32 = 5;

#[derive(Debug)]
struct Pending {
    client: SocketAddr,
    transaction_id: TransactionId,
    parts_left: u32,
    started: ServerTime,
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    pending: Option<Pending>,
    /// Entries, reused across the slot's scrapes.
    stats: Vec<ScrapeStats>,
}

/// The pending scrapes of one socket worker.
#[derive(Debug)]
pub(crate) struct PendingScrapes {
    slots: Vec<Slot>,
    free: Vec<u32>,
    max: usize,
}

impl PendingScrapes {
    /// A table of at most `max` concurrent scrapes.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
            max,
        }
    }

    /// Registers a scrape of `torrents` hashes answered in `parts` parts; `None` when
    /// the table is full.
    pub(crate) fn start(
        &mut self,
        client: SocketAddr,
        transaction_id: TransactionId,
        torrents: usize,
        parts: u32,
        now: ServerTime,
    ) -> Option<ScrapeSlot> {
        let index = match self.free.pop() {
            Some(index) => index,
            None if self.slots.len() < self.max => {
                self.slots.push(Slot {
                    generation: 0,
                    pending: None,
                    stats: Vec::new(),
                });
                (self.slots.len() - 1) as u32
            }
            None => return None,
        };
        let slot = &mut self.slots[index as usize];
        slot.generation = slot.generation.wrapping_add(1);
        slot.pending = Some(Pending {
            client,
            transaction_id,
            parts_left: parts,
            started: now,
        });
        slot.stats.clear();
        slot.stats.resize(torrents, ScrapeStats::default());
        Some(ScrapeSlot {
            index,
            generation: slot.generation,
        })
    }

    /// Fills in one part; when it was the last, writes the reply into `out` and frees
    /// the slot. Parts for expired or cancelled scrapes are ignored.
    pub(crate) fn add_part(&mut self, id: ScrapeSlot, part: &[PositionedStats], out: &mut Replies) {
        let Some(slot) = self.live_slot(id) else {
            return;
        };
        for entry in part {
            if let Some(stats) = slot.stats.get_mut(usize::from(entry.position)) {
                *stats = entry.stats;
            }
        }
        let pending = slot.pending.as_mut().expect("live slot");
        pending.parts_left -= 1;
        if pending.parts_left > 0 {
            return;
        }
        write_scrape_header(&mut out.bytes, pending.transaction_id);
        for stats in &slot.stats {
            write_scrape_entry(&mut out.bytes, wire_stats(*stats));
        }
        out.finish_packet(pending.client, ReplyKind::Scrape);
        slot.pending = None;
        self.free.push(id.index);
    }

    /// Drops a scrape that cannot complete (one of its parts was shed).
    pub(crate) fn cancel(&mut self, id: ScrapeSlot) {
        if let Some(slot) = self.live_slot(id) {
            slot.pending = None;
            self.free.push(id.index);
        }
    }

    /// Drops scrapes older than [`PART_TIMEOUT`]; returns how many.
    pub(crate) fn expire(&mut self, now: ServerTime) -> usize {
        let mut expired = 0;
        for (index, slot) in self.slots.iter_mut().enumerate() {
            let stale = slot.pending.as_ref().is_some_and(|p| {
                now.seconds_since(p.started)
                    .is_some_and(|age| age > PART_TIMEOUT)
            });
            if stale {
                slot.pending = None;
                self.free.push(index as u32);
                expired += 1;
            }
        }
        expired
    }

    /// Number of scrapes waiting.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    fn live_slot(&mut self, id: ScrapeSlot) -> Option<&mut Slot> {
        self.slots
            .get_mut(id.index as usize)
            .filter(|slot| slot.generation == id.generation && slot.pending.is_some())
    }
}

#[cfg(test)]
mod tests {
    use shoal_udp_protocol::{PeerFamily, Response};

    use super::*;

    fn stats(position: u8, seeders: u32) -> PositionedStats {
        PositionedStats {
            position,
            stats: ScrapeStats {
                seeders,
                leechers: 0,
                downloads: 0,
            },
        }
    }

    fn client() -> SocketAddr {
        "127.0.0.1:1".parse().unwrap()
    }

    #[test]
    fn parts_merge_in_request_order() {
        let mut table = PendingScrapes::new(4);
        let mut out = Replies::default();
        let slot = table
            .start(client(), TransactionId(9), 3, 2, ServerTime(0))
            .unwrap();
        table.add_part(slot, &[stats(1, 11)], &mut out);
        assert!(out.packets.is_empty());
        table.add_part(slot, &[stats(2, 22), stats(0, 0)], &mut out);
        assert_eq!(out.packets.len(), 1);
        let Response::Scrape(reply) = Response::parse(&out.bytes, PeerFamily::V4).unwrap() else {
            panic!()
        };
        assert_eq!(reply.transaction_id, TransactionId(9));
        let seeders: Vec<u32> = reply.torrents.iter().map(|t| t.seeders).collect();
        assert_eq!(seeders, vec![0, 11, 22]);
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn the_table_is_bounded_and_slots_are_reused() {
        let mut table = PendingScrapes::new(1);
        let first = table
            .start(client(), TransactionId(1), 1, 2, ServerTime(0))
            .unwrap();
        assert!(
            table
                .start(client(), TransactionId(2), 1, 2, ServerTime(0))
                .is_none()
        );
        table.cancel(first);
        let second = table
            .start(client(), TransactionId(3), 1, 2, ServerTime(0))
            .unwrap();
        assert_eq!(second.index, first.index);
        assert_ne!(second.generation, first.generation);

        // A late part of the cancelled scrape does not count towards the new one.
        let mut out = Replies::default();
        table.add_part(first, &[stats(0, 5)], &mut out);
        table.add_part(second, &[stats(0, 6)], &mut out);
        assert!(
            out.packets.is_empty(),
            "the second scrape still waits for one part"
        );
    }

    #[test]
    fn stale_scrapes_expire() {
        let mut table = PendingScrapes::new(8);
        table
            .start(client(), TransactionId(1), 1, 2, ServerTime(0))
            .unwrap();
        table
            .start(client(), TransactionId(2), 1, 2, ServerTime(4))
            .unwrap();
        assert_eq!(table.expire(ServerTime(PART_TIMEOUT)), 0);
        assert_eq!(table.expire(ServerTime(PART_TIMEOUT + 1)), 1);
        assert_eq!(table.len(), 1);
    }
}
