//! A server stream and rustls's own buffered client over an in-memory wire whose
//! reads and writes are as small and as often refused as a test (or the fuzzer) asks.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::io::Read as _;
use std::pin::pin;
use std::rc::Rc;
use std::task::Waker;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, ClientConnection, RootCertStore, SupportedProtocolVersion};

use super::*;

/// What crosses between the client and the server's end.
#[derive(Default)]
pub(crate) struct Wire {
    pub(crate) to_server: VecDeque<u8>,
    pub(crate) to_client: Vec<u8>,
    pub(crate) client_closed: bool,
    pub(crate) server_closed: bool,
    /// Most bytes the server's end reads at once.
    pub(crate) read_size: usize,
    /// Most bytes its end takes at once; every other write is refused (would block)
    /// when this is limited.
    pub(crate) write_room: usize,
    pub(crate) refuse_write: bool,
    /// Every write is refused (a client that reads nothing).
    pub(crate) blocked: bool,
    /// Plaintext the client has received.
    pub(crate) client_plaintext: Vec<u8>,
    /// The client has seen the server's close_notify.
    pub(crate) client_saw_close: bool,
    /// Writes the server's end took bytes from.
    pub(crate) writes: usize,
}

/// The server's end of the wire.
#[derive(Clone)]
pub(crate) struct End(pub(crate) Rc<RefCell<Wire>>);

impl End {
    pub(crate) fn new(read_size: usize, write_room: usize) -> Self {
        Self(Rc::new(RefCell::new(Wire {
            read_size,
            write_room,
            ..Wire::default()
        })))
    }
}

impl AsyncRead for End {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        out: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let mut wire = self.0.borrow_mut();
        if wire.to_server.is_empty() {
            return if wire.client_closed {
                Poll::Ready(Ok(0))
            } else {
                Poll::Pending
            };
        }
        let read = out.len().min(wire.read_size).min(wire.to_server.len());
        for (slot, byte) in out.iter_mut().zip(wire.to_server.drain(..read)) {
            *slot = byte;
        }
        Poll::Ready(Ok(read))
    }
}

impl AsyncWrite for End {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut wire = self.0.borrow_mut();
        if wire.blocked {
            return Poll::Pending;
        }
        if wire.refuse_write {
            wire.refuse_write = false;
            return Poll::Pending;
        }
        wire.refuse_write = wire.write_room != usize::MAX;
        let taken = data.len().min(wire.write_room);
        wire.to_client.extend_from_slice(&data[..taken]);
        wire.writes += 1;
        Poll::Ready(Ok(taken))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.borrow_mut().server_closed = true;
        Poll::Ready(Ok(()))
    }
}

/// A client and a server over a wire.
pub(crate) struct Pair {
    pub(crate) client: ClientConnection,
    pub(crate) server: TlsStream<End>,
    pub(crate) wire: End,
}

pub(crate) fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

/// Moves what the client wrote to the server's side, and what the server wrote
/// through the client's TLS.
pub(crate) fn shuttle(client: &mut ClientConnection, wire: &End) {
    let mut out = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut out).unwrap();
    }
    wire.0.borrow_mut().to_server.extend(out);
    let bytes = std::mem::take(&mut wire.0.borrow_mut().to_client);
    let mut bytes = &bytes[..];
    while !bytes.is_empty() {
        client.read_tls(&mut bytes).unwrap();
        client.process_new_packets().unwrap();
        let mut wire = wire.0.borrow_mut();
        match client.reader().read_to_end(&mut wire.client_plaintext) {
            Ok(_) => wire.client_saw_close = true,
            Err(err) => assert_eq!(err.kind(), io::ErrorKind::WouldBlock),
        }
    }
}

/// Runs `future` to its end, moving bytes between polls.
pub(crate) fn run<F: Future>(future: F, client: &mut ClientConnection, wire: &End) -> F::Output {
    let mut future = pin!(future);
    for _ in 0..1_000_000 {
        if let Poll::Ready(output) = poll_once(future.as_mut()) {
            shuttle(client, wire);
            return output;
        }
        shuttle(client, wire);
    }
    panic!("never finished");
}

