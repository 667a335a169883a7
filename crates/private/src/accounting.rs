//! The accounting thread: socket workers hand it a [`Report`] per accepted announce
//! (never waiting: a full queue drops the report and counts it), it keeps the
//! [`Ledger`], and every `interval` it writes the credits since the last time as one
//! batch file into the export directory, where the site picks them up.
//!
//! A batch file is `<batch id>.json` (see [`Batch::to_json`]), renamed into place
//! whole, so the site never reads half a batch. The site applies a batch, records its
//! id (a batch it has seen is skipped: exactly once), and deletes the file. Batches
//! wait in the directory while the site is away, and across tracker restarts.
//!
//! Outside a cluster the ledger's baselines are on disk beside the batches, and a
//! batch is published only once the baselines it was credited against are (the
//! `journal` module): whatever the moment a crash stops the process, the next run
//! credits no byte twice and loses at most what was reported since the last batch
//! reached the disk. A batch that cannot be committed (a full disk, a directory
//! gone) gives its credits back to the ledger: they go out with the next flush that
//! can write.
//!
//! In a cluster ([`Accounts::start`] with a store), the thread keeps no baselines of
//! its own: it gathers reports for up to [`SHARED_ROUND`] and applies them to the
//! pairs kept in the store as one transaction ([`Ledger::record_shared`]), so a
//! client announcing to several nodes is credited once. While the store is away the
//! reports wait (up to [`MAX_SHARED_PENDING`]; past it new ones are dropped and
//! counted). A dropped report loses no bytes there: the baselines are in the store,
//! so the client's next report is credited from the last one applied. The store's
//! transaction is the commit there: a node killed before its batch file is written
//! loses those credits, never doubles them. Batches that cannot be written are kept
//! in memory and tried again at every flush, up to [`MAX_UNWRITTEN`].

mod backlog;
mod journal;
mod queue;

pub use backlog::{BatchFile, batch_files};
pub use queue::QUEUE_LEN;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender};

use crate::ledger::{Batch, Ledger, Live, Report, SharedError, SharedPairs, Whose};
use journal::Journal;
use queue::{ReportReceiver, ReportSender, report_queue};

/// A cluster's store of ledger pairs, as the accounting thread holds it.
pub type SharedStore = Box<dyn SharedPairs + Send>;

/// How long reports are gathered before they are applied to a cluster's store.
pub const SHARED_ROUND: Duration = Duration::from_millis(200);
/// Reports applied in one transaction at most.
const SHARED_CHUNK: usize = 4096;
/// Reports waiting for a cluster's store at most.
pub const MAX_SHARED_PENDING: usize = 1 << 20;
/// The wait before a store that failed is tried again.
const SHARED_RETRY: Duration = Duration::from_secs(1);

/// A question for the accounting thread, with where its answer goes.
type Query = (Whose, Sender<Live>);

/// How often the thread takes the reports waiting (it never blocks on the queue).
const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// How long a question waits for the thread (busy with a batch, at worst).
const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

/// In a cluster, batches kept in memory while they cannot be written; past it the
/// oldest is lost (and logged).
pub const MAX_UNWRITTEN: usize = 1024;

/// Where socket workers send reports; dropping the last handle flushes a last batch
/// and ends the thread.
#[derive(Debug)]
pub struct Accounts {
    sender: ReportSender,
    queries: Sender<Query>,
    /// Reports dropped for a full queue.
    dropped: AtomicU64,
    /// Batches written, and those that could not be.
    pub written: AtomicU64,
    pub failed: AtomicU64,
    /// In a cluster: transactions applied to the store, those that lost to other
    /// nodes at every try, and those the store failed; reports waiting for it.
    pub shared_applied: AtomicU64,
    pub shared_contended: AtomicU64,
    pub shared_failed: AtomicU64,
    pub shared_pending: AtomicU64,
    /// Whether the ledger is a cluster's (the counters above move).
    pub shared: bool,
    /// Announces refused for a total past `max_session_bytes`.
    pub refused_totals: AtomicU64,
    /// Batches deleted unsent: the backlog past its bounds.
    pub backlog_dropped: AtomicU64,
    max_session_bytes: u64,
    thread: Mutex<Option<JoinHandle<()>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

/// How an accounting thread runs, and its bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccountsSettings {
    /// How often a batch is written.
    pub interval: Duration,
    /// Seconds after which a peer is forgotten.
    pub peer_timeout: u64,
    /// Totals a client may report in one session; an announce past them is refused
    /// (`private.max_session_bytes`).
    pub max_session_bytes: u64,
    /// Batches, and their bytes, kept waiting in the export directory at most; past
    /// either the oldest are deleted whenever a batch is written
    /// (`private.export_backlog`, `private.export_backlog_bytes`).
    pub backlog_batches: usize,
    pub backlog_bytes: u64,
    /// The largest ledger base read at start (what the tracker's capacity could write);
    /// a larger file is refused unread.
    pub max_ledger_bytes: u64,
}

