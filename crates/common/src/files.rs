//! Reading the files an operator names (config, access list, state) with a bound.
//!
//! `std::fs::read` reads whatever the path gives until it ends: a path that names
//! `/dev/zero`, a FIFO or a file still being appended to would make the tracker read
//! without end, gigabytes in seconds, at start or on a reload. These refuse anything
//! but a regular file, and a file larger than the caller's limit, with both numbers
//! in the error.

use std::fs::File;
use std::io::{self, Read as _};
use std::path::Path;

/// Most bytes of a config file: the generated file with every key and its comment is
/// about 30 KB.
pub(crate) const MAX_CONFIG_FILE: u64 = 1 << 20;

/// Most bytes of an access list: 41 bytes a line, so about 26 million info hashes.
pub(crate) const MAX_ACCESS_LIST_FILE: u64 = 1 << 30;

/// The bytes of the regular file at `path`, refused if it is anything else or holds
/// more than `limit` bytes.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = File::open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a device, FIFO or directory is never read)",
        ));
    }
    let too_large = |size: u64| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{size} bytes or more, over the limit of {limit}"),
        )
    };
    if metadata.len() > limit {
        return Err(too_large(metadata.len()));
    }
    // The size may change while it is read: the limit holds whatever happens.
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Why the file at `path` cannot be read as a tracker would read it, if it cannot:
/// for config checks (`-P`), so that a missing or unreadable file is reported with
/// the config's other problems instead of at the first start. Checked for this
/// process and, when set, for the user the tracker will run as ([`check_files_for`]).
pub fn unreadable(path: &Path) -> Option<String> {
    let problem = match File::open(path).and_then(|file| file.metadata()) {
        Ok(metadata) if metadata.is_file() => {
            return checked_user().and_then(|user| user.denied(path, Access::Read));
        }
        Ok(_) => "is not a regular file".to_owned(),
        Err(err) if err.kind() == io::ErrorKind::NotFound => "does not exist".to_owned(),
        Err(err) => format!("cannot be read ({err})"),
    };
    Some(format!("{} {problem}", path.display()))
}

/// Why the tracker could not create files in the directory at `path`, if it could
/// not: for this process and, when set, for the user it will run as
/// ([`check_files_for`]).
pub fn unwritable_directory(path: &Path) -> Option<String> {
    use std::os::unix::ffi::OsStrExt as _;
    let problem = match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_dir() => {
            let writable =
                std::ffi::CString::new(path.as_os_str().as_bytes()).is_ok_and(|c_path| {
                    // SAFETY: a NUL-terminated path; access only reads it.
                    unsafe { libc::access(c_path.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
                });
            if !writable {
                return Some(format!(
                    "{} is not writable by this process ({})",
                    path.display(),
                    io::Error::last_os_error()
                ));
            }
            return checked_user().and_then(|user| user.denied(path, Access::Write));
        }
        Ok(_) => "is not a directory".to_owned(),
        Err(err) if err.kind() == io::ErrorKind::NotFound => "does not exist".to_owned(),
        Err(err) => format!("cannot be read ({err})"),
    };
    Some(format!("{} {problem}", path.display()))
}

/// The user whose access to the config's files the checks ask about besides this
/// process's: the one a tracker started by root runs as once it serves (the units'
/// `User=shoal`, or `[privileges] user`), since root reads every file and `-P` is
/// usually run as root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileUser {
    /// The user's name, for messages.
    pub name: String,
    /// Why the tracker runs as this user, for messages ("the units' User=").
    pub why: String,
    uid: u32,
    groups: Vec<u32>,
}

/// What a path is checked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Access {
    /// Reading a file.
    Read,
    /// Creating files in a directory.
    Write,
}

static CHECKED_USER: std::sync::OnceLock<FileUser> = std::sync::OnceLock::new();

/// From now on, [`unreadable`] and [`unwritable_directory`] also ask whether `user`
/// could read or write; set once, for `-P`.
pub fn check_files_for(user: FileUser) {
    let _ = CHECKED_USER.set(user);
}

fn checked_user() -> Option<&'static FileUser> {
    CHECKED_USER.get()
}

impl FileUser {
    /// A user with its uid and group ids, as the checks compare them with files'
    /// owners and modes.
    pub fn new(name: &str, why: &str, uid: u32, groups: Vec<u32>) -> Self {
        Self {
            name: name.to_owned(),
            why: why.to_owned(),
            uid,
            groups,
        }
    }

