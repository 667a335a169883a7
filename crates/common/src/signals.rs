//! Signal handling: SIGTERM and SIGINT request shutdown, SIGUSR1 reloads.
//!
//! Signals are received on a dedicated thread (signal-hook's self-pipe iterator), so
//! the reload work (reading files, parsing) runs there and never in a signal handler
//! or on a worker. A second SIGTERM/SIGINT while shutting down exits at once, for the
//! operator who pressed Ctrl-C twice.

use anyhow::Context as _;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
use signal_hook::iterator::Signals;

use crate::supervisor::Shutdown;

/// Something to run on SIGUSR1: reload an access list, TLS certificates…
pub type ReloadHook = Box<dyn Fn() + Send>;

/// Starts the signal thread. Call before starting workers so that a signal arriving
/// during start-up is not lost or fatal.
pub fn spawn_signal_thread(
    shutdown: Shutdown,
    reload_hooks: Vec<ReloadHook>,
) -> anyhow::Result<()> {
    let mut signals =
        Signals::new([SIGTERM, SIGINT, SIGUSR1]).context("cannot install signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                match signal {
                    SIGUSR1 => {
                        log::info!("SIGUSR1: reloading");
                        for hook in &reload_hooks {
                            hook();
                        }
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
