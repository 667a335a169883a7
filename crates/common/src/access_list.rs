//! Access lists: which info hashes a tracker serves.
//!
//! The list is a file of 40-character hex info hashes, one per line; blank lines and
//! `#` comments are ignored. In `allow` mode only listed torrents are served, in `deny`
//! mode listed torrents are refused.
//!
//! Workers read the current list through an [`ArcSwap`]: a reload builds the new list
//! on the reloading thread and swaps the pointer in one atomic store, so workers never
//! wait and always see either the whole old list or the whole new one. A reload that
//! fails (unreadable file, bad line) keeps the old list.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use arc_swap::ArcSwap;
use hashbrown::HashSet;
use serde::{Deserialize, Serialize};
use shoal_toml_config::TomlConfig;
use thiserror::Error;

use crate::config::Problems;

/// How the access list is applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(rename_all = "lowercase")]
pub enum AccessListMode {
    /// Serve every torrent; the file is not read.
    #[default]
    Off,
    /// Serve only the torrents listed in the file.
    Allow,
    /// Serve every torrent except those listed in the file.
    Deny,
}

/// Access list settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct AccessListConfig {
    /// Whether and how to filter torrents by info hash.
    pub mode: AccessListMode,
    /// File of info hashes: 40 hex characters per line, blank lines and `#` comments
    /// allowed. Read at start and again on SIGUSR1. After a chroot (see
    /// the privileges section) the path is resolved inside the chroot.
    pub path: PathBuf,
}

impl AccessListConfig {
    /// Records configuration problems.
    pub fn validate(&self, problems: &mut Problems) {
        if self.mode == AccessListMode::Off {
            return;
        }
        if self.path.as_os_str().is_empty() {
            problems.add(
                "path",
                "must name a file when mode is \"allow\" or \"deny\"",
            );
        } else if let Some(problem) = crate::files::unreadable(&self.path) {
            problems.add("path", problem);
        }
    }
}

/// A set of info hashes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessList {
    hashes: HashSet<[u8; 20]>,
}

/// A line of an access list file that is not an info hash.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("line {line}: {problem}")]
pub struct AccessListLineError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub problem: String,
}

impl AccessList {
    /// Parses the file format described in the module docs.
    pub fn parse(text: &str) -> Result<Self, AccessListLineError> {
        let mut hashes = HashSet::new();
        for (number, line) in text.lines().enumerate() {
            let content = line.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let hash = parse_hex_hash(content).map_err(|problem| AccessListLineError {
                line: number + 1,
                problem,
            })?;
            hashes.insert(hash);
        }
        Ok(Self { hashes })
    }

    /// Reads and parses a file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = crate::files::read_to_string_bounded(path, crate::files::MAX_ACCESS_LIST_FILE)
            .with_context(|| format!("cannot read access list {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in access list {}", path.display()))
    }

    /// Whether `info_hash` is listed.
    pub fn contains(&self, info_hash: &[u8; 20]) -> bool {
        self.hashes.contains(info_hash)
    }

    /// The listed hashes, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8; 20]> {
        self.hashes.iter()
    }

    /// Number of distinct hashes.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

/// 40 hexadecimal characters as an info hash; the problem in words when not.
pub fn parse_hex_hash(text: &str) -> Result<[u8; 20], String> {
    if text.len() != 40 {
        return Err(format!(
            "expected 40 hexadecimal characters, found {} characters: {text:?}",
            text.chars().count()
        ));
    }
    let mut hash = [0u8; 20];
    for (byte, pair) in hash.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
        let digit = |c: u8| (c as char).to_digit(16);
        let (Some(high), Some(low)) = (digit(pair[0]), digit(pair[1])) else {
            return Err(format!("not hexadecimal: {text:?}"));
        };
        *byte = (high * 16 + low) as u8;
    }
    Ok(hash)
}

