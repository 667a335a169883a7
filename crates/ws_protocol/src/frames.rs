//! Where a client's byte stream stands between WebSocket frames (RFC 6455, 5.2).
//!
//! tungstenite reads frames into one buffer per connection and never gives its
//! capacity back: after a 64 KiB message a connection holds 64 KiB for as long as it
//! stays open, though the next messages are a few hundred bytes. The tracker cannot
//! ask tungstenite what it holds, so it follows the frame headers itself with a
//! [`FrameScanner`]: once the stream is between messages, tungstenite holds nothing
//! that a fresh context would not, and one that read a large frame can be replaced.

/// Follows the frame boundaries of one direction of a WebSocket stream, fed the same
/// bytes as the parser, in order. It checks nothing (the parser does); it only counts.
#[derive(Clone, Debug, Default)]
pub struct FrameScanner {
    /// The header under way: its bytes so far.
    header: [u8; MAX_HEADER],
    header_len: usize,
    /// Payload bytes of the current frame not yet seen.
    payload_left: u64,
    /// A fragmented data message is open: its last frame (FIN) has not come yet.
    in_message: bool,
    /// The largest frame (header and payload) since [`FrameScanner::take_largest`].
    largest: u64,
    /// Bytes since the stream was last between messages: what the parser has read
    /// of the message under way (fragments read, and the frame being read).
    held: u64,
}

/// Two bytes, up to eight of extended length, four of mask.
const MAX_HEADER: usize = 14;

impl FrameScanner {
    /// A stream at its start (or the bytes after an opening handshake).
    pub fn new() -> Self {
        Self::default()
    }

