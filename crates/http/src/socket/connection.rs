//! One HTTP connection: read requests, answer them, in order, until the connection
//! ends or a limit is hit.
//!
//! * Pipelined requests are answered one after another from the same buffer.
//! * Each request must arrive within `network.idle_timeout` of the moment the worker
//!   starts waiting for it, however slowly its bytes trickle in, so a slow client holds
//!   a connection for a bounded time.
//! * Anything malformed, oversized or unsupported gets its 4xx status and a bencoded
//!   failure reason, then the connection closes. A refused info hash gets a 200 with a
//!   failure reason (what BEP 3 clients show to users) and the connection stays open.

use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use shoal_common::executor::{within, write_all_before};
use shoal_common::http_head::HeadScan;
use shoal_http_protocol::request::ProxyHeader;
use shoal_http_protocol::response::write_head;
use shoal_http_protocol::{
    AnnounceEvent as WireEvent, AnnounceRequest, AnnounceResponse, ParseLimits, ParsedRequest,
    PeerList, Request, ScrapeRequest, ScrapeStats, parse_request, write_announce, write_failure,
    write_scrape,
};
use shoal_swarm::{AnnounceEvent, PeerLimits, ServerTime};

use shoal_runtime::eviction::Place;
use shoal_runtime::per_ip::Verdict;
use shoal_runtime::shard_for;
use shoal_swarm::PeerAddress;

use super::Worker;
use super::router::{CallError, Merged, call};
use crate::messages::{AnnounceWork, AnnouncedPeers, SwarmReplyKind, SwarmRequestKind};
use shoal_common::tracker_config::{HeaderPosition, ReverseProxy as _};

/// Reply to a refused info hash.
pub(crate) const NOT_ALLOWED: &str = "info hash not allowed";
/// Reply to an announce that would start a torrent while the tracker is full.
pub(crate) const TRACKER_FULL: &str = "tracker full: no new torrents accepted";
/// Reply to a client over per_ip.requests_per_second.
pub(crate) const RATE_LIMITED: &str = "too many requests, slow down";
/// Reply when a swarm worker's queue is full.
pub(crate) const BUSY: &str = "tracker busy, try again later";

/// The last full-scrape reply body of one socket worker.
#[derive(Debug, Default)]
pub(crate) struct FullScrapeCache {
    body: Option<(ServerTime, Rc<Vec<u8>>)>,
    building: bool,
}

/// Answers a connection over the limit.
pub(crate) async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S) {
    let mut out = Vec::new();
    write_failure(&mut out, 503, "too many connections", false);
    let _ = stream.write_all(&out).await;
}

async fn write_all<S: AsyncWrite + Unpin>(stream: &mut S, bytes: &[u8], limit: Duration) -> bool {
    write_all_before(stream, bytes, Instant::now() + limit).await
}

