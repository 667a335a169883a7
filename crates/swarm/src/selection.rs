//! Choosing which peers go into a reply.
//!
//! A reply needs up to `max` distinct peers drawn at random from `n`, skipping the
//! announcer. Visiting positions `start, start + step, start + 2·step, … (mod n)` with
//! a random start and a random step coprime with `n` walks every position exactly once
//! in a scrambled order, in O(max) time and with no allocation. Every peer has the same
//! chance of being chosen, and two announces rarely see the same peers.
//!
//! In a large swarm each chosen peer is a cache miss of its own: thirty per reply,
//! most of what a tracker with a million swarms spends per announce beyond the
//! kernel. [`Walks`] lets a few announces in a row to the same list reuse one walk,
//! so the later ones read lines the first just brought in. Each reply is still a
//! draw of independent random positions, made before and without regard to who holds
//! them: an attacker who fills part of a swarm still lands in each reply only in
//! proportion (a window of consecutive peers would hand whole replies to a burst of
//! fakes that joined together). What reuse gives up is variety between consecutive
//! replies of one swarm: up to [`Walks`]'s reuse count of them within one second see
//! the same positions (documents/benchmarks/floor-2026-11-23.md, sixth session).

use rand::{Rng, RngExt};

use crate::time::ServerTime;

/// How many recent walks a [`Walks`] remembers (a power of two). A slot is 32 bytes,
/// so the table stays in the level-2 cache; lists that share a slot just draw anew.
const WALK_SLOTS: usize = 1024;

/// Recently drawn walks, by candidate list, each used up to `reuse` times within the
/// second it was drawn in (so only a swarm announced to many times a second shares
/// walks, and never for long).
///
/// A list is known by the address of its first candidate, and a walk is kept with
/// the number of candidates it was drawn for. The peers at those positions may have
/// changed since (a list that was freed and another allocated in its place included):
/// the positions were drawn at random without looking at them, so they are as good a
/// draw for the new holders. A list that grew is walked over the positions it had
/// (its newest peers come after, when the walk finds too few live ones); a list that
/// shrank draws a new walk.
#[derive(Debug)]
pub struct Walks {
    slots: Box<[WalkSlot]>,
    reuse: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct WalkSlot {
    list: usize,
    candidates: u32,
    start: u32,
    step: u32,
    uses_left: u32,
    /// The second it was drawn in: a walk serves only replies of that second.
    drawn: u32,
}

impl Walks {
    /// The most replies one walk may serve that a configuration may ask for.
    pub const MOST_REUSE: u32 = 1000;

    /// Walks used `reuse` times each; 0 and 1 draw a new walk for every reply.
    pub fn new(reuse: u32) -> Self {
        let slots = if reuse > 1 {
            vec![WalkSlot::default(); WALK_SLOTS].into_boxed_slice()
        } else {
            Box::default()
        };
        Self { slots, reuse }
    }

    /// A walk `(start, step, over)` at `now` for the list whose candidates start at
    /// `list` and number `n` (at least 1): `step` is coprime with `over`, and
    /// `over <= n`.
    pub(crate) fn walk(
        &mut self,
        list: usize,
        n: usize,
        now: ServerTime,
        rng: &mut impl Rng,
    ) -> (usize, usize, usize) {
        if self.slots.is_empty() || n > u32::MAX as usize {
            return fresh_walk(n, rng);
        }
        // Fibonacci hashing of the address: allocations are aligned, so the low
        // bits alone would crowd a few slots.
        let hash = (list as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let slot = &mut self.slots[(hash >> (64 - WALK_SLOTS.trailing_zeros())) as usize];
        let over = slot.candidates as usize;
        if slot.list == list && slot.uses_left > 0 && slot.drawn == now.0 && over <= n {
            slot.uses_left -= 1;
            return (slot.start as usize, slot.step as usize, over);
        }
        let (start, step, _) = fresh_walk(n, rng);
        *slot = WalkSlot {
            list,
            candidates: n as u32,
            start: start as u32,
            step: step as u32,
            uses_left: self.reuse - 1,
            drawn: now.0,
        };
        (start, step, n)
    }
}

/// A new walk `(start, step, n)` over `n` (at least 1) positions.
pub(crate) fn fresh_walk(n: usize, rng: &mut impl Rng) -> (usize, usize, usize) {
    (rng.random_range(0..n), coprime_step(n, rng), n)
}

/// Visits up to `max` positions of `0..n`, never `exclude`, calling `take(position)`;
/// `take` returns whether it used the position (an expired peer is not used, and the
/// walk goes on to the next one). `walk(n)` gives the walk when one is needed: a
/// [`fresh_walk`], or a [`Walks::walk`].
pub(crate) fn sample(
    n: usize,
    exclude: Option<usize>,
    max: usize,
    walk: impl FnOnce(usize) -> (usize, usize, usize),
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
    let (start, step, over) = walk(n);
    let mut position = start;
    let mut taken = 0;
    for _ in 0..over {
        if Some(position) != exclude && take(position) {
            taken += 1;
            if taken == max {
                return;
            }
        }
        position += step;
        if position >= over {
            position -= over;
        }
    }
    // A reused walk covers the positions the list had when it was drawn; peers
    // that came since are next in line when too few of those were live.
    for position in over..n {
        if Some(position) != exclude && take(position) {
            taken += 1;
            if taken == max {
                return;
            }
        }
    }
}

/// A random step in `1..n` with gcd(step, n) = 1, so the walk covers all of `0..n`.
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

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    fn collect(n: usize, exclude: Option<usize>, max: usize, seed: u64) -> Vec<usize> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut out = Vec::new();
        sample(
            n,
            exclude,
            max,
            |n| fresh_walk(n, &mut rng),
            |p| {
                out.push(p);
                true
            },
        );
        out
    }

