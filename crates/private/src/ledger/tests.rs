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
fn a_lower_total_long_after_the_last_report_is_a_session_restarted_unseen() {
    let mut ledger = Ledger::new("udp-1", 3600, 0);
    ledger.record(&report(0, 0, 1000, Event::Started, 0));
    ledger.record(&report(5000, 700, 300, Event::None, 60));
    // The client restarted while the tracker was down: its `started` never arrived,
    // and its next announces come with the new session's totals. The first could be
    // an old report arriving late; the second confirms the restart.
    ledger.record(&report(200, 50, 300, Event::None, 1860));
    ledger.record(&report(900, 80, 300, Event::None, 3660));
    ledger.record(&report(1500, 95, 300, Event::None, 5460));
    let credit = only(&ledger.take_batch(5500).unwrap());
    assert_eq!((credit.uploaded, credit.downloaded), (5000 + 600, 700 + 15));
}

#[test]
fn one_old_report_arriving_late_restarts_nothing() {
    let mut ledger = Ledger::new("udp-1", 3600, 0);
    ledger.record(&report(0, 0, 1000, Event::Started, 0));
    ledger.record(&report(1000, 0, 1000, Event::None, 1800));
    // The previous round's copy over the other IP family, retransmitted, 40 s late.
    ledger.record(&report(900, 0, 1000, Event::None, 1840));
    ledger.record(&report(1100, 0, 1000, Event::None, 3600));
    assert_eq!(only(&ledger.take_batch(3600).unwrap()).uploaded, 1100);
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
    let committed = Committed {
        sequence: 7,
        batches: vec!["udp-1-2-3".into()],
    };
    let saved = before.save(&committed);
    // The next run: peer 1's next announce is credited from 1000; peer 2, last
    // heard 3,690 s before (past the peer timeout), starts from scratch.
    let mut after = Ledger::new("udp-2", 3600, 500);
    assert_eq!(after.restore(&saved), Ok(committed));
    assert_eq!(after.expire(3700), 1);
    after.record(&report(1, 1500, 0, Event::None, 3700));
    after.record(&report(2, 80, 10, Event::None, 3700));
    let batch = after.take_batch(3700).unwrap();
    assert_eq!(batch.entries.len(), 1);
    assert_eq!(batch.entries[0].2.uploaded, 500, "{batch:?}");
    let mut damaged = saved.clone();
    damaged[30] ^= 1;
    let mut refused = Ledger::new("x", 3600, 0);
    assert!(refused.restore(&damaged).is_err());
    assert!(refused.restore(&saved[..saved.len() - 1]).is_err());
    assert!(refused.restore(b"").is_err());
    assert!(refused.restore(&saved[..7]).is_err());
    assert_eq!(refused.peers(), 0, "a refused base changes nothing");
    assert_eq!(
        refused.restore(&Ledger::new("y", 1, 0).save(&Committed::default())),
        Ok(Committed::default())
    );
}