/// Reads requests and writes responses until the connection should end. `place`,
/// held since the connection was accepted, is its place among the worker's quiet
/// connections while it waits for its first request.
pub(crate) async fn exchange<'w, S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    peer: SocketAddr,
    local: &'w Worker,
    place: Place<'w>,
) {
    let config = &local.config;
    // Only a trusted proxy's header is believed; anyone else is served as themselves.
    let proxy = &config.network.reverse_proxy_ip_header;
    let limits = ParseLimits {
        announce_path: &config.protocol.announce_path,
        scrape_path: &config.protocol.scrape_path,
        max_request_len: config.limits.max_request_size,
        max_headers: config.limits.max_headers,
        max_scrape_torrents: config.protocol.max_scrape_torrents,
        proxy_header: config
            .network
            .proxy_header_from(peer.ip())
            .then(|| ProxyHeader {
                name: proxy,
                use_last: config.network.reverse_proxy_ip_header_position == HeaderPosition::Last,
            }),
    };
    let idle = Duration::from_secs(config.network.idle_timeout.into());
    let mut buffer = vec![0u8; config.limits.max_request_size];
    let mut filled = 0;
    let mut out = Vec::with_capacity(1024);
    let mut accepted = Some(place);

    loop {
        let deadline = Instant::now() + idle;
        // Parsed only once a head may be whole: not again after every byte.
        let mut scan = HeadScan::new();
        // Until its request's head is whole the connection waits among the worker's
        // quiet ones, by when it began to (the first request: since it was accepted),
        // and closes if a newcomer needs its place (`waiting`): one that sent a byte of
        // a request line and stopped can be made to give way as well as one that sent
        // nothing.
        let waiting = accepted.take().unwrap_or_else(|| local.quiet.enter());
        let parsed = loop {
            if filled > 0 && scan.worth_parsing(&buffer[..filled], filled == buffer.len()) {
                match parse_request(&buffer[..filled], &limits) {
                    Ok(Some(parsed)) => break parsed,
                    Ok(None) => {}
                    Err(err) => {
                        local.counters.borrow_mut().bad_requests += 1;
                        out.clear();
                        write_failure(&mut out, err.status, &err.reason, false);
                        if write_all(&mut stream, &out, idle).await {
                            count_response(local, Answered::Error, peer.ip());
                        }
                        return;
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let read = futures_lite::future::or(
                async { Some(stream.read(&mut buffer[filled..]).await) },
                async {
                    waiting.evicted().await;
                    None
                },
            );
            let read = within(left, read).await;
            // Evicted: its place was given to a newcomer, which is counted already,
            // so it closes even if bytes came in meanwhile.
            if waiting.is_evicted() {
                return;
            }
            let read = match read {
                Some(Some(read)) => Some(read),
                Some(None) => return,
                None => None,
            };
            match read {
                Some(Ok(0)) | Some(Err(_)) => return,
                Some(Ok(read)) => filled += read,
                None => {
                    if filled > 0 {
                        local.counters.borrow_mut().timeouts += 1;
                        out.clear();
                        write_failure(&mut out, 408, "request not completed in time", false);
                        if write_all(&mut stream, &out, idle).await {
                            count_response(local, Answered::Error, peer.ip());
                        }
                    }
                    return;
                }
            }
        };
        // A whole request: served, not evicted, until the next one begins.
        drop(waiting);

        let started = Instant::now();
        out.clear();
        let keep_alive = parsed.keep_alive && config.network.keep_alive;
        let client_ip = parsed.forwarded_ip.unwrap_or(peer.ip());
        let mut shared_body = None;
        let answered = answer(
            &parsed,
            client_ip,
            keep_alive,
            local,
            &mut out,
            &mut shared_body,
        )
        .await;
        if out.is_empty() {
            return; // banned: no answer
        }
        // The head and a shared body (below) are written within one deadline.
        let written_by = Instant::now() + idle;
        if !write_all_before(&mut stream, &out, written_by).await {
            return;
        }
        // A body many responses share (a cached full scrape) goes out from where it is
        // kept, not copied into each connection's buffer.
        if let Some(body) = shared_body
            && !write_all_before(&mut stream, &body, written_by).await
        {
            return;
        }
        count_response(local, answered, client_ip);
        local
            .traffic
            .borrow_mut()
            .record_latency(started.elapsed(), 1);
        if !answered.keeps_alive() {
            return;
        }
        buffer.copy_within(parsed.len..filled, 0);
        filled -= parsed.len;
    }
}

/// What a response answered, for the counters, and whether the connection stays open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answered {
    /// An announce (with peers or a failure reason).
    Announce { keep_alive: bool },
    /// A scrape (with counts or a failure reason).
    Scrape { keep_alive: bool },
    /// A request refused before it was served (malformed, late, over its rate, busy);
    /// the connection closes.
    Error,
}

impl Answered {
    fn keeps_alive(self) -> bool {
        match self {
            Self::Announce { keep_alive } | Self::Scrape { keep_alive } => keep_alive,
            Self::Error => false,
        }
    }
}

/// Counts a response written to a client at `ip`.
fn count_response(local: &Worker, answered: Answered, ip: IpAddr) {
    let ipv6 = u64::from(ip.to_canonical().is_ipv6());
    let mut counted = local.counters.borrow_mut();
    let counters = &mut *counted;
    let (all, v6) = match answered {
        Answered::Announce { .. } => (
            &mut counters.announce_responses,
            &mut counters.announce_responses_v6,
        ),
        Answered::Scrape { .. } => (
            &mut counters.scrape_responses,
            &mut counters.scrape_responses_v6,
        ),
        Answered::Error => (
            &mut counters.error_responses,
            &mut counters.error_responses_v6,
        ),
    };
    *all += 1;
    *v6 += ipv6;
}

/// Writes the response to one request from the client at `client_ip` (the proxy's
/// header when believed); writes nothing for a banned client.
async fn answer(
    parsed: &ParsedRequest,
    client_ip: IpAddr,
    keep_alive: bool,
    local: &Worker,
    out: &mut Vec<u8>,
    shared_body: &mut Option<Rc<Vec<u8>>>,
) -> Answered {
    let ip = client_ip.to_canonical();
    match local.check_rate(ip) {
        Verdict::Allow => {}
        Verdict::Limited => {
            write_failure(out, 429, RATE_LIMITED, false);
            return Answered::Error;
        }
        // Banned: no answer, the connection closes.
        Verdict::Banned | Verdict::NewBan => return Answered::Error,
    }
    let ipv6 = u64::from(ip.is_ipv6());
    let result = match &parsed.request {
        Request::Announce(request) => {
            local.counters.borrow_mut().announces_v6 += ipv6;
            announce(request, ip, keep_alive, local, out)
                .await
                .map(|()| Answered::Announce { keep_alive })
        }
        Request::Scrape(request) => {
            local.counters.borrow_mut().scrapes_v6 += ipv6;
            scrape(request, keep_alive, local, out, shared_body)
                .await
                .map(|()| Answered::Scrape { keep_alive })
        }
    };
    match result {
        Ok(answered) => answered,
        Err(CallError::Busy) => {
            out.clear();
            *shared_body = None;
            write_failure(out, 503, BUSY, false);
            Answered::Error
        }
    }
}

async fn announce(
    request: &AnnounceRequest,
    ip: IpAddr,
    keep_alive: bool,
    local: &Worker,
    out: &mut Vec<u8>,
) -> Result<(), CallError> {
    local.counters.borrow_mut().announces += 1;
    if !local.context.access.allows(&request.info_hash) {
        local.counters.borrow_mut().access_denied += 1;
        write_failure(out, 200, NOT_ALLOWED, keep_alive);
        return Ok(());
    }
    let protocol = &local.config.protocol;
    let limits = PeerLimits {
        default: protocol.default_peers,
        max: protocol.max_peers,
    };
    let peer = PeerAddress::new(ip, request.port);
    let work = AnnounceWork {
        info_hash: request.info_hash,
        peer,
        peer_id: request.peer_id,
        event: match request.event {
            WireEvent::None => AnnounceEvent::None,
            WireEvent::Started => AnnounceEvent::Started,
            WireEvent::Completed => AnnounceEvent::Completed,
            WireEvent::Stopped => AnnounceEvent::Stopped,
        },
        seeder: request.left == Some(0),
        peers_wanted: limits.resolve(request.numwant.unwrap_or(0)) as u16,
        with_peer_ids: !request.compact && !request.no_peer_id,
    };
    let worker = shard_for(
        &request.info_hash,
        local.state.router.borrow().swarm_workers(),
    );
    let reply = call(
        &local.state.router,
        vec![(worker, SwarmRequestKind::Announce(work))],
    )
    .await?;
    let (complete, incomplete, peers) = match reply {
        Merged::Announce(SwarmReplyKind::Announce {
            complete,
            incomplete,
            peers,
        }) => (complete, incomplete, peers),
        Merged::Announce(SwarmReplyKind::Refused(reason)) => {
            write_failure(out, 200, reason, keep_alive);
            return Ok(());
        }
        _ => unreachable!("an announce gets an announce reply"),
    };
    let dictionaries: Vec<(IpAddr, u16, Option<[u8; 20]>)>;
    let peers = match (&peers, request.compact, peer) {
        (AnnouncedPeers::Compact(bytes), true, PeerAddress::V4(_)) => PeerList::CompactV4(bytes),
        (AnnouncedPeers::Compact(bytes), true, PeerAddress::V6(_)) => PeerList::CompactV6(bytes),
        (AnnouncedPeers::Compact(bytes), false, _) => {
            // compact=0 with no_peer_id: dictionaries without ids.
            let width = if matches!(peer, PeerAddress::V4(_)) {
                6
            } else {
                18
            };
            dictionaries = bytes
                .chunks_exact(width)
                .map(|chunk| (compact_ip(chunk), compact_port(chunk), None))
                .collect();
            PeerList::Dictionaries(&dictionaries)
        }
        (AnnouncedPeers::WithIds(list), _, _) => {
            dictionaries = list
                .iter()
                .map(|(addr, id)| (addr.ip(), addr.port(), Some(*id)))
                .collect();
            PeerList::Dictionaries(&dictionaries)
        }
    };
    let response = AnnounceResponse {
        interval: protocol.announce_interval,
        min_interval: protocol.min_announce_interval,
        complete,
        incomplete,
        peers,
        warning: None,
    };
    write_announce(out, &response, keep_alive);
    Ok(())
}

fn compact_ip(chunk: &[u8]) -> IpAddr {
    let (ip, _) = chunk.split_at(chunk.len() - 2);
    match <[u8; 4]>::try_from(ip) {
        Ok(v4) => IpAddr::from(v4),
        Err(_) => IpAddr::from(<[u8; 16]>::try_from(ip).expect("16-byte address")),
    }
}

fn compact_port(chunk: &[u8]) -> u16 {
    u16::from_be_bytes([chunk[chunk.len() - 2], chunk[chunk.len() - 1]])
}

async fn scrape(
    request: &ScrapeRequest,
    keep_alive: bool,
    local: &Worker,
    out: &mut Vec<u8>,
    shared_body: &mut Option<Rc<Vec<u8>>>,
) -> Result<(), CallError> {
    local.counters.borrow_mut().scrapes += 1;
    if request.info_hashes.is_empty() {
        return full_scrape(keep_alive, local, out, shared_body).await;
    }
    if local.context.access.mode() != shoal_common::AccessListMode::Off {
        let access = local.context.access.snapshot();
        if !request.info_hashes.iter().all(|hash| access.allows(hash)) {
            local.counters.borrow_mut().access_denied += 1;
            write_failure(out, 200, NOT_ALLOWED, keep_alive);
            return Ok(());
        }
    }
    let workers = local.state.router.borrow().swarm_workers();
    let mut parts: Vec<(usize, Vec<[u8; 20]>)> = Vec::new();
    for hash in &request.info_hashes {
        let worker = shard_for(hash, workers);
        match parts.iter_mut().find(|(w, _)| *w == worker) {
            Some((_, hashes)) => hashes.push(*hash),
            None => parts.push((worker, vec![*hash])),
        }
    }
    let parts = parts
        .into_iter()
        .map(|(worker, hashes)| (worker, SwarmRequestKind::Scrape(hashes)))
        .collect();
    let Merged::Scrape(counts) = call(&local.state.router, parts).await? else {
        unreachable!("a scrape gets scrape replies");
    };
    let mut files = counts
        .into_iter()
        .map(|(hash, stats)| (hash, wire_stats(stats)))
        .collect();
    write_scrape(out, &mut files, keep_alive);
    Ok(())
}

/// Full scrapes are built at most once per `full_scrape_interval` per socket worker and
/// reused in between. The body (about 70 bytes a torrent) is left in `shared_body`, not
/// copied into `out`: a copy per connection, held while a client that never reads
/// keeps its response waiting, would let a few thousand connections hold gigabytes.
async fn full_scrape(
    keep_alive: bool,
    local: &Worker,
    out: &mut Vec<u8>,
    shared_body: &mut Option<Rc<Vec<u8>>>,
) -> Result<(), CallError> {
    let protocol = &local.config.protocol;
    if !protocol.full_scrape {
        write_failure(out, 200, "full scrape is disabled", keep_alive);
        return Ok(());
    }
    let now = local.context.clock.now();
    let cached = {
        let cache = local.state.full_scrape.borrow();
        cache.body.as_ref().and_then(|(built, body)| {
            let fresh = now
                .seconds_since(*built)
                .is_some_and(|age| age < protocol.full_scrape_interval);
            (fresh || cache.building).then(|| body.clone())
        })
    };
    if let Some(body) = cached {
        write_head(out, 200, keep_alive, body.len());
        *shared_body = Some(body);
        return Ok(());
    }
    if local.state.full_scrape.borrow().building {
        write_failure(
            out,
            200,
            "full scrape is being prepared, try again shortly",
            keep_alive,
        );
        return Ok(());
    }
    local.state.full_scrape.borrow_mut().building = true;
    local.counters.borrow_mut().full_scrapes += 1;
    let workers = local.state.router.borrow().swarm_workers();
    let parts = (0..workers)
        .map(|worker| (worker, SwarmRequestKind::FullScrape))
        .collect();
    let result = call(&local.state.router, parts).await;
    local.state.full_scrape.borrow_mut().building = false;
    let Merged::Scrape(counts) = result? else {
        unreachable!("a scrape gets scrape replies")
    };
    let mut files: Vec<_> = counts
        .into_iter()
        .map(|(hash, stats)| (hash, wire_stats(stats)))
        .collect();
    let mut body = Vec::new();
    shoal_http_protocol::response::write_scrape_body(&mut body, &mut files);
    let body = Rc::new(body);
    local.state.full_scrape.borrow_mut().body = Some((now, body.clone()));
    write_head(out, 200, keep_alive, body.len());
    *shared_body = Some(body);
    Ok(())
}

fn wire_stats(stats: shoal_swarm::ScrapeStats) -> ScrapeStats {
    ScrapeStats {
        complete: stats.seeders,
        downloaded: stats.downloads,
        incomplete: stats.leechers,
    }
}
