//! The `[private]` section: private mode's settings. What it does lives in the
//! `shoal_private` crate; the section is here, beside the access list's, because every
//! tracker's config has it.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use shoal_toml_config::TomlConfig;

use crate::config::Problems;

/// Private mode settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct PrivateConfig {
    /// Serve only announces and scrapes that carry a registered user's passkey, and
    /// only registered torrents (documents/private.md). Refusals touch no state.
    /// Off: a public tracker, whose torrents the access list decides.
    pub enabled: bool,
    /// File of users, one per line: `<user id> <passkey> [noleech] [disabled]
    /// [peers=N]`. Read at start and again on SIGUSR1.
    pub users_path: PathBuf,
    /// File of torrents, one info hash per line: `<info hash> <torrent id>
    /// [up=PERCENT] [down=PERCENT]` (the two hashes of a hybrid torrent share its id).
    /// Read at start and again on SIGUSR1.
    pub torrents_path: PathBuf,
    /// File holding a secret of at least 32 bytes shared with the site: then a
    /// passkey may also be a stateless key, `<user id>-<version>-<mac>`, that the
    /// site derives without telling the tracker (documents/private.md, "Stateless
    /// keys"). Read at start. Empty: passkeys come from the users file and the API
    /// only.
    pub key_secret_path: PathBuf,
    /// The query parameter that may carry the passkey (`/announce?passkey=KEY`),
    /// besides the paths `/KEY/announce` and `/announce/KEY`.
    pub key_parameter: String,
    /// Directory the accounting batches are written to, one JSON file per batch:
    /// each user's uploaded and downloaded bytes per torrent since the last batch,
    /// duplicates absorbed, factors applied (documents/private.md, "Accounting").
    /// The site applies each batch once and deletes its file. Empty: no accounting.
    pub export_directory: PathBuf,
    /// Seconds between accounting batches.
    pub export_interval: u32,
    /// Refuse an announce (with the interval) that comes sooner than this many
    /// seconds after the same client's last one for the same torrent, over the same
    /// IP version; `started`, `completed` and `stopped` announces always pass. 0:
    /// none refused. Set it to what the tracker announces as its minimum interval
    /// (HTTP's `protocol.min_announce_interval`); WebTorrent clients announce again
    /// whenever they want more peers, so keep it low there.
    pub min_interval: u32,
    /// Peer lists one user may be sent per minute, over all their clients and
    /// torrents (a minute's worth at once, then the rate); past it their announces
    /// are served and credited, without peers. 0: no cap.
    pub peer_lists_per_minute: u32,
    /// The site's HTTP endpoint each batch is POSTed to as JSON, with its id in
    /// `Idempotency-Key` (`http://host:port/path`; https is not spoken: keep it on a
    /// private network or behind a local TLS proxy). A batch leaves
    /// `export_directory` once every target took it; while one cannot, batches wait
    /// there (across restarts too) and are tried again with a growing wait. Empty:
    /// none.
    pub export_url: String,
    /// A Redis or Valkey stream each batch is added to (`XADD <stream> * batch <id>
    /// json <batch>`): `redis://[[user]:password@]host:port[/database]`. Empty: none.
    pub export_redis: String,
    /// The stream's key.
    pub export_redis_stream: String,
    /// Batches kept in `export_directory` while a target (or the site reading the
    /// directory) does not take them (a day's at the default interval); past it the
    /// oldest are deleted, logged and counted, whenever a batch is written.
    pub export_backlog: u32,
    /// Bytes of batches kept in `export_directory` at most (a batch of many users
    /// can be megabytes); past it the oldest are deleted, as past `export_backlog`.
    pub export_backlog_bytes: u64,
    /// Bytes a client may report uploaded or downloaded in one session: an announce
    /// past it (a total no client reaches: a forged or broken one) is refused and
    /// counted, and nothing of it is credited. 1 PiB by default.
    pub max_session_bytes: u64,
}

