//! State per client (an IPv4 address or an IPv6 network) in a fixed amount of memory:
//! what the request rates and bans of a socket worker, and the new-torrent budgets of
//! a shard, are kept in.
//!
//! Clients are chosen by whoever sends (a UDP source can be forged at will), so the
//! table never grows: a client's slot is found by a keyed hash of its address prefix
//! and a short probe, and a newcomer that finds no free slot takes the one idle the
//! longest among those that may be forgotten ([`ClientState::may_forget`]: a banned
//! client may not, while there is another choice). The worst a flood of sources can
//! do is make the table forget a client that sent nothing lately, which gives it a
//! fresh allowance.

use std::hash::BuildHasher;
use std::net::IpAddr;

use hashbrown::DefaultHashBuilder;

use crate::time::ServerTime;

/// Slots probed for one client.
const PROBE: usize = 4;

/// A client: an IPv4 address or IPv6 network, as the bits of its prefix in an IPv6
/// address (IPv4 in the IPv4-mapped range, which no canonical IPv6 address is in).
pub fn client_key(ip: IpAddr, ipv4_prefix_len: u8, ipv6_prefix_len: u8) -> u128 {
    match ip.to_canonical() {
        IpAddr::V4(ip) => {
            let bits = u32::from(ip) & prefix_mask_32(ipv4_prefix_len);
            u128::from(std::net::Ipv4Addr::from(bits).to_ipv6_mapped())
        }
        IpAddr::V6(ip) => u128::from(ip) & prefix_mask_128(ipv6_prefix_len),
    }
}

fn prefix_mask_32(len: u8) -> u32 {
    match len {
        0 => 0,
        len => u32::MAX << (32 - u32::from(len.min(32))),
    }
}

fn prefix_mask_128(len: u8) -> u128 {
    match len {
        0 => 0,
        len => u128::MAX << (128 - u32::from(len.min(128))),
    }
}

