//! Parsing HTTP tracker requests.

use std::borrow::Cow;
use std::net::IpAddr;

use shoal_private::{KeyDigest, KeyPlaces, Passkey};
use thiserror::Error;

use crate::query::{decode_fixed, pairs, parse_i64, parse_u64};
use crate::{InfoHash, PeerId};

/// Most headers a request may have (the array httparse fills lives on the stack).
pub const MAX_HEADERS_LIMIT: usize = 64;

/// What the parser accepts.
#[derive(Clone, Debug)]
pub struct ParseLimits<'a> {
    /// Path of announce requests, e.g. `/announce`.
    pub announce_path: &'a str,
    /// Path of scrape requests, e.g. `/scrape`.
    pub scrape_path: &'a str,
    /// Largest request (request line and headers), in bytes.
    pub max_request_len: usize,
    /// Most headers (at most [`MAX_HEADERS_LIMIT`]).
    pub max_headers: usize,
    /// Most info hashes in one scrape.
    pub max_scrape_torrents: usize,
    /// When behind a reverse proxy: the header that carries the client's address.
    pub proxy_header: Option<ProxyHeader<'a>>,
    /// Private mode: where requests carry their passkey (`/<key>/announce`,
    /// `/announce/<key>`, `?passkey=<key>`); the path routed on is the target's with
    /// the key taken out.
    pub private: Option<KeyPlaces<'a>>,
}

/// A header naming the client's address, set by a reverse proxy.
#[derive(Clone, Copy, Debug)]
pub struct ProxyHeader<'a> {
    /// Header name, matched case-insensitively (e.g. `X-Forwarded-For`).
    pub name: &'a str,
    /// The header may list several addresses (`client, proxy1, proxy2`): take the last
    /// one (the one your own proxy appended) rather than the first.
    pub use_last: bool,
}

/// A complete, valid request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedRequest {
    /// What is asked.
    pub request: Request,
    /// Whether the client wants the connection kept open afterwards.
    pub keep_alive: bool,
    /// The client address from the proxy header, if one is configured.
    pub forwarded_ip: Option<IpAddr>,
    /// In private mode, the digest of the passkey the request carried (the key itself
    /// goes no further than the parser).
    pub key: Option<KeyDigest>,
    /// The start of the `User-Agent` header, for client rules.
    pub user_agent: UserAgent,
    /// Bytes of input the request took; the next request starts there.
    pub len: usize,
}

/// Bytes of a `User-Agent` kept: client rules compare prefixes up to this long.
pub const USER_AGENT_PREFIX: usize = 64;

/// The first [`USER_AGENT_PREFIX`] bytes of a request's `User-Agent` (empty without
/// one), kept inline: no allocation per request.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UserAgent {
    len: u8,
    bytes: [u8; USER_AGENT_PREFIX],
}

impl UserAgent {
    /// None given.
    pub const NONE: Self = Self {
        len: 0,
        bytes: [0; USER_AGENT_PREFIX],
    };

    /// The start of `value`.
    pub fn new(value: &[u8]) -> Self {
        let mut agent = Self::NONE;
        let len = value.len().min(USER_AGENT_PREFIX);
        agent.bytes[..len].copy_from_slice(&value[..len]);
        agent.len = len as u8;
        agent
    }

    /// The bytes kept.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl Default for UserAgent {
    fn default() -> Self {
        Self::NONE
    }
}

impl std::fmt::Debug for UserAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "UserAgent({:?})",
            String::from_utf8_lossy(self.as_bytes())
        )
    }
}

/// An announce or a scrape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Join or refresh a swarm and get peers.
    Announce(AnnounceRequest),
    /// Get the counts of some torrents (none listed: all of them, a "full scrape").
    Scrape(ScrapeRequest),
}

/// An announce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnounceRequest {
    /// The torrent.
    pub info_hash: InfoHash,
    /// The client's peer id.
    pub peer_id: PeerId,
    /// The port the client accepts connections on.
    pub port: u16,
    /// Bytes uploaded.
    pub uploaded: u64,
    /// Bytes downloaded.
    pub downloaded: u64,
    /// Bytes left; `None` when the client did not say (treated as still downloading).
    pub left: Option<u64>,
    /// What happened.
    pub event: AnnounceEvent,
    /// Peers wanted; `None` or ≤ 0 means the tracker's default.
    pub numwant: Option<i64>,
    /// Compact peer lists (BEP 23), the default; `compact=0` asks for dictionaries.
    pub compact: bool,
    /// Leave peer ids out of dictionary peer lists.
    pub no_peer_id: bool,
}

