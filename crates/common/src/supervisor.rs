//! Worker threads that cannot fail silently.
//!
//! Every worker runs on a named thread started by a [`Supervisor`]. When a worker
//! returns or panics, the supervisor hears of it at once. Outside a shutdown that is
//! fatal: the supervisor requests shutdown of the others and [`Supervisor::wait`]
//! returns an error naming the worker, so the process exits non-zero and systemd can
//! restart it, instead of running on with a dead shard.
//!
//! A shutdown (SIGTERM, SIGINT, or a test dropping its tracker) sets a flag workers
//! check at least every [`Shutdown::POLL_INTERVAL`]; the supervisor then gives them
//! [`Supervisor::GRACE`] to finish.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use crossbeam_channel::{Receiver, Sender};

type Hook = Box<dyn Fn() + Send + Sync>;

/// A process-wide "stop now" flag with hooks to wake sleeping threads.
#[derive(Clone)]
pub struct Shutdown {
    inner: Arc<ShutdownInner>,
}

struct ShutdownInner {
    requested: AtomicBool,
    hooks: Mutex<Vec<Hook>>,
}

impl std::fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shutdown")
            .field("requested", &self.is_requested())
            .finish()
    }
}

impl Shutdown {
    /// The longest a worker may go without checking [`is_requested`](Self::is_requested).
    pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

    /// A flag that is not set.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(ShutdownInner {
                requested: AtomicBool::new(false),
                hooks: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Sets the flag and runs the wake-up hooks.
    pub fn request(&self) {
        if !self.inner.requested.swap(true, Ordering::SeqCst) {
            for hook in self.inner.hooks.lock().expect("hooks lock").iter() {
                hook();
            }
        }
    }

    /// Whether shutdown was requested.
    pub fn is_requested(&self) -> bool {
        self.inner.requested.load(Ordering::Relaxed)
    }

    /// Runs `hook` when shutdown is requested (at once if it already was), e.g. to wake
    /// a thread blocked in `poll`.
    pub fn on_request(&self, hook: impl Fn() + Send + Sync + 'static) {
        let mut hooks = self.inner.hooks.lock().expect("hooks lock");
        if self.is_requested() {
            hook();
        }
        hooks.push(Box::new(hook));
    }
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

enum Event {
    Exited {
        name: String,
        outcome: Result<(), String>,
    },
    ShutdownRequested,
}

/// Starts named worker threads and watches them.
#[derive(Debug)]
pub struct Supervisor {
    shutdown: Shutdown,
    events: Sender<Event>,
    receiver: Receiver<Event>,
    /// Each worker's name, thread and how long it may take to finish after shutdown.
    workers: Vec<(String, JoinHandle<()>, Duration)>,
    /// What every thread's name starts with (the tracker's name), if anything.
    prefix: Option<String>,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exited { name, .. } => write!(f, "Exited({name})"),
            Self::ShutdownRequested => write!(f, "ShutdownRequested"),
        }
    }
}

impl Supervisor {
    /// How long workers get to finish after shutdown is requested.
    pub const GRACE: Duration = Duration::from_secs(2);

    /// A supervisor that stops waiting when `shutdown` is requested.
    pub fn new(shutdown: Shutdown) -> Self {
        let (events, receiver) = crossbeam_channel::unbounded();
        let wake = events.clone();
        shutdown.on_request(move || {
            let _ = wake.send(Event::ShutdownRequested);
        });
        Self {
            shutdown,
            events,
            receiver,
            workers: Vec::new(),
            prefix: None,
        }
    }

    /// The same supervisor, naming every thread it starts `<prefix>-<name>`: in the
    /// combined process each tracker's threads (and so its log lines, which show the
    /// thread) are told apart, `http-socket-0` from `ws-socket-0`.
    #[must_use]
    pub fn named(mut self, prefix: &str) -> Self {
        self.prefix = Some(prefix.to_owned());
        self
    }

    /// The shutdown flag the workers should watch.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Starts `work` on a thread called `name`; it gets [`GRACE`](Self::GRACE) to
    /// finish after shutdown.
    pub fn spawn(
        &mut self,
        name: impl Into<String>,
        work: impl FnOnce() -> anyhow::Result<()> + Send + 'static,
    ) -> anyhow::Result<()> {
        self.spawn_with_grace(name, Self::GRACE, work)
    }

