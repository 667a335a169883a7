//! Accounting: what each user uploaded and downloaded in each torrent, as deltas the
//! site applies to its totals.
//!
//! Clients report totals since their session started, on every announce. The ledger
//! keeps the last totals of each (user, torrent, peer id) and credits the difference:
//!
//! * a total that went down in a `started` announce is a restarted session: nothing
//!   is credited, and the new total is the baseline; a total that went down in any
//!   other announce (reports of one client crossing on two sockets, two machines
//!   sharing a peer id) credits nothing and keeps the higher baseline, so no byte is
//!   credited twice;
//! * the same client announcing over IPv4 and over IPv6 (dual-stack clients do, with
//!   the same peer id and counters) is one entry, so the second announce adds nothing;
//! * the two info hashes of a hybrid torrent share the site's torrent id, so they are
//!   one entry too;
//! * the first announce a ledger sees of a peer only sets its baseline: its totals may
//!   include what an earlier run of the tracker credited already. The baselines are
//!   kept across a restart ([`Ledger::save`], [`Ledger::restore`]), so a client that
//!   announced before a restart is credited from its last totals after it;
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

/// The first line of a saved ledger: the format and its version.
const SAVED_MAGIC: &[u8] = b"shoal ledger 1\n";
/// Bytes per saved peer: user, torrent, peer id, uploaded, downloaded, last seen, flags.
const SAVED_RECORD: usize = 4 + 4 + 20 + 8 + 8 + 8 + 1;

/// FNV-1a over `bytes`: enough to tell a cut or damaged file from a whole one.
fn checksum(bytes: &[u8]) -> u64 {
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

/// What a (user, torrent) has across its peer ids.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    peers: u16,
    seeded_until: u64,
}

/// The last totals of one (user, torrent, peer id).
#[derive(Clone, Copy, Debug)]
struct Peer {
    uploaded: u64,
    downloaded: u64,
    seeding: bool,
    completed: bool,
    last_seen: u64,
}

/// Deltas per peer, credits per (user, torrent).
#[derive(Debug)]
pub struct Ledger {
    peers: HashMap<(u32, u32, [u8; 20]), Peer>,
    /// Per (user, torrent): peer ids followed, and the time up to which seeding has
    /// been credited.
    entries: HashMap<(u32, u32), Entry>,
    credits: HashMap<(u32, u32), Credit>,
    /// Reports of peer ids past [`MAX_PEERS_PER_ENTRY`], not credited.
    untracked: u64,
    /// Seconds after which a peer is forgotten, and the longest gap seeding time
    /// counts across.
    peer_timeout: u64,
    run: String,
    next_batch: u64,
    since: u64,
}

impl Ledger {
    /// A ledger for the run `run` (the tracker and its start, which prefix every
    /// batch id), whose peers time out after `peer_timeout` seconds.
    pub fn new(run: impl Into<String>, peer_timeout: u64, now: u64) -> Self {
        Self {
            peers: HashMap::new(),
            entries: HashMap::new(),
            credits: HashMap::new(),
            untracked: 0,
            peer_timeout,
            run: run.into(),
            next_batch: 0,
            since: now,
        }
    }

