//! One accepted connection, from the accept to its close: admission
//! ([`crate::admission`]), TLS under the handshake deadline, then the tracker's own
//! protocol ([`TcpTracker::serve`]).
//!
//! No slot can be held: at `network.max_connections` a newcomer takes the place of
//! the connection quiet the longest ([`crate::eviction`]; what is quiet is the
//! tracker's to say through the [`Place`] it is handed). TLS handshakes hold such a
//! place from the moment they were accepted, are capped per client and per worker
//! (past the cap the one under way longest gives way), and must finish by a deadline
//! set at accept, which a drip of bytes cannot extend. A connection refused on a TLS
//! port is closed, never answered in plaintext.

use std::cell::Cell;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use rustls::HandshakeKind;

use crate::admission::{Admitted, Refused};
use crate::backend::{TcpStream, within};
use crate::counted::Counted;
use crate::eviction::Place;

use crate::tracker::{TcpSettings, TcpTracker, Worker};

/// One accepted connection: the connection limit, TLS under the handshake deadline,
/// then the tracker's own protocol.
pub(crate) async fn connection<T: TcpTracker>(
    worker: Rc<Worker<T>>,
    stream: TcpStream,
    peer: SocketAddr,
) {
    let mut stream = Counted::new(stream, &worker.traffic);
    let settings = TcpSettings::of::<T>(&worker.config);
    let exempt = T::exempt(&worker.config, peer.ip());
    // A connection counts against its client's rate like a request (UDP's connect
    // does too): else a client could open and abort TLS handshakes, each a key
    // exchange and a signature for the tracker, or send malformed requests, without
    // ever spending a token or earning a ban.
    let admitted = worker.admission.admit(
        peer.ip(),
        exempt,
        settings.limits(),
        |ip| worker.check_rate(ip),
        &worker.connections_per_ip,
    );
    let Admitted {
        evicted,
        place,
        held: _held,
    } = match admitted {
        Ok(admitted) => admitted,
        // No reply, not even TLS: a ban or a client over its rate costs the tracker
        // as little as possible (counted by `check_rate`).
        Err(Refused::Rate(_)) => return,
        Err(refused) => {
            worker.count(|counters| match refused {
                Refused::PerClient(_) => counters.refused_per_ip += 1,
                _ => counters.refused += 1,
            });
            let refusing = Box::pin(refuse(&worker, &mut stream));
            refusing.await;
            return;
        }
    };
    worker.count(|counters| {
        counters.idle_evicted += u64::from(evicted);
        counters.accepted += 1;
    });
    let _ = stream.get_mut().set_nodelay();
    let deadline = Instant::now() + settings.handshake_timeout;
    // Each way of serving is its own boxed future, sized for itself: inline, every
    // connection's task would be as large as the largest (a TLS stream and its
    // handshake: 17 KiB a connection, plain ones included). Made in statements of
    // their own: a temporary of the statement that awaits it would be kept in this
    // future's state too.
    match &worker.tls {
        None => {
            let serving = Box::pin(serve_and_close(&worker, stream, peer, deadline, place));
            serving.await;
        }
        Some(tls) => {
            let tls = TlsStart {
                config: tls.current(),
                settings: &settings,
                deadline,
                exempt,
            };
            // The handshake's future (3 KiB) is let go once it is done: an open
            // connection keeps only what serves it.
            let serving = {
                let handshake = Box::pin(tls_handshake(&worker, tls, stream, peer, place));
                handshake.await
            };
            if let Some(serving) = serving {
                serving.await;
            }
        }
    }
}

/// What a TLS connection's handshake needs.
struct TlsStart<'a> {
    config: Arc<rustls::ServerConfig>,
    settings: &'a TcpSettings,
    deadline: Instant,
    exempt: bool,
}

/// A connection boxed for serving, as [`TcpTracker::serve`] and [`serve_and_close`]
/// make it.
type Serving<'w> = Pin<Box<dyn Future<Output = ()> + 'w>>;

