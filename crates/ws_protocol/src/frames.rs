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
    /// Bytes since the stream was last between messages: what the parser holds of
    /// the message under way (fragments read, and the frame being read).
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
            if self.payload_left > 0 {
                let taken = usize::try_from(self.payload_left)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                self.payload_left -= taken as u64;
                self.held += taken as u64;
                bytes = &bytes[taken..];
                self.forget_if_between();
                continue;
            }
            self.header[self.header_len] = bytes[0];
            self.header_len += 1;
            self.held += 1;
            bytes = &bytes[1..];
            if let Some(payload) = self.complete_header() {
                let first = self.header[0];
                let opcode = first & 0x0f;
                let fin = first & 0x80 != 0;
                // Data frames (continuation 0, text 1, binary 2, reserved 3-7) open or
                // close a message; control frames (8-15) may come in between.
                if opcode < 8 {
                    self.in_message = !fin;
                }
                self.largest = self.largest.max(self.header_len as u64 + payload);
                self.payload_left = payload;
                self.header_len = 0;
                self.forget_if_between();
            }
        }
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

    /// Bytes of the message under way received so far (its fragments and the frame
    /// being read, headers included); 0 between messages.
    pub fn held(&self) -> u64 {
        self.held
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
        let mut stream = text(true, 300);
        stream.extend(text(false, 10));
        stream.extend(frame(OpCode::Control(Control::Ping), true, b"hi"));
        stream.extend(frame(OpCode::Data(Data::Continue), true, b"rest"));
        // After each byte: between messages only at the end of the first frame and at
        // the very end (the ping inside the fragmented message does not end it).
        let first_end = text(true, 300).len();
        let mut scanner = FrameScanner::new();
        for (at, byte) in stream.iter().enumerate() {
            scanner.scan(std::slice::from_ref(byte));
            let expected = at + 1 == first_end || at + 1 == stream.len();
            assert_eq!(scanner.between_messages(), expected, "after byte {at}");
            let held = if at < first_end {
                at + 1
            } else {
                at + 1 - first_end
            };
            let held = if expected { 0 } else { held };
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
        scanner.scan(&whole[..8]);
        assert!(!scanner.between_messages());
        assert_eq!(
            scanner.held(),
            8,
            "what arrived, not what the header declares"
        );
        assert_eq!(
            scanner.largest(),
            whole.len() as u64,
            "counted from its header"
        );
        scanner.scan(&whole[8..]);
        assert!(scanner.between_messages());
    }
}
