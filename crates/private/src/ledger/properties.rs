//! The ledger's arithmetic over arbitrary reports: any totals (zero, huge, going
//! down), any order of times, any events, any factors, batches taken anywhere, and
//! its state through a base and a journal and back.

use proptest::prelude::*;

use super::*;

/// A report of one of a few clients of two users in two torrents, with totals near
/// zero, near the largest or anywhere, and times that may go backwards.
fn report() -> impl Strategy<Value = Report> {
    let total = prop_oneof![0u64..2_000, any::<u64>(), (u64::MAX - 1_000)..=u64::MAX];
    let event = prop_oneof![
        Just(Event::None),
        Just(Event::Started),
        Just(Event::Completed),
        Just(Event::Stopped),
    ];
    (
        (17u32..19, 1u32..3, 0u8..3),
        (total.clone(), total, prop_oneof![Just(0u64), 1u64..1000]),
        event,
        (0u16..=10_000, 0u16..=10_000),
        0u64..20_000,
    )
        .prop_map(
            |((user, torrent, peer), (uploaded, downloaded, left), event, factors, at)| Report {
                user,
                torrent,
                up_factor: factors.0,
                down_factor: factors.1,
                peer_id: [peer; 20],
                uploaded,
                downloaded,
                left,
                event,
                at,
            },
        )
}

/// What a sequence of reports may credit a (user, torrent) at most: each peer's
/// positive steps between its consecutive reports, in the order they came.
fn most(reports: &[Report], user: u32, torrent: u32) -> (u128, u128) {
    let mut last: HashMap<[u8; 20], (u64, u64)> = HashMap::new();
    let (mut up, mut down) = (0u128, 0u128);
    for report in reports
        .iter()
        .filter(|report| (report.user, report.torrent) == (user, torrent))
    {
        if let Some((u, d)) = last.insert(report.peer_id, (report.uploaded, report.downloaded)) {
            up += u128::from(report.uploaded.saturating_sub(u));
            down += u128::from(report.downloaded.saturating_sub(d));
        }
    }
    (up, down)
}

fn sum(batches: &[Batch]) -> HashMap<(u32, u32), Credit> {
    let mut sums: HashMap<(u32, u32), Credit> = HashMap::new();
    for batch in batches {
        for (user, torrent, credit) in &batch.entries {
            sums.entry((*user, *torrent)).or_default().merge(credit);
        }
    }
    sums
}

proptest! {
    #[test]
    fn credits_never_exceed_what_clients_reported_and_batching_changes_nothing(
        reports in proptest::collection::vec(report(), 0..120),
        cuts in proptest::collection::vec(any::<bool>(), 120),
    ) {
        // One ledger hands out a batch after every report marked in `cuts`, another
        // only at the end: the same credits.
        let mut often = Ledger::new("udp-1", 3600, 0);
        let mut once = Ledger::new("udp-2", 3600, 0);
        let mut batches = Vec::new();
        for (i, report) in reports.iter().enumerate() {
            often.record(report);
            once.record(report);
            if cuts[i] {
                batches.extend(often.take_batch(report.at));
            }
        }
        batches.extend(often.take_batch(u64::MAX));
        let often = sum(&batches);
        let once = sum(&once.take_batch(u64::MAX).into_iter().collect::<Vec<_>>());
        prop_assert_eq!(&often, &once);
        let span = reports.iter().map(|r| r.at).max().unwrap_or(0)
            - reports.iter().map(|r| r.at).min().unwrap_or(0);
        for (&(user, torrent), credit) in &often {
            let (up, down) = most(&reports, user, torrent);
            prop_assert!(u128::from(credit.uploaded) <= up, "{credit:?} > {up}");
            prop_assert!(u128::from(credit.downloaded) <= down);
            // Factors of at most 100x, applied once.
            prop_assert!(u128::from(credit.credited_uploaded) <= up * 100);
            prop_assert!(u128::from(credit.credited_downloaded) <= down * 100);
            // Seeding time is wall time, counted once per (user, torrent).
            prop_assert!(credit.seed_seconds <= span, "{} > {span}", credit.seed_seconds);
            // A completion per report that finished at most (once per session of a
            // peer id: a stopped client's next `completed` is a new session's).
            let finishing = reports
                .iter()
                .filter(|r| (r.user, r.torrent) == (user, torrent))
                .filter(|r| r.event == Event::Completed || r.left == 0)
                .count();
            prop_assert!(credit.completed as usize <= finishing);
        }
    }

    #[test]
    fn the_state_reads_back_from_a_base_and_a_journal_cut_anywhere(
        reports in proptest::collection::vec(report(), 0..120),
        records in proptest::collection::vec(any::<bool>(), 120),
        base_at in 0usize..120,
    ) {
        // A base after report `base_at`, a record after every report marked in
        // `records`: what is read back is the state at the last record (or the base).
        let mut ledger = Ledger::new("udp-1", u64::MAX, 0);
        let mut base = ledger.save(&Committed::default());
        let mut journal = Vec::new();
        let mut sequence = 0;
        let mut at_last_write = ledger.book.pairs.clone();
        for (i, report) in reports.iter().enumerate() {
            ledger.record(report);
            if i == base_at {
                base = ledger.save(&Committed { sequence, batches: Vec::new() });
                journal.clear();
                ledger.clear_changes();
                at_last_write = ledger.book.pairs.clone();
            } else if records[i] {
                sequence += 1;
                journal.extend(ledger.journal_record(&Committed {
                    sequence,
                    batches: vec![format!("udp-1-1-{sequence}")],
                }));
                ledger.clear_changes();
                at_last_write = ledger.book.pairs.clone();
            }
        }
        let mut restored = Ledger::new("udp-2", u64::MAX, 0);
        let committed = restored.restore(&base).unwrap();
        let (read, whole) = read_journal(&journal);
        prop_assert_eq!(whole, journal.len());
        for record in &read {
            prop_assert!(record.committed.sequence > committed.sequence);
            restored.apply_record(record).unwrap();
        }
        prop_assert_eq!(&restored.book.pairs, &at_last_write);
        // Cut short anywhere, the journal still reads to its last whole record.
        if !journal.is_empty() {
            let cut = journal.len() / 2;
            let (read_cut, whole_cut) = read_journal(&journal[..cut]);
            prop_assert!(whole_cut <= cut);
            prop_assert!(read_cut.len() <= read.len());
        }
    }
}
