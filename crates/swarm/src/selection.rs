//! Choosing which peers go into a reply.
//!
//! A reply needs up to `max` distinct peers drawn at random from `n`, skipping the
//! announcer. The positions, taken as a circle from a random place on it, are cut
//! into groups of neighbours (one group may be shorter), and the groups into as many
//! strata of consecutive groups as the reply needs groups. A reply takes one group
//! at a random place in every stratum; if expired or excluded peers leave it short,
//! the other groups follow in a scrambled order (a random start and a step coprime
//! with their number) until every group was visited once. That is O(max) work with
//! no allocation. With every peer live and none excluded each is equally likely to
//! be chosen (the random starting place sees to that); peers near the announcer or
//! near expired ones are within a few per cent of that (see the tests).
//!
//! Groups exist for the cache. In a large swarm every chosen peer whose record is
//! not cached costs a memory read, and the reads of one reply were about 4% of a UDP
//! reply's cost under load (documents/benchmarks/floor-2026-11-23.md). A group is as
//! many neighbouring records as fit in a cache line (six IPv4 peers), so a reply of
//! 30 IPv4 peers reads nine or ten lines (a group of 60 bytes usually spans two)
//! instead of thirty, and they are asked for (`fetch`) before the first is read, so
//! that their misses overlap. Records of a cache line or more (WebTorrent's, HTTP's
//! IPv6 peers with an id) get groups of one: single positions.
//!
//! Strata exist against fakes. Neighbours in a list mostly joined at about the same
//! time, so a reply must not come from one stretch of it, or a burst of fake peers
//! could fill whole replies. So a group never holds more than a fifth of a reply
//! (smaller replies get smaller groups, down to single peers), and with one group
//! from every stratum a reply is spread over the whole list: a stretch of
//! consecutive groups meets at most its length over the shortest stratum's, plus
//! two, strata. In a list much longer than the reply, a stretch of half of it meets
//! at most four of five strata, so the reply's first groups are never all from it;
//! it can be filled from the stretch only if the group from outside comes up short
//! (expired peers, the announcer, a short group) and the groups that make up for it
//! fall in the stretch too.

use rand::{Rng, RngExt};

/// Visits up to `max` positions of `0..n`, never `exclude`, calling `take(position)`;
/// `take` returns whether it used the position (an expired peer is not used, and the
/// visit goes on to another one). Positions are taken in groups of `group`
/// neighbours (see the module documentation); `group` 1 takes single positions.
/// Before any `take`, `fetch(first, len)` is called for the first groups to be read
/// (up to [`MAX_FETCHED`]), so that their memory can be asked for at once.
pub(crate) fn sample(
    n: usize,
    exclude: Option<usize>,
    max: usize,
    group: usize,
    rng: &mut impl Rng,
    mut fetch: impl FnMut(usize, usize),
    mut take: impl FnMut(usize) -> bool,
) {
    let available = n - usize::from(exclude.is_some_and(|e| e < n));
    if max == 0 || available == 0 {
        return;
    }
    if available <= max {
        // Everyone fits: no randomness needed.
        for position in (0..n).filter(|&p| Some(p) != exclude) {
            take(position);
        }
        return;
    }
    // Groups start at a random place on the circle of positions, so that no
    // position is favoured by where the groups, the short last group or the strata
    // fall.
    // A group holds at most a fifth of the reply, so that a reply has five strata
    // or more (groups of one for replies under ten peers).
    let group = group.min(max / MIN_STRATA).max(1);
    let groups = Groups::new(n, group, rng.random_range(0..n));
    let strata = Strata::new(groups.count, max.div_ceil(groups.size));
    // Each stratum's group is at a random place in it, derived from this seed so
    // that the walk below can tell it again without storing it.
    let seed = rng.next_u64();
    let chosen = |stratum: usize| -> usize {
        let (first, len) = strata.range(stratum);
        first + below(mix(seed.wrapping_add(stratum as u64)), len)
    };
    // Ask for every stratum's group before reading any: their misses overlap
    // instead of each waiting for the one before to leave the pipeline.
    for stratum in 0..strata.count.min(MAX_FETCHED) {
        let (start, len) = groups.range(chosen(stratum));
        let before_end = len.min(n - start);
        fetch(start, before_end);
        if before_end < len {
            fetch(0, len - before_end);
        }
    }
    let mut taken = 0;
    let mut visit = |group: usize| -> bool {
        for position in groups.positions(group) {
            if Some(position) != exclude && take(position) {
                taken += 1;
                if taken == max {
                    return true;
                }
            }
        }
        false
    };
    for stratum in 0..strata.count {
        if visit(chosen(stratum)) {
            return;
        }
    }
    // Expired or excluded peers left the reply short. The other groups follow in a
    // scrambled order (a random start and a step coprime with their number, which
    // visits each once), so that the peers just after a stretch of expired ones are
    // not the ones that make up for it.
    let mut group = rng.random_range(0..groups.count);
    let step = coprime_step(groups.count, rng);
    for _ in 0..groups.count {
        if group != chosen(strata.of(group)) && visit(group) {
            return;
        }
        group += step;
        if group >= groups.count {
            group -= groups.count;
        }
    }
}

