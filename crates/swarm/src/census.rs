//! What a cleaning pass learns about a map on its way: seeders and leechers over all
//! torrents, and the largest swarms.
//!
//! Counting seeders on every announce would put a second counter update on the hot
//! path; the cleaning pass visits every torrent anyway, so it counts them there. The
//! figures are as old as the last finished pass (the cleaning interval, a minute by
//! default), which is what a dashboard needs.

use crate::InfoHash;
use crate::counts::ScrapeStats;

/// How many of the largest swarms a census keeps.
pub const LARGEST_SWARMS: usize = 10;

/// One torrent in the list of the largest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwarmSummary {
    /// The torrent.
    pub info_hash: InfoHash,
    /// Its scrape figures.
    pub stats: ScrapeStats,
}

impl SwarmSummary {
    fn peers(&self) -> u64 {
        u64::from(self.stats.seeders) + u64::from(self.stats.leechers)
    }
}

/// Totals over a map, taken during one cleaning pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// Seeders over all torrents.
    pub seeders: u64,
    /// Leechers over all torrents.
    pub leechers: u64,
    /// The [`LARGEST_SWARMS`] torrents with the most peers, largest first.
    pub largest: Vec<SwarmSummary>,
}

impl Census {
    /// Counts one torrent.
    pub(crate) fn count(&mut self, info_hash: &InfoHash, stats: ScrapeStats) {
        self.seeders += u64::from(stats.seeders);
        self.leechers += u64::from(stats.leechers);
        let summary = SwarmSummary {
            info_hash: *info_hash,
            stats,
        };
        let full = self.largest.len() >= LARGEST_SWARMS;
        if full
            && self
                .largest
                .last()
                .is_some_and(|smallest| smallest.peers() >= summary.peers())
        {
            return;
        }
        let at = self
            .largest
            .partition_point(|kept| kept.peers() >= summary.peers());
        self.largest.insert(at, summary);
        self.largest.truncate(LARGEST_SWARMS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(seeders: u32, leechers: u32) -> ScrapeStats {
        ScrapeStats {
            seeders,
            leechers,
            downloads: 0,
        }
    }

    #[test]
    fn keeps_totals_and_the_largest_in_order() {
        let mut census = Census::default();
        for n in 0..100u32 {
            let mut hash = [0u8; 20];
            hash[..4].copy_from_slice(&n.to_be_bytes());
            census.count(&hash, stats(n % 7, n));
        }
        assert_eq!(census.leechers, (0..100).sum::<u64>());
        assert_eq!(census.seeders, (0..100u64).map(|n| n % 7).sum::<u64>());
        assert_eq!(census.largest.len(), LARGEST_SWARMS);
        let peers: Vec<u64> = census.largest.iter().map(SwarmSummary::peers).collect();
        let mut sorted = peers.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(peers, sorted);
        let biggest = (0..100u32).max_by_key(|n| n % 7 + n).unwrap();
        assert_eq!(census.largest[0].info_hash[..4], biggest.to_be_bytes());
    }
}
