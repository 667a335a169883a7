//! HTTP responses with bencoded bodies, and parsing them back (for clients and tests).

use std::net::IpAddr;

use crate::bencode::{self, Value};
use crate::{InfoHash, PeerId};

/// The peers of an announce reply, in one of the three forms clients accept.
#[derive(Clone, Copy, Debug)]
pub enum PeerList<'a> {
    /// BEP 23: 6 bytes per IPv4 peer, sent as `peers`.
    CompactV4(&'a [u8]),
    /// BEP 7: 18 bytes per IPv6 peer, sent as `peers6` (with an empty `peers`).
    CompactV6(&'a [u8]),
    /// BEP 3: a list of dictionaries with `ip`, `port` and, unless the client asked
    /// for `no_peer_id`, `peer id`.
    Dictionaries(&'a [(IpAddr, u16, Option<PeerId>)]),
}

/// An announce reply.
#[derive(Clone, Copy, Debug)]
pub struct AnnounceResponse<'a> {
    /// Seconds the client should wait before announcing again.
    pub interval: u32,
    /// Seconds the client must wait at least.
    pub min_interval: u32,
    /// Seeders.
    pub complete: u32,
    /// Leechers.
    pub incomplete: u32,
    /// Peers to connect to.
    pub peers: PeerList<'a>,
    /// A warning to show, if any.
    pub warning: Option<&'a str>,
}

/// One torrent's scrape entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrapeStats {
    /// Seeders.
    pub complete: u32,
    /// Completed downloads.
    pub downloaded: u32,
    /// Leechers.
    pub incomplete: u32,
}

/// Writes a `200 OK` announce reply.
pub fn write_announce(out: &mut Vec<u8>, response: &AnnounceResponse<'_>, keep_alive: bool) {
    with_http_frame(out, 200, keep_alive, |body| {
        // Keys in sorted order, as bencode requires.
        body.push(b'd');
        bencode::key_int(body, b"complete", response.complete.into());
        bencode::key_int(body, b"incomplete", response.incomplete.into());
        bencode::key_int(body, b"interval", response.interval.into());
        bencode::key_int(body, b"min interval", response.min_interval.into());
        match response.peers {
            PeerList::CompactV4(peers) => bencode::key_bytes(body, b"peers", peers),
            PeerList::CompactV6(peers) => {
                bencode::key_bytes(body, b"peers", b"");
                bencode::key_bytes(body, b"peers6", peers);
            }
            PeerList::Dictionaries(peers) => {
                bencode::bytes(body, b"peers");
                body.push(b'l');
                for (ip, port, peer_id) in peers {
                    body.push(b'd');
                    bencode::key_bytes(body, b"ip", ip.to_string().as_bytes());
                    if let Some(peer_id) = peer_id {
                        bencode::key_bytes(body, b"peer id", peer_id);
                    }
                    bencode::key_int(body, b"port", (*port).into());
                    body.push(b'e');
                }
                body.push(b'e');
            }
        }
        if let Some(warning) = response.warning {
            bencode::key_bytes(body, b"warning message", warning.as_bytes());
        }
        body.push(b'e');
    });
}

/// Writes a `200 OK` scrape reply. `files` is sorted and deduplicated in place (bencode
/// dictionaries need sorted, unique keys).
pub fn write_scrape(out: &mut Vec<u8>, files: &mut Vec<(InfoHash, ScrapeStats)>, keep_alive: bool) {
    with_http_frame(out, 200, keep_alive, |body| write_scrape_body(body, files));
}

/// Writes the bencoded body of a scrape reply (sorting and deduplicating `files`),
/// without HTTP framing, for callers that keep the body (a cached full scrape).
pub fn write_scrape_body(body: &mut Vec<u8>, files: &mut Vec<(InfoHash, ScrapeStats)>) {
    files.sort_unstable_by_key(|(hash, _)| *hash);
    files.dedup_by(|a, b| a.0 == b.0);
    body.extend_from_slice(b"d5:filesd");
    for (info_hash, stats) in files.iter() {
        bencode::bytes(body, info_hash);
        body.push(b'd');
        bencode::key_int(body, b"complete", stats.complete.into());
        bencode::key_int(body, b"downloaded", stats.downloaded.into());
        bencode::key_int(body, b"incomplete", stats.incomplete.into());
        body.push(b'e');
    }
    body.extend_from_slice(b"ee");
}

