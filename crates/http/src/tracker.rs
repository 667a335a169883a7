//! Starting the HTTP tracker: what makes it a [`TcpTracker`]; the start-up itself is
//! the TCP trackers' shared one (`shoal_runtime::tcp`).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use futures_lite::{AsyncRead, AsyncWrite};
use shoal_common::metrics::SummaryLine;
use shoal_common::tls::TlsConfig;
use shoal_common::tracker_config::{Config, ReverseProxy as _};
use shoal_runtime::eviction::Place;
use shoal_runtime::state::{self, Snapshot};
use shoal_runtime::tcp::{RunningTcpTracker, TcpSettings, TcpTracker};
use shoal_runtime::{Listening, LocalSwarm, Prepared};
use shoal_swarm::{Clock, Restored, ServerTime};

use crate::config::Http;
use crate::messages::{SwarmReply, SwarmRequest};
use crate::shard::HttpShard;
use crate::socket::connection::{exchange, refuse};
use crate::socket::router::Router;
use crate::socket::{State, Worker};
use crate::stats::{SharedSocketCounters, SocketTotals, summary};

/// A running HTTP tracker; dropping it shuts it down.
pub type RunningTracker = RunningTcpTracker<SharedSocketCounters>;

/// The HTTP tracker as the shared TCP start-up sees it.
#[derive(Debug)]
pub(crate) struct HttpTracker;

impl TcpTracker for HttpTracker {
    type Kind = Http;
    type Shard = HttpShard;
    type Counters = SharedSocketCounters;
    type State = State;

    const NAME: &'static str = "http";

    fn settings(config: &Config<Http>) -> TcpSettings {
        TcpSettings {
            io_memory: config.limits.io_memory,
            swarm_queue_len: config.limits.swarm_queue_len,
            max_connections: config.network.max_connections,
            handshake_timeout: Duration::from_secs(config.network.tls_handshake_timeout.into()),
            max_tls_handshakes: config.network.max_tls_handshakes,
            max_tls_handshakes_per_client: config.network.max_tls_handshakes_per_client,
            connection_buffers: (
                config.network.socket_send_buffer_size,
                config.network.socket_recv_buffer_size,
            ),
        }
    }

    fn shard(config: &Config<Http>) -> HttpShard {
        HttpShard::new(shoal_runtime::shard_map(config), config.cluster.enabled())
    }

    fn restore(
        shard: &mut HttpShard,
        snapshot: &Snapshot,
        now: ServerTime,
        index: usize,
        shards: usize,
    ) -> Restored {
        state::restore_shard(&mut shard.torrents, snapshot, now, index, shards)
    }

    fn finish(worker: &Worker) {
        if let Some(local) = worker.state.router.borrow_mut().link.local() {
            local.finish();
        }
    }

    fn summary() -> SummaryLine<SocketTotals> {
        summary
    }

    fn describe(config: &Config<Http>, tls: bool, addr: SocketAddr) -> Listening {
        let scheme = if tls { "https" } else { "http" };
        let path = &config.protocol.announce_path;
        Listening {
            url: format!("{scheme}://{addr}"),
            note: format!("announce at {scheme}://{addr}{path}"),
        }
    }

    fn state(
        index: usize,
        _: &Config<Http>,
        swarms: Vec<Sender<Vec<SwarmRequest>>>,
        local: Option<LocalSwarm<HttpShard>>,
    ) -> State {
        State {
            router: Rc::new(RefCell::new(Router::new(index, swarms, local))),
            full_scrape: RefCell::default(),
        }
    }

    async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S) {
        refuse(stream).await;
    }

    async fn serve<'w, S: AsyncRead + AsyncWrite + Unpin>(
        worker: &'w Worker,
        stream: S,
        peer: SocketAddr,
        _: Instant,
        place: Place<'w>,
    ) {
        exchange(stream, peer, worker, place).await;
    }

    fn exempt(config: &Config<Http>, peer: std::net::IpAddr) -> bool {
        config.network.proxy_header_from(peer)
    }

    fn deliver(worker: &Worker, replies: Vec<SwarmReply>) {
        worker.state.router.borrow_mut().deliver(replies);
    }

    fn tick(worker: &Worker) {
        let shed = worker
            .state
            .router
            .borrow_mut()
            .link
            .tick(&worker.context.access);
        worker.count(|counters| counters.shed += shed);
    }
}

/// Prepares a tracker on `clock`: checks, loads files and binds; serving starts with
/// `serve` on the result.
pub fn prepare(
    config: crate::Config,
    clock: Arc<Clock>,
) -> anyhow::Result<Prepared<SharedSocketCounters, Option<Arc<TlsConfig>>>> {
    shoal_runtime::tcp::prepare::<HttpTracker>(config, clock)
}

/// Starts a tracker with its own clock.
pub fn start(config: crate::Config) -> anyhow::Result<RunningTracker> {
    start_with_clock(config, Arc::new(Clock::new()))
}

/// Starts a tracker on a given clock (tests share one to move time forward).
pub fn start_with_clock(
    config: crate::Config,
    clock: Arc<Clock>,
) -> anyhow::Result<RunningTracker> {
    shoal_runtime::tcp::start::<HttpTracker>(config, clock)
}
