//! How many accounting reports per second one tracker's accounting thread applies to
//! a cluster's store (private mode in a cluster: documents/private.md, "In a
//! cluster"), and with how many nodes racing for the same pairs.
//!
//!   cargo run --release -p shoal_worker --example shared_ledger_rate -- ADDRESS [REPORTS [PAIRS [NODES]]]
//!
//! ADDRESS is a redis-server's `host:port` (scripts/bench/shared_ledger.py starts
//! one and reads its CPU). REPORTS (400,000) per node, over PAIRS (100,000) users'
//! torrents, two peer ids each, in chunks of 4,096 as the accounting thread applies
//! them. NODES (1) threads apply the same reports at once, each its own ledger and
//! connection, as the nodes of a cluster told of the same dual-stack clients would.
//! Prints reports per second per node, transactions retried, and checks that the
//! bytes credited over all nodes are the bytes reported, once.

use std::time::Instant;

use shoal_common::ClusterConfig;
use shoal_private::{Event, Ledger, MAX_SHARED_ATTEMPTS, Report, SharedError};
use shoal_worker::StorePairs;

/// Reports applied per transaction, as the accounting thread does.
const CHUNK: usize = 4096;

#[allow(clippy::print_stdout)] // the figures are the output
fn main() {
    let mut args = std::env::args().skip(1);
    let address = args
        .next()
        .expect("usage: ADDRESS [REPORTS [PAIRS [NODES]]]");
    let mut number = |default: u64| args.next().map_or(default, |arg| arg.parse().unwrap());
    let reports = number(400_000);
    let pairs = number(100_000).max(1);
    let nodes = number(1).max(1);
    let config = ClusterConfig {
        store: address,
        name: format!("bench{}", std::process::id()),
        ..ClusterConfig::default()
    };
    // Each report raises its peer's total by 1,000: what a run must credit, once.
    let stream: Vec<Report> = (0..reports)
        .map(|i| {
            let pair = i % pairs;
            let peer = (i / pairs) % 2;
            let round = i / (2 * pairs);
            let mut peer_id = [b'-'; 20];
            peer_id[..8].copy_from_slice(&pair.to_le_bytes());
            peer_id[8] = peer as u8;
            Report {
                user: (pair / 4) as u32,
                torrent: (pair % 4) as u32,
                up_factor: 100,
                down_factor: 100,
                peer_id,
                uploaded: round * 1000,
                downloaded: 0,
                left: 1,
                event: if round == 0 {
                    Event::Started
                } else {
                    Event::None
                },
                at: 1_000 + round,
            }
        })
        .collect();
    // Each peer's first report is its baseline (0), its last its total: the bytes a
    // run must credit, once.
    let mut last = std::collections::HashMap::new();
    for report in &stream {
        last.insert(
            (report.user, report.torrent, report.peer_id),
            report.uploaded,
        );
    }
    let expected: u64 = last.values().sum();
    let started = Instant::now();
    let workers: Vec<_> = (0..nodes)
        .map(|node| {
            let stream = stream.clone();
            let config = config.clone();
            std::thread::spawn(move || {
                let mut ledger = Ledger::new(format!("node{node}"), 3600, 0);
                let mut pairs = StorePairs::new(&config);
                let (mut transactions, mut tries) = (0u64, 0u64);
                let started = Instant::now();
                for chunk in stream.chunks(CHUNK) {
                    let now = chunk.last().map_or(0, |report| report.at);
                    loop {
                        transactions += 1;
                        match ledger.record_shared(chunk, &mut pairs, now) {
                            Ok(taken) => break tries += u64::from(taken),
                            Err(SharedError::Contended) => {
                                tries += u64::from(MAX_SHARED_ATTEMPTS);
                            }
                            Err(other) => panic!("{other}"),
                        }
                    }
                }
                let seconds = started.elapsed().as_secs_f64();
                let credited: u64 = ledger
                    .take_batch(u64::MAX)
                    .map_or(0, |batch| batch.entries.iter().map(|e| e.2.uploaded).sum());
                (seconds, transactions, tries, credited)
            })
        })
        .collect();
    let results: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let wall = started.elapsed().as_secs_f64();
    let credited: u64 = results.iter().map(|r| r.3).sum();
    for (node, (seconds, transactions, tries, _)) in results.iter().enumerate() {
        println!(
            "node {node}: {reports} reports in {seconds:.2} s = {:.0} reports/s; {transactions} \
             rounds, {tries} tries ({:.2} per round)",
            reports as f64 / seconds,
            *tries as f64 / *transactions as f64
        );
    }
    println!(
        "all nodes: {:.0} reports/s applied, wall {wall:.2} s; credited {credited} bytes, \
         reported {expected}: {}",
        (reports * nodes) as f64 / wall,
        if credited == expected {
            "each byte once"
        } else {
            "MISMATCH"
        }
    );
    if credited != expected {
        std::process::exit(1);
    }
}
