//! TLS on a connection that holds no buffer of its own while it is idle: rustls's
//! unbuffered connection, whose records are read into and encrypted into one scratch
//! buffer per thread.
//!
//! rustls's buffered connection keeps a 4 KiB receive buffer for as long as the
//! connection is open, at the size of its reads, even when nothing arrives: the
//! largest part of what an idle WebTorrent connection cost over TLS. Here a
//! connection keeps only what must outlive a poll: the start of a record split across
//! reads, plaintext the reader had no room for, and records the socket did not take
//! yet. Each is empty, and holds no allocation, between messages. The records of one
//! poll lie in the thread's scratch buffer, borrowed only within that poll: the
//! sockets are readiness-based on both backends, so a read that would block holds no
//! buffer, and one buffer serves every connection of the thread (as the WebTorrent
//! tracker's read buffer does for frames).

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use futures_lite::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncryptError, InsufficientSizeError, ReadTraffic,
    UnbufferedStatus, WriteTraffic,
};
use rustls::{HandshakeKind, ServerConfig};

/// Bytes read from a socket at once.
const READ_SIZE: usize = 64 * 1024;

/// The largest TLS record on the wire (16 KiB of payload, and its header, padding and
/// tag): the most a record split across reads can keep.
const MAX_RECORD: usize = 16 * 1024 + 2048;

/// Plaintext encrypted per write: four full records.
const WRITE_CHUNK: usize = 64 * 1024;

/// A record's header, content type, nonce and tag, at most (TLS 1.2's AES-GCM: 29).
const RECORD_OVERHEAD: usize = 64;

/// Bytes read at once during a handshake: a browser's ClientHello is about 2 KiB.
const HANDSHAKE_READ: usize = 4096;

/// Most bytes of a handshake received and not yet used: rustls takes handshake
/// messages of up to 64 KiB.
const MAX_HANDSHAKE_BUFFER: usize = 64 * 1024 + MAX_RECORD;

/// Most bytes kept received after the handshake once what could be processed is: a
/// record split across reads, or a handshake message split across records (rustls
/// keeps its records in our buffer until it is whole). An honest client leaves one
/// record at most; past two, the connection fails, or a client sending a byte of a
/// long message per padded record would hold a GiB.
const MAX_RECEIVED: usize = 2 * MAX_RECORD;

