//! Giving memory the tracker freed back to the system after a busy spell.
//!
//! glibc's allocator keeps freed blocks in its arenas for reuse and, by itself, hands
//! back only free memory at the top of a heap; blocks freed between live ones stay
//! resident. After 10,000 WebTorrent connections closed, shoal_ws held 627 MiB, and
//! 24 MiB after one `malloc_trim` (documents/benchmarks/runtime-2026-11-23.md). A trim
//! walks every arena under its lock, so a worker that allocates meanwhile waits for
//! it (tens of milliseconds for hundreds of MiB free): [`TrimPolicy`] trims only when
//! resident memory has grown well past what the last trim left, has stopped growing,
//! and the trackers hold half the peers and connections they held at their peak, i.e.
//! after a busy spell rather than during one: once per spell, or once per halving of
//! the peers and connections for a spell that ends slowly.
//!
//! The resident size comes from `/proc/self/statm`, opened before privileges are
//! dropped and read again through the same descriptor, so a chroot without `/proc`
//! does not blind it.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use shoal_common::{MemoryConfig, Observation, Shutdown};

/// Returns made so far, and the resident bytes they gave back, for the monitoring
/// endpoint ([`observe`]). One process, one memory thread: plain statics.
static RETURNS: AtomicU64 = AtomicU64::new(0);
static RETURNED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Adds the memory thread's counters to `out` (no `protocol` label: the process's).
pub(crate) fn observe(out: &mut Observation) {
    out.counter(
        "shoal_memory_returns",
        "Times freed memory was given back to the system ([memory] return_freed).",
        &[],
        RETURNS.load(Ordering::Relaxed),
    );
    out.counter(
        "shoal_memory_returned_bytes",
        "Resident bytes those returns gave back.",
        &[],
        RETURNED_BYTES.load(Ordering::Relaxed),
    );
}

fn record_return(before: u64, after: u64) {
    RETURNS.fetch_add(1, Ordering::Relaxed);
    RETURNED_BYTES.fetch_add(before.saturating_sub(after), Ordering::Relaxed);
}

/// How often resident memory is looked at.
const CHECK_INTERVAL: Duration = Duration::from_secs(10);
/// Checks in a row without growth before a trim: 30 seconds of a settled size.
const SETTLED_CHECKS: u32 = 3;
/// Growth smaller than this share of the size (1/64, about 1.6%) is noise, not a
/// busy spell going on.
const NOISE_SHARE: u64 = 64;

const MIB: u64 = 1 << 20;

/// When to trim, from what each check sees: the resident size, and the tracker's
/// work in hand (peers held and connections open), which says whether a busy spell is
/// over. Resident size alone cannot: freed memory stays resident, so a tracker after a
/// spike looks the same as one in it.
#[derive(Clone, Debug)]
pub(crate) struct TrimPolicy {
    min_growth: u64,
    /// Resident bytes at the start or after the last trim, lowered whenever the
    /// process gets smaller by itself.
    baseline: u64,
    last: u64,
    settled: u32,
    /// The most work in hand seen since the start or the last trim.
    peak_work: u64,
    /// The work in hand at the last trim (0 before the first).
    work_at_trim: u64,
}

impl TrimPolicy {
    /// Trims once resident memory is `min_growth` bytes (or a quarter, if more) above
    /// `resident` (the size at the start), has stopped growing, and the work in hand
    /// has fallen to half its peak.
    pub(crate) fn new(min_growth: u64, resident: u64) -> Self {
        Self {
            min_growth,
            baseline: resident,
            last: resident,
            settled: 0,
            peak_work: 0,
            work_at_trim: 0,
        }
    }

