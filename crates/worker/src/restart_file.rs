//! A tracker's state on disk: the snapshot file that lets a restart keep its swarms.
//!
//! One file per tracker in the state directory, `<kind>.snapshot`:
//!
//! ```text
//! magic "SHOALSWM" [8] | format version u16 | tracker kind u8 | reserved u8
//! written at (Unix seconds) u64 | extras length u32 | records length u64
//! CRC-32 (IEEE) of extras and records u32 | extras | records
//! ```
//!
//! Integers are little-endian. The extras are the tracker's own (the UDP tracker's
//! connection-id key); the records are the torrents ([`shoal_swarm::SnapshotData`]).
//!
//! A file is written next to its final name, synced, renamed over it and the directory
//! synced, so a crash at any point leaves either the old snapshot or the new one whole.
//! A file that cannot be used (not a snapshot, another format version or tracker
//! kind, cut short, checksum wrong) is refused with its name and the reason, moved
//! aside for inspection, and the tracker starts empty: a bad file never stops a start.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shoal_common::StateConfig;
use shoal_swarm::{BitTorrentMap, Restored, ServerTime, SnapshotData};

use crate::shard_for;

/// What every snapshot file starts with.
pub(crate) const MAGIC: [u8; 8] = *b"SHOALSWM";
/// The format written; files of another version are refused.
pub(crate) const FORMAT_VERSION: u16 = 1;
/// Bytes before the extras.
const HEADER: usize = 8 + 2 + 1 + 1 + 8 + 4 + 8 + 4;

pub(crate) use shoal_common::StateKind;

/// Checks that `records` are whole records of `kind`'s peers (UDP peers carry nothing
/// more, HTTP peers their peer id).
fn check_records(kind: StateKind, records: &[u8]) -> Result<usize, shoal_swarm::RecordError> {
    match kind {
        StateKind::Udp => shoal_swarm::check_records::<()>(records),
        StateKind::Http => shoal_swarm::check_records::<[u8; 20]>(records),
    }
}

/// A tracker's state at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The tracker it belongs to.
    pub kind: StateKind,
    /// When it was taken, as Unix seconds (peers' time left counts from here).
    pub written_at: u64,
    /// The tracker's own state beyond its torrents.
    pub extras: Vec<u8>,
    /// The torrents.
    pub records: Vec<u8>,
}

/// Why a snapshot file was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It does not start with [`MAGIC`].
    NotASnapshot,
    /// Written by another format version.
    Version(u16),
    /// Written by another tracker.
    Kind(u8),
    /// Shorter than its header says.
    Truncated {
        /// Bytes the header promises.
        expected: u64,
        /// Bytes there are.
        found: u64,
    },
    /// The checksum does not match: the bytes changed after they were written.
    Checksum,
    /// Longer than its header says.
    TrailingBytes(u64),
    /// Taken at a time no clock gives (past [`LATEST_WRITTEN_AT`]).
    Time(u64),
    /// The torrents' records are not whole records of this tracker's peers.
    Records(shoal_swarm::RecordError),
}

/// The latest time a snapshot may say it was taken: the end of the year 9999, as
/// Unix seconds. Anything later is damage (and past `i64::MAX` it would not even be
/// a time the system can hold).
pub(crate) const LATEST_WRITTEN_AT: u64 = 253_402_300_799;

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotASnapshot => write!(f, "not a shoal snapshot (no SHOALSWM header)"),
            Self::Version(found) => write!(
                f,
                "format version {found}, this shoal reads version {FORMAT_VERSION}"
            ),
            Self::Kind(found) => match StateKind::from_byte(*found) {
                Some(kind) => write!(f, "written by the {kind:?} tracker"),
                None => write!(f, "written by an unknown tracker kind {found}"),
            },
            Self::Truncated { expected, found } => {
                write!(f, "cut short: {found} bytes of {expected}")
            }
            Self::Checksum => write!(
                f,
                "checksum mismatch: the file changed after it was written"
            ),
            Self::TrailingBytes(extra) => write!(f, "{extra} bytes after the snapshot's end"),
            Self::Time(written_at) => {
                write!(f, "taken at an impossible time ({written_at} s after 1970)")
            }
            Self::Records(err) => write!(f, "its torrents are damaged: {err}"),
        }
    }
}