    /// Credits what `report` adds to its peer's last totals.
    pub fn record(&mut self, report: &Report) {
        let key = (report.user, report.torrent, report.peer_id);
        let pair = (report.user, report.torrent);
        let seeding = report.left == 0;
        let Some(peer) = self.peers.get_mut(&key) else {
            // First sight: a baseline only (see the module's notes), but a completion
            // announced now is one.
            if report.event != Event::Stopped {
                let entry = self.entries.entry(pair).or_default();
                if entry.peers >= MAX_PEERS_PER_ENTRY {
                    self.untracked += 1;
                    return;
                }
                entry.peers += 1;
                self.peers.insert(
                    key,
                    Peer {
                        uploaded: report.uploaded,
                        downloaded: report.downloaded,
                        seeding,
                        completed: report.event == Event::Completed,
                        last_seen: report.at,
                    },
                );
            }
            if report.event == Event::Completed {
                self.credit(report).completed += 1;
            }
            return;
        };
        let restarted = report.event == Event::Started;
        let advance = |last: &mut u64, now: u64| -> u64 {
            if now >= *last {
                std::mem::replace(last, now).abs_diff(now)
            } else {
                // Lower: a new session only when the client says it started one;
                // otherwise the higher baseline stays and nothing is credited.
                if restarted {
                    *last = now;
                }
                0
            }
        };
        let uploaded = advance(&mut peer.uploaded, report.uploaded);
        let downloaded = advance(&mut peer.downloaded, report.downloaded);
        // Seeding since its last announce, if that was within the peer timeout;
        // counted once per (user, torrent) for time several peer ids seed at once.
        let mut seed_seconds = 0;
        if peer.seeding && report.at.saturating_sub(peer.last_seen) <= self.peer_timeout {
            let entry = self.entries.entry(pair).or_default();
            let from = peer.last_seen.max(entry.seeded_until);
            seed_seconds = report.at.saturating_sub(from);
            entry.seeded_until = entry.seeded_until.max(report.at);
        }
        // A completion is announced as one (`completed`), or shows as the peer's
        // bytes left reaching 0: aria2, told to stop once it has the file, sends only
        // `stopped` with nothing left.
        let finished = report.event == Event::Completed || (!peer.seeding && seeding);
        let completed = finished && !peer.completed;
        peer.seeding = seeding;
        peer.completed |= completed;
        peer.last_seen = peer.last_seen.max(report.at);
        if report.event == Event::Stopped {
            self.peers.remove(&key);
            self.forget_peer(pair);
        }
        let (up_factor, down_factor) = (u64::from(report.up_factor), u64::from(report.down_factor));
        let credit = self.credit(report);
        credit.uploaded = credit.uploaded.saturating_add(uploaded);
        credit.downloaded = credit.downloaded.saturating_add(downloaded);
        credit.credited_uploaded = credit
            .credited_uploaded
            .saturating_add(uploaded.saturating_mul(up_factor) / 100);
        credit.credited_downloaded = credit
            .credited_downloaded
            .saturating_add(downloaded.saturating_mul(down_factor) / 100);
        credit.seed_seconds = credit.seed_seconds.saturating_add(seed_seconds);
        credit.completed = credit.completed.saturating_add(u32::from(completed));
    }

    /// One peer id of `pair` is gone.
    fn forget_peer(&mut self, pair: (u32, u32)) {
        if let Some(entry) = self.entries.get_mut(&pair) {
            entry.peers = entry.peers.saturating_sub(1);
            if entry.peers == 0 {
                self.entries.remove(&pair);
            }
        }
    }

    fn credit(&mut self, report: &Report) -> &mut Credit {
        self.credits
            .entry((report.user, report.torrent))
            .or_default()
    }

    /// Forgets peers not heard from for the peer timeout (their clients left without
    /// a stopped announce). Returns how many.
    pub fn expire(&mut self, now: u64) -> usize {
        let timeout = self.peer_timeout;
        let mut gone = Vec::new();
        self.peers.retain(|&(user, torrent, _), peer| {
            let keep = now.saturating_sub(peer.last_seen) <= timeout;
            if !keep {
                gone.push((user, torrent));
            }
            keep
        });
        for &pair in &gone {
            self.forget_peer(pair);
        }
        gone.len()
    }

    /// Reports not credited because their (user, torrent) had
    /// [`MAX_PEERS_PER_ENTRY`] peer ids already, so far.
    pub fn untracked(&self) -> u64 {
        self.untracked
    }

