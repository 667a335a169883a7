//! A non-blocking TCP connection, plain or TLS, as a byte stream.
//!
//! Reading ([`Read`]) gives plaintext and returns `WouldBlock` once the socket is
//! drained, which is what mio's edge-triggered events need and what tungstenite
//! expects of a non-blocking stream. Writing goes the other way round: callers collect
//! bytes in a plain `Vec` (tungstenite writes frames there, never to the socket) and
//! [`Transport::send`] pushes as much as the socket takes, keeping the rest. That
//! keeps "the socket is full" from ever looking like a failed WebSocket write.

use std::io::{self, ErrorKind, Read, Write};
use std::sync::Arc;

use mio::net::TcpStream;
use rustls::ClientConnection;
use rustls::pki_types::ServerName;

/// A connection to the tracker.
pub(crate) struct Transport {
    socket: TcpStream,
    tls: Option<Box<ClientConnection>>,
    /// Socket bytes read and written since the last [`take_byte_counts`](Self::take_byte_counts).
    bytes_read: u64,
    bytes_written: u64,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// What TLS needs to start a client session.
pub(crate) type TlsClient = (Arc<rustls::ClientConfig>, ServerName<'static>);

impl Transport {
    /// Wraps a connecting socket; with `tls`, a TLS client session starts on it (the
    /// handshake proceeds as [`send`](Self::send) and reads are called).
    pub(crate) fn new(socket: TcpStream, tls: Option<&TlsClient>) -> Result<Self, rustls::Error> {
        let tls = match tls {
            None => None,
            Some((config, name)) => Some(Box::new(ClientConnection::new(
                config.clone(),
                name.clone(),
            )?)),
        };
        Ok(Self {
            socket,
            tls,
            bytes_read: 0,
            bytes_written: 0,
        })
    }

    /// The socket, to (de)register it.
    pub(crate) fn socket(&mut self) -> &mut TcpStream {
        &mut self.socket
    }

    /// Socket bytes (read, written) since the last call.
    pub(crate) fn take_byte_counts(&mut self) -> (u64, u64) {
        let counts = (self.bytes_read, self.bytes_written);
        self.bytes_read = 0;
        self.bytes_written = 0;
        counts
    }

    /// Sends as much of `out` as the socket takes now (through TLS when on), removing
    /// what was taken; also sends what TLS itself has to say (handshake, alerts).
    /// An error means the connection is unusable.
    pub(crate) fn send(&mut self, out: &mut Vec<u8>) -> io::Result<()> {
        let Some(tls) = &mut self.tls else {
            let mut written = 0;
            while written < out.len() {
                match self.socket.write(&out[written..]) {
                    Ok(0) => return Err(ErrorKind::WriteZero.into()),
                    Ok(n) => written += n,
                    Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                    Err(err) if err.kind() == ErrorKind::Interrupted => {}
                    Err(err) => return Err(err),
                }
            }
            self.bytes_written += written as u64;
            out.drain(..written);
            return Ok(());
        };
        loop {
            let mut progress = false;
            if !out.is_empty() {
                // rustls takes what fits under its buffer limit (and holds plaintext
                // written before the handshake completes).
                let taken = tls.writer().write(out)?;
                out.drain(..taken);
                progress |= taken > 0;
            }
            while tls.wants_write() {
                match tls.write_tls(&mut self.socket) {
                    Ok(0) => return Err(ErrorKind::WriteZero.into()),
                    Ok(n) => {
                        self.bytes_written += n as u64;
                        progress = true;
                    }
                    Err(err) if err.kind() == ErrorKind::WouldBlock => return Ok(()),
                    Err(err) if err.kind() == ErrorKind::Interrupted => {}
                    Err(err) => return Err(err),
                }
            }
            if out.is_empty() || !progress {
                return Ok(());
            }
        }
    }
}

impl Read for Transport {
    /// Plaintext from the tracker; `Ok(0)` once it closed, `WouldBlock` when nothing
    /// more has arrived.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = &mut self.tls else {
            loop {
                match self.socket.read(buf) {
                    Ok(n) => {
                        self.bytes_read += n as u64;
                        return Ok(n);
                    }
                    Err(err) if err.kind() == ErrorKind::Interrupted => {}
                    Err(err) => return Err(err),
                }
            }
        };
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(err) if err.kind() == ErrorKind::WouldBlock => {}
                // Closed without close_notify: a close like any other here.
                Err(err) if err.kind() == ErrorKind::UnexpectedEof => return Ok(0),
                Err(err) => return Err(err),
            }
            // No plaintext buffered: decrypt more from the socket. At its end rustls
            // notes the close, and the reader above then reports it.
            match tls.read_tls(&mut self.socket) {
                Ok(n) => self.bytes_read += n as u64,
                Err(err) if err.kind() == ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
            tls.process_new_packets()
                .map_err(|err| io::Error::new(ErrorKind::InvalidData, err))?;
        }
    }
}
