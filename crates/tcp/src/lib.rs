//! The TCP transport of shoal's HTTP and WebTorrent trackers.
//!
//! Socket workers are executors (glommio on io_uring, or an epoll executor where
//! io_uring is refused; a thread each) that accept on their own `SO_REUSEPORT`
//! listeners and run one task per connection. Everything a TCP
//! tracker needs besides its protocol is here once: checking that io_uring and enough
//! locked memory are there, the connection limits (per worker, per client, TLS
//! handshakes), eviction of the connection quiet the longest, TLS with certificates
//! reloaded in place, reading HTTP heads, the reply inbox that wakes an executor, and
//! the connection counters both trackers show. A tracker's connection logic lives in
//! its own crate as a sans-IO session; what is here is how connections are carried.
//!
//! # Layout
//!
//! Every module is private; what other crates use is re-exported at the root below.
//!
//! * `tracker`: the [`TcpTracker`] trait a TCP tracker implements, and the
//!   [`Worker`] every connection task of a socket worker sees.
//! * `start`: the shared start-up and the socket workers (listeners, executor, reply
//!   pump, counters).
//! * `accept`: one accepted connection from the accept to its close: admission, the
//!   TLS handshake under its deadline, the tracker's own protocol.
//! * `counters`: what every TCP tracker counts about its connections.
//! * `admission`: whether a new connection or TLS handshake is let in, and at whose
//!   expense (rate, per-client slot, evict or refuse, handshake caps), as a rule with
//!   unit tests; its counts held by guards.
//! * `eviction`: which connection gives way when a socket worker is full (the one
//!   quiet the longest).
//! * `inbox`: the receiving end of a reply channel inside a socket worker's executor.
//! * `counted`: a TCP stream that counts the bytes it carries.
//! * `backend`: which executor runs the socket workers (`network.io_backend`), and
//!   what their tasks ask of it: spawning, timers and deadlines, accepting, streams.
//! * `executor`: glommio executors that never spin (the io_uring backend).
//! * `poll`: the epoll executor, for hosts that refuse io_uring.
//! * `tls`: certificates from PEM files, swapped atomically on reload.
//! * `certificates`: where a tracker's certificate comes from: the operator's files
//!   or an ACME CA (`shoal_acme`).
//! * `tls_stream`: TLS over a connection that holds no buffer while it is idle
//!   (rustls's unbuffered connection, records in one scratch buffer per thread).
//! * `tickets`: stateless session tickets under rotating keys every worker shares.
//! * `http_head`: reading an HTTP request head that arrives in pieces.
//! * `io_uring` and `memlock`: whether io_uring can be set up here, and locked
//!   memory enough for its buffers (what `auto` asks before it picks io_uring).

mod accept;
mod admission;
mod backend;
mod certificates;
mod counted;
mod counters;
mod eviction;
mod executor;
mod http_head;
mod inbox;
mod io_uring;
mod memlock;
mod poll;
mod start;
mod tickets;
mod tls;
mod tls_stream;
mod tracker;

pub use backend::{Backend, Sleep, before, sleep, spawn_local, within, write_all_before};
pub use counters::{ConnectionCounters, SharedConnectionCounters};
pub use eviction::Place;
pub use http_head::HeadScan;
pub use io_uring::check_available as io_uring_available;
pub use memlock::{locked_memory_needed, validate_io_memory};
pub use start::{prepare, start};
pub use tls::TlsConfig;
pub use tracker::{PreparedTcpTracker, RunningTcpTracker, TcpExtra, TcpTracker, Worker};

/// Entry points for the fuzz targets (built only by cargo-fuzz, which sets
/// `--cfg fuzzing`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    /// `fuzz/fuzz_targets/tls_stream.rs`.
    pub fn tls_stream(data: &[u8]) {
        crate::tls_stream::rig::fuzz(data);
    }
}