/// The access list as workers see it: a mode and the current list, reloadable.
#[derive(Debug)]
pub struct AccessControl {
    mode: AccessListMode,
    path: PathBuf,
    list: ArcSwap<AccessList>,
    /// The file's stamp when last read; changes (reloads, API edits) hold the lock
    /// so that none is lost to another.
    read: std::sync::Mutex<Option<crate::FileStamp>>,
}

/// What an edit of the list did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListEdit {
    /// Hashes that were not listed and are now.
    pub added: usize,
    /// Hashes that were listed and are not now.
    pub removed: usize,
    /// The list's length after the edit.
    pub len: usize,
}

impl AccessControl {
    /// Loads the list named by `config` (nothing is read when the mode is off).
    pub fn from_config(config: &AccessListConfig) -> anyhow::Result<Self> {
        let list = match config.mode {
            AccessListMode::Off => AccessList::default(),
            AccessListMode::Allow | AccessListMode::Deny => AccessList::load(&config.path)?,
        };
        let read = match config.mode {
            AccessListMode::Off => None,
            AccessListMode::Allow | AccessListMode::Deny => crate::FileStamp::of(&config.path),
        };
        Ok(Self {
            mode: config.mode,
            path: config.path.clone(),
            list: ArcSwap::from_pointee(list),
            read: std::sync::Mutex::new(read),
        })
    }

    /// An access control with a given list (for tests and embedding).
    pub fn with_list(mode: AccessListMode, list: AccessList) -> Self {
        Self {
            mode,
            path: PathBuf::new(),
            list: ArcSwap::from_pointee(list),
            read: std::sync::Mutex::new(None),
        }
    }

    /// The mode.
    pub fn mode(&self) -> AccessListMode {
        self.mode
    }

    /// Whether `info_hash` may be served now.
    pub fn allows(&self, info_hash: &[u8; 20]) -> bool {
        match self.mode {
            AccessListMode::Off => true,
            AccessListMode::Allow => self.list.load().contains(info_hash),
            AccessListMode::Deny => !self.list.load().contains(info_hash),
        }
    }

    /// A consistent view for checking many hashes (one atomic load for all of them).
    pub fn view(&self) -> AccessView {
        AccessView {
            mode: self.mode,
            list: self.list.load_full(),
        }
    }

    /// Re-reads the file; on failure the old list stays. Returns the new list's size.
    ///
    /// A reload must not wipe swarms by accident: every torrent not on a new allow list
    /// is dropped at the next cleaning. So a file that looks half-written (its last line
    /// has no newline: it is still being written, or was cut short) is refused, and so
    /// is an empty allow list (it would stop every torrent). Write a new list to a
    /// temporary file and rename it over the old one.
    pub fn reload(&self) -> anyhow::Result<usize> {
        self.reload_if_changed().map(|(len, _)| len)
    }

    /// [`reload`](Self::reload), skipped when the file was not written since it was
    /// last read (SIGUSR1 is sent for other files too, and a reload would undo the
    /// edits made through the admin API). Returns the list's size and whether the
    /// file was read.
    pub fn reload_if_changed(&self) -> anyhow::Result<(usize, bool)> {
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        let old = self.list.load().len();
        if self.mode == AccessListMode::Off {
            return Ok((old, false));
        }
        let stamp = crate::FileStamp::of(&self.path);
        if stamp.is_some() && stamp == *read {
            return Ok((old, false));
        }
        let path = self.path.display();
        let text =
            crate::files::read_to_string_bounded(&self.path, crate::files::MAX_ACCESS_LIST_FILE)
                .with_context(|| format!("cannot read access list {path}"))?;
        if !text.is_empty() && !text.ends_with('\n') {
            anyhow::bail!(
                "access list {path} does not end with a newline: it looks cut short or still \
                 being written (write the new list to a temporary file and rename it over the \
                 old one)"
            );
        }
        let list = AccessList::parse(&text).with_context(|| format!("in access list {path}"))?;
        if self.mode == AccessListMode::Allow && list.is_empty() {
            anyhow::bail!(
                "access list {path} is empty: an empty allow list would stop every torrent \
                 ({old} allowed now); refusing it"
            );
        }
        let new = list.len();
        self.list.store(Arc::new(list));
        *read = stamp;
        Ok((new, true))
    }

