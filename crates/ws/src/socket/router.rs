//! Requests on their way to swarm workers and messages on their way to connections,
//! inside one socket worker (one executor, one thread: `Rc` and `RefCell`
//! suffice).
//!
//! Requests go into a per-swarm-worker outbox; the first request of a round
//! schedules a flush task, which runs after every task that is ready now has run, so
//! all requests of one round of the event loop leave in one channel message per swarm
//! worker. With `swarm_workers = 0` the router keeps the torrents itself and serves
//! each request at once.
//!
//! Messages for connections ([`Router::deliver`]) go into each connection's
//! [`ConnectionQueue`]. Offers from other peers are disposable (the offerer gets
//! others' answers, or asks again at its next announce): a queue at its limit drops
//! its oldest offers to make room, and an offer that still does not fit is dropped
//! itself. Only the connection's own traffic (replies, answers to its offers) past
//! the limit marks it as too slow, and the connection closes itself. So peers that
//! flood a reader with offers cost it offers, not its place in the swarm: before,
//! ten connections sending large offers got an honest seeder reading 200 KB/s closed
//! within two seconds, and the flooders stayed.
//!
//! The queues of one socket worker also share a byte budget ([`ByteBudget`]): the
//! bytes waiting in them and in the writes under way. Without it, clients that never
//! read could make every connection hold its own limit, `max_connections` times over.
//! A message that would take the worker past its budget first drops the offers
//! waiting for the connection holding the most, then, if that is not enough, closes
//! it. That is the slowest reader, and a client that keeps up holds next to nothing.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use crossbeam_channel::Sender;
use hashbrown::HashMap;
use shoal_worker::{LocalSwarm, SwarmLink};

use crate::queue::{ByteBudget, ConnectionQueue, Overflow, QueueLimit, is_offer};

use crate::messages::{ConnectionRef, Delivery, RequestKind, SwarmRequest, ToConnection};
use crate::shard::WsShard;

/// The router of one socket worker.
#[derive(Debug)]
pub(crate) struct Router {
    socket_worker: u16,
    /// Batches for the swarm workers, or the torrents kept here.
    pub(crate) link: SwarmLink<WsShard>,
    connections: HashMap<u64, Rc<ConnectionQueue>>,
    next_connection: u64,
    produced: Vec<(ConnectionRef, ToConnection)>,
    budget: Rc<ByteBudget>,
    incoming: Rc<ByteBudget>,
    /// Messages that started arriving in part over this worker's connections (a
    /// clock for which started first).
    parts_started: Cell<u64>,
    /// Offers dropped from full queues since the last [`take_offers_dropped`].
    ///
    /// [`take_offers_dropped`]: Router::take_offers_dropped
    offers_dropped: Cell<u64>,
}

impl Router {
    /// A router for `socket_worker` sending to `swarms`, or, when `local` is given,
    /// answering from its own torrents; its connections may hold `outgoing_budget`
    /// bytes waiting to be written in all, and `incoming_budget` of messages still
    /// arriving.
    pub(crate) fn new(
        socket_worker: usize,
        swarms: Vec<Sender<Vec<SwarmRequest>>>,
        local: Option<LocalSwarm<WsShard>>,
        outgoing_budget: usize,
        incoming_budget: usize,
    ) -> Self {
        Self {
            socket_worker: socket_worker as u16,
            link: SwarmLink::new(swarms, local),
            connections: HashMap::new(),
            next_connection: 0,
            produced: Vec::new(),
            budget: Rc::new(ByteBudget::new(outgoing_budget)),
            incoming: Rc::new(ByteBudget::new(incoming_budget)),
            parts_started: Cell::new(0),
            offers_dropped: Cell::new(0),
        }
    }

    /// Offers dropped from full queues since the last call.
    pub(crate) fn take_offers_dropped(&self) -> u64 {
        self.offers_dropped.replace(0)
    }

    fn count_dropped(&self, offers: u64) {
        self.offers_dropped.set(self.offers_dropped.get() + offers);
    }

    /// Bytes of messages still arriving over this worker's connections.
    pub(crate) fn incoming_bytes(&self) -> usize {
        self.incoming.used()
    }

