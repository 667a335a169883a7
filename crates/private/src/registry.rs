//! The users and torrents a site registers with its tracker, and the decision on each
//! announce and scrape.
//!
//! Both are read from files at start and again on SIGUSR1 (documents/private.md gives
//! the formats), built on the reloading thread and swapped in whole: socket workers
//! never wait, and see either the old registry or the new one.
//!
//! Users file, one user per line, `#` comments and blank lines ignored:
//!
//! ```text
//! # <user id> <passkey> [noleech] [disabled] [peers=N]
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
use std::sync::Arc;

use anyhow::{Context as _, bail};
use arc_swap::ArcSwap;
use hashbrown::HashMap;

use crate::key::{DigestHasher, KeyDigest, Passkey};
use crate::ledger::{Event, Report};

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

/// Users by key digest and torrents by info hash.
#[derive(Debug, Default)]
pub struct Registry {
    users: UserTable,
    torrents: HashMap<[u8; 20], Torrent>,
}

/// Users by key digest, the digest's first word as the table's hash.
type UserTable = HashMap<KeyDigest, User, std::hash::BuildHasherDefault<DigestHasher>>;

impl Registry {
    /// Parses a users file and a torrents file (their texts).
    pub fn parse(users: &str, torrents: &str) -> anyhow::Result<Self> {
        Ok(Self {
            users: parse_users(users.as_bytes()).context("users file")?,
            torrents: parse_torrents(torrents.as_bytes()).context("torrents file")?,
        })
    }

    /// Reads both files.
    pub fn load(users: &Path, torrents: &Path) -> anyhow::Result<Self> {
        // Read line by line: a file of millions of lines is never held whole.
        let open = |path: &Path| {
            std::fs::File::open(path)
                .map(|file| std::io::BufReader::with_capacity(1 << 16, file))
                .with_context(|| format!("cannot read {}", path.display()))
        };
        let registry = Self {
            users: parse_users(open(users)?)
                .with_context(|| format!("in users file {}", users.display()))?,
            torrents: parse_torrents(open(torrents)?)
                .with_context(|| format!("in torrents file {}", torrents.display()))?,
        };
        Ok(registry)
    }

    /// Users and torrents held.
    pub fn counts(&self) -> (usize, usize) {
        (self.users.len(), self.torrents.len())
    }

    /// The user a key (its digest) belongs to.
    pub fn user(&self, key: Option<KeyDigest>) -> Result<User, Refusal> {
        let key = key.ok_or(Refusal::MissingKey)?;
        let user = *self.users.get(&key).ok_or(Refusal::UnknownKey)?;
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
        let torrent = *self.torrents.get(info_hash).ok_or(Refusal::Unregistered)?;
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
            if !self.torrents.contains_key(hash) {
                return Err(Refusal::Unregistered);
            }
        }
        Ok(user)
    }
}

/// The largest users or torrents file read (about 60 bytes a line: 10 million lines).
pub const MAX_FILE: u64 = 1 << 30;

fn parse_users(reader: impl BufRead) -> anyhow::Result<UserTable> {
    let mut users = UserTable::default();
    let mut ids = hashbrown::HashSet::new();
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
        let Some(key) = Passkey::new(key.as_bytes()) else {
            bail!(
                "line {number}: user {id}'s passkey must be {} to {} characters of A-Z, a-z, 0-9, - and _",
                crate::key::MIN_KEY_LEN,
                crate::key::MAX_KEY_LEN
            );
        };
        let mut user = User {
            id,
            can_leech: true,
            disabled: false,
            peer_cap: 0,
        };
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
                _ => bail!(
                    "line {number}: word {} is not an option (known: noleech, disabled, peers=N)",
                    word + 3
                ),
            }
        }
        if !ids.insert(id) {
            bail!("line {number}: user {id} is listed twice");
        }
        if users.insert(key.digest(), user).is_some() {
            bail!("line {number}: user {id}'s passkey is another user's too");
        }
        Ok(())
    })?;
    Ok(users)
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

/// The registry workers read, swapped whole on a reload.
#[derive(Debug)]
pub struct SharedRegistry {
    current: ArcSwap<Registry>,
    users: PathBuf,
    torrents: PathBuf,
}

impl SharedRegistry {
    /// Loads the files.
    pub fn load(users: &Path, torrents: &Path) -> anyhow::Result<Self> {
        let registry = Registry::load(users, torrents)?;
        Ok(Self {
            current: ArcSwap::from_pointee(registry),
            users: users.to_owned(),
            torrents: torrents.to_owned(),
        })
    }

    /// A registry held in memory only, for tests: a reload keeps it (there are no
    /// files to read).
    pub fn fixed(registry: Registry) -> Self {
        Self {
            current: ArcSwap::from_pointee(registry),
            users: PathBuf::new(),
            torrents: PathBuf::new(),
        }
    }

    /// The registry now.
    pub fn current(&self) -> arc_swap::Guard<Arc<Registry>> {
        self.current.load()
    }

    /// Reads the files again; on any error the old registry stays. Returns what the
    /// status line says of it.
    pub fn reload_and_log(&self, tracker: &str) -> String {
        match Registry::load(&self.users, &self.torrents) {
            Ok(registry) => {
                let (users, torrents) = registry.counts();
                self.current.store(Arc::new(registry));
                log::info!(
                    "{tracker}: private registry reloaded: {users} users, {torrents} torrents"
                );
                format!("{tracker} registry: {users} users, {torrents} torrents")
            }
            Err(err) => {
                let (users, torrents) = self.current().counts();
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
        let shared = SharedRegistry::load(&users, &torrents).unwrap();
        assert_eq!(shared.current().counts(), (1, 1));
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
        assert_eq!(shared.current().counts(), (2, 1));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
