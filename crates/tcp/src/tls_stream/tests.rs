//! The stream against rustls's own buffered client, over an in-memory wire whose
//! reads and writes are as small and as often refused as a test asks.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::io::Read as _;
use std::pin::pin;
use std::rc::Rc;
use std::task::Waker;

use proptest::prelude::*;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, ClientConnection, RootCertStore, SupportedProtocolVersion};

use super::*;

/// What crosses between the client and the server's end.
#[derive(Default)]
struct Wire {
    to_server: VecDeque<u8>,
    to_client: Vec<u8>,
    client_closed: bool,
    server_closed: bool,
    /// Most bytes the server's end reads at once.
    read_size: usize,
    /// Most bytes its end takes at once; every other write is refused (would block)
    /// when this is limited.
    write_room: usize,
    refuse_write: bool,
    /// Every write is refused (a client that reads nothing).
    blocked: bool,
    /// Plaintext the client has received.
    client_plaintext: Vec<u8>,
    /// The client has seen the server's close_notify.
    client_saw_close: bool,
    /// Writes the server's end took bytes from.
    writes: usize,
}

/// The server's end of the wire.
#[derive(Clone)]
struct End(Rc<RefCell<Wire>>);

impl End {
    fn new(read_size: usize, write_room: usize) -> Self {
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
struct Pair {
    client: ClientConnection,
    server: TlsStream<End>,
    wire: End,
}

fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

/// Moves what the client wrote to the server's side, and what the server wrote
/// through the client's TLS.
fn shuttle(client: &mut ClientConnection, wire: &End) {
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
fn run<F: Future>(future: F, client: &mut ClientConnection, wire: &End) -> F::Output {
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

fn configs(
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

const BOTH: [&[&SupportedProtocolVersion]; 2] =
    [&[&rustls::version::TLS13], &[&rustls::version::TLS12]];

fn connect(
    versions: &[&'static SupportedProtocolVersion],
    read_size: usize,
    write_room: usize,
) -> Pair {
    let (server, client) = configs(versions);
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
    fn client_sends(&mut self, data: &[u8]) {
        use std::io::Write as _;
        self.client.writer().write_all(data).unwrap();
        shuttle(&mut self.client, &self.wire);
    }

    /// What the server reads, `chunk` bytes of room at a time, until it has `len`.
    fn server_reads(&mut self, len: usize, chunk: usize) -> Vec<u8> {
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
    fn server_sends(&mut self, data: &[u8]) {
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
    fn client_received(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.wire.0.borrow_mut().client_plaintext)
    }

    /// Nothing received kept between messages, and no allocation for it.
    fn assert_nothing_received_kept(&self) {
        let kept = &self.server.kept;
        assert_eq!(kept.received.capacity(), 0, "received");
        assert_eq!(kept.plaintext.capacity(), 0, "plaintext");
    }

    /// Nothing kept between messages, and no allocation (once the server has written:
    /// TLS 1.3's session tickets wait for its first write).
    fn assert_idle(&self) {
        self.assert_nothing_received_kept();
        assert_eq!(self.server.kept.sending.capacity(), 0, "sending");
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|n| (n as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn messages_cross_whole_at_every_read_size_and_leave_nothing_kept() {
    for versions in BOTH {
        for read_size in [1, 5, 7, 64, 1000, 16 * 1024 + 30, READ_SIZE] {
            for chunk in [3, 100, 64 * 1024] {
                let mut pair = connect(versions, read_size, usize::MAX);
                let messages = [pattern(10, 1), pattern(40_000, 2), pattern(1, 3)];
                for message in &messages {
                    pair.client_sends(message);
                }
                let all: Vec<u8> = messages.concat();
                assert_eq!(
                    pair.server_reads(all.len(), chunk),
                    all,
                    "{read_size} {chunk}"
                );
                pair.assert_nothing_received_kept();
                let reply = pattern(100_000, 4);
                pair.server_sends(&reply);
                assert_eq!(pair.client_received(), reply);
                pair.assert_idle();
            }
        }
    }
}

/// TLS 1.3's session tickets wait for the first write and go out in the same send;
/// TLS 1.2's handshake ends with the server's Finished, which is sent at once.
#[test]
fn session_tickets_go_out_with_the_first_write() {
    let mut pair = connect(&[&rustls::version::TLS13], READ_SIZE, usize::MAX);
    assert!(!pair.server.kept.sending.is_empty(), "the tickets wait");
    let writes = pair.wire.0.borrow().writes;
    pair.server_sends(b"first");
    assert_eq!(pair.wire.0.borrow().writes, writes + 1, "one send");
    assert_eq!(pair.client_received(), b"first");
    pair.assert_idle();

    let pair = connect(&[&rustls::version::TLS12], READ_SIZE, usize::MAX);
    pair.assert_idle();
}

#[test]
fn a_socket_that_takes_little_at_a_time_gets_every_record_in_order() {
    for versions in BOTH {
        let mut pair = connect(versions, 100, 37);
        let replies: Vec<Vec<u8>> = (0..5).map(|n| pattern(3000 * n + 1, n as u8)).collect();
        for reply in &replies {
            pair.server_sends(reply);
        }
        assert_eq!(pair.client_received(), replies.concat());
        pair.assert_idle();
        pair.client_sends(b"after");
        assert_eq!(pair.server_reads(5, 64), b"after");
    }
}

#[test]
fn a_record_split_across_reads_is_kept_until_it_is_whole() {
    let mut pair = connect(&[&rustls::version::TLS13], READ_SIZE, usize::MAX);
    use std::io::Write as _;
    pair.client.writer().write_all(b"split").unwrap();
    let mut record = Vec::new();
    pair.client.write_tls(&mut record).unwrap();
    pair.wire.0.borrow_mut().to_server.extend(&record[..10]);
    let mut buffer = [0; 64];
    let read = poll_once(pin!(pair.server.read(&mut buffer)));
    assert!(read.is_pending());
    assert_eq!(pair.server.kept.received, record[..10]);
    pair.wire.0.borrow_mut().to_server.extend(&record[10..]);
    let read = run(pair.server.read(&mut buffer), &mut pair.client, &pair.wire).unwrap();
    assert_eq!(&buffer[..read], b"split");
    pair.assert_nothing_received_kept();
}

#[test]
fn close_notify_ends_the_stream_both_ways() {
    for versions in BOTH {
        let mut pair = connect(versions, READ_SIZE, usize::MAX);
        pair.client_sends(b"last words");
        pair.client.send_close_notify();
        shuttle(&mut pair.client, &pair.wire);
        assert_eq!(pair.server_reads(10, 64), b"last words");
        let mut buffer = [0; 64];
        let read = run(pair.server.read(&mut buffer), &mut pair.client, &pair.wire).unwrap();
        assert_eq!(read, 0, "the end after close_notify");

        let mut pair = connect(versions, READ_SIZE, usize::MAX);
        let server = &mut pair.server;
        run(server.close(), &mut pair.client, &pair.wire).unwrap();
        assert!(pair.wire.0.borrow().server_closed);
        assert!(pair.wire.0.borrow().client_saw_close);
    }
}

/// ACME's validation (and any client that only wants the certificate) closes at once:
/// over TLS 1.3 its close_notify arrives with its Finished (over TLS 1.2 the server's
/// Finished comes last).
#[test]
fn a_client_that_closes_with_its_finished_completes_the_handshake() {
    {
        let (server, client) = configs(&[&rustls::version::TLS13]);
        let wire = End::new(READ_SIZE, usize::MAX);
        let mut client = ClientConnection::new(client, "localhost".try_into().unwrap()).unwrap();
        let mut accept = pin!(accept(wire.clone(), server));
        let mut closed = false;
        let mut stream = loop {
            if let Poll::Ready(stream) = poll_once(accept.as_mut()) {
                break stream.unwrap();
            }
            if !client.is_handshaking() && !closed {
                client.send_close_notify();
                closed = true;
            }
            shuttle(&mut client, &wire);
        };
        assert!(closed);
        let mut buffer = [0; 16];
        let read = run(stream.read(&mut buffer), &mut client, &wire).unwrap();
        assert_eq!(read, 0);
    }
}

#[test]
fn a_key_update_from_the_client_is_answered_and_traffic_goes_on() {
    let mut pair = connect(&[&rustls::version::TLS13], READ_SIZE, usize::MAX);
    pair.client_sends(b"before");
    assert_eq!(pair.server_reads(6, 64), b"before");
    pair.client.refresh_traffic_keys().unwrap();
    pair.client_sends(b"after the update");
    assert_eq!(pair.server_reads(16, 64), b"after the update");
    pair.server_sends(b"answered under new keys");
    assert_eq!(pair.client_received(), b"answered under new keys");
    pair.assert_idle();
}

/// A client may ask for a key update 32 times between application data records, and
/// each asks for an answer. One that keeps asking and never reads does not make the
/// server keep an answer for each: rustls holds one (it updates its keys once more
/// only after the last update went out), sent with the next write.
#[test]
fn key_updates_asked_for_again_and_again_keep_one_answer() {
    let mut pair = connect(&[&rustls::version::TLS13], READ_SIZE, usize::MAX);
    pair.server_sends(b"tickets out");
    pair.client_received();
    pair.wire.0.borrow_mut().blocked = true;
    let mut buffer = [0; 64];
    // 32 at a time, the most rustls takes (a 33rd is refused as misbehaviour).
    for round in 0..300 {
        for _ in 0..32 {
            pair.client.refresh_traffic_keys().unwrap();
        }
        pair.client_sends(b"x");
        let read = run(pair.server.read(&mut buffer), &mut pair.client, &pair.wire);
        assert_eq!(read.unwrap(), 1);
        let kept = pair.server.kept.sending.len();
        assert!(kept <= RECORD_OVERHEAD, "round {round}: {kept} bytes kept");
    }
    pair.wire.0.borrow_mut().blocked = false;
    pair.server_sends(b"under the new keys");
    assert_eq!(pair.client_received(), b"under the new keys");
    pair.client_sends(b"and back");
    assert_eq!(pair.server_reads(8, 64), b"and back");
}

#[test]
fn bytes_that_are_not_tls_fail() {
    let (server, client) = configs(&[&rustls::version::TLS13]);
    let wire = End::new(READ_SIZE, usize::MAX);
    drop(client);
    wire.0
        .borrow_mut()
        .to_server
        .extend(b"GET /announce HTTP/1.1\r\n\r\n");
    // Only what the test put there: the client's hello is never sent.
    let accepted = poll_once(pin!(accept(wire.clone(), server)));
    assert!(matches!(accepted, Poll::Ready(Err(_))));

    let mut pair = connect(&[&rustls::version::TLS13], READ_SIZE, usize::MAX);
    pair.wire
        .0
        .borrow_mut()
        .to_server
        .extend(b"\x17\x03\x03\x00\x20not a record under these keys...");
    let mut buffer = [0; 64];
    let read = run(pair.server.read(&mut buffer), &mut pair.client, &pair.wire);
    assert_eq!(read.unwrap_err().kind(), io::ErrorKind::InvalidData);
}

#[test]
fn a_handshake_that_ends_early_fails() {
    let (server, client) = configs(&[&rustls::version::TLS13]);
    let wire = End::new(READ_SIZE, usize::MAX);
    let mut client = ClientConnection::new(client, "localhost".try_into().unwrap()).unwrap();
    let mut hello = Vec::new();
    client.write_tls(&mut hello).unwrap();
    wire.0
        .borrow_mut()
        .to_server
        .extend(&hello[..hello.len() / 2]);
    wire.0.borrow_mut().client_closed = true;
    let accepted = poll_once(pin!(accept(wire.clone(), server)));
    match accepted {
        Poll::Ready(Err(err)) => assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof),
        other => panic!("{:?}", other.map(|result| result.map(|_| ()))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any read sizes and message sizes: the server reads what the client sent,
    /// and keeps nothing once it has.
    #[test]
    fn any_reads_of_any_messages_deliver_the_bytes(
        read_size in 1usize..20_000,
        chunk in 1usize..70_000,
        sizes in proptest::collection::vec(1usize..40_000, 1..5),
        tls12 in any::<bool>(),
    ) {
        let versions = BOTH[usize::from(tls12)];
        let mut pair = connect(versions, read_size, usize::MAX);
        let messages: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(n, &size)| pattern(size, n as u8))
            .collect();
        for message in &messages {
            pair.client_sends(message);
        }
        let all = messages.concat();
        prop_assert_eq!(pair.server_reads(all.len(), chunk), all);
        pair.assert_nothing_received_kept();
    }
}