impl std::error::Error for Refusal {}

impl Snapshot {
    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.extras.len() + self.records.len());
        write_snapshot(
            &mut out,
            self.kind,
            self.written_at,
            &self.extras,
            &[&self.records],
        )
        .expect("writing to a Vec cannot fail");
        out
    }

    /// Reads a file's bytes, which must be a snapshot of `kind`.
    pub fn decode(bytes: &[u8], kind: StateKind) -> Result<Self, Refusal> {
        if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
            return Err(Refusal::NotASnapshot);
        }
        let header = bytes.get(..HEADER).ok_or(Refusal::Truncated {
            expected: HEADER as u64,
            found: bytes.len() as u64,
        })?;
        let field = |at: usize, len: usize| &header[at..at + len];
        let version = u16::from_le_bytes(field(8, 2).try_into().expect("2 bytes"));
        if version != FORMAT_VERSION {
            return Err(Refusal::Version(version));
        }
        if header[10] != kind as u8 {
            return Err(Refusal::Kind(header[10]));
        }
        let written_at = u64::from_le_bytes(field(12, 8).try_into().expect("8 bytes"));
        if written_at > LATEST_WRITTEN_AT {
            return Err(Refusal::Time(written_at));
        }
        let extras_len = u32::from_le_bytes(field(20, 4).try_into().expect("4 bytes"));
        let records_len = u64::from_le_bytes(field(24, 8).try_into().expect("8 bytes"));
        let checksum = u32::from_le_bytes(field(32, 4).try_into().expect("4 bytes"));
        let expected = (HEADER as u64)
            .saturating_add(u64::from(extras_len))
            .saturating_add(records_len);
        let found = bytes.len() as u64;
        if found < expected {
            return Err(Refusal::Truncated { expected, found });
        }
        if found > expected {
            return Err(Refusal::TrailingBytes(found - expected));
        }
        let body = &bytes[HEADER..];
        let (extras, records) = body.split_at(extras_len as usize);
        let mut crc = Crc32::new();
        crc.update(body);
        if crc.finish() != checksum {
            return Err(Refusal::Checksum);
        }
        check_records(kind, records).map_err(Refusal::Records)?;
        Ok(Self {
            kind,
            written_at,
            extras: extras.to_vec(),
            records: records.to_vec(),
        })
    }

    /// When it was taken.
    pub fn taken(&self) -> SystemTime {
        // `decode` refuses times past LATEST_WRITTEN_AT, which every platform holds.
        UNIX_EPOCH
            .checked_add(Duration::from_secs(self.written_at))
            .unwrap_or(UNIX_EPOCH)
    }

    /// Seconds from when it was taken to `now` (0 if the clock went back).
    pub fn age(&self, now: SystemTime) -> u32 {
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        u32::try_from(now.saturating_sub(self.written_at)).unwrap_or(u32::MAX)
    }
}

/// Now, as Unix seconds.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

/// Writes a snapshot whose records are `parts` one after another into `out`, without
/// putting them together first (at a million peers each copy is megabytes); returns
/// the bytes written.
pub fn write_snapshot(
    out: &mut impl Write,
    kind: StateKind,
    written_at: u64,
    extras: &[u8],
    parts: &[&[u8]],
) -> io::Result<u64> {
    let records: usize = parts.iter().map(|part| part.len()).sum();
    let mut crc = Crc32::new();
    crc.update(extras);
    for part in parts {
        crc.update(part);
    }
    let mut header = Vec::with_capacity(HEADER);
    header.extend_from_slice(&MAGIC);
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header.push(kind as u8);
    header.push(0);
    header.extend_from_slice(&written_at.to_le_bytes());
    header.extend_from_slice(&(extras.len() as u32).to_le_bytes());
    header.extend_from_slice(&(records as u64).to_le_bytes());
    header.extend_from_slice(&crc.finish().to_le_bytes());
    out.write_all(&header)?;
    out.write_all(extras)?;
    for part in parts {
        out.write_all(part)?;
    }
    Ok((HEADER + extras.len() + records) as u64)
}

