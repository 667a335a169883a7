//! A private site's side of accounting, as a test plays it: it takes the batch files
//! a tracker publishes, applies each batch id once, deletes the files, and sums what
//! they credit.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// What a site credited one (user, torrent), summed over the batches it applied.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Credited {
    pub uploaded: u64,
    pub downloaded: u64,
    pub credited_uploaded: u64,
    pub credited_downloaded: u64,
    pub seed_seconds: u64,
    pub completed: u64,
}

/// The site: batch ids applied, credits per (user, torrent).
#[derive(Debug)]
pub struct Site {
    directory: PathBuf,
    applied: HashSet<String>,
    /// Batch files whose id was applied already (a batch that reached it twice).
    pub repeated: u64,
    /// Credits per (user, torrent).
    pub credits: BTreeMap<(u32, u32), Credited>,
}

impl Site {
    /// The site of the batches published into `directory`.
    pub fn new(directory: &Path) -> Self {
        Self {
            directory: directory.to_owned(),
            applied: HashSet::new(),
            repeated: 0,
            credits: BTreeMap::new(),
        }
    }

    /// Applies every batch file in the directory (each id once) and deletes it;
    /// returns how many were new. Files starting with `.` are the tracker's own.
    pub fn take(&mut self) -> usize {
        let mut taken = 0;
        let Ok(entries) = std::fs::read_dir(&self.directory) else {
            return 0;
        };
        let mut paths: Vec<PathBuf> = entries
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| {
                path.extension().is_some_and(|ext| ext == "json")
                    && !path
                        .file_name()
                        .is_some_and(|name| name.to_string_lossy().starts_with('.'))
            })
            .collect();
        paths.sort();
        for path in paths {
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let batch: serde_json::Value =
                serde_json::from_str(&text).unwrap_or_else(|err| panic!("{path:?}: {err}: {text}"));
            let id = batch["batch"].as_str().expect("a batch id").to_owned();
            let _ = std::fs::remove_file(&path);
            if !self.applied.insert(id) {
                self.repeated += 1;
                continue;
            }
            taken += 1;
            for entry in batch["entries"].as_array().expect("entries") {
                let number = |field: &str| entry[field].as_u64().expect(field);
                let sum = self
                    .credits
                    .entry((number("user") as u32, number("torrent") as u32))
                    .or_default();
                sum.uploaded += number("uploaded");
                sum.downloaded += number("downloaded");
                sum.credited_uploaded += number("credited_uploaded");
                sum.credited_downloaded += number("credited_downloaded");
                sum.seed_seconds += number("seed_seconds");
                sum.completed += number("completed");
            }
        }
        taken
    }

    /// Batches applied so far.
    pub fn batches(&self) -> usize {
        self.applied.len()
    }

    /// What (user, torrent) was credited in all.
    pub fn credited(&self, user: u32, torrent: u32) -> Credited {
        self.credits
            .get(&(user, torrent))
            .copied()
            .unwrap_or_default()
    }
}
