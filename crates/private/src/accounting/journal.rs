//! The ledger on disk, so that a crash at any moment never credits a byte twice and
//! loses at most what was reported since the last batch reached the disk.
//!
//! Files in the export directory, for tracker `<name>`:
//!
//! * `.<name>.ledger`: the base, every pair's baselines (`Ledger::save`);
//! * `.<name>.journal`: records appended after the base, one per batch: the pairs
//!   changed since the record before and the batch ids it commits;
//! * `.<batch id>.json.partial`: a batch written and synced, not yet published;
//! * `<batch id>.json`: a published batch, for the site (and the exporter).
//!
//! A flush writes the batch under its temporary name, appends and syncs the record
//! naming it (the commit), then renames the batch into place. A crash before the
//! record is whole leaves a batch nobody committed: the next run deletes it, and its
//! reports are credited from the baselines of the record before (once: their batch
//! was never published). A crash after it leaves a committed batch: the next run
//! publishes it. Either way what the site receives and the baselines the next run
//! holds agree. The journal is folded into a new base when it outgrows the base (and
//! at every start and clean stop), so a restart reads little.
//!
//! Debug builds stop the process at a named step when `SHOAL_TEST_CRASH_AT` says so
//! (`<step>:<n>`: the n-th time it is reached), for the crash tests; release builds
//! have no such hook.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use super::backlog::batch_order;
use crate::ledger::{Batch, Committed, Ledger, MAX_RECORD, read_journal};

/// The journal is folded into the base once it is larger than this and than the base.
const COMPACT_AT: u64 = 1 << 20;

/// The state on disk of one tracker's ledger, held open for the tracker's life.
#[derive(Debug)]
pub(super) struct Journal {
    directory: PathBuf,
    name: String,
    /// The journal file, locked: one process per tracker name and directory.
    file: File,
    /// Its length up to the last whole record: where the next record goes.
    len: u64,
    /// Whether a failed write may have left bytes past `len`.
    tail_dirty: bool,
    /// The base's length when last written.
    base_len: u64,
    /// The last record written (or the base's).
    sequence: u64,
    /// Batches committed but not yet renamed into place, oldest first.
    unpublished: Vec<String>,
}

/// What a start found on disk.
#[derive(Debug, Default)]
pub(super) struct Recovered {
    /// Journal records replayed over the base.
    pub(super) records: usize,
    /// Committed batches published at this start (a crash stopped the last run
    /// between its commit and the rename).
    pub(super) published: usize,
    /// Batches written and never committed, deleted: their reports are credited
    /// from the restored baselines instead.
    pub(super) discarded: usize,
    /// Why the base or the journal could not be read, when one could not.
    pub(super) problem: Option<String>,
    /// Why they could not be folded into a new base, when they could not (a full
    /// disk): the tracker runs on them as they are.
    pub(super) unfolded: Option<String>,
}

