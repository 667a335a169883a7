//! WebSocket frames on the server's side (RFC 6455, 5), without buffers of their own
//! while a connection is between messages.
//!
//! A tracker holds tens of thousands of idle WebSocket connections, so what each one
//! keeps between messages is the memory that counts. [`MessageReader`] parses frames
//! in the bytes the connection just read (unmasking them there), and keeps bytes only
//! for what did not arrive whole: a frame split across reads, or a message sent in
//! fragments. Once the message is served, those buffers go. Frames the server sends
//! are written straight into the connection's output ([`write_text`], [`write_close`],
//! [`write_pong`]).
//!
//! What it refuses, as a server must: unmasked client frames, reserved bits (no
//! extension is negotiated), unknown opcodes, control frames that are fragmented or
//! longer than 125 bytes, continuation frames outside a message and data frames
//! inside one, a 64-bit length with its top bit set, close frames of one byte or
//! with a code or reason that is not allowed, and text that is not UTF-8.

/// Opcodes.
const CONTINUATION: u8 = 0x0;
const TEXT: u8 = 0x1;
const BINARY: u8 = 0x2;
const CLOSE: u8 = 0x8;
const PING: u8 = 0x9;
const PONG: u8 = 0xA;

/// The longest frame header: two bytes, eight of extended length, four of mask.
const MAX_HEADER: usize = 14;

/// What the client sent, one at a time ([`MessageReader::next`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// A whole text message (checked to be UTF-8).
    Text(&'a [u8]),
    /// The first frame of a binary message (the tracker takes none: it closes).
    Binary,
    /// A ping, to be answered with a pong carrying `payload`.
    Ping(&'a [u8]),
    /// A pong (nothing to do).
    Pong,
    /// The client closes, with its code if it gave one.
    Close(Option<u16>),
}

/// Why the stream cannot be read on (the connection closes with the code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// The frames break the protocol (close code 1002).
    Protocol(&'static str),
    /// A frame or message past its limit (1009).
    TooBig,
    /// A text message that is not UTF-8 (1007).
    NotUtf8,
}

impl FrameError {
    /// The close code to send.
    pub fn close_code(self) -> u16 {
        match self {
            Self::Protocol(_) => 1002,
            Self::TooBig => 1009,
            Self::NotUtf8 => 1007,
        }
    }
}

/// Reads a client's frames out of the bytes each read brings.
#[derive(Debug, Default)]
pub struct MessageReader {
    /// The bytes of a frame (header first) that did not arrive whole; empty between
    /// frames.
    partial: Vec<u8>,
    /// The fragments so far of a text message sent in several frames.
    message: Vec<u8>,
    /// A fragmented message is open (its last frame has not come).
    in_message: bool,
    /// What the last event lent out of the reader's own buffers, which goes at the
    /// next call.
    lent: Lent,
    max_frame: usize,
    max_message: usize,
}

/// Which buffer an event borrowed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Lent {
    #[default]
    Nothing,
    /// A frame that was split across reads, served from `partial`.
    Partial,
    /// A message sent in fragments, served from `message`.
    Message,
}

/// A frame whose header is whole.
#[derive(Clone, Copy)]
struct Header {
    fin: bool,
    opcode: u8,
    mask: [u8; 4],
    /// Header bytes.
    len: usize,
    payload: usize,
}

impl MessageReader {
    /// A reader refusing frames over `max_frame` and messages over `max_message`
    /// payload bytes.
    pub fn new(max_frame: usize, max_message: usize) -> Self {
        Self {
            max_frame,
            max_message,
            ..Self::default()
        }
    }

    /// Bytes kept for what has not arrived whole: a split frame, the fragments of a
    /// message (the partial frame counted at the size its header declares, for which
    /// room is made once the header is read).
    pub fn held(&self) -> usize {
        let frame = match parse_header(&self.partial) {
            Ok(Some(header)) => header.len + header.payload,
            _ => self.partial.len(),
        };
        frame + self.message.len()
    }

    /// Whether the stream is between messages: nothing partial, no message open.
    pub fn between_messages(&self) -> bool {
        self.partial.is_empty() && !self.in_message
    }