/// The TLS handshake, and then, unless it failed or was ACME's validation, the
/// connection's serving future: made here, run by the caller once this future (and
/// the handshake's state) is gone.
async fn tls_handshake<'w, T: TcpTracker>(
    worker: &'w Worker<T>,
    tls: TlsStart<'_>,
    stream: Counted<'w, TcpStream>,
    peer: SocketAddr,
    place: Place<'w>,
) -> Option<Serving<'w>> {
    let limits = (tls.settings, tls.deadline, tls.exempt);
    let spent = Cell::new(Duration::ZERO);
    let accept = Box::pin(timed(
        async { crate::tls_stream::accept(stream, tls.config).await.ok() },
        &spent,
    ));
    let handshake = handshake(worker, limits, peer.ip(), &place, accept).await;
    let micros = spent.get().as_micros() as u64;
    worker.count(|counters| counters.tls_handshake_micros += micros);
    match handshake {
        Some(mut stream) if crate::tls::is_acme_validation(stream.alpn_protocol()) => {
            // The CA has seen the validation certificate: nothing to serve.
            worker.count(|counters| counters.acme_validations += 1);
            let _ = within(Duration::from_secs(1), stream.close()).await;
            None
        }
        Some(stream) => {
            let resumed = stream.handshake_kind() == Some(HandshakeKind::Resumed);
            worker.count(|counters| {
                counters.tls_resumed += u64::from(resumed);
                counters.tls_full += u64::from(!resumed);
            });
            Some(Box::pin(serve_and_close(
                worker,
                stream,
                peer,
                tls.deadline,
                place,
            )))
        }
        None => {
            worker.count(|counters| counters.tls_failures += 1);
            None
        }
    }
}

/// Answers a refused connection the tracker's way, then it closes; on a TLS port it
/// is only closed: plaintext there reads as garbage to the client ("wrong version
/// number"), and answering in TLS would cost a handshake.
async fn refuse<T: TcpTracker, S: AsyncWrite + Unpin>(worker: &Worker<T>, stream: &mut S) {
    if worker.tls.is_none() {
        let _ = within(Duration::from_secs(1), T::refuse(stream)).await;
    }
}

/// Runs a TLS handshake (`accept`) from `ip` by `deadline`, as one of the worker's
/// handshakes under way: `None` when it failed, took too long, or gave way to a
/// newcomer (the connection's `place` was evicted, or it was the worker's oldest
/// handshake when a newcomer found `max_tls_handshakes` under way), or when the
/// client already had `max_tls_handshakes_per_client` under way (`exempt`: a trusted
/// proxy, never counted).
async fn handshake<T: TcpTracker, S>(
    worker: &Worker<T>,
    (settings, deadline, exempt): (&TcpSettings, Instant, bool),
    ip: IpAddr,
    place: &Place<'_>,
    accept: impl Future<Output = Option<S>>,
) -> Option<S> {
    let key = worker.clients.borrow().key(ip);
    let Some(under_way) = worker
        .admission
        .start_handshake(key, exempt, settings.limits())
    else {
        worker.count(|counters| counters.refused_per_ip += 1);
        return None;
    };
    if under_way.evicted {
        worker.count(|counters| counters.idle_evicted += 1);
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let evicted = async {
        futures_lite::future::or(place.evicted(), under_way.place.evicted()).await;
        None
    };
    within(left, futures_lite::future::or(accept, evicted))
        .await
        .flatten()
}

/// Runs `future`, adding the time spent inside its polls to `spent`: the CPU time of
/// a TLS handshake, not its waits for the client's bytes.
async fn timed<F: Future>(future: F, spent: &Cell<Duration>) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        let start = Instant::now();
        let poll = future.as_mut().poll(cx);
        spent.set(spent.get() + start.elapsed());
        poll
    })
    .await
}

/// Serves a connection, then ends it properly: TLS sends close_notify (clients may
/// otherwise take the close for a truncation attack), and TCP gets a FIN.
///
/// Not an `async fn`: that would move its parameters into locals of its future, and
/// the future would hold the stream twice (rustc keeps the places of both).
#[allow(clippy::manual_async_fn)]
fn serve_and_close<'w, T: TcpTracker, S: AsyncRead + AsyncWrite + Unpin + 'w>(
    worker: &'w Worker<T>,
    mut stream: S,
    peer: SocketAddr,
    deadline: Instant,
    place: Place<'w>,
) -> impl Future<Output = ()> + 'w {
    async move {
        T::serve(worker, &mut stream, peer, deadline, place).await;
        let _ = within(Duration::from_secs(1), stream.close()).await;
    }
}
