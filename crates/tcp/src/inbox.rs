//! The receiving end of a reply channel inside a socket worker's executor (the HTTP
//! and WebTorrent socket workers, on either backend).
//!
//! A pump task drains the channel and, before it waits, says so ([`Wake`]) and checks
//! the channel once more; a swarm worker that then sends writes one byte to a socket
//! pair, which the executor (io_uring or epoll) reports to the pump like any other
//! read.

use std::io::Write as _;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;

use anyhow::Context as _;
use crossbeam_channel::Receiver;
use futures_lite::AsyncReadExt as _;

use shoal_worker::{ReplyRoute, Wake, reply_channel};

/// A socket worker's reply channel as its pump task sees it.
#[derive(Debug)]
pub(crate) struct ReplyInbox<T> {
    receiver: Receiver<T>,
    wake_reader: StdUnixStream,
    wake: Arc<Wake>,
}

/// A reply channel of `capacity` messages whose receiver runs in a socket worker's
/// executor.
pub(crate) fn executor_reply_channel<T>(
    capacity: usize,
) -> anyhow::Result<(ReplyRoute<T>, ReplyInbox<T>)> {
    let (wake_reader, writer) =
        StdUnixStream::pair().context("cannot create a wake-up socket pair")?;
    writer
        .set_nonblocking(true)
        .context("cannot make the wake-up socket non-blocking")?;
    let wake = Wake::new(move || {
        let _ = (&writer).write(&[1]);
    });
    let (route, receiver) = reply_channel(capacity, wake.clone());
    Ok((
        route,
        ReplyInbox {
            receiver,
            wake_reader,
            wake,
        },
    ))
}

impl<T> ReplyInbox<T> {
    /// The task that hands every message to `deliver` as it arrives, until every
    /// sender is gone. Must be called inside a socket worker's executor, which then
    /// runs the task.
    pub(crate) fn pump(
        self,
        mut deliver: impl FnMut(T),
    ) -> std::io::Result<impl std::future::Future<Output = ()>> {
        let mut wake_reader = crate::backend::readable(self.wake_reader)?;
        let (receiver, wake) = (self.receiver, self.wake);
        Ok(async move {
            let mut scratch = [0u8; 64];
            loop {
                while let Ok(message) = receiver.try_recv() {
                    deliver(message);
                }
                wake.going_to_sleep();
                // A message sent after the loop above finds the flag set and writes a
                // byte.
                if !receiver.is_empty() {
                    wake.awake();
                    continue;
                }
                match wake_reader.read(&mut scratch).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
    }
}
