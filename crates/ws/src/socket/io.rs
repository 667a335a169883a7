//! Small async helpers with deadlines.

use std::future::Future;
use std::time::{Duration, Instant};

use futures_lite::{AsyncWrite, AsyncWriteExt as _};

/// Runs `future` for at most `limit`.
pub(crate) async fn within<T>(limit: Duration, future: impl Future<Output = T>) -> Option<T> {
    futures_lite::future::or(async { Some(future.await) }, async {
        glommio::timer::sleep(limit).await;
        None
    })
    .await
}

/// Writes and flushes `bytes` before `deadline`; false if that failed.
pub(crate) async fn write_all<S: AsyncWrite + Unpin>(
    stream: &mut S,
    bytes: &[u8],
    deadline: Instant,
) -> bool {
    let write = async {
        stream.write_all(bytes).await?;
        stream.flush().await
    };
    let left = deadline.saturating_duration_since(Instant::now());
    matches!(within(left, write).await, Some(Ok(())))
}