/// Writes `directory/name` with `write` so that a crash leaves the old file or the new
/// one, never a mix: a temporary file beside it, synced, renamed over it, and the
/// directory synced so the rename itself survives a power cut. The file is readable
/// by its owner only (0600): a snapshot holds the UDP tracker's connection-id key and
/// every peer's address.
pub(crate) fn write_atomically<T>(
    directory: &Path,
    name: &str,
    write: impl FnOnce(&mut io::BufWriter<File>) -> io::Result<T>,
) -> io::Result<T> {
    let target = directory.join(name);
    let temporary = directory.join(format!(".{name}.partial"));
    let created = {
        use std::os::unix::fs::OpenOptionsExt as _;
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?
    };
    // A partial file left by an older version may have had wider permissions.
    {
        use std::os::unix::fs::PermissionsExt as _;
        created.set_permissions(fs::Permissions::from_mode(0o600))?;
    }
    let mut file = io::BufWriter::with_capacity(1 << 20, created);
    let written = (|| {
        let written = write(&mut file)?;
        let file = file.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temporary, &target).map(|()| written)
    })();
    if written.is_err() {
        // A partial file would hold space on a disk that may be full already.
        let _ = fs::remove_file(&temporary);
    }
    let written = written?;
    // The new file is in place; syncing the directory makes the rename itself durable.
    // If that fails the snapshot was still written (not a failure to count), only
    // perhaps not yet to disk.
    if let Err(err) = File::open(directory).and_then(|directory| directory.sync_all()) {
        log::warn!(
            "state: wrote {} but could not sync its directory: {err}",
            target.display()
        );
    }
    Ok(written)
}

/// What [`load`] found.
#[derive(Debug)]
pub(crate) enum Loaded {
    /// A usable snapshot.
    Snapshot(Snapshot),
    /// No snapshot file: a first start.
    Missing,
    /// A file that could not be used, now at `kept_at`, and why.
    Refused {
        /// Why.
        reason: String,
        /// Where it was moved for inspection.
        kept_at: Option<PathBuf>,
    },
}

/// Reads the `kind` snapshot from `directory`, refusing a file over `limit` bytes
/// before reading it. A file that cannot be read or used is moved aside to
/// `<name>.refused-<unix seconds>` (so the next snapshot does not overwrite the
/// evidence) and reported; it never stops a start.
pub(crate) fn load(directory: &Path, kind: StateKind, limit: u64) -> Loaded {
    let path = directory.join(kind.file_name());
    let reason = match shoal_common::read_bounded(&path, limit) {
        Ok(bytes) => match Snapshot::decode(&bytes, kind) {
            Ok(snapshot) => return Loaded::Snapshot(snapshot),
            Err(refusal) => refusal.to_string(),
        },
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Loaded::Missing,
        Err(err) => format!("cannot read it: {err}"),
    };
    let aside = directory.join(format!("{}.refused-{}", kind.file_name(), unix_now()));
    let kept_at = fs::rename(&path, &aside).ok().map(|()| aside);
    Loaded::Refused { reason, kept_at }
}

/// The largest snapshot a tracker holding at most `torrents` torrents and `peers`
/// peers writes: 32 bytes a torrent, 43 a peer at most (an IPv6 address, its time
/// left and flags, a peer id), and a megabyte for the file's own.
pub(crate) fn largest_snapshot(torrents: usize, peers: usize) -> u64 {
    (torrents as u64)
        .saturating_mul(32)
        .saturating_add((peers as u64).saturating_mul(43))
        .saturating_add(1 << 20)
}

