//! The receiving end of a reply channel inside a glommio executor (the HTTP and
//! WebTorrent socket workers).
//!
//! A pump task drains the channel and, before it waits, says so ([`Wake`]) and checks
//! the channel once more; a swarm worker that then sends writes one byte to a socket
//! pair, which io_uring reports to the pump like any other read.

use std::io::Write as _;
use std::os::fd::{FromRawFd as _, IntoRawFd as _};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;

use anyhow::Context as _;
use crossbeam_channel::Receiver;
use futures_lite::AsyncReadExt as _;

use shoal_worker::{ReplyRoute, Wake, reply_channel};

/// A socket worker's reply channel as a glommio task sees it.
#[derive(Debug)]
pub(crate) struct ReplyInbox<T> {
    receiver: Receiver<T>,
    wake_reader: StdUnixStream,
    wake: Arc<Wake>,
}

/// A reply channel of `capacity` messages whose receiver runs in a glommio executor.
pub(crate) fn glommio_reply_channel<T>(
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
    /// Hands every message to `deliver` as it arrives; returns when every sender is
    /// gone. Must run inside a glommio executor.
    pub(crate) async fn pump(self, mut deliver: impl FnMut(T)) {
        // SAFETY: the descriptor comes from a std UnixStream we own and give up.
        let mut wake_reader =
            unsafe { glommio::net::UnixStream::from_raw_fd(self.wake_reader.into_raw_fd()) };
        let mut scratch = [0u8; 64];
        loop {
            while let Ok(message) = self.receiver.try_recv() {
                deliver(message);
            }
            self.wake.going_to_sleep();
            // A message sent after the loop above finds the flag set and writes a byte.
            if !self.receiver.is_empty() {
                self.wake.awake();
                continue;
            }
            match wake_reader.read(&mut scratch).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    }
}
