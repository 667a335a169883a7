//! RESP2, the protocol Redis and Valkey speak: commands out, replies in.
//!
//! A command is an array of bulk strings; a reply is one of five types, arrays nested.
//! [`parse`] reads one reply from the front of a buffer and says
//! [`Parsed::Incomplete`] when the bytes so far end inside it, so the caller reads
//! more and tries again. What a store may send is bounded ([`MAX_BULK`],
//! [`MAX_ELEMENTS`], [`MAX_DEPTH`]): a reply past a limit is an error, never an
//! allocation of the size it claims.

use std::fmt;

/// The longest bulk string accepted: a stream entry holds at most one batch of
/// changes, far below this.
pub(crate) const MAX_BULK: usize = 64 << 20;
/// The most elements of one array.
pub(crate) const MAX_ELEMENTS: usize = 1 << 20;
/// The deepest nesting of arrays (an XREAD reply is four deep).
pub(crate) const MAX_DEPTH: usize = 8;

/// One reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR …`: the command failed.
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$n` then n bytes.
    Bulk(Vec<u8>),
    /// `$-1` or `*-1`.
    Nil,
    /// `*n` then n replies.
    Array(Vec<Reply>),
}

impl Reply {
    /// The elements of an array (none for nil).
    pub fn into_array(self) -> Result<Vec<Reply>, ReplyError> {
        match self {
            Reply::Array(items) => Ok(items),
            Reply::Nil => Ok(Vec::new()),
            other => Err(ReplyError::unexpected("an array", &other)),
        }
    }

    /// The bytes of a bulk string.
    pub fn into_bulk(self) -> Result<Vec<u8>, ReplyError> {
        match self {
            Reply::Bulk(bytes) => Ok(bytes),
            other => Err(ReplyError::unexpected("a bulk string", &other)),
        }
    }

    /// An error reply as an error, anything else as itself.
    pub fn ok(self) -> Result<Reply, ReplyError> {
        match self {
            Reply::Error(message) => Err(ReplyError::Store(message)),
            other => Ok(other),
        }
    }
}

/// A reply that is not what the command should get.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyError {
    /// The store answered with an error.
    Store(String),
    /// A reply of another shape.
    Unexpected(String),
}

impl ReplyError {
    fn unexpected(wanted: &str, got: &Reply) -> Self {
        let kind = match got {
            Reply::Status(_) => "a status",
            Reply::Error(message) => return ReplyError::Store(message.clone()),
            Reply::Integer(_) => "an integer",
            Reply::Bulk(_) => "a bulk string",
            Reply::Nil => "nil",
            Reply::Array(_) => "an array",
        };
        ReplyError::Unexpected(format!("expected {wanted}, got {kind}"))
    }
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplyError::Store(message) => write!(f, "the store answered: {message}"),
            ReplyError::Unexpected(what) => f.write_str(what),
        }
    }
}

impl std::error::Error for ReplyError {}

/// What [`parse`] found at the front of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// A whole reply and the bytes it took.
    Reply(Reply, usize),
    /// The bytes end inside a reply: read more.
    Incomplete,
}

/// Bytes that are not RESP2, or a reply past a limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProtocolError(pub String);

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not a RESP2 reply: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

/// Appends `args` as one command.
pub fn encode(args: &[&[u8]], out: &mut Vec<u8>) {
    out.push(b'*');
    out.extend_from_slice(args.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    for arg in args {
        out.push(b'$');
        out.extend_from_slice(arg.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// Reads one reply from the front of `bytes`.
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed, ProtocolError> {
    let mut at = 0;
    match parse_at(bytes, &mut at, 0, true)? {
        Some(reply) => Ok(Parsed::Reply(reply, at)),
        None => Ok(Parsed::Incomplete),
    }
}

/// The length of the whole reply at the front of `bytes`, checked as [`parse`] checks
/// it but without building it; `None` while it is incomplete. A reader calls this as
/// bytes arrive and [`parse`] once, so a large reply costs one copy, not one per read.
pub(crate) fn complete_length(bytes: &[u8]) -> Result<Option<usize>, ProtocolError> {
    let mut at = 0;
    Ok(parse_at(bytes, &mut at, 0, false)?.map(|_| at))
}

/// Reads the reply at `at`, advancing past it; with `build` false it only checks and
/// measures (what it returns stands for the reply).
fn parse_at(
    bytes: &[u8],
    at: &mut usize,
    depth: usize,
    build: bool,
) -> Result<Option<Reply>, ProtocolError> {
    let Some(line) = line_at(bytes, *at)? else {
        return Ok(None);
    };
    let after_line = *at + line.len() + 2;
    let (&kind, rest) = line
        .split_first()
        .ok_or_else(|| ProtocolError("an empty line".into()))?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    let reply = match kind {
        b'+' => Reply::Status(text()),
        b'-' => Reply::Error(text()),
        b':' => Reply::Integer(number(rest)?),
        b'$' => {
            let length = number(rest)?;
            if length == -1 {
                *at = after_line;
                return Ok(Some(Reply::Nil));
            }
            let length = bounded(length, MAX_BULK, "bulk string")?;
            let end = after_line + length;
            if bytes.len() < end + 2 {
                return Ok(None);
            }
            if &bytes[end..end + 2] != b"\r\n" {
                return Err(ProtocolError("a bulk string without its CRLF".into()));
            }
            *at = end + 2;
            if !build {
                return Ok(Some(Reply::Nil));
            }
            return Ok(Some(Reply::Bulk(bytes[after_line..end].to_vec())));
        }
        b'*' => {
            let count = number(rest)?;
            if count == -1 {
                *at = after_line;
                return Ok(Some(Reply::Nil));
            }
            let count = bounded(count, MAX_ELEMENTS, "array")?;
            if depth + 1 > MAX_DEPTH {
                return Err(ProtocolError(format!(
                    "arrays nested deeper than {MAX_DEPTH}"
                )));
            }
            let mut next = after_line;
            // Each element takes at least 3 bytes: never reserve what is not there.
            let room = if build { (bytes.len() - next) / 3 } else { 0 };
            let mut items = Vec::with_capacity(count.min(room));
            for _ in 0..count {
                match parse_at(bytes, &mut next, depth + 1, build)? {
                    Some(item) if build => items.push(item),
                    Some(_) => {}
                    None => return Ok(None),
                }
            }
            *at = next;
            return Ok(Some(Reply::Array(items)));
        }
        other => {
            return Err(ProtocolError(format!(
                "a reply starting with byte {other:#04x}"
            )));
        }
    };
    *at = after_line;
    Ok(Some(reply))
}

/// The line at `at`, without its CRLF; `None` when it has not all arrived. A line
/// longer than any header could be is an error.
fn line_at(bytes: &[u8], at: usize) -> Result<Option<&[u8]>, ProtocolError> {
    const LONGEST_LINE: usize = 64 << 10;
    let rest = &bytes[at.min(bytes.len())..];
    match rest.windows(2).position(|pair| pair == b"\r\n") {
        Some(end) => Ok(Some(&rest[..end])),
        None if rest.len() > LONGEST_LINE => Err(ProtocolError("a line longer than 64 KiB".into())),
        None => Ok(None),
    }
}

fn number(digits: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| {
            ProtocolError(format!(
                "{:?} is not a number",
                String::from_utf8_lossy(digits)
            ))
        })
}

fn bounded(value: i64, limit: usize, what: &str) -> Result<usize, ProtocolError> {
    usize::try_from(value)
        .ok()
        .filter(|value| *value <= limit)
        .ok_or_else(|| ProtocolError(format!("a {what} of length {value} (limit {limit})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(bytes: &[u8]) -> Reply {
        match parse(bytes).unwrap() {
            Parsed::Reply(reply, used) => {
                assert_eq!(used, bytes.len());
                reply
            }
            Parsed::Incomplete => panic!("incomplete: {bytes:?}"),
        }
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode(&[b"SET", b"k", b""], &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }

    #[test]
    fn every_reply_type_parses() {
        assert_eq!(whole(b"+OK\r\n"), Reply::Status("OK".into()));
        assert_eq!(whole(b"-ERR no\r\n"), Reply::Error("ERR no".into()));
        assert_eq!(whole(b":-12\r\n"), Reply::Integer(-12));
        assert_eq!(whole(b"$3\r\na\r\n\r\n"), Reply::Bulk(b"a\r\n".to_vec()));
        assert_eq!(whole(b"$-1\r\n"), Reply::Nil);
        assert_eq!(whole(b"*-1\r\n"), Reply::Nil);
        assert_eq!(
            whole(b"*2\r\n*1\r\n:1\r\n$0\r\n\r\n"),
            Reply::Array(vec![
                Reply::Array(vec![Reply::Integer(1)]),
                Reply::Bulk(Vec::new())
            ])
        );
    }

    #[test]
    fn every_cut_of_a_reply_is_incomplete_and_trailing_bytes_are_left() {
        let reply = b"*2\r\n$5\r\nhello\r\n*1\r\n:7\r\n";
        for cut in 0..reply.len() {
            assert_eq!(parse(&reply[..cut]).unwrap(), Parsed::Incomplete, "{cut}");
        }
        let mut two = reply.to_vec();
        two.extend_from_slice(b"+OK\r\n");
        assert!(matches!(parse(&two).unwrap(), Parsed::Reply(_, used) if used == reply.len()));
    }

    #[test]
    fn the_length_of_a_reply_is_known_before_it_is_built() {
        let reply = b"*2\r\n$5\r\nhello\r\n*1\r\n:7\r\n+OK\r\n";
        let whole = reply.len() - 5;
        for cut in 0..whole {
            assert_eq!(complete_length(&reply[..cut]).unwrap(), None, "{cut}");
        }
        assert_eq!(complete_length(reply).unwrap(), Some(whole));
        assert!(complete_length(b"$99999999999\r\n").is_err());
    }

    #[test]
    fn claims_past_the_limits_are_errors_not_allocations() {
        assert!(parse(b"$99999999999\r\n").is_err());
        assert!(parse(b"*99999999999\r\n").is_err());
        assert!(parse(b"$-2\r\n").is_err());
        assert!(parse(b"*2000000\r\n").is_err());
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1);
        assert!(parse(deep.as_bytes()).is_err());
        assert!(parse(b"?\r\n").is_err());
        assert!(parse(b":x\r\n").is_err());
        assert!(parse(b"$1\r\nab\r\n").is_err(), "no CRLF after the bulk");
        assert!(parse(&vec![b'+'; 70 << 10]).is_err(), "a line without end");
    }

    #[test]
    fn errors_become_errors_and_shapes_are_checked() {
        assert_eq!(
            Reply::Error("NOAUTH".into()).ok(),
            Err(ReplyError::Store("NOAUTH".into()))
        );
        assert!(Reply::Integer(1).into_bulk().is_err());
        assert_eq!(Reply::Nil.into_array(), Ok(Vec::new()));
    }
}
