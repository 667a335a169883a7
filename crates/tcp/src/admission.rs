//! Whether a new connection, and a TLS handshake, is let in, and at whose expense:
//! the accept path's rules, apart from the sockets so that they are unit-tested like
//! [`eviction`](crate::eviction).
//!
//! No slot can be held: a client over its request rate (or banned) is closed
//! without a word; a client (or its network) at its connection limit is refused
//! before anything else happens, so that it cannot make another connection give way
//! and then be refused anyway; a full worker lets the connection quiet the longest
//! give way to the newcomer, and refuses only when every connection is busy. TLS
//! handshakes are capped per client and per worker; past the worker's cap the oldest
//! handshake gives way. Every count is held by a guard: whatever ends a connection
//! (its end, an error, a panic unwinding its task), the counts come back.

use std::cell::{Cell, RefCell};
use std::net::IpAddr;
use std::sync::Arc;

use hashbrown::HashMap;
use shoal_worker::{ClientKey, ConnectionSlot, ConnectionsPerIp, OverLimit, Verdict};

use crate::eviction::{EvictionOrder, Place};

/// One socket worker's connections and handshakes, as admission counts them.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    /// Connections open.
    open: Cell<usize>,
    /// Connections that may give way to a newcomer when the worker is full, quiet the
    /// longest first.
    quiet: EvictionOrder,
    /// TLS handshakes under way, oldest first.
    handshakes: EvictionOrder,
    /// TLS handshakes under way per client (no entry: none).
    handshakes_per_client: RefCell<HashMap<ClientKey, u32>>,
}

/// Why a connection was not let in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its client is over its request rate, or banned: closed without a word (the
    /// verdict was counted by whoever gave it).
    Rate(Verdict),
    /// Its client or network has as many connections open as it may.
    PerClient(OverLimit),
    /// The worker is full and every connection is busy.
    Full,
}

/// A connection let in.
#[derive(Debug)]
pub(crate) struct Admitted<'a> {
    /// Whether a quiet connection was told to give way for it.
    pub(crate) evicted: bool,
    /// Its place among the connections that may give way (touched while it works,
    /// given up while it is busy).
    pub(crate) place: Place<'a>,
    /// Its counts, given back when this is dropped.
    pub(crate) held: Held<'a>,
}

/// What an open connection counts against: its client's slot and the worker's open
/// count.
#[derive(Debug)]
pub(crate) struct Held<'a> {
    _slot: Option<ConnectionSlot>,
    _open: OpenCount<'a>,
}

/// The worker's limits, as admission needs them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_connections: usize,
    pub(crate) max_tls_handshakes: usize,
    pub(crate) max_tls_handshakes_per_client: usize,
}

/// A handshake under way: counted against its client and the worker until dropped.
#[derive(Debug)]
pub(crate) struct Handshake<'a> {
    /// Whether the worker's oldest handshake was told to give way for it.
    pub(crate) evicted: bool,
    /// Its place among the handshakes under way.
    pub(crate) place: Place<'a>,
    _counted: Option<HandshakeCount<'a>>,
}

impl Admission {
    /// Connections open now.
    pub(crate) fn open(&self) -> usize {
        self.open.get()
    }

