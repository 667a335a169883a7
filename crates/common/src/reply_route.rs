//! Replies from plain threads (swarm workers) to a glommio executor (a socket worker).
//!
//! A swarm worker sends a batch over the socket worker's bounded channel and then
//! writes one byte to a socket pair, but only when the socket worker's pump has said
//! it is waiting (the `waiting` flag, set before the pump checks the channel a last
//! time). A busy socket worker so costs its swarm workers no system calls, and an idle
//! one is woken by io_uring like any other read.

use std::io::Write as _;
use std::os::fd::{FromRawFd as _, IntoRawFd as _};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::{Receiver, SendTimeoutError, Sender};
use futures_lite::AsyncReadExt as _;

use crate::Shutdown;

#[derive(Debug)]
struct WakeSignal {
    waiting: AtomicBool,
    writer: StdUnixStream,
}

/// The sending side: cloned into every swarm worker.
#[derive(Debug)]
pub struct ReplyRoute<T> {
    sender: Sender<T>,
    wake: Arc<WakeSignal>,
}

impl<T> Clone for ReplyRoute<T> {
    fn clone(&self) -> Self {
        Self {
            sender: self.sender.clone(),
            wake: self.wake.clone(),
        }
    }
}

/// The receiving side, owned by the socket worker; [`ReplyInbox::pump`] runs it.
#[derive(Debug)]
pub struct ReplyInbox<T> {
    receiver: Receiver<T>,
    wake_reader: StdUnixStream,
    wake: Arc<WakeSignal>,
}

/// A reply channel holding at most `capacity` batches.
pub fn reply_channel<T>(capacity: usize) -> anyhow::Result<(ReplyRoute<T>, ReplyInbox<T>)> {
    use anyhow::Context as _;
    let (sender, receiver) = crossbeam_channel::bounded(capacity);
    let (wake_reader, writer) =
        StdUnixStream::pair().context("cannot create a wake-up socket pair")?;
    writer
        .set_nonblocking(true)
        .context("cannot make the wake-up socket non-blocking")?;
    let wake = Arc::new(WakeSignal {
        waiting: AtomicBool::new(false),
        writer,
    });
    Ok((
        ReplyRoute {
            sender,
            wake: wake.clone(),
        },
        ReplyInbox {
            receiver,
            wake_reader,
            wake,
        },
    ))
}

impl<T> ReplyRoute<T> {
    /// Sends a batch and wakes the socket worker if it waits. While the channel is
    /// full it waits for room, but gives up (dropping the batch) once `shutdown` is
    /// requested or the socket worker is gone.
    pub fn send(&self, mut batch: T, shutdown: &Shutdown) {
        loop {
            match self.sender.send_timeout(batch, Duration::from_millis(50)) {
                Ok(()) => {
                    if self.wake.waiting.swap(false, Ordering::SeqCst) {
                        let _ = (&self.wake.writer).write(&[1]);
                    }
                    return;
                }
                Err(SendTimeoutError::Timeout(returned)) if !shutdown.is_requested() => {
                    batch = returned
                }
                Err(_) => return,
            }
        }
    }
}

impl<T> ReplyInbox<T> {
    /// Hands every batch to `deliver` as it arrives; returns when every sender is gone.
    /// Must run inside a glommio executor.
    pub async fn pump(self, mut deliver: impl FnMut(T)) {
        // SAFETY: the descriptor comes from a std UnixStream we own and give up.
        let mut wake_reader =
            unsafe { glommio::net::UnixStream::from_raw_fd(self.wake_reader.into_raw_fd()) };
        let mut scratch = [0u8; 64];
        loop {
            while let Ok(batch) = self.receiver.try_recv() {
                deliver(batch);
            }
            self.wake.waiting.store(true, Ordering::SeqCst);
            // A batch sent after the loop above finds `waiting` set and writes a byte.
            if !self.receiver.is_empty() {
                self.wake.waiting.store(false, Ordering::SeqCst);
                continue;
            }
            match wake_reader.read(&mut scratch).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }
}
