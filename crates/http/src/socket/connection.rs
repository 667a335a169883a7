//! One HTTP connection on a socket worker's executor (epoll or glommio): the driver of its [`Session`], which
//! holds every rule. The driver reads, writes and asks swarm workers when the session
//! says so, within the deadlines the session gives, and closes the connection when a
//! newcomer takes its place among the worker's quiet connections.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use futures_lite::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use shoal_http_protocol::InfoHash;
use shoal_http_protocol::{AnnounceEvent, AnnounceRequest};
use shoal_private::{ClientAnnounce, Event as LedgerEvent, KeyDigest, Refusal};
use shoal_swarm::ServerTime;
use shoal_tcp::{Place, within, write_all_before};
use shoal_worker::Verdict;

use super::{Worker, router};
use crate::Config;
use crate::session::{FullScrapeCache, Host, Next, Session, refusal};
use crate::stats::SocketCounters;

/// Answers a connection over the limit.
pub(crate) async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S) {
    let _ = stream.write_all(&refusal()).await;
}

/// Serves a connection until it should end. `place`, held since the connection was
/// accepted, is its place among the worker's quiet connections while it waits for its
/// first request.
pub(crate) async fn exchange<'w, S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    peer: SocketAddr,
    local: &'w Worker,
    place: Place<'w>,
) {
    let mut session = Session::new(peer, &local.config, Instant::now());
    // Until a request's head is whole the connection waits among the worker's quiet
    // ones, by when it began to (the first request: since it was accepted), and
    // closes if a newcomer needs its place: one that sent a byte of a request line and
    // stopped can be made to give way as well as one that sent nothing.
    let mut waiting = Some(place);
    loop {
        let next = session.next(local, Instant::now());
        if !matches!(next, Next::Read { .. }) {
            // Being served, or done: not evicted until the next request begins.
            waiting = None;
        }
        match next {
            Next::Read { deadline } => {
                let waiting = waiting.get_or_insert_with(|| local.quiet_place());
                let left = deadline.saturating_duration_since(Instant::now());
                let buffer = session.read_buffer();
                let read =
                    futures_lite::future::or(async { Some(stream.read(buffer).await) }, async {
                        waiting.evicted().await;
                        None
                    });
                let read = within(left, read).await;
                // Evicted: its place was given to a newcomer, which is counted
                // already, so it closes even if bytes came in meanwhile.
                if waiting.is_evicted() {
                    return;
                }
                match read {
                    Some(Some(Ok(read))) => session.received(read),
                    Some(Some(Err(_))) | Some(None) => return,
                    None => session.timed_out(local, Instant::now()),
                }
            }
            Next::Announce(call) => {
                let answer =
                    router::announce(&local.per_worker.router, call.worker, call.work).await;
                session.announced(call, answer, local, Instant::now());
            }
            Next::Scrape(mut call) => {
                let parts = std::mem::take(&mut call.parts);
                let answer = router::scrape(&local.per_worker.router, parts).await;
                session.scraped(call, answer, local, Instant::now());
            }
            Next::Write { deadline } => {
                // The head and a shared body (a cached full scrape) within one deadline.
                let (head, body) = session.output();
                if !write_all_before(&mut stream, head, deadline).await {
                    return;
                }
                if let Some(body) = body
                    && !write_all_before(&mut stream, body, deadline).await
                {
                    return;
                }
                session.written(local, Instant::now());
            }
            Next::Close => return,
        }
    }
}

impl Host for Worker {
    fn config(&self) -> &Config {
        &self.config
    }

    fn check_rate(&self, ip: IpAddr) -> Verdict {
        Worker::check_rate(self, ip)
    }

    fn allows(&self, info_hash: &InfoHash) -> bool {
        self.context.access.allows(info_hash)
    }

    fn check_client(
        &self,
        peer_id: &[u8; 20],
        user_agent: &[u8],
    ) -> Result<(), shoal_common::ClientRefusal> {
        self.context.clients.check(peer_id, user_agent)
    }

    fn allows_all(&self, info_hashes: &[InfoHash]) -> bool {
        if self.context.access.mode() == shoal_common::AccessListMode::Off {
            return true;
        }
        let access = self.context.access.view();
        info_hashes.iter().all(|hash| access.allows(hash))
    }

    fn private_announce(
        &self,
        key: Option<KeyDigest>,
        request: &AnnounceRequest,
        ipv6: bool,
    ) -> Result<bool, Refusal> {
        let Some(registry) = &self.context.private else {
            return Ok(true);
        };
        let leeching = request.left != Some(0);
        let grant = registry.announce(key, &request.info_hash, leeching)?;
        if let Some(accounts) = &self.context.accounts {
            // Totals no client reaches are refused before anything counts them.
            accounts.check_totals(request.uploaded, request.downloaded)?;
        }
        let event = match request.event {
            AnnounceEvent::None => LedgerEvent::None,
            AnnounceEvent::Started => LedgerEvent::Started,
            AnnounceEvent::Completed => LedgerEvent::Completed,
            AnnounceEvent::Stopped => LedgerEvent::Stopped,
        };
        let mut peers = true;
        if let Some(sessions) = &self.context.sessions {
            let announce = ClientAnnounce {
                peer_id: &request.peer_id,
                info_hash: &request.info_hash,
                ipv6,
                event,
                wants_peers: request.numwant != Some(0),
            };
            peers = sessions
                .admit(&grant, announce, self.server_time().0)?
                .peers;
        }
        if let Some(accounts) = &self.context.accounts {
            // Absent `left`: not done, as for the decision.
            accounts.report(grant.report(
                request.peer_id,
                request.uploaded,
                request.downloaded,
                request.left.unwrap_or(u64::MAX),
                event,
            ));
        }
        Ok(peers)
    }

    fn private_scrape(
        &self,
        key: Option<KeyDigest>,
        info_hashes: &[InfoHash],
    ) -> Result<(), Refusal> {
        match &self.context.private {
            Some(registry) => registry.scrape(key, info_hashes).map(drop),
            None => Ok(()),
        }
    }

    fn count(&self, count: impl FnOnce(&mut SocketCounters)) {
        count(&mut self.counters.borrow_mut());
    }

    fn swarm_workers(&self) -> usize {
        self.per_worker.router.borrow().swarm_workers()
    }

    fn full_scrape(&self) -> &RefCell<FullScrapeCache> {
        &self.per_worker.full_scrape
    }

    fn server_time(&self) -> ServerTime {
        self.context.clock.now()
    }

    fn record_latency(&self, latency: Duration) {
        self.traffic.borrow_mut().record_latency(latency, 1);
    }

    fn reply_interval(&self, ipv6: bool) -> (u32, u32) {
        let interval = &self.context.interval;
        let given = interval.for_reply(family(ipv6), rand::random());
        (given, interval.min_interval(given))
    }

    fn full_interval(&self) -> (u32, u32) {
        let interval = &self.context.interval;
        let given = interval.for_full(rand::random());
        (given, interval.min_interval(given))
    }

    fn backoff_interval(&self, ipv6: bool) -> (u32, u32) {
        let interval = &self.context.interval;
        let given = interval.for_backoff(family(ipv6), rand::random());
        (given, interval.min_interval(given))
    }
}

fn family(ipv6: bool) -> shoal_worker::Family {
    if ipv6 {
        shoal_worker::Family::V6
    } else {
        shoal_worker::Family::V4
    }
}
