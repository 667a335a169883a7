//! The clients each user has in each torrent now: the per-user peer cap (`peers=N`),
//! the enforced minimum interval and the cap on peer lists per user are decided here,
//! before an announce reaches a swarm.
//!
//! A client is its peer id within a (user, torrent). One client counts once against
//! the cap however it announces: over IPv4 and IPv6, under both hashes of a hybrid
//! torrent. The minimum interval is kept per address family and info hash, since a
//! dual-stack client announces over both families, and a hybrid one under both
//! hashes, at the same moment. `started`, `completed` and `stopped` announces are
//! never too early (a client sends them when something happened).
//!
//! Only clients of users with a cap are followed, and every client when a minimum
//! interval is enforced; otherwise an announce passes without touching the table.
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

/// What the table needs of one announce.
#[derive(Clone, Copy, Debug)]
pub struct ClientAnnounce<'a> {
    /// The client's peer id.
    pub peer_id: &'a [u8; 20],
    /// The torrent's info hash (a hybrid torrent has two).
    pub info_hash: &'a [u8; 20],
    /// Over IPv6.
    pub ipv6: bool,
    /// What it says happened.
    pub event: Event,
    /// Whether it asks for peers (BitTorrent's `numwant`, WebTorrent's offers).
    pub wants_peers: bool,
}

/// An announce the table lets through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// Whether it may be sent peers: `false` when its user is past
    /// `private.peer_lists_per_minute` (it is served, and counted, without peers).
    pub peers: bool,
}

/// A user's allowance of peer lists: tokens, and when they were last counted.
#[derive(Clone, Copy, Debug)]
struct Allowance {
    tokens: f32,
    at: u32,
}

/// The clients of every (user, torrent).
#[derive(Debug)]
pub struct Sessions {
    shards: Box<[Mutex<Part>]>,
    peer_timeout: u32,
    min_interval: u32,
    /// Peer lists each user may fetch per minute; 0: no cap.
    peer_lists_per_minute: u32,
    /// Each capped user's allowance, in parts by user id.
    allowances: Box<[Mutex<HashMap<u32, Allowance>>]>,
    announces: AtomicU64,
}