/// Writes a failure: `status` with a bencoded `failure reason`. Refusals of valid
/// requests (an info hash not on the access list) use 200, as BEP 3 clients expect;
/// malformed requests use a 4xx status and close the connection.
pub fn write_failure(out: &mut Vec<u8>, status: u16, reason: &str, keep_alive: bool) {
    with_http_frame(out, status, keep_alive, |body| {
        body.push(b'd');
        bencode::key_bytes(body, b"failure reason", reason.as_bytes());
        body.push(b'e');
    });
}

/// Writes a `200` failure that also tells the client when to come back
/// (`interval`, `min interval`): clients that honour it (Transmission, rtorrent,
/// libtorrent) back off instead of retrying at once, as a private tracker's refusals
/// need.
pub fn write_failure_with_interval(
    out: &mut Vec<u8>,
    reason: &str,
    interval: u32,
    min_interval: u32,
    keep_alive: bool,
) {
    with_http_frame(out, 200, keep_alive, |body| {
        body.push(b'd');
        bencode::key_bytes(body, b"failure reason", reason.as_bytes());
        bencode::key_int(body, b"interval", i64::from(interval));
        bencode::key_int(body, b"min interval", i64::from(min_interval));
        body.push(b'e');
    });
}

/// Writes status line and headers around the body `write_body` appends.
fn with_http_frame(
    out: &mut Vec<u8>,
    status: u16,
    keep_alive: bool,
    write_body: impl FnOnce(&mut Vec<u8>),
) {
    let body_start = out.len();
    write_body(out);
    let body_len = out.len() - body_start;
    let mut head = Vec::with_capacity(128);
    write_head(&mut head, status, keep_alive, body_len);
    // Bodies are small (under a few KiB); moving one is cheaper than sizing it twice.
    out.splice(body_start..body_start, head);
}

/// Writes the status line and headers of a response whose `body_len` bytes the caller
/// sends after them (a body shared by many responses, such as a cached full scrape,
/// need not be copied into each).
pub fn write_head(out: &mut Vec<u8>, status: u16, keep_alive: bool, body_len: usize) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason_phrase(status).as_bytes());
    out.extend_from_slice(b"\r\nContent-Type: text/plain\r\nContent-Length: ");
    out.extend_from_slice(itoa::Buffer::new().format(body_len).as_bytes());
    if !keep_alive {
        out.extend_from_slice(b"\r\nConnection: close");
    }
    out.extend_from_slice(b"\r\n\r\n");
}

/// The standard phrase of the statuses a tracker sends.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// A parsed HTTP response (client side).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Whether the server will close the connection.
    pub close: bool,
    /// The body, decoded from bencode.
    pub body: Value,
    /// Bytes of input the response took.
    pub len: usize,
}

/// Parses one response from the start of `input` (client side); `Ok(None)` if more
/// bytes are needed. Requires `Content-Length`, which shoal always sends.
pub fn parse_response(input: &[u8]) -> Result<Option<HttpResponse>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(input).map_err(|err| err.to_string())? {
        httparse::Status::Complete(len) => len,
        httparse::Status::Partial => return Ok(None),
    };
    let mut content_length = None;
    let mut close = false;
    for header in response.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(header.value).map_err(|err| err.to_string())?;
            content_length = Some(
                text.trim()
                    .parse::<usize>()
                    .map_err(|err| err.to_string())?,
            );
        } else if header.name.eq_ignore_ascii_case("connection") {
            close = header.value.eq_ignore_ascii_case(b"close");
        }
    }
    let body_len = content_length.ok_or("no Content-Length")?;
    let Some(body) = input.get(head_len..head_len + body_len) else {
        return Ok(None);
    };
    let body = Value::parse_whole(body).map_err(|err| format!("bad bencode body: {err}"))?;
    Ok(Some(HttpResponse {
        status: response.code.unwrap_or(0),
        close,
        body,
        len: head_len + body_len,
    }))
}

#[cfg(test)]
mod tests;
