//! One (user, torrent) of the ledger: the last totals of each of its peer ids, and
//! the time up to which its seeding has been credited. The rules of the module above
//! are applied here, one report at a time, so that a local ledger and a ledger shared
//! by a cluster's nodes credit alike.

use smallvec::SmallVec;

use super::{Event, MAX_PEERS_PER_ENTRY, Report};

/// A pair's peer ids: one inline (nearly every pair has one), more on the heap.
pub(super) type Peers = SmallVec<[Peer; 1]>;

/// The last totals of one peer id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Peer {
    pub(super) id: [u8; 20],
    pub(super) uploaded: u64,
    pub(super) downloaded: u64,
    pub(super) seeding: bool,
    pub(super) completed: bool,
    pub(super) last_seen: u64,
    /// Whether its last report had a lower total, long after the one before: the
    /// first sign of a session restarted unseen, which a second such report confirms.
    pub(super) lowered: bool,
}

/// A (user, torrent): its peer ids (at most [`MAX_PEERS_PER_ENTRY`]) and the time up
/// to which seeding has been credited, once for all of them.
#[derive(Clone, Debug, Default)]
pub(super) struct Pair {
    pub(super) seeded_until: u64,
    pub(super) peers: Peers,
    /// The journal's generation in which the pair last changed (`durable::Changes`):
    /// bookkeeping of the ledger on disk, not the pair's state, so not compared.
    pub(super) changed_in: u64,
}

impl PartialEq for Pair {
    fn eq(&self, other: &Self) -> bool {
        self.seeded_until == other.seeded_until && self.peers == other.peers
    }
}

impl Eq for Pair {}

/// What one report earned, before the torrent's factors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Accrued {
    pub(super) uploaded: u64,
    pub(super) downloaded: u64,
    /// The same with the torrent's factors applied.
    pub(super) credited_uploaded: u64,
    pub(super) credited_downloaded: u64,
    pub(super) seed_seconds: u64,
    pub(super) completed: bool,
}

/// Seconds within which a lower total is taken for a report overtaken by a newer one
/// of the same session (dual-stack clients announce over IPv4 and IPv6 at the same
/// moment; a cluster's nodes apply reports in rounds); later, it is a session
/// restarted. Clients announce at most once a minute (`min interval`), so two
/// reports of one session this close together were sent together.
pub(super) const CROSSING: u64 = 30;

/// The version byte of [`Pair::encode`]'s form.
const ENCODED_VERSION: u8 = 1;
/// Bytes per peer in that form: id, uploaded, downloaded, last seen, flags.
const ENCODED_PEER: usize = 20 + 8 + 8 + 8 + 1;
/// Bytes before the peers: version, seeded until, count.
const ENCODED_HEAD: usize = 1 + 8 + 1;

