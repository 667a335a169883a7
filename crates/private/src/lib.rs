//! Private trackers: every announce and scrape carries a user's passkey, and only the
//! torrents a site registered are served.
//!
//! # Layout
//!
//! * `key`: where a request carries its key (`/<key>/announce`, `/announce/<key>`,
//!   `?passkey=`), and [`KeyDigest`], the only form in which a key is kept;
//! * `registry`: the users and torrents a site registers, loaded from files and
//!   changed through the admin API, and the decision per announce ([`Grant`] or
//!   [`Refusal`]); `shards`, the lock-free tables it keeps them in;
//! * `ledger`: accounting, the deltas of each user's uploads and downloads per
//!   torrent, duplicates absorbed, handed out in [`Batch`]es;
//! * `accounting`: the thread that keeps the ledger and writes each batch as a file
//!   for the site, with the ledger's base and journal on disk (I/O, unlike the rest);
//! * `stateless`: keys a site derives from a user id and a shared secret (no sync);
//! * `sessions`: the clients each user has in each torrent now, for the per-user peer
//!   cap and the enforced minimum interval.
//!
//! Nothing here touches a socket or a swarm: the trackers ask [`Registry`] before a
//! request reaches a swarm worker, so a refused request changes no state.

mod accounting;
mod key;
mod ledger;
mod registry;
mod sessions;
mod shards;
mod stateless;

pub use accounting::{
    Accounts, AccountsSettings, BatchFile, MAX_SHARED_PENDING, MAX_UNWRITTEN, QUEUE_LEN,
    SHARED_ROUND, SharedStore, batch_files, write_batch,
};
pub use key::{KeyDigest, KeyPlaces, Located, MAX_KEY_LEN, MIN_KEY_LEN, Passkey};
pub use ledger::{
    Batch, Credit, Event, Ledger, Live, MAX_PEERS_PER_ENTRY, MAX_SHARED_ATTEMPTS, Report,
    SharedError, SharedPairs, Whose,
};
pub use registry::{
    Change, Conflict, Grant, KeyChange, MAX_FILE, Refusal, Registry, Torrent, User,
    canonical_number,
};
pub use sessions::{Admitted, ClientAnnounce, MAX_CLIENTS, Sessions};
pub use stateless::{MIN_SECRET, derive_key, fingerprint_hex, secret_of_file, set_secret};
