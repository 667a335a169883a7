//! Starting the WebTorrent tracker: what makes it a [`TcpTracker`]; the start-up itself
//! is the TCP trackers' shared one (`shoal_runtime::tcp`).

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use futures_lite::{AsyncRead, AsyncWrite};
use shoal_common::log_budget::LogBudget;
use shoal_common::metrics::SummaryLine;
use shoal_common::tls::TlsConfig;
use shoal_common::tracker_config::{Config, ReverseProxy as _};
use shoal_runtime::eviction::Place;
use shoal_runtime::tcp::{RunningTcpTracker, TcpSettings, TcpTracker};
use shoal_runtime::{Listening, LocalSwarm, Prepared, shard_capacity};
use shoal_swarm::Clock;

use crate::config::Ws;
use crate::messages::{Delivery, SwarmRequest};
use crate::socket::connection::{refuse, serve};
use crate::socket::router::Router;
use crate::socket::{OVERFLOW_LOG_BURST, OVERFLOW_LOG_REFILL, State, Worker};
use crate::stats::{SharedSocketCounters, SocketTotals, summary};
use crate::swarm::{SwarmSettings, Swarms};

/// A running WebTorrent tracker; dropping it shuts it down.
pub type RunningTracker = RunningTcpTracker<SharedSocketCounters>;

/// The WebTorrent tracker as the shared TCP start-up sees it.
#[derive(Debug)]
pub(crate) struct WsTracker;

impl TcpTracker for WsTracker {
    type Kind = Ws;
    type Shard = Swarms;
    type Counters = SharedSocketCounters;
    type State = State;

    const NAME: &'static str = "ws";

    fn settings(config: &Config<Ws>) -> TcpSettings {
        TcpSettings {
            io_memory: config.limits.io_memory,
            swarm_queue_len: config.limits.swarm_queue_len,
            max_connections: config.network.max_connections,
            handshake_timeout: Duration::from_secs(config.network.handshake_timeout.into()),
            max_tls_handshakes: config.network.max_tls_handshakes,
            max_tls_handshakes_per_client: config.network.max_tls_handshakes_per_client,
            connection_buffers: (
                config.network.socket_send_buffer_size,
                config.network.socket_recv_buffer_size,
            ),
        }
    }

    fn shard(config: &Config<Ws>) -> Swarms {
        let settings = SwarmSettings {
            announce_interval: config.protocol.announce_interval,
            peer_timeout: config.cleaning.peer_timeout,
            offer_lifetime: config.protocol.offer_lifetime,
            max_pending_offers: config.protocol.max_pending_offers,
        };
        Swarms::new(settings, shard_capacity(config), rand::make_rng())
    }

    fn summary() -> SummaryLine<SocketTotals> {
        summary
    }

    fn describe(_: &Config<Ws>, tls: bool, addr: SocketAddr) -> Listening {
        let scheme = if tls { "wss" } else { "ws" };
        Listening {
            url: format!("{scheme}://{addr}"),
            note: String::new(),
        }
    }

    fn state(
        index: usize,
        config: &Config<Ws>,
        swarms: Vec<Sender<Vec<SwarmRequest>>>,
        local: Option<LocalSwarm<Swarms>>,
    ) -> State {
        let limits = &config.limits;
        let router = Router::new(
            index,
            swarms,
            local,
            limits.max_outgoing_bytes_per_worker,
            limits.max_incoming_bytes_per_worker,
        );
        State {
            router: Rc::new(RefCell::new(router)),
            overflow_log: RefCell::new(LogBudget::new(OVERFLOW_LOG_BURST, OVERFLOW_LOG_REFILL)),
        }
    }

    async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S) {
        refuse(stream).await;
    }

    fn exempt(config: &Config<Ws>, peer: std::net::IpAddr) -> bool {
        config.network.proxy_header_from(peer)
    }

    async fn serve<'w, S: AsyncRead + AsyncWrite + Unpin>(
        worker: &'w Worker,
        stream: S,
        peer: SocketAddr,
        deadline: Instant,
        place: Place<'w>,
    ) {
        serve(stream, peer, worker, deadline, place).await;
    }

    fn deliver(worker: &Worker, deliveries: Vec<Delivery>) {
        worker.state.router.borrow_mut().deliver(deliveries);
    }

    fn tick(worker: &Worker) {
        let mut router = worker.state.router.borrow_mut();
        // Leave notices a full queue turned back go out again.
        if router.link.has_waiting() {
            router.flush();
        }
        let shed = router.link.tick(&worker.context.access);
        worker.count(|counters| counters.shed += shed);
        worker.counters.borrow_mut().offers_dropped += router.take_offers_dropped();
        // A gauge: set, not added like the counters flushed after this tick.
        worker
            .context
            .stats
            .socket(worker.index)
            .outgoing_bytes
            .store(router.outgoing_bytes() as u64, Ordering::Relaxed);
        worker
            .context
            .stats
            .socket(worker.index)
            .incoming_bytes
            .store(router.incoming_bytes() as u64, Ordering::Relaxed);
    }
}

/// Prepares a tracker on `clock`: checks, loads files and binds; serving starts with
/// `serve` on the result.
pub fn prepare(
    config: crate::Config,
    clock: Arc<Clock>,
) -> anyhow::Result<Prepared<SharedSocketCounters, Option<Arc<TlsConfig>>>> {
    shoal_runtime::tcp::prepare::<WsTracker>(config, clock)
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
    shoal_runtime::tcp::start::<WsTracker>(config, clock)
}
