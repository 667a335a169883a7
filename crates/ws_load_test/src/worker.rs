//! A load worker: one thread, one epoll instance, many connections.
//!
//! Each slot is one simulated browser and at most one connection. A connection that
//! ends, however it ends, is counted and its slot reconnects after a delay: the
//! configured one after an open connection ended, doubling with each failed attempt
//! in a row (up to 64 times, and never over 10 seconds), so that a tracker refusing
//! connections is not hammered and the loop never spins. Connections open at most
//! [`OPENS_PER_TICK`] per tick, so a run with thousands of connections ramps up
//! instead of flooding the tracker's accept queue.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use rustls::pki_types::ServerName;
use shoal_common::Shutdown;
use shoal_load_test_common::LatencyRecorder;
use shoal_load_test_common::Population;

use crate::config::Config;
use crate::connection::{Connection, Ended, Settings, Shared};
use crate::messages::{Client, MessageWriter};
use crate::stats::{Counters, SharedCounters};
use crate::transport::TlsClient;

/// Connections opened per worker per tick at most.
pub(crate) const OPENS_PER_TICK: usize = 100;
/// The longest wait before reconnecting.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(10);

struct Slot {
    client: Client,
    /// Its TLS client, with a session store of its own, as each browser has.
    tls: Option<TlsClient>,
    connection: Option<Box<Connection>>,
    /// When to open the next connection (while there is none).
    reconnect_at: Instant,
    /// Failed attempts in a row.
    failures: u32,
}

/// One worker thread's state.
pub(crate) struct Worker {
    poll: Poll,
    slots: Vec<Slot>,
    shared: Shared,
    counters: Arc<SharedCounters>,
    shutdown: Shutdown,
    server: SocketAddr,
    reconnect_delay: Duration,
    tick: Duration,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("slots", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// Worker `index`, with the `index`-th `config.connections_per_worker`
    /// connections (and browsers); peer ids are numbered from `id_base`.
    pub(crate) fn new(
        index: usize,
        id_base: usize,
        config: &Config,
        population: Arc<Population>,
        counters: Arc<SharedCounters>,
        latency: LatencyRecorder,
        shutdown: Shutdown,
    ) -> anyhow::Result<Self> {
        let tls = if config.network.tls {
            let name = ServerName::try_from(config.network.tls_server_name.clone())
                .context("network.tls_server_name is not a valid server name")?;
            Some((shoal_load_test_common::client_config(), name))
        } else {
            None
        };
        let per_worker = config.connections_per_worker;
        let torrents = config.requests.torrents_per_connection;
        let now = Instant::now();
        let slots = (index * per_worker..(index + 1) * per_worker)
            .map(|connection| Slot {
                client: Client::new(connection, torrents, id_base),
                tls: tls.as_ref().map(|(base, name)| {
                    (
                        shoal_load_test_common::own_sessions(base, config.network.tls_resumption),
                        name.clone(),
                    )
                }),
                connection: None,
                reconnect_at: now,
                failures: 0,
            })
            .collect();
        let settings = Settings::new(config);
        // Fixed-rate sends are checked every tick: keep them close to schedule.
        let tick = match config.send_period() {
            Some(_) => Duration::from_millis(2),
            None => Duration::from_millis(20),
        };
        Ok(Self {
            poll: Poll::new().context("cannot create epoll instance")?,
            slots,
            shared: Shared {
                writer: MessageWriter::new(config, index),
                population,
                counters: Counters::default(),
                latency,
                settings,
            },
            counters,
            shutdown,
            server: config.server_address,
            reconnect_delay: Duration::from_millis(config.network.reconnect_delay_ms),
            tick,
        })
    }

    /// Runs until shutdown.
    pub(crate) fn run(mut self) -> anyhow::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut next_tick = Instant::now();
        while !self.shutdown.is_requested() {
            let now = Instant::now();
            if now >= next_tick {
                self.on_tick(now);
                next_tick = now + self.tick;
            }
            match self
                .poll
                .poll(&mut events, Some(next_tick.saturating_duration_since(now)))
            {
                Ok(()) => {}
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(err) => return Err(err).context("epoll failed"),
            }
            let now = Instant::now();
            for event in &events {
                self.on_event(event.token().0, now);
            }
            self.shared.counters.flush_into(&self.counters);
        }
        Ok(())
    }