impl AccountsSettings {
    /// A batch every `interval`, peers forgotten after `peer_timeout` seconds, and
    /// `[private]`'s default bounds.
    pub fn new(interval: Duration, peer_timeout: u64) -> Self {
        Self {
            interval,
            peer_timeout,
            max_session_bytes: 1 << 50,
            backlog_batches: 8640,
            backlog_bytes: 1 << 30,
            max_ledger_bytes: u64::MAX,
        }
    }

    /// The largest base a tracker following at most `peers` peers writes: 64 bytes
    /// a peer (an entry of its pair included), and a megabyte.
    pub fn ledger_bytes_for(peers: usize) -> u64 {
        (peers as u64).saturating_mul(64).saturating_add(1 << 20)
    }
}

impl Accounts {
    /// Starts the thread for tracker `name`, writing a batch into `directory` every
    /// `interval`; peers time out after `peer_timeout` seconds. With `shared`, the
    /// ledger's pairs are those of a cluster's store (see the module's notes).
    pub fn start(
        name: &str,
        directory: &Path,
        interval: Duration,
        peer_timeout: u64,
        shared: Option<SharedStore>,
    ) -> anyhow::Result<Arc<Self>> {
        Self::start_with(
            name,
            directory,
            AccountsSettings::new(interval, peer_timeout),
            shared,
        )
    }

    /// [`start`](Self::start) with every setting.
    pub fn start_with(
        name: &str,
        directory: &Path,
        settings: AccountsSettings,
        shared: Option<SharedStore>,
    ) -> anyhow::Result<Arc<Self>> {
        let (interval, peer_timeout) = (settings.interval, settings.peer_timeout);
        let (sender, receiver) = report_queue(QUEUE_LEN);
        let (queries, questions) = crossbeam_channel::bounded(16);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let accounts = Arc::new(Self {
            sender,
            queries,
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            shared_applied: AtomicU64::new(0),
            shared_contended: AtomicU64::new(0),
            shared_failed: AtomicU64::new(0),
            shared_pending: AtomicU64::new(0),
            shared: shared.is_some(),
            refused_totals: AtomicU64::new(0),
            backlog_dropped: AtomicU64::new(0),
            max_session_bytes: settings.max_session_bytes,
            thread: Mutex::new(None),
            stop: stop.clone(),
        });
        let run_started_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        // Tracker, run start and process id: two processes writing into one
        // directory cannot make the same id.
        let run = format!("{name}-{run_started_ms}-{}", std::process::id());
        let mut ledger = Ledger::new(run, peer_timeout, unix_now());
        // In a cluster the store holds the baselines.
        let journal = match shared {
            Some(_) => None,
            None => Some(open_journal(
                name,
                directory,
                &mut ledger,
                settings.max_ledger_bytes,
            )?),
        };
        let thread = Thread {
            backlog: (settings.backlog_batches, settings.backlog_bytes),
            name: name.to_owned(),
            directory: directory.to_owned(),
            interval,
            questions,
            ledger,
            journal,
            accounts: Arc::downgrade(&accounts),
            stop,
            unwritten: Vec::new(),
            dropped_logged: 0,
            shared: shared.map(|store| Shared {
                store,
                pending: Vec::new(),
                next_round: Instant::now(),
                failing: false,
            }),
        };
        let handle = std::thread::Builder::new()
            .name(format!("{name}-accounting"))
            .spawn(move || thread.run(receiver))?;
        *accounts.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        Ok(accounts)
    }

    /// Whether a client may report these totals for one session: past
    /// `max_session_bytes` the announce is refused (and counted), as no client
    /// transfers that much in a session.
    pub fn check_totals(&self, uploaded: u64, downloaded: u64) -> Result<(), crate::Refusal> {
        if uploaded.max(downloaded) > self.max_session_bytes {
            self.refused_totals.fetch_add(1, Relaxed);
            return Err(crate::Refusal::Implausible);
        }
        Ok(())
    }

