//! Stateless connection ids.
//!
//! BEP 15 makes clients fetch a connection id before announcing so that a tracker only
//! sends large replies to addresses that proved they can receive. Storing issued ids
//! would cost memory per client; instead an id carries its own proof:
//!
//! ```text
//! | issue time (u32, seconds since start) | MAC(secret, time ‖ client IP) truncated to 32 bits |
//! ```
//!
//! The MAC is SipHash-1-3 keyed with 128 random bits made at start, so nobody without
//! the key can make an id valid for an address they do not receive packets at (a forger
//! has a 2⁻³² chance per packet). Checking is a hash and a comparison.
//!
//! With `[state]` on, the key and the ids' clock are saved with the swarms
//! ([`ConnectionIds::to_bytes`]) and taken up again at the next start, moved on by the
//! time the tracker was down, so ids issued before a restart stay valid for the rest of
//! their lifetime. Without it a restart invalidates every id and clients reconnect,
//! as the BEP expects.

use std::hash::Hasher as _;
use std::net::IpAddr;

use shoal_swarm::ServerTime;
use shoal_udp_protocol::ConnectionId;
use siphasher::sip::SipHasher13;

/// Issues and checks connection ids.
#[derive(Clone, Debug)]
pub(crate) struct ConnectionIds {
    keys: (u64, u64),
    lifetime: u32,
    /// Added to the tracker's time to make the ids' time: non-zero after a restart,
    /// so the ids' clock runs on from where the previous process left it.
    offset: u32,
}

/// Bytes of [`ConnectionIds::to_bytes`].
const SAVED_LEN: usize = 20;

impl ConnectionIds {
    /// Ids valid for `lifetime` seconds, under a fresh random key.
    pub(crate) fn new(lifetime: u32) -> Self {
        Self::with_keys(rand::random(), lifetime)
    }

    /// Ids under a given key (tests).
    pub(crate) fn with_keys(keys: (u64, u64), lifetime: u32) -> Self {
        Self {
            keys,
            lifetime,
            offset: 0,
        }
    }

    /// The key and the ids' time at `now`, for a snapshot.
    pub(crate) fn to_bytes(&self, now: ServerTime) -> [u8; SAVED_LEN] {
        let mut bytes = [0; SAVED_LEN];
        bytes[..8].copy_from_slice(&self.keys.0.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.keys.1.to_le_bytes());
        bytes[16..].copy_from_slice(&now.plus(self.offset).0.to_le_bytes());
        bytes
    }

    /// The ids of a snapshot's `saved` bytes taken `age` seconds ago, going on at
    /// `now` as if the tracker had never stopped; `None` when the bytes are not such a
    /// record.
    pub(crate) fn restore(saved: &[u8], age: u32, now: ServerTime, lifetime: u32) -> Option<Self> {
        let saved: &[u8; SAVED_LEN] = saved.try_into().ok()?;
        let word = |at: usize| u64::from_le_bytes(saved[at..at + 8].try_into().expect("8 bytes"));
        let then = u32::from_le_bytes(saved[16..].try_into().expect("4 bytes"));
        Some(Self {
            keys: (word(0), word(8)),
            lifetime,
            offset: then.saturating_add(age).wrapping_sub(now.0),
        })
    }

    /// The ids' time at the tracker's `now`.
    fn id_time(&self, now: ServerTime) -> ServerTime {
        ServerTime(now.0.wrapping_add(self.offset))
    }

    /// A new id for `ip`.
    pub(crate) fn issue(&self, ip: IpAddr, now: ServerTime) -> ConnectionId {
        let now = self.id_time(now);
        ConnectionId(u64::from(now.0) << 32 | u64::from(self.mac(ip, now.0)))
    }

    /// Whether `id` was issued to `ip` by this tracker within the lifetime.
    pub(crate) fn is_valid(&self, id: ConnectionId, ip: IpAddr, now: ServerTime) -> bool {
        let now = self.id_time(now);
        let issued = (id.0 >> 32) as u32;
        let fresh = now
            .seconds_since(ServerTime(issued))
            .is_some_and(|age| age <= self.lifetime);
        fresh && id.0 as u32 == self.mac(ip, issued)
    }

    /// SipHash-1-3 of the issue time (big-endian) followed by the address's octets,
    /// truncated to 32 bits.
    fn mac(&self, ip: IpAddr, issued: u32) -> u32 {
        match ip.to_canonical() {
            IpAddr::V4(ip) => {
                let mut message = [0; 8];
                message[..4].copy_from_slice(&issued.to_be_bytes());
                message[4..].copy_from_slice(&ip.octets());
                siphash13_of_8_bytes(self.keys, u64::from_le_bytes(message)) as u32
            }
            IpAddr::V6(ip) => {
                let mut hasher = SipHasher13::new_with_keys(self.keys.0, self.keys.1);
                hasher.write(&issued.to_be_bytes());
                hasher.write(&ip.octets());
                hasher.finish() as u32
            }
        }
    }
}

