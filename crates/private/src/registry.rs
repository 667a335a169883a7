//! The users and torrents a site registers with its tracker, and the decision on each
//! announce and scrape.
//!
//! Both are read from files at start and again on SIGUSR1 when the files changed
//! (documents/private.md gives the formats), and changed one entry at a time through
//! the admin API. Socket workers never wait: the tables are read without locks, and a
//! change swaps in a changed copy of the small part of a table it touches.
//!
//! One rule decides for every key: a user is their id, and whatever key they present
//! (a passkey from the users file or the API, or a stateless key of any version),
//! the restrictions registered for that id apply. A stateless key of an id never
//! registered is unrestricted; an id deleted through the API stays refused until it
//! is registered again (a tombstone), so deleting a restricted user cannot free them.
//! Reloading the files makes them the whole truth again, tombstones included.
//!
//! Users file, one user per line, `#` comments and blank lines ignored:
//!
//! ```text
//! # <user id> <passkey or - for stateless keys> [noleech] [disabled] [peers=N] [version=N]
//! 17 6f0d1b2c3d4e5f60718293a4b5c6d7e8
//! 18 a1b2c3d4e5f60718293a4b5c6d7e8f90 noleech peers=3
//! ```
//!
//! Torrents file, one info hash per line; the v1 and v2 hashes of a hybrid torrent
//! share its id, so that accounting counts them as one torrent:
//!
//! ```text
//! # <info hash, 40 hex> <torrent id> [up=PERCENT] [down=PERCENT]
//! 0123456789abcdef0123456789abcdef01234567 1001 down=0
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use anyhow::Context as _;
use hashbrown::DefaultHashBuilder;
use hashbrown::HashMap;

use crate::key::{DigestHasher, KeyDigest, Passkey};
use crate::ledger::{Event, Report};
use crate::shards::CowShards;

mod files;

use files::{FileStamp, Files, Tables};
pub use files::{MAX_FILE, canonical_number};

/// A user as the site registered them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct User {
    /// The site's id for them.
    pub id: u32,
    /// May download (announce with bytes left); without it, seeding only.
    pub can_leech: bool,
    /// Refused altogether (a banned or parked account).
    pub disabled: bool,
    /// Peers they may have in one torrent at once; 0: no cap.
    pub peer_cap: u16,
    /// The oldest version of their stateless key still accepted (`stateless`); a site
    /// retires a leaked key by raising it.
    pub min_key_version: u16,
}

/// What the registry holds of a user id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    /// A user the site registered, with their restrictions.
    Registered(User),
    /// A user the site deleted through the API: their stateless keys stay refused
    /// (never "unrestricted", which only ids never registered are) until they are
    /// registered again or the files are reloaded.
    Deleted,
}

/// What a change to a user does to their passkey.
#[derive(Clone, Copy, Debug)]
pub enum KeyChange<'k> {
    /// Leaves it as it is (none stays none).
    Keep,
    /// Takes it away: the user announces with stateless keys only.
    Remove,
    /// Sets it: the old one stops working.
    Set(Passkey<'k>),
}

impl User {
    /// A user nobody registered, known by a stateless key: no restriction.
    pub fn unrestricted(id: u32) -> Self {
        Self {
            id,
            can_leech: true,
            disabled: false,
            peer_cap: 0,
            min_key_version: 0,
        }
    }
}

/// A torrent as the site registered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Torrent {
    /// The site's id for it (shared by a hybrid torrent's two hashes).
    pub id: u32,
    /// Percent of uploaded bytes credited (100: all; 200: double upload).
    pub up_factor: u16,
    /// Percent of downloaded bytes counted (0: freeleech).
    pub down_factor: u16,
}

/// Why an announce or scrape is refused. The texts go to clients, so they name no key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No key where one belongs.
    MissingKey,
    /// A key no user has.
    UnknownKey,
    /// The user is disabled.
    Disabled,
    /// The torrent is not registered.
    Unregistered,
    /// The user may not download.
    CannotLeech,
    /// The same client announced the same torrent less than the enforced minimum
    /// interval ago (`Sessions`).
    TooEarly,
    /// A new client past the user's peer cap in this torrent (`Sessions`).
    OverCap,
    /// Totals past `private.max_session_bytes` (`Accounts::check_totals`).
    Implausible,
}

