//! Which BitTorrent clients a tracker serves (`[clients]`), and which client software
//! announces, counted.
//!
//! Clients name themselves in their peer id: Azureus-style ids begin `-qB4650-`
//! (qBittorrent 4.6.5), `-TR4060-` (Transmission), `-lt0D80-` (rTorrent's libtorrent);
//! aria2's begin `A2-`. A site that refuses a client (a release that misreports its
//! totals, a leech-only client, an old version with a known flaw) lists a prefix;
//! over HTTP the `User-Agent` can be refused too. Peer ids and user agents are what
//! the client says, not proof: rules keep honest clients of a kind away, and anyone
//! who forges a peer id passes them.
//!
//! The rules are read from the config at start and replaced whole through the admin
//! API; workers read them without waiting ([`ClientRules`]). With no rules, the check
//! is one relaxed atomic load.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};
use shoal_toml_config::TomlConfig;

use crate::config::Problems;

/// Most prefixes in each list.
pub(crate) const MAX_RULES: usize = 1024;
/// The longest peer-id prefix: a whole peer id.
pub(crate) const MAX_PEER_ID_PREFIX: usize = 20;
/// The longest User-Agent prefix compared (HTTP keeps this many bytes of it).
pub(crate) const MAX_USER_AGENT_PREFIX: usize = 64;

/// Which clients are served, by what they call themselves.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConfig {
    /// Peer-id prefixes served, e.g. ["-qB", "-TR", "-lt", "-DE"]; empty: every
    /// client not denied. Announces from other clients are refused ("client not
    /// allowed") and touch no swarm.
    pub allow_peer_ids: Vec<String>,
    /// Peer-id prefixes refused, e.g. ["-XL", "-SD"], checked after the allow list.
    pub deny_peer_ids: Vec<String>,
    /// User-Agent prefixes refused, HTTP only, compared over their first 64 bytes,
    /// e.g. ["Xunlei"].
    pub deny_user_agents: Vec<String>,
}

impl ClientConfig {
    /// Records configuration problems.
    pub fn validate(&self, problems: &mut Problems) {
        for (key, list, longest) in [
            ("allow_peer_ids", &self.allow_peer_ids, MAX_PEER_ID_PREFIX),
            ("deny_peer_ids", &self.deny_peer_ids, MAX_PEER_ID_PREFIX),
            (
                "deny_user_agents",
                &self.deny_user_agents,
                MAX_USER_AGENT_PREFIX,
            ),
        ] {
            if let Err(problem) = check_list(list, longest) {
                problems.add(key, problem);
            }
        }
    }
}

/// Whether `list` is a valid list of prefixes of at most `longest` bytes.
fn check_list(list: &[String], longest: usize) -> Result<(), String> {
    if list.len() > MAX_RULES {
        return Err(format!("at most {MAX_RULES} prefixes"));
    }
    match list.iter().position(|p| p.is_empty() || p.len() > longest) {
        Some(index) => Err(format!("entry {index}: a prefix is 1 to {longest} bytes")),
        None => Ok(()),
    }
}

/// One set of rules, as workers apply them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleSet {
    allow_peer_ids: Vec<Vec<u8>>,
    deny_peer_ids: Vec<Vec<u8>>,
    deny_user_agents: Vec<Vec<u8>>,
}

/// Why a client is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientRefusal {
    /// Its peer id is not on the allow list, or is on the deny list.
    PeerId,
    /// Its User-Agent is on the deny list.
    UserAgent,
}

impl ClientRefusal {
    /// What the client is told.
    pub fn reason(self) -> &'static str {
        match self {
            Self::PeerId => "client not allowed on this tracker (by its peer id)",
            Self::UserAgent => "client not allowed on this tracker (by its User-Agent)",
        }
    }
}

impl RuleSet {
    /// The rules of `config`, or what is wrong with it.
    pub fn from_config(config: &ClientConfig) -> Result<Self, String> {
        check_list(&config.allow_peer_ids, MAX_PEER_ID_PREFIX)
            .map_err(|p| format!("allow_peer_ids: {p}"))?;
        check_list(&config.deny_peer_ids, MAX_PEER_ID_PREFIX)
            .map_err(|p| format!("deny_peer_ids: {p}"))?;
        check_list(&config.deny_user_agents, MAX_USER_AGENT_PREFIX)
            .map_err(|p| format!("deny_user_agents: {p}"))?;
        let bytes = |list: &[String]| list.iter().map(|p| p.as_bytes().to_vec()).collect();
        Ok(Self {
            allow_peer_ids: bytes(&config.allow_peer_ids),
            deny_peer_ids: bytes(&config.deny_peer_ids),
            deny_user_agents: bytes(&config.deny_user_agents),
        })
    }

    /// The rules as config (for the admin API's answers).
    pub fn to_config(&self) -> ClientConfig {
        let text = |list: &[Vec<u8>]| {
            list.iter()
                .map(|p| String::from_utf8_lossy(p).into_owned())
                .collect()
        };
        ClientConfig {
            allow_peer_ids: text(&self.allow_peer_ids),
            deny_peer_ids: text(&self.deny_peer_ids),
            deny_user_agents: text(&self.deny_user_agents),
        }
    }

