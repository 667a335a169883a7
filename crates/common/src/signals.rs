//! Signal handling: SIGTERM and SIGINT request shutdown, SIGUSR1 and SIGHUP reload.
//!
//! SIGHUP reloads too because that is what `kill -HUP` means to a daemon: left to its
//! default action it would end the process, and systemd's `Restart=on-failure` does
//! not restart a service that a SIGHUP ended.
//!
//! Signals are received on a dedicated thread (signal-hook's self-pipe iterator), so
//! the reload work (reading files, parsing) runs there and never in a signal handler
//! or on a worker. A second SIGTERM/SIGINT while shutting down exits at once, for the
//! operator who pressed Ctrl-C twice.
//!
//! A binary starts the thread before anything else ([`SignalThread::start`]) and adds
//! what SIGUSR1 reloads once the tracker is up: a SIGUSR1 sent while it starts (a
//! `systemctl reload` right after `start`) is logged and ignored instead of killing
//! the process with the signal's default action, and a SIGTERM then stops it as soon
//! as it is up.

use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

use crate::supervisor::Shutdown;

/// Something to run on SIGUSR1: reload an access list, TLS certificates… It returns
/// what it did in a few words ("udp access list: 3 info hashes"), for the status line
/// `systemctl status` shows, or `None` when it had nothing to do (a list turned off).
pub type ReloadHook = Box<dyn Fn() -> Option<String> + Send>;

/// The running signal thread; [`add_reloads`](Self::add_reloads) tells it what
/// SIGUSR1 reloads.
#[derive(Clone)]
pub struct SignalThread {
    reloads: Arc<Mutex<Vec<ReloadHook>>>,
}

impl std::fmt::Debug for SignalThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignalThread").finish_non_exhaustive()
    }
}

impl SignalThread {
    /// Installs the handlers and starts the thread: from now on SIGTERM/SIGINT request
    /// `shutdown`, and SIGUSR1 runs the reloads added so far.
    pub fn start(shutdown: Shutdown) -> anyhow::Result<Self> {
        let thread = Self {
            reloads: Arc::new(Mutex::new(Vec::new())),
        };
        spawn(shutdown, thread.reloads.clone())?;
        Ok(thread)
    }

    /// Adds what SIGUSR1 reloads.
    pub fn add_reloads(&self, hooks: Vec<ReloadHook>) {
        self.reloads.lock().expect("reloads lock").extend(hooks);
    }
}

/// Starts the signal thread with a fixed set of reloads (load testers: none).
pub fn spawn_signal_thread(
    shutdown: Shutdown,
    reload_hooks: Vec<ReloadHook>,
) -> anyhow::Result<()> {
    SignalThread::start(shutdown)?.add_reloads(reload_hooks);
    Ok(())
}

fn spawn(shutdown: Shutdown, reloads: Arc<Mutex<Vec<ReloadHook>>>) -> anyhow::Result<()> {
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGUSR1, SIGHUP])
        .context("cannot install signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                match signal {
                    SIGUSR1 | SIGHUP => {
                        let name = if signal == SIGHUP {
                            "SIGHUP"
                        } else {
                            "SIGUSR1"
                        };
                        let reloads = reloads.lock().expect("reloads lock");
                        if reloads.is_empty() {
                            log::info!("{name}: nothing to reload (yet)");
                            continue;
                        }
                        log::info!("{name}: reloading");
                        crate::notify::notify_reloading();
                        let done: Vec<String> = reloads.iter().filter_map(|hook| hook()).collect();
                        crate::notify::notify_reloaded(&done);
                    }
                    _ if shutdown.is_requested() => {
                        log::warn!("second termination signal: exiting now");
                        std::process::exit(1);
                    }
                    _ => {
                        let name = if signal == SIGINT {
                            "SIGINT"
                        } else {
                            "SIGTERM"
                        };
                        log::info!("{name}: shutting down");
                        shutdown.request();
                    }
                }
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
}