impl Refusal {
    /// What the client is told.
    pub fn reason(self) -> &'static str {
        match self {
            Self::MissingKey => "passkey missing: use the announce URL the site gave you",
            Self::UnknownKey => "passkey not recognised: download the torrent again from the site",
            Self::Disabled => "account disabled",
            Self::Unregistered => "torrent not registered with this tracker",
            Self::CannotLeech => "downloading is disabled for your account",
            Self::TooEarly => "announced too soon: wait for the interval",
            Self::OverCap => "too many clients on this torrent for your account",
            Self::Implausible => "uploaded or downloaded total out of range",
        }
    }
}

/// What an accepted announce may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub user: User,
    pub torrent: Torrent,
}

impl Grant {
    /// The accounting report of the announce this grant accepted, with the client's
    /// totals; the accounting thread stamps its time.
    pub fn report(
        &self,
        peer_id: [u8; 20],
        uploaded: u64,
        downloaded: u64,
        left: u64,
        event: Event,
    ) -> Report {
        Report {
            user: self.user.id,
            torrent: self.torrent.id,
            up_factor: self.torrent.up_factor,
            down_factor: self.torrent.down_factor,
            peer_id,
            uploaded,
            downloaded,
            left,
            event,
            at: 0,
        }
    }
}

/// Users by id and passkeys by digest, torrents by info hash, as workers read them,
/// and the changes the site makes: whole files reloaded, or one user or torrent at a
/// time through the admin API.
///
/// Reads take no lock (`CowShards`); changes are serialized by `writer`, which
/// also holds what only changes need (each user's passkey, the files' identities).
#[derive(Debug)]
pub struct Registry {
    /// Every user registered (or deleted through the API), by id: the one place their
    /// restrictions are kept, whatever key they present.
    users: CowShards<u32, Entry, DefaultHashBuilder>,
    /// Passkeys (from the users file or the API) to the user ids they belong to.
    keys: CowShards<KeyDigest, u32, DigestBuild>,
    torrents: CowShards<[u8; 20], Torrent, DefaultHashBuilder>,
    writer: Mutex<Writer>,
}

type DigestBuild = std::hash::BuildHasherDefault<DigestHasher>;

/// What changes need besides the tables.
#[derive(Debug)]
struct Writer {
    /// Each user's passkey digest, by user id (users of stateless keys have none).
    keys: HashMap<u32, KeyDigest>,
    /// Users deleted through the API and not registered again (tombstones).
    deleted: usize,
    /// The files, when the registry was read from files.
    files: Option<Files>,
}

/// What a change through the API did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// There was none; now there is.
    Created,
    /// There was one and it is different now.
    Updated,
    /// There was one exactly like it.
    Unchanged,
}

/// Why a user cannot be set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// Another user (this id) has the key.
    KeyTaken(u32),
}

impl Registry {
    /// The registry of a users file and a torrents file given as text (no files to
    /// reload: tests, and tools that build one in memory).
    pub fn parse(users: &str, torrents: &str) -> anyhow::Result<Self> {
        let mut tables = Tables {
            torrents: files::parse_torrents(torrents.as_bytes()).context("torrents file")?,
            ..Tables::default()
        };
        files::parse_users(users.as_bytes(), &mut tables).context("users file")?;
        Ok(Self::from_tables(tables, None))
    }

    /// Reads both files.
    pub fn load(users: &Path, torrents: &Path) -> anyhow::Result<Self> {
        let read = [FileStamp::of(users), FileStamp::of(torrents)];
        let tables = Tables::load(users, torrents)?;
        let files = Files {
            users: users.to_owned(),
            torrents: torrents.to_owned(),
            read: read[0].zip(read[1]).map(|(u, t)| [u, t]),
        };
        Ok(Self::from_tables(tables, Some(files)))
    }