    /// Starts `work` on a thread called `name`, which may take up to `grace` to finish
    /// after shutdown (writing a last snapshot of millions of peers takes seconds). The
    /// others do not wait for it longer than their own grace once they are done.
    pub fn spawn_with_grace(
        &mut self,
        name: impl Into<String>,
        grace: Duration,
        work: impl FnOnce() -> anyhow::Result<()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let name = match &self.prefix {
            Some(prefix) => format!("{prefix}-{}", name.into()),
            None => name.into(),
        };
        let events = self.events.clone();
        let thread_name = name.clone();
        let handle = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let outcome = match catch_unwind(AssertUnwindSafe(work)) {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(err)) => Err(format!("failed: {err:#}")),
                    Err(panic) => Err(format!("panicked: {}", panic_message(&*panic))),
                };
                let _ = events.send(Event::Exited {
                    name: thread_name,
                    outcome,
                });
            })
            .with_context(|| format!("cannot start thread {name}"))?;
        self.workers.push((name, handle, grace));
        Ok(())
    }

    /// Blocks until shutdown is requested (then lets workers finish and returns `Ok`)
    /// or a worker stops on its own (then stops the rest and returns an error).
    pub fn wait(mut self) -> anyhow::Result<()> {
        let mut running = self.workers.len();
        let failure = loop {
            if running == 0 {
                break (!self.shutdown.is_requested()).then(|| "all workers exited".to_string());
            }
            match self.receiver.recv().expect("the supervisor holds a sender") {
                Event::ShutdownRequested => break None,
                Event::Exited { name, outcome } => {
                    running -= 1;
                    if self.shutdown.is_requested() {
                        continue;
                    }
                    let how = match outcome {
                        Ok(()) => "exited unexpectedly".to_string(),
                        Err(reason) => reason,
                    };
                    break Some(format!("worker {name} {how}"));
                }
            }
        };
        if let Some(failure) = &failure {
            log::error!("{failure}; shutting down");
        }
        self.shutdown.request();
        self.finish(running);
        match failure {
            Some(failure) => Err(anyhow::anyhow!(failure)),
            None => Ok(()),
        }
    }

    /// Waits for `running` workers to report, each up to its grace from now, then
    /// joins those that did.
    fn finish(&mut self, mut running: usize) {
        let started = Instant::now();
        let mut reported = Vec::new();
        while running > 0 {
            // As long as the most patient worker still running may take.
            let grace = self
                .workers
                .iter()
                .filter(|(name, handle, _)| !handle.is_finished() && !reported.contains(name))
                .map(|(.., grace)| *grace)
                .max()
                .unwrap_or_default();
            match self.receiver.recv_deadline(started + grace) {
                Ok(Event::Exited { name, outcome }) => {
                    if let Err(reason) = outcome {
                        log::warn!("worker {name} {reason} during shutdown");
                    }
                    reported.push(name);
                    running -= 1;
                }
                Ok(Event::ShutdownRequested) => {}
                Err(_) => break,
            }
        }
        for (name, handle, grace) in self.workers.drain(..) {
            // A worker that reported its exit is returning from its thread: join it
            // (`is_finished` can still be false for a moment after the report).
            if handle.is_finished() || reported.contains(&name) {
                let _ = handle.join();
            } else {
                log::warn!("worker {name} did not stop within {grace:?}");
            }
        }
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait_for_shutdown(shutdown: Shutdown) -> impl FnOnce() -> anyhow::Result<()> {
        move || {
            while !shutdown.is_requested() {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(())
        }
    }

    #[test]
    fn a_panicking_worker_stops_everything_with_an_error() {
        let mut supervisor = Supervisor::new(Shutdown::new());
        let shutdown = supervisor.shutdown().clone();
        supervisor
            .spawn("steady", wait_for_shutdown(shutdown.clone()))
            .unwrap();
        supervisor.spawn("fragile", || panic!("boom")).unwrap();
        let err = supervisor.wait().unwrap_err();
        assert_eq!(err.to_string(), "worker fragile panicked: boom");
        assert!(
            shutdown.is_requested(),
            "the other workers are told to stop"
        );
    }

    #[test]
    fn a_worker_returning_early_is_an_error() {
        let mut supervisor = Supervisor::new(Shutdown::new());
        supervisor.spawn("quitter", || Ok(())).unwrap();
        let err = supervisor.wait().unwrap_err();
        assert_eq!(err.to_string(), "worker quitter exited unexpectedly");

        let mut supervisor = Supervisor::new(Shutdown::new());
        supervisor
            .spawn("failing", || Err(anyhow::anyhow!("disk full")))
            .unwrap();
        let err = supervisor.wait().unwrap_err();
        assert_eq!(err.to_string(), "worker failing failed: disk full");
    }

    #[test]
    fn shutdown_is_clean_and_quick() {
        let shutdown = Shutdown::new();
        let mut supervisor = Supervisor::new(shutdown.clone());
        for i in 0..3 {
            supervisor
                .spawn(format!("worker-{i}"), wait_for_shutdown(shutdown.clone()))
                .unwrap();
        }
        let requester = shutdown.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            requester.request();
        });
        let started = Instant::now();
        supervisor.wait().unwrap();
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_worker_with_a_longer_grace_is_waited_for_and_a_stuck_one_is_not() {
        let shutdown = Shutdown::new();
        let mut supervisor = Supervisor::new(shutdown.clone());
        // A writer that needs 2.5 s after shutdown (past the usual grace) to finish.
        let (done, finished) = crossbeam_channel::bounded(1);
        let writer_shutdown = shutdown.clone();
        supervisor
            .spawn_with_grace("writer", Duration::from_secs(10), move || {
                wait_for_shutdown(writer_shutdown)()?;
                std::thread::sleep(Duration::from_millis(2500));
                done.send(()).unwrap();
                Ok(())
            })
            .unwrap();
        shutdown.request();
        let started = Instant::now();
        supervisor.wait().unwrap();
        assert!(finished.try_recv().is_ok(), "the writer finished its work");
        assert!(started.elapsed() >= Duration::from_millis(2500));

        // A stuck worker with the usual grace costs its grace, not the writer's.
        let shutdown = Shutdown::new();
        let mut supervisor = Supervisor::new(shutdown.clone());
        let writer_shutdown = shutdown.clone();
        supervisor
            .spawn_with_grace(
                "writer",
                Duration::from_secs(10),
                wait_for_shutdown(writer_shutdown),
            )
            .unwrap();
        supervisor
            .spawn("stuck", || {
                std::thread::sleep(Duration::from_secs(4));
                Ok(())
            })
            .unwrap();
        shutdown.request();
        let started = Instant::now();
        supervisor.wait().unwrap();
        let took = started.elapsed();
        assert!(
            took >= Supervisor::GRACE && took < Duration::from_millis(3500),
            "{took:?}"
        );
    }

    #[test]
    fn hooks_run_once_even_if_registered_late() {
        let shutdown = Shutdown::new();
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = count.clone();
        shutdown.on_request(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        shutdown.request();
        shutdown.request();
        let counter = count.clone();
        shutdown.on_request(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(count.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn threads_are_named() {
        let mut supervisor = Supervisor::new(Shutdown::new());
        let (tx, rx) = crossbeam_channel::bounded(1);
        supervisor
            .spawn("named-worker", move || {
                tx.send(std::thread::current().name().map(str::to_string))
                    .unwrap();
                Ok(())
            })
            .unwrap();
        assert_eq!(rx.recv().unwrap().as_deref(), Some("named-worker"));
        let _ = supervisor.wait();
    }

    #[test]
    fn a_named_supervisor_prefixes_its_threads() {
        let mut supervisor = Supervisor::new(Shutdown::new()).named("http");
        let (send, names) = std::sync::mpsc::channel();
        supervisor
            .spawn("socket-0", move || {
                send.send(std::thread::current().name().map(str::to_owned))
                    .unwrap();
                Ok(())
            })
            .unwrap();
        assert_eq!(names.recv().unwrap().as_deref(), Some("http-socket-0"));
        supervisor.shutdown().request();
        supervisor.wait().unwrap();
    }
}
