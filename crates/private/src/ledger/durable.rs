//! The ledger's state on disk, in the two forms the accounting thread keeps it in:
//!
//! * a **base**, every pair whole ([`Ledger::save`], [`Ledger::restore`]), written
//!   now and then;
//! * a **journal** of records appended after it ([`Ledger::journal_record`],
//!   [`read_journal`]), one per batch: the pairs that changed since the record before
//!   and the ids of the batches the record commits.
//!
//! A record is the commit point of its batches: a batch is published (its file
//! linked into place) only after the record naming it is on disk, so the baselines a
//! restart reads always include what every published batch credited, and a batch
//! whose record never reached the disk is never published (its reports are credited
//! again from the older baselines, once). Records carry a sequence number and the base
//! the last one it includes, so a journal left behind by a crash between writing a
//! new base and emptying the journal replays nothing twice.
//!
//! Each record is framed by its length and a checksum: a record cut short by a crash
//! or a full disk ends the journal there, and everything before it stands. No I/O
//! here: the bytes come and go through the caller.

use super::{Ledger, Pair, checksum};

/// The first line of a base: the format and its version. Version 1 (baselines only,
/// written at a clean stop by earlier releases) is still read.
const BASE_MAGIC: &[u8] = b"shoal ledger 2\n";
/// Version 1's first line.
const BASE_MAGIC_V1: &[u8] = b"shoal ledger 1\n";
/// Bytes per version 1 record: user, torrent, peer id, uploaded, downloaded, last
/// seen, flags.
const V1_RECORD: usize = 4 + 4 + 20 + 8 + 8 + 8 + 1;
/// Bytes before a journal record's payload: its length and checksum.
const FRAME_HEAD: usize = 4 + 8;
/// The largest journal record read back (about 20 million peers changed in one batch
/// interval); a larger commit is written as a new base instead.
pub(crate) const MAX_RECORD: usize = 1 << 30;

/// What a base or a journal record commits besides baselines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Committed {
    /// The last journal record the state includes.
    pub(crate) sequence: u64,
    /// Batches committed and perhaps not yet published: their files wait under
    /// temporary names until linked.
    pub(crate) batches: Vec<String>,
}

/// One journal record, read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JournalRecord {
    pub(crate) committed: Committed,
    /// The pair changes, in the form [`Ledger::apply_record`] takes.
    changes: Vec<u8>,
}

/// Appends `ids` (each under 256 bytes) to `out`.
fn put_ids(out: &mut Vec<u8>, ids: &[String]) {
    let ids: Vec<&String> = ids.iter().filter(|id| id.len() <= 255).collect();
    out.extend_from_slice(&(ids.len().min(usize::from(u16::MAX)) as u16).to_le_bytes());
    for id in ids.into_iter().take(usize::from(u16::MAX)) {
        out.push(id.len() as u8);
        out.extend_from_slice(id.as_bytes());
    }
}

/// A reader over bytes that says "cut short" instead of panicking.
struct Reader<'b>(&'b [u8]);

impl<'b> Reader<'b> {
    fn take(&mut self, n: usize) -> Result<&'b [u8], &'static str> {
        let (head, rest) = self.0.split_at_checked(n).ok_or("cut short")?;
        self.0 = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, &'static str> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().map_err(|_| "cut short")?,
        ))
    }

    fn u32(&mut self) -> Result<u32, &'static str> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| "cut short")?,
        ))
    }

    fn u64(&mut self) -> Result<u64, &'static str> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| "cut short")?,
        ))
    }

    fn ids(&mut self) -> Result<Vec<String>, &'static str> {
        let count = self.u16()?;
        (0..count)
            .map(|_| {
                let len = self.u8()?;
                String::from_utf8(self.take(usize::from(len))?.to_vec())
                    .map_err(|_| "a batch id is not text")
            })
            .collect()
    }
}

/// Which pairs changed since the last journal record: each pair is stamped with the
/// generation it last changed in, and its key listed the first time it changes in a
/// generation; a record on disk starts the next generation. A set of keys cost a
/// hash-table insert per report, a cache miss of its own at a million sessions
/// (documents/benchmarks/private-2026-11-29.md); the stamp is in the pair's entry,
/// which the report has just read. A pair removed and made again within a generation
/// is listed twice; both entries say what it is now.
#[derive(Debug)]
pub(super) struct Changes {
    generation: u64,
    keys: Vec<(u32, u32)>,
}