    /// The next event in `input`, the bytes of the latest read, from `*at` on
    /// (advanced past what was used); `None` once `input` is used up, what is left of
    /// a frame kept for the next read. Payloads are unmasked in `input`. After an
    /// error the stream is unusable.
    pub fn next<'a>(
        &'a mut self,
        input: &'a mut [u8],
        at: &mut usize,
    ) -> Result<Option<Event<'a>>, FrameError> {
        match std::mem::take(&mut self.lent) {
            Lent::Nothing => {}
            Lent::Partial => self.partial = Vec::new(),
            Lent::Message => self.message = Vec::new(),
        }
        // Finds the next whole frame: where its payload lies, in `partial` or `input`.
        loop {
            let (header, in_partial, start) = if self.partial.is_empty() {
                let rest = &input[*at..];
                match parse_header(rest)? {
                    Some(header) if rest.len() >= header.len + header.payload => {
                        self.check(&header)?;
                        let start = *at + header.len;
                        *at = start + header.payload;
                        (header, false, start)
                    }
                    Some(header) => {
                        // Split across reads: keep it, with room for all of it.
                        self.check(&header)?;
                        self.partial.reserve_exact(header.len + header.payload);
                        self.partial.extend_from_slice(rest);
                        *at = input.len();
                        return Ok(None);
                    }
                    None => {
                        self.partial.extend_from_slice(rest);
                        *at = input.len();
                        return Ok(None);
                    }
                }
            } else {
                // Complete the header first, then the payload, from this read.
                let rest = &input[*at..];
                let header = match parse_header(&self.partial)? {
                    Some(header) => header,
                    None => {
                        let wanted = MAX_HEADER - self.partial.len();
                        let taken = wanted.min(rest.len());
                        let before = self.partial.len();
                        self.partial.extend_from_slice(&rest[..taken]);
                        match parse_header(&self.partial)? {
                            Some(header) => {
                                // Give back what went past the header.
                                let used = header.len - before;
                                self.partial.truncate(header.len);
                                *at += used;
                                self.check(&header)?;
                                self.partial.reserve_exact(header.payload);
                                header
                            }
                            None => {
                                *at += taken;
                                return Ok(None);
                            }
                        }
                    }
                };
                let rest = &input[*at..];
                let missing = header.len + header.payload - self.partial.len();
                let taken = missing.min(rest.len());
                self.partial.extend_from_slice(&rest[..taken]);
                *at += taken;
                if taken < missing {
                    return Ok(None);
                }
                (header, true, header.len)
            };
            let payload: &mut [u8] = if in_partial {
                &mut self.partial[start..start + header.payload]
            } else {
                &mut input[start..start + header.payload]
            };
            unmask(payload, header.mask);
            match header.opcode {
                TEXT if header.fin => {
                    // One frame, one message: served where it lies.
                    std::str::from_utf8(payload).map_err(|_| FrameError::NotUtf8)?;
                    let text: &'a [u8] = if in_partial {
                        self.lent = Lent::Partial;
                        &self.partial[start..]
                    } else {
                        &input[start..start + header.payload]
                    };
                    return Ok(Some(Event::Text(text)));
                }
                TEXT | CONTINUATION => {
                    if self.message.len() + payload.len() > self.max_message {
                        return Err(FrameError::TooBig);
                    }
                    self.message.extend_from_slice(payload);
                    if in_partial {
                        self.partial = Vec::new();
                    }
                    self.in_message = !header.fin;
                    if header.fin {
                        std::str::from_utf8(&self.message).map_err(|_| FrameError::NotUtf8)?;
                        self.lent = Lent::Message;
                        return Ok(Some(Event::Text(&self.message)));
                    }
                }
                BINARY => {
                    // Refused by the caller; its bytes are used all the same, so that
                    // reading on gives what follows, never this frame again.
                    if in_partial {
                        self.partial = Vec::new();
                    }
                    return Ok(Some(Event::Binary));
                }
                PING => {
                    // Control frames may come between a message's fragments: a ping
                    // from `partial` leaves `message` as it is.
                    let ping: &'a [u8] = if in_partial {
                        self.lent = Lent::Partial;
                        &self.partial[start..]
                    } else {
                        &input[start..start + header.payload]
                    };
                    return Ok(Some(Event::Ping(ping)));
                }
                PONG => {
                    if in_partial {
                        self.partial = Vec::new();
                    }
                    return Ok(Some(Event::Pong));
                }
                _ => {
                    // CLOSE (`parse_header` lets no other opcode through).
                    let code = close_code(payload)?;
                    if in_partial {
                        self.partial = Vec::new();
                    }
                    return Ok(Some(Event::Close(code)));
                }
            }
        }
    }

    /// The rules a header must follow before anything is kept for its frame.
    fn check(&self, header: &Header) -> Result<(), FrameError> {
        let control = header.opcode >= CLOSE;
        if control {
            if !header.fin {
                return Err(FrameError::Protocol("a fragmented control frame"));
            }
            if header.payload > 125 {
                return Err(FrameError::Protocol("a control frame over 125 bytes"));
            }
            return Ok(());
        }
        match header.opcode {
            CONTINUATION if !self.in_message => {
                return Err(FrameError::Protocol(
                    "a continuation frame outside a message",
                ));
            }
            TEXT | BINARY if self.in_message => {
                return Err(FrameError::Protocol(
                    "a new message inside a fragmented one",
                ));
            }
            _ => {}
        }
        if header.payload > self.max_frame || self.message.len() + header.payload > self.max_message
        {
            return Err(FrameError::TooBig);
        }
        Ok(())
    }
}

