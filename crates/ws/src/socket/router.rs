//! Requests on their way to swarm workers and messages on their way to connections,
//! inside one socket worker (one glommio executor, one thread: `Rc` and `RefCell`
//! suffice).
//!
//! Requests go into a per-swarm-worker outbox; the first request of a round
//! schedules a flush task, which runs after every task that is ready now has run, so
//! all requests of one round of the event loop leave in one channel message per swarm
//! worker. With `swarm_workers = 0` the router keeps the torrents itself and serves
//! each request at once.
//!
//! Messages for connections ([`Router::deliver`]) go into each connection's
//! [`ConnectionQueue`]; a queue that would grow past its limit marks its connection
//! as too slow instead, and the connection closes itself.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

use crossbeam_channel::Sender;
use hashbrown::HashMap;
use shoal_runtime::{LocalSwarm, SwarmLink};

use crate::messages::{ConnectionRef, Delivery, RequestKind, SwarmRequest, ToConnection};
use crate::swarm::Swarms;

/// Messages waiting to be written to one connection, limited in number and in bytes
/// (offers and answers carry session descriptions of up to a message's size each).
pub(crate) struct ConnectionQueue {
    messages: RefCell<VecDeque<ToConnection>>,
    /// Estimated bytes of the queued messages as written.
    bytes: Cell<usize>,
    waker: Cell<Option<Waker>>,
    overflowed: Cell<bool>,
    limit: QueueLimit,
}

/// How much may wait for one connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueueLimit {
    /// Messages.
    pub(crate) messages: usize,
    /// Bytes, as estimated by [`ToConnection::weight`].
    pub(crate) bytes: usize,
}

impl std::fmt::Debug for ConnectionQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionQueue")
            .field("waiting", &self.messages.borrow().len())
            .field("overflowed", &self.overflowed.get())
            .finish()
    }
}

impl ConnectionQueue {
    fn new(limit: QueueLimit) -> Self {
        Self {
            messages: RefCell::new(VecDeque::new()),
            bytes: Cell::new(0),
            waker: Cell::new(None),
            overflowed: Cell::new(false),
            limit,
        }
    }

    /// Queues a message; past a limit, marks the connection as too slow instead.
    pub(crate) fn push(&self, message: ToConnection) {
        let mut messages = self.messages.borrow_mut();
        let weight = message.weight();
        if messages.len() >= self.limit.messages || self.bytes.get() + weight > self.limit.bytes {
            self.overflowed.set(true);
        } else if !self.overflowed.get() {
            messages.push_back(message);
            self.bytes.set(self.bytes.get() + weight);
        }
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// The next message to write.
    pub(crate) fn pop(&self) -> Option<ToConnection> {
        let message = self.messages.borrow_mut().pop_front()?;
        self.bytes.set(self.bytes.get() - message.weight());
        Some(message)
    }

    /// Whether a message had to be refused: the client reads too slowly.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed.get()
    }

    /// Resolves once the queue overflowed.
    pub(crate) async fn overflow(&self) {
        poll_fn(|cx| {
            if self.overflowed.get() {
                Poll::Ready(())
            } else {
                self.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await
    }

    /// Resolves once there is a message (or the queue overflowed).
    pub(crate) async fn ready(&self) {
        poll_fn(|cx| {
            if !self.messages.borrow().is_empty() || self.overflowed.get() {
                Poll::Ready(())
            } else {
                self.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await
    }
}

/// The router of one socket worker.
#[derive(Debug)]
pub(crate) struct Router {
    socket_worker: u16,
    /// Batches for the swarm workers, or the torrents kept here.
    pub(crate) link: SwarmLink<Swarms>,
    connections: HashMap<u64, Rc<ConnectionQueue>>,
    next_connection: u64,
    produced: Vec<(ConnectionRef, ToConnection)>,
}

impl Router {
    /// A router for `socket_worker` sending to `swarms`, or, when `local` is given,
    /// answering from its own torrents.
    pub(crate) fn new(
        socket_worker: usize,
        swarms: Vec<Sender<Vec<SwarmRequest>>>,
        local: Option<LocalSwarm<Swarms>>,
    ) -> Self {
        Self {
            socket_worker: socket_worker as u16,
            link: SwarmLink::new(swarms, local),
            connections: HashMap::new(),
            next_connection: 0,
            produced: Vec::new(),
        }
    }

    /// Number of swarm workers (1 when the torrents are kept here).
    pub(crate) fn swarm_workers(&self) -> usize {
        self.link.shards()
    }

    /// A new connection and its queue of at most `limit`.
    pub(crate) fn register(&mut self, limit: QueueLimit) -> (ConnectionRef, Rc<ConnectionQueue>) {
        self.next_connection += 1;
        let queue = Rc::new(ConnectionQueue::new(limit));
        self.connections
            .insert(self.next_connection, Rc::clone(&queue));
        let connection = ConnectionRef {
            worker: self.socket_worker,
            id: self.next_connection,
        };
        (connection, queue)
    }

    /// Forgets a closed connection; messages still on their way to it are dropped.
    pub(crate) fn unregister(&mut self, connection: ConnectionRef) {
        self.connections.remove(&connection.id);
    }

    /// Sends `request` to swarm worker `worker` (or serves it here). Returns whether
    /// the caller must schedule a [`Router::flush`].
    pub(crate) fn submit(&mut self, worker: usize, request: SwarmRequest) -> bool {
        if let Some(local) = self.link.local() {
            let mut produced = std::mem::take(&mut self.produced);
            local.serve(|swarms, now| swarms.serve(request, now, &mut produced));
            for (to, message) in produced.drain(..) {
                if let Some(queue) = self.connections.get(&to.id) {
                    queue.push(message);
                }
            }
            self.produced = produced;
            return false;
        }
        self.link.batch(worker).push(request);
        self.link.needs_flush()
    }

    /// Sends every outbox to its swarm worker. When a queue is full, requests a
    /// client waits for are answered "busy" at once; leave notices stay in the outbox
    /// for the next flush.
    pub(crate) fn flush(&mut self) {
        for (worker, batch) in self.link.flush() {
            for request in batch {
                let busy = match &request.kind {
                    RequestKind::Announce(announce) => ToConnection::Shed {
                        info_hash: Some(announce.info_hash),
                        scrape_id: None,
                    },
                    RequestKind::Scrape { scrape_id, .. } => ToConnection::Shed {
                        info_hash: None,
                        scrape_id: Some(*scrape_id),
                    },
                    RequestKind::Leave(_) => {
                        self.link.batch(worker).push(request);
                        continue;
                    }
                };
                self.link.count_shed(1);
                if let Some(queue) = self.connections.get(&request.from.id) {
                    queue.push(busy);
                }
            }
        }
    }

    /// Takes a batch of messages from a swarm worker.
    pub(crate) fn deliver(&mut self, batch: Vec<Delivery>) {
        for (connection, message) in batch {
            if let Some(queue) = self.connections.get(&connection) {
                queue.push(message);
            }
        }
    }
}

/// Submits `request` and schedules the flush if this is the first of the round.
pub(crate) fn submit(router: &Rc<RefCell<Router>>, worker: usize, request: SwarmRequest) {
    if router.borrow_mut().submit(worker, request) {
        let router = Rc::clone(router);
        glommio::spawn_local(async move { router.borrow_mut().flush() }).detach();
    }
}
