//! Accounting: what each user uploaded and downloaded in each torrent, as deltas the
//! site applies to its totals.
//!
//! Clients report totals since their session started, on every announce. The ledger
//! keeps the last totals of each (user, torrent, peer id) and credits the difference:
//!
//! * a report older than the peer's last one (a cluster node's, applied late) changes
//!   no totals and credits nothing: its bytes were seen, or its session is over;
//! * the same client announcing over IPv4 and over IPv6 (dual-stack clients do, with
//!   the same peer id and counters) is one entry, so the second announce adds nothing;
//! * the two info hashes of a hybrid torrent share the site's torrent id, so they are
//!   one entry too;
//! * the first announce a ledger sees of a peer only sets its baseline: its totals may
//!   include what an earlier run of the tracker credited already. The baselines are
//!   kept on disk with every batch (`durable`: a base and a journal), so a client
//!   that announced before a restart or a crash is credited from its last committed
//!   totals after it;
//! * a total that went down is a restarted session (it becomes the baseline, nothing
//!   is credited) when the announce says `started`, or when two reports in a row,
//!   each 30 s or more after the one before, say so (a client restarted while its
//!   `started` was lost; one alone may be an old report arriving late); otherwise it
//!   is a report overtaken by a newer one (sent together over IPv4 and IPv6) and
//!   credits nothing;
//! * factors apply to the totals, not to each gain, so a session's credits add up to
//!   its total's credit whatever reports reached the tracker;
//! * a completion (a `completed` announce, or a leecher's bytes left reaching 0) is
//!   counted once per entry; seeding time accrues between announces
//!   made with nothing left, gaps longer than the peer timeout excepted, and once per
//!   (user, torrent) however many peer ids seed it at the same time;
//! * a user's peer ids per torrent are followed up to [`MAX_PEERS_PER_ENTRY`]: a
//!   client that changes its peer id at every announce cannot grow the ledger.
//!
//! Credits accumulate per (user, torrent) until [`Ledger::take_batch`] hands them out
//! as one [`Batch`] with an id the site uses to apply each batch exactly once. No I/O:
//! times come in with the reports.

use hashbrown::HashMap;

mod durable;
mod pair;
mod shared;

use durable::Changes;
pub(crate) use durable::{Committed, MAX_RECORD, read_journal};
use pair::{Accrued, Pair, Peer};
pub use shared::{MAX_SHARED_ATTEMPTS, SharedError, SharedPairs};

/// Peer ids followed per (user, torrent); more are not credited (and counted).
pub const MAX_PEERS_PER_ENTRY: u16 = 32;

/// What an accepted announce says, for accounting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    /// The site's user and torrent ids.
    pub user: u32,
    pub torrent: u32,
    /// The torrent's upload and download factors, in percent.
    pub up_factor: u16,
    pub down_factor: u16,
    /// The client's peer id.
    pub peer_id: [u8; 20],
    /// Totals since the client's session started.
    pub uploaded: u64,
    pub downloaded: u64,
    /// Bytes still to download.
    pub left: u64,
    /// What the announce says happened.
    pub event: Event,
    /// When, in seconds.
    pub at: u64,
}

/// An announce's event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    None,
    Started,
    Completed,
    Stopped,
}

/// What one user earned in one torrent since the last batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Credit {
    /// Bytes uploaded and downloaded, as reported.
    pub uploaded: u64,
    pub downloaded: u64,
    /// The same with the torrent's factors applied: what the site's ratio counts.
    pub credited_uploaded: u64,
    pub credited_downloaded: u64,
    /// Seconds seeded.
    pub seed_seconds: u64,
    /// Completions (snatches).
    pub completed: u32,
}

impl Credit {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Credits handed to the site together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Unique across the trackers and their runs: the tracker, the run's start (Unix
    /// milliseconds) and a sequence number, `"udp-<start>-<sequence>"`. The site
    /// records the ids it applied.
    pub id: String,
    /// The span the credits were earned in, in seconds.
    pub from: u64,
    pub to: u64,
    /// (user, torrent, credit), ordered by user then torrent.
    pub entries: Vec<(u32, u32, Credit)>,
}