#[test]
fn journal_records_carry_the_changed_pairs_and_a_cut_one_ends_the_journal() {
    let mut ledger = Ledger::new("udp-1", 3600, 0);
    ledger.record(&report(0, 0, 0, Event::Started, 0));
    ledger.record(&report(100, 0, 0, Event::None, 60));
    let other = Report {
        user: 18,
        ..report(5, 0, 0, Event::Started, 60)
    };
    ledger.record(&other);
    let first = ledger.journal_record(&Committed {
        sequence: 1,
        batches: vec!["udp-1-1-0".into()],
    });
    ledger.clear_changes();
    assert!(!ledger.has_changes());
    // User 18's client stops: its pair is gone, and the record says so.
    ledger.record(&Report {
        event: Event::Stopped,
        at: 120,
        ..other
    });
    let second = ledger.journal_record(&Committed {
        sequence: 2,
        batches: Vec::new(),
    });
    let mut journal = first.clone();
    journal.extend_from_slice(&second);
    let (records, whole) = read_journal(&journal);
    assert_eq!((records.len(), whole), (2, journal.len()));
    assert_eq!(records[0].committed.batches, ["udp-1-1-0"]);
    let mut replayed = Ledger::new("udp-2", 3600, 0);
    for record in &records {
        replayed.apply_record(record).unwrap();
    }
    assert_eq!(replayed.peers(), 1);
    replayed.record(&report(150, 0, 0, Event::None, 180));
    assert_eq!(only(&replayed.take_batch(180).unwrap()).uploaded, 50);
    // Cut anywhere in the second record, or a byte of it changed: the first stands.
    for cut in first.len()..journal.len() {
        let (records, whole) = read_journal(&journal[..cut]);
        assert_eq!((records.len(), whole), (1, first.len()), "cut at {cut}");
    }
    let mut changed = journal.clone();
    *changed.last_mut().unwrap() ^= 0x40;
    assert_eq!(read_journal(&changed).0.len(), 1);
    assert_eq!(read_journal(b"").0.len(), 0);
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

mod shared {
    use super::*;
    use crate::ledger::shared::MemoryPairs;

    /// Two nodes' ledgers over one store.
    fn nodes() -> (Ledger, Ledger, MemoryPairs) {
        (
            Ledger::new("udp-a", 3600, 0),
            Ledger::new("http-b", 3600, 0),
            MemoryPairs::default(),
        )
    }

    fn total(ledgers: [&mut Ledger; 2], now: u64) -> Credit {
        let mut sum = Credit::default();
        for ledger in ledgers {
            if let Some(batch) = ledger.take_batch(now) {
                sum.merge(&only(&batch));
            }
        }
        sum
    }

    #[test]
    fn a_dual_stack_client_split_across_nodes_is_credited_once() {
        let (mut a, mut b, mut store) = nodes();
        let started = report(0, 0, 1000, Event::Started, 0);
        a.record_shared(&[started], &mut store, 0).unwrap();
        b.record_shared(&[started], &mut store, 0).unwrap();
        // IPv4 to node A, IPv6 to node B, same counters, same moment.
        let progress = report(500, 1000, 0, Event::Completed, 60);
        assert_eq!(a.record_shared(&[progress], &mut store, 60), Ok(1));
        assert_eq!(b.record_shared(&[progress], &mut store, 60), Ok(1));
        let seeding = report(900, 1000, 0, Event::None, 660);
        a.record_shared(&[seeding], &mut store, 660).unwrap();
        b.record_shared(&[seeding], &mut store, 660).unwrap();
        let credit = total([&mut a, &mut b], 700);
        assert_eq!(
            (credit.uploaded, credit.downloaded, credit.completed),
            (900, 1000, 1)
        );
        assert_eq!(credit.seed_seconds, 600);
        // Each node saw the pair: the live state is there on both.
        assert_eq!(a.live(Whose::User(17)).peers, 1);
        assert_eq!(b.live(Whose::User(17)).peers, 1);
    }

    #[test]
    fn a_started_one_node_applies_after_another_node_s_next_reports_restarts_nothing() {
        // A client sends the same announces to both nodes, a few seconds apart; node
        // A applies all three before node B applies its first (`started`, 0): older
        // than what is stored, it restarts nothing.
        let (mut a, mut b, mut store) = nodes();
        let reports = [
            report(0, 0, 0, Event::Started, 10),
            report(700, 0, 0, Event::None, 12),
            report(2000, 0, 0, Event::None, 14),
        ];
        a.record_shared(&reports, &mut store, 14).unwrap();
        b.record_shared(&reports, &mut store, 14).unwrap();
        assert_eq!(total([&mut a, &mut b], 15).uploaded, 2000);
    }

    #[test]
    fn a_client_moving_between_nodes_is_credited_each_byte_once() {
        let moves = [
            (0, 0, Event::Started),
            (0, 100, Event::None),
            (1, 200, Event::None),
            (1, 300, Event::None),
            (0, 400, Event::None),
        ];
        // Ledgers kept per node would credit 100..300 twice: 500 in all.
        let (mut a, mut b, _) = nodes();
        for (i, &(node, uploaded, event)) in moves.iter().enumerate() {
            let ledger = if node == 0 { &mut a } else { &mut b };
            ledger.record(&report(uploaded, 0, 10, event, 60 * i as u64));
        }
        assert_eq!(total([&mut a, &mut b], 300).uploaded, 500);
        // Shared: 400, each byte once.
        let (mut a, mut b, mut store) = nodes();
        for (i, &(node, uploaded, event)) in moves.iter().enumerate() {
            let ledger = if node == 0 { &mut a } else { &mut b };
            let at = 60 * i as u64;
            ledger
                .record_shared(&[report(uploaded, 0, 10, event, at)], &mut store, at)
                .unwrap();
        }
        assert_eq!(total([&mut a, &mut b], 300).uploaded, 400);
    }

    #[test]
    fn a_pair_changed_by_another_node_meanwhile_is_read_again() {
        let (mut a, _, mut store) = nodes();
        a.record_shared(&[report(0, 0, 10, Event::Started, 0)], &mut store, 0)
            .unwrap();
        // Between A's load and its replace, another node credits the client up to 300.
        let mut once = true;
        store.interfere = Some(Box::new(move |values| {
            if std::mem::take(&mut once) {
                let mut other = Pair::decode(&values[&(17, 1001)]).unwrap();
                other.peers[0].uploaded = 300;
                other.peers[0].last_seen = 50;
                values.insert((17, 1001), other.encode());
            }
        }));
        let replaces = store.replaces;
        let tries = a.record_shared(&[report(400, 0, 10, Event::None, 60)], &mut store, 60);
        assert_eq!(tries, Ok(2));
        assert_eq!(store.replaces - replaces, 2);
        // Only what the other node did not take.
        assert_eq!(only(&a.take_batch(60).unwrap()).uploaded, 100);
    }

    #[test]
    fn pairs_contended_at_every_try_are_not_credited_and_a_lost_store_keeps_nothing() {
        let (mut a, _, mut store) = nodes();
        a.record_shared(&[report(0, 0, 10, Event::Started, 0)], &mut store, 0)
            .unwrap();
        let mut version = 0u64;
        store.interfere = Some(Box::new(move |values| {
            version += 1;
            let mut pair = Pair::decode(&values[&(17, 1001)]).unwrap();
            pair.seeded_until = version;
            values.insert((17, 1001), pair.encode());
        }));
        let progress = report(400, 0, 10, Event::None, 60);
        assert_eq!(
            a.record_shared(&[progress], &mut store, 60),
            Err(SharedError::Contended)
        );
        assert_eq!(a.take_batch(60), None);
        // The store calms down: the same reports, kept, are credited once.
        store.interfere = None;
        assert_eq!(a.record_shared(&[progress], &mut store, 61), Ok(1));
        assert_eq!(only(&a.take_batch(61).unwrap()).uploaded, 400);
    }

    #[test]
    fn stored_peers_past_the_timeout_start_over_and_gone_pairs_are_deleted() {
        let (mut a, mut b, mut store) = nodes();
        a.record_shared(&[report(1000, 0, 10, Event::Started, 0)], &mut store, 0)
            .unwrap();
        // Heard from again 2 hours later (timeout 1 hour): a first sight, a baseline.
        b.record_shared(&[report(5000, 0, 10, Event::None, 7200)], &mut store, 7200)
            .unwrap();
        assert_eq!(b.take_batch(7200), None);
        b.record_shared(
            &[report(5000, 0, 10, Event::Stopped, 7300)],
            &mut store,
            7300,
        )
        .unwrap();
        assert!(
            store.values.is_empty(),
            "the last peer stopped: pair deleted"
        );
        assert_eq!(b.peers(), 0);
    }
}

#[test]
fn a_late_report_restarts_nothing_and_credits_nothing() {
    let mut ledger = Ledger::new("udp-1", 3600, 0);
    ledger.record(&report(0, 0, 1000, Event::Started, 100));
    ledger.record(&report(500, 0, 1000, Event::None, 200));
    // Another node's `started` of second 100, applied after second 200's report.
    ledger.record(&report(0, 0, 1000, Event::Started, 100));
    ledger.record(&report(600, 0, 1000, Event::None, 300));
    assert_eq!(only(&ledger.take_batch(300).unwrap()).uploaded, 600);
    // A real restart, then the old session's last report, late: not credited.
    ledger.record(&report(0, 0, 1000, Event::Started, 400));
    ledger.record(&report(900, 0, 1000, Event::None, 350));
    ledger.record(&report(50, 0, 1000, Event::None, 500));
    assert_eq!(only(&ledger.take_batch(500).unwrap()).uploaded, 50);
}

#[test]
fn completions_count_once_per_download_seen() {
    let mut ledger = Ledger::new("udp-1", 3600, 0);
    let at = |peer: u8, left, event, at| Report {
        peer_id: [peer; 20],
        ..report(0, 1000 - left, left, event, at)
    };
    // One peer id announcing completed then stopped, fifty times over.
    for n in 0..50 {
        ledger.record(&at(1, 0, Event::Completed, n * 2));
        ledger.record(&at(1, 0, Event::Stopped, n * 2 + 1));
    }
    // Fifty fresh peer ids announcing completed with nothing left (32 are followed).
    for peer in 2..52 {
        ledger.record(&at(peer, 0, Event::Completed, 200));
    }
    let replayed = only(&ledger.take_batch(300).unwrap());
    assert_eq!(
        (replayed.completed, replayed.downloaded),
        (0, 0),
        "no download was seen: no completion"
    );
    // A download seen: a leecher that completes, once, however often it says so (the
    // fresh ids gone after the peer timeout, to make room).
    ledger.expire(4000);
    ledger.record(&at(99, 1000, Event::Started, 4000));
    ledger.record(&at(99, 0, Event::Completed, 4100));
    ledger.record(&at(99, 0, Event::Completed, 4101));
    ledger.record(&at(99, 0, Event::None, 4200));
    assert_eq!(only(&ledger.take_batch(4300).unwrap()).completed, 1);
}
