//! The batch files waiting in the export directory: listed oldest first, and kept
//! within the backlog's bounds (`private.export_backlog` batches and
//! `private.export_backlog_bytes` bytes) whenever a batch is written, so that a site
//! that stops taking them cannot fill the disk.

use std::path::{Path, PathBuf};

/// A published batch file of one tracker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchFile {
    /// The batch's id (the file's name without `.json`).
    pub id: String,
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
}

/// Tracker `name`'s batch files in `directory` (`<name>-<run start>-<process>-<n>.json`),
/// oldest first; none when the directory cannot be read.
pub fn batch_files(directory: &Path, name: &str) -> Vec<BatchFile> {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return Vec::new();
    };
    let prefix = format!("{name}-");
    let mut files: Vec<((u64, u64, u64), BatchFile)> = entries
        .flatten()
        .filter_map(|entry| {
            let file_name = entry.file_name().into_string().ok()?;
            let id = file_name.strip_suffix(".json")?;
            let order = batch_order(id.strip_prefix(&prefix)?)?;
            let size = entry.metadata().ok()?.len();
            Some((
                order,
                BatchFile {
                    id: id.to_owned(),
                    path: entry.path(),
                    size,
                },
            ))
        })
        .collect();
    files.sort_unstable_by_key(|(order, _)| *order);
    files.into_iter().map(|(_, file)| file).collect()
}

/// The order of a batch id's part after the tracker: `<run start ms>-<pid>-<n>`.
pub(crate) fn batch_order(rest: &str) -> Option<(u64, u64, u64)> {
    let mut numbers = rest.split('-').map(|part| part.parse::<u64>().ok());
    let order = (numbers.next()??, numbers.next()??, numbers.next()??);
    numbers.next().is_none().then_some(order)
}

/// Deletes tracker `name`'s oldest batch files while more than `max_batches` of them,
/// or more than `max_bytes` bytes, wait in `directory`; returns those deleted.
pub(crate) fn trim_backlog(
    directory: &Path,
    name: &str,
    max_batches: usize,
    max_bytes: u64,
) -> Vec<BatchFile> {
    let files = batch_files(directory, name);
    let mut count = files.len();
    let mut bytes: u64 = files.iter().map(|file| file.size).sum();
    let mut deleted = Vec::new();
    for file in files {
        if count <= max_batches && bytes <= max_bytes {
            break;
        }
        if std::fs::remove_file(&file.path).is_ok() {
            count -= 1;
            bytes -= file.size;
            deleted.push(file);
        }
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_listed_oldest_first_and_trimmed_by_count_and_bytes() {
        let dir = std::env::temp_dir().join(format!("shoal-backlog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (id, size) in [
            ("udp-2-1-0", 10),
            ("udp-1-9-10", 10),
            ("udp-1-9-2", 10),
            ("udp-1-9-3", 500),
            ("http-1-1-0", 10),
        ] {
            std::fs::write(dir.join(format!("{id}.json")), vec![b'x'; size]).unwrap();
        }
        std::fs::write(dir.join(".udp-3-1-0.json.partial"), b"x").unwrap();
        std::fs::write(dir.join("udp-notes.json"), b"x").unwrap();
        let ids = |files: Vec<BatchFile>| files.into_iter().map(|f| f.id).collect::<Vec<_>>();
        assert_eq!(
            ids(batch_files(&dir, "udp")),
            ["udp-1-9-2", "udp-1-9-3", "udp-1-9-10", "udp-2-1-0"]
        );
        // Four batches, 530 bytes: three at most drops the oldest; 100 bytes at most
        // drops the 500-byte one after it too.
        assert_eq!(ids(trim_backlog(&dir, "udp", 3, u64::MAX)), ["udp-1-9-2"]);
        assert_eq!(ids(trim_backlog(&dir, "udp", 3, 100)), ["udp-1-9-3"]);
        assert_eq!(ids(batch_files(&dir, "udp")), ["udp-1-9-10", "udp-2-1-0"]);
        assert_eq!(ids(batch_files(&dir, "http")), ["http-1-1-0"]);
        assert_eq!(
            batch_order("1700000000000-42-7"),
            Some((1_700_000_000_000, 42, 7))
        );
        assert_eq!(batch_order("1-2"), None);
        assert_eq!(batch_order("1-2-3-4"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
