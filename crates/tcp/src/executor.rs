//! glommio executors for socket workers, and their accept loops.
//!
//! shoal's executors never spin before parking (glommio's default), so a socket
//! worker and a swarm worker can share a core without burning it.

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd as _, IntoRawFd as _};
use std::time::{Duration, Instant};

use futures_lite::{AsyncWrite, AsyncWriteExt as _};

use glommio::net::{TcpListener, TcpStream};
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

/// Accepts connections on `listener` for ever, handing each to `on_accept`. Must run
/// inside a glommio executor.
pub(crate) async fn accept_connections(
    listener: std::net::TcpListener,
    mut on_accept: impl FnMut(TcpStream, SocketAddr),
) {
    // SAFETY: the descriptor comes from a listening std socket we own and give up.
    let listener = unsafe { TcpListener::from_raw_fd(listener.into_raw_fd()) };
    // Out of descriptors, this fails every 50 ms until some close: logged once a
    // minute, with how many more there were.
    let mut failures = shoal_common::LogBudget::new(1, Duration::from_secs(60));
    loop {
        match listener.accept().await {
            Ok(stream) => {
                if let Ok(peer) = stream.peer_addr() {
                    on_accept(stream, peer);
                }
            }
            Err(err) => {
                // EMFILE and friends: back off briefly instead of spinning.
                if let Some(unlogged) = failures.take(Instant::now()) {
                    log::warn!("accept failed: {err}{}", shoal_common::left_out(unlogged));
                }
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Runs `future` for at most `limit`; `None` if the time ran out first.
pub async fn within<T>(limit: Duration, future: impl Future<Output = T>) -> Option<T> {
    futures_lite::future::or(async { Some(future.await) }, async {
        glommio::timer::sleep(limit).await;
        None
    })
    .await
}

/// Runs `future` until `deadline` at the latest; `None` if it came first.
pub async fn before<T>(deadline: Instant, future: impl Future<Output = T>) -> Option<T> {
    within(deadline.saturating_duration_since(Instant::now()), future).await
}

/// Writes and flushes `bytes` before `deadline`; false if that failed.
pub async fn write_all_before<S: AsyncWrite + Unpin>(
    stream: &mut S,
    bytes: &[u8],
    deadline: Instant,
) -> bool {
    let write = async {
        stream.write_all(bytes).await?;
        stream.flush().await
    };
    matches!(before(deadline, write).await, Some(Ok(())))
}