/// The fewest strata a reply is cut into when it has that many peers to take.
const MIN_STRATA: usize = 5;

/// The most groups asked for ahead of reading. A core has about a dozen cache misses
/// in flight at most; asking for hundreds (an HTTP reply of 1,000 peers) would only
/// wait for slots, and the reading itself keeps up with the rest.
const MAX_FETCHED: usize = 16;

/// A random step in `1..n` with gcd(step, n) = 1, so that `start + k·step (mod n)`
/// for `k` in `0..n` visits all of `0..n`.
fn coprime_step(n: usize, rng: &mut impl Rng) -> usize {
    if n <= 2 {
        return 1;
    }
    let mut step = rng.random_range(1..n);
    while gcd(step, n) != 1 {
        step = if step + 1 == n { 1 } else { step + 1 };
    }
    step
}

fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `groups` consecutive groups cut into `count` strata of consecutive groups whose
/// lengths differ by at most one (the longer ones first).
struct Strata {
    count: usize,
    shortest: usize,
    longer: usize,
}

impl Strata {
    fn new(groups: usize, wanted: usize) -> Self {
        let count = wanted.clamp(1, groups);
        Self {
            count,
            shortest: groups / count,
            longer: groups % count,
        }
    }

    /// The first group of `stratum` and its length.
    fn range(&self, stratum: usize) -> (usize, usize) {
        let first = stratum * self.shortest + stratum.min(self.longer);
        (first, self.shortest + usize::from(stratum < self.longer))
    }

    /// The stratum `group` belongs to.
    fn of(&self, group: usize) -> usize {
        let long = self.shortest + 1;
        let in_longer = self.longer * long;
        if group < in_longer {
            group / long
        } else {
            self.longer + (group - in_longer) / self.shortest
        }
    }
}

/// SplitMix64's finaliser: spreads a counter's bits over the whole word.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A number in `0..len` from 64 random bits (multiply-shift; the bias, below
/// `len / 2^64`, is nothing at these sizes).
fn below(random: u64, len: usize) -> usize {
    ((u128::from(random) * len as u128) >> 64) as usize
}

/// The circle of positions `0..n` cut into groups of `size` consecutive positions
/// from `shift` on (wrapping past `n - 1` to 0), the last group shorter when `size`
/// does not divide `n`.
struct Groups {
    n: usize,
    size: usize,
    count: usize,
    shift: usize,
}

impl Groups {
    fn new(n: usize, size: usize, shift: usize) -> Self {
        let size = size.max(1);
        Self {
            n,
            size,
            count: n.div_ceil(size),
            shift,
        }
    }

    /// Where `group` starts and how many positions it has.
    fn range(&self, group: usize) -> (usize, usize) {
        let offset = group * self.size;
        let mut start = self.shift + offset;
        if start >= self.n {
            start -= self.n;
        }
        (start, self.size.min(self.n - offset))
    }

    /// The positions of `group`, in order around the circle.
    fn positions(&self, group: usize) -> impl Iterator<Item = usize> {
        let (start, len) = self.range(group);
        let n = self.n;
        (start..start + len).map(move |p| if p >= n { p - n } else { p })
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    /// The positions one reply takes, in order, every position usable.
    fn collect(
        n: usize,
        exclude: Option<usize>,
        max: usize,
        group: usize,
        seed: u64,
    ) -> Vec<usize> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut out = Vec::new();
        sample(
            n,
            exclude,
            max,
            group,
            &mut rng,
            |_, _| {},
            |p| {
                out.push(p);
                true
            },
        );
        out
    }

