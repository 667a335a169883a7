//! The clients each user has in each torrent now: the per-user peer cap (`peers=N`)
//! and the enforced minimum interval are decided here, before an announce reaches a
//! swarm.
//!
//! A client is its peer id within a (user, torrent). One client counts once against
//! the cap however it announces: over IPv4 and IPv6, under both hashes of a hybrid
//! torrent. The minimum interval is kept per address family and info hash, since a
//! dual-stack client announces over both families, and a hybrid one under both
//! hashes, at the same moment. `started`, `completed` and `stopped` announces are
//! never too early (a client sends them when something happened).
//!
//! The table is split in [`SHARDS`] parts, each behind its own lock held for one
//! lookup; a client not heard from for the peer timeout is forgotten (on its next
//! touch of the table, or by the sweep that every announce advances a little). At
//! most [`MAX_CLIENTS`] clients are followed per (user, torrent).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use hashbrown::HashMap;

use crate::ledger::Event;
use crate::registry::{Grant, Refusal};

/// Parts of the table.
const SHARDS: usize = 256;
/// Clients followed per (user, torrent): a client that changes its peer id at every
/// announce cannot grow the table past it.
pub const MAX_CLIENTS: usize = 32;
/// Announces between two steps of the sweep (each step sweeps one part).
const SWEEP_EVERY: u64 = 1024;
/// (family, info hash) pairs remembered per client: IPv4 and IPv6, each under both
/// hashes of a hybrid torrent.
const SEEN: usize = 4;

/// One client of a (user, torrent).
#[derive(Clone, Copy, Debug)]
struct Client {
    peer_id: [u8; 20],
    /// Its last announce of any kind, for the peer timeout.
    last: u32,
    /// Its last announce per (family, info hash), for the minimum interval: the
    /// hash's first four bytes with the family in the top bit, and when.
    seen: [(u32, u32); SEEN],
}

/// One part of the table: the clients of each (user, torrent) in it.
type Part = HashMap<(u32, u32), Vec<Client>>;

/// The clients of every (user, torrent).
#[derive(Debug)]
pub struct Sessions {
    shards: Box<[Mutex<Part>]>,
    peer_timeout: u32,
    min_interval: u32,
    announces: AtomicU64,
}

impl Sessions {
    /// A table forgetting clients after `peer_timeout` seconds, refusing announces
    /// less than `min_interval` seconds apart (0: none refused).
    pub fn new(peer_timeout: u32, min_interval: u32) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            peer_timeout,
            min_interval,
            announces: AtomicU64::new(0),
        }
    }

    /// Decides an announce `grant` accepted, from `peer_id` over IPv6 when `ipv6`,
    /// for `info_hash`, at `now` (seconds of any clock the caller always uses).
    pub fn admit(
        &self,
        grant: &Grant,
        peer_id: &[u8; 20],
        info_hash: &[u8; 20],
        ipv6: bool,
        event: Event,
        now: u32,
    ) -> Result<(), Refusal> {
        self.sweep_a_little(now);
        let key = (grant.user.id, grant.torrent.id);
        let tag = u32::from_be_bytes([info_hash[0], info_hash[1], info_hash[2], info_hash[3]])
            & 0x7fff_ffff
            | u32::from(ipv6) << 31;
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        let clients = shard.entry(key).or_default();
        let timeout = self.peer_timeout;
        clients.retain(|client| now.saturating_sub(client.last) <= timeout);
        let admission = match clients.iter_mut().position(|c| c.peer_id == *peer_id) {
            Some(index) if event == Event::Stopped => {
                clients.swap_remove(index);
                Ok(())
            }
            Some(index) => {
                let client = &mut clients[index];
                let seen = client.seen.iter_mut().find(|(t, at)| *t == tag && *at != 0);
                match seen {
                    Some((_, at))
                        if event == Event::None && now.saturating_sub(*at) < self.min_interval =>
                    {
                        Err(Refusal::TooEarly)
                    }
                    Some((_, at)) => {
                        *at = now.max(1);
                        client.last = now;
                        Ok(())
                    }
                    None => {
                        client.remember(tag, now);
                        Ok(())
                    }
                }
            }
            None if event == Event::Stopped => Ok(()),
            None => {
                let cap = usize::from(grant.user.peer_cap);
                if cap > 0 && clients.len() >= cap {
                    Err(Refusal::OverCap)
                } else {
                    if clients.len() < MAX_CLIENTS {
                        let mut client = Client {
                            peer_id: *peer_id,
                            last: now,
                            seen: [(0, 0); SEEN],
                        };
                        client.remember(tag, now);
                        clients.push(client);
                    }
                    Ok(())
                }
            }
        };
        if clients.is_empty() {
            shard.remove(&key);
        }
        admission
    }

    /// Clients followed, over every (user, torrent).
    pub fn clients(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
                shard.values().map(Vec::len).sum::<usize>()
            })
            .sum()
    }

    fn shard(&self, (user, torrent): (u32, u32)) -> &Mutex<Part> {
        let mixed =
            (u64::from(user) << 32 | u64::from(torrent)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        &self.shards[(mixed >> 56) as usize % SHARDS]
    }

    /// Every [`SWEEP_EVERY`] announces, forgets the timed-out clients of one part.
    fn sweep_a_little(&self, now: u32) {
        let count = self.announces.fetch_add(1, Relaxed);
        if !count.is_multiple_of(SWEEP_EVERY) {
            return;
        }
        let part = (count / SWEEP_EVERY) as usize % SHARDS;
        let mut shard = self.shards[part].lock().unwrap_or_else(|e| e.into_inner());
        let timeout = self.peer_timeout;
        shard.retain(|_, clients| {
            clients.retain(|client| now.saturating_sub(client.last) <= timeout);
            !clients.is_empty()
        });
    }
}