/// FNV-1a over `bytes`: enough to tell a cut or damaged file from a whole one.
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Whose live state to tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whose {
    /// A user's, over their torrents.
    User(u32),
    /// A torrent's, over its users.
    Torrent(u32),
}

/// What the ledger holds of one user or torrent now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Live {
    /// Peer ids followed, and how many of them seed.
    pub peers: usize,
    pub seeding: usize,
    /// (user, torrent) pairs with a peer: a user's torrents, or a torrent's users.
    pub pairs: usize,
    /// Credits earned since the last batch, not exported yet.
    pub pending: Credit,
}

/// Pairs and the credits they earned: a ledger's state, and the scratch a shared
/// ledger works in before the store takes its changes.
#[derive(Debug, Default)]
struct Book {
    pairs: HashMap<(u32, u32), Pair>,
    credits: HashMap<(u32, u32), Credit>,
    /// Reports of peer ids past [`MAX_PEERS_PER_ENTRY`], not credited.
    untracked: u64,
}

impl Book {
    /// Applies `report` to its pair, marked in `changes` where the ledger keeps them.
    fn record(&mut self, report: &Report, peer_timeout: u64, changes: Option<&mut Changes>) {
        let key = (report.user, report.torrent);
        let pair = self.pairs.entry(key).or_default();
        let accrued = pair.record(report, peer_timeout);
        if let Some(changes) = changes {
            changes.mark(key, pair);
        }
        if pair.peers.is_empty() {
            self.pairs.remove(&key);
        }
        match accrued {
            None => self.untracked += 1,
            Some(accrued) if accrued == Accrued::default() => {}
            Some(accrued) => {
                let credit = self.credits.entry(key).or_default();
                credit.add(&accrued);
            }
        }
    }
}

impl Credit {
    fn add(&mut self, accrued: &Accrued) {
        self.uploaded = self.uploaded.saturating_add(accrued.uploaded);
        self.downloaded = self.downloaded.saturating_add(accrued.downloaded);
        self.credited_uploaded = self
            .credited_uploaded
            .saturating_add(accrued.credited_uploaded);
        self.credited_downloaded = self
            .credited_downloaded
            .saturating_add(accrued.credited_downloaded);
        self.seed_seconds = self.seed_seconds.saturating_add(accrued.seed_seconds);
        self.completed = self.completed.saturating_add(u32::from(accrued.completed));
    }

    /// Adds what another credit holds, factors applied already.
    fn merge(&mut self, other: &Credit) {
        self.uploaded = self.uploaded.saturating_add(other.uploaded);
        self.downloaded = self.downloaded.saturating_add(other.downloaded);
        self.credited_uploaded = self
            .credited_uploaded
            .saturating_add(other.credited_uploaded);
        self.credited_downloaded = self
            .credited_downloaded
            .saturating_add(other.credited_downloaded);
        self.seed_seconds = self.seed_seconds.saturating_add(other.seed_seconds);
        self.completed = self.completed.saturating_add(other.completed);
    }
}

/// Deltas per peer, credits per (user, torrent).
#[derive(Debug)]
pub struct Ledger {
    book: Book,
    /// Seconds after which a peer is forgotten, and the longest gap seeding time
    /// counts across.
    peer_timeout: u64,
    run: String,
    next_batch: u64,
    since: u64,
    /// Pairs changed since the last journal record (`durable`).
    changes: Changes,
}

impl Ledger {
    /// A ledger for the run `run` (the tracker and its start, which prefix every
    /// batch id), whose peers time out after `peer_timeout` seconds.
    pub fn new(run: impl Into<String>, peer_timeout: u64, now: u64) -> Self {
        Self {
            book: Book::default(),
            peer_timeout,
            run: run.into(),
            next_batch: 0,
            since: now,
            changes: Changes::default(),
        }
    }

    /// Credits what `report` adds to its peer's last totals.
    pub fn record(&mut self, report: &Report) {
        self.book
            .record(report, self.peer_timeout, Some(&mut self.changes));
    }