/// What a table keeps per client.
pub trait ClientState: Copy + Default {
    /// Whether the client's slot may be given to a newcomer at `now` (a ban must
    /// outlive a flood of sources; an allowance may be forgotten).
    fn may_forget(&self, now: ServerTime) -> bool {
        let _ = now;
        true
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot<V> {
    key: u128,
    used: bool,
    /// When the client was last seen.
    seen: ServerTime,
    state: V,
}

/// Per-client state `V` in a fixed number of slots.
#[derive(Debug)]
pub struct ClientTable<V> {
    slots: Box<[Slot<V>]>,
    hasher: DefaultHashBuilder,
}

impl<V: ClientState> ClientTable<V> {
    /// A table of `size` slots (rounded up to a power of two, at least the probe).
    pub fn new(size: usize) -> Self {
        let size = size.max(PROBE).next_power_of_two();
        Self {
            slots: vec![Slot::default(); size].into_boxed_slice(),
            hasher: DefaultHashBuilder::default(),
        }
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The state of client `key`, if the table knows it.
    pub fn find(&self, key: u128) -> Option<&V> {
        let start = self.probe(key);
        (0..PROBE)
            .map(|i| &self.slots[(start + i) & (self.slots.len() - 1)])
            .find(|slot| slot.used && slot.key == key)
            .map(|slot| &slot.state)
    }

    /// The state of client `key` seen at `now`: its own, or a fresh one made by
    /// `fresh` in the slot of the client idle the longest that may be forgotten.
    pub fn entry(&mut self, key: u128, now: ServerTime, fresh: impl FnOnce() -> V) -> &mut V {
        let mask = self.slots.len() - 1;
        let start = self.probe(key);
        let mut victim = start;
        for i in 0..PROBE {
            let at = (start + i) & mask;
            let slot = &self.slots[at];
            if slot.used && slot.key == key {
                let slot = &mut self.slots[at];
                slot.seen = now;
                return &mut slot.state;
            }
            if worse_victim(&self.slots[victim], slot, now) {
                victim = at;
            }
        }
        self.slots[victim] = Slot {
            key,
            used: true,
            seen: now,
            state: fresh(),
        };
        &mut self.slots[victim].state
    }

    fn probe(&self, key: u128) -> usize {
        self.hasher.hash_one(key) as usize & (self.slots.len() - 1)
    }
}

/// Whether `candidate` is a better slot to give away than `current`: free slots first,
/// then those that may be forgotten, then the longest idle.
fn worse_victim<V: ClientState>(current: &Slot<V>, candidate: &Slot<V>, now: ServerTime) -> bool {
    let rank = |slot: &Slot<V>| (slot.used, !slot.state.may_forget(now), slot.seen);
    rank(candidate) < rank(current)
}

/// A token bucket: `per_second` tokens a second, up to `burst`. Time is whole
/// [`ServerTime`] seconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bucket {
    tokens: u32,
    refilled: ServerTime,
}

impl Bucket {
    /// A full bucket of `burst` at `now`.
    pub fn full(burst: u32, now: ServerTime) -> Self {
        Self {
            tokens: burst,
            refilled: now,
        }
    }

    /// Refills for the seconds since the last refill, then takes one token if there
    /// is one.
    pub fn take(&mut self, per_second: u32, burst: u32, now: ServerTime) -> bool {
        let elapsed = now.seconds_since(self.refilled).unwrap_or(0);
        if elapsed > 0 {
            self.tokens = self
                .tokens
                .saturating_add(elapsed.saturating_mul(per_second))
                .min(burst);
            self.refilled = now;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }

    /// Returns a token taken for something that did not happen after all.
    pub fn give_back(&mut self, burst: u32) {
        self.tokens = self.tokens.saturating_add(1).min(burst);
    }
}

impl ClientState for Bucket {}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[derive(Clone, Copy, Debug, Default)]
    struct Kept(bool);

    impl ClientState for Kept {
        fn may_forget(&self, _: ServerTime) -> bool {
            !self.0
        }
    }

    #[test]
    fn keys_are_prefixes() {
        assert_eq!(
            client_key(ip("192.0.2.1"), 24, 64),
            client_key(ip("192.0.2.200"), 24, 64)
        );
        assert_ne!(
            client_key(ip("192.0.2.1"), 32, 64),
            client_key(ip("192.0.2.2"), 32, 64)
        );
        assert_eq!(
            client_key(ip("2001:db8:1:2::1"), 32, 48),
            client_key(ip("2001:db8:1:3::1"), 32, 48)
        );
        assert_eq!(
            client_key(ip("::ffff:192.0.2.1"), 32, 64),
            client_key(ip("192.0.2.1"), 32, 64),
            "mapped IPv4 is IPv4"
        );
    }

    #[test]
    fn a_flood_of_clients_cannot_grow_the_table_or_push_out_what_must_stay() {
        let mut table = ClientTable::<Kept>::new(64);
        let kept = client_key(ip("203.0.113.66"), 32, 64);
        *table.entry(kept, ServerTime(0), Kept::default) = Kept(true);
        for n in 0..100_000u32 {
            let source = client_key(IpAddr::from(std::net::Ipv4Addr::from(n)), 32, 64);
            table.entry(source, ServerTime(1), Kept::default);
        }
        assert_eq!(table.slots(), 64);
        assert!(table.find(kept).is_some_and(|state| state.0));
    }

    #[test]
    fn a_bucket_gives_its_burst_then_its_rate() {
        let mut bucket = Bucket::full(5, ServerTime(0));
        let taken = (0..10).filter(|_| bucket.take(2, 5, ServerTime(0))).count();
        assert_eq!(taken, 5);
        let taken = (0..10).filter(|_| bucket.take(2, 5, ServerTime(1))).count();
        assert_eq!(taken, 2);
        let taken = (0..10)
            .filter(|_| bucket.take(2, 5, ServerTime(100)))
            .count();
        assert_eq!(taken, 5, "never more than the burst");
    }
}