/// Reads a frame header from the start of `bytes`: `None` until it is whole.
fn parse_header(bytes: &[u8]) -> Result<Option<Header>, FrameError> {
    let [first, second, ..] = *bytes else {
        return Ok(None);
    };
    if first & 0x70 != 0 {
        return Err(FrameError::Protocol("reserved bits set"));
    }
    let opcode = first & 0x0f;
    if !matches!(opcode, CONTINUATION | TEXT | BINARY | CLOSE | PING | PONG) {
        return Err(FrameError::Protocol("an unknown opcode"));
    }
    if second & 0x80 == 0 {
        return Err(FrameError::Protocol("an unmasked client frame"));
    }
    let (extended, short) = match second & 0x7f {
        126 => (2, None),
        127 => (8, None),
        len => (0, Some(usize::from(len))),
    };
    let len = 2 + extended + 4;
    if bytes.len() < len {
        return Ok(None);
    }
    let payload = match short {
        Some(payload) => payload,
        None => {
            let declared = bytes[2..2 + extended]
                .iter()
                .fold(0u64, |len, &byte| (len << 8) | u64::from(byte));
            if declared >> 63 != 0 {
                return Err(FrameError::Protocol("a length with its top bit set"));
            }
            // Past any limit on this machine: refused by `check` as too big.
            usize::try_from(declared).unwrap_or(usize::MAX / 2)
        }
    };
    let mut mask = [0; 4];
    mask.copy_from_slice(&bytes[2 + extended..len]);
    Ok(Some(Header {
        fin: first & 0x80 != 0,
        opcode,
        mask,
        len,
        payload,
    }))
}

fn unmask(payload: &mut [u8], mask: [u8; 4]) {
    let mut words = payload.chunks_exact_mut(8);
    let wide = u64::from_ne_bytes([
        mask[0], mask[1], mask[2], mask[3], mask[0], mask[1], mask[2], mask[3],
    ]);
    for word in &mut words {
        let value = u64::from_ne_bytes(word.try_into().expect("8 bytes")) ^ wide;
        word.copy_from_slice(&value.to_ne_bytes());
    }
    for (byte, key) in words.into_remainder().iter_mut().zip(mask.iter().cycle()) {
        *byte ^= key;
    }
}

/// The code of a close frame's payload: none, or a code a client may send followed by
/// a UTF-8 reason.
fn close_code(payload: &[u8]) -> Result<Option<u16>, FrameError> {
    match payload {
        [] => Ok(None),
        [_] => Err(FrameError::Protocol("a close frame of one byte")),
        [high, low, reason @ ..] => {
            let code = u16::from_be_bytes([*high, *low]);
            // 1004 is reserved; 1005, 1006 and 1015 are never sent (RFC 6455, 7.4).
            let allowed = matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999);
            if !allowed {
                return Err(FrameError::Protocol("a close code a client may not send"));
            }
            std::str::from_utf8(reason).map_err(|_| FrameError::NotUtf8)?;
            Ok(Some(code))
        }
    }
}

/// Appends a server frame (final, unmasked) of `opcode` whose payload `write` appends.
fn write_frame(out: &mut Vec<u8>, opcode: u8, write: impl FnOnce(&mut Vec<u8>)) {
    // Room for the longest header first; the payload is written in place after it and
    // the header, once its length is known, is moved up against it.
    let start = out.len();
    out.extend_from_slice(&[0; 10]);
    write(out);
    let payload = out.len() - start - 10;
    let mut header = [0u8; 10];
    header[0] = 0x80 | opcode;
    let header_len = if payload < 126 {
        header[1] = payload as u8;
        2
    } else if let Ok(short) = u16::try_from(payload) {
        header[1] = 126;
        header[2..4].copy_from_slice(&short.to_be_bytes());
        4
    } else {
        header[1] = 127;
        header[2..10].copy_from_slice(&(payload as u64).to_be_bytes());
        10
    };
    let gap = 10 - header_len;
    out[start + gap..start + 10].copy_from_slice(&header[..header_len]);
    out.drain(start..start + gap);
}

/// Appends a text frame whose payload `write` appends (UTF-8, which the caller keeps).
pub fn write_text(out: &mut Vec<u8>, write: impl FnOnce(&mut Vec<u8>)) {
    write_frame(out, TEXT, write);
}

/// Appends a pong answering a ping's `payload`.
pub fn write_pong(out: &mut Vec<u8>, payload: &[u8]) {
    write_frame(out, PONG, |out| out.extend_from_slice(payload));
}

/// Appends a close frame with `code` and `reason` (at most 123 bytes).
pub fn write_close(out: &mut Vec<u8>, code: u16, reason: &str) {
    write_frame(out, CLOSE, |out| {
        out.extend_from_slice(&code.to_be_bytes());
        out.extend_from_slice(&reason.as_bytes()[..reason.len().min(123)]);
    });
}

/// Appends a close frame without a code (the answer to a client's close that gave
/// none).
pub fn write_empty_close(out: &mut Vec<u8>) {
    write_frame(out, CLOSE, |_| {});
}

#[cfg(test)]
mod tests;