    /// Hands an accepted announce to the thread; never waits.
    pub fn report(&self, report: Report) {
        if !self.sender.send(report) {
            self.dropped.fetch_add(1, Relaxed);
        }
    }

    /// What the ledger holds of user `id` now; `None` if the thread did not answer in
    /// time.
    pub fn live_user(&self, id: u32) -> Option<Live> {
        self.ask(Whose::User(id))
    }

    /// What the ledger holds of torrent `id` (the site's id) now.
    pub fn live_torrent(&self, id: u32) -> Option<Live> {
        self.ask(Whose::Torrent(id))
    }

    fn ask(&self, whose: Whose) -> Option<Live> {
        let (reply, answer) = crossbeam_channel::bounded(1);
        self.queries
            .send_timeout((whose, reply), QUERY_TIMEOUT)
            .ok()?;
        answer.recv_timeout(QUERY_TIMEOUT).ok()
    }

    /// Reports dropped for a full queue so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Relaxed)
    }

    /// Writes the last batch and ends the thread (also done when dropped).
    pub fn finish(&self) {
        self.stop.store(true, Relaxed);
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        // Never join from the thread itself (it may hold the last handle for a
        // moment while it counts a batch): it is ending anyway.
        if let Some(handle) = handle
            && handle.thread().id() != std::thread::current().id()
        {
            let _ = handle.join();
        }
    }
}

