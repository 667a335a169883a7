//! Which executor a TCP socket worker runs on, and the few things its tasks ask of
//! it: spawning, timers, accepting, streams.
//!
//! Two executors can run a socket worker: an epoll executor ([`crate::poll`], the
//! default) and glommio over io_uring (`io_backend = "io_uring"`, or `"auto"` for
//! io_uring where the host allows it). io_uring makes fewer system calls per request,
//! yet every measurement here answered more requests a second on epoll at less CPU
//! each (documents/benchmarks/backends-2026-11-29.md has the profiles), and epoll runs
//! where io_uring cannot be set up: containers under Docker's or containerd's default
//! seccomp profile, `kernel.io_uring_disabled`, a locked-memory limit too low for
//! glommio's registered buffers. The connection tasks are the same code on both: they
//! call [`spawn_local`], [`sleep`], [`within`] and read and write a [`TcpStream`], and
//! each of those asks whichever executor runs the calling thread.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use shoal_common::{IoBackend, LogBudget, left_out};

use crate::memlock::{self, MemlockClaim};
use crate::poll::{self, Async};
use crate::{executor, io_uring};

/// The executor a tracker's socket workers run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// glommio, on io_uring.
    IoUring,
    /// The epoll executor.
    Epoll,
}

impl Backend {
    /// Its name in logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Self::IoUring => "io_uring",
            Self::Epoll => "epoll",
        }
    }
}

/// The backend `wanted` comes to on this host for tracker `name`'s `socket_workers`
/// workers of `io_memory` locked bytes each, with its share of the locked-memory limit
/// when that is io_uring: `auto` takes io_uring when it can be set up and enough
/// memory can be locked for its buffers beside what the process's other trackers
/// hold, else epoll, and logs why; a forced `io_uring` fails with the reason instead.
pub(crate) fn choose(
    wanted: IoBackend,
    name: &str,
    socket_workers: usize,
    io_memory: usize,
) -> anyhow::Result<(Backend, Option<MemlockClaim>)> {
    let io_uring_ready = || -> anyhow::Result<MemlockClaim> {
        io_uring::check_available()?;
        memlock::claim(name, socket_workers, io_memory)
    };
    let chosen = match wanted {
        IoBackend::IoUring => (Backend::IoUring, Some(io_uring_ready()?)),
        IoBackend::Epoll => (Backend::Epoll, None),
        IoBackend::Auto => match io_uring_ready() {
            Ok(claim) => (Backend::IoUring, Some(claim)),
            // Info, not a warning: epoll serves as well (both pass the same tests; in
            // containers it is the deployment guide's choice), and what refused
            // io_uring is the host's normal state, not a fault to fix.
            Err(err) => {
                log::info!(
                    "{name}: serving with epoll, since io_uring cannot be used here: {err:#}"
                );
                return Ok((Backend::Epoll, None));
            }
        },
    };
    log::info!("{name}: socket workers run on {}", chosen.0.name());
    Ok(chosen)
}

/// Runs `work` on a new executor of `backend`, named `name`, on the calling thread,
/// pinned to `core` when given; io_uring gets `io_memory` bytes of locked buffers.
pub(crate) fn run_executor<T: 'static>(
    backend: Backend,
    name: &str,
    core: Option<usize>,
    io_memory: usize,
    work: impl Future<Output = anyhow::Result<T>> + 'static,
) -> anyhow::Result<T> {
    match backend {
        Backend::IoUring => executor::run_executor(name, core, io_memory, work),
        Backend::Epoll => {
            if let Some(core) = core {
                shoal_common::maybe_pin_current_thread(Some(core));
            }
            poll::block_on(work).context("the epoll executor failed")?
        }
    }
}

/// The work time of the calling thread's executor, read in steps: on io_uring
/// glommio's count of the time its tasks ran (which it resets at each reading); on
/// epoll the time not spent waiting in epoll.
#[derive(Debug)]
pub(crate) struct BusyClock {
    last_at: Instant,
    last_waited: Duration,
}

impl BusyClock {
    /// Starts counting now, on the executor's thread.
    pub(crate) fn start() -> Self {
        let mut clock = Self {
            last_at: Instant::now(),
            last_waited: Duration::ZERO,
        };
        clock.since_last();
        clock
    }

    /// Time spent working since the last reading.
    pub(crate) fn since_last(&mut self) -> Duration {
        let now = Instant::now();
        let busy = if poll::is_running() {
            let waited = poll::waited();
            let busy = now
                .saturating_duration_since(self.last_at)
                .saturating_sub(waited.saturating_sub(self.last_waited));
            self.last_waited = waited;
            busy
        } else {
            glommio::executor().executor_stats().executor_runtime()
        };
        self.last_at = now;
        busy
    }
}

