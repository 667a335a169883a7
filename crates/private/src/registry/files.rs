//! The users and torrents files: reading them into tables, and telling whether they
//! were written since they were last read.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use hashbrown::HashMap;

use super::{Entry, Torrent, User};
use crate::key::{KeyDigest, Passkey};

/// The users and torrents files and what they were when last read.
#[derive(Debug)]
pub(super) struct Files {
    pub(super) users: PathBuf,
    pub(super) torrents: PathBuf,
    pub(super) read: Option<[FileStamp; 2]>,
}

/// A file's identity and version as far as the file system tells: inode, size and
/// modification time; equal stamps mean the file was not written since. (The access
/// list has the same check in `shoal_common`; this crate depends on no shoal crate,
/// so that the protocol parsers can use it.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FileStamp {
    inode: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl FileStamp {
    pub(super) fn of(path: &Path) -> Option<Self> {
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
#[derive(Debug, Default)]
pub(super) struct Tables {
    /// Every user, by id.
    pub(super) users: HashMap<u32, Entry>,
    /// The users' passkeys (those that have one), by id.
    pub(super) keys: HashMap<u32, KeyDigest>,
    pub(super) torrents: HashMap<[u8; 20], Torrent>,
}

impl Tables {
    /// Both files' tables.
    pub(super) fn load(users: &Path, torrents: &Path) -> anyhow::Result<Self> {
        // Read line by line: a file of millions of lines is never held whole.
        let open = |path: &Path| {
            std::fs::File::open(path)
                .map(|file| std::io::BufReader::with_capacity(1 << 16, file))
                .with_context(|| format!("cannot read {}", path.display()))
        };
        let mut tables = Self {
            torrents: parse_torrents(open(torrents)?)
                .with_context(|| format!("in torrents file {}", torrents.display()))?,
            ..Self::default()
        };
        parse_users(open(users)?, &mut tables)
            .with_context(|| format!("in users file {}", users.display()))?;
        Ok(tables)
    }
}

/// The largest users or torrents file read (about 60 bytes a line: 10 million lines).
pub const MAX_FILE: u64 = 1 << 30;

/// Adds the users of `reader` to `tables`.
pub(super) fn parse_users(reader: impl BufRead, tables: &mut Tables) -> anyhow::Result<()> {
    let mut owners: HashMap<KeyDigest, u32> = HashMap::new();
    each_line(reader, |number, line| {
        let mut words = line.split_whitespace();
        let (Some(id), Some(key)) = (words.next(), words.next()) else {
            bail!("line {number}: expected `<user id> <passkey> [options]`");
        };
        // Words are never echoed: in a line with its columns swapped, a word could be
        // a passkey, and the message goes to the log.
        let Some(id) = canonical_number(id) else {
            bail!(
                "line {number}: the first word is not a user id (a number up to 4294967295, \
                 without sign or leading zeros)"
            );
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
                Some(("version", version)) => {
                    let Ok(version) = version.parse() else {
                        bail!("line {number}: version= takes a number up to 65535");
                    };
                    user.min_key_version = version;
                }
                _ => bail!(
                    "line {number}: word {} is not an option (known: noleech, disabled, \
                     peers=N, version=N, and `-` as the passkey of a user of stateless keys)",
                    word + 3
                ),
            }
        }
        if tables.users.insert(id, Entry::Registered(user)).is_some() {
            bail!("line {number}: user {id} is listed twice");
        }
        if let Some(key) = key {
            let digest = key.digest();
            if owners.insert(digest, id).is_some() {
                bail!("line {number}: user {id}'s passkey is another user's too");
            }
            tables.keys.insert(id, digest);
        }
        Ok(())
    })
}

pub(super) fn parse_torrents(reader: impl BufRead) -> anyhow::Result<HashMap<[u8; 20], Torrent>> {
    let mut torrents = HashMap::new();
    each_line(reader, |number, line| {
        let mut words = line.split_whitespace();
        let (Some(hash), Some(id)) = (words.next(), words.next()) else {
            bail!("line {number}: expected `<info hash> <torrent id> [up=PERCENT] [down=PERCENT]`");
        };
        let Some(hash) = hex_hash(hash) else {
            bail!("line {number}: {hash:?} is not an info hash (40 hexadecimal characters)");
        };
        let id = canonical_number(id).with_context(|| {
            format!(
                "line {number}: torrent id {id:?} is not a number up to 4294967295 (without \
                 sign or leading zeros)"
            )
        })?;
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

/// A number in its one written form: decimal digits, no sign, no leading zero (but
/// `0` itself), at most `u32::MAX`. `+18` and `018` would otherwise be user 18 under
/// another spelling.
pub fn canonical_number(text: &str) -> Option<u32> {
    let digits = text.as_bytes();
    let canonical = !digits.is_empty()
        && digits.iter().all(u8::is_ascii_digit)
        && (digits[0] != b'0' || digits.len() == 1);
    canonical.then(|| text.parse().ok()).flatten()
}

/// 40 hexadecimal characters as 20 bytes.
pub(super) fn hex_hash(text: &str) -> Option<[u8; 20]> {
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
