//! Per-client limits: a request rate per IP address (or IPv6 network), and temporary
//! bans for sustained abuse.
//!
//! Only traffic whose source is proven may be counted here: a UDP request carrying a
//! connection id issued to its address, or a TCP connection (its handshake proved
//! the address). A UDP source can be forged at will, so counting a connect or a bad
//! connection id against the address it claims would let anyone get any client (a
//! whole IPv6 /64, a CGNAT pool) limited or banned for a few kilobytes of forged
//! packets. Callers check that first; this table cannot tell.
//!
//! Each socket worker keeps a [`RateTable`] in a fixed number of slots
//! ([`ClientTable`]), so its memory never grows whatever sources send; a banned client
//! keeps its slot while there is another to give away.
//!
//! Requests are allowed by a token bucket per client: `requests_per_second` tokens a
//! second, up to `burst`. Every second a client spends over its rate is a strike; a
//! second within its rate clears them; `ban_after` strikes ban it for `ban_duration`
//! seconds. Time is [`ServerTime`] seconds, read once per batch by the caller.

use std::hash::BuildHasher;
use std::net::IpAddr;

use hashbrown::DefaultHashBuilder;
use shoal_common::{LogBudget, PerIpConfig, left_out};
use shoal_swarm::ServerTime;
use shoal_swarm::{Bucket, ClientState, ClientTable, client_key};

/// New bans a socket worker logs in a row before the rest are only counted.
pub(crate) const BAN_LOG_BURST: u32 = 20;
/// How often one more ban is logged once [`BAN_LOG_BURST`] are spent.
pub(crate) const BAN_LOG_REFILL: std::time::Duration = std::time::Duration::from_secs(10);

/// What to do with a client's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Serve it.
    Allow,
    /// Over its rate: refuse it (an error where the protocol has one, or a drop).
    Limited,
    /// Banned: drop it.
    Banned,
    /// Over its rate for long enough that it is banned from now on: drop it, and count
    /// (and log) the ban.
    NewBan,
}

/// A client's address prefix: the whole IPv4 address and the /64 of an IPv6 one by
/// default, since one IPv6 host usually has a whole /64 to pick addresses from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClientKey(u128);

impl ClientKey {
    /// The key of `ip` with the configured prefix lengths.
    pub fn new(ip: IpAddr, config: &PerIpConfig) -> Self {
        Self(client_key(
            ip,
            config.ipv4_prefix_len,
            config.ipv6_prefix_len,
        ))
    }

    /// The prefix as text, for log lines.
    pub fn describe(&self, config: &PerIpConfig) -> String {
        let ip = std::net::Ipv6Addr::from(self.0);
        match ip.to_ipv4_mapped() {
            Some(v4) => format!("{v4}/{}", config.ipv4_prefix_len),
            None => format!("{ip}/{}", config.ipv6_prefix_len),
        }
    }
}

/// A client's request allowance and ban.
#[derive(Clone, Copy, Debug, Default)]
struct RateState {
    tokens: Bucket,
    /// Seconds spent over the rate lately, and the last such second.
    strikes: u16,
    last_strike: ServerTime,
    /// Banned before this time.
    banned_until: ServerTime,
}

impl ClientState for RateState {
    /// A ban outlives floods of other sources: its slot is not given away.
    fn may_forget(&self, now: ServerTime) -> bool {
        self.banned_until <= now
    }
}

/// The limits of one socket worker's clients, in a fixed amount of memory.
#[derive(Debug)]
pub struct RateTable {
    config: PerIpConfig,
    clients: ClientTable<RateState>,
    /// Bans are logged within a budget ([`log_ban`](Self::log_ban)).
    ban_log: LogBudget,
}

impl RateTable {
    /// A table of `config.table_size` slots (rounded up to a power of two).
    pub fn new(config: &PerIpConfig) -> Self {
        Self {
            config: config.clone(),
            clients: ClientTable::new(config.table_size),
            ban_log: LogBudget::new(BAN_LOG_BURST, BAN_LOG_REFILL),
        }
    }