impl Pair {
    /// Applies `report`; `None` when its peer id is new and the pair follows
    /// [`MAX_PEERS_PER_ENTRY`] already (not credited).
    pub(super) fn record(&mut self, report: &Report, peer_timeout: u64) -> Option<Accrued> {
        let seeding = report.left == 0;
        let Some(index) = self.peers.iter().position(|peer| peer.id == report.peer_id) else {
            // First sight: a baseline only (see the module's notes). A completion
            // announced now is not one: the peer was never seen downloading (replayed
            // `completed` announces and fresh peer ids would each count one).
            if report.event != Event::Stopped {
                if self.peers.len() >= usize::from(MAX_PEERS_PER_ENTRY) {
                    return None;
                }
                self.peers.push(Peer {
                    id: report.peer_id,
                    uploaded: report.uploaded,
                    downloaded: report.downloaded,
                    seeding,
                    completed: false,
                    last_seen: report.at,
                    lowered: false,
                });
            }
            return Some(Accrued::default());
        };
        let peer = &mut self.peers[index];
        // A report older than the last one applied (another node's, late: a cluster's
        // nodes apply reports in rounds, their clocks a little apart) tells nothing
        // new of the totals: its bytes were seen already or belong to a session that
        // has restarted since, and its `started` is no restart.
        let stale = report.at < peer.last_seen;
        let lower = report.uploaded < peer.uploaded || report.downloaded < peer.downloaded;
        // A total that went down is a new session when the client says it started one,
        // or when two reports in a row, each later than reports of one session can
        // cross (`CROSSING`), say so: a client restarted while its `started` was lost
        // (the tracker down, a datagram dropped). One such report alone may be an old
        // one arriving late (a datagram retransmitted, the other IP family's copy): it
        // credits nothing and waits for the next. Sooner than `CROSSING` it is the
        // same session's report overtaken by a newer one (IPv4 and IPv6 announces sent
        // together). The higher baseline stays meanwhile, so no byte is credited
        // twice. (A `started` another node of a cluster applies late is older than the
        // report applied before it, and stale above, unless both came in one second.)
        let since = report.at.saturating_sub(peer.last_seen);
        let late = since >= CROSSING;
        let restarted =
            lower && !stale && (report.event == Event::Started || (late && peer.lowered));
        if !stale {
            peer.lowered = lower && late && !restarted;
        }
        let ((uploaded, credited_uploaded), (downloaded, credited_downloaded)) = if stale {
            ((0, 0), (0, 0))
        } else if restarted {
            // The new session's totals are its baseline; nothing of them is credited
            // (what it sent before its first report reached the tracker is unknown).
            peer.uploaded = report.uploaded;
            peer.downloaded = report.downloaded;
            ((0, 0), (0, 0))
        } else {
            // Bytes gained, and their credit: the factor applied to the totals, not to
            // the gain, so that the credits of a session add up to its last total's
            // credit whichever reports reached the tracker (rounding down each gain on
            // its own would lose up to a byte a report, and more where reports were
            // lost to a crash than where they were not).
            let advance = |last: &mut u64, now: u64, factor: u16| {
                let credit = |total: u64| u128::from(total) * u128::from(factor) / 100;
                let new = (*last).max(now);
                let gained = (new - *last, credit(new) - credit(*last));
                *last = new;
                (gained.0, u64::try_from(gained.1).unwrap_or(u64::MAX))
            };
            (
                advance(&mut peer.uploaded, report.uploaded, report.up_factor),
                advance(&mut peer.downloaded, report.downloaded, report.down_factor),
            )
        };
        // Seeding since its last announce, if that was within the peer timeout;
        // counted once per (user, torrent) for time several peer ids seed at once.
        let mut seed_seconds = 0;
        if peer.seeding && report.at.saturating_sub(peer.last_seen) <= peer_timeout {
            let from = peer.last_seen.max(self.seeded_until);
            seed_seconds = report.at.saturating_sub(from);
            self.seeded_until = self.seeded_until.max(report.at);
        }
        // A completion is a peer seen downloading that announces one (`completed`), or
        // whose bytes left reach 0 (aria2, told to stop once it has the file, sends only
        // `stopped` with nothing left); once per session of a peer id.
        let finished = !peer.seeding && (report.event == Event::Completed || seeding);
        let completed = finished && !peer.completed;
        peer.seeding = seeding;
        peer.completed |= completed;
        peer.last_seen = peer.last_seen.max(report.at);
        if report.event == Event::Stopped {
            self.peers.swap_remove(index);
        }
        Some(Accrued {
            uploaded,
            downloaded,
            credited_uploaded,
            credited_downloaded,
            seed_seconds,
            completed,
        })
    }

    /// Forgets the peers not heard from for `peer_timeout` seconds before `now`;
    /// returns how many.
    pub(super) fn expire(&mut self, now: u64, peer_timeout: u64) -> usize {
        let before = self.peers.len();
        self.peers
            .retain(|peer| now.saturating_sub(peer.last_seen) <= peer_timeout);
        before - self.peers.len()
    }