/// Reads `kind`'s snapshot at start when `[state]` is on (at most `limit` bytes,
/// checked before it is read), saying in the log what it found: a snapshot, none
/// yet, or a file refused (and where it was kept).
pub(crate) fn load_at_start(config: &StateConfig, kind: StateKind, limit: u64) -> Option<Snapshot> {
    if !config.enabled() {
        return None;
    }
    let path = config.directory.join(kind.file_name());
    match load(&config.directory, kind, limit) {
        Loaded::Snapshot(snapshot) => {
            log::info!(
                "state: read {} (taken {} s ago)",
                path.display(),
                snapshot.age(SystemTime::now())
            );
            Some(snapshot)
        }
        Loaded::Missing => {
            log::info!(
                "state: no snapshot at {} yet; starting empty",
                path.display()
            );
            None
        }
        Loaded::Refused { reason, kept_at } => {
            let kept = kept_at.map_or_else(
                || "it could not be moved aside".to_string(),
                |kept| format!("kept as {}", kept.display()),
            );
            log::warn!(
                "state: refused {}: {reason}; {kept}; starting empty",
                path.display()
            );
            None
        }
    }
}

/// Fills `map`, shard `index` of `shards`, with its torrents from `snapshot` at `now`,
/// peers' time left carried over by the wall-clock time since it was taken.
pub fn restore_shard<X: SnapshotData>(
    map: &mut BitTorrentMap<X>,
    snapshot: &Snapshot,
    now: ServerTime,
    index: usize,
    shards: usize,
) -> Restored {
    let age = snapshot.age(SystemTime::now());
    map.restore(&snapshot.records, age, now, |info_hash| {
        shard_for(info_hash, shards) == index
    })
    .unwrap_or_else(|err| {
        log::warn!(
            "state: the snapshot's records are damaged ({err}); kept the torrents before it"
        );
        Restored::default()
    })
}

/// Logs what a start of the `kind` tracker restored over all shards.
pub(crate) fn log_restored(kind: StateKind, restored: Restored) {
    log::info!(
        "state: restored {} torrents and {} peers to the {} tracker ({} peers expired while stopped, {} over the capacity limits)",
        restored.torrents,
        restored.peers,
        kind.name(),
        restored.peers_expired,
        restored.over_capacity
    );
}

/// CRC-32 (IEEE 802.3, as zlib and gzip compute it), table-driven.
struct Crc32 {
    value: u32,
}

const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

impl Crc32 {
    fn new() -> Self {
        Self { value: !0 }
    }