impl Sessions {
    /// A table forgetting clients after `peer_timeout` seconds, refusing announces
    /// less than `min_interval` seconds apart (0: none refused), and sending each user
    /// at most `peer_lists_per_minute` peer lists (0: no cap; a burst of a minute's
    /// worth, then the rate).
    pub fn new(peer_timeout: u32, min_interval: u32, peer_lists_per_minute: u32) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            peer_timeout,
            min_interval,
            peer_lists_per_minute,
            allowances: (0..SHARDS).map(|_| Mutex::default()).collect(),
            announces: AtomicU64::new(0),
        }
    }

    /// Decides an announce `grant` accepted, at `now` (seconds of any clock the caller
    /// always uses).
    pub fn admit(
        &self,
        grant: &Grant,
        announce: ClientAnnounce<'_>,
        now: u32,
    ) -> Result<Admitted, Refusal> {
        self.admit_client(grant, &announce, now)?;
        let peers = !announce.wants_peers
            || announce.event == Event::Stopped
            || self.take_peer_list(grant.user.id, now);
        Ok(Admitted { peers })
    }

    /// Whether user `id` may be sent one more peer list now (and counts it).
    fn take_peer_list(&self, id: u32, now: u32) -> bool {
        let per_minute = self.peer_lists_per_minute;
        if per_minute == 0 {
            return true;
        }
        let burst = per_minute as f32;
        let part = &self.allowances[(id as usize).wrapping_mul(0x9e37_79b9) >> 24 & (SHARDS - 1)];
        let mut part = part.lock().unwrap_or_else(|e| e.into_inner());
        // Allowances back at the full burst are forgotten: nothing to remember.
        if part.len() > 4 * SHARDS {
            part.retain(|_, a| a.tokens + now.saturating_sub(a.at) as f32 * burst / 60.0 < burst);
        }
        let allowance = part.entry(id).or_insert(Allowance {
            tokens: burst,
            at: now,
        });
        let refill = now.saturating_sub(allowance.at) as f32 * burst / 60.0;
        allowance.tokens = (allowance.tokens + refill).min(burst);
        allowance.at = now;
        if allowance.tokens >= 1.0 {
            allowance.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn admit_client(
        &self,
        grant: &Grant,
        announce: &ClientAnnounce<'_>,
        now: u32,
    ) -> Result<(), Refusal> {
        // Without a cap on the user or an interval to enforce there is nothing to
        // decide: such clients are not followed at all, so a site that uses neither
        // pays nothing for them.
        if grant.user.peer_cap == 0 && self.min_interval == 0 {
            return Ok(());
        }
        let ClientAnnounce {
            peer_id,
            info_hash,
            ipv6,
            event,
            ..
        } = *announce;
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
                min_key_version: 0,
            },
            torrent: Torrent {
                id: 1001,
                up_factor: 100,
                down_factor: 100,
            },
        }
    }

    fn announce<'a>(
        peer_id: &'a [u8; 20],
        info_hash: &'a [u8; 20],
        ipv6: bool,
        event: Event,
    ) -> ClientAnnounce<'a> {
        ClientAnnounce {
            peer_id,
            info_hash,
            ipv6,
            event,
            wants_peers: true,
        }
    }

    #[test]
    fn peer_lists_per_user_are_capped_and_come_back_at_the_rate() {
        let sessions = Sessions::new(3600, 0, 60);
        let lists = |now: u32| {
            (0..100)
                .filter(|&n| {
                    let peer = [n as u8; 20];
                    let asked = announce(&peer, &[1; 20], false, Event::Started);
                    sessions.admit(&grant(0), asked, now).unwrap().peers
                })
                .count()
        };
        // A minute's worth at once, then one a second.
        assert_eq!(lists(10), 60);
        assert_eq!(lists(15), 5);
        // Announces that want none are never short of any.
        let quiet = ClientAnnounce {
            wants_peers: false,
            ..announce(&[200; 20], &[1; 20], false, Event::Started)
        };
        assert!(sessions.admit(&grant(0), quiet, 15).unwrap().peers);
        assert!(
            Sessions::new(3600, 0, 0)
                .admit(
                    &grant(0),
                    announce(&[1; 20], &[1; 20], false, Event::None),
                    1
                )
                .unwrap()
                .peers
        );
    }

    #[test]
    fn without_a_cap_or_an_interval_no_client_is_followed() {
        let sessions = Sessions::new(3600, 0, 0);
        for peer in 0..10u8 {
            let peer_id = [peer; 20];
            let started = announce(&peer_id, &[1; 20], false, Event::Started);
            assert!(sessions.admit(&grant(0), started, 5).is_ok());
        }
        assert_eq!(sessions.clients(), 0);
    }

    #[test]
    fn the_cap_counts_clients_once_however_they_announce() {
        let sessions = Sessions::new(3600, 0, 0);
        let capped = grant(2);
        let (v1, v2) = ([1; 20], [2; 20]);
        let admit = |peer: u8, hash: &[u8; 20], ipv6: bool, event: Event, now: u32| {
            sessions
                .admit(&capped, announce(&[peer; 20], hash, ipv6, event), now)
                .map(drop)
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
        let sessions = Sessions::new(3600, 900, 0);
        let open = grant(0);
        let admit = |hash: u8, ipv6: bool, event: Event, now: u32| {
            sessions
                .admit(&open, announce(&[1; 20], &[hash; 20], ipv6, event), now)
                .map(drop)
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
    fn lists_grow_no_longer_than_their_bound_and_the_sweep_forgets() {
        let sessions = Sessions::new(60, 1, 0);
        for peer in 0..100u8 {
            let peer_id = [peer; 20];
            let started = announce(&peer_id, &[1; 20], false, Event::Started);
            assert!(sessions.admit(&grant(0), started, 5).is_ok());
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
            let stopped = announce(&[9; 20], &[1; 20], false, Event::Stopped);
            let _ = sessions.admit(&other(1000 + n % 7), stopped, 1000);
        }
        assert_eq!(sessions.clients(), 0);
    }
}
