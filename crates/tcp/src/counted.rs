//! A TCP stream that counts the bytes it carries into its worker's [`Traffic`].
//!
//! It wraps the socket itself, under TLS, so the counts are what crossed the wire
//! (handshakes and records included), the same for every TCP tracker.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_lite::{AsyncRead, AsyncWrite};
use shoal_common::Traffic;

/// `inner`, counting what is read and written into `traffic`.
#[derive(Debug)]
pub(crate) struct Counted<'a, S> {
    inner: S,
    traffic: &'a RefCell<Traffic>,
}

impl<'a, S> Counted<'a, S> {
    /// Counts `inner`'s bytes into `traffic`.
    pub(crate) fn new(inner: S, traffic: &'a RefCell<Traffic>) -> Self {
        Self { inner, traffic }
    }

    /// The stream.
    pub(crate) fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(read)) = polled {
            self.traffic.borrow_mut().bytes_received += read as u64;
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(written)) = polled {
            self.traffic.borrow_mut().bytes_sent += written as u64;
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::{AsyncReadExt as _, AsyncWriteExt as _, future};

    #[test]
    fn counts_bytes_each_way() {
        let traffic = RefCell::new(Traffic::default());
        let mut stream = Counted::new(futures_lite::io::Cursor::new(b"hello".to_vec()), &traffic);
        future::block_on(async {
            let mut read = [0u8; 3];
            stream.read_exact(&mut read).await.unwrap();
            stream.write_all(b"abcdefg").await.unwrap();
        });
        assert_eq!(traffic.borrow().bytes_received, 3);
        assert_eq!(traffic.borrow().bytes_sent, 7);
    }
}
