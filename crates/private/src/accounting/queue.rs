//! The reports waiting for the accounting thread: a queue that takes memory only for
//! what waits, up to a count.
//!
//! The thread stops taking reports while it flushes, and a flush encodes and writes
//! every session changed since the last one: at 115,000 announces a second of
//! distinct sessions (a million peers announcing in a few seconds), close to a second
//! on a shared core. A fixed queue of 65,536 reports (what it was) filled in 0.57 s
//! and dropped about 32,000 reports a flush (documents/benchmarks/
//! private-2026-11-29.md): their completions, seeding time and a dropped `stopped`'s
//! last bytes were never credited. A fixed queue large enough for that would hold its
//! memory for good; this one allocates blocks as reports wait and frees them as the
//! thread takes them, and counts what waits so that a thread that cannot keep up at
//! all is bounded by [`QUEUE_LEN`] reports (about 70 MiB).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::ledger::Report;

/// Reports waiting for the thread at most; past it they are dropped and counted.
pub const QUEUE_LEN: usize = 1 << 20;

/// Creates a queue of at most `limit` reports.
pub(super) fn report_queue(limit: usize) -> (ReportSender, ReportReceiver) {
    let (sender, receiver) = crossbeam_channel::unbounded();
    let waiting = Arc::new(AtomicUsize::new(0));
    (
        ReportSender {
            sender,
            waiting: waiting.clone(),
            limit,
        },
        ReportReceiver { receiver, waiting },
    )
}

/// The socket workers' end.
#[derive(Debug)]
pub(super) struct ReportSender {
    sender: Sender<Report>,
    /// Reports sent and not yet taken (taken ones are subtracted after each drain,
    /// so this is never below what waits).
    waiting: Arc<AtomicUsize>,
    limit: usize,
}

impl ReportSender {
    /// Queues `report`; `false` (and nothing queued) when `limit` reports wait or the
    /// thread is gone. Never waits.
    pub(super) fn send(&self, report: Report) -> bool {
        if self.waiting.fetch_add(1, Relaxed) >= self.limit {
            self.waiting.fetch_sub(1, Relaxed);
            return false;
        }
        if self.sender.send(report).is_err() {
            self.waiting.fetch_sub(1, Relaxed);
            return false;
        }
        true
    }
}

/// The accounting thread's end.
#[derive(Debug)]
pub(super) struct ReportReceiver {
    receiver: Receiver<Report>,
    waiting: Arc<AtomicUsize>,
}

impl ReportReceiver {
    /// Hands every report waiting to `take`, oldest first; `false` once every sender
    /// is gone and nothing is left.
    pub(super) fn drain(&self, mut take: impl FnMut(Report)) -> bool {
        let mut taken = 0;
        let open = loop {
            match self.receiver.try_recv() {
                Ok(report) => {
                    take(report);
                    taken += 1;
                }
                Err(TryRecvError::Empty) => break true,
                Err(TryRecvError::Disconnected) => break false,
            }
        };
        self.waiting.fetch_sub(taken, Relaxed);
        open
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Event;

    fn report(user: u32) -> Report {
        Report {
            user,
            torrent: 1,
            up_factor: 100,
            down_factor: 100,
            peer_id: [0; 20],
            uploaded: 0,
            downloaded: 0,
            left: 0,
            event: Event::None,
            at: 0,
        }
    }

    #[test]
    fn at_most_the_limit_waits_and_taking_makes_room_again() {
        let (sender, receiver) = report_queue(3);
        assert!((0..3).all(|user| sender.send(report(user))));
        assert!(!sender.send(report(3)), "a fourth is past the limit");
        let mut taken = Vec::new();
        assert!(receiver.drain(|r| taken.push(r.user)));
        assert_eq!(
            taken,
            [0, 1, 2],
            "oldest first, the refused one not among them"
        );
        assert!((4..7).all(|user| sender.send(report(user))));
        assert!(!sender.send(report(7)));
    }

    #[test]
    fn a_gone_thread_refuses_and_a_gone_sender_ends_the_drain() {
        let (sender, receiver) = report_queue(10);
        assert!(sender.send(report(1)));
        drop(sender);
        let mut taken = 0;
        assert!(!receiver.drain(|_| taken += 1), "every sender gone");
        assert_eq!(taken, 1, "what waited is taken first");

        let (sender, receiver) = report_queue(10);
        drop(receiver);
        assert!(!sender.send(report(1)));
        assert_eq!(
            sender.waiting.load(Relaxed),
            0,
            "a refused report is not counted"
        );
    }
}
