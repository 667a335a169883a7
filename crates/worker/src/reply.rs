//! Replies from swarm workers back to a socket worker, with a wake-up only when the
//! socket worker sleeps.
//!
//! Each socket worker has one bounded channel that every swarm worker sends into, and
//! a [`Wake`]: before it waits (in `epoll`, or in io_uring), the socket worker says so
//! and then checks the channel a last time; a sender that finds it waiting wakes it
//! (one eventfd or socket-pair write). Under load the socket worker never sleeps, so a
//! reply costs its sender no system call at all.
//!
//! The channel is sized by the caller to hold every batch the socket worker can have
//! in flight, so a swarm worker waits for room only while a socket worker is slow to
//! drain it, and gives up once the tracker shuts down.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, SendTimeoutError, Sender};
use shoal_common::Shutdown;

/// A socket worker's "I am about to sleep" flag and the way to wake it.
pub struct Wake {
    sleeping: AtomicBool,
    notify: Box<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wake")
            .field("sleeping", &self.sleeping.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Wake {
    /// A wake-up that runs `notify` (write an eventfd, a socket pair…).
    pub fn new(notify: impl Fn() + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            sleeping: AtomicBool::new(false),
            notify: Box::new(notify),
        })
    }

    /// The socket worker is about to wait. It must check its channel once more after
    /// this: a reply sent before the flag was set did not wake it.
    pub fn going_to_sleep(&self) {
        self.sleeping.store(true, Ordering::SeqCst);
    }

    /// The socket worker is running again.
    pub fn awake(&self) {
        self.sleeping.store(false, Ordering::SeqCst);
    }

    /// Wakes the socket worker if it said it was going to sleep.
    pub fn wake_if_sleeping(&self) {
        if self.sleeping.swap(false, Ordering::SeqCst) {
            (self.notify)();
        }
    }
}

/// The sending side of a socket worker's reply channel, cloned into every swarm worker.
#[derive(Debug)]
pub struct ReplyRoute<T> {
    sender: Sender<T>,
    wake: Arc<Wake>,
}

impl<T> Clone for ReplyRoute<T> {
    fn clone(&self) -> Self {
        Self {
            sender: self.sender.clone(),
            wake: self.wake.clone(),
        }
    }
}

impl<T> ReplyRoute<T> {
    /// Sends a reply and wakes the socket worker if it sleeps. While the channel is
    /// full it waits for room, but gives up (dropping the reply) once `shutdown` is
    /// requested or the socket worker is gone; returns whether the reply went.
    pub fn send(&self, mut reply: T, shutdown: &Shutdown) -> bool {
        loop {
            match self.sender.send_timeout(reply, Duration::from_millis(50)) {
                Ok(()) => {
                    self.wake.wake_if_sleeping();
                    return true;
                }
                Err(SendTimeoutError::Timeout(returned)) if !shutdown.is_requested() => {
                    reply = returned;
                }
                Err(_) => return false,
            }
        }
    }
}

/// A reply channel holding at most `capacity` messages, waking its receiver through
/// `wake`.
pub fn reply_channel<T>(capacity: usize, wake: Arc<Wake>) -> (ReplyRoute<T>, Receiver<T>) {
    let (sender, receiver) = crossbeam_channel::bounded(capacity);
    (ReplyRoute { sender, wake }, receiver)
}

/// The reply channel capacity that holds every batch one socket worker can have in
/// flight to `swarm_workers` queues of `queue_len` batches (plus room for the
/// messages a swarm worker sends on its own, such as WebTorrent offers).
pub fn reply_capacity(swarm_workers: usize, queue_len: usize) -> usize {
    swarm_workers * (queue_len + 1) + 64
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn a_sleeping_receiver_is_woken_once_and_a_busy_one_not_at_all() {
        let woken = Arc::new(AtomicUsize::new(0));
        let counter = woken.clone();
        let wake = Wake::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        let (route, inbox) = reply_channel::<u32>(4, wake.clone());
        let shutdown = Shutdown::new();
        assert!(route.send(1, &shutdown));
        assert_eq!(woken.load(Ordering::SeqCst), 0, "busy: no wake-up");
        wake.going_to_sleep();
        assert!(route.send(2, &shutdown));
        assert!(route.send(3, &shutdown));
        assert_eq!(woken.load(Ordering::SeqCst), 1, "one wake-up per sleep");
        assert_eq!(inbox.try_iter().collect::<Vec<_>>(), vec![1, 2, 3]);
    }

    #[test]
    fn a_full_channel_gives_up_at_shutdown() {
        let (route, _inbox) = reply_channel::<u32>(1, Wake::new(|| {}));
        let shutdown = Shutdown::new();
        assert!(route.send(1, &shutdown));
        shutdown.request();
        assert!(!route.send(2, &shutdown), "full, and shutting down");
    }
}
