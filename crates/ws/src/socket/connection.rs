//! One WebSocket connection on a socket worker's executor (epoll or glommio): the opening request
//! ([`handshake`](super::handshake)), then the driver of its [`Session`], which holds
//! every rule. The driver writes what the session gives it, and otherwise waits for
//! whichever comes first: bytes from the client, messages in the connection's queue
//! (replies, and offers and answers from other peers), the session's deadline, or a
//! newcomer taking the connection's place among the worker's quiet ones.

use std::cell::{RefCell, RefMut};
use std::future::poll_fn;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use shoal_private::{ClientAnnounce, Event as LedgerEvent, KeyDigest, Refusal as PrivateRefusal};
use shoal_swarm::ServerTime;
use shoal_tcp::{Place, within, write_all_before as write_all};
use shoal_worker::Verdict;
use shoal_ws_protocol::opening::Refusal;
use shoal_ws_protocol::{AnnounceEvent, AnnounceRequest, Id20};

use super::Worker;
use super::handshake::{Opening, open};
use super::router::submit;
use crate::Config;
use crate::messages::{ConnectionRef, SwarmRequest};
use crate::queue::{ConnectionQueue, QueueLimit};
use crate::session::{Host, Next, Session};
use crate::stats::SocketCounters;

/// Answers a connection over the limit.
pub(crate) async fn refuse<S: AsyncWrite + Unpin>(stream: &mut S) {
    let _ = stream
        .write_all(&Refusal::new(503, "too many connections").response())
        .await;
}

/// Serves a connection: the opening request, then WebSocket messages. `place`, held
/// since the connection was accepted, is its place among the worker's connections
/// that give way to newcomers when it is full, quiet the longest first: it moves on
/// only with each tracker message the client sends.
pub(crate) async fn serve<'w, S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    peer: SocketAddr,
    local: &'w Worker,
    deadline: Instant,
    mut place: Place<'w>,
) {
    // Boxed, in a statement of its own: the opening's state lives while it is read,
    // not for as long as the connection stays open.
    let opening = Box::pin(open(&mut stream, local, peer, deadline));
    let opening = futures_lite::future::or(opening, async {
        place.evicted().await;
        Opening::Answered
    })
    .await;
    if place.is_evicted() {
        return;
    }
    if let Opening::Upgraded {
        leftover,
        client,
        slot: _slot,
        key,
        origin_slot: _origin_slot,
    } = opening
    {
        local.counters.borrow_mut().upgraded += 1;
        let (connection, queue) = local.per_worker.router.borrow_mut().register(QueueLimit {
            messages: local.config.limits.max_outgoing_messages,
            bytes: local.config.limits.max_outgoing_bytes,
        });
        let mut session =
            Session::new(local, client, connection, queue, leftover, Instant::now()).with_key(key);
        drive(
            &mut session,
            &mut stream,
            &mut place,
            &local.per_worker.read_buffer,
        )
        .await;
        session.leave();
    }
}

/// Runs `session` over `stream` until it closes, reading into the worker's `buffer`.
/// `place` moves on with each tracker message the client sends.
async fn drive<S: AsyncRead + AsyncWrite + Unpin>(
    session: &mut Session<'_, Worker>,
    stream: &mut S,
    place: &mut Place<'_>,
    buffer: &RefCell<Vec<u8>>,
) {
    if session.start(Instant::now()) {
        place.touch();
    }
    loop {
        if place.is_evicted() {
            session.evicted();
        }
        match session.next(Instant::now()) {
            Next::Write { deadline } => {
                // A client that stops reading blocks this write while its queue fills
                // up: watch the queue meanwhile.
                let queue = Rc::clone(session.queue());
                let written = futures_lite::future::or(
                    write_all(stream, session.output(), deadline),
                    async {
                        queue.overflow().await;
                        false
                    },
                )
                .await;
                if !written {
                    let now = Instant::now();
                    session.write_failed(now >= deadline, now);
                    return;
                }
                session.written();
            }
            Next::Close => return,
            Next::Wait { deadline } => {
                let left = deadline.saturating_duration_since(Instant::now());
                let queue = Rc::clone(session.queue());
                let quiet = &*place;
                let event = within(
                    left,
                    futures_lite::future::or(
                        async { Some(read_into(stream, buffer, session).await) },
                        async {
                            futures_lite::future::or(queue.ready(), quiet.evicted()).await;
                            None
                        },
                    ),
                )
                .await;
                match event {
                    // The deadline, messages or an eviction: the next step handles each.
                    None | Some(None) => {}
                    Some(Some(Read::Closed)) => return,
                    Some(Some(Read::Served { heard })) => {
                        if heard {
                            place.touch();
                        }
                    }
                }
            }
        }
    }
}

/// What one read from the client came to.
enum Read {
    /// Bytes, served: `heard` when a tracker message was among them.
    Served { heard: bool },
    /// The client closed the connection, or it failed.
    Closed,
}