    fn update(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.value =
                CRC_TABLE[((self.value ^ u32::from(byte)) & 0xFF) as usize] ^ (self.value >> 8);
        }
    }

    fn finish(&self) -> u32 {
        !self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records of `torrents` torrents with two IPv4 peers each, as a UDP tracker
    /// writes them: info hash, downloads, IPv4 and IPv6 counts, then each peer's
    /// address, seconds left and seeder flag.
    fn records(torrents: u8) -> Vec<u8> {
        let mut records = Vec::new();
        for n in 0..torrents {
            records.extend_from_slice(&[n; 20]);
            records.extend_from_slice(&3u32.to_le_bytes());
            records.extend_from_slice(&2u32.to_le_bytes());
            records.extend_from_slice(&0u32.to_le_bytes());
            for seeder in [0, 1] {
                records.extend_from_slice(&[127, 0, 0, n, 0x1a, 0xe1]);
                records.extend_from_slice(&100u32.to_le_bytes());
                records.push(seeder);
            }
        }
        records
    }

    fn sample() -> Snapshot {
        Snapshot {
            kind: StateKind::Udp,
            written_at: 1_790_000_000,
            extras: vec![1, 2, 3],
            records: records(4),
        }
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        let mut crc = Crc32::new();
        crc.update(b"123456789");
        assert_eq!(crc.finish(), 0xCBF4_3926);
    }

    #[test]
    fn a_snapshot_reads_back_as_written() {
        let snapshot = sample();
        let bytes = snapshot.encode();
        assert_eq!(bytes.len(), HEADER + 3 + 4 * 54);
        assert_eq!(
            Snapshot::decode(&bytes, StateKind::Udp),
            Ok(snapshot.clone())
        );
        // Written from parts, the same bytes.
        let (first, second) = snapshot.records.split_at(77);
        let mut streamed = Vec::new();
        let written = write_snapshot(
            &mut streamed,
            snapshot.kind,
            snapshot.written_at,
            &snapshot.extras,
            &[first, &[], second],
        )
        .unwrap();
        assert_eq!((streamed, written), (bytes.clone(), bytes.len() as u64));
    }

    #[test]
    fn foreign_cut_damaged_and_other_version_files_are_refused() {
        let bytes = sample().encode();
        assert_eq!(
            Snapshot::decode(&bytes, StateKind::Http),
            Err(Refusal::Kind(1))
        );
        assert_eq!(
            Snapshot::decode(b"{\"torrents\": []}", StateKind::Udp),
            Err(Refusal::NotASnapshot)
        );
        let mut version = bytes.clone();
        version[8] = 2;
        assert_eq!(
            Snapshot::decode(&version, StateKind::Udp),
            Err(Refusal::Version(2))
        );
        for cut in [9, HEADER - 1, HEADER, bytes.len() - 1] {
            assert!(
                matches!(
                    Snapshot::decode(&bytes[..cut], StateKind::Udp),
                    Err(Refusal::Truncated { .. })
                ),
                "cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            Snapshot::decode(&longer, StateKind::Udp),
            Err(Refusal::TrailingBytes(1))
        );
        for at in [HEADER, HEADER + 3, bytes.len() - 1] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x40;
            assert_eq!(
                Snapshot::decode(&flipped, StateKind::Udp),
                Err(Refusal::Checksum),
                "flipped byte {at}"
            );
        }
    }

    #[test]
    fn files_are_replaced_whole_and_bad_ones_moved_aside() {
        let directory = std::env::temp_dir().join(format!("shoal-state-{}", std::process::id()));
        fs::create_dir_all(&directory).unwrap();
        assert!(matches!(
            load(&directory, StateKind::Udp, u64::MAX),
            Loaded::Missing
        ));

        let snapshot = sample();
        let write = |snapshot: &Snapshot| {
            write_atomically(&directory, StateKind::Udp.file_name(), |file| {
                file.write_all(&snapshot.encode())
            })
            .unwrap();
        };
        write(&snapshot);
        let mut newer = sample();
        newer.records = records(1);
        write(&newer);
        match load(&directory, StateKind::Udp, u64::MAX) {
            Loaded::Snapshot(loaded) => assert_eq!(loaded, newer),
            other => panic!("{other:?}"),
        }
        assert!(!directory.join(".udp.snapshot.partial").exists());

        // A write that fails half-way (a full disk) keeps the old file and leaves no
        // partial one holding space.
        let failed = write_atomically(&directory, StateKind::Udp.file_name(), |file| {
            file.write_all(&[0; 4096])?;
            Err::<(), _>(io::Error::from(io::ErrorKind::StorageFull))
        });
        assert_eq!(failed.unwrap_err().kind(), io::ErrorKind::StorageFull);
        assert!(!directory.join(".udp.snapshot.partial").exists());
        match load(&directory, StateKind::Udp, u64::MAX) {
            Loaded::Snapshot(loaded) => assert_eq!(loaded, newer),
            other => panic!("{other:?}"),
        }

        let mut damaged = newer.encode();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        fs::write(directory.join("udp.snapshot"), &damaged).unwrap();
        match load(&directory, StateKind::Udp, u64::MAX) {
            Loaded::Refused { reason, kept_at } => {
                assert!(reason.contains("checksum"), "{reason}");
                let kept_at = kept_at.unwrap();
                assert_eq!(fs::read(&kept_at).unwrap(), damaged);
                assert!(!directory.join("udp.snapshot").exists());
            }
            other => panic!("{other:?}"),
        }
        // After the refusal the next start finds no file and starts empty.
        assert!(matches!(
            load(&directory, StateKind::Udp, u64::MAX),
            Loaded::Missing
        ));
        fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn impossible_times_and_damaged_records_are_refused_and_moved_aside() {
        // Found by an attack: a valid checksum over a time past i64::MAX panicked
        // every start (the file was not moved aside).
        for written_at in [LATEST_WRITTEN_AT + 1, i64::MAX as u64 + 1, u64::MAX] {
            let snapshot = Snapshot {
                written_at,
                ..sample()
            };
            assert_eq!(
                Snapshot::decode(&snapshot.encode(), StateKind::Udp),
                Err(Refusal::Time(written_at))
            );
        }
        let latest = Snapshot {
            written_at: LATEST_WRITTEN_AT,
            ..sample()
        };
        let decoded = Snapshot::decode(&latest.encode(), StateKind::Udp).unwrap();
        assert_eq!(decoded.age(SystemTime::now()), 0);
        assert!(decoded.taken() > SystemTime::now());

        // Records that are not whole records of this tracker's peers, under a valid
        // checksum: cut inside one, a bad seeder flag, HTTP records read as UDP ones.
        let mut cut = sample();
        cut.records.pop();
        let mut flag = sample();
        flag.records[32 + 10] = 2;
        for damaged in [cut, flag] {
            assert!(matches!(
                Snapshot::decode(&damaged.encode(), StateKind::Udp),
                Err(Refusal::Records(_))
            ));
        }
        let http = Snapshot {
            kind: StateKind::Http,
            ..sample()
        };
        assert!(matches!(
            Snapshot::decode(&http.encode(), StateKind::Http),
            Err(Refusal::Records(_))
        ));

        let directory =
            std::env::temp_dir().join(format!("shoal-state-time-{}", std::process::id()));
        fs::create_dir_all(&directory).unwrap();
        let future = Snapshot {
            written_at: u64::MAX,
            ..sample()
        };
        fs::write(directory.join("udp.snapshot"), future.encode()).unwrap();
        match load(&directory, StateKind::Udp, u64::MAX) {
            Loaded::Refused { reason, kept_at } => {
                assert!(reason.contains("impossible time"), "{reason}");
                assert!(kept_at.is_some());
            }
            other => panic!("{other:?}"),
        }
        // Larger than the tracker's capacity could have written: refused unread.
        fs::write(directory.join("udp.snapshot"), sample().encode()).unwrap();
        match load(&directory, StateKind::Udp, 16) {
            Loaded::Refused { reason, .. } => {
                assert!(reason.contains("over the limit"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            largest_snapshot(10_000_000, 50_000_000),
            320_000_000 + 2_150_000_000 + (1 << 20)
        );
        // Not a regular file: refused, never read.
        fs::remove_dir_all(&directory).unwrap();
        fs::create_dir_all(directory.join("udp.snapshot")).unwrap();
        assert!(matches!(
            load(&directory, StateKind::Udp, u64::MAX),
            Loaded::Refused { .. }
        ));
        fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn snapshots_are_readable_by_their_owner_only() {
        use std::os::unix::fs::PermissionsExt as _;
        let directory =
            std::env::temp_dir().join(format!("shoal-state-mode-{}", std::process::id()));
        fs::create_dir_all(&directory).unwrap();
        // A partial file left with wide permissions does not pass them on.
        let partial = directory.join(".udp.snapshot.partial");
        fs::write(&partial, b"old").unwrap();
        fs::set_permissions(&partial, fs::Permissions::from_mode(0o644)).unwrap();
        write_atomically(&directory, "udp.snapshot", |file| {
            file.write_all(&sample().encode())
        })
        .unwrap();
        let mode = fs::metadata(directory.join("udp.snapshot"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        fs::remove_dir_all(&directory).unwrap();
    }

    #[test]
    fn age_counts_from_the_time_written() {
        let snapshot = sample();
        let later = UNIX_EPOCH + Duration::from_secs(snapshot.written_at + 90);
        assert_eq!(snapshot.age(later), 90);
        let earlier = UNIX_EPOCH + Duration::from_secs(snapshot.written_at - 5);
        assert_eq!(snapshot.age(earlier), 0);
    }
}