    /// Forgets peers not heard from for the peer timeout (their clients left without
    /// a stopped announce). Returns how many.
    pub fn expire(&mut self, now: u64) -> usize {
        let timeout = self.peer_timeout;
        let mut gone = 0;
        let changes = &mut self.changes;
        self.book.pairs.retain(|&key, pair| {
            let expired = pair.expire(now, timeout);
            if expired > 0 {
                gone += expired;
                changes.mark(key, pair);
            }
            !pair.peers.is_empty()
        });
        gone
    }

    /// Reports not credited because their (user, torrent) had
    /// [`MAX_PEERS_PER_ENTRY`] peer ids already, so far.
    pub fn untracked(&self) -> u64 {
        self.book.untracked
    }

    /// The credits since the last batch, as a batch; `None` when there are none.
    pub fn take_batch(&mut self, now: u64) -> Option<Batch> {
        let mut entries: Vec<(u32, u32, Credit)> = self
            .book
            .credits
            .drain()
            .filter(|(_, credit)| !credit.is_empty())
            .map(|((user, torrent), credit)| (user, torrent, credit))
            .collect();
        let from = std::mem::replace(&mut self.since, now);
        if entries.is_empty() {
            return None;
        }
        entries.sort_unstable_by_key(|&(user, torrent, _)| (user, torrent));
        let id = format!("{}-{}", self.run, self.next_batch);
        self.next_batch += 1;
        Some(Batch {
            id,
            from,
            to: now,
            entries,
        })
    }

    /// Takes back a batch that could not be committed: its credits wait for the next
    /// one (its id is not used again; the site sees a gap in the sequence).
    pub fn give_back(&mut self, batch: Batch) {
        for (user, torrent, credit) in batch.entries {
            self.book
                .credits
                .entry((user, torrent))
                .or_default()
                .merge(&credit);
        }
        self.since = self.since.min(batch.from);
    }

    /// The live state of a user or a torrent: a walk over every pair followed, for
    /// the admin API (tens of milliseconds at a million peers), never for announces.
    pub fn live(&self, whose: Whose) -> Live {
        let matches = |user: u32, torrent: u32| match whose {
            Whose::User(id) => user == id,
            Whose::Torrent(id) => torrent == id,
        };
        let mut live = Live::default();
        for (&(user, torrent), pair) in &self.book.pairs {
            if matches(user, torrent) {
                live.pairs += 1;
                live.peers += pair.peers.len();
                live.seeding += pair.peers.iter().filter(|peer| peer.seeding).count();
            }
        }
        for (&(user, torrent), credit) in &self.book.credits {
            if matches(user, torrent) {
                live.pending.merge(credit);
            }
        }
        live
    }

    /// Forgets every baseline (a ledger on disk that could not be read whole): each
    /// client's next report is a baseline.
    pub(crate) fn forget_baselines(&mut self) {
        self.book.pairs.clear();
        self.changes.clear();
    }

    /// Peers followed.
    pub fn peers(&self) -> usize {
        self.book.pairs.values().map(|pair| pair.peers.len()).sum()
    }
}

impl Batch {
    /// The batch as JSON, the form the site receives:
    /// `{"batch":"…","from":…,"to":…,"entries":[{"user":17,"torrent":1001,…}]}`.
    pub fn to_json(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!(
            "{{\"batch\":\"{}\",\"from\":{},\"to\":{},\"entries\":[",
            self.id, self.from, self.to
        );
        for (i, (user, torrent, credit)) in self.entries.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"user\":{user},\"torrent\":{torrent},\"uploaded\":{},\"downloaded\":{},\
                 \"credited_uploaded\":{},\"credited_downloaded\":{},\"seed_seconds\":{},\
                 \"completed\":{}}}",
                credit.uploaded,
                credit.downloaded,
                credit.credited_uploaded,
                credit.credited_downloaded,
                credit.seed_seconds,
                credit.completed
            );
        }
        out.push_str("]}");
        out
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod properties;