impl Default for Changes {
    fn default() -> Self {
        // Pairs start at 0: unchanged.
        Self {
            generation: 1,
            keys: Vec::new(),
        }
    }
}

impl Changes {
    /// Marks `key`'s pair as changed in this generation.
    pub(super) fn mark(&mut self, key: (u32, u32), pair: &mut Pair) {
        if pair.changed_in != self.generation {
            pair.changed_in = self.generation;
            self.keys.push(key);
        }
    }

    /// Forgets every change: the next generation starts.
    pub(super) fn clear(&mut self) {
        self.generation += 1;
        self.keys.clear();
    }
}

impl Ledger {
    /// The pairs changed since [`clear_changes`](Self::clear_changes), each as
    /// `user, torrent, length (u16), the pair's stored form` (length 0: gone).
    fn encode_changes(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.changes.keys.len() as u64).to_le_bytes());
        for key in &self.changes.keys {
            put_pair(out, *key, self.book.pairs.get(key));
        }
    }

    /// Whether any pair changed since the last record.
    pub(crate) fn has_changes(&self) -> bool {
        !self.changes.keys.is_empty()
    }

    /// Forgets which pairs changed: a record holding them is on disk.
    pub(crate) fn clear_changes(&mut self) {
        self.changes.clear();
    }

    /// A journal record, framed: `length (u32), checksum (u64), payload`, the payload
    /// being `sequence (u64), batch ids, changed pairs`. Call
    /// [`clear_changes`](Self::clear_changes) once it is on disk.
    pub(crate) fn journal_record(&self, committed: &Committed) -> Vec<u8> {
        let mut payload = Vec::with_capacity(64 + self.changes.keys.len() * 64);
        payload.extend_from_slice(&committed.sequence.to_le_bytes());
        put_ids(&mut payload, &committed.batches);
        self.encode_changes(&mut payload);
        let mut out = Vec::with_capacity(FRAME_HEAD + payload.len());
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&checksum(&payload).to_le_bytes());
        out.extend_from_slice(&payload);
        out
    }

    /// The base: every pair whole, with what it commits. Credits are not in it: they
    /// leave in batches.
    pub(crate) fn save(&self, committed: &Committed) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.book.pairs.len() * 64);
        out.extend_from_slice(BASE_MAGIC);
        out.extend_from_slice(&committed.sequence.to_le_bytes());
        put_ids(&mut out, &committed.batches);
        out.extend_from_slice(&(self.book.pairs.len() as u64).to_le_bytes());
        for (&key, pair) in &self.book.pairs {
            put_pair(&mut out, key, Some(pair));
        }
        let sum = checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Takes the pairs of a base (this version's, or version 1's) and returns what it
    /// commits. A base that is cut short, changed or of another format is refused
    /// whole and changes nothing. Peers not heard from within the peer timeout before
    /// `now` are dropped by [`expire`](Self::expire), which the caller runs once the
    /// journal is replayed.
    pub(crate) fn restore(&mut self, saved: &[u8]) -> Result<Committed, &'static str> {
        let (body, sum) = saved
            .split_at_checked(saved.len().wrapping_sub(8))
            .filter(|_| saved.len() >= 8)
            .ok_or("not a ledger file")?;
        if !(body.starts_with(BASE_MAGIC) || body.starts_with(BASE_MAGIC_V1)) {
            return Err("not a ledger file");
        }
        if checksum(body).to_le_bytes() != sum {
            return Err("its checksum does not match: cut short or changed");
        }
        if let Some(records) = body.strip_prefix(BASE_MAGIC_V1) {
            return self.restore_v1(records).map(|()| Committed::default());
        }
        let mut reader = Reader(&body[BASE_MAGIC.len()..]);
        let sequence = reader.u64()?;
        let batches = reader.ids()?;
        let mut pairs = Vec::new();
        read_pairs(&mut reader, &mut pairs)?;
        if !reader.0.is_empty() {
            return Err("bytes after its last pair");
        }
        for (key, pair) in pairs {
            if let Some(pair) = pair {
                self.book.pairs.insert(key, pair);
            }
        }
        Ok(Committed { sequence, batches })
    }

    /// Version 1's records: one peer each.
    fn restore_v1(&mut self, records: &[u8]) -> Result<(), &'static str> {
        let (count, records) = records.split_at_checked(8).ok_or("cut short")?;
        let count = u64::from_le_bytes(count.try_into().unwrap_or_default());
        if records.len() as u64 != count.saturating_mul(V1_RECORD as u64) {
            return Err("its record count does not match its length");
        }
        for record in records.chunks_exact(V1_RECORD) {
            let word =
                |at: usize| u64::from_le_bytes(record[at..at + 8].try_into().unwrap_or_default());
            let half =
                |at: usize| u32::from_le_bytes(record[at..at + 4].try_into().unwrap_or_default());
            let peer = super::Peer {
                id: record[8..28].try_into().unwrap_or_default(),
                uploaded: word(28),
                downloaded: word(36),
                last_seen: word(44),
                seeding: record[52] & 1 != 0,
                completed: record[52] & 2 != 0,
                lowered: false,
            };
            let pair = self.book.pairs.entry((half(0), half(4))).or_default();
            if pair.peers.len() >= usize::from(super::MAX_PEERS_PER_ENTRY)
                || pair.peers.iter().any(|known| known.id == peer.id)
            {
                continue;
            }
            if peer.seeding {
                pair.seeded_until = pair.seeded_until.max(peer.last_seen);
            }
            pair.peers.push(peer);
        }
        Ok(())
    }

    /// Applies a journal record's pair changes (replacing each pair named whole).
    pub(crate) fn apply_record(&mut self, record: &JournalRecord) -> Result<(), &'static str> {
        let mut pairs = Vec::new();
        let mut reader = Reader(&record.changes);
        read_pairs(&mut reader, &mut pairs)?;
        for (key, pair) in pairs {
            match pair {
                Some(pair) => self.book.pairs.insert(key, pair),
                None => self.book.pairs.remove(&key),
            };
        }
        Ok(())
    }
}

