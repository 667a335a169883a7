//! What shoal's load testers share.
//!
//! # Layout
//!
//! Every module is private; what the load testers use is re-exported at the root below.
//!
//! * `cli`: the flags, summary format and checks the load testers add, and their
//!   shared `main`.
//! * `config`: the config root every load tester declares ([`load_test_config!`](crate::load_test_config)).
//! * `latency`: per-request latency in a histogram, summarized as percentiles.
//! * `obeying`: simulated clients that obey the tracker's intervals and back off as
//!   libtorrent does (the offered load follows what the tracker says).
//! * `popularity`: drawing torrents by a power-law popularity in O(1).
//! * `population`: the simulated torrents and peers of a run, the same every run.
//! * `report`: sampling counters every second, progress lines, and the summary of
//!   the last seconds of a run.
//! * `run`: workers on pinned threads, progress and the summary: the run loop.
//! * `schedule`: fixed-rate sending, with a bound on catching up.
//! * `summary`: the final summary, as text and JSON from one list of figures.
//! * `tls`: a TLS client config that accepts self-signed certificates.

mod cli;
mod config;
mod latency;
mod obeying;
mod popularity;
mod population;
mod report;
mod run;
mod schedule;
mod summary;
mod tls;

#[doc(hidden)]
pub use cli::validate_schedule;
pub use cli::{LoadTester, main};
pub use latency::{LatencyRecorder, LatencySummary};
pub use obeying::{ClientsConfig, MIN_TIMEOUT, Obeying, ObeyingSettings, Outcomes};
pub use population::{PeerPicker, Population, PopulationShape};
pub use report::ReportSchedule;
pub use run::{RunShape, RunSummary, run_workers};
pub use schedule::{Due, FixedRate};
pub use summary::{Figure, Summary, SummaryFormat, Unit};
pub use tls::{client_config, is_valid_server_name, own_sessions};