    /// Logs a new ban of the client at `ip` for `reason`: the first
    /// `BAN_LOG_BURST` in a row, then one per `BAN_LOG_REFILL`, each with how many
    /// were left out (every ban is counted in the metrics either way).
    pub fn log_ban(&mut self, ip: IpAddr, reason: &str, seen_from: impl std::fmt::Display) {
        if let Some(unlogged) = self.ban_log.take(std::time::Instant::now()) {
            log::info!(
                "banned {} ({reason}, seen from {seen_from}){}",
                self.key(ip).describe(&self.config),
                left_out(unlogged),
            );
        }
    }

    /// The limits.
    pub fn config(&self) -> &PerIpConfig {
        &self.config
    }

    /// The key of a client at `ip`.
    pub fn key(&self, ip: IpAddr) -> ClientKey {
        ClientKey::new(ip, &self.config)
    }

    /// Whether the request rate is limited at all.
    pub fn limits_rate(&self) -> bool {
        self.config.requests_per_second > 0
    }

    /// Whether `ip` is banned at `now`, without counting a request.
    pub fn is_banned(&self, ip: IpAddr, now: ServerTime) -> bool {
        let key = self.key(ip);
        self.clients
            .find(key.0)
            .is_some_and(|state| state.banned_until > now)
    }

    /// Counts a request from `ip` at `now` and says what to do with it.
    pub fn check(&mut self, ip: IpAddr, now: ServerTime) -> Verdict {
        if !self.limits_rate() {
            return Verdict::Allow;
        }
        let key = self.key(ip);
        let config = &self.config;
        let (rate, burst) = (config.requests_per_second, config.burst.max(1));
        let (ban_after, ban_duration) = (config.ban_after, config.ban_duration);
        let state = self.clients.entry(key.0, now, || RateState {
            tokens: Bucket::full(burst, now),
            ..RateState::default()
        });
        if state.banned_until > now {
            return Verdict::Banned;
        }
        if state.tokens.take(rate, burst, now) {
            if now.seconds_since(state.last_strike).unwrap_or(0) > 1 {
                state.strikes = 0;
            }
            return Verdict::Allow;
        }
        if state.last_strike != now {
            state.last_strike = now;
            state.strikes = state.strikes.saturating_add(1);
        }
        if ban_duration > 0 && ban_after > 0 && u32::from(state.strikes) >= ban_after {
            state.banned_until = now.plus(ban_duration);
            state.strikes = 0;
            return Verdict::NewBan;
        }
        Verdict::Limited
    }
}

/// Open connections per client and per network, over every socket worker of a TCP
/// tracker, so that neither one host nor one network (an IPv6 allocation, a /24) can
/// take every connection slot. Touched at accept and close only; its size is bounded
/// by the open connections.
#[derive(Debug)]
pub struct ConnectionsPerIp {
    per_client: Counts,
    per_network: Counts,
}

/// Open connections per key, each at most `limit` (0: no limit).
#[derive(Debug)]
struct Counts {
    limit: usize,
    /// Which prefix makes a key.
    prefixes: PerIpConfig,
    shards: Box<[std::sync::Mutex<hashbrown::HashMap<ClientKey, u32>>]>,
    hasher: DefaultHashBuilder,
}

impl Counts {
    fn new(limit: usize, ipv4_prefix_len: u8, ipv6_prefix_len: u8) -> Self {
        Self {
            limit,
            prefixes: PerIpConfig {
                ipv4_prefix_len,
                ipv6_prefix_len,
                ..PerIpConfig::default()
            },
            shards: (0..16).map(|_| Default::default()).collect(),
            hasher: DefaultHashBuilder::default(),
        }
    }

    fn shard(&self, key: ClientKey) -> &std::sync::Mutex<hashbrown::HashMap<ClientKey, u32>> {
        &self.shards[self.hasher.hash_one(key) as usize % self.shards.len()]
    }

    /// Counts one more for `ip`'s key, unless it has `limit`; returns the key.
    fn add(&self, ip: IpAddr) -> Option<ClientKey> {
        let key = ClientKey::new(ip, &self.prefixes);
        let mut shard = self.shard(key).lock().expect("connection table lock");
        let count = shard.entry(key).or_insert(0);
        if self.limit > 0 && *count as usize >= self.limit {
            if *count == 0 {
                shard.remove(&key);
            }
            return None;
        }
        *count += 1;
        Some(key)
    }

