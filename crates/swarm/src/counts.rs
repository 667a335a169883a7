//! What a swarm counts: the numbers announces and scrapes report.

/// Seeder and leecher counts of a torrent, over both address families.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwarmCounts {
    /// Peers with the whole torrent.
    pub seeders: u32,
    /// Peers still downloading.
    pub leechers: u32,
}

/// What a scrape reports for one torrent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrapeStats {
    /// Peers with the whole torrent ("complete").
    pub seeders: u32,
    /// Peers still downloading ("incomplete").
    pub leechers: u32,
    /// Announces with event=completed seen for this torrent ("downloaded").
    pub downloads: u32,
}