/// Reads what the client sent into the worker's read buffer and serves it in the same
/// step. The buffer is borrowed only while the stream is polled, never across a wait
/// (the sockets are readiness-based: a read that would block keeps no buffer), so one
/// buffer serves all of a worker's connections and an idle connection holds none.
async fn read_into<S: AsyncRead + Unpin>(
    stream: &mut S,
    buffer: &RefCell<Vec<u8>>,
    session: &mut Session<'_, Worker>,
) -> Read {
    poll_fn(|cx| {
        let mut buffer = buffer.borrow_mut();
        match Pin::new(&mut *stream).poll_read(cx, &mut buffer) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(0) | Err(_)) => Poll::Ready(Read::Closed),
            Poll::Ready(Ok(read)) => Poll::Ready(Read::Served {
                heard: session.received(&mut buffer[..read], Instant::now()),
            }),
        }
    })
    .await
}

impl Host for Worker {
    fn config(&self) -> &Config {
        &self.config
    }

    fn check_rate(&self, ip: IpAddr) -> Verdict {
        Worker::check_rate(self, ip)
    }

    fn allows(&self, info_hash: &[u8; 20]) -> bool {
        self.context.access.allows(info_hash)
    }

    fn check_client(&self, peer_id: &[u8; 20]) -> Result<(), shoal_common::ClientRefusal> {
        self.context.clients.check(peer_id, b"")
    }

    fn private_announce(
        &self,
        key: Option<KeyDigest>,
        announce: &AnnounceRequest,
        ipv6: bool,
    ) -> Result<bool, PrivateRefusal> {
        let Some(registry) = &self.context.private else {
            return Ok(true);
        };
        // An answer relays a WebRTC answer to an offer: it needs a user and a
        // registered torrent (a seeding-only user answers leechers), carries no
        // counters, and is not credited.
        if announce.answer.is_some() {
            return registry
                .announce(key, &announce.info_hash.0, false)
                .map(|_| true);
        }
        let leeching = announce.left != Some(0);
        let grant = registry.announce(key, &announce.info_hash.0, leeching)?;
        if let Some(accounts) = &self.context.accounts {
            // Totals no client reaches are refused before anything counts them.
            accounts.check_totals(
                announce.uploaded.unwrap_or(0),
                announce.downloaded.unwrap_or(0),
            )?;
        }
        let event = match announce.event {
            AnnounceEvent::Update => LedgerEvent::None,
            AnnounceEvent::Started => LedgerEvent::Started,
            AnnounceEvent::Completed => LedgerEvent::Completed,
            AnnounceEvent::Stopped => LedgerEvent::Stopped,
        };
        let mut peers = true;
        if let Some(sessions) = &self.context.sessions {
            let client = ClientAnnounce {
                peer_id: &announce.peer_id.0,
                info_hash: &announce.info_hash.0,
                ipv6,
                event,
                wants_peers: !announce.offers.is_empty(),
            };
            peers = sessions.admit(&grant, client, self.server_time().0)?.peers;
        }
        // Counters left out (some clients send none): nothing to credit from.
        let (Some(uploaded), Some(downloaded)) = (announce.uploaded, announce.downloaded) else {
            return Ok(peers);
        };
        if let Some(accounts) = &self.context.accounts {
            accounts.report(grant.report(
                announce.peer_id.0,
                uploaded,
                downloaded,
                announce.left.unwrap_or(u64::MAX),
                event,
            ));
        }
        Ok(peers)
    }

    fn private_scrape(
        &self,
        key: Option<KeyDigest>,
        info_hashes: &[Id20],
    ) -> Result<(), PrivateRefusal> {
        match &self.context.private {
            Some(registry) => registry
                .scrape(key, info_hashes.iter().map(|hash| &hash.0))
                .map(drop),
            None => Ok(()),
        }
    }

    fn counters(&self) -> RefMut<'_, SocketCounters> {
        self.counters.borrow_mut()
    }

    fn record_latency(&self, latency: Duration) {
        self.traffic.borrow_mut().record_latency(latency, 1);
    }

    fn server_time(&self) -> ServerTime {
        self.context.clock.now()
    }

    fn swarm_workers(&self) -> usize {
        self.per_worker.router.borrow().swarm_workers()
    }

    fn submit(&self, worker: usize, request: SwarmRequest) {
        submit(&self.per_worker.router, worker, request);
    }

    fn note_receiving(&self, queue: &ConnectionQueue, bytes: usize) {
        self.per_worker.router.borrow().note_receiving(queue, bytes);
    }

    fn unregister(&self, connection: ConnectionRef) {
        self.per_worker.router.borrow_mut().unregister(connection);
    }

    fn buffer(&self) -> Vec<u8> {
        self.per_worker.write_buffers.borrow_mut().take()
    }

    fn recycle(&self, buffer: Vec<u8>) {
        self.per_worker.write_buffers.borrow_mut().give_back(buffer);
    }

    fn backoff_interval(&self) -> u32 {
        self.context
            .interval
            .for_backoff(shoal_worker::Family::V4, rand::random())
    }

    fn may_log_close(&self, now: Instant) -> Option<u32> {
        self.per_worker.overflow_log.borrow_mut().take(now)
    }
}