/// A scrape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScrapeRequest {
    /// The torrents, in request order; empty for a full scrape.
    pub info_hashes: Vec<InfoHash>,
}

/// The `event` of an announce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AnnounceEvent {
    /// No event (also `empty` and BEP 21's `paused`).
    #[default]
    None,
    /// The download started.
    Started,
    /// The download completed.
    Completed,
    /// The client is leaving.
    Stopped,
}

/// A request that cannot be served; answered with `status` and a bencoded failure
/// reason, after which the connection closes.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{status}: {reason}")]
pub struct RequestError {
    /// HTTP status code.
    pub status: u16,
    /// The failure reason sent to the client.
    pub reason: Cow<'static, str>,
}

impl RequestError {
    fn new(status: u16, reason: impl Into<Cow<'static, str>>) -> Self {
        Self {
            status,
            reason: reason.into(),
        }
    }

    fn bad(reason: impl Into<Cow<'static, str>>) -> Self {
        Self::new(400, reason)
    }
}

/// Parses the request at the start of `input`.
///
/// `Ok(None)`: the request is not complete yet (and not over the size limit); read more.
pub fn parse_request(
    input: &[u8],
    limits: &ParseLimits<'_>,
) -> Result<Option<ParsedRequest>, RequestError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS_LIMIT];
    let max_headers = limits.max_headers.clamp(1, MAX_HEADERS_LIMIT);
    let mut request = httparse::Request::new(&mut headers[..max_headers]);
    let len = match request.parse(input) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if input.len() >= limits.max_request_len => {
            return Err(RequestError::new(431, "request too large"));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(RequestError::new(431, "too many headers"));
        }
        Err(_) => return Err(RequestError::bad("malformed HTTP request")),
    };
    if len > limits.max_request_len {
        return Err(RequestError::new(431, "request too large"));
    }
    let method = request.method.unwrap_or_default();
    if method != "GET" {
        return Err(RequestError::new(405, "only GET requests are served"));
    }
    let http_1_1 = request.version == Some(1);

    let mut close = false;
    let mut keep_alive_token = false;
    let mut forwarded: Option<&[u8]> = None;
    let mut user_agent = UserAgent::NONE;
    for header in request.headers.iter() {
        if header.name.eq_ignore_ascii_case("user-agent") {
            user_agent = UserAgent::new(header.value);
        } else if header.name.eq_ignore_ascii_case("connection") {
            for token in header.value.split(|&b| b == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if header.name.eq_ignore_ascii_case("content-length") {
            if header.value.trim_ascii() != b"0" {
                return Err(RequestError::bad("request bodies are not accepted"));
            }
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(RequestError::new(
                501,
                "transfer encodings are not supported",
            ));
        } else if let Some(proxy) = &limits.proxy_header
            && header.name.eq_ignore_ascii_case(proxy.name)
        {
            forwarded = Some(header.value);
        }
    }
    let keep_alive = if http_1_1 {
        !close
    } else {
        keep_alive_token && !close
    };

    let forwarded_ip = match &limits.proxy_header {
        None => None,
        Some(proxy) => Some(
            forwarded
                .and_then(|value| forwarded_address(value, proxy.use_last))
                .ok_or_else(|| {
                    RequestError::bad(format!("missing or invalid {} header", proxy.name))
                })?,
        ),
    };

    let target = request.path.unwrap_or_default().as_bytes();
    let (path, query, key) = match &limits.private {
        None => match target.iter().position(|&b| b == b'?') {
            Some(q) => (&target[..q], &target[q + 1..], None),
            None => (target, &target[target.len()..], None),
        },
        Some(places) => {
            let located = places.locate(target);
            (
                located.path,
                located.query,
                located.key.map(Passkey::digest),
            )
        }
    };
    let request = if path == limits.announce_path.as_bytes() {
        Request::Announce(parse_announce(query)?)
    } else if path == limits.scrape_path.as_bytes() {
        Request::Scrape(parse_scrape(query, limits.max_scrape_torrents)?)
    } else {
        return Err(RequestError::new(404, "not found"));
    };
    Ok(Some(ParsedRequest {
        request,
        keep_alive,
        forwarded_ip,
        key,
        user_agent,
        len,
    }))
}

/// The first or last address of a comma-separated proxy header value (such as
/// `X-Forwarded-For`), if it is one a client can have: not unspecified, multicast or
/// broadcast, which would otherwise be announced into swarms. Shared by the WebTorrent
/// tracker's opening request.
pub fn forwarded_address(value: &[u8], use_last: bool) -> Option<IpAddr> {
    let mut parts = value.split(|&b| b == b',');
    let part = if use_last {
        parts.next_back()
    } else {
        parts.next()
    }?;
    let text = std::str::from_utf8(part.trim_ascii()).ok()?;
    let ip = text.parse::<IpAddr>().ok()?.to_canonical();
    let usable = match ip {
        IpAddr::V4(v4) => !v4.is_unspecified() && !v4.is_multicast() && !v4.is_broadcast(),
        IpAddr::V6(v6) => !v6.is_unspecified() && !v6.is_multicast(),
    };
    usable.then_some(ip)
}

fn parse_announce(query: &[u8]) -> Result<AnnounceRequest, RequestError> {
    let mut info_hash = None;
    let mut peer_id = None;
    let mut port = None;
    let mut request = AnnounceRequest {
        info_hash: [0; 20],
        peer_id: [0; 20],
        port: 0,
        uploaded: 0,
        downloaded: 0,
        left: None,
        event: AnnounceEvent::None,
        numwant: None,
        compact: true,
        no_peer_id: false,
    };
    for (key, value) in pairs(query) {
        match key {
            b"info_hash" => {
                let hash =
                    decode_fixed(value).ok_or_else(|| RequestError::bad("invalid info_hash"))?;
                if info_hash.replace(hash).is_some() {
                    return Err(RequestError::bad("more than one info_hash in an announce"));
                }
            }
            b"peer_id" => {
                peer_id =
                    Some(decode_fixed(value).ok_or_else(|| RequestError::bad("invalid peer_id"))?)
            }
            b"port" => {
                let number = parse_u64(value).and_then(|n| u16::try_from(n).ok());
                port = Some(number.ok_or_else(|| RequestError::bad("invalid port"))?);
            }
            b"uploaded" => {
                request.uploaded =
                    parse_u64(value).ok_or_else(|| RequestError::bad("invalid uploaded"))?
            }
            b"downloaded" => {
                request.downloaded =
                    parse_u64(value).ok_or_else(|| RequestError::bad("invalid downloaded"))?;
            }
            b"left" => {
                request.left =
                    Some(parse_u64(value).ok_or_else(|| RequestError::bad("invalid left"))?)
            }
            b"event" => {
                request.event = match value {
                    b"started" => AnnounceEvent::Started,
                    b"completed" => AnnounceEvent::Completed,
                    b"stopped" => AnnounceEvent::Stopped,
                    b"" | b"empty" | b"paused" => AnnounceEvent::None,
                    _ => return Err(RequestError::bad("invalid event")),
                };
            }
            b"numwant" => {
                request.numwant =
                    Some(parse_i64(value).ok_or_else(|| RequestError::bad("invalid numwant"))?)
            }
            b"compact" => request.compact = value != b"0",
            b"no_peer_id" => request.no_peer_id = value != b"0",
            // ip, key, trackerid, supportcrypto, … are not needed by a public tracker;
            // an address in `ip` is ignored so nobody can announce someone else.
            _ => {}
        }
    }
    request.info_hash = info_hash.ok_or_else(|| RequestError::bad("missing info_hash"))?;
    request.peer_id = peer_id.ok_or_else(|| RequestError::bad("missing peer_id"))?;
    request.port = port.ok_or_else(|| RequestError::bad("missing port"))?;
    Ok(request)
}

fn parse_scrape(query: &[u8], max_torrents: usize) -> Result<ScrapeRequest, RequestError> {
    let mut info_hashes = Vec::new();
    for (key, value) in pairs(query) {
        if key == b"info_hash" {
            if info_hashes.len() == max_torrents {
                return Err(RequestError::bad(format!(
                    "too many info hashes in scrape (at most {max_torrents})"
                )));
            }
            info_hashes
                .push(decode_fixed(value).ok_or_else(|| RequestError::bad("invalid info_hash"))?);
        }
    }
    Ok(ScrapeRequest { info_hashes })
}

#[cfg(test)]
mod tests;