    /// Notes that `queue`'s connection holds `bytes` of a message still arriving.
    /// Past the worker's budget, the connection whose message has been arriving
    /// longest is closed (it may be this one): clients that each send most of a large
    /// message and stop would otherwise hold up to `max_connections` times a
    /// message's size until their idle timeouts, a few hundred kilobytes of upload
    /// buying gigabytes of memory for minutes. The oldest, not the largest: a
    /// browser's large announce arrives within moments, while parts left hanging to
    /// fill the budget grow old, and with the largest a client holding the budget
    /// nearly full in small parts could have every large announce closed.
    pub(crate) fn note_receiving(&self, queue: &ConnectionQueue, bytes: usize) {
        if queue.receiving() == 0 && bytes > 0 {
            let started = self.parts_started.get();
            self.parts_started.set(started + 1);
            queue.set_receiving_since(started);
        }
        queue.set_receiving(bytes);
        let incoming = &self.incoming;
        while incoming.used() > incoming.limit() {
            let oldest = self
                .connections
                .values()
                .filter(|queue| !queue.overflowed() && queue.receiving() > 0)
                .min_by_key(|queue| queue.receiving_since());
            let Some(oldest) = oldest else { break };
            oldest.overflow_with(Overflow::Sender);
        }
    }

    /// Bytes waiting to be written over this worker's connections, writes under way
    /// included.
    pub(crate) fn outgoing_bytes(&self) -> usize {
        self.budget.used()
    }

    /// Number of swarm workers (1 when the torrents are kept here).
    pub(crate) fn swarm_workers(&self) -> usize {
        self.link.shards()
    }