    fn on_event(&mut self, index: usize, now: Instant) {
        let slot = &mut self.slots[index];
        let Some(connection) = &mut slot.connection else {
            return;
        };
        if let Err(ended) = connection.service(&mut slot.client, &mut self.shared, now) {
            self.end(index, ended, now);
        }
    }

    /// Opens missing connections, checks timeouts, sends fixed-rate requests.
    fn on_tick(&mut self, now: Instant) {
        let mut opened = 0;
        for index in 0..self.slots.len() {
            let slot = &mut self.slots[index];
            match &mut slot.connection {
                Some(connection) => {
                    if let Err(ended) = connection.tick(&mut slot.client, &mut self.shared, now) {
                        self.end(index, ended, now);
                    }
                }
                None if slot.reconnect_at <= now && opened < OPENS_PER_TICK => {
                    opened += 1;
                    self.open(index, now);
                }
                None => {}
            }
        }
    }

    fn open(&mut self, index: usize, now: Instant) {
        let tls = self.slots[index].tls.as_ref();
        let connection = TcpStream::connect(self.server)
            .ok()
            .and_then(|socket| {
                let _ = socket.set_nodelay(true);
                Connection::new(socket, tls, &self.shared.settings, now).ok()
            })
            .and_then(|mut connection| {
                self.poll
                    .registry()
                    .register(
                        connection.socket(),
                        Token(index),
                        Interest::READABLE | Interest::WRITABLE,
                    )
                    .ok()
                    .map(|()| Box::new(connection))
            });
        match connection {
            Some(connection) => self.slots[index].connection = Some(connection),
            None => {
                self.shared.counters.connect_failures += 1;
                self.retry_later(index, false, now);
            }
        }
    }

    /// Counts how connection `index` ended, closes it, and schedules the next one.
    fn end(&mut self, index: usize, ended: Ended, now: Instant) {
        let counters = &mut self.shared.counters;
        match ended {
            Ended::Failed => counters.connect_failures += 1,
            Ended::ClosedByServer => counters.closed_by_server += 1,
            Ended::Broken => counters.connection_errors += 1,
            Ended::TimedOut => counters.timeouts += 1,
            Ended::Done => {}
        }
        if let Some(mut connection) = self.slots[index].connection.take() {
            let _ = self.poll.registry().deregister(connection.socket());
        }
        // Only a connection that never opened ends as `Failed`.
        self.retry_later(index, ended != Ended::Failed, now);
        if ended == Ended::Done && self.reconnect_delay.is_zero() {
            // A handshake-rate run: the next connection at once, not at the next tick.
            self.open(index, now);
        }
    }

    /// Schedules slot `index`'s next connection: soon after an open connection
    /// ended, later with each failed attempt in a row.
    fn retry_later(&mut self, index: usize, was_open: bool, now: Instant) {
        let slot = &mut self.slots[index];
        slot.failures = if was_open {
            0
        } else {
            slot.failures.saturating_add(1)
        };
        slot.reconnect_at = now + reconnect_delay(self.reconnect_delay, slot.failures);
    }
}

/// The wait before the next attempt after `failures` failed attempts in a row.
pub(crate) fn reconnect_delay(base: Duration, failures: u32) -> Duration {
    (base * (1 << failures.saturating_sub(1).min(6))).min(MAX_RECONNECT_DELAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnects_back_off_within_bounds() {
        let base = Duration::from_millis(100);
        let delays: Vec<u128> = (0..10)
            .map(|failures| reconnect_delay(base, failures).as_millis())
            .collect();
        assert_eq!(
            delays,
            [100, 100, 200, 400, 800, 1600, 3200, 6400, 6400, 6400]
        );
        assert_eq!(
            reconnect_delay(Duration::from_secs(1), 9),
            MAX_RECONNECT_DELAY
        );
    }
}