    /// The credits since the last batch, as a batch; `None` when there are none.
    pub fn take_batch(&mut self, now: u64) -> Option<Batch> {
        let mut entries: Vec<(u32, u32, Credit)> = self
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

    /// The live state of a user or a torrent: a walk over every peer followed, for
    /// the admin API (tens of milliseconds at a million peers), never for announces.
    pub fn live(&self, whose: Whose) -> Live {
        let matches = |user: u32, torrent: u32| match whose {
            Whose::User(id) => user == id,
            Whose::Torrent(id) => torrent == id,
        };
        let mut live = Live::default();
        for (&(user, torrent, _), peer) in &self.peers {
            if matches(user, torrent) {
                live.peers += 1;
                live.seeding += usize::from(peer.seeding);
            }
        }
        live.pairs = self.entries.keys().filter(|&&(u, t)| matches(u, t)).count();
        for (&(user, torrent), credit) in &self.credits {
            if matches(user, torrent) {
                let sum = &mut live.pending;
                sum.uploaded = sum.uploaded.saturating_add(credit.uploaded);
                sum.downloaded = sum.downloaded.saturating_add(credit.downloaded);
                sum.credited_uploaded = sum
                    .credited_uploaded
                    .saturating_add(credit.credited_uploaded);
                sum.credited_downloaded = sum
                    .credited_downloaded
                    .saturating_add(credit.credited_downloaded);
                sum.seed_seconds = sum.seed_seconds.saturating_add(credit.seed_seconds);
                sum.completed = sum.completed.saturating_add(credit.completed);
            }
        }
        live
    }

    /// The baselines (every peer's last totals), to be read back by
    /// [`restore`](Self::restore) in the next run. Credits are not in it: take the
    /// last batch first.
    pub fn save(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(SAVED_MAGIC.len() + 16 + self.peers.len() * SAVED_RECORD);
        out.extend_from_slice(SAVED_MAGIC);
        out.extend_from_slice(&(self.peers.len() as u64).to_le_bytes());
        for (&(user, torrent, peer_id), peer) in &self.peers {
            out.extend_from_slice(&user.to_le_bytes());
            out.extend_from_slice(&torrent.to_le_bytes());
            out.extend_from_slice(&peer_id);
            out.extend_from_slice(&peer.uploaded.to_le_bytes());
            out.extend_from_slice(&peer.downloaded.to_le_bytes());
            out.extend_from_slice(&peer.last_seen.to_le_bytes());
            out.push(u8::from(peer.seeding) | u8::from(peer.completed) << 1);
        }
        let sum = checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Takes the baselines of `saved` (what [`save`](Self::save) wrote in an earlier
    /// run) for peers heard from within the peer timeout before `now`. Returns how
    /// many were restored; a file that is cut short, changed or of another format is
    /// refused whole.
    pub fn restore(&mut self, saved: &[u8], now: u64) -> Result<usize, &'static str> {
        let body = saved
            .len()
            .checked_sub(8)
            .map(|end| (&saved[..end], &saved[end..]))
            .filter(|(body, _)| body.starts_with(SAVED_MAGIC));
        let Some((body, sum)) = body else {
            return Err("not a ledger file");
        };
        if checksum(body).to_le_bytes() != sum {
            return Err("its checksum does not match: cut short or changed");
        }
        let records = &body[SAVED_MAGIC.len()..];
        let (count, records) = records.split_at_checked(8).ok_or("cut short")?;
        let count = u64::from_le_bytes(count.try_into().unwrap_or_default());
        if records.len() as u64 != count.saturating_mul(SAVED_RECORD as u64) {
            return Err("its record count does not match its length");
        }
        let mut restored = 0;
        for record in records.chunks_exact(SAVED_RECORD) {
            let word =
                |at: usize| u64::from_le_bytes(record[at..at + 8].try_into().unwrap_or_default());
            let half =
                |at: usize| u32::from_le_bytes(record[at..at + 4].try_into().unwrap_or_default());
            let (user, torrent) = (half(0), half(4));
            let mut peer_id = [0u8; 20];
            peer_id.copy_from_slice(&record[8..28]);
            let peer = Peer {
                uploaded: word(28),
                downloaded: word(36),
                last_seen: word(44),
                seeding: record[52] & 1 != 0,
                completed: record[52] & 2 != 0,
            };
            if now.saturating_sub(peer.last_seen) > self.peer_timeout
                || self.peers.contains_key(&(user, torrent, peer_id))
            {
                continue;
            }
            let entry = self.entries.entry((user, torrent)).or_default();
            if entry.peers >= MAX_PEERS_PER_ENTRY {
                continue;
            }
            entry.peers += 1;
            if peer.seeding {
                entry.seeded_until = entry.seeded_until.max(peer.last_seen);
            }
            self.peers.insert((user, torrent, peer_id), peer);
            restored += 1;
        }
        Ok(restored)
    }

    /// Peers followed.
    pub fn peers(&self) -> usize {
        self.peers.len()
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
mod tests {
    use super::*;

    const PEER: [u8; 20] = *b"-qB4620-aaaaaaaaaaaa";

    fn report(uploaded: u64, downloaded: u64, left: u64, event: Event, at: u64) -> Report {
        Report {
            user: 17,
            torrent: 1001,
            up_factor: 100,
            down_factor: 100,
            peer_id: PEER,
            uploaded,
            downloaded,
            left,
            event,
            at,
        }
    }

    fn only(batch: &Batch) -> Credit {
        assert_eq!(batch.entries.len(), 1, "{batch:?}");
        batch.entries[0].2
    }

    #[test]
    fn deltas_are_credited_and_a_smaller_total_is_a_new_session() {
        let mut ledger = Ledger::new("udp-1700000000000", 3600, 0);
        ledger.record(&report(0, 0, 1000, Event::Started, 0));
        ledger.record(&report(100, 400, 600, Event::None, 60));
        ledger.record(&report(250, 1000, 0, Event::Completed, 120));
        // The client restarted: totals from zero again.
        ledger.record(&report(30, 0, 0, Event::Started, 180));
        ledger.record(&report(80, 0, 0, Event::None, 240));
        let credit = only(&ledger.take_batch(300).unwrap());
        assert_eq!((credit.uploaded, credit.downloaded), (250 + 50, 1000));
        assert_eq!(credit.completed, 1);
        // Seeding from the completion on: 120 -> 180 -> 240.
        assert_eq!(credit.seed_seconds, 120);
        assert_eq!(ledger.take_batch(301), None, "a batch is handed out once");
    }

    #[test]
    fn a_dual_stack_client_and_a_hybrid_torrent_are_credited_once() {
        let mut ledger = Ledger::new("udp-1", 3600, 0);
        ledger.record(&report(0, 0, 1000, Event::Started, 0));
        // The same counters over IPv4 and IPv6, and under the v2 hash (same ids).
        for at in [60, 61, 62] {
            ledger.record(&report(500, 200, 800, Event::None, at));
        }
        ledger.record(&report(500, 1000, 0, Event::Completed, 100));
        ledger.record(&report(500, 1000, 0, Event::Completed, 101));
        let credit = only(&ledger.take_batch(200).unwrap());
        assert_eq!(
            (credit.uploaded, credit.downloaded, credit.completed),
            (500, 1000, 1)
        );
    }

    #[test]
    fn factors_apply_and_a_first_sight_is_a_baseline() {
        let mut ledger = Ledger::new("udp-1", 3600, 0);
        // First seen mid-session (a tracker restart): its totals are not credited.
        let freeleech = |uploaded, downloaded, at| Report {
            up_factor: 200,
            down_factor: 0,
            ..report(uploaded, downloaded, 10, Event::None, at)
        };
        ledger.record(&freeleech(5000, 5000, 0));
        ledger.record(&freeleech(6000, 7000, 60));
        let credit = only(&ledger.take_batch(60).unwrap());
        assert_eq!((credit.uploaded, credit.downloaded), (1000, 2000));
        assert_eq!(
            (credit.credited_uploaded, credit.credited_downloaded),
            (2000, 0)
        );
    }

    #[test]
    fn stopped_peers_leave_and_silent_ones_expire_without_seed_time() {
        let mut ledger = Ledger::new("udp-1", 100, 0);
        ledger.record(&report(0, 0, 0, Event::Started, 0));
        ledger.record(&report(10, 0, 0, Event::Stopped, 50));
        assert_eq!(ledger.peers(), 0);
        ledger.record(&report(0, 0, 0, Event::Started, 60));
        // A gap past the timeout counts no seeding time.
        ledger.record(&report(0, 0, 0, Event::None, 400));
        let credit = only(&ledger.take_batch(400).unwrap());
        assert_eq!((credit.uploaded, credit.seed_seconds), (10, 50));
        assert_eq!(ledger.expire(600), 1);
        assert_eq!(ledger.peers(), 0);
    }

    #[test]
    fn a_lower_total_without_a_restart_credits_nothing_twice() {
        let mut ledger = Ledger::new("udp-1", 3600, 0);
        ledger.record(&report(0, 0, 1000, Event::Started, 0));
        // Two sockets' reports crossing: 1010, then an older 1000, then 2000.
        ledger.record(&report(1010, 0, 1000, Event::None, 10));
        ledger.record(&report(1000, 0, 1000, Event::None, 11));
        ledger.record(&report(2000, 0, 1000, Event::None, 20));
        // Two machines sharing a peer id, 100 GB and 1 GB alternating.
        ledger.record(&report(100_000, 0, 1000, Event::None, 30));
        ledger.record(&report(1_000, 0, 1000, Event::None, 31));
        ledger.record(&report(100_000, 0, 1000, Event::None, 32));
        let credit = only(&ledger.take_batch(40).unwrap());
        assert_eq!(credit.uploaded, 100_000);
    }

    #[test]
    fn seed_time_counts_once_and_peer_ids_are_capped() {
        let mut ledger = Ledger::new("udp-1", 3600, 0);
        let seeder = |id: u8, at| Report {
            peer_id: [id; 20],
            ..report(0, 0, 0, Event::None, at)
        };
        // Three peer ids seeding the same hours: one user's seed time, once.
        for id in 0..3 {
            ledger.record(&seeder(id, 0));
        }
        for id in 0..3 {
            ledger.record(&seeder(id, 600));
        }
        let credit = only(&ledger.take_batch(600).unwrap());
        assert_eq!(credit.seed_seconds, 600);
        // A client changing its peer id at every announce stops being followed.
        for id in 3..100 {
            ledger.record(&seeder(id, 700));
        }
        assert_eq!(ledger.peers(), usize::from(MAX_PEERS_PER_ENTRY));
        assert_eq!(ledger.untracked(), 100 - u64::from(MAX_PEERS_PER_ENTRY));
        assert_eq!(ledger.expire(700 + 3601), usize::from(MAX_PEERS_PER_ENTRY));
        ledger.record(&seeder(200, 5000));
        assert_eq!(ledger.peers(), 1, "expiry frees the places");
    }

    #[test]
    fn batches_have_unique_ids_and_read_as_json() {
        let mut ledger = Ledger::new("udp-1700000000123", 3600, 0);
        ledger.record(&report(0, 0, 1000, Event::Started, 0));
        ledger.record(&report(10, 20, 980, Event::None, 5));
        let first = ledger.take_batch(10).unwrap();
        ledger.record(&report(15, 20, 980, Event::None, 15));
        let second = ledger.take_batch(20).unwrap();
        assert_eq!(
            (first.id.as_str(), second.id.as_str()),
            ("udp-1700000000123-0", "udp-1700000000123-1")
        );
        assert_eq!((second.from, second.to), (10, 20));
        assert_eq!(
            first.to_json(),
            "{\"batch\":\"udp-1700000000123-0\",\"from\":0,\"to\":10,\"entries\":[{\"user\":17,\
             \"torrent\":1001,\"uploaded\":10,\"downloaded\":20,\"credited_uploaded\":10,\
             \"credited_downloaded\":20,\"seed_seconds\":0,\"completed\":0}]}"
        );
    }

    #[test]
    fn live_state_is_told_per_user_and_per_torrent() {
        let mut ledger = Ledger::new("udp-1", 3600, 0);
        let at = |user, torrent, peer: u8, uploaded, left, event| Report {
            user,
            torrent,
            up_factor: 100,
            down_factor: 100,
            peer_id: [peer; 20],
            uploaded,
            downloaded: 0,
            left,
            event,
            at: 10,
        };
        ledger.record(&at(17, 1, 1, 0, 0, Event::Started));
        ledger.record(&at(17, 1, 1, 500, 0, Event::None));
        ledger.record(&at(17, 2, 2, 0, 10, Event::Started));
        ledger.record(&at(18, 1, 3, 0, 10, Event::Started));
        let user = ledger.live(Whose::User(17));
        assert_eq!((user.peers, user.seeding, user.pairs), (2, 1, 2));
        assert_eq!(user.pending.uploaded, 500);
        let torrent = ledger.live(Whose::Torrent(1));
        assert_eq!((torrent.peers, torrent.seeding, torrent.pairs), (2, 1, 2));
        assert_eq!(ledger.live(Whose::User(99)), Live::default());
    }

    #[test]
    fn baselines_survive_a_restart_and_a_damaged_file_is_refused() {
        let report = |peer: u8, uploaded, left, event, at| Report {
            user: 17,
            torrent: 1001,
            up_factor: 100,
            down_factor: 100,
            peer_id: [peer; 20],
            uploaded,
            downloaded: 0,
            left,
            event,
            at,
        };
        let mut before = Ledger::new("udp-1", 3600, 0);
        before.record(&report(1, 0, 0, Event::Started, 100));
        before.record(&report(1, 1000, 0, Event::None, 200));
        before.record(&report(2, 50, 10, Event::Started, 10));
        let saved = before.save();
        // The next run: peer 1's next announce is credited from 1000; peer 2, last
        // heard 3,690 s before (past the peer timeout), starts from scratch.
        let mut after = Ledger::new("udp-2", 3600, 500);
        assert_eq!(after.restore(&saved, 3700), Ok(1));
        after.record(&report(1, 1500, 0, Event::None, 3700));
        after.record(&report(2, 80, 10, Event::None, 3700));
        let batch = after.take_batch(3700).unwrap();
        assert_eq!(batch.entries.len(), 1);
        assert_eq!(batch.entries[0].2.uploaded, 500, "{batch:?}");
        let mut damaged = saved.clone();
        damaged[30] ^= 1;
        assert!(Ledger::new("x", 3600, 0).restore(&damaged, 0).is_err());
        assert!(
            Ledger::new("x", 3600, 0)
                .restore(&saved[..saved.len() - 1], 0)
                .is_err()
        );
        assert!(Ledger::new("x", 3600, 0).restore(b"", 0).is_err());
        assert_eq!(
            Ledger::new("x", 3600, 0).restore(&Ledger::new("y", 1, 0).save(), 0),
            Ok(0)
        );
    }

    #[test]
    fn a_leecher_that_reaches_nothing_left_has_completed_once() {
        let mut ledger = Ledger::new("http-1", 3600, 0);
        let at = |left, event, at| Report {
            user: 17,
            torrent: 1003,
            up_factor: 100,
            down_factor: 100,
            peer_id: [3; 20],
            uploaded: 0,
            downloaded: 100 - left,
            left,
            event,
            at,
        };
        ledger.record(&at(100, Event::Started, 10));
        // aria2 with --seed-time=0: straight to stopped with nothing left.
        ledger.record(&at(0, Event::Stopped, 20));
        assert_eq!(only(&ledger.take_batch(30).unwrap()).completed, 1);
        // Another: nothing left announced, then `completed` too: one completion.
        let other = |left, event, when| Report {
            peer_id: [4; 20],
            ..at(left, event, when)
        };
        ledger.record(&other(100, Event::Started, 40));
        ledger.record(&other(0, Event::None, 50));
        ledger.record(&other(0, Event::Completed, 60));
        ledger.record(&other(0, Event::Stopped, 70));
        assert_eq!(only(&ledger.take_batch(80).unwrap()).completed, 1);
    }
}