thread_local! {
    /// Where a poll's records lie: received ones (and the start of a split record
    /// kept from the poll before), or those just encrypted.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The server side of a TLS connection over `S`, once its handshake is done.
pub(crate) struct TlsStream<S> {
    inner: S,
    conn: UnbufferedServerConnection,
    kept: Kept,
}

/// What a connection keeps between polls: each empty, and unallocated, between
/// messages.
#[derive(Default)]
struct Kept {
    /// Records received and not yet processed: the start of one split across reads,
    /// or whole ones that came with the handshake's last flight (`unread`).
    received: Vec<u8>,
    /// Whether `received` may hold whole records.
    unread: bool,
    /// Plaintext the reader had no room for, from `plaintext_from`.
    plaintext: Vec<u8>,
    plaintext_from: usize,
    /// Records the socket has not taken yet, from `sending_from`.
    sending: Vec<u8>,
    sending_from: usize,
    /// The client sent close_notify: the stream ends once `plaintext` is read.
    peer_closed: bool,
    /// close_notify has been queued.
    close_queued: bool,
}

impl Kept {
    /// Copies plaintext kept from before into `out`, if there is any.
    fn take_plaintext(&mut self, out: &mut [u8]) -> Option<usize> {
        let left = &self.plaintext[self.plaintext_from..];
        if left.is_empty() {
            return None;
        }
        let taken = left.len().min(out.len());
        out[..taken].copy_from_slice(&left[..taken]);
        self.plaintext_from += taken;
        if self.plaintext_from == self.plaintext.len() {
            self.plaintext = Vec::new();
            self.plaintext_from = 0;
        }
        Some(taken)
    }

    /// Keeps `rest`, the start of a record, for the next read.
    fn keep_received(&mut self, rest: &[u8]) {
        if rest.is_empty() {
            self.received = Vec::new();
        } else {
            self.received.clear();
            self.received.extend_from_slice(rest);
            self.received.shrink_to_fit();
        }
    }

    /// Moves what `traffic` decrypted into `out` from `filled` on, and what does not
    /// fit into the plaintext kept; returns where `out` is filled to.
    fn read_records(
        &mut self,
        traffic: &mut ReadTraffic<'_, '_, ServerConnectionData>,
        out: &mut [u8],
        mut filled: usize,
    ) -> io::Result<usize> {
        while let Some(record) = traffic.next_record() {
            let payload = record.map_err(invalid)?.payload;
            let now = payload.len().min(out.len() - filled);
            out[filled..filled + now].copy_from_slice(&payload[..now]);
            filled += now;
            self.plaintext.extend_from_slice(&payload[now..]);
        }
        Ok(filled)
    }
}

/// Runs the server side of a TLS handshake over `stream` with `config`.
pub(crate) async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    config: Arc<ServerConfig>,
) -> io::Result<TlsStream<S>> {
    let mut conn = UnbufferedServerConnection::new(config).map_err(invalid)?;
    let mut incoming = Vec::new();
    let mut outgoing = Vec::new();
    let mut kept = Kept::default();
    loop {
        let UnbufferedStatus { discard, state } = conn.process_tls_records(&mut incoming);
        let step = match state.map_err(invalid)? {
            ConnectionState::EncodeTlsData(mut encode) => {
                append_with(&mut outgoing, 1024, |room| Ok(encode.encode(room)?))?;
                Step::Next
            }
            ConnectionState::TransmitTlsData(transmit) => {
                transmit.done();
                Step::Transmit
            }
            // Application data sent with the client's last flight.
            ConnectionState::ReadTraffic(mut traffic) => {
                kept.read_records(&mut traffic, &mut [], 0)?;
                Step::Next
            }
            // A TLS 1.3 server may write once its own flight is out (before the
            // client's Finished): done only once the client's is in.
            ConnectionState::WriteTraffic(_) => Step::Settled,
            ConnectionState::BlockedHandshake => Step::Receive,
            ConnectionState::PeerClosed | ConnectionState::Closed => Step::Closed,
            _ => return Err(invalid("early data, which is not offered")),
        };
        incoming.drain(..discard);
        match step {
            Step::Next => {}
            // Once the handshake is done (a client that closes right after it, as
            // ACME's validation does, sends close_notify with its Finished), the
            // stream's first read or write says the client has gone.
            Step::Closed if conn.is_handshaking() => {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            Step::Closed => {
                kept.peer_closed = true;
                break;
            }
            // TLS 1.3's session tickets, after the client's Finished: the client does
            // not wait for them, and they go out with the first write (one send for
            // both, a syscall less per connection).
            Step::Transmit
                if !conn.is_handshaking()
                    && conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3) => {}
            Step::Transmit => {
                let sent = stream.write_all(&outgoing).await;
                outgoing.clear();
                match sent {
                    Ok(()) => {}
                    Err(err) if conn.is_handshaking() => return Err(err),
                    Err(_) => break,
                }
            }
            Step::Settled if !conn.is_handshaking() => break,
            Step::Settled | Step::Receive => {
                let start = incoming.len();
                if start >= MAX_HANDSHAKE_BUFFER {
                    return Err(invalid("handshake messages larger than 64 KiB"));
                }
                incoming.resize(start + HANDSHAKE_READ, 0);
                let read = stream.read(&mut incoming[start..]).await?;
                if read == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                incoming.truncate(start + read);
            }
        }
    }
    if !outgoing.is_empty() {
        outgoing.shrink_to_fit();
        kept.sending = outgoing;
    }
    if !incoming.is_empty() {
        incoming.shrink_to_fit();
        kept.received = incoming;
        kept.unread = true;
    }
    Ok(TlsStream {
        inner: stream,
        conn,
        kept,
    })
}

/// What a handshake does after a state is handled.
enum Step {
    /// Asks rustls again.
    Next,
    /// Sends what was encoded.
    Transmit,
    /// Reads more from the client.
    Receive,
    /// Traffic may flow: done, unless the client's last flight is still to come.
    Settled,
    /// The client closed.
    Closed,
}

