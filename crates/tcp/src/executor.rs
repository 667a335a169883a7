//! glommio executors for socket workers (the io_uring backend), and sockets handed to
//! them.
//!
//! shoal's executors never spin before parking (glommio's default), so a socket
//! worker and a swarm worker can share a core without burning it.

use std::future::Future;
use std::os::fd::{FromRawFd as _, IntoRawFd as _};

use glommio::net::{TcpListener, UnixStream};
use glommio::{LocalExecutorBuilder, Placement};

/// Runs `work` on a new executor named `name` on the calling thread, pinned to `core`
/// when given, with `io_memory` bytes of (locked) io_uring buffers.
pub(crate) fn run_executor<T>(
    name: &str,
    core: Option<usize>,
    io_memory: usize,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let placement = match core {
        Some(core) => Placement::Fixed(core),
        None => Placement::Unbound,
    };
    let executor = LocalExecutorBuilder::new(placement)
        .name(name)
        .io_memory(io_memory)
        .make()
        .map_err(|err| anyhow::anyhow!("cannot start the io_uring executor: {err}"))?;
    executor.run(work)
}

/// `listener` as glommio's. Must run inside a glommio executor.
pub(crate) fn glommio_listener(listener: std::net::TcpListener) -> TcpListener {
    // SAFETY: the descriptor comes from a listening std socket we own and give up.
    unsafe { TcpListener::from_raw_fd(listener.into_raw_fd()) }
}

/// `stream` as glommio's. Must run inside a glommio executor.
pub(crate) fn glommio_unix_stream(stream: std::os::unix::net::UnixStream) -> UnixStream {
    // SAFETY: the descriptor comes from a std UnixStream we own and give up.
    unsafe { UnixStream::from_raw_fd(stream.into_raw_fd()) }
}
