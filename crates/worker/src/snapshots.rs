//! Taking snapshots while serving, and the thread that writes them (`[state]`).
//!
//! Whoever owns a shard (a swarm worker, or a socket worker that keeps its torrents)
//! holds a [`SnapshotSchedule`]. Every `interval` seconds it starts a pass and, between
//! batches of requests, writes the records of a few partitions at a time for at most
//! [`SNAPSHOT_SLICE`], the way cleaning goes, so a shard of millions of peers never
//! stops answering for long. A finished pass goes to the `state` thread as the shard's
//! part; once every shard sent a part since the last file, the thread writes a new
//! file ([`crate::restart_file`]) off the request path. At shutdown each owner writes its
//! whole shard at once and sends it as its last part; the thread writes the final file
//! when every last part is in (or [`LAST_PARTS_WAIT`] after shutdown, with the parts it
//! has).

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use shoal_common::{Observation, StateConfig, Supervisor};
use shoal_swarm::{PARTITIONS, ServerTime};

use crate::restart_file::{StateKind, unix_now, write_atomically, write_snapshot};
use crate::shard::Shard;

/// The longest a snapshot slice runs before requests are served again (as long as a
/// cleaning slice, for the same reason).
pub(crate) const SNAPSHOT_SLICE: Duration = crate::shard::CLEANING_SLICE;
/// How long the writer waits for every shard's last part after shutdown.
pub(crate) const LAST_PARTS_WAIT: Duration = Duration::from_secs(20);
/// How long the process waits for the writer after shutdown: the last parts, then
/// writing them (about 100 MB/s here, so tens of millions of peers take seconds).
/// Under the packaged units' `TimeoutStopSec=60s`, after which systemd kills it.
pub(crate) const WRITER_GRACE: Duration = Duration::from_secs(50);

/// What the writers of each kind (UDP, HTTP) did, for the monitoring endpoint: one
/// writer per kind in a process, so plain statics.
struct Outcomes {
    /// Whether a writer of this kind runs (`[state]` on for that tracker).
    active: AtomicBool,
    failures: AtomicU64,
    /// Unix seconds of the last snapshot written, 0 before the first.
    last_written: AtomicU64,
}

static OUTCOMES: [Outcomes; 2] = [const {
    Outcomes {
        active: AtomicBool::new(false),
        failures: AtomicU64::new(0),
        last_written: AtomicU64::new(0),
    }
}; 2];

/// Adds the snapshot writers' counters to `out`, for the trackers that keep state.
pub fn observe(out: &mut Observation) {
    for kind in [StateKind::Udp, StateKind::Http] {
        let outcome = &OUTCOMES[kind as usize - 1];
        if !outcome.active.load(Relaxed) {
            continue;
        }
        let labels = [("protocol", kind.name())];
        out.counter(
            "shoal_snapshot_failures",
            "Snapshots ([state]) that could not be written; the previous file stays.",
            &labels,
            outcome.failures.load(Relaxed),
        );
        out.gauge(
            "shoal_snapshot_last_written_seconds",
            "Unix time of the last snapshot written (0: none yet); alert when it falls \
             far behind [state] interval.",
            &labels,
            outcome.last_written.load(Relaxed) as f64,
        );
    }
}

/// One shard's records, taken at `taken_at` (Unix seconds).
#[derive(Debug)]
struct Part {
    shard: usize,
    taken_at: u64,
    records: Vec<u8>,
    last: bool,
    cost: Cost,
}

/// What taking a part cost its shard's owner: time away from requests.
#[derive(Clone, Copy, Debug, Default)]
struct Cost {
    total: Duration,
    slices: u32,
    longest: Duration,
}

impl Cost {
    fn add_slice(&mut self, slice: Duration) {
        self.total += slice;
        self.slices += 1;
        self.longest = self.longest.max(slice);
    }
}

/// When a shard's owner takes its next snapshot, and how far the current one got.
#[derive(Debug)]
pub struct SnapshotSchedule {
    parts: Sender<Part>,
    shard: usize,
    every: u32,
    next: ServerTime,
    /// The next partition to write while a pass is under way.
    partition: Option<usize>,
    records: Vec<u8>,
    /// Bytes the last pass took.
    reserve: usize,
    taken_at: u64,
    cost: Cost,
}

impl SnapshotSchedule {
    /// Whether a pass is under way (its owner should not sleep long).
    pub fn in_pass(&self) -> bool {
        self.partition.is_some()
    }

