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
/// the config's other problems instead of at the first start.
pub fn unreadable(path: &Path) -> Option<String> {
    let problem = match File::open(path).and_then(|file| file.metadata()) {
        Ok(metadata) if metadata.is_file() => return None,
        Ok(_) => "is not a regular file".to_owned(),
        Err(err) if err.kind() == io::ErrorKind::NotFound => "does not exist".to_owned(),
        Err(err) => format!("cannot be read ({err})"),
    };
    Some(format!("{} {problem}", path.display()))
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