pub(crate) fn configs(
    versions: &[&'static SupportedProtocolVersion],
) -> (Arc<ServerConfig>, Arc<ClientConfig>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let certificate = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let der = CertificateDer::from(certificate.der().to_vec());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![der.clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(der).unwrap();
    let client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    (Arc::new(server), Arc::new(client))
}

pub(crate) const BOTH: [&[&SupportedProtocolVersion]; 2] =
    [&[&rustls::version::TLS13], &[&rustls::version::TLS12]];

#[cfg(test)]
pub(crate) fn connect(
    versions: &[&'static SupportedProtocolVersion],
    read_size: usize,
    write_room: usize,
) -> Pair {
    connect_with(configs(versions), read_size, write_room)
}

/// A handshake between a client and a server with these configurations.
pub(crate) fn connect_with(
    (server, client): (Arc<ServerConfig>, Arc<ClientConfig>),
    read_size: usize,
    write_room: usize,
) -> Pair {
    let wire = End::new(read_size, write_room);
    let mut client = ClientConnection::new(client, "localhost".try_into().unwrap()).unwrap();
    let server = run(accept(wire.clone(), server), &mut client, &wire).unwrap();
    assert!(!client.is_handshaking());
    Pair {
        client,
        server,
        wire,
    }
}

impl Pair {
    /// The client sends `data` (TLS records of up to 16 KiB).
    pub(crate) fn client_sends(&mut self, data: &[u8]) {
        use std::io::Write as _;
        self.client.writer().write_all(data).unwrap();
        shuttle(&mut self.client, &self.wire);
    }

    /// What the server reads, `chunk` bytes of room at a time, until it has `len`.
    pub(crate) fn server_reads(&mut self, len: usize, chunk: usize) -> Vec<u8> {
        let mut received = Vec::new();
        let mut buffer = vec![0; chunk];
        while received.len() < len {
            let read = run(self.server.read(&mut buffer), &mut self.client, &self.wire).unwrap();
            assert!(read > 0, "the stream ended after {} bytes", received.len());
            received.extend_from_slice(&buffer[..read]);
        }
        received
    }

    /// The server writes `data` and flushes it.
    pub(crate) fn server_sends(&mut self, data: &[u8]) {
        let server = &mut self.server;
        let sent = run(
            async {
                server.write_all(data).await?;
                server.flush().await
            },
            &mut self.client,
            &self.wire,
        );
        sent.unwrap();
    }

    /// What the client has received.
    pub(crate) fn client_received(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.wire.0.borrow_mut().client_plaintext)
    }

    /// Nothing received kept between messages, and no allocation for it.
    pub(crate) fn assert_nothing_received_kept(&self) {
        let kept = &self.server.kept;
        assert_eq!(kept.received.capacity(), 0, "received");
        assert_eq!(kept.plaintext.capacity(), 0, "plaintext");
    }

    /// Nothing kept between messages, and no allocation (once the server has written:
    /// TLS 1.3's session tickets wait for its first write).
    #[cfg(test)]
    pub(crate) fn assert_idle(&self) {
        self.assert_nothing_received_kept();
        assert_eq!(self.server.kept.sending.capacity(), 0, "sending");
    }
}

pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|n| (n as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Seals TLS 1.3 records under a client's extracted traffic keys: records rustls's
/// client never sends (a handshake message split across records, padding), as
/// another client may.
pub(crate) struct Sealer {
    key: ring::aead::LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

impl Sealer {
    /// The sealer of `client`'s records, which it takes over.
    pub(crate) fn take_over(client: ClientConnection) -> Self {
        use rustls::ConnectionTrafficSecrets as Secrets;
        let (seq, secrets) = client.dangerous_extract_secrets().unwrap().tx;
        let (algorithm, key, iv) = match secrets {
            Secrets::Aes128Gcm { key, iv } => (&ring::aead::AES_128_GCM, key, iv),
            Secrets::Aes256Gcm { key, iv } => (&ring::aead::AES_256_GCM, key, iv),
            Secrets::Chacha20Poly1305 { key, iv } => (&ring::aead::CHACHA20_POLY1305, key, iv),
            _ => panic!("a cipher suite the test does not know"),
        };
        let key = ring::aead::UnboundKey::new(algorithm, key.as_ref()).unwrap();
        Self {
            key: ring::aead::LessSafeKey::new(key),
            iv: iv.as_ref().try_into().unwrap(),
            seq,
        }
    }

    /// A record of `content_type` holding `content`, padded with `padding` zeros.
    pub(crate) fn seal(&mut self, content_type: u8, content: &[u8], padding: usize) -> Vec<u8> {
        let mut body = content.to_vec();
        body.push(content_type);
        body.resize(body.len() + padding, 0);
        let len = body.len() + 16;
        let header = [0x17, 3, 3, (len >> 8) as u8, len as u8];
        let mut nonce = self.iv;
        for (at, byte) in self.seq.to_be_bytes().iter().enumerate() {
            nonce[4 + at] ^= byte;
        }
        self.seq += 1;
        self.key
            .seal_in_place_append_tag(
                ring::aead::Nonce::assume_unique_for_key(nonce),
                ring::aead::Aad::from(header),
                &mut body,
            )
            .unwrap();
        [&header[..], &body].concat()
    }
}

/// A TLS 1.3 pair whose client's records the test seals itself from now on.
#[cfg(test)]
pub(crate) fn taken_over() -> (TlsStream<End>, End, Sealer) {
    taken_over_with(configs(&[&rustls::version::TLS13]), READ_SIZE)
}

/// The same with these configurations and the server's read size.
pub(crate) fn taken_over_with(
    (server, client): (Arc<ServerConfig>, Arc<ClientConfig>),
    read_size: usize,
) -> (TlsStream<End>, End, Sealer) {
    let mut client = (*client).clone();
    client.enable_secret_extraction = true;
    let mut pair = connect_with((server, Arc::new(client)), read_size, usize::MAX);
    pair.server_sends(b"tickets out");
    pair.client_received();
    let Pair {
        client,
        server,
        wire,
    } = pair;
    (server, wire, Sealer::take_over(client))
}

pub(crate) const HANDSHAKE: u8 = 0x16;
pub(crate) const APPLICATION_DATA: u8 = 0x17;

/// Runs the server's stream over fuzzed input, against rustls's client. The first
/// bytes choose the TLS version, the server's read size and how much its socket takes
/// at a time; then, three bytes an operation: the client sends, the server reads, the
/// server writes, the client asks for a key update, a record is altered on the way, or
/// bytes that are not TLS come, or either side closes. Or, with the second bit of the
/// first byte, the rest is all the client ever sends, from its first byte (a handshake
/// that is not one); with the third, records sealed by hand after a TLS 1.3 handshake
/// (see `sealed`). Every byte sent arrives once and in order, no plaintext comes
/// that the client did not send, the stream keeps at most a record and a read, and
/// nothing once a message is read.
#[cfg(any(test, fuzzing))]
pub(crate) fn fuzz(data: &[u8]) {
    use std::sync::OnceLock;
    static CONFIGS: OnceLock<[(Arc<ServerConfig>, Arc<ClientConfig>); 2]> = OnceLock::new();
    let &[knobs, read_size, write_room, ref ops @ ..] = data else {
        return;
    };
    let configs = CONFIGS.get_or_init(|| BOTH.map(configs));
    let tls13 = knobs & 1 == 0;
    let read_size = usize::from(read_size) * 97 + 1;
    if knobs & 2 != 0 {
        not_a_handshake(configs[0].0.clone(), read_size, ops);
        return;
    }
    if knobs & 4 != 0 {
        let (server, wire, sealer) = taken_over_with(configs[0].clone(), read_size);
        sealed(server, wire, sealer, ops);
        return;
    }
    let write_room = match write_room {
        0 => usize::MAX,
        room => usize::from(room) * 13,
    };
    let mut pair = connect_with(configs[usize::from(!tls13)].clone(), read_size, write_room);
    // Sent by the client, not read by the server yet.
    let mut unread = Vec::new();
    let mut key_updates = 0;
    for (n, op) in ops.chunks_exact(3).enumerate() {
        let size = usize::from(u16::from_le_bytes([op[1], op[2]])) % 40_000 + 1;
        let seed = n as u8;
        match op[0] % 8 {
            0 => {
                let message = pattern(size, seed);
                pair.client_sends(&message);
                unread.extend_from_slice(&message);
                key_updates = 0;
            }
            1 if !unread.is_empty() => {
                assert_same(&pair.server_reads(unread.len(), size), &unread);
                unread.clear();
                // Key updates sent after the message may have come in part.
                if key_updates == 0 {
                    pair.assert_nothing_received_kept();
                }
            }
            2 => {
                let message = pattern(size, seed);
                pair.server_sends(&message);
                assert_same(&pair.client_received(), &message);
                // (What it received may hold the start of a key update's record.)
                assert_eq!(pair.server.kept.sending.capacity(), 0, "sending");
            }
            // rustls takes 32 requests between application data records.
            3 if tls13 && key_updates < 32 => {
                pair.client.refresh_traffic_keys().unwrap();
                key_updates += 1;
                shuttle(&mut pair.client, &pair.wire);
            }
            4 | 5 => {
                // Whatever was sent first is read whole.
                if !unread.is_empty() {
                    assert_same(&pair.server_reads(unread.len(), 4096), &unread);
                }
                // What the client really sent, if anything: an altered record may
                // still give it (rustls authenticates a TLS 1.3 record's outer type
                // and version as the fixed values they must have, so a change there
                // is ignored), nothing else.
                let mut genuine = Vec::new();
                let mut bytes = Vec::new();
                if op[0] % 8 == 4 {
                    // Records with one byte changed.
                    use std::io::Write as _;
                    genuine = pattern(size, seed);
                    pair.client.writer().write_all(&genuine).unwrap();
                    pair.client.write_tls(&mut bytes).unwrap();
                    let at = usize::from(op[1]) * 257 % bytes.len();
                    bytes[at] ^= op[2] | 1;
                } else {
                    bytes.extend_from_slice(&ops[(n + 1) * 3..]);
                }
                let mut wire = pair.wire.0.borrow_mut();
                wire.to_server.extend(bytes);
                wire.client_closed = true;
                drop(wire);
                let mut received = Vec::new();
                let mut buffer = vec![0; 4096];
                loop {
                    let server = &mut pair.server;
                    match run(server.read(&mut buffer), &mut pair.client, &pair.wire) {
                        Ok(0) | Err(_) => break,
                        Ok(read) => received.extend_from_slice(&buffer[..read]),
                    }
                }
                assert!(
                    genuine.starts_with(&received),
                    "{} bytes of plaintext the client never sent",
                    received.len()
                );
                return;
            }
            6 => {
                pair.client.send_close_notify();
                shuttle(&mut pair.client, &pair.wire);
                if !unread.is_empty() {
                    assert_same(&pair.server_reads(unread.len(), size), &unread);
                }
                let mut buffer = [0; 64];
                let read = run(pair.server.read(&mut buffer), &mut pair.client, &pair.wire);
                assert_eq!(read.unwrap(), 0, "the end after close_notify");
                return;
            }
            7 => {
                let server = &mut pair.server;
                run(server.close(), &mut pair.client, &pair.wire).unwrap();
                assert!(pair.wire.0.borrow().client_saw_close);
                return;
            }
            _ => {}
        }
        let kept = &pair.server.kept;
        assert!(
            kept.received.len() <= MAX_RECORD,
            "{} bytes of a record",
            kept.received.len()
        );
        assert!(
            kept.plaintext.len() <= READ_SIZE,
            "{} bytes of plaintext",
            kept.plaintext.len()
        );
    }
}

/// Records rustls's client never sends, sealed under its keys after the handshake:
/// three bytes an operation, application data, a read of what is there, a handshake
/// record (a part of a message, of any content, padded), a write. What the server
/// reads is what was sent, in order (it may stop at an error: application data inside
/// a handshake message is one), it keeps at most `MAX_RECEIVED`, and writes go on.
#[cfg(any(test, fuzzing))]
fn sealed(mut server: TlsStream<End>, wire: End, mut sealer: Sealer, mut ops: &[u8]) {
    let mut sent = Vec::new();
    let mut received = Vec::new();
    let mut buffer = vec![0; 4096];
    while let [op, low, high, rest @ ..] = ops {
        ops = rest;
        let size = usize::from(u16::from_le_bytes([*low, *high])) % 16_000 + 1;
        match op % 4 {
            0 => {
                let data = pattern(size, *op);
                let record = sealer.seal(APPLICATION_DATA, &data, 0);
                wire.0.borrow_mut().to_server.extend(record);
                sent.extend_from_slice(&data);
            }
            1 => loop {
                match poll_once(pin!(server.read(&mut buffer))) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => {
                        assert!(sent.starts_with(&received), "bytes never sent");
                        return;
                    }
                    Poll::Ready(Ok(read)) => received.extend_from_slice(&buffer[..read]),
                    Poll::Pending => break,
                }
            },
            2 => {
                let len = usize::from(*low % 8).min(ops.len());
                let (content, rest) = ops.split_at(len);
                ops = rest;
                let record = sealer.seal(HANDSHAKE, content, usize::from(*high) * 64);
                wire.0.borrow_mut().to_server.extend(record);
            }
            _ => {
                let data = pattern(size, *op);
                let written = poll_once(pin!(async {
                    server.write_all(&data).await?;
                    server.flush().await
                }));
                match written {
                    Poll::Ready(Ok(())) => wire.0.borrow_mut().to_client.clear(),
                    Poll::Ready(Err(_)) => return,
                    Poll::Pending => panic!("a write pending on a socket that takes it all"),
                }
            }
        }
        assert!(sent.starts_with(&received), "bytes never sent");
        let kept = server.kept.received.len();
        assert!(kept <= MAX_RECEIVED, "{kept} bytes received kept");
    }
}

/// `bytes` as all a client sends, from the start: the handshake fails, or waits for
/// more, and never keeps more than its limit.
#[cfg(any(test, fuzzing))]
fn not_a_handshake(server: Arc<ServerConfig>, read_size: usize, bytes: &[u8]) {
    let wire = End::new(read_size, usize::MAX);
    {
        let mut wire = wire.0.borrow_mut();
        wire.to_server.extend(bytes);
        wire.client_closed = true;
    }
    let mut accepted = pin!(accept(wire.clone(), server));
    for _ in 0..1_000 {
        match poll_once(accepted.as_mut()) {
            Poll::Ready(Ok(_)) => panic!("a handshake from a client that sent no Finished"),
            Poll::Ready(Err(_)) => return,
            // Answers the client never reads.
            Poll::Pending => wire.0.borrow_mut().to_client.clear(),
        }
    }
    panic!("the handshake neither failed nor ended with the client's bytes");
}

/// `got` is `sent`, or a panic that names the first difference (not the bytes).
#[cfg(any(test, fuzzing))]
fn assert_same(got: &[u8], sent: &[u8]) {
    if got != sent {
        let at = got.iter().zip(sent).take_while(|(a, b)| a == b).count();
        panic!(
            "{} bytes arrived of {} sent, different from byte {at}",
            got.len(),
            sent.len()
        );
    }
}