/// SipHash-1-3 under `keys` of a message of exactly 8 bytes, given as the
/// little-endian word they make: the same value `SipHasher13` gives, without its
/// streaming buffer. An IPv4 client's id is such a message, and checking one is part
/// of every announce (the streaming hasher was 0.7% of shoal_udp's samples under
/// load, documents/benchmarks/floor-2026-11-23.md).
fn siphash13_of_8_bytes(keys: (u64, u64), message: u64) -> u64 {
    let mut v = [
        keys.0 ^ 0x736f_6d65_7073_6575,
        keys.1 ^ 0x646f_7261_6e64_6f6d,
        keys.0 ^ 0x6c79_6765_6e65_7261,
        keys.1 ^ 0x7465_6462_7974_6573,
    ];
    // The message's one block, then the last block: nothing left over, and the
    // length (8) in the top byte.
    for block in [message, 8 << 56] {
        v[3] ^= block;
        sip_round(&mut v);
        v[0] ^= block;
    }
    v[2] ^= 0xff;
    for _ in 0..3 {
        sip_round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_id_is_valid_for_its_address_within_the_lifetime() {
        let ids = ConnectionIds::with_keys((1, 2), 120);
        let id = ids.issue(ip("192.0.2.1"), ServerTime(1000));
        assert!(ids.is_valid(id, ip("192.0.2.1"), ServerTime(1000)));
        assert!(ids.is_valid(id, ip("192.0.2.1"), ServerTime(1120)));
        assert!(
            !ids.is_valid(id, ip("192.0.2.1"), ServerTime(1121)),
            "expired"
        );
        assert!(
            !ids.is_valid(id, ip("192.0.2.2"), ServerTime(1000)),
            "other address"
        );
        assert!(
            !ids.is_valid(id, ip("192.0.2.1"), ServerTime(999)),
            "issued in the future"
        );
    }

    #[test]
    fn ids_from_another_key_or_forged_times_are_rejected() {
        let ids = ConnectionIds::with_keys((1, 2), 120);
        let other = ConnectionIds::with_keys((3, 4), 120);
        let id = other.issue(ip("::1"), ServerTime(5));
        assert!(!ids.is_valid(id, ip("::1"), ServerTime(5)));

        let genuine = ids.issue(ip("::1"), ServerTime(5));
        let retimed = ConnectionId(genuine.0 + (1 << 32));
        assert!(
            !ids.is_valid(retimed, ip("::1"), ServerTime(6)),
            "time is covered by the MAC"
        );
        assert!(!ids.is_valid(ConnectionId(0), ip("::1"), ServerTime(0)));
    }

    #[test]
    fn ids_stay_valid_across_a_restart_for_the_rest_of_their_lifetime() {
        let before = ConnectionIds::with_keys((1, 2), 120);
        let id = before.issue(ip("192.0.2.1"), ServerTime(1000));
        let saved = before.to_bytes(ServerTime(1030));
        // The new process's clock starts at 0; it was down for 20 s.
        let after = ConnectionIds::restore(&saved, 20, ServerTime(0), 120).unwrap();
        assert!(after.is_valid(id, ip("192.0.2.1"), ServerTime(0)));
        assert!(
            after.is_valid(id, ip("192.0.2.1"), ServerTime(70)),
            "120 s after issue"
        );
        assert!(
            !after.is_valid(id, ip("192.0.2.1"), ServerTime(71)),
            "expired"
        );
        assert!(!after.is_valid(id, ip("192.0.2.2"), ServerTime(0)));
        // Ids it issues are its own, and valid.
        let new = after.issue(ip("::1"), ServerTime(5));
        assert!(after.is_valid(new, ip("::1"), ServerTime(5)));
        // Down longer than the lifetime: the old id is gone, not revived.
        let late = ConnectionIds::restore(&saved, 200, ServerTime(0), 120).unwrap();
        assert!(!late.is_valid(id, ip("192.0.2.1"), ServerTime(0)));
        assert!(ConnectionIds::restore(&saved[..19], 0, ServerTime(0), 120).is_none());
    }

    #[test]
    fn the_ipv4_mac_is_siphash_1_3_as_before() {
        // Ids issued before an upgrade must stay valid after it (warm restart): the
        // unrolled hash gives what the streaming one gave.
        let mut state = 0x1234_5678_9abc_def0_u64;
        let mut next = || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state
        };
        for _ in 0..10_000 {
            let (keys, issued, ip) = ((next(), next()), next() as u32, next() as u32);
            let mut hasher = SipHasher13::new_with_keys(keys.0, keys.1);
            hasher.write(&issued.to_be_bytes());
            hasher.write(&ip.to_be_bytes());
            let ids = ConnectionIds::with_keys(keys, 120);
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(ip));
            assert_eq!(ids.mac(ip, issued), hasher.finish() as u32);
        }
    }

    #[test]
    fn mapped_ipv4_addresses_are_the_same_client() {
        let ids = ConnectionIds::with_keys((1, 2), 120);
        let id = ids.issue(ip("192.0.2.1"), ServerTime(7));
        assert!(ids.is_valid(id, ip("::ffff:192.0.2.1"), ServerTime(7)));
    }
}