/// Appends one pair entry: user, torrent, length, stored form (none when gone).
fn put_pair(out: &mut Vec<u8>, (user, torrent): (u32, u32), pair: Option<&Pair>) {
    out.extend_from_slice(&user.to_le_bytes());
    out.extend_from_slice(&torrent.to_le_bytes());
    match pair.filter(|pair| !pair.peers.is_empty()) {
        Some(pair) => {
            out.extend_from_slice(&(pair.encoded_len() as u16).to_le_bytes());
            pair.encode_into(out);
        }
        None => out.extend_from_slice(&0u16.to_le_bytes()),
    }
}

/// Reads a count and that many pair entries; all or nothing.
fn read_pairs(
    reader: &mut Reader<'_>,
    pairs: &mut Vec<((u32, u32), Option<Pair>)>,
) -> Result<(), &'static str> {
    let count = reader.u64()?;
    for _ in 0..count {
        let key = (reader.u32()?, reader.u32()?);
        let len = reader.u16()?;
        let pair = match len {
            0 => None,
            len => Some(Pair::decode(reader.take(usize::from(len))?).ok_or("a pair is damaged")?),
        };
        pairs.push((key, pair));
    }
    Ok(())
}

/// The whole records at the start of `journal`, and the length they take: a record
/// cut short, over [`MAX_RECORD`] or whose checksum fails ends the journal there
/// (what follows it is a write that never completed).
pub(crate) fn read_journal(journal: &[u8]) -> (Vec<JournalRecord>, usize) {
    let mut records = Vec::new();
    let mut at = 0;
    while let Some(head) = journal.get(at..at + FRAME_HEAD) {
        let len = u32::from_le_bytes(head[..4].try_into().unwrap_or_default()) as usize;
        let sum = u64::from_le_bytes(head[4..].try_into().unwrap_or_default());
        let Some(payload) = journal.get(at + FRAME_HEAD..at + FRAME_HEAD + len) else {
            break;
        };
        if len > MAX_RECORD || checksum(payload) != sum {
            break;
        }
        let mut reader = Reader(payload);
        let parsed = (|| {
            let sequence = reader.u64()?;
            let batches = reader.ids()?;
            Ok::<_, &'static str>(JournalRecord {
                committed: Committed { sequence, batches },
                changes: reader.0.to_vec(),
            })
        })();
        let Ok(record) = parsed else {
            break;
        };
        records.push(record);
        at += FRAME_HEAD + len;
    }
    (records, at)
}