impl Drop for Accounts {
    fn drop(&mut self) {
        self.finish();
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

struct Thread {
    /// The backlog's bounds: batches, bytes.
    backlog: (usize, u64),
    name: String,
    directory: PathBuf,
    interval: Duration,
    questions: Receiver<Query>,
    ledger: Ledger,
    /// Outside a cluster: the ledger on disk.
    journal: Option<Journal>,
    accounts: std::sync::Weak<Accounts>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    /// In a cluster: batches not written yet, oldest first.
    unwritten: Vec<Batch>,
    /// Dropped reports already logged.
    dropped_logged: u64,
    /// In a cluster: the store, and the reports waiting for it.
    shared: Option<Shared>,
}

/// A cluster's store of pairs, as the thread works with it.
struct Shared {
    store: SharedStore,
    /// Reports not applied yet, oldest first.
    pending: Vec<Report>,
    /// When they are applied next.
    next_round: Instant,
    /// Whether the last round failed (logged once until it succeeds).
    failing: bool,
}

impl Thread {
    fn run(mut self, reports: ReportReceiver) {
        let mut next_flush = Instant::now() + self.interval;
        while !self.stop.load(Relaxed) {
            if Instant::now() >= next_flush {
                self.flush();
                next_flush = Instant::now() + self.interval;
            }
            let mut wake = next_flush;
            if let Some(shared) = &self.shared {
                if !shared.pending.is_empty() && Instant::now() >= shared.next_round {
                    self.apply_shared();
                }
                if let Some(shared) = &self.shared
                    && !shared.pending.is_empty()
                {
                    wake = wake.min(shared.next_round);
                }
            }
            // Takes what waits, then sleeps until the next look: reports are not
            // waited for one by one, since a blocked receiver is woken by every send,
            // a context switch per announce on the socket worker's core (half of an
            // HTTP tracker's throughput: documents/benchmarks/private-http-2026-11-28.md).
            // A look every DRAIN_EVERY keeps up with the queue's QUEUE_LEN at millions
            // of reports a second.
            if !reports.drain(|report| self.take(report)) {
                self.stop.store(true, Relaxed);
            }
            while let Ok((whose, reply)) = self.questions.try_recv() {
                let _ = reply.send(self.ledger.live(whose));
            }
            if self.stop.load(Relaxed) {
                break;
            }
            let wait = wake
                .saturating_duration_since(Instant::now())
                .min(DRAIN_EVERY);
            std::thread::sleep(wait);
        }
        // What is still queued, then the last batch, then the whole ledger as the
        // base for the next run (a cluster's baselines are in its store).
        reports.drain(|report| self.take(report));
        self.flush();
        if let Some(journal) = &mut self.journal {
            if let Err(err) = journal.compact(&self.ledger) {
                log::warn!(
                    "{}: accounting journal not folded into its base at stop ({err}); the \
                     next run reads both",
                    self.name
                );
            }
            return;
        }
        if let Some(shared) = &self.shared
            && !shared.pending.is_empty()
        {
            log::warn!(
                "{}: {} accounting reports not applied to the cluster's store at stop: \
                 those clients are credited from their last applied report",
                self.name,
                shared.pending.len()
            );
        }
    }

    /// Records a report, or queues it for the cluster's store.
    fn take(&mut self, mut report: Report) {
        report.at = unix_now();
        let Some(shared) = &mut self.shared else {
            self.ledger.record(&report);
            return;
        };
        if shared.pending.len() >= MAX_SHARED_PENDING {
            if let Some(accounts) = self.accounts.upgrade() {
                accounts.dropped.fetch_add(1, Relaxed);
            }
            return;
        }
        shared.pending.push(report);
        if shared.pending.len() >= SHARED_CHUNK && !shared.failing {
            self.apply_shared();
        }
    }

    /// Applies the waiting reports to the cluster's store, a chunk per transaction;
    /// what fails waits for the next round.
    fn apply_shared(&mut self) {
        let Some(shared) = &mut self.shared else {
            return;
        };
        let accounts = self.accounts.upgrade();
        let count = |counter: fn(&Accounts) -> &AtomicU64| {
            if let Some(accounts) = &accounts {
                counter(accounts).fetch_add(1, Relaxed);
            }
        };
        let now = unix_now();
        let mut applied = 0;
        let mut outcome = Ok(());
        for chunk in shared.pending.chunks(SHARED_CHUNK) {
            match self.ledger.record_shared(chunk, shared.store.as_mut(), now) {
                Ok(_) => {
                    applied += chunk.len();
                    count(|accounts| &accounts.shared_applied);
                }
                Err(problem) => {
                    count(match problem {
                        SharedError::Contended => |accounts: &Accounts| &accounts.shared_contended,
                        SharedError::Store(_) => |accounts: &Accounts| &accounts.shared_failed,
                    });
                    outcome = Err(problem);
                    break;
                }
            }
        }
        shared.pending.drain(..applied);
        shared.next_round = Instant::now()
            + match outcome {
                Ok(()) => SHARED_ROUND,
                Err(SharedError::Contended) => SHARED_ROUND,
                Err(SharedError::Store(_)) => SHARED_RETRY,
            };
        match outcome {
            Ok(()) if shared.failing => {
                shared.failing = false;
                log::info!(
                    "{}: the cluster's accounting store answers again",
                    self.name
                );
            }
            Err(problem) if !shared.failing => {
                shared.failing = true;
                log::warn!(
                    "{}: accounting reports not applied ({problem}); {} wait and are tried \
                     again",
                    self.name,
                    shared.pending.len()
                );
            }
            _ => {}
        }
        if let Some(accounts) = &accounts {
            accounts
                .shared_pending
                .store(shared.pending.len() as u64, Relaxed);
        }
    }

    fn flush(&mut self) {
        if self.shared.is_some() {
            self.apply_shared();
        }
        let now = unix_now();
        self.ledger.expire(now);
        let batch = self.ledger.take_batch(now);
        let accounts = self.accounts.upgrade();
        let count = |counter: fn(&Accounts) -> &AtomicU64| {
            if let Some(accounts) = &accounts {
                counter(accounts).fetch_add(1, Relaxed);
            }
        };
        if let Some(journal) = &mut self.journal {
            let had_batch = batch.is_some();
            match journal.commit(&mut self.ledger, batch) {
                Ok(()) if had_batch => count(|accounts| &accounts.written),
                Ok(()) => {}
                Err(problem) => {
                    count(|accounts| &accounts.failed);
                    // One line a flush at most.
                    log::error!(
                        "{}: accounting {problem} in {}; its credits wait in memory for the \
                         next flush",
                        self.name,
                        self.directory.display(),
                    );
                }
            }
        } else {
            self.ledger.clear_changes();
            self.write_unwritten(batch, &count);
        }
        let (max_batches, max_bytes) = self.backlog;
        for dropped in backlog::trim_backlog(&self.directory, &self.name, max_batches, max_bytes) {
            count(|accounts| &accounts.backlog_dropped);
            log::error!(
                "{}: accounting batch {} ({} bytes) deleted unsent: more than {max_batches} \
                 batches or {max_bytes} bytes waiting (private.export_backlog, \
                 export_backlog_bytes); the site never gets its credits",
                self.name,
                dropped.id,
                dropped.size
            );
        }
        if let Some(accounts) = &accounts {
            let dropped = accounts.dropped();
            if dropped > self.dropped_logged {
                log::warn!(
                    "{}: {} accounting reports dropped (the queue of {QUEUE_LEN} was full): \
                     their announces are not credited",
                    self.name,
                    dropped - self.dropped_logged
                );
                self.dropped_logged = dropped;
            }
        }
    }

    /// In a cluster: writes `batch` and those kept from earlier flushes, oldest first.
    fn write_unwritten(
        &mut self,
        batch: Option<Batch>,
        count: &dyn Fn(fn(&Accounts) -> &AtomicU64),
    ) {
        if let Some(batch) = batch {
            if self.unwritten.len() == MAX_UNWRITTEN {
                let lost = self.unwritten.remove(0);
                log::error!(
                    "{}: accounting batch {} ({} entries) lost: {MAX_UNWRITTEN} batches could not be written",
                    self.name,
                    lost.id,
                    lost.entries.len()
                );
            }
            self.unwritten.push(batch);
        }
        while let Some(batch) = self.unwritten.first() {
            match write_batch(&self.directory, batch) {
                Ok(_) => {
                    self.unwritten.remove(0);
                    count(|accounts| &accounts.written);
                }
                Err(err) => {
                    log::error!(
                        "{}: accounting batch {} ({} entries) not written to {} ({err}); kept, \
                         {} waiting, tried again at the next flush",
                        self.name,
                        batch.id,
                        batch.entries.len(),
                        self.directory.display(),
                        self.unwritten.len()
                    );
                    count(|accounts| &accounts.failed);
                    break;
                }
            }
        }
    }
}

/// Opens tracker `name`'s ledger on disk into `ledger` and says what it found.
fn open_journal(
    name: &str,
    directory: &Path,
    ledger: &mut Ledger,
    max_bytes: u64,
) -> anyhow::Result<Journal> {
    let (journal, found) = Journal::open(directory, name, ledger, unix_now(), max_bytes)?;
    if let Some(problem) = &found.problem {
        log::warn!(
            "{name}: accounting baselines not read ({problem}); every peer without them \
             starts from its next announce"
        );
    }
    if let Some(problem) = &found.unfolded {
        log::error!(
            "{name}: accounting baselines not folded into a new base ({problem}); they are \
             kept as they are, and batches wait in memory until the disk takes them"
        );
    }
    let peers = ledger.peers();
    if peers > 0 || found.records > 0 {
        log::info!(
            "{name}: accounting baselines of {peers} peers kept from the last run ({} journal \
             records replayed)",
            found.records
        );
    }
    if found.published > 0 {
        log::info!(
            "{name}: {} accounting batches committed by the last run published now (it \
             stopped before it could)",
            found.published
        );
    }
    if found.discarded > 0 {
        log::warn!(
            "{name}: {} accounting batches the last run wrote but never committed deleted: \
             their reports are credited from the baselines before them",
            found.discarded
        );
    }
    Ok(journal)
}

/// Writes `batch` as `<id>.json` in `directory`, whole or not at all, and never over
/// an existing file.
pub fn write_batch(directory: &Path, batch: &Batch) -> std::io::Result<PathBuf> {
    use std::io::Write as _;
    let path = directory.join(format!("{}.json", batch.id));
    let partial = directory.join(format!(".{}.json.partial", batch.id));
    let written = (|| {
        let mut file = std::fs::File::create(&partial)?;
        file.write_all(batch.to_json().as_bytes())?;
        file.sync_all()?;
        // A link fails where the name is taken; a rename would replace it.
        std::fs::hard_link(&partial, &path)
    })();
    let _ = std::fs::remove_file(&partial);
    written.map(|()| path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Event;

    /// A seeder's report for (`user`, `torrent`) from a client whose peer id is all
    /// `peer`, factors 100.
    fn seeder_report(user: u32, torrent: u32, peer: u8, uploaded: u64, event: Event) -> Report {
        Report {
            user,
            torrent,
            up_factor: 100,
            down_factor: 100,
            peer_id: [peer; 20],
            uploaded,
            downloaded: 0,
            left: 0,
            event,
            at: 0,
        }
    }

    #[test]
    fn reports_become_batch_files_and_the_last_one_is_written_at_the_end() {
        let dir = std::env::temp_dir().join(format!("shoal-accounting-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let accounts = Accounts::start("udp", &dir, Duration::from_secs(3600), 3600, None).unwrap();
        let report = |uploaded, event| seeder_report(17, 1001, 7, uploaded, event);
        accounts.report(report(0, Event::Started));
        accounts.report(report(4096, Event::None));
        let deadline = Instant::now() + Duration::from_secs(5);
        let live = loop {
            let live = accounts.live_user(17).unwrap();
            if live.pending.uploaded == 4096 || Instant::now() > deadline {
                break live;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(
            (live.peers, live.seeding, live.pending.uploaded),
            (1, 1, 4096)
        );
        assert_eq!(accounts.live_torrent(1001).unwrap().pairs, 1);
        accounts.finish();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        files.sort();
        // The batch, and the ledger kept for the next run: its base, and its journal
        // (empty: folded into the base at stop).
        assert_eq!(files.len(), 3, "{files:?}");
        assert!(files[0].ends_with(".udp.journal"), "{files:?}");
        assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), 0);
        assert!(files[1].ends_with(".udp.ledger"), "{files:?}");
        use std::os::unix::fs::PermissionsExt as _;
        for private in &files[..2] {
            let mode = std::fs::metadata(private).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let files = &files[2..];
        // The next run starts from them: one peer restored.
        let next = Accounts::start("udp", &dir, Duration::from_secs(3600), 3600, None).unwrap();
        assert_eq!(next.live_user(17).unwrap().peers, 1);
        next.finish();
        let text = std::fs::read_to_string(&files[0]).unwrap();
        assert!(
            text.contains("\"user\":17,\"torrent\":1001,\"uploaded\":4096"),
            "{text}"
        );
        assert_eq!(accounts.written.load(Relaxed), 1);
        assert_eq!(accounts.dropped(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_batch_that_cannot_be_written_waits_for_the_directory() {
        let dir =
            std::env::temp_dir().join(format!("shoal-accounting-gone-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let accounts =
            Accounts::start("http", &dir, Duration::from_millis(200), 3600, None).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let report = |uploaded, event| seeder_report(18, 7, 9, uploaded, event);
        accounts.report(report(0, Event::Started));
        accounts.report(report(10, Event::None));
        // A flush or two fails with the directory gone; then it is back.
        std::thread::sleep(Duration::from_millis(700));
        assert!(accounts.failed.load(Relaxed) >= 1);
        std::fs::create_dir_all(&dir).unwrap();
        accounts.finish();
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|file| !file.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert_eq!(
            files.len(),
            1,
            "the kept batch, and no partial file: {files:?}"
        );
        assert!(
            std::fs::read_to_string(files[0].path())
                .unwrap()
                .contains("\"uploaded\":10")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_backlog_is_kept_within_its_bounds_whenever_a_batch_is_written() {
        let dir =
            std::env::temp_dir().join(format!("shoal-accounting-backlog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let settings = AccountsSettings {
            backlog_batches: 3,
            ..AccountsSettings::new(Duration::from_millis(50), 3600)
        };
        let accounts = Accounts::start_with("udp", &dir, settings, None).unwrap();
        let report = |uploaded, event| seeder_report(18, 7, 9, uploaded, event);
        accounts.report(report(0, Event::Started));
        // Eight batches while no site takes them.
        for n in 1..=8 {
            accounts.report(report(n * 10, Event::None));
            let deadline = Instant::now() + Duration::from_secs(5);
            while accounts.written.load(Relaxed) < n {
                assert!(Instant::now() < deadline);
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        accounts.finish();
        let files = batch_files(&dir, "udp");
        assert_eq!(files.len(), 3, "{files:?}");
        assert_eq!(accounts.backlog_dropped.load(Relaxed), 5);
        // The newest kept: the last three batches' credits, 10 bytes each.
        assert!(
            std::fs::read_to_string(&files[2].path)
                .unwrap()
                .contains("\"uploaded\":10")
        );
        // Totals past max_session_bytes are refused and counted.
        assert!(accounts.check_totals(1 << 40, 0).is_ok());
        assert_eq!(
            accounts.check_totals(0, (1 << 50) + 1),
            Err(crate::Refusal::Implausible)
        );
        assert_eq!(accounts.refused_totals.load(Relaxed), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_batch_never_replaces_a_file() {
        let dir =
            std::env::temp_dir().join(format!("shoal-accounting-twice-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let batch = Batch {
            id: "udp-1-2-0".into(),
            from: 0,
            to: 1,
            entries: Vec::new(),
        };
        write_batch(&dir, &batch).unwrap();
        assert!(write_batch(&dir, &batch).is_err());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
