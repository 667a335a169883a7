//! The tracker's Origin rules and per-Origin connection caps, shared by its socket
//! workers (the rules themselves are `shoal_ws_protocol::origin`'s).
//!
//! The rules file (`network.origins_path`) is read at start and again on SIGUSR1, with
//! the access list; a reload that fails keeps the rules in force. Workers read the
//! current rules through an [`ArcSwap`] at each upgrade. The caps count the open
//! connections of each Origin over every worker, so that one abusive page (whose
//! visitors come from thousands of addresses, each under the per-address limits)
//! cannot take every connection; only upgrades and closes touch them.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use arc_swap::ArcSwap;
use hashbrown::HashMap;
use shoal_ws_protocol::origin::{OriginRefusal, OriginRules};

/// Largest rules file: 10,000 rules of a few dozen bytes.
const MAX_RULES_FILE: u64 = 4 << 20;

/// Shards of the per-Origin counts: upgrades on different workers rarely wait on
/// each other.
const CAP_SHARDS: usize = 16;

/// Why an upgrade was refused for its Origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OriginVerdict {
    /// The rules refuse it (a 403).
    Refused(OriginRefusal),
    /// Its Origin holds `max_connections_per_origin` connections already (a 503).
    Full,
}

/// Origin rules and caps of one tracker.
#[derive(Debug)]
pub(crate) struct Origins {
    rules: ArcSwap<OriginRules>,
    /// The rules file; `None` when there is none.
    path: Option<PathBuf>,
    /// Serialises reloads and remembers the file's stamp when last read.
    read: Mutex<Option<shoal_common::FileStamp>>,
    caps: Arc<OriginCaps>,
}

impl Origins {
    /// The rules from `path` (none when empty) and caps of `max_per_origin`
    /// connections (0: none).
    pub(crate) fn load(path: &Path, max_per_origin: usize) -> anyhow::Result<Self> {
        let path = (!path.as_os_str().is_empty()).then(|| path.to_path_buf());
        let stamp = path.as_deref().and_then(shoal_common::FileStamp::of);
        let rules = match &path {
            Some(path) => read_rules(path)?,
            None => OriginRules::default(),
        };
        Ok(Self {
            rules: ArcSwap::from_pointee(rules),
            path,
            read: Mutex::new(stamp),
            caps: Arc::new(OriginCaps::new(max_per_origin)),
        })
    }

    /// Whether an upgrade from `origin` (normalized; `None`: no Origin header) is
    /// served; when it is and caps are on, the place it holds until dropped.
    pub(crate) fn admit(&self, origin: Option<&str>) -> Result<Option<OriginSlot>, OriginVerdict> {
        self.rules
            .load()
            .check(origin)
            .map_err(OriginVerdict::Refused)?;
        match origin {
            Some(origin) if self.caps.max > 0 => {
                OriginCaps::open(&self.caps, origin).ok_or(OriginVerdict::Full)
            }
            _ => Ok(None),
        }
    }

    /// Reads the rules file again if it changed since it was last read; returns the
    /// rules in force and whether it was read. On failure the old rules stay.
    pub(crate) fn reload(&self) -> anyhow::Result<(usize, bool)> {
        let Some(path) = &self.path else {
            return Ok((0, false));
        };
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let stamp = shoal_common::FileStamp::of(path);
        if stamp.is_some() && stamp == *read {
            return Ok((self.rules.load().len(), false));
        }
        let rules = read_rules(path)?;
        let len = rules.len();
        self.rules.store(Arc::new(rules));
        *read = stamp;
        Ok((len, true))
    }

    /// [`reload`](Self::reload) for SIGUSR1, logged under `tracker`; `None` without a
    /// rules file.
    pub(crate) fn reload_and_log(&self, tracker: &str) -> Option<String> {
        let path = self.path.as_ref()?;
        let held = self.rules.load().len().to_string();
        let outcome = match self.reload() {
            Ok((_, false)) => shoal_common::Reloaded::Unchanged,
            Ok((len, true)) => shoal_common::Reloaded::Read(len.to_string()),
            Err(err) => shoal_common::Reloaded::Failed(err),
        };
        Some(shoal_common::report_reload(
            tracker,
            "origin rules",
            &path.display(),
            &held,
            outcome,
        ))
    }

    /// Origins holding connections now.
    #[cfg(test)]
    pub(crate) fn origins_connected(&self) -> usize {
        self.caps.origins()
    }
}

fn read_rules(path: &Path) -> anyhow::Result<OriginRules> {
    let text = shoal_common::read_to_string_bounded(path, MAX_RULES_FILE)
        .with_context(|| format!("cannot read origin rules {}", path.display()))?;
    if !text.is_empty() && !text.ends_with('\n') {
        anyhow::bail!(
            "origin rules {} do not end with a newline: the file looks cut short or still \
             being written (write a temporary file and rename it over the old one)",
            path.display()
        );
    }
    OriginRules::parse(&text).with_context(|| format!("in origin rules {}", path.display()))
}