    /// Adds and removes hashes (the admin API): a changed copy of the list swapped in,
    /// so workers never wait. Refused when the list is off, or when it would leave an
    /// allow list empty, as a reload is.
    pub fn edit(&self, add: &[[u8; 20]], remove: &[[u8; 20]]) -> Result<ListEdit, String> {
        let _read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        if self.mode == AccessListMode::Off {
            return Err("the access list is off (access_list.mode = \"off\")".into());
        }
        let mut list = AccessList::clone(&self.list.load());
        let mut edit = ListEdit::default();
        for hash in remove {
            edit.removed += usize::from(list.hashes.remove(hash));
        }
        for hash in add {
            edit.added += usize::from(list.hashes.insert(*hash));
        }
        edit.len = list.len();
        if self.mode == AccessListMode::Allow && list.is_empty() {
            return Err("an empty allow list would stop every torrent; refusing it".into());
        }
        if edit.added + edit.removed > 0 {
            self.list.store(Arc::new(list));
        }
        Ok(edit)
    }

    /// Whether `info_hash` is on the list (whatever the mode makes of it).
    pub fn listed(&self, info_hash: &[u8; 20]) -> bool {
        self.list.load().contains(info_hash)
    }

    /// Hashes on the list.
    pub fn len(&self) -> usize {
        self.list.load().len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.list.load().is_empty()
    }

    /// Replaces the list directly (embedding and tests).
    pub fn replace(&self, list: AccessList) {
        self.list.store(Arc::new(list));
    }

    /// Reloads and logs the outcome; for signal handlers.
    pub fn reload_and_log(&self, tracker: &str) -> Option<String> {
        if self.mode == AccessListMode::Off {
            return None;
        }
        let hashes = |len: usize| format!("{len} info hashes");
        let held = hashes(self.list.load().len());
        let outcome = match self.reload_if_changed() {
            Ok((_, false)) => crate::Reloaded::Unchanged,
            Ok((len, true)) => crate::Reloaded::Read(hashes(len)),
            Err(err) => crate::Reloaded::Failed(err),
        };
        Some(crate::report_reload(
            tracker,
            "access list",
            &self.path.display(),
            &held,
            outcome,
        ))
    }
}

/// One point-in-time view of an [`AccessControl`].
#[derive(Clone, Debug)]
pub struct AccessView {
    mode: AccessListMode,
    list: Arc<AccessList>,
}