/// Spawns `future` on the calling thread's executor, to run after the tasks that are
/// ready now.
pub fn spawn_local(future: impl Future<Output = ()> + 'static) {
    if poll::is_running() {
        poll::spawn(future);
    } else {
        glommio::spawn_local(future).detach();
    }
}

/// Completes after `duration`, on the calling thread's executor.
pub fn sleep(duration: Duration) -> Sleep {
    Sleep(if poll::is_running() {
        Timer::Epoll(poll::sleep(duration))
    } else {
        Timer::IoUring(glommio::timer::Timer::new(duration))
    })
}

/// A timer of the calling thread's executor; see [`sleep`].
#[derive(Debug)]
pub struct Sleep(Timer);

#[derive(Debug)]
enum Timer {
    IoUring(glommio::timer::Timer),
    Epoll(poll::Sleep),
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // Both timers are Unpin.
        match &mut self.get_mut().0 {
            Timer::IoUring(timer) => Pin::new(timer).poll(cx).map(drop),
            Timer::Epoll(sleep) => Pin::new(sleep).poll(cx),
        }
    }
}

/// Runs `future` for at most `limit`; `None` if the time ran out first.
pub async fn within<T>(limit: Duration, future: impl Future<Output = T>) -> Option<T> {
    futures_lite::future::or(async { Some(future.await) }, async {
        sleep(limit).await;
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

/// An accepted TCP connection on either executor.
#[derive(Debug)]
pub(crate) enum TcpStream {
    /// On glommio.
    IoUring(glommio::net::TcpStream),
    /// On the epoll executor.
    Epoll(Async<mio::net::TcpStream>),
}

impl TcpStream {
    /// Sends small writes at once (replies are written whole).
    pub(crate) fn set_nodelay(&self) -> io::Result<()> {
        match self {
            Self::IoUring(stream) => stream.set_nodelay(true).map_err(io::Error::from),
            Self::Epoll(stream) => stream.get_ref().set_nodelay(true),
        }
    }
}

impl AsyncRead for TcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::IoUring(stream) => Pin::new(stream).poll_read(cx, buf),
            Self::Epoll(stream) => Pin::new(stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for TcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::IoUring(stream) => Pin::new(stream).poll_write(cx, buf),
            Self::Epoll(stream) => Pin::new(stream).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::IoUring(stream) => Pin::new(stream).poll_flush(cx),
            Self::Epoll(stream) => Pin::new(stream).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::IoUring(stream) => Pin::new(stream).poll_close(cx),
            Self::Epoll(stream) => {
                // A FIN now; the descriptor closes when the stream is dropped.
                let _ = stream.get_ref().shutdown(std::net::Shutdown::Write);
                Poll::Ready(Ok(()))
            }
        }
    }
}

/// A listener on either executor.
enum Listener {
    IoUring(glommio::net::TcpListener),
    Epoll(Async<mio::net::TcpListener>),
}

impl Listener {
    fn new(listener: std::net::TcpListener) -> io::Result<Self> {
        if poll::is_running() {
            listener.set_nonblocking(true)?;
            Ok(Self::Epoll(Async::new(mio::net::TcpListener::from_std(
                listener,
            ))?))
        } else {
            Ok(Self::IoUring(executor::glommio_listener(listener)))
        }
    }

    async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        match self {
            Self::IoUring(listener) => {
                let stream = listener.accept().await.map_err(io::Error::from)?;
                let peer = stream.peer_addr().map_err(io::Error::from)?;
                Ok((TcpStream::IoUring(stream), peer))
            }
            Self::Epoll(listener) => {
                let (stream, peer) = listener.accept().await?;
                Ok((TcpStream::Epoll(stream), peer))
            }
        }
    }
}

/// Accepts connections on `listener` for ever, handing each to `on_accept`.
pub(crate) async fn accept_connections(
    listener: std::net::TcpListener,
    mut on_accept: impl FnMut(TcpStream, SocketAddr),
) -> anyhow::Result<()> {
    let listener = Listener::new(listener).context("cannot watch a listener")?;
    // Out of descriptors, this fails every 50 ms until some close: logged once a
    // minute, with how many more there were.
    let mut failures = LogBudget::new(1, Duration::from_secs(60));
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => on_accept(stream, peer),
            Err(err) => {
                // EMFILE and friends: back off briefly instead of spinning.
                if let Some(unlogged) = failures.take(Instant::now()) {
                    log::warn!("accept failed: {err}{}", left_out(unlogged));
                }
                sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// The reading end of a socket pair, readable by the calling thread's executor.
pub(crate) fn readable(stream: StdUnixStream) -> io::Result<Pin<Box<dyn AsyncRead>>> {
    if poll::is_running() {
        stream.set_nonblocking(true)?;
        Ok(Box::pin(Async::new(mio::net::UnixStream::from_std(
            stream,
        ))?))
    } else {
        Ok(Box::pin(executor::glommio_unix_stream(stream)))
    }
}