    /// Why this user cannot read the file (or write in the directory) at `path`,
    /// going by the modes of the path and every directory above it (each must let
    /// the user through). Access control lists and security modules are not read.
    fn denied(&self, path: &Path, access: Access) -> Option<String> {
        use std::os::unix::fs::MetadataExt as _;
        let path = std::path::absolute(path).ok()?;
        for directory in path.ancestors().skip(1) {
            let metadata = std::fs::metadata(directory).ok()?;
            if !self.allows(&metadata, 0o1) {
                return Some(format!(
                    "{} cannot be reached by user {} ({}): {} is mode {:o}, owned by uid {} gid {}",
                    path.display(),
                    self.name,
                    self.why,
                    directory.display(),
                    metadata.mode() & 0o7777,
                    metadata.uid(),
                    metadata.gid(),
                ));
            }
        }
        let metadata = std::fs::metadata(&path).ok()?;
        let (wanted, verb, fix) = match access {
            Access::Read => (0o4, "read", "give its group read access (chgrp, chmod g+r)"),
            Access::Write => (
                0o3,
                "create files in",
                "make the user its owner (chown), or give its group write access",
            ),
        };
        if self.allows(&metadata, wanted) {
            return None;
        }
        Some(format!(
            "user {} ({}) cannot {verb} {}: mode {:o}, owned by uid {} gid {}; {fix}",
            self.name,
            self.why,
            path.display(),
            metadata.mode() & 0o7777,
            metadata.uid(),
            metadata.gid(),
        ))
    }

