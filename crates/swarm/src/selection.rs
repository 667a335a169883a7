//! Choosing which peers go into a reply.
//!
//! A reply needs up to `max` distinct peers drawn at random from `n`, skipping the
//! announcer. Visiting positions `start, start + step, start + 2·step, … (mod n)` with
//! a random start and a random step coprime with `n` walks every position exactly once
//! in a scrambled order, in O(max) time and with no allocation. Every peer has the same
//! chance of being chosen, and two announces rarely see the same peers.

use rand::{Rng, RngExt};

/// Visits up to `max` positions of `0..n`, never `exclude`, calling `take(position)`;
/// `take` returns whether it used the position (an expired peer is not used, and the
/// walk goes on to the next one).
pub(crate) fn sample(
    n: usize,
    exclude: Option<usize>,
    max: usize,
    rng: &mut impl Rng,
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
    let start = rng.random_range(0..n);
    let step = coprime_step(n, rng);
    let mut position = start;
    let mut taken = 0;
    for _ in 0..n {
        if Some(position) != exclude && take(position) {
            taken += 1;
            if taken == max {
                return;
            }
        }
        position += step;
        if position >= n {
            position -= n;
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
        sample(n, exclude, max, &mut rng, |p| {
            out.push(p);
            true
        });
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

    #[test]
    fn unusable_positions_are_replaced_by_later_ones() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut used = Vec::new();
        sample(20, None, 5, &mut rng, |p| {
            if p % 2 == 0 {
                used.push(p);
                true
            } else {
                false
            }
        });
        assert_eq!(used.len(), 5);
    }
}