impl Journal {
    /// Opens tracker `name`'s ledger files in `directory`, reads them into `ledger`,
    /// finishes what the last run's crash left (publishes committed batches, deletes
    /// the others) and folds everything into a new base.
    pub(super) fn open(
        directory: &Path,
        name: &str,
        ledger: &mut Ledger,
        now: u64,
        max_bytes: u64,
    ) -> anyhow::Result<(Self, Recovered)> {
        use anyhow::Context as _;
        let path = directory.join(format!(".{name}.journal"));
        // Records are written at the journal's known length (not appended): a write
        // that failed part way leaves bytes the next record overwrites.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        lock(&file).with_context(|| {
            format!(
                "{} is held by another running tracker: two trackers named {name} cannot \
                 share one private.export_directory",
                path.display()
            )
        })?;
        let mut recovered = Recovered::default();
        let mut committed = Committed::default();
        let base = base_path(directory, name);
        // Files larger than the tracker's capacity could have written are refused
        // before they are read (and restore no baseline).
        match read_at_most(&base, max_bytes) {
            Ok(bytes) => match ledger.restore(&bytes) {
                Ok(found) => committed = found,
                Err(problem) => {
                    // Kept for whoever looks into it; a new base replaces it below.
                    let _ = std::fs::rename(&base, base.with_extension("ledger.damaged"));
                    recovered.problem = Some(format!(
                        "{}: {problem} (kept as {}.damaged)",
                        base.display(),
                        base.display()
                    ));
                }
            },
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => recovered.problem = Some(format!("{}: {err}", base.display())),
        }
        let base_len = std::fs::metadata(&base).map_or(0, |meta| meta.len());
        let journal = match read_at_most(
            &path,
            max_bytes
                .saturating_mul(2)
                .saturating_add(MAX_RECORD as u64),
        ) {
            Ok(journal) => journal,
            Err(err) => {
                recovered.problem = Some(format!("{}: {err}", path.display()));
                Vec::new()
            }
        };
        let (records, whole) = read_journal(&journal);
        let mut sequence = committed.sequence;
        let mut batches = committed.batches;
        for record in &records {
            // Records the base includes already (a crash between a new base and
            // emptying the journal) are skipped.
            if record.committed.sequence <= committed.sequence {
                continue;
            }
            batches.extend(record.committed.batches.iter().cloned());
            if recovered.problem.is_some() {
                sequence = sequence.max(record.committed.sequence);
                continue;
            }
            // Each record follows the one before: a gap means records are missing (a
            // base older than its journal, restored by hand), and baselines without
            // them would credit again what they committed.
            let applied = if record.committed.sequence == sequence + 1 {
                ledger.apply_record(record)
            } else {
                Err("a record is missing before it")
            };
            if let Err(problem) = applied {
                recovered.problem = Some(format!(
                    "{}: record {}: {problem}",
                    path.display(),
                    record.committed.sequence
                ));
            }
            sequence = sequence.max(record.committed.sequence);
            recovered.records += 1;
        }
        if whole < journal.len() && recovered.problem.is_none() {
            log::warn!(
                "{name}: the last {} bytes of {} were a record cut short (a crash or a full \
                 disk while it was written): its batch was never published, its reports are \
                 credited again from the baselines before it",
                journal.len() - whole,
                path.display()
            );
        }
        // Baselines that cannot be trusted whole are none: with none, a client's next
        // report is a baseline, so nothing can be credited twice (what the unread
        // records committed is lost instead). Every batch written is published then:
        // no baseline can credit its reports again.
        let trusted = recovered.problem.is_none();
        if !trusted {
            ledger.forget_baselines();
        }
        ledger.expire(now);
        ledger.clear_changes();
        let mut journal = Self {
            directory: directory.to_owned(),
            name: name.to_owned(),
            file,
            len: whole as u64,
            tail_dirty: whole < journal.len(),
            base_len,
            sequence,
            unpublished: Vec::new(),
        };
        batches.sort();
        batches.dedup();
        let prefix = format!(".{name}-");
        for entry in std::fs::read_dir(directory)
            .with_context(|| format!("cannot read {}", directory.display()))?
            .flatten()
        {
            let file_name = entry.file_name();
            let Some(id) = file_name
                .to_str()
                .filter(|file| file.starts_with(&prefix))
                .and_then(|file| file.strip_prefix('.')?.strip_suffix(".json.partial"))
            else {
                continue;
            };
            if !trusted
                || batches
                    .binary_search_by(|known| known.as_str().cmp(id))
                    .is_ok()
            {
                journal.unpublished.push(id.to_owned());
            } else {
                std::fs::remove_file(entry.path())
                    .with_context(|| format!("cannot delete {}", entry.path().display()))?;
                recovered.discarded += 1;
            }
        }
        let prefix = format!("{name}-");
        journal
            .unpublished
            .sort_by_key(|id| id.strip_prefix(&prefix).and_then(batch_order));
        let before = journal.unpublished.len();
        journal.publish();
        recovered.published = before - journal.unpublished.len();
        if let Err(err) = journal.compact(ledger) {
            if !trusted {
                // The journal holds records that must not be read again, and no new
                // base could replace them.
                return Err(err).with_context(|| {
                    format!(
                        "the accounting journal {} could not be read whole, and no new base \
                         can be written in its place",
                        path.display()
                    )
                });
            }
            // The base and the journal on disk still hold everything, and records are
            // written at the end of its whole ones; the fold is tried again when the
            // journal outgrows the base.
            recovered.unfolded = Some(format!("{}: {err}", base.display()));
        }
        Ok((journal, recovered))
    }

    /// Commits `batch` (if any) and the pairs changed since the last record, then
    /// publishes it. On an error nothing is committed: the batch's credits are given
    /// back to `ledger` and its changes stay marked, for the next flush.
    pub(super) fn commit(
        &mut self,
        ledger: &mut Ledger,
        batch: Option<Batch>,
    ) -> Result<(), String> {
        if batch.is_none() && !ledger.has_changes() {
            self.publish();
            return Ok(());
        }
        let written = match &batch {
            Some(batch) => {
                let partial = self.partial_path(&batch.id);
                // The file and its name synced before the record that commits it: a
                // power cut must not leave a committed batch without its file.
                write_synced(&partial, batch.to_json().as_bytes())
                    .and_then(|()| sync_directory(&self.directory))
                    .map(|()| Some(partial.clone()))
                    .inspect_err(|_| {
                        let _ = std::fs::remove_file(&partial);
                    })
            }
            None => Ok(None),
        };
        let partial = match written {
            Ok(partial) => partial,
            Err(err) => return Err(give_back(ledger, batch, "not written", err)),
        };
        crash_point("partial");
        let mut batches = self.unpublished.clone();
        batches.extend(batch.as_ref().map(|batch| batch.id.clone()));
        let committed = Committed {
            sequence: self.sequence + 1,
            batches,
        };
        let record = ledger.journal_record(&committed);
        let stored = if record.len() > MAX_RECORD {
            // Too large to read back as a record (changes piled up while the disk was
            // full): committed as a new base instead.
            self.sequence = committed.sequence;
            self.unpublished = committed.batches.clone();
            let folded = self.compact(ledger);
            if folded.is_err() {
                self.sequence -= 1;
                self.unpublished
                    .truncate(self.unpublished.len() - usize::from(batch.is_some()));
            }
            folded
        } else {
            self.append(&record)
        };
        if let Err(err) = stored {
            if let Some(partial) = &partial {
                let _ = std::fs::remove_file(partial);
            }
            return Err(give_back(ledger, batch, "not committed", err));
        }
        crash_point("journal");
        self.sequence = committed.sequence;
        ledger.clear_changes();
        self.unpublished = committed.batches;
        self.publish();
        crash_point("published");
        if self.len > COMPACT_AT.max(self.base_len)
            && let Err(err) = self.compact(ledger)
        {
            // Committed all the same: the journal holds it, and grows until a fold can
            // be written.
            log::warn!(
                "{}: accounting journal not folded into a new base ({err}); tried again at \
                 the next flush",
                self.name
            );
        }
        Ok(())
    }

    /// Writes a record after the whole ones and syncs it. A write that fails leaves at
    /// most bytes after the whole records, which the next record overwrites (and which
    /// end the journal for a reader meanwhile: nothing after them was committed).
    fn append(&mut self, record: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt as _;
        let written = (|| {
            if crash_hit("torn") {
                self.file
                    .write_all_at(&record[..record.len() / 2], self.len)?;
                self.file.sync_data()?;
                crash_now("torn");
            }
            self.file.write_all_at(record, self.len)?;
            if self.tail_dirty {
                // What a failed write left past this record goes.
                self.file.set_len(self.len + record.len() as u64)?;
            }
            self.file.sync_data()
        })();
        match written {
            Ok(()) => {
                self.len += record.len() as u64;
                self.tail_dirty = false;
                Ok(())
            }
            Err(err) => {
                self.tail_dirty = true;
                Err(err)
            }
        }
    }

    /// Renames committed batches into place, oldest first; what fails waits.
    fn publish(&mut self) {
        let mut done = 0;
        for id in &self.unpublished {
            let from = self.partial_path(id);
            let to = self.directory.join(format!("{id}.json"));
            match std::fs::rename(&from, &to) {
                Ok(()) => done += 1,
                // Gone: published before a crash that came before the next record.
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => done += 1,
                Err(err) => {
                    log::error!(
                        "{}: committed batch {id} not published ({err}); tried again at the \
                         next flush",
                        self.name
                    );
                    break;
                }
            }
        }
        if done > 0 {
            let _ = sync_directory(&self.directory);
            self.unpublished.drain(..done);
        }
    }

    /// Writes the whole ledger as the base and empties the journal.
    pub(super) fn compact(&mut self, ledger: &Ledger) -> std::io::Result<()> {
        let committed = Committed {
            sequence: self.sequence,
            batches: self.unpublished.clone(),
        };
        let bytes = ledger.save(&committed);
        let base = base_path(&self.directory, &self.name);
        let partial = base.with_extension("ledger.partial");
        if let Err(err) =
            write_synced(&partial, &bytes).and_then(|()| std::fs::rename(&partial, &base))
        {
            let _ = std::fs::remove_file(&partial);
            return Err(err);
        }
        sync_directory(&self.directory)?;
        crash_point("base");
        self.base_len = bytes.len() as u64;
        self.file.set_len(0)?;
        self.len = 0;
        self.tail_dirty = false;
        self.file.sync_data()
    }

    fn partial_path(&self, id: &str) -> PathBuf {
        self.directory.join(format!(".{id}.json.partial"))
    }
}