    /// Whether the permission bits `wanted` (4 read, 2 write, 1 search) of the class
    /// this user falls in (owner, group, others) are all set.
    fn allows(&self, metadata: &std::fs::Metadata, wanted: u32) -> bool {
        use std::os::unix::fs::MetadataExt as _;
        if self.uid == 0 {
            return true;
        }
        let mode = metadata.mode();
        let class = if metadata.uid() == self.uid {
            mode >> 6
        } else if self.groups.contains(&metadata.gid()) {
            mode >> 3
        } else {
            mode
        };
        class & wanted == wanted
    }
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_to_string_bounded(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_bounded(path, limit)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// A file's identity and version as far as the file system tells: inode, size and
/// modification time. Equal stamps mean the file was not written since, which lets a
/// reload (SIGUSR1, sent for any of several files) skip a list that did not change
/// and keep the changes made to it through the admin API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    inode: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl FileStamp {
    /// The stamp of `path` now; `None` when it cannot be read.
    pub fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path).ok()?;
        Some(Self {
            inode: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }
}

/// What reloading a file on SIGUSR1 came to, for [`report_reload`].
#[derive(Debug)]
pub enum Reloaded {
    /// The file was not written since it was last read: nothing changed.
    Unchanged,
    /// Read and in force: what it holds now ("12 info hashes").
    Read(String),
    /// Not read, or refused: what was in force stays.
    Failed(anyhow::Error),
}

/// Logs how reloading `what` (its name in the status line: "access list") of
/// `tracker` from `from` went, and returns the status line it leaves (systemd's
/// StatusText, the reload's reply). `held` is what was in force before, in the words
/// of [`Reloaded::Read`]. One wording for every file a reload reads.
pub fn report_reload(
    tracker: &str,
    what: &str,
    from: &dyn std::fmt::Display,
    held: &str,
    outcome: Reloaded,
) -> String {
    match outcome {
        Reloaded::Unchanged => format!("{tracker} {what}: {held} (file unchanged)"),
        Reloaded::Read(now) => {
            log::info!("{tracker}: {what} reloaded from {from}: {held} -> {now}");
            format!("{tracker} {what}: {now}")
        }
        Reloaded::Failed(err) => {
            log::error!("{tracker}: {what} not reloaded, keeping the one in force: {err:#}");
            format!("{tracker} {what} kept ({held}): reload failed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory of its own under the temp dir, searchable by everyone.
    fn scratch(name: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("shoal-files-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    fn chmod(path: &Path, mode: u32) {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_service_user_is_checked_by_the_class_it_falls_in() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = scratch("classes");
        let file = dir.join("users.txt");
        std::fs::write(&file, "1 x\n").unwrap();
        let owner = std::fs::metadata(&file).unwrap();
        // Neither owner nor in the group: the "others" bits decide.
        let stranger = FileUser::new(
            "stranger",
            "a test",
            owner.uid() + 4242,
            vec![owner.gid() + 4242],
        );
        // In the file's group.
        let member = FileUser::new("member", "a test", owner.uid() + 4242, vec![owner.gid()]);
        chmod(&file, 0o600);
        let denied = stranger
            .denied(&file, Access::Read)
            .expect("0600 keeps a stranger out");
        assert!(
            denied.contains("user stranger (a test) cannot read"),
            "{denied}"
        );
        assert!(denied.contains("mode 600"), "{denied}");
        assert!(member.denied(&file, Access::Read).is_some());
        chmod(&file, 0o640);
        assert_eq!(member.denied(&file, Access::Read), None);
        assert!(stranger.denied(&file, Access::Read).is_some());
        chmod(&file, 0o644);
        assert_eq!(stranger.denied(&file, Access::Read), None);
        // A directory above that keeps the user out is named.
        chmod(&dir, 0o700);
        let unreachable = stranger
            .denied(&file, Access::Read)
            .expect("a closed directory");
        assert!(
            unreachable.contains("cannot be reached by user stranger"),
            "{unreachable}"
        );
        assert!(
            unreachable.contains(&format!("{} is mode 700", dir.display())),
            "{unreachable}"
        );
        chmod(&dir, 0o755);
        // Writing in a directory needs write and search.
        let out = dir.join("export");
        std::fs::create_dir_all(&out).unwrap();
        chmod(&out, 0o750);
        assert!(member.denied(&out, Access::Write).is_some());
        chmod(&out, 0o770);
        assert_eq!(member.denied(&out, Access::Write), None);
        let root = FileUser::new("root", "a test", 0, vec![0]);
        chmod(&file, 0o000);
        assert_eq!(root.denied(&file, Access::Read), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_directory_is_named() {
        let dir = scratch("unwritable");
        assert_eq!(unwritable_directory(&dir), None);
        let missing = dir.join("missing");
        assert_eq!(
            unwritable_directory(&missing),
            Some(format!("{} does not exist", missing.display()))
        );
        let file = dir.join("file");
        std::fs::write(&file, "").unwrap();
        assert_eq!(
            unwritable_directory(&file),
            Some(format!("{} is not a directory", file.display()))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_reload_reports_one_way_for_every_file() {
        let from = "/etc/shoal/list.txt";
        assert_eq!(
            report_reload(
                "udp",
                "access list",
                &from,
                "2 info hashes",
                Reloaded::Unchanged
            ),
            "udp access list: 2 info hashes (file unchanged)"
        );
        assert_eq!(
            report_reload(
                "udp",
                "access list",
                &from,
                "2 info hashes",
                Reloaded::Read("3 info hashes".into())
            ),
            "udp access list: 3 info hashes"
        );
        assert_eq!(
            report_reload(
                "udp",
                "access list",
                &from,
                "2 info hashes",
                Reloaded::Failed(anyhow::anyhow!("cut short"))
            ),
            "udp access list kept (2 info hashes): reload failed"
        );
    }

    #[test]
    fn unreadable_files_are_named_with_the_reason() {
        let dir = std::env::temp_dir().join(format!("shoal-unreadable-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("list.txt");
        std::fs::write(&file, "").unwrap();
        assert_eq!(unreadable(&file), None);
        let missing = dir.join("missing.pem");
        assert_eq!(
            unreadable(&missing),
            Some(format!("{} does not exist", missing.display()))
        );
        assert_eq!(
            unreadable(&dir),
            Some(format!("{} is not a regular file", dir.display()))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn devices_fifos_and_large_files_are_refused_with_the_reason() {
        let err = read_bounded(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let err = read_bounded(Path::new("/"), 1 << 20).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");

        let path = std::env::temp_dir().join(format!("shoal-files-{}", std::process::id()));
        std::fs::write(&path, vec![b'a'; 100]).unwrap();
        assert_eq!(read_bounded(&path, 100).unwrap().len(), 100);
        let err = read_bounded(&path, 99).unwrap_err();
        assert!(err.to_string().contains("over the limit of 99"), "{err}");
        std::fs::write(&path, [0xff, 0xfe]).unwrap();
        assert!(read_to_string_bounded(&path, 10).is_err());
        std::fs::remove_file(&path).unwrap();
    }
}
