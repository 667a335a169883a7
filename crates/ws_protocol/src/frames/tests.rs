use tungstenite::protocol::frame::coding::{Control, OpCode};
use tungstenite::protocol::frame::{Frame, FrameHeader};

use super::*;

/// A client's frame (masked, as clients must).
fn frame(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![(u8::from(fin) << 7) | opcode];
    let len = payload.len();
    if len < 126 {
        out.push(0x80 | len as u8);
    } else if let Ok(short) = u16::try_from(len) {
        out.push(0x80 | 126);
        out.extend_from_slice(&short.to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    let mask = [1, 2, 3, 4];
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

fn text(fin: bool, payload: &[u8]) -> Vec<u8> {
    frame(TEXT, fin, payload)
}

fn continuation(fin: bool, payload: &[u8]) -> Vec<u8> {
    frame(CONTINUATION, fin, payload)
}

fn control(opcode: u8, payload: &[u8]) -> Vec<u8> {
    frame(opcode, true, payload)
}

/// What reading `bytes` in reads of the given sizes gives, as owned events.
#[derive(Debug, PartialEq, Eq, Clone)]
enum Got {
    Text(Vec<u8>),
    Binary,
    Ping(Vec<u8>),
    Pong,
    Close(Option<u16>),
    Error(FrameError),
}

fn read_in(reader: &mut MessageReader, bytes: &[u8], reads: &[usize]) -> Vec<Got> {
    let mut got = Vec::new();
    let mut rest = bytes.to_vec();
    let mut sizes = reads.iter().copied().chain(std::iter::repeat(usize::MAX));
    while !rest.is_empty() {
        let size = sizes.next().unwrap().clamp(1, rest.len());
        let mut read: Vec<u8> = rest.drain(..size).collect();
        let mut at = 0;
        loop {
            match reader.next(&mut read, &mut at) {
                Ok(None) => break,
                Ok(Some(event)) => {
                    // Every event uses a frame of at least two bytes: more events than
                    // that is a frame read twice (a loop, were nothing to stop it).
                    assert!(got.len() < bytes.len() / 2, "{got:?}…");
                    got.push(match event {
                        Event::Text(text) => Got::Text(text.to_vec()),
                        Event::Binary => Got::Binary,
                        Event::Ping(payload) => Got::Ping(payload.to_vec()),
                        Event::Pong => Got::Pong,
                        Event::Close(code) => Got::Close(code),
                    })
                }
                Err(error) => {
                    got.push(Got::Error(error));
                    return got;
                }
            }
        }
    }
    got
}

fn reader() -> MessageReader {
    MessageReader::new(70_000, 100_000)
}

#[test]
fn whole_frames_of_every_length_encoding_are_read_where_they_lie() {
    for len in [0, 1, 125, 126, 65_535, 65_536, 69_999] {
        let payload = vec![b'x'; len];
        let mut reader = reader();
        assert_eq!(
            read_in(&mut reader, &text(true, &payload), &[]),
            vec![Got::Text(payload)]
        );
        assert!(reader.between_messages());
        assert_eq!(reader.held(), 0);
    }
}

#[test]
fn messages_split_anywhere_read_the_same_and_nothing_is_kept_after() {
    let mut stream = text(false, b"{\"a\":");
    stream.extend(control(PING, b"p"));
    stream.extend(continuation(false, b""));
    stream.extend(control(PING, b"q"));
    stream.extend(continuation(true, b"1}"));
    stream.extend(text(true, &vec![b'y'; 300]));
    stream.extend(control(PONG, b""));
    stream.extend(text(true, "é".as_bytes()));
    let whole = read_in(&mut reader(), &stream, &[]);
    assert_eq!(
        whole,
        vec![
            Got::Ping(b"p".to_vec()),
            Got::Ping(b"q".to_vec()),
            Got::Text(b"{\"a\":1}".to_vec()),
            Got::Text(vec![b'y'; 300]),
            Got::Pong,
            Got::Text("é".as_bytes().to_vec()),
        ]
    );
    for split in 1..stream.len() {
        let mut reader = reader();
        assert_eq!(
            read_in(&mut reader, &stream, &[split]),
            whole,
            "split at {split}"
        );
        // Between messages it holds no bytes at all once the last one is taken.
        let mut at = 0;
        assert_eq!(reader.next(&mut [], &mut at), Ok(None));
        assert!(reader.between_messages());
        assert_eq!(
            (reader.partial.capacity(), reader.message.capacity()),
            (0, 0)
        );
    }
    for size in 1..8 {
        let reads = vec![size; stream.len()];
        assert_eq!(
            read_in(&mut reader(), &stream, &reads),
            whole,
            "reads of {size}"
        );
    }
}

#[test]
fn a_split_frame_is_held_at_its_declared_size() {
    let mut reader = reader();
    let frame = text(true, &[b'z'; 1000]);
    let mut first = frame[..10].to_vec();
    let mut at = 0;
    assert_eq!(reader.next(&mut first, &mut at), Ok(None));
    assert_eq!(reader.held(), 1000 + 8);
    assert!(!reader.between_messages());
}

#[test]
fn every_breach_of_the_protocol_is_refused_with_its_code() {
    let mut unmasked = text(true, b"hi");
    unmasked[1] &= 0x7f;
    unmasked.truncate(2);
    unmasked.extend_from_slice(b"hi");
    let mut reserved = text(true, b"hi");
    reserved[0] |= 0x40;
    let mut unknown = text(true, b"hi");
    unknown[0] = 0x83;
    let mut fragmented_ping = control(PING, b"");
    fragmented_ping[0] &= 0x7f;
    let mut top_bit = vec![0x81, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0];
    top_bit.extend_from_slice(&[1, 2, 3, 4]);
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (unmasked, 1002),
        (reserved, 1002),
        (unknown, 1002),
        (fragmented_ping, 1002),
        (control(PING, &[0; 126]), 1002),
        (continuation(true, b"x"), 1002),
        ([text(false, b"a"), text(true, b"b")].concat(), 1002),
        (top_bit, 1002),
        (control(CLOSE, &[3]), 1002),
        (control(CLOSE, &1005u16.to_be_bytes()), 1002),
        (control(CLOSE, &[0x03, 0xe8, 0xff]), 1007),
        (text(true, &[0xff, 0xfe]), 1007),
        (
            [text(false, &[0xc3]), continuation(true, b"")].concat(),
            1007,
        ),
        (text(true, &vec![b'x'; 70_001]), 1009),
        (
            [
                text(false, &vec![b'x'; 60_000]),
                continuation(true, &vec![b'x'; 60_000]),
            ]
            .concat(),
            1009,
        ),
    ];
    for (bytes, code) in cases {
        for reads in [&[][..], &[1][..], &[3, 5, 7][..]] {
            let got = read_in(&mut reader(), &bytes, reads);
            let Some(Got::Error(error)) = got.last() else {
                panic!(
                    "no error for {:02x?}…: {got:?}",
                    &bytes[..bytes.len().min(16)]
                );
            };
            assert_eq!(error.close_code(), code, "{error:?}");
        }
    }
    // A frame too big is refused from its header, before its payload comes.
    let mut reader = reader();
    let mut header = text(true, &vec![b'x'; 70_001])[..14].to_vec();
    assert_eq!(reader.next(&mut header, &mut 0), Err(FrameError::TooBig));
}

#[test]
fn close_binary_and_codes_are_reported() {
    let mut bytes = frame(BINARY, true, b"\x00");
    bytes.extend(control(CLOSE, &1000u16.to_be_bytes()));
    // Whole, and split in every place (a binary frame from the split-frame buffer
    // was once reported again at every call).
    for split in 0..bytes.len() {
        assert_eq!(
            read_in(&mut reader(), &bytes, &[split]),
            vec![Got::Binary, Got::Close(Some(1000))],
            "split at {split}"
        );
    }
    assert_eq!(
        read_in(&mut reader(), &control(CLOSE, b""), &[]),
        vec![Got::Close(None)]
    );
}

/// Reads the server's frames back with tungstenite's parser.
fn server_frames(mut bytes: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        let mut cursor = std::io::Cursor::new(bytes);
        let (header, length) = FrameHeader::parse(&mut cursor).unwrap().unwrap();
        let start = cursor.position() as usize;
        let end = start + length as usize;
        assert!(header.is_final && header.mask.is_none());
        frames.push(Frame::from_payload(
            header,
            bytes[start..end].to_vec().into(),
        ));
        bytes = &bytes[end..];
    }
    frames
}

#[test]
fn server_frames_are_final_unmasked_and_as_long_as_their_payload() {
    let mut out = b"kept".to_vec();
    for len in [0, 125, 126, 65_535, 65_536] {
        write_text(&mut out, |out| out.extend(std::iter::repeat_n(b'a', len)));
    }
    write_pong(&mut out, b"p");
    write_close(&mut out, 1009, "message too big");
    assert_eq!(&out[..4], b"kept");
    let frames = server_frames(&out[4..]);
    let lengths: Vec<usize> = frames.iter().map(|frame| frame.payload().len()).collect();
    assert_eq!(lengths, vec![0, 125, 126, 65_535, 65_536, 1, 17]);
    assert_eq!(frames[5].header().opcode, OpCode::Control(Control::Pong));
    assert_eq!(frames[6].header().opcode, OpCode::Control(Control::Close));
    assert_eq!(&frames[6].payload()[..2], &1009u16.to_be_bytes());
}