    #[test]
    fn takes_everyone_but_the_excluded_when_they_fit() {
        for group in [1, 6] {
            assert_eq!(collect(5, Some(2), 10, group, 1), vec![0, 1, 3, 4]);
            assert_eq!(collect(5, None, 5, group, 1), vec![0, 1, 2, 3, 4]);
            assert!(collect(1, Some(0), 10, group, 1).is_empty());
            assert!(collect(0, None, 10, group, 1).is_empty());
            assert!(collect(10, None, 0, group, 1).is_empty());
        }
    }

    #[test]
    fn samples_distinct_positions_and_skips_the_excluded() {
        for seed in 0..200 {
            for n in [3, 10, 64, 97, 1000] {
                for group in [1, 2, 6] {
                    for max in [1, 7, 30] {
                        let want = max.min(n - 2);
                        let out = collect(n, Some(1), want, group, seed);
                        let mut sorted = out.clone();
                        sorted.sort_unstable();
                        sorted.dedup();
                        assert_eq!(sorted.len(), out.len(), "duplicates, n={n} group={group}");
                        assert_eq!(out.len(), want, "n={n} group={group} max={max}");
                        assert!(!out.contains(&1));
                        assert!(out.iter().all(|&p| p < n));
                    }
                }
            }
        }
    }

    #[test]
    fn the_announcers_neighbours_are_not_favoured_much() {
        // The announcer's place leaves a chosen group one short; the peer that makes
        // up for it comes from anywhere.
        let (n, draws, excluded) = (40, 20_000, 17);
        let mut counts = vec![0u32; n];
        for seed in 0..draws {
            for p in collect(n, Some(excluded), 10, 6, seed) {
                counts[p] += 1;
            }
        }
        // 20,000 draws of 10 from the 39 others: 5,128 each on average.
        for (position, &count) in counts.iter().enumerate() {
            if position == excluded {
                assert_eq!(count, 0);
            } else {
                assert!(
                    (4800..5450).contains(&count),
                    "position {position} chosen {count} times"
                );
            }
        }
    }

    #[test]
    fn fetched_groups_lie_inside_the_list() {
        for n in 32..100 {
            for seed in 0..20 {
                let mut rng = SmallRng::seed_from_u64(seed);
                let mut fetched = 0;
                sample(
                    n,
                    Some(0),
                    30,
                    6,
                    &mut rng,
                    |first, len| {
                        assert!(len >= 1 && first + len <= n, "n={n}: {first}+{len}");
                        fetched += len;
                    },
                    |_| true,
                );
                assert!(fetched >= 30 - 5, "n={n}: {fetched} fetched");
            }
        }
    }

    #[test]
    fn every_position_gets_chosen_about_equally_often() {
        // 40 positions: with groups of 6 the last group has 4, and the 7 groups fall
        // into strata of 4 and 3 groups; none of that may favour a position.
        for group in [1, 6] {
            let n = 40;
            let mut counts = vec![0u32; n];
            for seed in 0..8000 {
                for p in collect(n, None, 10, group, seed) {
                    counts[p] += 1;
                }
            }
            // Expected 2000 each (8000 draws × 10/40).
            for (position, &count) in counts.iter().enumerate() {
                assert!(
                    (1800..2200).contains(&count),
                    "group {group}: position {position} chosen {count} times"
                );
            }
        }
    }

    #[test]
    fn a_reply_takes_whole_groups_of_neighbours() {
        let n = 6000;
        for seed in 0..100 {
            let out = collect(n, None, 30, 6, seed);
            assert_eq!(out.len(), 30);
            for chunk in out.chunks(6) {
                for pair in chunk.windows(2) {
                    assert_eq!(pair[1], (pair[0] + 1) % n, "not neighbours: {out:?}");
                }
            }
        }
    }