    /// Follows `bytes`, the next bytes of the stream.
    pub fn scan(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            bytes = &bytes[self.step(bytes)..];
        }
    }

    /// How many of `bytes` (the next bytes of the stream) lead to the last point
    /// where the stream is between messages: 0 if it never is within them. A
    /// connection hands its parser that many first, so that the buffer a large message
    /// grew can go even when the next message starts in the same read.
    pub fn last_boundary(&self, bytes: &[u8]) -> usize {
        let mut probe = self.clone();
        let (mut at, mut boundary) = (0, 0);
        while at < bytes.len() {
            at += probe.step(&bytes[at..]);
            if probe.between_messages() {
                boundary = at;
            }
        }
        boundary
    }

    /// Follows the first bytes of `bytes` (not empty): the rest of a payload, or one
    /// header byte. Returns how many it took.
    fn step(&mut self, bytes: &[u8]) -> usize {
        if self.payload_left > 0 {
            let taken = usize::try_from(self.payload_left)
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            self.payload_left -= taken as u64;
            self.held += taken as u64;
            self.forget_if_between();
            return taken;
        }
        self.header[self.header_len] = bytes[0];
        self.header_len += 1;
        self.held += 1;
        if let Some(payload) = self.complete_header() {
            let first = self.header[0];
            let opcode = first & 0x0f;
            let fin = first & 0x80 != 0;
            // Data frames (continuation 0, text 1, binary 2, reserved 3-7) open or
            // close a message; control frames (8-15) may come in between.
            if opcode < 8 {
                self.in_message = !fin;
            }
            // A 64-bit length may be anything a client writes: saturate.
            self.largest = self
                .largest
                .max((self.header_len as u64).saturating_add(payload));
            self.payload_left = payload;
            self.header_len = 0;
            self.forget_if_between();
        }
        1
    }

    /// Once a message (or a control frame between messages) is whole, the parser
    /// holds nothing of it.
    fn forget_if_between(&mut self) {
        if self.between_messages() {
            self.held = 0;
        }
    }

    /// The payload length once the header under way is whole.
    fn complete_header(&self) -> Option<u64> {
        if self.header_len < 2 {
            return None;
        }
        let second = self.header[1];
        let mask = if second & 0x80 != 0 { 4 } else { 0 };
        let (extended, short) = match second & 0x7f {
            126 => (2, None),
            127 => (8, None),
            len => (0, Some(u64::from(len))),
        };
        if self.header_len < 2 + extended + mask {
            return None;
        }
        Some(short.unwrap_or_else(|| {
            self.header[2..2 + extended]
                .iter()
                .fold(0, |len, &byte| (len << 8) | u64::from(byte))
        }))
    }

    /// Whether the stream is between messages: no frame, header or fragmented
    /// message under way.
    pub fn between_messages(&self) -> bool {
        self.header_len == 0 && self.payload_left == 0 && !self.in_message
    }

    /// Bytes the parser holds or has set aside for the message under way: its
    /// fragments so far and the frame being read, headers included, that frame counted
    /// whole as its header declares (tungstenite reserves room for a frame's payload
    /// once it has read the header, before the payload comes); 0 between messages.
    pub fn held(&self) -> u64 {
        self.held.saturating_add(self.payload_left)
    }

    /// The largest frame seen since the last call (header included), and starts
    /// counting anew.
    pub fn take_largest(&mut self) -> u64 {
        std::mem::take(&mut self.largest)
    }

    /// The largest frame seen since [`take_largest`](Self::take_largest), without
    /// resetting it.
    pub fn largest(&self) -> u64 {
        self.largest
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tungstenite::protocol::frame::Frame;
    use tungstenite::protocol::frame::coding::{Control, Data, OpCode};

    /// A client's frame as tungstenite writes it (masked).
    fn frame(opcode: OpCode, fin: bool, payload: &[u8]) -> Vec<u8> {
        let mut frame = match opcode {
            OpCode::Control(Control::Ping) => Frame::ping(payload.to_vec()),
            _ => Frame::message(payload.to_vec(), opcode, fin),
        };
        frame.header_mut().mask = Some([1, 2, 3, 4]);
        let mut out = Vec::new();
        frame.format(&mut out).unwrap();
        out
    }

    fn text(fin: bool, len: usize) -> Vec<u8> {
        frame(OpCode::Data(Data::Text), fin, &vec![b'x'; len])
    }

    #[test]
    fn whole_frames_of_every_length_encoding_leave_it_between_messages() {
        for len in [0, 1, 125, 126, 65_535, 65_536, 70_000] {
            let bytes = text(true, len);
            let mut scanner = FrameScanner::new();
            scanner.scan(&bytes);
            assert!(scanner.between_messages(), "{len}");
            assert_eq!(scanner.take_largest(), bytes.len() as u64, "{len}");
            assert_eq!(scanner.largest(), 0);
        }
    }

    #[test]
    fn any_split_of_the_stream_is_followed() {
        let frames = [
            text(true, 300),
            text(false, 10),
            frame(OpCode::Control(Control::Ping), true, b"hi"),
            frame(OpCode::Data(Data::Continue), true, b"rest"),
        ];
        // (start, end of header, end) of each frame; every header here is 6 bytes or
        // 8 (the 300-byte payload's 16-bit length), a mask included.
        let mut frame_ends = Vec::new();
        let mut stream = Vec::new();
        for frame in &frames {
            let header = if frame.len() > 300 { 8 } else { 6 };
            frame_ends.push((
                stream.len(),
                stream.len() + header,
                stream.len() + frame.len(),
            ));
            stream.extend(frame);
        }
        // After each byte: between messages only at the end of the first frame and at
        // the very end (the ping inside the fragmented message does not end it).
        let first_end = text(true, 300).len();
        let mut scanner = FrameScanner::new();
        for (at, byte) in stream.iter().enumerate() {
            scanner.scan(std::slice::from_ref(byte));
            let expected = at + 1 == first_end || at + 1 == stream.len();
            assert_eq!(scanner.between_messages(), expected, "after byte {at}");
            // Once a header is whole its frame counts whole: what arrived of the
            // message, plus what its frame under way still declares.
            let arrived = if at < first_end {
                at + 1
            } else {
                at + 1 - first_end
            };
            let (_, header_end, end) = *frame_ends
                .iter()
                .find(|&&(start, _, end)| start <= at && at < end)
                .expect("in a frame");
            let declared = if at + 1 >= header_end {
                end - (at + 1)
            } else {
                0
            };
            let held = if expected { 0 } else { arrived + declared };
            assert_eq!(scanner.held(), held as u64, "after byte {at}");
        }
        // In chunks of every size, the same end state.
        for chunk in 1..40 {
            let mut scanner = FrameScanner::new();
            for part in stream.chunks(chunk) {
                scanner.scan(part);
            }
            assert!(scanner.between_messages());
            assert_eq!(scanner.largest(), first_end as u64);
        }
    }

    #[test]
    fn a_header_alone_is_a_frame_under_way() {
        let whole = text(true, 65_000);
        let mut scanner = FrameScanner::new();
        scanner.scan(&whole[..7]);
        assert_eq!(scanner.held(), 7, "a header under way is what arrived");
        scanner.scan(&whole[7..8]);
        assert!(!scanner.between_messages());
        assert_eq!(
            scanner.held(),
            whole.len() as u64,
            "the frame its header declares, which the parser reserves"
        );
        assert_eq!(
            scanner.largest(),
            whole.len() as u64,
            "counted from its header"
        );
        scanner.scan(&whole[8..]);
        assert!(scanner.between_messages());
        assert_eq!(scanner.held(), 0);
    }

    #[test]
    fn the_largest_length_a_header_can_declare_saturates() {
        let mut header = vec![0x81, 0xff];
        header.extend([0xff; 8]);
        header.extend([1, 2, 3, 4]);
        let mut scanner = FrameScanner::new();
        scanner.scan(&header);
        assert_eq!(scanner.largest(), u64::MAX);
        assert_eq!(scanner.held(), u64::MAX);
    }

    #[test]
    fn the_last_boundary_is_where_the_stream_was_last_between_messages() {
        let large = text(true, 65_000);
        let small = text(true, 20);
        let mut stream = large.clone();
        stream.extend(&small);
        stream.extend(&small[..1]);
        let scanner = FrameScanner::new();
        assert_eq!(scanner.last_boundary(&stream), large.len() + small.len());
        assert_eq!(scanner.last_boundary(&large[..100]), 0, "never between");
        assert_eq!(scanner.last_boundary(&large), large.len());
        assert_eq!(scanner.last_boundary(&[]), 0);
        // A fragmented message is not over at its first frame's end, nor at a ping
        // inside it.
        let mut fragmented = text(false, 10);
        fragmented.extend(frame(OpCode::Control(Control::Ping), true, b"hi"));
        assert_eq!(scanner.last_boundary(&fragmented), 0);
        // It leaves the scanner as it was.
        let mut scanner = FrameScanner::new();
        scanner.scan(&large[..10]);
        let before = (scanner.held(), scanner.largest());
        let rest = &stream[10..];
        assert_eq!(scanner.last_boundary(rest), stream.len() - 1 - 10);
        assert_eq!((scanner.held(), scanner.largest()), before);
    }
}