/// Where tracker `name`'s base lies: a hidden file beside the batches (a site that
/// reads the directory takes `*.json` only).
pub(super) fn base_path(directory: &Path, name: &str) -> PathBuf {
    directory.join(format!(".{name}.ledger"))
}

/// The bytes of the file at `path`, refused unread past `limit` bytes.
fn read_at_most(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let file = File::open(path)?;
    let size = file.metadata()?.len();
    if size > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{size} bytes, more than the {limit} the tracker's capacity could write"),
        ));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Writes `bytes` as a new file at `path`, readable by the tracker's user only (the
/// files name users and torrents), synced before it returns.
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Syncs a directory, so that the names created and renamed in it last.
fn sync_directory(directory: &Path) -> std::io::Result<()> {
    File::open(directory)?.sync_all()
}

/// Takes an exclusive lock on `file`, or fails at once if another process holds one.
fn lock(file: &File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: flock takes the descriptor of a file this function borrows.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Takes back what a flush could not commit; the message for the log.
fn give_back(ledger: &mut Ledger, batch: Option<Batch>, what: &str, err: std::io::Error) -> String {
    match batch {
        Some(batch) => {
            let id = batch.id.clone();
            ledger.give_back(batch);
            format!("batch {id} {what}: {err}")
        }
        None => format!("baselines {what}: {err}"),
    }
}

/// Whether the crash test asked to stop at this passage of `step` (debug builds
/// only; see the module's notes).
fn crash_hit(step: &str) -> bool {
    #[cfg(debug_assertions)]
    {
        crash::hit(step)
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = step;
        false
    }
}

/// Stops the process at once if the crash test asked for this passage of `step`.
fn crash_point(step: &str) {
    if crash_hit(step) {
        crash_now(step);
    }
}

/// Stops the process as a kill would: no destructor, no flush, nothing after it.
/// (Unit tests unwind instead, and drop what the process held without writing.)
fn crash_now(step: &str) {
    #[cfg(test)]
    std::panic::panic_any(tests::Crashed(step.to_owned()));
    #[cfg(not(test))]
    {
        eprintln!("SHOAL_TEST_CRASH_AT: stopping at {step}");
        // SAFETY: raising a signal on our own process; SIGKILL cannot be caught.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
}

#[cfg(debug_assertions)]
mod crash {
    #[cfg(not(test))]
    use std::sync::OnceLock;
    #[cfg(not(test))]
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    /// `SHOAL_TEST_CRASH_AT=<step>:<n>`, read once.
    #[cfg(not(test))]
    fn wanted() -> Option<&'static (String, u64)> {
        static WANTED: OnceLock<Option<(String, u64)>> = OnceLock::new();
        WANTED
            .get_or_init(|| {
                let value = std::env::var("SHOAL_TEST_CRASH_AT").ok()?;
                let (step, n) = value.split_once(':')?;
                Some((step.to_owned(), n.parse().ok()?))
            })
            .as_ref()
    }

    /// Passages of the wanted step so far.
    #[cfg(not(test))]
    static REACHED: AtomicU64 = AtomicU64::new(0);

    /// Whether this passage of `step` is the one wanted.
    #[cfg(not(test))]
    pub(super) fn hit(step: &str) -> bool {
        wanted()
            .is_some_and(|(wanted, n)| wanted == step && REACHED.fetch_add(1, Relaxed) + 1 == *n)
    }

    /// Unit tests set the step per thread ([`super::tests::crash_at`]).
    #[cfg(test)]
    pub(super) fn hit(step: &str) -> bool {
        super::tests::WANTED.with(|wanted| {
            let mut wanted = wanted.borrow_mut();
            match wanted.as_mut() {
                Some((name, left)) if name == step => {
                    *left -= 1;
                    *left == 0
                }
                _ => false,
            }
        })
    }
}

#[cfg(test)]
mod tests;
