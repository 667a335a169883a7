//! What shoal's load testers share.
//!
//! * [`cli`]: the flags, summary format and checks the load testers add, and their
//!   shared `main`.
//! * [`config`]: the config root every load tester declares ([`load_test_config!`](crate::load_test_config)).
//! * [`latency`]: per-request latency in a histogram, summarized as percentiles.
//! * [`popularity`]: drawing torrents by a power-law popularity in O(1).
//! * [`population`]: the simulated torrents and peers of a run, the same every run.
//! * [`report`]: sampling counters every second, progress lines, and the summary of
//!   the last seconds of a run.
//! * [`run`]: workers on pinned threads, progress and the summary: the run loop.
//! * [`schedule`]: fixed-rate sending, with a bound on catching up.
//! * [`summary`]: the final summary, as text and JSON from one list of figures.
//! * [`tls`]: a TLS client config that accepts self-signed certificates.

pub mod cli;
pub mod config;
pub mod latency;
pub mod popularity;
pub mod population;
pub mod report;
pub mod run;
pub mod schedule;
pub mod summary;
pub mod tls;