    /// Takes the resident size and work in hand seen now; says whether to trim.
    pub(crate) fn observe(&mut self, resident: u64, work: u64) -> bool {
        self.baseline = self.baseline.min(resident);
        self.peak_work = self.peak_work.max(work);
        let grew = resident > self.last.saturating_add(self.last / NOISE_SHARE);
        self.last = resident;
        if grew {
            self.settled = 0;
            return false;
        }
        self.settled = self.settled.saturating_add(1);
        if self.settled < SETTLED_CHECKS {
            return false;
        }
        let due = self
            .baseline
            .saturating_add(self.min_growth.max(self.baseline / 4));
        // A spell that ends slowly (peers expiring over an hour) frees memory after
        // the trim at half its peak too: each further halving of the work trims
        // again, at most log2(peak) times, without new growth.
        (resident >= due && work <= self.peak_work / 2)
            || (self.work_at_trim > 0 && work <= self.work_at_trim / 2)
    }

    /// Records a trim that left `resident` bytes with `work` in hand: the new
    /// baseline and peak, so that the next trim waits for the next spell.
    pub(crate) fn trimmed(&mut self, resident: u64, work: u64) {
        self.baseline = resident;
        self.last = resident;
        self.settled = 0;
        self.peak_work = work;
        self.work_at_trim = work;
    }
}

/// Reads this process's resident size through a descriptor opened once.
#[derive(Debug)]
struct ResidentSize {
    statm: File,
    page: u64,
}

impl ResidentSize {
    fn open() -> anyhow::Result<Self> {
        let statm = File::open("/proc/self/statm").context("cannot open /proc/self/statm")?;
        // SAFETY: sysconf only reads a system constant.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        anyhow::ensure!(page > 0, "no page size");
        Ok(Self {
            statm,
            page: page as u64,
        })
    }

    fn bytes(&self) -> Option<u64> {
        let mut buffer = [0u8; 128];
        let len = self.statm.read_at(&mut buffer, 0).ok()?;
        // "size resident shared text lib data dt", in pages (proc(5)).
        let text = std::str::from_utf8(&buffer[..len]).ok()?;
        let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
        Some(pages * self.page)
    }
}

/// Gives free memory back to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only rearranges the allocator's own free memory, under its
    // locks; it is safe to call from any thread at any time.
    unsafe { libc::malloc_trim(0) };
}

/// Other C libraries have no trim; [`Trimmer::prepare`] starts nothing there.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}

/// What the memory thread needs from before privileges are dropped.
#[derive(Debug)]
pub(crate) struct Trimmer {
    resident: ResidentSize,
    policy: TrimPolicy,
}

impl Trimmer {
    /// Prepares giving freed memory back under `config`; `None` when it is off or
    /// the C library has no way to. Call before privileges are dropped (it opens
    /// `/proc/self/statm`) and before serving (the size now is the baseline).
    pub(crate) fn prepare(config: &MemoryConfig) -> Option<Self> {
        if !config.return_freed || !cfg!(all(target_os = "linux", target_env = "gnu")) {
            return None;
        }
        let resident = ResidentSize::open()
            .inspect_err(|err| {
                log::warn!("freed memory will not be given back to the system: {err:#}");
            })
            .ok()?;
        let Some(start) = resident.bytes() else {
            log::warn!(
                "freed memory will not be given back to the system: /proc/self/statm unreadable"
            );
            return None;
        };
        let min_growth = config.return_after_growth_mib.saturating_mul(MIB);
        Some(Self {
            resident,
            policy: TrimPolicy::new(min_growth, start),
        })
    }

