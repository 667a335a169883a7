//! What every running tracker has: its addresses, its workers and the way to stop it.
//!
//! Each daemon's `RunningTracker` wraps a [`Running`] and adds what is its own (clock,
//! statistics, TLS). Dropping a [`Running`] shuts its workers down and waits for them,
//! so a test that drops its tracker leaves no thread behind.

use std::net::SocketAddr;
use std::sync::Arc;

use shoal_common::{AccessControl, Shutdown, Supervisor};
use shoal_private::Accounts;
use shoal_worker::{AnnounceInterval, Exporter};

/// A tracker whose sockets are bound and whose workers run.
#[derive(Debug)]
pub struct Running {
    addrs: Vec<SocketAddr>,
    shutdown: Shutdown,
    supervisor: Option<Supervisor>,
    access: Arc<AccessControl>,
    /// Private mode's accounting: its last batch is written once the workers have
    /// stopped, before the process may exit, and then exported.
    accounts: Option<Arc<Accounts>>,
    exporter: Option<Arc<Exporter>>,
    /// The announce interval it gives now.
    interval: Option<Arc<AnnounceInterval>>,
}

impl Running {
    /// Wraps a started tracker.
    pub fn new(addrs: Vec<SocketAddr>, supervisor: Supervisor, access: Arc<AccessControl>) -> Self {
        Self {
            addrs,
            shutdown: supervisor.shutdown().clone(),
            supervisor: Some(supervisor),
            access,
            accounts: None,
            exporter: None,
            interval: None,
        }
    }

    /// With the announce interval it gives (shown in /metrics and /stats).
    pub fn with_interval(mut self, interval: Arc<AnnounceInterval>) -> Self {
        self.interval = Some(interval);
        self
    }

    /// The announce interval it gives now.
    pub fn interval(&self) -> Option<&Arc<AnnounceInterval>> {
        self.interval.as_ref()
    }

    /// With private mode's accounting and its exporter, finished after the workers
    /// (the exporter last, so that it tries to send the last batch).
    pub fn with_accounting(
        mut self,
        accounts: Option<Arc<Accounts>>,
        exporter: Option<Arc<Exporter>>,
    ) -> Self {
        self.accounts = accounts;
        self.exporter = exporter;
        self
    }

    /// Private mode's accounting, when it is on.
    pub fn accounts(&self) -> Option<&Arc<Accounts>> {
        self.accounts.as_ref()
    }

    /// The exporter of the accounting batches, when it is on.
    pub fn exporter(&self) -> Option<&Arc<Exporter>> {
        self.exporter.as_ref()
    }

    fn finish_accounts(&self) {
        if let Some(accounts) = &self.accounts {
            accounts.finish();
        }
        if let Some(exporter) = &self.exporter {
            exporter.finish();
        }
    }

    /// The bound addresses (port 0 in the config is resolved here), IPv4 first.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// The access list, for reloading.
    pub fn access_control(&self) -> &Arc<AccessControl> {
        &self.access
    }

    /// The shutdown flag.
    pub fn shutdown_handle(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Blocks until shutdown is requested or a worker fails.
    pub fn wait(mut self) -> anyhow::Result<()> {
        let stopped = self
            .supervisor
            .take()
            .expect("supervisor present until waited on")
            .wait();
        self.finish_accounts();
        stopped
    }

    /// Requests shutdown and waits for the workers.
    pub fn stop(self) -> anyhow::Result<()> {
        self.shutdown.request();
        self.wait()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.request();
        if let Some(supervisor) = self.supervisor.take() {
            let _ = supervisor.wait();
        }
        self.finish_accounts();
    }
}