    fn is_empty(&self) -> bool {
        self.allow_peer_ids.is_empty()
            && self.deny_peer_ids.is_empty()
            && self.deny_user_agents.is_empty()
    }

    /// Whether a client with `peer_id` (and, over HTTP, `user_agent`) is served.
    pub fn check(&self, peer_id: &[u8; 20], user_agent: &[u8]) -> Result<(), ClientRefusal> {
        let starts = |prefix: &Vec<u8>| peer_id.starts_with(prefix);
        if !self.allow_peer_ids.is_empty() && !self.allow_peer_ids.iter().any(starts) {
            return Err(ClientRefusal::PeerId);
        }
        if self.deny_peer_ids.iter().any(starts) {
            return Err(ClientRefusal::PeerId);
        }
        if self
            .deny_user_agents
            .iter()
            .any(|prefix| user_agent.starts_with(prefix))
        {
            return Err(ClientRefusal::UserAgent);
        }
        Ok(())
    }
}

/// A tracker's client rules, replaceable while workers read them.
#[derive(Debug)]
pub struct ClientRules {
    rules: ArcSwap<RuleSet>,
    /// Whether there are any: without, a check is this one load.
    any: AtomicBool,
}

impl ClientRules {
    /// The rules of `config` (checked by the config's validation first).
    pub fn from_config(config: &ClientConfig) -> Result<Self, String> {
        let rules = RuleSet::from_config(config)?;
        Ok(Self {
            any: AtomicBool::new(!rules.is_empty()),
            rules: ArcSwap::from_pointee(rules),
        })
    }

    /// Whether a client with `peer_id` (and, over HTTP, `user_agent`; empty when
    /// there is none) is served.
    pub fn check(&self, peer_id: &[u8; 20], user_agent: &[u8]) -> Result<(), ClientRefusal> {
        if !self.any.load(Relaxed) {
            return Ok(());
        }
        self.rules.load().check(peer_id, user_agent)
    }

    /// The rules now.
    pub fn current(&self) -> Arc<RuleSet> {
        self.rules.load_full()
    }

    /// Replaces the rules; whether they changed.
    pub fn replace(&self, rules: RuleSet) -> bool {
        if *self.rules.load_full() == rules {
            return false;
        }
        self.any.store(!rules.is_empty(), Relaxed);
        self.rules.store(Arc::new(rules));
        true
    }
}

impl Default for ClientRules {
    fn default() -> Self {
        Self {
            rules: ArcSwap::from_pointee(RuleSet::default()),
            any: AtomicBool::new(false),
        }
    }
}

/// Client software told apart in the metrics, by the start of their peer ids; every
/// other client counts as "other", so the label set stays bounded whatever clients
/// send. Azureus-style codes as the clients use them (BEP 20), and aria2's own form.
pub const KNOWN_CLIENTS: [(&[u8], &str); 19] = [
    (b"-qB", "qBittorrent"),
    (b"-TR", "Transmission"),
    (b"-LT", "libtorrent (Rasterbar)"),
    (b"-lt", "rTorrent"),
    (b"-DE", "Deluge"),
    (b"-UT", "uTorrent"),
    (b"-UM", "uTorrent Mac"),
    (b"-BT", "BitTorrent"),
    (b"-BC", "BitComet"),
    (b"-AZ", "Vuze"),
    (b"-BI", "BiglyBT"),
    (b"-KT", "KTorrent"),
    (b"-FD", "Free Download Manager"),
    (b"-PI", "PicoTorrent"),
    (b"-WW", "WebTorrent"),
    (b"-WD", "WebTorrent Desktop"),
    (b"-XL", "Xunlei"),
    (b"-SD", "Thunder"),
    (b"A2-", "aria2"),
];

/// The label of clients none of [`KNOWN_CLIENTS`] names.
pub const OTHER_CLIENT: &str = "other";

/// Announces per client software: [`KNOWN_CLIENTS`] in order, then "other". A
/// counter group embedded in each tracker's counters (`group clients:
/// ClientCounts;`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientCounts(pub [u64; KNOWN_CLIENTS.len() + 1]);

impl Default for ClientCounts {
    fn default() -> Self {
        Self([0; KNOWN_CLIENTS.len() + 1])
    }
}

/// [`ClientCounts`] as workers flush them.
#[derive(Debug)]
pub struct SharedClientCounts([std::sync::atomic::AtomicU64; KNOWN_CLIENTS.len() + 1]);

impl Default for SharedClientCounts {
    fn default() -> Self {
        Self(std::array::from_fn(|_| {
            std::sync::atomic::AtomicU64::new(0)
        }))
    }
}

impl ClientCounts {
    /// Counts one announce from the client with `peer_id`.
    pub fn count(&mut self, peer_id: &[u8; 20]) {
        self.0[client_index(peer_id)] += 1;
    }