    /// The pair in the compact form a cluster's store keeps:
    /// `[version, seeded_until (8), count, count × (id, uploaded, downloaded, last_seen, flags)]`,
    /// integers little-endian.
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out
    }

    /// The length of [`encode`](Self::encode)'s output.
    pub(super) fn encoded_len(&self) -> usize {
        ENCODED_HEAD + self.peers.len().min(usize::from(u8::MAX)) * ENCODED_PEER
    }

    /// [`encode`](Self::encode), appended to `out`.
    pub(super) fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(ENCODED_VERSION);
        out.extend_from_slice(&self.seeded_until.to_le_bytes());
        // At most MAX_PEERS_PER_ENTRY (32): fits a byte.
        out.push(self.peers.len().min(usize::from(u8::MAX)) as u8);
        for peer in self.peers.iter().take(usize::from(u8::MAX)) {
            out.extend_from_slice(&peer.id);
            out.extend_from_slice(&peer.uploaded.to_le_bytes());
            out.extend_from_slice(&peer.downloaded.to_le_bytes());
            out.extend_from_slice(&peer.last_seen.to_le_bytes());
            out.push(
                u8::from(peer.seeding)
                    | u8::from(peer.completed) << 1
                    | u8::from(peer.lowered) << 2,
            );
        }
    }

    /// Reads what [`encode`](Self::encode) wrote; `None` for anything else (another
    /// version, a cut or padded value).
    pub(super) fn decode(bytes: &[u8]) -> Option<Self> {
        let (&version, rest) = bytes.split_first()?;
        let (seeded_until, rest) = rest.split_first_chunk::<8>()?;
        let (&count, records) = rest.split_first()?;
        if version != ENCODED_VERSION
            || count > MAX_PEERS_PER_ENTRY as u8
            || records.len() != usize::from(count) * ENCODED_PEER
        {
            return None;
        }
        let word = |record: &[u8], at: usize| {
            u64::from_le_bytes(record[at..at + 8].try_into().unwrap_or_default())
        };
        let peers = records
            .chunks_exact(ENCODED_PEER)
            .map(|record| Peer {
                id: record[..20].try_into().unwrap_or_default(),
                uploaded: word(record, 20),
                downloaded: word(record, 28),
                last_seen: word(record, 36),
                seeding: record[44] & 1 != 0,
                completed: record[44] & 2 != 0,
                lowered: record[44] & 4 != 0,
            })
            .collect();
        Some(Self {
            seeded_until: u64::from_le_bytes(*seeded_until),
            peers,
            changed_in: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stored_form_reads_back_and_nothing_else_does() {
        let pair = Pair {
            seeded_until: 1_700_000_000,
            changed_in: 0,
            peers: smallvec::smallvec![
                Peer {
                    id: *b"-qB4620-aaaaaaaaaaaa",
                    uploaded: u64::MAX,
                    downloaded: 7,
                    seeding: true,
                    completed: false,
                    last_seen: 42,
                    lowered: true,
                },
                Peer {
                    id: [0; 20],
                    uploaded: 0,
                    downloaded: 0,
                    seeding: false,
                    completed: true,
                    last_seen: 0,
                    lowered: false,
                },
            ],
        };
        let encoded = pair.encode();
        assert_eq!(encoded.len(), ENCODED_HEAD + 2 * ENCODED_PEER);
        assert_eq!(Pair::decode(&encoded), Some(pair.clone()));
        assert_eq!(
            Pair::decode(&Pair::default().encode()),
            Some(Pair::default())
        );
        assert_eq!(Pair::decode(&encoded[..encoded.len() - 1]), None);
        let mut padded = encoded.clone();
        padded.push(0);
        assert_eq!(Pair::decode(&padded), None);
        let mut other_version = encoded;
        other_version[0] = 2;
        assert_eq!(Pair::decode(&other_version), None);
        assert_eq!(Pair::decode(b""), None);
    }
}