impl<S> TlsStream<S> {
    /// The application protocol the client and this server agreed on.
    pub(crate) fn alpn_protocol(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// Whether the handshake was full or resumed a session.
    pub(crate) fn handshake_kind(&self) -> Option<HandshakeKind> {
        self.conn.handshake_kind()
    }

    /// Handles rustls's states until it lets application data be written, then runs
    /// `write` on it. Handshake messages it asks to send (a key update) are queued
    /// first; plaintext it holds is kept for the reader. rustls is given the bytes
    /// kept received: the start of a handshake message split across records lies
    /// there, and rustls's place in them counts from their start.
    fn with_write_traffic<R>(
        &mut self,
        write: impl FnOnce(&mut WriteTraffic<'_, ServerConnectionData>) -> io::Result<R>,
    ) -> io::Result<R> {
        let mut write = Some(write);
        loop {
            let mut received = std::mem::take(&mut self.kept.received);
            let UnbufferedStatus { discard, state } = self.conn.process_tls_records(&mut received);
            let done = match state {
                Err(err) => Some(Err(invalid(err))),
                Ok(ConnectionState::WriteTraffic(mut traffic)) => {
                    let write = write.take().expect("written once");
                    Some(write(&mut traffic))
                }
                Ok(ConnectionState::EncodeTlsData(mut encode)) => {
                    append_with(&mut self.kept.sending, 256, |room| Ok(encode.encode(room)?))
                        .err()
                        .map(Err)
                }
                Ok(ConnectionState::TransmitTlsData(transmit)) => {
                    transmit.done();
                    None
                }
                Ok(ConnectionState::ReadTraffic(mut traffic)) => self
                    .kept
                    .read_records(&mut traffic, &mut [], 0)
                    .err()
                    .map(Err),
                Ok(ConnectionState::PeerClosed) => {
                    self.kept.peer_closed = true;
                    None
                }
                Ok(ConnectionState::Closed) => Some(Err(io::ErrorKind::BrokenPipe.into())),
                Ok(_) => Some(Err(io::ErrorKind::NotConnected.into())),
            };
            received.drain(..discard);
            if received.is_empty() {
                received = Vec::new();
            }
            self.kept.received = received;
            if let Some(done) = done {
                return done;
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> TlsStream<S> {
    /// Sends the records kept for the socket.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let kept = &mut self.kept;
        while kept.sending_from < kept.sending.len() {
            let written = ready!(
                Pin::new(&mut self.inner).poll_write(cx, &kept.sending[kept.sending_from..])
            )?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            kept.sending_from += written;
        }
        if kept.sending.capacity() > 0 {
            kept.sending = Vec::new();
            kept.sending_from = 0;
        }
        Poll::Ready(Ok(()))
    }

    /// Encrypts `data` into `scratch` and writes what the socket takes; keeps the rest.
    fn encrypt_and_send(
        &mut self,
        cx: &mut Context<'_>,
        data: &[u8],
        scratch: &mut Vec<u8>,
    ) -> io::Result<()> {
        let records = data.len().div_ceil(16 * 1024);
        let least = data.len() + records * RECORD_OVERHEAD;
        if scratch.len() < least {
            scratch.resize(least, 0);
        }
        let encrypted = self.with_write_traffic(|traffic| {
            write_into(scratch, |room| Ok(traffic.encrypt(data, room)?))
        })?;
        let mut sent = 0;
        // Records kept from before go first, in the same send.
        if self.kept.sending.is_empty() {
            while sent < encrypted {
                match Pin::new(&mut self.inner).poll_write(cx, &scratch[sent..encrypted]) {
                    Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                    Poll::Ready(Ok(written)) => sent += written,
                    Poll::Ready(Err(err)) => return Err(err),
                    Poll::Pending => break,
                }
            }
        }
        if sent < encrypted {
            self.kept
                .sending
                .extend_from_slice(&scratch[sent..encrypted]);
            if let Poll::Ready(Err(err)) = self.poll_send(cx) {
                return Err(err);
            }
        }
        Ok(())
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream<S> {
    /// Reads records into `scratch` (after the start of a record kept from before)
    /// until some plaintext is in `out`, the client closed, or the socket has nothing
    /// more. `Ok(0)`: the client closed.
    fn receive(
        &mut self,
        cx: &mut Context<'_>,
        scratch: &mut Vec<u8>,
        out: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        loop {
            let kept = self.kept.received.len();
            if scratch.len() < kept + READ_SIZE {
                scratch.resize(kept + READ_SIZE, 0);
            }
            let fresh = if self.kept.unread {
                0
            } else {
                match Pin::new(&mut self.inner).poll_read(cx, &mut scratch[kept..kept + READ_SIZE])
                {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
                    // Closed without close_notify: an end all the same.
                    Poll::Ready(Ok(0)) => return Poll::Ready(Ok(0)),
                    Poll::Ready(Ok(read)) => read,
                }
            };
            self.kept.unread = false;
            scratch[..kept].copy_from_slice(&self.kept.received);
            let total = kept + fresh;
            let queued = self.kept.sending.len();
            let (used, filled) = self.process(&mut scratch[..total], out)?;
            self.kept.keep_received(&scratch[used..total]);
            if self.kept.received.len() > MAX_RECEIVED {
                return Poll::Ready(Err(invalid(
                    "a handshake message split over more records than a client sends",
                )));
            }
            if self.kept.sending.len() > queued {
                // A key update's answer: sent now if the socket takes it, else with
                // the next write (the client does not wait for it). Session tickets
                // kept from the handshake wait for the first write.
                if let Poll::Ready(Err(err)) = self.poll_send(cx) {
                    return Poll::Ready(Err(err));
                }
            }
            if filled > 0 || self.kept.peer_closed {
                return Poll::Ready(Ok(filled));
            }
        }
    }

    /// Processes the records in `incoming`: plaintext into `out` (and what does not
    /// fit into the plaintext kept), handshake messages to send (a key update's
    /// answer) into the records kept for sending. Returns the bytes of `incoming`
    /// used (the rest is the start of a record) and of `out` filled.
    fn process(&mut self, incoming: &mut [u8], out: &mut [u8]) -> io::Result<(usize, usize)> {
        let mut used = 0;
        let mut filled = 0;
        loop {
            let UnbufferedStatus { discard, state } =
                self.conn.process_tls_records(&mut incoming[used..]);
            let more = match state.map_err(invalid)? {
                ConnectionState::ReadTraffic(mut traffic) => {
                    filled = self.kept.read_records(&mut traffic, out, filled)?;
                    true
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    append_with(&mut self.kept.sending, 256, |room| Ok(encode.encode(room)?))?;
                    true
                }
                ConnectionState::TransmitTlsData(transmit) => {
                    transmit.done();
                    true
                }
                ConnectionState::PeerClosed => {
                    self.kept.peer_closed = true;
                    true
                }
                ConnectionState::Closed => {
                    self.kept.peer_closed = true;
                    false
                }
                ConnectionState::WriteTraffic(_) | ConnectionState::BlockedHandshake => false,
                _ => return Err(invalid("early data, which is not offered")),
            };
            used += discard;
            if !more {
                return Ok((used, filled));
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if out.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if let Some(taken) = this.kept.take_plaintext(out) {
            return Poll::Ready(Ok(taken));
        }
        if this.kept.peer_closed {
            return Poll::Ready(Ok(0));
        }
        SCRATCH.with(|scratch| this.receive(cx, &mut scratch.borrow_mut(), out))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // Records kept from before go first, with these when there are few (session
        // tickets waiting for the first write): past a chunk of them, nothing more is
        // taken until the socket has taken them.
        if this.kept.sending.len() - this.kept.sending_from > WRITE_CHUNK {
            ready!(this.poll_send(cx))?;
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let data = &data[..data.len().min(WRITE_CHUNK)];
        SCRATCH.with(|scratch| this.encrypt_and_send(cx, data, &mut scratch.borrow_mut()))?;
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    /// Sends close_notify (once), then closes the socket.
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.kept.close_queued {
            this.kept.close_queued = true;
            let mut alert = Vec::new();
            // A connection that cannot send it any more (it failed, or both sides
            // closed) is closed all the same.
            if this
                .with_write_traffic(|traffic| {
                    append_with(&mut alert, 64, |room| Ok(traffic.queue_close_notify(room)?))
                })
                .is_ok()
            {
                this.kept.sending.extend_from_slice(&alert);
            }
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.inner).poll_close(cx)
    }
}

/// Why rustls could not write a record into the room it was given.
enum Short {
    /// It needs this many bytes.
    Room(usize),
    /// It cannot.
    Failed(io::Error),
}

impl From<EncodeError> for Short {
    fn from(err: EncodeError) -> Self {
        match err {
            EncodeError::InsufficientSize(InsufficientSizeError { required_size }) => {
                Self::Room(required_size)
            }
            err => Self::Failed(io::Error::other(err)),
        }
    }
}

impl From<EncryptError> for Short {
    fn from(err: EncryptError) -> Self {
        match err {
            EncryptError::InsufficientSize(InsufficientSizeError { required_size }) => {
                Self::Room(required_size)
            }
            err => Self::Failed(io::Error::other(err)),
        }
    }
}

/// Runs `write` on `buffer`, grown to what it asks for when it is short; returns the
/// bytes written.
fn write_into(
    buffer: &mut Vec<u8>,
    mut write: impl FnMut(&mut [u8]) -> Result<usize, Short>,
) -> io::Result<usize> {
    loop {
        match write(buffer) {
            Ok(written) => return Ok(written),
            Err(Short::Room(required)) if required > buffer.len() => buffer.resize(required, 0),
            Err(Short::Room(_)) => return Err(io::Error::other("a TLS record did not fit")),
            Err(Short::Failed(err)) => return Err(err),
        }
    }
}

/// Appends to `out` what `write` puts in the room it is given (`room` bytes at first,
/// more when it asks).
fn append_with(
    out: &mut Vec<u8>,
    room: usize,
    mut write: impl FnMut(&mut [u8]) -> Result<usize, Short>,
) -> io::Result<()> {
    let start = out.len();
    let mut room = room;
    loop {
        out.resize(start + room, 0);
        match write(&mut out[start..]) {
            Ok(written) => {
                out.truncate(start + written);
                return Ok(());
            }
            Err(Short::Room(required)) if required > room => room = required,
            Err(short) => {
                out.truncate(start);
                return Err(match short {
                    Short::Failed(err) => err,
                    Short::Room(_) => io::Error::other("a TLS record did not fit"),
                });
            }
        }
    }
}

fn invalid(err: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, err)
}

#[cfg(any(test, fuzzing))]
pub(crate) mod rig;
#[cfg(test)]
mod tests;