    /// Starts the thread, watching the trackers' work in hand (the peers and
    /// connections `work` counts) until `everything` stops.
    pub(crate) fn spawn(
        self,
        work: impl Fn() -> u64 + Send + 'static,
        everything: &Shutdown,
    ) -> anyhow::Result<()> {
        let Self {
            resident,
            mut policy,
        } = self;
        let everything = everything.clone();
        std::thread::Builder::new()
            .name("memory".into())
            .spawn(move || {
                let mut next = Instant::now() + CHECK_INTERVAL;
                while !everything.is_requested() {
                    if Instant::now() < next {
                        std::thread::sleep(Shutdown::POLL_INTERVAL);
                        continue;
                    }
                    // From now, not from the missed time: after a suspend the
                    // checks must not run back to back and look settled.
                    next = Instant::now() + CHECK_INTERVAL;
                    let Some(before) = resident.bytes() else {
                        continue;
                    };
                    let in_hand = work();
                    let due = policy.observe(before, in_hand);
                    log::debug!(
                        "resident {} MiB, {in_hand} in hand: {policy:?}",
                        before / MIB
                    );
                    if !due {
                        continue;
                    }
                    let started = Instant::now();
                    trim();
                    let after = resident.bytes().unwrap_or(before);
                    record_return(before, after);
                    log::info!(
                        "gave freed memory back to the system: resident {} MiB -> {} MiB in {} ms",
                        before / MIB,
                        after / MIB,
                        started.elapsed().as_millis()
                    );
                    policy.trimmed(after, in_hand);
                }
            })
            .context("cannot start the memory thread")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `checks` ((MiB resident, work in hand)) one check each; returns the
    /// checks that trimmed, each trim leaving `left` MiB.
    fn trims(policy: &mut TrimPolicy, checks: &[(u64, u64)], left: u64) -> Vec<usize> {
        let mut at = Vec::new();
        for (check, &(size, work)) in checks.iter().enumerate() {
            if policy.observe(size * MIB, work) {
                at.push(check);
                policy.trimmed(left * MIB, work);
            }
        }
        at
    }

    #[test]
    fn a_spike_is_trimmed_once_after_it_ends() {
        let mut policy = TrimPolicy::new(64 * MIB, 20 * MIB);
        // 10,000 connections come: memory grows to 600 MiB and stays while they are
        // open (no trim, however long), then they go and memory stays resident.
        let mut checks = vec![(100, 2_000), (300, 6_000), (600, 10_000)];
        checks.extend([(600, 10_000); 6]);
        checks.push((600, 0));
        // The size settled long ago: the first check with the work gone trims.
        assert_eq!(trims(&mut policy, &checks, 24), vec![9]);
        // After the trim the same quiet state is no reason for another.
        assert!(trims(&mut policy, &[(24, 0); 6], 24).is_empty());
        // The next spell is trimmed once it is over, like the first; the size must
        // have settled for three checks first.
        let next = [(400, 8_000), (400, 100), (400, 100), (400, 100), (400, 100)];
        assert_eq!(trims(&mut policy, &next, 24), vec![3]);
    }

    #[test]
    fn half_the_peak_work_gone_is_enough_and_each_halving_after_it() {
        let mut policy = TrimPolicy::new(64 * MIB, 20 * MIB);
        let checks = [
            (600, 10_000),
            (600, 6_000),
            (600, 6_000),
            (600, 6_000),
            (600, 5_000),
        ];
        assert_eq!(trims(&mut policy, &checks, 300), vec![4]);
        // The rest goes slowly: a trim at each halving (2,500, then 1,250, then the
        // last of it), none between, none once nothing is left to halve.
        let checks = [
            (300, 4_000),
            (300, 3_000),
            (300, 2_500),
            (300, 2_500),
            (300, 2_000),
            (300, 1_500),
            (300, 1_250),
            (300, 0),
            (300, 0),
            (300, 0),
        ];
        assert_eq!(trims(&mut policy, &checks, 300), vec![2, 6, 9]);
        assert!(trims(&mut policy, &[(300, 0); 8], 300).is_empty());
    }

    #[test]
    fn no_work_ever_is_no_reason_to_trim_again_and_again() {
        // A process that holds nothing (say, the gauges read 0): the first trim after
        // growth, and then none without new growth.
        let mut policy = TrimPolicy::new(64 * MIB, 20 * MIB);
        let checks = [(200, 0), (200, 0), (200, 0), (200, 0)];
        assert_eq!(trims(&mut policy, &checks, 150), vec![3]);
        assert!(trims(&mut policy, &[(150, 0); 12], 150).is_empty());
    }

    #[test]
    fn small_growth_never_trims() {
        let mut policy = TrimPolicy::new(64 * MIB, 100 * MIB);
        // 50 MiB of growth over a 100 MiB start stays under the 64 MiB step.
        let checks = [
            (120, 9),
            (150, 9),
            (150, 0),
            (150, 0),
            (150, 0),
            (150, 0),
            (150, 0),
        ];
        assert!(trims(&mut policy, &checks, 150).is_empty());
        // A large process must grow by a quarter, not by 64 MiB: 1000 -> 1200 is not
        // enough, 1000 -> 1300 is.
        let mut large = TrimPolicy::new(64 * MIB, 1000 * MIB);
        let checks = [(1200, 9), (1200, 0), (1200, 0), (1200, 0), (1200, 0)];
        assert!(trims(&mut large, &checks, 1000).is_empty());
        let mut large = TrimPolicy::new(64 * MIB, 1000 * MIB);
        let checks = [(1300, 9), (1300, 0), (1300, 0), (1300, 0)];
        assert_eq!(trims(&mut large, &checks, 1000), vec![3]);
    }

    #[test]
    fn growth_that_goes_on_waits() {
        let mut policy = TrimPolicy::new(64 * MIB, 20 * MIB);
        // Each check a little more (above the noise), the work already down: memory
        // still being taken, so no trim yet.
        let checks: Vec<(u64, u64)> = (0..20).map(|i| (100 + 20 * i, 0)).collect();
        assert!(trims(&mut policy, &checks, 100).is_empty());
        // Growth within the noise (under 1/64) counts as settled.
        let mut policy = TrimPolicy::new(64 * MIB, 20 * MIB);
        let checks = [(500, 9), (502, 0), (503, 0), (504, 0)];
        assert_eq!(trims(&mut policy, &checks, 100), vec![3]);
    }

    #[test]
    fn a_trim_that_gave_little_back_waits_for_more_growth() {
        let mut policy = TrimPolicy::new(64 * MIB, 20 * MIB);
        // The memory was in use after all: the trim leaves 590 of 600 MiB.
        let checks = [(600, 10), (600, 4), (600, 4), (600, 4)];
        assert_eq!(trims(&mut policy, &checks, 590), vec![3]);
        // Only growth past 590 + 147 (a quarter) brings the next (the work, back at
        // the level of that trim, has not halved again).
        let checks = [(700, 8), (700, 4), (700, 4), (700, 4)];
        assert!(trims(&mut policy, &checks, 590).is_empty());
        let checks = [(760, 8), (760, 4), (760, 4), (760, 4)];
        assert_eq!(trims(&mut policy, &checks, 590), vec![3]);
    }

    #[test]
    fn shrinking_by_itself_lowers_the_baseline() {
        // Starts at 300 (say, a snapshot loaded and freed), falls to 40, then a spell
        // to 200 is trimmed although it never passed the start.
        let mut policy = TrimPolicy::new(64 * MIB, 300 * MIB);
        let checks = [(40, 0), (200, 50), (200, 0), (200, 0), (200, 0)];
        assert_eq!(trims(&mut policy, &checks, 40), vec![4]);
    }

    #[test]
    fn returns_are_counted_for_the_monitoring_endpoint() {
        let count = |observation: &Observation| {
            (
                observation.sum("shoal_memory_returns", &[]),
                observation.sum("shoal_memory_returned_bytes", &[]),
            )
        };
        let mut before = Observation::default();
        observe(&mut before);
        record_return(600 * MIB, 20 * MIB);
        record_return(20 * MIB, 30 * MIB); // grew meanwhile: nothing given back
        let mut after = Observation::default();
        observe(&mut after);
        let (returns, bytes) = (
            count(&after).0 - count(&before).0,
            count(&after).1 - count(&before).1,
        );
        assert_eq!((returns, bytes), (2.0, (580 * MIB) as f64));
    }

    #[test]
    fn the_resident_size_is_read_through_the_open_descriptor() {
        let resident = ResidentSize::open().unwrap();
        let first = resident.bytes().unwrap();
        assert!(first > MIB, "{first}");
        // Read again from the same descriptor: a fresh figure, not the end of file.
        let block = std::hint::black_box(vec![1u8; 64 * MIB as usize]);
        let second = resident.bytes().unwrap();
        assert!(second >= first + 32 * MIB, "{first} -> {second}");
        drop(std::hint::black_box(block));
    }
}
