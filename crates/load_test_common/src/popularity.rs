//! Drawing torrents by popularity in constant time (Vose's alias method).
//!
//! A load tester draws a torrent for every request, so a binary search over a
//! million-entry table per request would cost more than the request itself. The alias
//! table answers each draw with one random number, one comparison and two lookups.

use rand::{Rng, RngExt};

/// A discrete distribution over `0..n` given by weights.
#[derive(Debug, Clone)]
pub(crate) struct Weighted {
    /// Probability of keeping column i rather than taking its alias, scaled to u32.
    keep: Vec<u32>,
    alias: Vec<u32>,
}

impl Weighted {
    /// The distribution with these (non-negative, not all zero) weights.
    pub(crate) fn new(weights: &[f64]) -> Self {
        let n = weights.len();
        assert!(n > 0 && n <= u32::MAX as usize, "1 to 2^32-1 weights");
        let total: f64 = weights.iter().sum();
        assert!(
            total > 0.0 && total.is_finite(),
            "weights must sum to a positive number"
        );
        // Scale so the average column holds exactly 1.
        let mut scaled: Vec<f64> = weights.iter().map(|w| w * n as f64 / total).collect();
        let (mut small, mut large): (Vec<u32>, Vec<u32>) =
            (0..n as u32).partition(|&i| scaled[i as usize] < 1.0);
        let mut keep = vec![u32::MAX; n];
        let mut alias: Vec<u32> = (0..n as u32).collect();
        while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
            small.pop();
            keep[s as usize] = (scaled[s as usize] * f64::from(u32::MAX)) as u32;
            alias[s as usize] = l;
            scaled[l as usize] -= 1.0 - scaled[s as usize];
            if scaled[l as usize] < 1.0 {
                large.pop();
                small.push(l);
            }
        }
        // Leftovers hold (up to rounding) exactly 1: always keep them.
        Self { keep, alias }
    }

    /// Weights 1/(i+1)^shape for i in 0..n.
    pub(crate) fn power_law(n: usize, shape: f64) -> Self {
        let weights: Vec<f64> = (0..n).map(|i| ((i + 1) as f64).powf(-shape)).collect();
        Self::new(&weights)
    }

    /// One draw.
    pub(crate) fn sample(&self, rng: &mut impl Rng) -> usize {
        let column = rng.random_range(0..self.keep.len());
        if rng.random::<u32>() < self.keep[column] {
            column
        } else {
            self.alias[column] as usize
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    use super::*;

    fn frequencies(dist: &Weighted, n: usize, draws: usize) -> Vec<f64> {
        let mut rng = SmallRng::seed_from_u64(3);
        let mut counts = vec![0usize; n];
        for _ in 0..draws {
            counts[dist.sample(&mut rng)] += 1;
        }
        counts
            .into_iter()
            .map(|c| c as f64 / draws as f64)
            .collect()
    }

    #[test]
    fn matches_the_weights() {
        let weights = [1.0, 2.0, 0.0, 5.0, 2.0];
        let freq = frequencies(&Weighted::new(&weights), 5, 200_000);
        for (f, w) in freq.iter().zip(weights) {
            assert!((f - w / 10.0).abs() < 0.01, "{freq:?}");
        }
    }

    #[test]
    fn power_law_shapes() {
        let uniform = frequencies(&Weighted::power_law(4, 0.0), 4, 100_000);
        assert!(
            uniform.iter().all(|f| (f - 0.25).abs() < 0.01),
            "{uniform:?}"
        );
        let zipf = frequencies(&Weighted::power_law(3, 1.0), 3, 100_000);
        // 1 : 1/2 : 1/3 → 6/11, 3/11, 2/11.
        for (f, expected) in zipf.iter().zip([6.0 / 11.0, 3.0 / 11.0, 2.0 / 11.0]) {
            assert!((f - expected).abs() < 0.01, "{zipf:?}");
        }
    }
}