    /// The counts as samples of `shoal_announces_by_client_total{client}`.
    pub fn observe(&self, out: &mut crate::Observation) {
        let names = KNOWN_CLIENTS.iter().map(|(_, name)| *name);
        for (name, &count) in names.chain([OTHER_CLIENT]).zip(&self.0) {
            out.counter(
                crate::metric_names::ANNOUNCES_BY_CLIENT,
                crate::metric_names::ANNOUNCES_BY_CLIENT_HELP,
                &[("client", name)],
                count,
            );
        }
    }
}

/// Where `peer_id`'s client is counted.
fn client_index(peer_id: &[u8; 20]) -> usize {
    KNOWN_CLIENTS
        .iter()
        .position(|(prefix, _)| peer_id.starts_with(prefix))
        .unwrap_or(KNOWN_CLIENTS.len())
}

impl crate::CounterGroup for ClientCounts {
    type Shared = SharedClientCounts;
    type Totals = ClientCounts;

    fn flush_into(&mut self, shared: &SharedClientCounts) {
        for (count, total) in self.0.iter_mut().zip(&shared.0) {
            if *count != 0 {
                total.fetch_add(std::mem::take(count), Relaxed);
            }
        }
    }

    fn add_to(shared: &SharedClientCounts, totals: &mut ClientCounts) {
        for (total, count) in totals.0.iter_mut().zip(&shared.0) {
            *total += count.load(Relaxed);
        }
    }

    fn since(now: &ClientCounts, earlier: &ClientCounts) -> ClientCounts {
        let mut delta = ClientCounts::default();
        for ((out, now), earlier) in delta.0.iter_mut().zip(&now.0).zip(&earlier.0) {
            *out = now.saturating_sub(*earlier);
        }
        delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CounterGroup as _;

    fn id(prefix: &[u8]) -> [u8; 20] {
        let mut id = [b'x'; 20];
        id[..prefix.len()].copy_from_slice(prefix);
        id
    }

    fn rules(allow: &[&str], deny: &[&str], agents: &[&str]) -> ClientRules {
        let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
        ClientRules::from_config(&ClientConfig {
            allow_peer_ids: strings(allow),
            deny_peer_ids: strings(deny),
            deny_user_agents: strings(agents),
        })
        .unwrap()
    }

    #[test]
    fn peer_ids_and_user_agents_decide() {
        let none = ClientRules::default();
        assert_eq!(none.check(&id(b"-XL0012-"), b""), Ok(()));
        let only = rules(&["-qB", "-TR"], &["-qB3"], &["Xunlei"]);
        assert_eq!(only.check(&id(b"-qB4650-"), b"qBittorrent/4.6.5"), Ok(()));
        assert_eq!(only.check(&id(b"-TR4060-"), b""), Ok(()));
        assert_eq!(
            only.check(&id(b"-DE2110-"), b""),
            Err(ClientRefusal::PeerId)
        );
        assert_eq!(
            only.check(&id(b"-qB3190-"), b""),
            Err(ClientRefusal::PeerId)
        );
        assert_eq!(
            only.check(&id(b"-TR4060-"), b"Xunlei/1"),
            Err(ClientRefusal::UserAgent)
        );
        // Replaced whole; the same rules again change nothing.
        let current = only.current();
        assert!(!only.replace(RuleSet::clone(&current)));
        assert!(only.replace(RuleSet::default()));
        assert_eq!(only.check(&id(b"-DE2110-"), b""), Ok(()));
        assert_eq!(current.to_config().deny_user_agents, vec!["Xunlei"]);
    }

    #[test]
    fn bad_lists_are_named() {
        let mut problems = Problems::default();
        ClientConfig {
            deny_peer_ids: vec![String::new()],
            deny_user_agents: vec!["x".repeat(65)],
            ..ClientConfig::default()
        }
        .validate(&mut problems);
        let text = problems.to_string();
        assert!(
            text.contains("deny_peer_ids: entry 0: a prefix is 1 to 20 bytes"),
            "{text}"
        );
        assert!(text.contains("deny_user_agents: entry 0"), "{text}");
        assert!(
            RuleSet::from_config(&ClientConfig {
                allow_peer_ids: vec!["y".repeat(21)],
                ..ClientConfig::default()
            })
            .is_err()
        );
    }

    #[test]
    fn client_software_is_counted_in_a_bounded_set() {
        let mut counts = ClientCounts::default();
        for peer_id in [
            &b"-qB4650-"[..],
            b"-qB5010-",
            b"A2-1-36-0-",
            b"M7-2-2--",
            b"\xff\xfe",
        ] {
            counts.count(&id(peer_id));
        }
        let shared = SharedClientCounts::default();
        counts.flush_into(&shared);
        assert_eq!(counts, ClientCounts::default(), "flushed");
        let mut totals = ClientCounts::default();
        ClientCounts::add_to(&shared, &mut totals);
        let mut out = crate::Observation::default();
        totals.observe(&mut out);
        let count = |name| {
            out.sum(
                crate::metric_names::ANNOUNCES_BY_CLIENT,
                &[("client", name)],
            )
        };
        assert_eq!(
            (
                count("qBittorrent"),
                count("aria2"),
                count("other"),
                count("Deluge")
            ),
            (2.0, 1.0, 2.0, 0.0)
        );
    }
}
