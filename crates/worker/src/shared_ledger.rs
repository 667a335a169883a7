//! Private mode's ledger pairs kept in a cluster's store, so that every node credits
//! a client's bytes once however many nodes it announces to (the transaction itself
//! is `shoal_private::Ledger::record_shared`; the atomic compare-and-replace is
//! `shoal_cluster::SharedValues`).

use shoal_cluster::{SharedValues, ledger_key, store_address};
use shoal_common::ClusterConfig;
use shoal_private::SharedPairs;

/// The ledger pairs of cluster `[cluster] name`.
#[derive(Debug)]
pub struct StorePairs {
    values: SharedValues,
    name: String,
}

impl StorePairs {
    /// The pairs of the cluster `config` describes (connected when first used).
    pub fn new(config: &ClusterConfig) -> Self {
        Self {
            values: SharedValues::new(store_address(config)),
            name: config.name.clone(),
        }
    }

    fn keys(&self, pairs: &[(u32, u32)]) -> Vec<Vec<u8>> {
        pairs
            .iter()
            .map(|&(user, torrent)| ledger_key(&self.name, user, torrent))
            .collect()
    }
}

impl SharedPairs for StorePairs {
    fn load(&mut self, pairs: &[(u32, u32)]) -> Result<Vec<Option<Vec<u8>>>, String> {
        let keys = self.keys(pairs);
        self.values.load(&keys)
    }

    fn replace(
        &mut self,
        pairs: &[(u32, u32)],
        expected: &[Option<Vec<u8>>],
        new: &[Option<Vec<u8>>],
        ttl: u64,
    ) -> Result<bool, String> {
        let keys = self.keys(pairs);
        self.values.replace(&keys, expected, new, ttl)
    }
}