impl Default for PrivateConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            users_path: PathBuf::new(),
            torrents_path: PathBuf::new(),
            key_secret_path: PathBuf::new(),
            key_parameter: "passkey".into(),
            export_directory: PathBuf::new(),
            export_interval: 10,
            min_interval: 0,
            peer_lists_per_minute: 0,
            export_url: String::new(),
            export_redis: String::new(),
            export_redis_stream: "shoal:accounting".into(),
            export_backlog: 8640,
            export_backlog_bytes: 1 << 30,
            max_session_bytes: 1 << 50,
        }
    }
}

impl PrivateConfig {
    /// Records configuration problems; `access_list_on` says whether the tracker's
    /// access list is on too.
    pub fn validate(&self, problems: &mut Problems, access_list_on: bool) {
        let parameter_ok = !self.key_parameter.is_empty()
            && self.key_parameter.len() <= 64
            && self
                .key_parameter
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        problems.check(
            parameter_ok,
            "key_parameter",
            "must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -",
        );
        problems.within("export_interval", self.export_interval, 1..=3600);
        problems.within("min_interval", self.min_interval, 0..=86_400);
        problems.within(
            "peer_lists_per_minute",
            self.peer_lists_per_minute,
            0..=1_000_000,
        );
        problems.within("export_backlog", self.export_backlog, 1..=1_000_000);
        problems.within(
            "export_backlog_bytes",
            self.export_backlog_bytes,
            (1 << 20)..=(1 << 40),
        );
        problems.within(
            "max_session_bytes",
            self.max_session_bytes,
            (1 << 30)..=u64::MAX,
        );
        problems.check(
            self.export_url.is_empty() || self.export_url.starts_with("http://"),
            "export_url",
            "must be an http:// URL (https is not spoken: use a local TLS proxy)",
        );
        problems.check(
            self.export_redis.is_empty() || self.export_redis.starts_with("redis://"),
            "export_redis",
            "must be a redis:// URL",
        );
        let exporting = !self.export_url.is_empty() || !self.export_redis.is_empty();
        problems.check(
            !exporting || !self.export_directory.as_os_str().is_empty(),
            "export_directory",
            "must name a directory when export_url or export_redis is set: batches wait there",
        );
        if !self.enabled {
            return;
        }
        if !self.export_directory.as_os_str().is_empty()
            && let Some(problem) = crate::files::unwritable_directory(&self.export_directory)
        {
            problems.add(
                "export_directory",
                format!(
                    "{problem} (batches are written there; under the packaged units, \
                     /var/lib/shoal/export is made for the shoal user at install)"
                ),
            );
        }
        for (key, path) in [
            ("users_path", &self.users_path),
            ("torrents_path", &self.torrents_path),
        ] {
            if path.as_os_str().is_empty() {
                problems.add(key, "must name a file when enabled = true");
            } else if let Some(problem) = crate::files::unreadable(path) {
                problems.add(key, problem);
            }
        }
        if !self.key_secret_path.as_os_str().is_empty()
            && let Some(problem) = crate::files::unreadable(&self.key_secret_path)
        {
            problems.add("key_secret_path", problem);
        }
        problems.check(
            !access_list_on,
            "enabled",
            "private mode serves the registered torrents only: turn the access list off \
             (access_list.mode = \"off\"), the torrents file is the allow list",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(config: &PrivateConfig, access_list_on: bool) -> String {
        let mut problems = Problems::default();
        config.validate(&mut problems, access_list_on);
        problems.to_string()
    }

    #[test]
    fn off_by_default_and_checked_when_on() {
        assert_eq!(
            problems(&PrivateConfig::default(), true),
            "0 invalid values:"
        );
        let on = PrivateConfig {
            enabled: true,
            ..PrivateConfig::default()
        };
        let found = problems(&on, true);
        assert!(found.contains("users_path: must name a file"), "{found}");
        assert!(found.contains("torrents_path: must name a file"), "{found}");
        assert!(found.contains("turn the access list off"), "{found}");
        let bad = PrivateConfig {
            key_parameter: "pass key".into(),
            ..PrivateConfig::default()
        };
        assert!(problems(&bad, false).contains("key_parameter: must be"));
    }
}