    /// The registry of these two files, shared by every tracker of the process that
    /// names the same ones (the `shoal` binary's UDP, HTTP and WebTorrent trackers
    /// then hold one copy, and a change through the API reaches all three).
    pub fn open(users: &Path, torrents: &Path) -> anyhow::Result<Arc<Self>> {
        static OPEN: Mutex<Vec<(PathBuf, PathBuf, Weak<Registry>)>> = Mutex::new(Vec::new());
        let canonical = |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.into());
        let (users_at, torrents_at) = (canonical(users), canonical(torrents));
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|(_, _, registry)| registry.strong_count() > 0);
        let found = open
            .iter()
            .find(|(u, t, _)| *u == users_at && *t == torrents_at)
            .and_then(|(_, _, registry)| registry.upgrade());
        if let Some(registry) = found {
            return Ok(registry);
        }
        let registry = Arc::new(Self::load(users, torrents)?);
        open.push((users_at, torrents_at, Arc::downgrade(&registry)));
        Ok(registry)
    }

    fn from_tables(tables: Tables, files: Option<Files>) -> Self {
        let (users, keys, torrents) = Self::shards_of(&tables, None);
        Self {
            users,
            keys,
            torrents,
            writer: Mutex::new(Writer {
                keys: tables.keys,
                deleted: 0,
                files,
            }),
        }
    }

    /// The lock-free tables of `tables`, split alike as `like`'s (when replacing
    /// them).
    #[allow(clippy::type_complexity)]
    fn shards_of(
        tables: &Tables,
        like: Option<&Self>,
    ) -> (
        CowShards<u32, Entry, DefaultHashBuilder>,
        CowShards<KeyDigest, u32, DigestBuild>,
        CowShards<[u8; 20], Torrent, DefaultHashBuilder>,
    ) {
        let mut users = like.map_or_else(HashMap::default, |like| like.users.empty_map());
        users.extend(tables.users.iter().map(|(&id, &entry)| (id, entry)));
        let mut keys = like.map_or_else(HashMap::default, |like| like.keys.empty_map());
        keys.extend(tables.keys.iter().map(|(&id, &digest)| (digest, id)));
        let mut torrents = like.map_or_else(HashMap::default, |like| like.torrents.empty_map());
        torrents.extend(
            tables
                .torrents
                .iter()
                .map(|(&hash, &torrent)| (hash, torrent)),
        );
        (
            CowShards::from_map(users),
            CowShards::from_map(keys),
            CowShards::from_map(torrents),
        )
    }

    /// Users and torrents registered (deleted users not counted).
    pub fn counts(&self) -> (usize, usize) {
        let deleted = self.writer().deleted;
        (self.users.len() - deleted, self.torrents.len())
    }

    /// The user a key (its digest) belongs to, with their restrictions applied: the
    /// same whichever of their keys it is.
    pub fn user(&self, key: Option<KeyDigest>) -> Result<User, Refusal> {
        let key = key.ok_or(Refusal::MissingKey)?;
        let user = match key.stateless() {
            // A stateless key's MAC was checked when it was digested: its user is
            // known, registered (to restrict them) or not.
            Some((id, version)) => {
                let user = match self.users.get(&id) {
                    Some(Entry::Registered(user)) => user,
                    Some(Entry::Deleted) => return Err(Refusal::UnknownKey),
                    None => User::unrestricted(id),
                };
                if version < user.min_key_version {
                    return Err(Refusal::UnknownKey);
                }
                user
            }
            None => {
                let id = self.keys.get(&key).ok_or(Refusal::UnknownKey)?;
                match self.users.get(&id) {
                    Some(Entry::Registered(user)) => user,
                    // Changed meanwhile (deleted, or its key replaced).
                    _ => return Err(Refusal::UnknownKey),
                }
            }
        };
        if user.disabled {
            return Err(Refusal::Disabled);
        }
        Ok(user)
    }

    /// Whether `key` may announce `info_hash`, downloading when `leeching`.
    pub fn announce(
        &self,
        key: Option<KeyDigest>,
        info_hash: &[u8; 20],
        leeching: bool,
    ) -> Result<Grant, Refusal> {
        let user = self.user(key)?;
        let torrent = self.torrents.get(info_hash).ok_or(Refusal::Unregistered)?;
        if leeching && !user.can_leech {
            return Err(Refusal::CannotLeech);
        }
        Ok(Grant { user, torrent })
    }

    /// Whether `key` may scrape every one of `info_hashes` (a full scrape, with none,
    /// is for registered users too).
    pub fn scrape<'h>(
        &self,
        key: Option<KeyDigest>,
        info_hashes: impl IntoIterator<Item = &'h [u8; 20]>,
    ) -> Result<User, Refusal> {
        let user = self.user(key)?;
        for hash in info_hashes {
            if !self.torrents.contains(hash) {
                return Err(Refusal::Unregistered);
            }
        }
        Ok(user)
    }

    /// The user registered with the site's id `id`.
    pub fn user_by_id(&self, id: u32) -> Option<User> {
        match self.users.get(&id)? {
            Entry::Registered(user) => Some(user),
            Entry::Deleted => None,
        }
    }

    /// Whether user `id` has a passkey (besides the stateless keys any user may
    /// have when a secret is set).
    pub fn has_passkey(&self, id: u32) -> bool {
        self.writer().keys.contains_key(&id)
    }

    /// Sets user `user.id` (a new user, or new settings for one already there) and
    /// changes their passkey as `key` says.
    pub fn put_user(&self, user: User, key: KeyChange<'_>) -> Result<Change, Conflict> {
        let mut writer = self.writer();
        let old_key = writer.keys.get(&user.id).copied();
        let new_key = match key {
            KeyChange::Keep => old_key,
            KeyChange::Remove => None,
            KeyChange::Set(key) => Some(key.digest()),
        };
        if let Some(digest) = new_key
            && let Some(owner) = self.keys.get(&digest)
            && owner != user.id
        {
            return Err(Conflict::KeyTaken(owner));
        }
        let old = self.users.get(&user.id);
        let change = match old {
            Some(Entry::Registered(old)) if old == user && old_key == new_key => {
                return Ok(Change::Unchanged);
            }
            Some(Entry::Registered(_)) => Change::Updated,
            Some(Entry::Deleted) => {
                writer.deleted -= 1;
                Change::Created
            }
            None => Change::Created,
        };
        // The user first, then their key: a reader never finds a key of no user.
        self.users.insert(user.id, Entry::Registered(user));
        if old_key != new_key {
            if let Some(old) = old_key {
                self.keys.remove(&old);
                writer.keys.remove(&user.id);
            }
            if let Some(new) = new_key {
                self.keys.insert(new, user.id);
                writer.keys.insert(user.id, new);
            }
        }
        Ok(change)
    }

    /// Removes user `id` (their passkey stops working, their stateless keys stay
    /// refused until they are registered again); whether there was one.
    pub fn delete_user(&self, id: u32) -> bool {
        let mut writer = self.writer();
        if !matches!(self.users.get(&id), Some(Entry::Registered(_))) {
            return false;
        }
        if let Some(key) = writer.keys.remove(&id) {
            self.keys.remove(&key);
        }
        self.users.insert(id, Entry::Deleted);
        writer.deleted += 1;
        true
    }

    /// The torrent registered under `info_hash`.
    pub fn torrent(&self, info_hash: &[u8; 20]) -> Option<Torrent> {
        self.torrents.get(info_hash)
    }

    /// Registers `info_hash` as `torrent`, or changes its id or factors.
    pub fn put_torrent(&self, info_hash: [u8; 20], torrent: Torrent) -> Change {
        let _writer = self.writer();
        match self.torrents.get(&info_hash) {
            Some(old) if old == torrent => Change::Unchanged,
            old => {
                self.torrents.insert(info_hash, torrent);
                if old.is_some() {
                    Change::Updated
                } else {
                    Change::Created
                }
            }
        }
    }

    /// Removes `info_hash`; whether it was registered.
    pub fn delete_torrent(&self, info_hash: &[u8; 20]) -> bool {
        let _writer = self.writer();
        self.torrents.remove(info_hash).is_some()
    }

    fn writer(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the files again if either was written since they were last read (a
    /// reload for another reason, a certificate or the access list, keeps the changes
    /// made through the API); on any error the old registry stays. Returns what the
    /// status line says of it.
    pub fn reload_and_log(&self, tracker: &str) -> String {
        let mut writer = self.writer();
        let Some(files) = &mut writer.files else {
            drop(writer);
            let (users, torrents) = self.counts();
            return format!("{tracker} registry: {users} users, {torrents} torrents (in memory)");
        };
        let stamps = FileStamp::of(&files.users).zip(FileStamp::of(&files.torrents));
        if stamps.is_some() && stamps.map(|(u, t)| [u, t]) == files.read {
            drop(writer);
            let (users, torrents) = self.counts();
            return format!(
                "{tracker} registry: {users} users, {torrents} torrents (files unchanged)"
            );
        }
        match Tables::load(&files.users, &files.torrents) {
            Ok(tables) => {
                files.read = stamps.map(|(u, t)| [u, t]);
                let (users, torrents) = (tables.users.len(), tables.torrents.len());
                let (user_shards, key_shards, torrent_shards) =
                    Self::shards_of(&tables, Some(self));
                // Users before keys, as in `put_user`.
                self.users.replace_with(user_shards);
                self.keys.replace_with(key_shards);
                self.torrents.replace_with(torrent_shards);
                writer.keys = tables.keys;
                writer.deleted = 0;
                log::info!(
                    "{tracker}: private registry reloaded: {users} users, {torrents} torrents"
                );
                format!("{tracker} registry: {users} users, {torrents} torrents")
            }
            Err(err) => {
                drop(writer);
                let (users, torrents) = self.counts();
                log::error!(
                    "{tracker}: private registry not reloaded, keeping the old one: {err:#}"
                );
                format!(
                    "{tracker} registry kept ({users} users, {torrents} torrents): reload failed"
                )
            }
        }
    }
}

#[cfg(test)]
mod tests;
