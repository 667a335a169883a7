//! Crashes at every step of a flush, simulated: the step unwinds instead of killing
//! the process, what the process held in memory is dropped unwritten, and a new run
//! opens the directory as it was left.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;

use super::*;
use crate::ledger::{Credit, Event, Report};

/// What a simulated crash unwinds with.
#[derive(Debug)]
pub(super) struct Crashed(#[allow(dead_code)] pub(super) String);

thread_local! {
    /// The step to crash at and the passages of it left before the crash.
    pub(super) static WANTED: RefCell<Option<(String, u64)>> = const { RefCell::new(None) };
}

/// Crashes at the `n`-th passage of `step` from now on (this thread only).
fn crash_at(step: &str, n: u64) {
    WANTED.with(|wanted| *wanted.borrow_mut() = Some((step.to_owned(), n)));
}

fn disarm() {
    WANTED.with(|wanted| *wanted.borrow_mut() = None);
}

const STEPS: [&str; 5] = ["partial", "torn", "journal", "published", "base"];
const TIMEOUT: u64 = 3600;

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "shoal-journal-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// Every published batch, by id.
    fn batches(&self) -> BTreeMap<String, String> {
        std::fs::read_dir(&self.0)
            .unwrap()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let id = name.strip_suffix(".json")?.to_owned();
                (!name.starts_with('.'))
                    .then(|| (id, std::fs::read_to_string(entry.path()).unwrap()))
            })
            .collect()
    }

    fn files(&self) -> Vec<String> {
        let mut files: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .flatten()
            .filter_map(|entry| entry.file_name().into_string().ok())
            .collect();
        files.sort();
        files
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A run of the tracker: its ledger and its journal.
struct Run {
    ledger: Ledger,
    journal: Journal,
}

impl Run {
    fn open(dir: &Dir, run: u32, now: u64) -> (Self, Recovered) {
        let mut ledger = Ledger::new(format!("http-{run}-1"), TIMEOUT, now);
        let (journal, recovered) =
            Journal::open(&dir.0, "http", &mut ledger, now, u64::MAX).unwrap();
        (Self { ledger, journal }, recovered)
    }

    fn flush(&mut self, now: u64) -> Result<(), String> {
        self.ledger.expire(now);
        let batch = self.ledger.take_batch(now);
        self.journal.commit(&mut self.ledger, batch)
    }
}

/// Sums the credits of `batches` per (user, torrent), as a site applies them.
fn credited(batches: &BTreeMap<String, String>) -> Credits {
    let mut sums: BTreeMap<(u32, u32), Credit> = BTreeMap::new();
    for json in batches.values() {
        for entry in json.split("{\"user\":").skip(1) {
            let number = |field: &str| -> u64 {
                let at = entry.find(&format!("\"{field}\":")).unwrap() + field.len() + 3;
                entry[at..]
                    .split([',', '}'])
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            let user: u64 = entry.split(',').next().unwrap().parse().unwrap();
            let sum = sums
                .entry((user as u32, number("torrent") as u32))
                .or_default();
            sum.uploaded += number("uploaded");
            sum.downloaded += number("downloaded");
            sum.seed_seconds += number("seed_seconds");
            sum.completed += number("completed") as u32;
            sum.credited_uploaded += number("credited_uploaded");
            sum.credited_downloaded += number("credited_downloaded");
        }
    }
    sums
}

/// The reports of round `round`: three clients of two users in two torrents, totals
/// growing, one leecher completing at round 4, every client announcing every round
/// (so a report lost with a crash is made good by the next one).
fn round(round: u64) -> Vec<Report> {
    let at = round * 60;
    let client = |user, torrent, peer: u8, uploaded, downloaded, left, event| Report {
        user,
        torrent,
        up_factor: 200,
        down_factor: 50,
        peer_id: [peer; 20],
        uploaded,
        downloaded,
        left,
        event,
        at,
    };
    let started = round == 0;
    let event = |otherwise| if started { Event::Started } else { otherwise };
    let left = 400u64.saturating_sub(round * 100);
    vec![
        client(17, 1, 1, round * 1000, 0, 0, event(Event::None)),
        client(
            17,
            1,
            2,
            round * 10,
            400 - left,
            left,
            event(if round == 4 {
                Event::Completed
            } else {
                Event::None
            }),
        ),
        client(18, 2, 3, round * 77, round * 5, 0, event(Event::None)),
    ]
}

const ROUNDS: u64 = 10;

/// Opens a run, and another each time opening crashes (its fold into a new base);
/// `runs` counts them.
fn open_surviving(dir: &Dir, runs: &mut u32, now: u64) -> Run {
    loop {
        *runs += 1;
        let number = *runs;
        match std::panic::catch_unwind(AssertUnwindSafe(|| Run::open(dir, number, now))) {
            Ok((run, _)) => return run,
            Err(panic) => {
                assert!(panic.downcast_ref::<Crashed>().is_some(), "{panic:?}");
                disarm();
            }
        }
    }
}

/// Runs the rounds, a flush after each, crashing at the `n`-th passage of `step`
/// after the first flush (whose record holds every client's first baseline: a crash
/// before it makes the clients' next reports first sights, baselines only) and
/// starting a new run after the crash; ends with a clean stop. Returns the runs it
/// took.
fn run_through(dir: &Dir, crash: Option<(&str, u64)>) -> u32 {
    let mut runs = 0;
    let mut run = open_surviving(dir, &mut runs, 0);
    for number in 0..=ROUNDS {
        // The last "round" is the clean stop: a flush, then the fold into a base.
        let reports = if number < ROUNDS {
            round(number)
        } else {
            Vec::new()
        };
        for report in reports {
            run.ledger.record(&report);
        }
        let now = number * 60 + 30;
        let flushed = std::panic::catch_unwind(AssertUnwindSafe(|| {
            run.flush(now)?;
            if number == ROUNDS {
                run.journal
                    .compact(&run.ledger)
                    .map_err(|err| err.to_string())?;
            }
            Ok::<_, String>(())
        }));
        if number == 0
            && let Some((step, n)) = crash
        {
            crash_at(step, n);
        }
        match flushed {
            Ok(result) => result.unwrap(),
            Err(panic) => {
                assert!(panic.downcast_ref::<Crashed>().is_some(), "{panic:?}");
                // Killed: nothing the run held in memory is written.
                drop(run);
                disarm();
                run = open_surviving(dir, &mut runs, now);
            }
        }
    }
    runs
}

/// What the rounds credit without a crash: in all, and in the last round's batch.
fn expected() -> (Credits, Credits) {
    let dir = Dir::new("reference");
    assert_eq!(run_through(&dir, None), 1);
    let mut batches = dir.batches();
    let all = credited(&batches);
    let last = batches
        .keys()
        .max_by_key(|id| batch_order(id))
        .cloned()
        .unwrap();
    let last = batches.remove_entry(&last).unwrap();
    (all, credited(&BTreeMap::from([last])))
}

type Credits = BTreeMap<(u32, u32), Credit>;

#[test]
fn a_crash_at_any_step_of_any_flush_credits_exactly_what_was_reported() {
    let (expected, last_round) = expected();
    assert_eq!(expected[&(17, 1)].uploaded, 9 * 1000 + 9 * 10);
    assert_eq!(
        expected[&(17, 1)].credited_uploaded,
        2 * (9 * 1000 + 9 * 10)
    );
    assert_eq!(expected[&(17, 1)].completed, 1);
    assert_eq!(expected[&(18, 2)].seed_seconds, 9 * 60);
    let mut crashes = 0;
    let cases = STEPS
        .iter()
        .filter(|&&step| step != "base")
        .flat_map(|&step| (1..ROUNDS).map(move |n| (step, n)))
        .chain([("base", 1)]);
    for (step, n) in cases {
        let dir = Dir::new(&format!("{step}-{n}"));
        let runs = run_through(&dir, Some((step, n)));
        crashes += runs - 1;
        let credits = credited(&dir.batches());
        // A crash in the last round's flush, before its commit, loses that round:
        // no client reports again to make it good. Anywhere else nothing is lost, and
        // nothing is ever credited twice.
        let lost_last = n == ROUNDS - 1 && matches!(step, "partial" | "torn");
        let mut wanted = expected.clone();
        if lost_last {
            for (key, credit) in &last_round {
                let sum = wanted.get_mut(key).unwrap();
                sum.uploaded -= credit.uploaded;
                sum.downloaded -= credit.downloaded;
                sum.credited_uploaded -= credit.credited_uploaded;
                sum.credited_downloaded -= credit.credited_downloaded;
                sum.seed_seconds -= credit.seed_seconds;
                sum.completed -= credit.completed;
            }
        }
        assert_eq!(credits, wanted, "a crash at {step} #{n} ({runs} runs)");
        // Nothing left half done: no temporary file, no batch unpublished.
        assert!(
            !dir.files().iter().any(|file| file.ends_with(".partial")),
            "{:?}",
            dir.files()
        );
    }
    // Every step of every flush but the first was crashed at once.
    assert_eq!(crashes, 4 * (ROUNDS as u32 - 1) + 1, "{crashes} crashes");
}

#[test]
fn a_record_cut_short_ends_the_journal_and_its_batch_is_never_published() {
    let dir = Dir::new("torn");
    let (mut run, _) = Run::open(&dir, 1, 0);
    for report in round(0) {
        run.ledger.record(&report);
    }
    run.flush(30).unwrap();
    for report in round(1) {
        run.ledger.record(&report);
    }
    crash_at("torn", 1);
    let crashed = std::panic::catch_unwind(AssertUnwindSafe(|| run.flush(90)));
    assert!(crashed.is_err());
    disarm();
    drop(run);
    let journal_len = std::fs::metadata(dir.0.join(".http.journal"))
        .unwrap()
        .len();
    assert!(journal_len > 0, "half a record is on disk");
    let (run, recovered) = Run::open(&dir, 2, 100);
    assert_eq!(
        (recovered.records, recovered.discarded, recovered.published),
        (1, 1, 0),
        "{recovered:?}"
    );
    // Round 1's reports were never committed: round 0's baselines are restored.
    assert_eq!(run.ledger.peers(), 3);
    assert!(dir.batches().is_empty(), "round 0 credited nothing");
    assert_eq!(
        std::fs::metadata(dir.0.join(".http.journal"))
            .unwrap()
            .len(),
        0,
        "folded into the base at start"
    );
}

#[test]
fn a_batch_committed_before_a_crash_is_published_by_the_next_run() {
    let dir = Dir::new("committed");
    let (mut run, _) = Run::open(&dir, 1, 0);
    for number in 0..2 {
        for report in round(number) {
            run.ledger.record(&report);
        }
        if number == 1 {
            crash_at("journal", 1);
        }
        let flushed = std::panic::catch_unwind(AssertUnwindSafe(|| run.flush(number * 60 + 30)));
        assert_eq!(flushed.is_err(), number == 1);
    }
    disarm();
    drop(run);
    assert!(dir.batches().is_empty());
    let (_, recovered) = Run::open(&dir, 2, 100);
    assert_eq!((recovered.records, recovered.published), (2, 1));
    let batches = dir.batches();
    assert_eq!(batches.len(), 1);
    assert!(batches.contains_key("http-1-1-0"), "{batches:?}");
}

#[test]
fn a_second_process_cannot_open_the_same_ledger() {
    let dir = Dir::new("locked");
    let _first = Run::open(&dir, 1, 0);
    let mut ledger = Ledger::new("http-2-1", TIMEOUT, 0);
    let refused = Journal::open(&dir.0, "http", &mut ledger, 0, u64::MAX).unwrap_err();
    assert!(
        format!("{refused:#}").contains("held by another running tracker"),
        "{refused:#}"
    );
}

#[test]
fn a_failed_commit_gives_its_credits_to_the_next_one() {
    let dir = Dir::new("failed");
    let (mut run, _) = Run::open(&dir, 1, 0);
    for number in 0..2 {
        for report in round(number) {
            run.ledger.record(&report);
        }
    }
    // The directory is gone: the batch cannot be written.
    std::fs::remove_dir_all(&dir.0).unwrap();
    let problem = run.flush(90).unwrap_err();
    assert!(problem.contains("not written"), "{problem}");
    std::fs::create_dir_all(&dir.0).unwrap();
    run.flush(100).unwrap();
    let credits = credited(&dir.batches());
    assert_eq!(credits[&(17, 1)].uploaded, 1010);
    let json = dir.batches().into_values().next().unwrap();
    assert!(json.contains("\"from\":0,\"to\":100"), "{json}");
}

#[test]
fn a_base_of_the_earlier_format_is_read_once_and_replaced() {
    // Version 1: magic, count, then one record of 53 bytes per peer, and a checksum.
    let mut v1 = b"shoal ledger 1\n".to_vec();
    v1.extend_from_slice(&1u64.to_le_bytes());
    v1.extend_from_slice(&17u32.to_le_bytes());
    v1.extend_from_slice(&1u32.to_le_bytes());
    v1.extend_from_slice(&[1; 20]);
    v1.extend_from_slice(&5000u64.to_le_bytes());
    v1.extend_from_slice(&0u64.to_le_bytes());
    v1.extend_from_slice(&100u64.to_le_bytes());
    v1.push(1);
    let sum = crate::ledger::checksum(&v1);
    v1.extend_from_slice(&sum.to_le_bytes());
    let dir = Dir::new("v1");
    std::fs::write(dir.0.join(".http.ledger"), &v1).unwrap();
    let (mut run, _) = Run::open(&dir, 1, 200);
    assert_eq!(run.ledger.peers(), 1);
    let saved = std::fs::read(dir.0.join(".http.ledger")).unwrap();
    assert!(saved.starts_with(b"shoal ledger 2\n"));
    let report = Report {
        uploaded: 5500,
        at: 360,
        event: Event::None,
        ..round(0)[0]
    };
    run.ledger.record(&report);
    run.flush(400).unwrap();
    assert_eq!(credited(&dir.batches())[&(17, 1)].uploaded, 500);
}

#[test]
fn a_failed_write_leaves_bytes_the_next_record_overwrites() {
    let dir = Dir::new("overwrite");
    let (mut run, _) = Run::open(&dir, 1, 0);
    for report in round(0) {
        run.ledger.record(&report);
    }
    run.flush(30).unwrap();
    // A write that failed part way: bytes past the whole records.
    {
        use std::io::Write as _;
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.0.join(".http.journal"))
            .unwrap();
        file.write_all(&[0xee; 300]).unwrap();
    }
    run.journal.tail_dirty = true;
    for report in round(1) {
        run.ledger.record(&report);
    }
    run.flush(90).unwrap();
    drop(run);
    let (run, recovered) = Run::open(&dir, 2, 100);
    assert_eq!(recovered.records, 2, "{recovered:?}");
    assert!(recovered.problem.is_none());
    assert_eq!(run.ledger.peers(), 3);
    assert_eq!(credited(&dir.batches())[&(17, 1)].uploaded, 1010);
}

#[test]
fn a_journal_with_a_record_missing_restores_no_baseline() {
    let dir = Dir::new("gap");
    let (mut run, _) = Run::open(&dir, 1, 0);
    let mut sizes = Vec::new();
    for number in 0..3 {
        for report in round(number) {
            run.ledger.record(&report);
        }
        run.flush(number * 60 + 30).unwrap();
        sizes.push(run.journal.len);
    }
    drop(run);
    // The first record cut out: the base (sequence 0) is older than what follows.
    let path = dir.0.join(".http.journal");
    let journal = std::fs::read(&path).unwrap();
    std::fs::write(&path, &journal[sizes[0] as usize..]).unwrap();
    let published = dir.batches().len();
    let (run, recovered) = Run::open(&dir, 2, 200);
    assert!(
        recovered
            .problem
            .as_deref()
            .is_some_and(|p| p.contains("missing")),
        "{recovered:?}"
    );
    assert_eq!(
        run.ledger.peers(),
        0,
        "every client's next report is a baseline"
    );
    assert_eq!(dir.batches().len(), published);
    drop(run);
    // The new base replaced the damaged journal: the next start is clean.
    let (_, recovered) = Run::open(&dir, 3, 300);
    assert!(recovered.problem.is_none(), "{recovered:?}");
}

#[test]
fn a_damaged_base_is_kept_aside_and_restores_no_baseline() {
    let dir = Dir::new("damaged");
    let (mut run, _) = Run::open(&dir, 1, 0);
    for number in 0..2 {
        for report in round(number) {
            run.ledger.record(&report);
        }
        run.flush(number * 60 + 30).unwrap();
    }
    run.journal.compact(&run.ledger).unwrap();
    drop(run);
    let base = dir.0.join(".http.ledger");
    let mut bytes = std::fs::read(&base).unwrap();
    bytes[20] ^= 0x55;
    std::fs::write(&base, &bytes).unwrap();
    let (run, recovered) = Run::open(&dir, 2, 200);
    assert!(recovered.problem.is_some());
    assert_eq!(run.ledger.peers(), 0);
    assert_eq!(
        std::fs::read(dir.0.join(".http.ledger.damaged")).unwrap(),
        bytes
    );
}
