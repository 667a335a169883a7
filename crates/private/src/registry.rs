//! The users and torrents a site registers with its tracker, and the decision on each
//! announce and scrape.
//!
//! Both are read from files at start and again on SIGUSR1 when the files changed
//! (documents/private.md gives the formats), and changed one entry at a time through
//! the admin API. Socket workers never wait: the tables are read without locks, and a
//! change swaps in a changed copy of the small part of a table it touches.
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

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use anyhow::{Context as _, bail};
use hashbrown::DefaultHashBuilder;
use hashbrown::HashMap;

use crate::key::{DigestHasher, KeyDigest, Passkey};
use crate::ledger::{Event, Report};
use crate::shards::CowShards;

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
    /// retires a leaked key by raising it. 0 for keys from the users file.
    pub min_key_version: u16,
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

/// Users by key digest and torrents by info hash, as workers read them, and the
/// changes the site makes: whole files reloaded, or one user or torrent at a time
/// through the admin API.
///
/// Reads take no lock (`CowShards`); changes are serialized by `writer`, which
/// also holds what only changes need (user ids to keys, the files' identities).
#[derive(Debug)]
pub struct Registry {
    users: CowShards<KeyDigest, User, DigestBuild>,
    torrents: CowShards<[u8; 20], Torrent, DefaultHashBuilder>,
    writer: Mutex<Writer>,
}

type DigestBuild = std::hash::BuildHasherDefault<DigestHasher>;

/// What changes need besides the tables.
#[derive(Debug)]
struct Writer {
    /// Each user's key digest, by user id: a user is changed and removed by id.
    keys: HashMap<u32, KeyDigest>,
    /// The files, when the registry was read from files.
    files: Option<Files>,
}

/// The users and torrents files and what they were when last read.
#[derive(Debug)]
struct Files {
    users: PathBuf,
    torrents: PathBuf,
    read: Option<[FileStamp; 2]>,
}

/// A file's identity and version as far as the file system tells: inode, size and
/// modification time; equal stamps mean the file was not written since. (The access
/// list has the same check in `shoal_common`; this crate depends on no shoal crate,
/// so that the protocol parsers can use it.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    inode: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl FileStamp {
    fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path).ok()?;
        Some(Self {
            inode: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }
}

/// The users and torrents of a pair of files, parsed.
struct Tables {
    users: UserTable,
    keys: HashMap<u32, KeyDigest>,
    torrents: HashMap<[u8; 20], Torrent>,
}