impl Client {
    /// Records an announce under `tag` at `now`, over the oldest remembered one when
    /// all places are taken.
    fn remember(&mut self, tag: u32, now: u32) {
        self.last = now;
        let at = now.max(1);
        let place = self
            .seen
            .iter()
            .position(|&(_, when)| when == 0)
            .unwrap_or_else(|| {
                (0..SEEN)
                    .min_by_key(|&index| self.seen[index].1)
                    .unwrap_or_default()
            });
        self.seen[place] = (tag, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Torrent, User};

    fn grant(cap: u16) -> Grant {
        Grant {
            user: User {
                id: 17,
                can_leech: true,
                disabled: false,
                peer_cap: cap,
            },
            torrent: Torrent {
                id: 1001,
                up_factor: 100,
                down_factor: 100,
            },
        }
    }

    #[test]
    fn the_cap_counts_clients_once_however_they_announce() {
        let sessions = Sessions::new(3600, 0);
        let capped = grant(2);
        let (v1, v2) = ([1; 20], [2; 20]);
        let admit = |peer: u8, hash: &[u8; 20], ipv6: bool, event: Event, now: u32| {
            sessions.admit(&capped, &[peer; 20], hash, ipv6, event, now)
        };
        assert_eq!(admit(1, &v1, false, Event::Started, 10), Ok(()));
        // Dual-stack, and the other hash of a hybrid torrent: the same client.
        assert_eq!(admit(1, &v1, true, Event::Started, 10), Ok(()));
        assert_eq!(admit(1, &v2, false, Event::Started, 10), Ok(()));
        assert_eq!(admit(2, &v1, false, Event::Started, 11), Ok(()));
        assert_eq!(
            admit(3, &v1, false, Event::Started, 12),
            Err(Refusal::OverCap)
        );
        // One leaves: room for another.
        assert_eq!(admit(2, &v1, false, Event::Stopped, 13), Ok(()));
        assert_eq!(admit(3, &v1, false, Event::Started, 14), Ok(()));
        assert_eq!(sessions.clients(), 2);
        // Silent past the peer timeout: forgotten.
        assert_eq!(admit(4, &v1, false, Event::Started, 3700), Ok(()));
        assert_eq!(sessions.clients(), 1);
    }

    #[test]
    fn an_announce_within_the_minimum_interval_is_too_early_per_family_and_hash() {
        let sessions = Sessions::new(3600, 900);
        let open = grant(0);
        let admit = |hash: u8, ipv6: bool, event: Event, now: u32| {
            sessions.admit(&open, &[1; 20], &[hash; 20], ipv6, event, now)
        };
        assert_eq!(admit(1, false, Event::Started, 100), Ok(()));
        assert_eq!(admit(1, true, Event::Started, 100), Ok(()));
        assert_eq!(admit(2, false, Event::None, 101), Ok(()));
        assert_eq!(admit(1, false, Event::None, 500), Err(Refusal::TooEarly));
        assert_eq!(admit(1, false, Event::Completed, 500), Ok(()));
        assert_eq!(
            admit(1, false, Event::None, 1000),
            Err(Refusal::TooEarly),
            "from 500"
        );
        assert_eq!(admit(1, false, Event::None, 1400), Ok(()));
        assert_eq!(admit(1, true, Event::None, 1400), Ok(()));
    }

    #[test]
    fn uncapped_users_grow_no_list_past_its_bound_and_the_sweep_forgets() {
        let sessions = Sessions::new(60, 0);
        for peer in 0..100u8 {
            let admitted =
                sessions.admit(&grant(0), &[peer; 20], &[1; 20], false, Event::Started, 5);
            assert_eq!(admitted, Ok(()));
        }
        assert_eq!(sessions.clients(), MAX_CLIENTS);
        // Enough announces of other pairs, long after, to sweep every part.
        let other = |user: u32| Grant {
            user: User {
                id: user,
                ..grant(0).user
            },
            ..grant(0)
        };
        for n in 0..(SWEEP_EVERY * SHARDS as u64) as u32 {
            let _ = sessions.admit(
                &other(1000 + n % 7),
                &[9; 20],
                &[1; 20],
                false,
                Event::Stopped,
                1000,
            );
        }
        assert_eq!(sessions.clients(), 0);
    }
}