    fn remove(&self, key: ClientKey) {
        let mut shard = self.shard(key).lock().expect("connection table lock");
        if let Some(count) = shard.get_mut(&key) {
            *count -= 1;
            if *count == 0 {
                shard.remove(&key);
            }
        }
    }
}

/// One counted connection; dropping it uncounts it.
#[derive(Debug)]
pub struct ConnectionSlot {
    table: std::sync::Arc<ConnectionsPerIp>,
    client: ClientKey,
    network: ClientKey,
}

/// Why a connection was not counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverLimit {
    /// Its client has `per_ip.max_connections` open.
    Client,
    /// Its network has `per_ip.max_connections_per_network` open.
    Network,
}

impl ConnectionsPerIp {
    /// At most `config.max_connections` per client and
    /// `config.max_connections_per_network` per network (0: no limit).
    pub fn new(config: &PerIpConfig) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            per_client: Counts::new(
                config.max_connections,
                config.ipv4_prefix_len,
                config.ipv6_prefix_len,
            ),
            per_network: Counts::new(
                config.max_connections_per_network,
                config.network_ipv4_prefix_len,
                config.network_ipv6_prefix_len,
            ),
        })
    }

    /// Counts a connection from `ip`, or says which limit it is over.
    pub fn open(self: &std::sync::Arc<Self>, ip: IpAddr) -> Result<ConnectionSlot, OverLimit> {
        let client = self.per_client.add(ip).ok_or(OverLimit::Client)?;
        let Some(network) = self.per_network.add(ip) else {
            self.per_client.remove(client);
            return Err(OverLimit::Network);
        };
        Ok(ConnectionSlot {
            table: self.clone(),
            client,
            network,
        })
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.table.per_client.remove(self.client);
        self.table.per_network.remove(self.network);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> PerIpConfig {
        PerIpConfig {
            requests_per_second: 10,
            burst: 20,
            ban_after: 3,
            ban_duration: 60,
            table_size: 64,
            ..PerIpConfig::default()
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_client_gets_its_burst_then_its_rate() {
        let mut table = RateTable::new(&config());
        let client = ip("192.0.2.1");
        let allowed = (0..30)
            .filter(|_| table.check(client, ServerTime(0)) == Verdict::Allow)
            .count();
        assert_eq!(allowed, 20, "the burst");
        let allowed = (0..30)
            .filter(|_| table.check(client, ServerTime(1)) == Verdict::Allow)
            .count();
        assert_eq!(allowed, 10, "a second's worth");
        assert_eq!(
            table.check(ip("192.0.2.2"), ServerTime(1)),
            Verdict::Allow,
            "other clients are not affected"
        );
    }

    #[test]
    fn sustained_abuse_is_banned_and_the_ban_ends() {
        let mut table = RateTable::new(&config());
        let client = ip("2001:db8::1");
        let mut verdicts = Vec::new();
        for second in 0..5 {
            for _ in 0..50 {
                verdicts.push(table.check(client, ServerTime(second)));
            }
        }
        assert!(verdicts.contains(&Verdict::Limited));
        assert_eq!(
            verdicts.iter().filter(|v| **v == Verdict::NewBan).count(),
            1
        );
        // The same /64 is the same client.
        assert_eq!(
            table.check(ip("2001:db8::ffff"), ServerTime(10)),
            Verdict::Banned
        );
        assert!(table.is_banned(client, ServerTime(10)));
        assert_eq!(table.check(client, ServerTime(100)), Verdict::Allow);
    }

    #[test]
    fn a_client_that_slows_down_is_not_banned() {
        let mut table = RateTable::new(&config());
        let client = ip("192.0.2.9");
        for second in 0..20 {
            // Over the limit every other second only.
            let requests = if second % 2 == 0 { 40 } else { 5 };
            for _ in 0..requests {
                assert_ne!(table.check(client, ServerTime(second)), Verdict::NewBan);
            }
        }
    }

    #[test]
    fn a_flood_of_sources_cannot_grow_the_table_or_evict_a_ban() {
        let mut table = RateTable::new(&config());
        let abuser = ip("203.0.113.66");
        for _ in 0..100 {
            table.check(abuser, ServerTime(0));
        }
        for second in 1..4 {
            for _ in 0..100 {
                table.check(abuser, ServerTime(second));
            }
        }
        assert!(table.is_banned(abuser, ServerTime(4)));
        for n in 0..100_000u32 {
            let source = IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + n));
            table.check(source, ServerTime(5));
        }
        assert_eq!(table.clients.slots(), 64);
        assert!(
            table.is_banned(abuser, ServerTime(6)),
            "bans outlive floods"
        );
    }

    #[test]
    fn connections_per_client_are_counted_until_closed() {
        let table = ConnectionsPerIp::new(&PerIpConfig {
            max_connections: 2,
            ..PerIpConfig::default()
        });
        let a = table.open(ip("192.0.2.1")).unwrap();
        let _b = table.open(ip("192.0.2.1")).unwrap();
        assert_eq!(table.open(ip("192.0.2.1")).unwrap_err(), OverLimit::Client);
        assert!(table.open(ip("192.0.2.2")).is_ok(), "per client");
        drop(a);
        assert!(table.open(ip("192.0.2.1")).is_ok());
    }

    #[test]
    fn connections_per_network_are_counted_over_its_clients() {
        let table = ConnectionsPerIp::new(&PerIpConfig {
            max_connections: 2,
            max_connections_per_network: 3,
            ..PerIpConfig::default()
        });
        // Three /64s of one /48: three connections in all, whichever client.
        let held: Vec<_> = ["2001:db8:1:1::1", "2001:db8:1:2::1", "2001:db8:1:2::2"]
            .iter()
            .map(|client| table.open(ip(client)).unwrap())
            .collect();
        assert_eq!(
            table.open(ip("2001:db8:1:3::1")).unwrap_err(),
            OverLimit::Network
        );
        assert!(table.open(ip("2001:db8:2::1")).is_ok(), "another /48");
        // A refusal for the network leaves the client's count as it was.
        drop(held);
        let _a = table.open(ip("2001:db8:1:3::1")).unwrap();
        let _b = table.open(ip("2001:db8:1:3::1")).unwrap();
        assert_eq!(
            table.open(ip("2001:db8:1:3::1")).unwrap_err(),
            OverLimit::Client
        );
        // IPv4 networks are /24s.
        let _c: Vec<_> = (1..=3)
            .map(|n| table.open(ip(&format!("198.51.100.{n}"))).unwrap())
            .collect();
        assert_eq!(
            table.open(ip("198.51.100.200")).unwrap_err(),
            OverLimit::Network
        );
        assert!(table.open(ip("198.51.101.1")).is_ok());
    }

    #[test]
    fn prefixes_are_configurable() {
        let config = PerIpConfig {
            ipv4_prefix_len: 24,
            ipv6_prefix_len: 48,
            ..PerIpConfig::default()
        };
        assert_eq!(
            ClientKey::new(ip("192.0.2.1"), &config),
            ClientKey::new(ip("192.0.2.200"), &config)
        );
        assert_ne!(
            ClientKey::new(ip("192.0.2.1"), &config),
            ClientKey::new(ip("192.0.3.1"), &config)
        );
        assert_eq!(
            ClientKey::new(ip("2001:db8:1:2::1"), &config),
            ClientKey::new(ip("2001:db8:1:3::1"), &config)
        );
        assert_eq!(
            ClientKey::new(ip("::ffff:192.0.2.1"), &config),
            ClientKey::new(ip("192.0.2.1"), &config),
            "mapped IPv4 is IPv4"
        );
        assert_eq!(
            ClientKey::new(ip("192.0.2.1"), &config).describe(&config),
            "192.0.2.0/24"
        );
        assert_eq!(
            ClientKey::new(ip("2001:db8:1:2::1"), &config).describe(&config),
            "2001:db8:1::/48"
        );
    }
}