/// Users by key digest, the digest's first word as the table's hash.
type UserTable = HashMap<KeyDigest, User, DigestBuild>;

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
        let tables = Tables {
            users: UserTable::default(),
            keys: HashMap::new(),
            torrents: parse_torrents(torrents.as_bytes()).context("torrents file")?,
        };
        let tables = parse_users(users.as_bytes(), tables).context("users file")?;
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
        Self {
            users: CowShards::from_map(tables.users),
            torrents: CowShards::from_map(tables.torrents),
            writer: Mutex::new(Writer {
                keys: tables.keys,
                files,
            }),
        }
    }

    /// Users and torrents held.
    pub fn counts(&self) -> (usize, usize) {
        (self.users.len(), self.torrents.len())
    }

    /// The user a key (its digest) belongs to.
    pub fn user(&self, key: Option<KeyDigest>) -> Result<User, Refusal> {
        let key = key.ok_or(Refusal::MissingKey)?;
        let user = match key.stateless() {
            // A stateless key's MAC was checked when it was digested: its user is
            // known, registered (to restrict them) or not.
            Some((id, version)) => {
                let user = self
                    .users
                    .get(&KeyDigest::stateless_user(id))
                    .unwrap_or(User::unrestricted(id));
                if version < user.min_key_version {
                    return Err(Refusal::UnknownKey);
                }
                user
            }
            None => self.users.get(&key).ok_or(Refusal::UnknownKey)?,
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

    /// The user with the site's id `id`.
    pub fn user_by_id(&self, id: u32) -> Option<User> {
        let key = *self.writer().keys.get(&id)?;
        self.users.get(&key)
    }

    /// Sets user `user.id`, whose key is `key` (`None`: they use stateless keys): a
    /// new user, or new settings or a new key (the old one stops working) for one
    /// already there.
    pub fn put_user(&self, user: User, key: Option<Passkey<'_>>) -> Result<Change, Conflict> {
        let digest = match key {
            Some(key) => key.digest(),
            // A user of stateless keys, registered to restrict them.
            None => KeyDigest::stateless_user(user.id),
        };
        let mut writer = self.writer();
        if let Some(owner) = self.users.get(&digest)
            && owner.id != user.id
        {
            return Err(Conflict::KeyTaken(owner.id));
        }
        let change = match writer.keys.insert(user.id, digest) {
            None => Change::Created,
            Some(old) if old != digest => {
                self.users.remove(&old);
                Change::Updated
            }
            Some(_) if self.users.get(&digest) == Some(user) => return Ok(Change::Unchanged),
            Some(_) => Change::Updated,
        };
        self.users.insert(digest, user);
        Ok(change)
    }

    /// Removes user `id`; whether there was one.
    pub fn delete_user(&self, id: u32) -> bool {
        let mut writer = self.writer();
        let Some(key) = writer.keys.remove(&id) else {
            return false;
        };
        self.users.remove(&key);
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
            let (users, torrents) = self.counts();
            return format!("{tracker} registry: {users} users, {torrents} torrents (in memory)");
        };
        let stamps = FileStamp::of(&files.users).zip(FileStamp::of(&files.torrents));
        if stamps.is_some() && stamps.map(|(u, t)| [u, t]) == files.read {
            let (users, torrents) = self.counts();
            return format!(
                "{tracker} registry: {users} users, {torrents} torrents (files unchanged)"
            );
        }
        match Tables::load(&files.users, &files.torrents) {
            Ok(tables) => {
                files.read = stamps.map(|(u, t)| [u, t]);
                let (users, torrents) = (tables.users.len(), tables.torrents.len());
                let mut user_map = self.users.empty_map();
                user_map.extend(tables.users);
                let mut torrent_map = self.torrents.empty_map();
                torrent_map.extend(tables.torrents);
                self.users.replace_with(CowShards::from_map(user_map));
                self.torrents.replace_with(CowShards::from_map(torrent_map));
                writer.keys = tables.keys;
                log::info!(
                    "{tracker}: private registry reloaded: {users} users, {torrents} torrents"
                );
                format!("{tracker} registry: {users} users, {torrents} torrents")
            }
            Err(err) => {
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

impl Tables {
    fn load(users: &Path, torrents: &Path) -> anyhow::Result<Self> {
        // Read line by line: a file of millions of lines is never held whole.
        let open = |path: &Path| {
            std::fs::File::open(path)
                .map(|file| std::io::BufReader::with_capacity(1 << 16, file))
                .with_context(|| format!("cannot read {}", path.display()))
        };
        let tables = Self {
            users: UserTable::default(),
            keys: HashMap::new(),
            torrents: parse_torrents(open(torrents)?)
                .with_context(|| format!("in torrents file {}", torrents.display()))?,
        };
        parse_users(open(users)?, tables)
            .with_context(|| format!("in users file {}", users.display()))
    }
}

/// The largest users or torrents file read (about 60 bytes a line: 10 million lines).
pub const MAX_FILE: u64 = 1 << 30;

/// Adds the users of `reader` to `tables`.
fn parse_users(reader: impl BufRead, mut tables: Tables) -> anyhow::Result<Tables> {
    each_line(reader, |number, line| {
        let mut words = line.split_whitespace();
        let (Some(id), Some(key)) = (words.next(), words.next()) else {
            bail!("line {number}: expected `<user id> <passkey> [options]`");
        };
        // Words are never echoed: in a line with its columns swapped, a word could be
        // a passkey, and the message goes to the log.
        let Ok(id) = id.parse::<u32>() else {
            bail!("line {number}: the first word is not a user id (a number up to 4294967295)");
        };
        let stateless = key == "-";
        let key = if stateless {
            None
        } else {
            Passkey::new(key.as_bytes())
        };
        if !stateless && key.is_none() {
            bail!(
                "line {number}: user {id}'s passkey must be {} to {} characters of A-Z, a-z, 0-9, - and _",
                crate::key::MIN_KEY_LEN,
                crate::key::MAX_KEY_LEN
            );
        };
        let mut user = User::unrestricted(id);
        for (word, option) in words.enumerate() {
            match option.split_once('=') {
                None if option == "noleech" => user.can_leech = false,
                None if option == "disabled" => user.disabled = true,
                Some(("peers", cap)) => {
                    let Ok(cap) = cap.parse() else {
                        bail!("line {number}: peers= takes a number up to 65535");
                    };
                    user.peer_cap = cap;
                }
                Some(("version", version)) if stateless => {
                    let Ok(version) = version.parse() else {
                        bail!("line {number}: version= takes a number up to 65535");
                    };
                    user.min_key_version = version;
                }
                _ => bail!(
                    "line {number}: word {} is not an option (known: noleech, disabled, \
                     peers=N, and version=N for a stateless user, `-` as the passkey)",
                    word + 3
                ),
            }
        }
        let digest = match key {
            Some(key) => key.digest(),
            None => KeyDigest::stateless_user(id),
        };
        if tables.keys.insert(id, digest).is_some() {
            bail!("line {number}: user {id} is listed twice");
        }
        if tables.users.insert(digest, user).is_some() {
            bail!("line {number}: user {id}'s passkey is another user's too");
        }
        Ok(())
    })?;
    Ok(tables)
}

fn parse_torrents(reader: impl BufRead) -> anyhow::Result<HashMap<[u8; 20], Torrent>> {
    let mut torrents = HashMap::new();
    each_line(reader, |number, line| {
        let mut words = line.split_whitespace();
        let (Some(hash), Some(id)) = (words.next(), words.next()) else {
            bail!("line {number}: expected `<info hash> <torrent id> [up=PERCENT] [down=PERCENT]`");
        };
        let Some(hash) = hex_hash(hash) else {
            bail!("line {number}: {hash:?} is not an info hash (40 hexadecimal characters)");
        };
        let id: u32 = id
            .parse()
            .with_context(|| format!("line {number}: torrent id {id:?} is not a number"))?;
        let mut torrent = Torrent {
            id,
            up_factor: 100,
            down_factor: 100,
        };
        for option in words {
            let percent = |value: &str| {
                value
                    .parse::<u16>()
                    .ok()
                    .filter(|&p| p <= 10_000)
                    .with_context(|| format!("line {number}: {option:?}: a percentage, 0 to 10000"))
            };
            match option.split_once('=') {
                Some(("up", value)) => torrent.up_factor = percent(value)?,
                Some(("down", value)) => torrent.down_factor = percent(value)?,
                _ => bail!(
                    "line {number}: unknown option {option:?} (known: up=PERCENT, down=PERCENT)"
                ),
            }
        }
        if torrents.insert(hash, torrent).is_some() {
            bail!("line {number}: info hash listed twice");
        }
        Ok(())
    })?;
    Ok(torrents)
}

/// 40 hexadecimal characters as 20 bytes.
fn hex_hash(text: &str) -> Option<[u8; 20]> {
    let bytes = text.as_bytes();
    if bytes.len() != 40 {
        return None;
    }
    let mut hash = [0u8; 20];
    for (out, pair) in hash.iter_mut().zip(bytes.chunks(2)) {
        let digit = |b: u8| (b as char).to_digit(16);
        *out = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(hash)
}

/// Calls `each` with the number and the content (its comment and surrounding blanks
/// taken off) of every line of `reader` that has any, refusing past [`MAX_FILE`]
/// bytes.
fn each_line(
    reader: impl BufRead,
    mut each: impl FnMut(usize, &str) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut reader = reader.take(MAX_FILE + 1);
    let mut line = String::new();
    let (mut number, mut read) = (0, 0u64);
    loop {
        line.clear();
        let n = reader.read_line(&mut line)?;
        if n == 0 {
            return Ok(());
        }
        read += n as u64;
        if read > MAX_FILE {
            bail!("larger than {MAX_FILE} bytes");
        }
        number += 1;
        let content = line.split('#').next().unwrap_or_default().trim();
        if !content.is_empty() {
            each(number, content)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
    const BOB: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90";
    const CAROL: &str = "ccccccccccccccccccccccccccccccc1";
    const HASH: &str = "0123456789abcdef0123456789abcdef01234567";
    const V2: &str = "89abcdef0123456789abcdef0123456789abcdef";

    fn registry() -> Registry {
        Registry::parse(
            &format!("# users\n17 {ALICE}\n18 {BOB} noleech peers=3  # seeding only\n\n19 {CAROL} disabled\n"),
            &format!("{HASH} 1001 down=0\n{V2} 1001 down=0\n"),
        )
        .unwrap()
    }

    fn key(text: &str) -> Option<KeyDigest> {
        Passkey::new(text.as_bytes()).map(Passkey::digest)
    }

    fn hash(hex: &str) -> [u8; 20] {
        hex_hash(hex).unwrap()
    }

    #[test]
    fn announces_are_granted_or_refused_for_a_reason() {
        let registry = registry();
        let grant = registry.announce(key(ALICE), &hash(HASH), true).unwrap();
        assert_eq!(
            (grant.user.id, grant.torrent.id, grant.torrent.down_factor),
            (17, 1001, 0)
        );
        // The v2 hash of the same hybrid torrent is the same torrent.
        assert_eq!(
            registry
                .announce(key(ALICE), &hash(V2), true)
                .unwrap()
                .torrent
                .id,
            1001
        );
        assert_eq!(
            registry.announce(None, &hash(HASH), true),
            Err(Refusal::MissingKey)
        );
        assert_eq!(
            registry.announce(key("00000000000000000000000000000bad"), &hash(HASH), true),
            Err(Refusal::UnknownKey)
        );
        // Too short to be a key: as if none was given.
        assert_eq!(
            registry.announce(key("0000"), &hash(HASH), true),
            Err(Refusal::MissingKey)
        );
        assert_eq!(
            registry.announce(key(CAROL), &hash(HASH), false),
            Err(Refusal::Disabled)
        );
        assert_eq!(
            registry.announce(key(ALICE), &[7; 20], false),
            Err(Refusal::Unregistered)
        );
        assert_eq!(
            registry.announce(key(BOB), &hash(HASH), true),
            Err(Refusal::CannotLeech)
        );
        let seeding = registry.announce(key(BOB), &hash(HASH), false).unwrap();
        assert_eq!(seeding.user.peer_cap, 3);
        for refusal in [
            Refusal::MissingKey,
            Refusal::UnknownKey,
            Refusal::Unregistered,
        ] {
            assert!(!refusal.reason().contains(ALICE));
        }
    }

    #[test]
    fn scrapes_need_a_user_and_registered_torrents() {
        let registry = registry();
        assert_eq!(registry.scrape(key(ALICE), [&hash(HASH)]).unwrap().id, 17);
        assert_eq!(registry.scrape(key(ALICE), []).unwrap().id, 17);
        assert_eq!(
            registry.scrape(key(ALICE), [&hash(HASH), &[7; 20]]),
            Err(Refusal::Unregistered)
        );
        assert_eq!(
            registry.scrape(None, [&hash(HASH)]),
            Err(Refusal::MissingKey)
        );
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        let users = |text: &str| format!("{:#}", Registry::parse(text, "").unwrap_err());
        assert!(
            users("17\n").contains("line 1: expected"),
            "{}",
            users("17\n")
        );
        assert!(users(&format!("x {ALICE}\n")).contains("the first word is not a user id"));
        assert!(users("17 a/b\n").contains("line 1: user 17's passkey must be"));
        assert!(users(&format!("17 {ALICE} vip\n")).contains("word 3 is not an option"));
        // Columns swapped, or a key where an option belongs: the key is not echoed.
        assert!(!users(&format!("{ALICE} 17\n")).contains(ALICE));
        assert!(!users(&format!("17 {ALICE} {BOB}\n")).contains(BOB));
        assert!(
            users(&format!("17 {ALICE}\n17 {BOB}\n")).contains("line 2: user 17 is listed twice")
        );
        assert!(users(&format!("17 {ALICE}\n18 {ALICE}\n")).contains("another user's too"));
        let torrents = |text: &str| format!("{:#}", Registry::parse("", text).unwrap_err());
        assert!(torrents("abc 1\n").contains("line 1:"));
        assert!(torrents(&format!("{HASH} 1 down=x\n")).contains("a percentage"));
        assert!(
            torrents(&format!("{HASH} 1\n{HASH} 2\n")).contains("line 2: info hash listed twice")
        );
        // No key text in any message.
        assert!(!users(&format!("17 {ALICE}\n18 {ALICE}\n")).contains(ALICE));
    }

    #[test]
    fn a_failed_reload_keeps_the_old_registry() {
        let dir = std::env::temp_dir().join(format!("shoal-private-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (users, torrents) = (dir.join("users"), dir.join("torrents"));
        std::fs::write(&users, format!("17 {ALICE}\n")).unwrap();
        std::fs::write(&torrents, format!("{HASH} 1\n")).unwrap();
        let shared = Registry::load(&users, &torrents).unwrap();
        assert_eq!(shared.counts(), (1, 1));
        std::fs::write(&users, format!("17 {ALICE}\n18 {BOB}\n")).unwrap();
        assert_eq!(
            shared.reload_and_log("udp"),
            "udp registry: 2 users, 1 torrents"
        );
        std::fs::write(&users, "bad line\n").unwrap();
        assert_eq!(
            shared.reload_and_log("udp"),
            "udp registry kept (2 users, 1 torrents): reload failed"
        );
        assert_eq!(shared.counts(), (2, 1));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn users_and_torrents_change_one_at_a_time() {
        let registry = registry();
        let alice = registry.user_by_id(17).unwrap();
        let passkey = |text: &'static str| Passkey::new(text.as_bytes());
        assert_eq!(
            registry.put_user(alice, passkey(ALICE)),
            Ok(Change::Unchanged)
        );
        // A new key for Alice: the old one stops working.
        const NEW: &str = "n3wn3wn3wn3wn3wn3wn3wn3wn3wn3wn3";
        assert_eq!(registry.put_user(alice, passkey(NEW)), Ok(Change::Updated));
        assert_eq!(registry.user(key(ALICE)), Err(Refusal::UnknownKey));
        assert_eq!(registry.user(key(NEW)).unwrap().id, 17);
        // Bob's key cannot become Alice's.
        assert_eq!(
            registry.put_user(alice, passkey(BOB)),
            Err(Conflict::KeyTaken(18))
        );
        let dave = User {
            id: 20,
            can_leech: false,
            disabled: false,
            peer_cap: 2,
            min_key_version: 0,
        };
        assert_eq!(registry.put_user(dave, passkey(ALICE)), Ok(Change::Created));
        assert_eq!(registry.user(key(ALICE)), Ok(dave));
        assert_eq!(
            registry.put_user(
                User {
                    peer_cap: 5,
                    ..dave
                },
                passkey(ALICE)
            ),
            Ok(Change::Updated)
        );
        assert_eq!(registry.user_by_id(20).unwrap().peer_cap, 5);
        assert!(registry.delete_user(20));
        assert!(!registry.delete_user(20));
        assert_eq!(registry.user(key(ALICE)), Err(Refusal::UnknownKey));
        assert_eq!(registry.counts(), (3, 2));

        let torrent = Torrent {
            id: 7,
            up_factor: 200,
            down_factor: 0,
        };
        assert_eq!(registry.put_torrent([7; 20], torrent), Change::Created);
        assert_eq!(registry.put_torrent([7; 20], torrent), Change::Unchanged);
        assert_eq!(
            registry.announce(key(NEW), &[7; 20], true).unwrap().torrent,
            torrent
        );
        assert!(registry.delete_torrent(&[7; 20]));
        assert!(!registry.delete_torrent(&[7; 20]));
        assert_eq!(
            registry.announce(key(NEW), &[7; 20], true),
            Err(Refusal::Unregistered)
        );
    }

    #[test]
    fn a_reload_reads_files_only_when_they_changed_and_trackers_share_one_registry() {
        let dir = std::env::temp_dir().join(format!("shoal-private-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (users, torrents) = (dir.join("users"), dir.join("torrents"));
        std::fs::write(&users, format!("17 {ALICE}\n")).unwrap();
        std::fs::write(&torrents, format!("{HASH} 1\n")).unwrap();
        let udp = Registry::open(&users, &torrents).unwrap();
        let http = Registry::open(&dir.join(".").join("users"), &torrents).unwrap();
        assert!(Arc::ptr_eq(&udp, &http), "one registry for the same files");
        let bob = User {
            id: 18,
            can_leech: true,
            disabled: false,
            peer_cap: 0,
            min_key_version: 0,
        };
        udp.put_user(bob, Passkey::new(BOB.as_bytes())).unwrap();
        assert_eq!(http.user(key(BOB)).unwrap().id, 18);
        // Files unchanged: the change made through the API stays.
        assert_eq!(
            udp.reload_and_log("udp"),
            "udp registry: 2 users, 1 torrents (files unchanged)"
        );
        // The site wrote its files again: they are the registry now.
        std::fs::write(&users, format!("17 {ALICE}\n19 {CAROL}\n")).unwrap();
        assert_eq!(
            udp.reload_and_log("udp"),
            "udp registry: 2 users, 1 torrents"
        );
        assert_eq!(http.user(key(BOB)), Err(Refusal::UnknownKey));
        assert_eq!(http.user_by_id(19).unwrap().id, 19);
        assert!(http.delete_user(19));
        drop((udp, http));
        // Nothing holds it: opened again, it is read again.
        let again = Registry::open(&users, &torrents).unwrap();
        assert_eq!(again.counts(), (2, 1));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn stateless_keys_need_no_registration_and_old_versions_can_be_retired() {
        const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef: a test secret";
        crate::set_secret(SECRET).unwrap();
        assert!(crate::set_secret(SECRET).is_ok(), "the same secret again");
        assert!(crate::set_secret(b"another secret, at least 32 bytes long").is_err());
        assert!(crate::set_secret(b"short").is_err());
        let registry =
            Registry::parse(&format!("17 {ALICE}\n18 - noleech version=2\n"), "").unwrap();
        let digest = |text: &str| Passkey::new(text.as_bytes()).map(Passkey::digest);
        let key42 = crate::derive_key(SECRET, 42, 1);
        assert_eq!(registry.user(digest(&key42)), Ok(User::unrestricted(42)));
        // A MAC with one digit changed, or another user's id on it: no user.
        let mut forged = key42.clone().into_bytes();
        let last = forged.len() - 1;
        forged[last] = if forged[last] == b'0' { b'1' } else { b'0' };
        let forged = String::from_utf8(forged).unwrap();
        assert_eq!(registry.user(digest(&forged)), Err(Refusal::UnknownKey));
        let moved = key42.replacen("42-", "43-", 1);
        assert_eq!(registry.user(digest(&moved)), Err(Refusal::UnknownKey));
        // User 18 is registered to restrict them: seeding only, version 1 retired.
        let old = crate::derive_key(SECRET, 18, 1);
        assert_eq!(registry.user(digest(&old)), Err(Refusal::UnknownKey));
        let bob = registry
            .user(digest(&crate::derive_key(SECRET, 18, 2)))
            .unwrap();
        assert!(!bob.can_leech);
        // Registered through the API without a key: disabled.
        let disabled = User {
            disabled: true,
            ..User::unrestricted(42)
        };
        assert_eq!(registry.put_user(disabled, None), Ok(Change::Created));
        assert_eq!(registry.user(digest(&key42)), Err(Refusal::Disabled));
        assert_eq!(registry.user_by_id(42), Some(disabled));
        // Keys from the users file work as before.
        assert_eq!(registry.user(key(ALICE)).unwrap().id, 17);
    }
}