    /// Writes partitions of `shard` for at most [`SNAPSHOT_SLICE`] if a snapshot is
    /// due or under way at `now`; returns whether it wrote any.
    pub fn step<S: Shard>(&mut self, shard: &S, now: ServerTime) -> bool {
        if self.partition.is_none() {
            if self.every == 0 || now < self.next {
                return false;
            }
            self.next = now.plus(self.every);
            self.partition = Some(0);
            self.taken_at = unix_now();
            // One allocation up front (pages are touched only as they fill), so no
            // slice stops to copy the records into a bigger buffer.
            self.records.reserve(self.reserve + self.reserve / 8);
        }
        let started = Instant::now();
        while let Some(partition) = self.partition {
            shard.snapshot_partition(partition, now, &mut self.records);
            if partition + 1 == PARTITIONS {
                self.partition = None;
                self.cost.add_slice(started.elapsed());
                self.send(false);
                return true;
            }
            self.partition = Some(partition + 1);
            if started.elapsed() >= SNAPSHOT_SLICE {
                break;
            }
        }
        self.cost.add_slice(started.elapsed());
        true
    }

    /// At shutdown: the whole shard at once, sent as this shard's last part.
    pub fn finish<S: Shard>(mut self, shard: &S, now: ServerTime) {
        self.records.clear();
        self.taken_at = unix_now();
        self.cost = Cost::default();
        let started = Instant::now();
        for partition in 0..PARTITIONS {
            shard.snapshot_partition(partition, now, &mut self.records);
        }
        self.cost.add_slice(started.elapsed());
        self.send(true);
    }

    fn send(&mut self, last: bool) {
        // Nothing kept between passes: the next one reserves as much as this took.
        let records = std::mem::take(&mut self.records);
        self.reserve = records.len();
        let part = Part {
            shard: self.shard,
            taken_at: self.taken_at,
            records,
            last,
            cost: std::mem::take(&mut self.cost),
        };
        if self.parts.send(part).is_err() {
            log::warn!(
                "state: the snapshot writer is gone; shard {} not saved",
                self.shard
            );
        }
    }
}

/// The tracker's own state beyond its torrents, asked for at each write (the UDP
/// tracker's connection-id key).
pub(crate) type Extras = Box<dyn Fn() -> Vec<u8> + Send>;

/// Starts the `state` thread writing `kind` snapshots of `shards` shards into
/// `config.directory`, and returns one schedule per shard (none when `[state]` is off).
pub(crate) fn start_snapshots(
    supervisor: &mut Supervisor,
    config: &StateConfig,
    kind: StateKind,
    shards: usize,
    now: ServerTime,
    extras: Extras,
) -> anyhow::Result<Vec<SnapshotSchedule>> {
    if !config.enabled() {
        return Ok(Vec::new());
    }
    let (sender, receiver) = crossbeam_channel::unbounded();
    let writer = Writer {
        parts: receiver,
        directory: config.directory.clone(),
        kind,
        latest: (0..shards).map(|_| None).collect(),
        fresh: vec![false; shards],
        last: vec![false; shards],
        extras,
        cost: Cost::default(),
    };
    let shutdown = supervisor.shutdown().clone();
    OUTCOMES[kind as usize - 1].active.store(true, Relaxed);
    supervisor.spawn_with_grace("state", WRITER_GRACE, move || {
        writer.run(&shutdown);
        Ok(())
    })?;
    Ok((0..shards)
        .map(|shard| SnapshotSchedule {
            parts: sender.clone(),
            shard,
            every: config.interval,
            next: now.plus(config.interval),
            partition: None,
            records: Vec::new(),
            reserve: 0,
            taken_at: 0,
            cost: Cost::default(),
        })
        .collect())
}

/// The `state` thread: gathers the shards' parts and writes files.
struct Writer {
    parts: Receiver<Part>,
    directory: PathBuf,
    kind: StateKind,
    /// Each shard's latest part: when it was taken, and its records.
    latest: Vec<Option<(u64, Vec<u8>)>>,
    /// Which shards sent a part since the last file.
    fresh: Vec<bool>,
    /// Which shards sent their last part.
    last: Vec<bool>,
    extras: Extras,
    /// What the parts since the last file cost their shards.
    cost: Cost,
}