    /// A place among the connections that may give way to a newcomer.
    pub(crate) fn quiet_place(&self) -> Place<'_> {
        self.quiet.enter()
    }

    /// Decides on a connection from `ip`: `rate` is asked for its client's verdict
    /// unless `exempt` (a trusted proxy: neither its rate nor its connections per
    /// client are counted; the worker's limit still holds).
    pub(crate) fn admit(
        &self,
        ip: IpAddr,
        exempt: bool,
        limits: Limits,
        rate: impl FnOnce(IpAddr) -> Verdict,
        per_ip: &Arc<ConnectionsPerIp>,
    ) -> Result<Admitted<'_>, Refused> {
        if !exempt {
            let verdict = rate(ip);
            if verdict != Verdict::Allow {
                return Err(Refused::Rate(verdict));
            }
        }
        // The client's (and its network's) own limit first: a client at it must not
        // make another connection give way and then be refused anyway.
        let slot = if exempt {
            None
        } else {
            Some(per_ip.open(ip).map_err(Refused::PerClient)?)
        };
        let mut evicted = false;
        if self.open.get() >= limits.max_connections {
            if !self.quiet.evict_oldest() {
                return Err(Refused::Full);
            }
            evicted = true;
        }
        self.open.set(self.open.get() + 1);
        Ok(Admitted {
            evicted,
            place: self.quiet.enter(),
            held: Held {
                _slot: slot,
                _open: OpenCount(&self.open),
            },
        })
    }

    /// Decides on a TLS handshake from the client `key`: `None` when the client has
    /// `max_tls_handshakes_per_client` under way (`exempt`: never counted); at
    /// `max_tls_handshakes` under way the oldest is told to give way.
    pub(crate) fn start_handshake(
        &self,
        key: ClientKey,
        exempt: bool,
        limits: Limits,
    ) -> Option<Handshake<'_>> {
        let counted = if exempt {
            None
        } else {
            Some(HandshakeCount::open(
                &self.handshakes_per_client,
                key,
                limits.max_tls_handshakes_per_client,
            )?)
        };
        let evicted =
            self.handshakes.len() >= limits.max_tls_handshakes && self.handshakes.evict_oldest();
        Some(Handshake {
            evicted,
            place: self.handshakes.enter(),
            _counted: counted,
        })
    }

    /// Handshakes under way now, and the clients they come from.
    #[cfg(test)]
    fn handshakes(&self) -> (usize, usize) {
        (
            self.handshakes.len(),
            self.handshakes_per_client.borrow().len(),
        )
    }
}

/// One open connection counted; dropping it uncounts it.
#[derive(Debug)]
struct OpenCount<'a>(&'a Cell<usize>);

impl Drop for OpenCount<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get().saturating_sub(1));
    }
}

/// One TLS handshake under way counted against its client; dropping it uncounts it.
#[derive(Debug)]
struct HandshakeCount<'a> {
    counts: &'a RefCell<HashMap<ClientKey, u32>>,
    key: ClientKey,
}

impl<'a> HandshakeCount<'a> {
    /// Counts a handshake of `key`, or `None` when it has `limit` under way.
    fn open(
        counts: &'a RefCell<HashMap<ClientKey, u32>>,
        key: ClientKey,
        limit: usize,
    ) -> Option<Self> {
        let mut map = counts.borrow_mut();
        let count = map.entry(key).or_insert(0);
        if *count as usize >= limit {
            if *count == 0 {
                map.remove(&key);
            }
            return None;
        }
        *count += 1;
        Some(Self { counts, key })
    }
}