    #[test]
    fn takes_everyone_but_the_excluded_when_they_fit() {
        assert_eq!(collect(5, Some(2), 10, 1), vec![0, 1, 3, 4]);
        assert_eq!(collect(5, None, 5, 1), vec![0, 1, 2, 3, 4]);
        assert!(collect(1, Some(0), 10, 1).is_empty());
        assert!(collect(0, None, 10, 1).is_empty());
        assert!(collect(10, None, 0, 1).is_empty());
    }

    #[test]
    fn samples_distinct_positions_and_skips_the_excluded() {
        for seed in 0..200 {
            for n in [3, 10, 64, 97, 1000] {
                let out = collect(n, Some(1), 7.min(n - 2), seed);
                let mut sorted = out.clone();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(sorted.len(), out.len(), "duplicates for n={n}");
                assert_eq!(out.len(), 7.min(n - 2));
                assert!(!out.contains(&1));
                assert!(out.iter().all(|&p| p < n));
            }
        }
    }

    #[test]
    fn every_position_gets_chosen_about_equally_often() {
        let n = 40;
        let mut counts = vec![0u32; n];
        for seed in 0..4000 {
            for p in collect(n, None, 10, seed) {
                counts[p] += 1;
            }
        }
        // Expected 1000 each (4000 draws × 10/40).
        for (position, &count) in counts.iter().enumerate() {
            assert!(
                (850..1150).contains(&count),
                "position {position} chosen {count} times"
            );
        }
    }

    /// The positions a reply from list `list` (of `n` candidates) gets at second
    /// `now`, wanting `max`.
    fn reply(walks: &mut Walks, list: usize, n: usize, now: u32, rng: &mut SmallRng) -> Vec<usize> {
        let mut out = Vec::new();
        let walk = |n| walks.walk(list, n, ServerTime(now), rng);
        sample(n, None, 10, walk, |p| {
            out.push(p);
            true
        });
        out
    }

    #[test]
    fn a_walk_serves_reuse_replies_of_one_list_in_one_second() {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut walks = Walks::new(3);
        let first = reply(&mut walks, 0x1000, 500, 7, &mut rng);
        assert_eq!(reply(&mut walks, 0x1000, 500, 7, &mut rng), first);
        assert_eq!(reply(&mut walks, 0x1000, 500, 7, &mut rng), first);
        // Used three times: the fourth reply draws anew (a repeat has odds 1/500).
        assert_ne!(reply(&mut walks, 0x1000, 500, 7, &mut rng), first);

        let first = reply(&mut walks, 0x1000, 500, 7, &mut rng);
        assert_ne!(
            reply(&mut walks, 0x1000, 500, 8, &mut rng),
            first,
            "next second"
        );
        let first = reply(&mut walks, 0x1000, 500, 8, &mut rng);
        assert_ne!(
            reply(&mut walks, 0x2000, 500, 8, &mut rng),
            first,
            "another list"
        );
        let shrunk = reply(&mut walks, 0x1000, 499, 8, &mut rng);
        assert_ne!(shrunk, first, "a list that shrank draws anew");
        assert!(shrunk.iter().all(|&p| p < 499));
    }

    #[test]
    fn a_grown_list_keeps_its_walk_over_the_positions_it_had() {
        let mut rng = SmallRng::seed_from_u64(4);
        let mut walks = Walks::new(8);
        let first = reply(&mut walks, 0x1000, 100, 1, &mut rng);
        assert_eq!(reply(&mut walks, 0x1000, 120, 1, &mut rng), first);
        // When the old positions run out of live peers, the new ones follow in order.
        let mut taken = Vec::new();
        let walk = |n| walks.walk(0x1000, n, ServerTime(1), &mut rng);
        sample(120, None, 30, walk, |p| {
            taken.push(p);
            p >= 100 || p % 10 == 0
        });
        assert_eq!(taken.iter().filter(|&&p| p < 100).count(), 100);
        assert_eq!(&taken[100..], &(100..120).collect::<Vec<_>>()[..]);
    }

    #[test]
    fn without_reuse_every_reply_is_drawn_anew() {
        let mut rng = SmallRng::seed_from_u64(5);
        for reuse in [0, 1] {
            let mut walks = Walks::new(reuse);
            let replies: Vec<_> = (0..20)
                .map(|_| reply(&mut walks, 0x1000, 1000, 1, &mut rng))
                .collect();
            let distinct = replies.iter().collect::<std::collections::HashSet<_>>();
            assert_eq!(distinct.len(), 20, "reuse {reuse}");
        }
    }

    #[test]
    fn reused_walks_still_give_distinct_positions_without_the_excluded() {
        let mut rng = SmallRng::seed_from_u64(6);
        let mut walks = Walks::new(4);
        for round in 0..400u32 {
            let n = 40 + (round as usize % 7);
            let exclude = round as usize % n;
            let mut out = Vec::new();
            let walk = |n| {
                walks.walk(
                    0x1000 + round as usize % 3 * 64,
                    n,
                    ServerTime(round / 50),
                    &mut rng,
                )
            };
            sample(n, Some(exclude), 30, walk, |p| {
                out.push(p);
                true
            });
            let mut sorted = out.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 30);
            assert!(!out.contains(&exclude) && out.iter().all(|&p| p < n));
        }
    }

    #[test]
    fn unusable_positions_are_replaced_by_later_ones() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut used = Vec::new();
        sample(
            20,
            None,
            5,
            |n| fresh_walk(n, &mut rng),
            |p| {
                if p % 2 == 0 {
                    used.push(p);
                    true
                } else {
                    false
                }
            },
        );
        assert_eq!(used.len(), 5);
    }
}
