//! The stream against rustls's own buffered client, over the in-memory wire of
//! [`rig`](super::rig).

use std::pin::pin;

use proptest::prelude::*;
use rustls::ClientConnection;

use super::rig::*;
use super::*;

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

/// A handshake message may come split across records; rustls holds the part that came
/// in the received bytes. The server writing meanwhile must hand rustls those bytes
/// (given none, it panicked: one record could stop the tracker).
#[test]
fn a_handshake_message_split_across_records_lets_the_server_write_meanwhile() {
    let (mut server, wire, mut sealer) = taken_over();
    wire.0
        .borrow_mut()
        .to_server
        .extend(sealer.seal(APPLICATION_DATA, b"ask", 0));
    let mut buffer = [0; 64];
    let read = poll_once(pin!(server.read(&mut buffer)));
    assert!(matches!(read, Poll::Ready(Ok(3))));
    // A KeyUpdate (type 24, one byte of body: no update asked for) in two records.
    wire.0
        .borrow_mut()
        .to_server
        .extend(sealer.seal(HANDSHAKE, &[24, 0, 0], 0));
    assert!(poll_once(pin!(server.read(&mut buffer))).is_pending());
    assert!(!server.kept.received.is_empty(), "the start of the message");
    for reply in [&b"answer"[..], b"another"] {
        let written = poll_once(pin!(async {
            server.write_all(reply).await?;
            server.flush().await
        }));
        assert!(matches!(written, Poll::Ready(Ok(()))), "{written:?}");
    }
    wire.0
        .borrow_mut()
        .to_server
        .extend(sealer.seal(HANDSHAKE, &[1, 0], 0));
    assert!(poll_once(pin!(server.read(&mut buffer))).is_pending());
    assert_eq!(server.kept.received.capacity(), 0, "the message is used");
    let written = poll_once(pin!(server.write_all(b"after")));
    assert!(matches!(written, Poll::Ready(Ok(()))), "{written:?}");
}

/// A handshake message declared 64 KiB long, sent a byte a record with each record
/// padded to its largest: rustls keeps every record until the message is whole (a
/// GiB per connection at this rate). The server refuses past what an honest client
/// could leave unprocessed.
#[test]
fn a_handshake_message_trickled_in_padded_records_is_refused() {
    let (mut server, wire, mut sealer) = taken_over();
    let mut records = vec![sealer.seal(HANDSHAKE, &[24, 0, 0xff], 0)];
    for _ in 0..40 {
        records.push(sealer.seal(HANDSHAKE, &[0], 16_000));
    }
    let mut buffer = [0; 64];
    for (n, record) in records.iter().enumerate() {
        wire.0.borrow_mut().to_server.extend(record);
        match poll_once(pin!(server.read(&mut buffer))) {
            Poll::Pending => assert!(
                server.kept.received.len() <= MAX_RECEIVED,
                "record {n}: {} bytes kept",
                server.kept.received.len()
            ),
            Poll::Ready(Err(err)) => {
                assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
                assert!(n > 1, "refused at record {n}");
                return;
            }
            Poll::Ready(Ok(read)) => panic!("read {read}"),
        }
    }
    panic!("never refused");
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

/// The fuzz target's hand-sealed records: a KeyUpdate split in two with a write
/// between (the panic), and a trickle of padded handshake records (the cap).
#[test]
fn sealed_records_in_the_fuzz_format() {
    rig::fuzz(&[
        4, 0, 0, 0, 3, 0, 1, 0, 0, 2, 3, 0, 24, 0, 0, 1, 0, 0, 3, 5, 0, 2, 2, 0, 1, 0, 1, 0, 0,
    ]);
    let mut trickle = vec![4, 0, 0, 2, 3, 0, 24, 0, 0xff];
    for _ in 0..40 {
        trickle.extend_from_slice(&[2, 1, 250, 0, 1, 0, 0]);
    }
    rig::fuzz(&trickle);
}

/// Inputs the fuzz target once failed on (its own checks, not the stream): plaintext
/// from a TLS 1.3 record whose outer type was changed (rustls authenticates the fixed
/// value, so the record is genuine), and a key update's record begun in the read that
/// ended a message (before a read, and before a write).
#[test]
fn fuzz_inputs_that_once_failed() {
    rig::fuzz(&[
        0x00, 0x3c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x03, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00,
    ]);
    rig::fuzz(&[
        0x00, 0x02, 0x03, 0x13, 0x16, 0x27, 0x00, 0xb1, 0x01, 0x00, 0x00, 0x00, 0x01, 0x3b, 0x00,
        0x00, 0xc3, 0xc3, 0xc3, 0xc3, 0xc3, 0xc3, 0xff, 0x1f, 0xc3, 0x01, 0x03, 0x01, 0x02, 0x09,
        0x00, 0x00,
    ]);
    rig::fuzz(&[
        0x00, 0x01, 0x00, 0x02, 0x02, 0x02, 0x02, 0x00, 0x00, 0x00, 0xb5, 0x02, 0x02, 0x1a, 0x02,
        0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b,
        0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b,
        0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b,
        0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7c, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x02, 0x02, 0x02, 0x02,
        0x02, 0x9c, 0x01, 0x3a, 0x7b, 0x7b, 0x02, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b,
        0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x7b, 0x02, 0x02, 0x9c, 0x01, 0x3a, 0x7b, 0x7b, 0x7b, 0x02,
        0x02, 0x02, 0x02, 0x02, 0x9c, 0x01, 0x3a, 0x00, 0x00, 0x02,
    ]);
}