impl Drop for HandshakeCount<'_> {
    fn drop(&mut self) {
        let mut counts = self.counts.borrow_mut();
        if let Some(count) = counts.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_common::PerIpConfig;

    const LIMITS: Limits = Limits {
        max_connections: 2,
        max_tls_handshakes: 2,
        max_tls_handshakes_per_client: 1,
    };

    fn per_ip(max_connections: usize) -> Arc<ConnectionsPerIp> {
        ConnectionsPerIp::new(&PerIpConfig {
            max_connections,
            max_connections_per_network: max_connections * 4,
            ..PerIpConfig::default()
        })
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, last])
    }

    fn allow(_: IpAddr) -> Verdict {
        Verdict::Allow
    }

    #[test]
    fn a_client_over_its_rate_takes_nothing() {
        let admission = Admission::default();
        let table = per_ip(1);
        for verdict in [Verdict::Limited, Verdict::Banned, Verdict::NewBan] {
            let refused = admission.admit(ip(1), false, LIMITS, |_| verdict, &table);
            assert_eq!(refused.err(), Some(Refused::Rate(verdict)));
        }
        assert_eq!(admission.open(), 0);
        // Its connection slot is still free.
        assert!(admission.admit(ip(1), false, LIMITS, allow, &table).is_ok());
    }

    #[test]
    fn a_client_at_its_limit_is_refused_before_anyone_gives_way() {
        let admission = Admission::default();
        let table = per_ip(1);
        let quiet = admission
            .admit(ip(1), false, LIMITS, allow, &table)
            .unwrap();
        let _second = admission
            .admit(ip(2), false, LIMITS, allow, &table)
            .unwrap();
        // Full, and client 1 at its limit: refused for its limit, nobody evicted.
        let refused = admission.admit(ip(1), false, LIMITS, allow, &table);
        assert_eq!(refused.err(), Some(Refused::PerClient(OverLimit::Client)));
        assert!(!quiet.place.is_evicted());
        assert_eq!(admission.open(), 2);
    }

    #[test]
    fn a_full_worker_lets_the_quietest_give_way_and_refuses_when_all_are_busy() {
        let admission = Admission::default();
        let table = per_ip(4);
        let mut first = admission
            .admit(ip(1), false, LIMITS, allow, &table)
            .unwrap();
        let second = admission
            .admit(ip(2), false, LIMITS, allow, &table)
            .unwrap();
        first.place.touch();
        let third = admission
            .admit(ip(3), false, LIMITS, allow, &table)
            .unwrap();
        assert!(third.evicted);
        assert!(
            second.place.is_evicted(),
            "the one quiet the longest gives way"
        );
        assert!(!first.place.is_evicted());
        // The evicted connection closes; its count goes with it.
        drop(second);
        assert_eq!(admission.open(), 2);
        // Nobody left that may give way (their places are gone: busy).
        let Admitted { place, .. } = first;
        drop(place);
        let Admitted { place, .. } = third;
        drop(place);
        let refused = admission.admit(ip(4), false, LIMITS, allow, &table);
        assert_eq!(refused.err(), Some(Refused::Full));
    }

    #[test]
    fn an_exempt_proxy_skips_its_rate_and_client_limit_but_not_the_worker_s() {
        let admission = Admission::default();
        let table = per_ip(1);
        let never_asked =
            |_: IpAddr| -> Verdict { panic!("an exempt client's rate is not counted") };
        let a = admission
            .admit(ip(9), true, LIMITS, never_asked, &table)
            .unwrap();
        let b = admission
            .admit(ip(9), true, LIMITS, never_asked, &table)
            .unwrap();
        let Admitted { place, .. } = a;
        drop(place);
        let Admitted { place, .. } = b;
        drop(place);
        let refused = admission.admit(ip(9), true, LIMITS, never_asked, &table);
        assert_eq!(refused.err(), Some(Refused::Full));
    }

    #[test]
    fn counts_come_back_however_a_connection_ends() {
        let admission = Admission::default();
        let table = per_ip(1);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _admitted = admission
                .admit(ip(1), false, LIMITS, allow, &table)
                .unwrap();
            panic!("the connection's task panics");
        }));
        assert!(result.is_err());
        assert_eq!(admission.open(), 0);
        assert!(
            admission.admit(ip(1), false, LIMITS, allow, &table).is_ok(),
            "the client's slot came back too"
        );
    }

    #[test]
    fn handshakes_are_capped_per_client_and_the_oldest_gives_way_past_the_worker_s_cap() {
        let admission = Admission::default();
        let config = PerIpConfig::default();
        let key = |last| ClientKey::new(ip(last), &config);
        let first = admission.start_handshake(key(1), false, LIMITS).unwrap();
        assert!(
            admission.start_handshake(key(1), false, LIMITS).is_none(),
            "one per client under way"
        );
        let second = admission.start_handshake(key(2), false, LIMITS).unwrap();
        assert!(!first.evicted && !second.evicted);
        let third = admission.start_handshake(key(3), false, LIMITS).unwrap();
        assert!(third.evicted);
        assert!(first.place.is_evicted(), "the oldest gives way");
        // The evicted one leaves the order at once; its client's count goes when its
        // connection ends.
        assert_eq!(admission.handshakes(), (2, 3));
        drop((first, second, third));
        assert_eq!(admission.handshakes(), (0, 0), "no count is left behind");
        // An exempt proxy is never counted per client.
        let exempt: Vec<_> = (0..3)
            .map(|_| admission.start_handshake(key(9), true, LIMITS).unwrap())
            .collect();
        assert_eq!(
            admission.handshakes(),
            (2, 0),
            "the worker's cap still holds"
        );
        assert!(exempt[0].place.is_evicted());
    }
}