impl Writer {
    fn run(mut self, shutdown: &shoal_common::Shutdown) {
        let mut stopping_since: Option<Instant> = None;
        loop {
            match self
                .parts
                .recv_timeout(shoal_common::Shutdown::POLL_INTERVAL)
            {
                Ok(part) => {
                    let shard = part.shard;
                    self.fresh[shard] = true;
                    self.last[shard] |= part.last;
                    self.latest[shard] = Some((part.taken_at, part.records));
                    self.cost.total += part.cost.total;
                    self.cost.slices += part.cost.slices;
                    self.cost.longest = self.cost.longest.max(part.cost.longest);
                    if self.fresh.iter().all(|fresh| *fresh) {
                        self.write();
                    }
                    if self.last.iter().all(|last| *last) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if shutdown.is_requested() {
                let since = *stopping_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= LAST_PARTS_WAIT {
                    log::warn!(
                        "state: not every shard saved itself within {} s of shutdown; writing the parts there are",
                        LAST_PARTS_WAIT.as_secs()
                    );
                    break;
                }
            }
        }
        if self.fresh.iter().any(|fresh| *fresh) {
            self.write();
        }
    }

    /// Writes a file from each shard's latest part. Peers' time left counts from the
    /// oldest part's time, so a peer may lose the seconds between parts, never gain
    /// them.
    fn write(&mut self) {
        self.fresh.fill(false);
        let started = Instant::now();
        let written_at = self
            .latest
            .iter()
            .flatten()
            .map(|(taken_at, _)| *taken_at)
            .min()
            .unwrap_or_else(unix_now);
        let parts: Vec<&[u8]> = self
            .latest
            .iter()
            .flatten()
            .map(|(_, records)| records.as_slice())
            .collect();
        let extras = (self.extras)();
        let name = self.kind.file_name();
        let cost = std::mem::take(&mut self.cost);
        let written = write_atomically(&self.directory, name, |file| {
            write_snapshot(file, self.kind, written_at, &extras, &parts)
        });
        let outcome = &OUTCOMES[self.kind as usize - 1];
        match written {
            Ok(bytes) => {
                outcome.last_written.store(unix_now(), Relaxed);
                log::info!(
                    "state: wrote {} ({bytes} bytes) in {} ms; taking it cost the workers {} ms in {} slices, the longest {} µs",
                    self.directory.join(name).display(),
                    started.elapsed().as_millis(),
                    cost.total.as_millis(),
                    cost.slices,
                    cost.longest.as_micros(),
                );
            }
            Err(err) => {
                outcome.failures.fetch_add(1, Relaxed);
                let hint = match err.kind() {
                    std::io::ErrorKind::StorageFull => "the disk is full",
                    std::io::ErrorKind::PermissionDenied
                    | std::io::ErrorKind::ReadOnlyFilesystem => {
                        "is [state] directory writable by the tracker?"
                    }
                    std::io::ErrorKind::NotFound => "does [state] directory still exist?",
                    _ => "the previous snapshot is kept",
                };
                log::warn!(
                    "state: cannot write {}: {err} ({hint}); a restart now would bring back the last snapshot written",
                    self.directory.join(name).display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(directory: PathBuf) -> Writer {
        Writer {
            parts: crossbeam_channel::unbounded().1,
            directory,
            kind: StateKind::Http,
            latest: vec![Some((unix_now(), Vec::new()))],
            fresh: vec![true],
            last: vec![false],
            extras: Box::new(Vec::new),
            cost: Cost::default(),
        }
    }

    fn sample(out: &Observation, name: &str) -> f64 {
        out.sum(name, &[("protocol", "http")])
    }

    #[test]
    fn failed_writes_are_counted_and_good_ones_timestamped() {
        // Other tests' writers share the statics: compare before and after.
        OUTCOMES[StateKind::Http as usize - 1]
            .active
            .store(true, Relaxed);
        let seen = || {
            let mut out = Observation::default();
            observe(&mut out);
            out
        };
        let before = seen();
        writer(PathBuf::from("/nonexistent/shoal-state")).write();
        let after = seen();
        assert_eq!(
            sample(&after, "shoal_snapshot_failures") - sample(&before, "shoal_snapshot_failures"),
            1.0
        );

        let directory =
            std::env::temp_dir().join(format!("shoal-snapshots-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        writer(directory.clone()).write();
        assert!(directory.join("http.snapshot").is_file());
        let written = sample(&seen(), "shoal_snapshot_last_written_seconds");
        assert!(written >= (unix_now() - 5) as f64, "{written}");
        std::fs::remove_dir_all(&directory).unwrap();
    }
}