/// Open connections per Origin, over every socket worker.
#[derive(Debug)]
pub(crate) struct OriginCaps {
    /// Most connections per Origin; 0: not counted.
    max: usize,
    /// Keyed by a hash of the Origin under a per-process random key, so that pages
    /// cannot choose Origins that share another's count.
    hasher: RandomState,
    shards: [Mutex<HashMap<u64, usize>>; CAP_SHARDS],
}

impl OriginCaps {
    fn new(max: usize) -> Self {
        Self {
            max,
            hasher: RandomState::new(),
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
        }
    }

    /// A place for a connection from `origin`, unless it holds `max` already.
    fn open(caps: &Arc<Self>, origin: &str) -> Option<Option<OriginSlot>> {
        let key = caps.hasher.hash_one(origin);
        let mut shard = caps.shard(key);
        let open = shard.entry(key).or_insert(0);
        if *open >= caps.max {
            return None;
        }
        *open += 1;
        Some(Some(OriginSlot {
            caps: caps.clone(),
            key,
        }))
    }

    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, HashMap<u64, usize>> {
        self.shards[(key as usize) % CAP_SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    #[cfg(test)]
    fn origins(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }
}

/// A connection's place in its Origin's cap, given back when dropped.
#[derive(Debug)]
pub(crate) struct OriginSlot {
    caps: Arc<OriginCaps>,
    key: u64,
}

impl Drop for OriginSlot {
    fn drop(&mut self) {
        let mut shard = self.caps.shard(self.key);
        if let Some(open) = shard.get_mut(&self.key) {
            *open -= 1;
            if *open == 0 {
                shard.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rules file named for the test, removed when the guard drops.
    struct RulesFile(PathBuf);

    impl Drop for RulesFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn rules_file(name: &str, text: &str) -> (RulesFile, PathBuf) {
        let path =
            std::env::temp_dir().join(format!("shoal-origins-{name}-{}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        (RulesFile(path.clone()), path)
    }

    #[test]
    fn without_a_file_or_caps_everyone_is_served_and_nothing_is_held() {
        let origins = Origins::load(Path::new(""), 0).unwrap();
        assert!(matches!(origins.admit(Some("https://a.example")), Ok(None)));
        assert!(matches!(origins.admit(None), Ok(None)));
        assert_eq!(origins.reload_and_log("ws"), None);
    }

    #[test]
    fn caps_count_each_origin_over_its_open_connections() {
        let origins = Origins::load(Path::new(""), 2).unwrap();
        let first = origins.admit(Some("https://a.example")).unwrap();
        let second = origins.admit(Some("https://a.example")).unwrap();
        assert!(first.is_some() && second.is_some());
        assert_eq!(
            origins.admit(Some("https://a.example")).unwrap_err(),
            OriginVerdict::Full
        );
        // Another Origin, and clients without one, are not held back.
        let other = origins.admit(Some("https://b.example")).unwrap();
        assert!(origins.admit(None).unwrap().is_none());
        assert_eq!(origins.origins_connected(), 2);
        drop(first);
        assert!(origins.admit(Some("https://a.example")).unwrap().is_some());
        drop((second, other));
        assert_eq!(origins.origins_connected(), 0);
    }

    #[test]
    fn a_reload_replaces_the_rules_and_a_bad_file_keeps_them() {
        let (_file, path) = rules_file("reload", "deny *.abuse.example\n");
        let origins = Origins::load(&path, 0).unwrap();
        let refused = Err(OriginVerdict::Refused(OriginRefusal::Denied));
        assert_eq!(
            origins.admit(Some("https://x.abuse.example")).map(|_| ()),
            refused
        );
        assert_eq!(origins.reload().unwrap(), (1, false));
        std::fs::write(&path, "allow https://site.example\nallow none\n").unwrap();
        assert_eq!(origins.reload().unwrap(), (2, true));
        assert!(origins.admit(Some("https://x.abuse.example")).is_err());
        assert!(origins.admit(Some("https://site.example")).is_ok());
        assert!(origins.admit(None).is_ok());
        std::fs::write(&path, "allow https://*.bad\n").unwrap();
        let message = origins.reload_and_log("ws").unwrap();
        assert!(message.contains("kept (2)"), "{message}");
        assert!(origins.admit(Some("https://site.example")).is_ok());
        std::fs::write(&path, "allow a.example").unwrap();
        let err = origins.reload().unwrap_err().to_string();
        assert!(err.contains("newline"), "{err}");
    }

    #[test]
    fn a_bad_file_at_start_is_an_error_naming_the_line() {
        let (_file, path) = rules_file("bad", "allow a.example\nallow\n");
        let err = format!("{:#}", Origins::load(&path, 0).unwrap_err());
        assert!(err.contains("line 2"), "{err}");
        let err = format!(
            "{:#}",
            Origins::load(Path::new("/nonexistent/o"), 0).unwrap_err()
        );
        assert!(err.contains("cannot read origin rules"), "{err}");
    }
}