    #[test]
    fn a_stretch_of_half_the_list_never_fills_the_first_groups() {
        // Fakes that joined in one burst sit together. Wherever a stretch of half
        // the list lies, one of a reply's first groups comes from outside it, for
        // small replies (groups of 1 and 2, five and six strata) as for 30 peers
        // (five groups of 6), and with an odd length (a short group of one).
        for n in [6000, 6001] {
            for max in [5, 10, 12, 30, 50] {
                for fakes_from in (0..n).step_by(337) {
                    let fake = |p: usize| (p + n - fakes_from) % n < n / 2;
                    for seed in 0..100 {
                        let honest = collect(n, None, max, 6, seed)
                            .into_iter()
                            .filter(|&p| !fake(p))
                            .count();
                        assert!(
                            honest >= 1,
                            "no honest peer: n={n} max={max} fakes from {fakes_from}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_small_reply_is_not_one_stretch() {
        // Five peers wanted: five groups of one, not one group of five neighbours.
        for seed in 0..100 {
            let mut out = collect(6000, None, 5, 6, seed);
            out.sort_unstable();
            assert!(out.windows(2).all(|pair| pair[1] - pair[0] > 1), "{out:?}");
        }
    }

    #[test]
    fn the_first_groups_are_fetched_before_any_is_read() {
        let mut rng = SmallRng::seed_from_u64(5);
        let mut fetched = Vec::new();
        let taken = std::cell::RefCell::new(Vec::new());
        sample(
            6000,
            None,
            30,
            6,
            &mut rng,
            |first, len| {
                assert!(taken.borrow().is_empty(), "fetched after a read");
                fetched.push((first, len));
            },
            |p| {
                taken.borrow_mut().push(p);
                true
            },
        );
        assert_eq!(fetched.len(), 5);
        for &p in taken.borrow().iter() {
            assert!(
                fetched
                    .iter()
                    .any(|&(first, len)| (first..first + len).contains(&p)),
                "{p} was not fetched"
            );
        }
    }

    #[test]
    fn unusable_positions_are_replaced_by_later_ones() {
        for group in [1, 6] {
            for n in [60, 600] {
                let mut rng = SmallRng::seed_from_u64(7);
                let mut used = Vec::new();
                // Two positions in three expired: whole groups come up short.
                sample(
                    n,
                    None,
                    12,
                    group,
                    &mut rng,
                    |_, _| {},
                    |p| {
                        if p % 3 == 0 {
                            used.push(p);
                            true
                        } else {
                            false
                        }
                    },
                );
                assert_eq!(used.len(), 12, "n={n} group={group}");
                let mut sorted = used.clone();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(sorted.len(), 12);
            }
        }
    }

    #[test]
    fn peers_after_a_stretch_of_expired_ones_are_not_favoured() {
        // Five groups' worth of expired peers at the start of 120: the groups that
        // make up for them come from anywhere, not from the neighbours.
        let (n, draws) = (120, 20_000);
        let live = |p: usize| p >= 30;
        let mut counts = vec![0u32; n];
        for seed in 0..draws {
            let mut rng = SmallRng::seed_from_u64(seed);
            sample(
                n,
                None,
                30,
                6,
                &mut rng,
                |_, _| {},
                |p| {
                    if live(p) {
                        counts[p] += 1;
                    }
                    live(p)
                },
            );
        }
        // Every draw takes 30 of the 90 live peers: 6,667 each on average.
        for (position, &count) in counts.iter().enumerate().skip(30) {
            assert!(
                (6000..7333).contains(&count),
                "position {position} chosen {count} times"
            );
        }
    }

    #[test]
    fn every_group_has_the_stratum_that_holds_it() {
        for groups in 1..60 {
            for wanted in 1..70 {
                let strata = Strata::new(groups, wanted);
                let mut next = 0;
                for stratum in 0..strata.count {
                    let (first, len) = strata.range(stratum);
                    assert_eq!(first, next);
                    assert!(len >= 1);
                    for group in first..first + len {
                        assert_eq!(
                            strata.of(group),
                            stratum,
                            "{groups} groups, {wanted} wanted"
                        );
                    }
                    next = first + len;
                }
                assert_eq!(next, groups);
            }
        }
    }

    #[test]
    fn a_list_of_only_unusable_peers_gives_nothing_and_ends() {
        let mut rng = SmallRng::seed_from_u64(9);
        let mut visits = vec![0u32; 500];
        sample(
            500,
            Some(3),
            30,
            6,
            &mut rng,
            |_, _| {},
            |p| {
                visits[p] += 1;
                false
            },
        );
        // Every position but the excluded one was tried exactly once.
        for (p, &v) in visits.iter().enumerate() {
            assert_eq!(v, u32::from(p != 3), "position {p}");
        }
    }
}