impl AccessView {
    /// Whether `info_hash` may be served.
    pub fn allows(&self, info_hash: &[u8; 20]) -> bool {
        match self.mode {
            AccessListMode::Off => true,
            AccessListMode::Allow => self.list.contains(info_hash),
            AccessListMode::Deny => !self.list.contains(info_hash),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef01234567";
    const B: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

    fn hash(hex: &str) -> [u8; 20] {
        parse_hex_hash(hex).unwrap()
    }

    #[test]
    fn parses_hashes_comments_and_blank_lines() {
        let text = format!("# torrents we host\n\n{A}\n  {B}  # trailing comment\n\n");
        let list = AccessList::parse(&text).unwrap();
        assert_eq!(list.len(), 2);
        assert!(list.contains(&hash(A)));
        assert!(list.contains(&[0xaa; 20]), "upper-case hex is accepted");
        assert_eq!(hash(A)[..3], [0x01, 0x23, 0x45]);
    }

    #[test]
    fn bad_lines_are_reported_with_their_number() {
        let text = format!("{A}\n# fine\nnot-a-hash\n");
        let err = AccessList::parse(&text).unwrap_err();
        assert_eq!(err.line, 3);
        assert!(
            err.to_string()
                .starts_with("line 3: expected 40 hexadecimal characters"),
            "{err}"
        );

        let err = AccessList::parse(&"g".repeat(40)).unwrap_err();
        assert_eq!(err.line, 1);
        assert!(err.problem.contains("not hexadecimal"), "{err}");
    }

    #[test]
    fn modes_allow_and_deny() {
        let list = AccessList::parse(A).unwrap();
        let allow = AccessControl::with_list(AccessListMode::Allow, list.clone());
        let deny = AccessControl::with_list(AccessListMode::Deny, list.clone());
        let off = AccessControl::with_list(AccessListMode::Off, list);
        assert!(allow.allows(&hash(A)) && !allow.allows(&hash(B)));
        assert!(!deny.allows(&hash(A)) && deny.allows(&hash(B)));
        assert!(off.allows(&hash(A)) && off.allows(&hash(B)));
        assert!(allow.view().allows(&hash(A)) && !allow.view().allows(&hash(B)));
    }

    #[test]
    fn failed_reload_keeps_the_old_list() {
        let dir = std::env::temp_dir().join(format!("shoal-access-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("list");
        std::fs::write(&path, A).unwrap();
        let config = AccessListConfig {
            mode: AccessListMode::Allow,
            path: path.clone(),
        };
        let control = AccessControl::from_config(&config).unwrap();
        assert!(control.allows(&hash(A)));

        std::fs::write(&path, format!("{B}\nbroken\n")).unwrap();
        let err = control.reload().unwrap_err();
        assert!(format!("{err:#}").contains("line 2"), "{err:#}");
        assert!(control.allows(&hash(A)) && !control.allows(&hash(B)));

        std::fs::write(&path, format!("{B}\n")).unwrap();
        assert_eq!(control.reload().unwrap(), 1);
        assert!(!control.allows(&hash(A)) && control.allows(&hash(B)));

        // Cut short, or empty: refused, and the list stays.
        std::fs::write(&path, format!("{A}\n{}", &B[..20])).unwrap();
        let err = control.reload().unwrap_err();
        assert!(
            format!("{err:#}").contains("does not end with a newline"),
            "{err:#}"
        );
        std::fs::write(&path, format!("{A}\n{B}")).unwrap();
        assert!(control.reload().is_err(), "a last line without newline");
        std::fs::write(&path, "# nothing here yet\n").unwrap();
        let err = control.reload().unwrap_err();
        assert!(format!("{err:#}").contains("empty allow list"), "{err:#}");
        assert!(!control.allows(&hash(A)) && control.allows(&hash(B)));

        std::fs::remove_file(&path).unwrap();
        assert!(control.reload().is_err());
        assert!(control.allows(&hash(B)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn edits_stay_until_the_file_changes() {
        let dir = std::env::temp_dir().join(format!("shoal-access-edit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("list");
        std::fs::write(&path, format!("{A}\n")).unwrap();
        let config = AccessListConfig {
            mode: AccessListMode::Allow,
            path: path.clone(),
        };
        let control = AccessControl::from_config(&config).unwrap();
        let edit = control.edit(&[hash(B), hash(A)], &[]).unwrap();
        assert_eq!(
            edit,
            ListEdit {
                added: 1,
                removed: 0,
                len: 2
            }
        );
        assert!(control.allows(&hash(B)));
        // Emptying an allow list is refused, and changes nothing.
        assert!(control.edit(&[], &[hash(A), hash(B)]).is_err());
        assert_eq!(control.len(), 2);
        // A reload for another file keeps the edit; a new file replaces it.
        assert_eq!(control.reload_if_changed().unwrap(), (2, false));
        std::fs::write(&path, format!("{A}\n# rewritten\n")).unwrap();
        assert_eq!(control.reload_if_changed().unwrap(), (1, true));
        assert!(!control.allows(&hash(B)));
        let off = AccessControl::with_list(AccessListMode::Off, AccessList::default());
        assert!(off.edit(&[hash(A)], &[]).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn allow_mode_needs_a_path() {
        let mut problems = Problems::default();
        AccessListConfig {
            mode: AccessListMode::Allow,
            path: PathBuf::new(),
        }
        .validate(&mut problems);
        assert!(
            problems.to_string().contains("path: must name a file"),
            "{problems}"
        );
    }
}
