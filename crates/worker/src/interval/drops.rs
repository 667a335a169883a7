//! How many of the datagrams the kernel dropped were demand.
//!
//! The kernel counts what it drops for a full receive queue, but not what it was: a
//! flood of junk and a crowd of honest clients overflow a queue alike. What the
//! socket worker read around the drops tells them apart: the datagrams that filled
//! the queue are the ones it reads next, and the drops hit every sender alike, so
//! the share of demand (announces answered, requests shed) among those reads is the
//! share of demand among the drops.
//!
//! The weighing is done by the socket worker at each queue check, over what it read
//! since the previous one (about 100 ms), not by the interval's driver over its
//! second: a worker that falls behind can report the tail of a flood's drops in a
//! second when it reads mostly honest announces, and weighed by that second those
//! junk drops read as thousands of announces lost. Drops among reads that were
//! mostly junk are a flood's and count as no demand at all, as the controller
//! treats a second of mostly junk.

use super::MIN_DEMAND_SHARE;

/// Weighs one socket's kernel drops by what its worker read between queue checks.
#[derive(Clone, Debug, Default)]
pub struct DropWeigher {
    /// Datagrams read since the last weighing.
    read: u64,
    /// Of them, demand: announces answered and requests shed.
    demand: u64,
    /// Drops reported while nothing was read: their reads are still to come.
    held: u64,
    /// The fraction of a drop left over by the last weighing, carried so that many
    /// small weighings add up to what one large one would give.
    fraction: f64,
}

impl DropWeigher {
    /// Counts `read` datagrams read since the last call, `demand` of them announces
    /// answered or requests shed.
    pub fn note(&mut self, read: u64, demand: u64) {
        self.read = self.read.saturating_add(read);
        self.demand = self.demand.saturating_add(demand);
    }

    /// Takes the `drops` the kernel reported at a queue check and returns how many
    /// of them (and of those held before) were demand, weighed by what was read
    /// since the last weighing. While nothing has been read the drops are held: the
    /// datagrams that filled the queue have not been read yet, and tell what they
    /// were when they are.
    pub fn weigh(&mut self, drops: u64) -> u64 {
        self.held = self.held.saturating_add(drops);
        if self.read == 0 {
            return 0;
        }
        // Replies can come back after the reads they answer: never over one.
        let share = (self.demand as f64 / self.read as f64).min(1.0);
        self.read = 0;
        self.demand = 0;
        if share < MIN_DEMAND_SHARE {
            // Drops among mostly junk: a flood's. They cost honest clients
            // announces too, but a longer interval does not stop a flood, and
            // counted as demand they would raise it for everyone (the same rule as
            // the controller's for a second of mostly junk).
            self.held = 0;
            return 0;
        }
        let weighed = self.held as f64 * share + self.fraction;
        // `as` saturates, and rounding in f64 can pass `held` by a little: never
        // more than was dropped.
        let whole = weighed.floor();
        self.fraction = weighed - whole;
        let held = std::mem::take(&mut self.held);
        (whole as u64).min(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The case the driver used to get wrong: a flood's last drops reported after
    /// the worker has caught up on its queue (reads of junk), then a window of
    /// honest reads. The drops are weighed by the reads around them.
    #[test]
    fn a_flood_s_drops_are_weighed_by_the_flood_s_reads() {
        let mut weigher = DropWeigher::default();
        weigher.note(120_000, 12);
        assert_eq!(weigher.weigh(3_547), 0);
        // The honest window after drops nothing.
        weigher.note(18, 17);
        assert_eq!(weigher.weigh(0), 0);
        // A flood's window that would weigh to a few announces lost (5,911 × 3 /
        // 3,560 = 5, seen on a starved worker): a flood's drops, no demand.
        weigher.note(3_560, 3);
        assert_eq!(weigher.weigh(5_911), 0);
        weigher.note(100, 100);
        assert_eq!(weigher.weigh(10), 10);
        // Honest load with connects and scrapes among it: half the drops are demand,
        // fractions carried.
        let returned: u64 = (0..10)
            .map(|_| {
                weigher.note(1_000, 500);
                weigher.weigh(3)
            })
            .sum();
        assert_eq!(returned, 15);
    }

    /// A worker that reads nothing between checks (starved, or stopped) holds its
    /// drops for the reads that come when it runs again.
    #[test]
    fn drops_wait_for_the_reads_that_tell_what_they_were() {
        let mut weigher = DropWeigher::default();
        assert_eq!(weigher.weigh(500), 0);
        assert_eq!(weigher.weigh(500), 0);
        weigher.note(2_000, 1_000);
        assert_eq!(weigher.weigh(0), 500);
        // Honest overload: every read is demand, every drop is.
        weigher.note(50, 50);
        assert_eq!(weigher.weigh(70), 70);
    }

    proptest! {
        /// Over any sequence of reads and drops, the demand returned never exceeds
        /// the drops taken, and where every read is demand, every drop is returned
        /// once reads have come.
        #[test]
        fn never_more_demand_than_drops(
            steps in proptest::collection::vec((0..u64::MAX, 0..u64::MAX, 0..u64::MAX), 0..40),
            all_demand in any::<bool>(),
        ) {
            let mut weigher = DropWeigher::default();
            let mut dropped: u128 = 0;
            let mut weighed: u128 = 0;
            let mut held: u128 = 0;
            for (read, demand, drops) in steps {
                let (read, demand, drops) = (read >> (read % 64), demand >> (demand % 64), drops >> (drops % 64));
                let demand = if all_demand { read } else { demand };
                weigher.note(read, demand);
                dropped += u128::from(drops);
                held += u128::from(drops);
                weighed += u128::from(weigher.weigh(drops));
                if read > 0 {
                    held = 0;
                }
                prop_assert!(weighed <= dropped, "{weighed} > {dropped}");
                if all_demand && held == 0 && dropped < 1 << 52 {
                    // Exact below f64's 53 bits of integer.
                    prop_assert_eq!(weighed, dropped);
                }
            }
        }
    }
}