    /// A new connection and its queue of at most `limit`.
    pub(crate) fn register(&mut self, limit: QueueLimit) -> (ConnectionRef, Rc<ConnectionQueue>) {
        self.next_connection += 1;
        let queue = Rc::new(ConnectionQueue::new(
            limit,
            Rc::clone(&self.budget),
            Rc::clone(&self.incoming),
        ));
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

    /// Queues `message` for connection `id`, if it is still open. A message that
    /// would take the worker past its budget first drops the offers waiting for the
    /// connection holding the most (the slowest reader; it may be `id` itself), then,
    /// if still past it, drops the message when it is an offer, or closes that
    /// connection.
    fn push(&self, id: u64, message: ToConnection) {
        let Some(queue) = self.connections.get(&id) else {
            return;
        };
        let budget = &self.budget;
        let weight = message.weight();
        if budget.used() + weight > budget.limit() {
            let largest = self
                .connections
                .values()
                .filter(|queue| !queue.overflowed())
                .max_by_key(|queue| queue.holding());
            if let Some(largest) = largest.filter(|queue| queue.holding() > 0) {
                self.count_dropped(largest.drop_offers());
                if budget.used() + weight > budget.limit() {
                    if is_offer(&message) {
                        self.count_dropped(1);
                        return;
                    }
                    largest.overflow_with(Overflow::Worker);
                }
            }
        }
        let dropped = queue.push_weighed(message, weight);
        if dropped > 0 {
            self.count_dropped(dropped);
        }
    }

    /// Sends `request` to swarm worker `worker` (or serves it here). Returns whether
    /// the caller must schedule a [`Router::flush`].
    pub(crate) fn submit(&mut self, worker: usize, request: SwarmRequest) -> bool {
        if let Some(local) = self.link.local() {
            let mut produced = std::mem::take(&mut self.produced);
            local.serve(|swarms, now| swarms.serve(request, now, &mut produced));
            for (to, message) in produced.drain(..) {
                self.push(to.id, message);
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
                self.push(request.from.id, busy);
            }
        }
    }

    /// Takes a batch of messages from a swarm worker.
    pub(crate) fn deliver(&mut self, batch: Vec<Delivery>) {
        for (connection, message) in batch {
            self.push(connection, message);
        }
    }
}

/// Submits `request` and schedules the flush if this is the first of the round.
pub(crate) fn submit(router: &Rc<RefCell<Router>>, worker: usize, request: SwarmRequest) {
    if router.borrow_mut().submit(worker, request) {
        let router = Rc::clone(router);
        shoal_tcp::spawn_local(async move { router.borrow_mut().flush() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_ws_protocol::ServerMessage;

    /// A message of `ToConnection::weight` 160.
    fn message() -> ToConnection {
        ToConnection::Shed {
            info_hash: None,
            scrape_id: None,
        }
    }

    const WEIGHT: usize = 160;

    /// An offer of `ToConnection::weight` 160 + `size`, told apart by `n`.
    fn offer(n: u8, size: usize) -> ToConnection {
        let text = format!("{{\"sdp\":\"{}\"}}", "x".repeat(size - 10));
        ToConnection::Message(ServerMessage::Offer(shoal_ws_protocol::ForwardedOffer {
            info_hash: shoal_ws_protocol::Id20([n; 20]),
            peer_id: shoal_ws_protocol::Id20([n; 20]),
            offer_id: shoal_ws_protocol::Id20([n; 20]),
            offer: serde_json::value::RawValue::from_string(text).unwrap(),
        }))
    }

    fn offer_tag(message: &ToConnection) -> Option<u8> {
        match message {
            ToConnection::Message(ServerMessage::Offer(offer)) => Some(offer.info_hash.0[0]),
            _ => None,
        }
    }

    const ROOMY: QueueLimit = QueueLimit {
        messages: 1000,
        bytes: 1 << 20,
    };

    fn router(budget: usize) -> Router {
        Router::new(0, Vec::new(), None, budget, 1 << 20)
    }

    #[test]
    fn the_budget_counts_waiting_bytes_and_the_write_under_way_until_it_is_done() {
        let mut router = router(1 << 20);
        let (connection, queue) = router.register(ROOMY);
        for _ in 0..3 {
            router.push(connection.id, message());
        }
        assert_eq!(router.outgoing_bytes(), 3 * WEIGHT);
        // Taken for writing: still held until written.
        queue.pop().unwrap();
        queue.pop().unwrap();
        assert_eq!(router.outgoing_bytes(), 3 * WEIGHT);
        queue.set_writing(1000);
        assert_eq!(router.outgoing_bytes(), WEIGHT + 1000);
        queue.set_writing(0);
        assert_eq!(router.outgoing_bytes(), WEIGHT);
        router.unregister(connection);
        drop(queue);
        assert_eq!(router.outgoing_bytes(), 0);
    }

    #[test]
    fn a_connection_over_its_own_limit_stops_counting_at_once() {
        let mut router = router(1 << 20);
        let limit = QueueLimit {
            messages: 1000,
            bytes: 2 * WEIGHT,
        };
        let (connection, queue) = router.register(limit);
        router.push(connection.id, message());
        queue.pop().unwrap();
        queue.set_writing(500);
        router.push(connection.id, message());
        router.push(connection.id, message());
        router.push(connection.id, message());
        assert_eq!(queue.overflow_reason(), Some(Overflow::Connection));
        assert_eq!(router.outgoing_bytes(), 0);
        // Closing: what it still does must not count twice.
        while queue.pop().is_some() {}
        queue.set_writing(0);
        router.unregister(connection);
        drop(queue);
        assert_eq!(router.outgoing_bytes(), 0);
    }

    #[test]
    fn past_the_budget_the_connection_holding_the_most_is_closed() {
        let mut router = router(6 * WEIGHT);
        let (slow, slow_queue) = router.register(ROOMY);
        let (prompt, prompt_queue) = router.register(ROOMY);
        let (idle, idle_queue) = router.register(ROOMY);
        for _ in 0..4 {
            router.push(slow.id, message());
        }
        router.push(prompt.id, message());
        router.push(idle.id, message());
        assert_eq!(router.outgoing_bytes(), 6 * WEIGHT);
        // One more goes past the budget: the slow reader goes, with what it held.
        router.push(prompt.id, message());
        assert_eq!(slow_queue.overflow_reason(), Some(Overflow::Worker));
        assert!(slow_queue.pop().is_none());
        assert!(!prompt_queue.overflowed() && !idle_queue.overflowed());
        assert_eq!(router.outgoing_bytes(), 3 * WEIGHT);
        // A write under way counts too: now the prompt connection holds the most.
        prompt_queue.pop().unwrap();
        prompt_queue.set_writing(3 * WEIGHT);
        router.push(idle.id, message());
        assert_eq!(router.outgoing_bytes(), 6 * WEIGHT);
        assert!(!prompt_queue.overflowed());
        router.push(idle.id, message());
        assert_eq!(prompt_queue.overflow_reason(), Some(Overflow::Worker));
        assert!(!idle_queue.overflowed());
        assert_eq!(router.outgoing_bytes(), 3 * WEIGHT);
    }

    #[test]
    fn the_recipient_itself_may_be_the_one_that_holds_the_most() {
        let mut router = router(3 * WEIGHT);
        let (slow, slow_queue) = router.register(ROOMY);
        let (other, _other_queue) = router.register(ROOMY);
        for _ in 0..3 {
            router.push(slow.id, message());
        }
        router.push(slow.id, message());
        assert_eq!(slow_queue.overflow_reason(), Some(Overflow::Worker));
        assert_eq!(router.outgoing_bytes(), 0);
        router.push(other.id, message());
        assert_eq!(router.outgoing_bytes(), WEIGHT);
    }

    #[test]
    fn past_the_incoming_budget_the_oldest_message_under_way_is_closed() {
        let mut router = Router::new(0, Vec::new(), None, 1 << 20, 1000);
        let (_, hanging) = router.register(ROOMY);
        let (small_connection, small) = router.register(ROOMY);
        let (_, arriving) = router.register(ROOMY);
        router.note_receiving(&hanging, 300);
        router.note_receiving(&small, 300);
        assert_eq!(router.incoming_bytes(), 600);
        // A message completed: nothing held for it any more, and the next one is new.
        router.note_receiving(&small, 0);
        router.note_receiving(&small, 300);
        router.note_receiving(&arriving, 400);
        assert_eq!(router.incoming_bytes(), 1000);
        assert!(!hanging.overflowed(), "at the budget, not past it");
        // Past it: the oldest part goes, with what it held, though it is the
        // smallest and not the one whose bytes came.
        router.note_receiving(&arriving, 450);
        assert_eq!(hanging.overflow_reason(), Some(Overflow::Sender));
        assert!(!small.overflowed() && !arriving.overflowed());
        assert_eq!(router.incoming_bytes(), 750);
        // Closing, it counts no more.
        router.note_receiving(&hanging, 900);
        assert_eq!(router.incoming_bytes(), 750);
        // A part that keeps growing stays as old as its start: `small` finishes and
        // starts another message, now newer than `arriving`, so the sender goes.
        router.note_receiving(&small, 0);
        router.note_receiving(&small, 300);
        router.note_receiving(&arriving, 800);
        assert_eq!(arriving.overflow_reason(), Some(Overflow::Sender));
        assert!(!small.overflowed());
        assert_eq!(router.incoming_bytes(), 300);
        router.unregister(small_connection);
        drop(small);
        assert_eq!(router.incoming_bytes(), 0);
    }

    #[test]
    fn a_full_queue_drops_its_oldest_offers_not_the_reader() {
        let mut router = router(1 << 20);
        let limit = QueueLimit {
            messages: 4,
            bytes: 4 * (WEIGHT + 1000),
        };
        let (connection, queue) = router.register(limit);
        for n in 0..4 {
            router.push(connection.id, offer(n, 1000));
        }
        router.push(connection.id, message());
        router.push(connection.id, offer(4, 1000));
        assert!(!queue.overflowed(), "offers are disposable");
        assert_eq!(router.take_offers_dropped(), 2);
        let mut left = Vec::new();
        while let Some(message) = queue.pop() {
            left.push(offer_tag(&message));
        }
        // The two oldest offers went; the reply and the newest offer stayed, in order.
        assert_eq!(left, vec![Some(2), Some(3), None, Some(4)]);
        queue.set_writing(0);
        assert_eq!(router.outgoing_bytes(), 0);
    }

    #[test]
    fn a_reader_behind_on_its_own_traffic_is_still_closed() {
        let mut router = router(1 << 20);
        let limit = QueueLimit {
            messages: 3,
            bytes: 1 << 20,
        };
        let (connection, queue) = router.register(limit);
        router.push(connection.id, offer(1, 500));
        for _ in 0..3 {
            router.push(connection.id, message());
        }
        assert!(!queue.overflowed(), "its offer made room");
        assert_eq!(router.take_offers_dropped(), 1);
        // An offer that finds no offer to push out is dropped itself.
        router.push(connection.id, offer(2, 500));
        assert!(!queue.overflowed());
        assert_eq!(router.take_offers_dropped(), 1);
        // Its own traffic past the limit closes it.
        router.push(connection.id, message());
        assert_eq!(queue.overflow_reason(), Some(Overflow::Connection));
    }

    #[test]
    fn past_the_worker_budget_the_largest_holders_offers_go_before_it_does() {
        let mut router = router(4 * (WEIGHT + 1000));
        let (flooded, flooded_queue) = router.register(ROOMY);
        let (other, other_queue) = router.register(ROOMY);
        for n in 0..3 {
            router.push(flooded.id, offer(n, 1000));
        }
        router.push(flooded.id, message());
        // Past the budget: the flooded reader's offers go, the reader stays.
        router.push(other.id, offer(9, 1000));
        assert!(!flooded_queue.overflowed() && !other_queue.overflowed());
        assert_eq!(router.take_offers_dropped(), 3);
        assert_eq!(router.outgoing_bytes(), WEIGHT + WEIGHT + 1000);
    }
}
