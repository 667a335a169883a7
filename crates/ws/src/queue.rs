//! What waits for one WebTorrent connection: the messages to write to it
//! ([`ConnectionQueue`]), limited in number and bytes, and the byte budgets the
//! queues of one socket worker share ([`ByteBudget`]). The session (sans-IO) and the
//! socket worker's router both hold a connection's queue; it lives here, apart from
//! both, so that neither imports the other's internals.
//!
//! Offers from other peers are disposable (the offerer gets others' answers, or asks
//! again at its next announce): a queue at its limit drops its oldest offers to make
//! room, and an offer that still does not fit is dropped itself. Only the
//! connection's own traffic (replies, answers to its offers) past the limit marks it
//! as too slow ([`Overflow`]), and the connection closes itself.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

use shoal_ws_protocol::ServerMessage;

use crate::messages::ToConnection;

/// Messages waiting to be written to one connection, limited in number and in bytes
/// (offers and answers carry session descriptions of up to a message's size each).
pub(crate) struct ConnectionQueue {
    messages: RefCell<VecDeque<ToConnection>>,
    /// Estimated bytes of the queued messages as written.
    bytes: Cell<usize>,
    /// Bytes of the write under way (messages taken from the queue, not yet sent).
    writing: Cell<usize>,
    waker: Cell<Option<Waker>>,
    overflowed: Cell<Option<Overflow>>,
    limit: QueueLimit,
    /// The socket worker's budget, which counts `bytes` and `writing` until the queue
    /// overflows (the connection is closing then) or is dropped.
    budget: Rc<ByteBudget>,
    /// Bytes of a message the client is still sending, as the connection last said
    /// (`socket::router::Router::note_receiving`).
    receiving: Cell<usize>,
    /// When that message started arriving: the router's count of messages started in
    /// part at the time (`Router::note_receiving`), so the lowest is the oldest.
    receiving_since: Cell<u64>,
    /// The socket worker's budget for those, which counts `receiving` likewise.
    incoming: Rc<ByteBudget>,
}

/// Which limit a queue ran into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Overflow {
    /// Its own limit in messages or bytes.
    Connection,
    /// The socket worker's budget, and this connection held the most.
    Worker,
    /// The socket worker's budget for messages still arriving, and this connection's
    /// had been arriving the longest.
    Sender,
}

/// Bytes held for all connections of one socket worker, in one direction: waiting to
/// be written, or of messages still arriving.
#[derive(Debug)]
pub(crate) struct ByteBudget {
    limit: usize,
    used: Cell<usize>,
}

impl ByteBudget {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            limit,
            used: Cell::new(0),
        }
    }

    /// Bytes counted now.
    pub(crate) fn used(&self) -> usize {
        self.used.get()
    }

    /// Bytes it may count.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    fn add(&self, bytes: usize) {
        self.used.set(self.used.get() + bytes);
    }

    fn remove(&self, bytes: usize) {
        self.used.set(self.used.get() - bytes);
    }
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
    /// Bytes of a message the client is still sending, as the connection last said.
    pub(crate) fn receiving(&self) -> usize {
        self.receiving.get()
    }

    /// When that message started arriving, in the router's count of messages
    /// started in part.
    pub(crate) fn receiving_since(&self) -> u64 {
        self.receiving_since.get()
    }

    /// Stamps when the message now arriving started (see [`receiving_since`]).
    ///
    /// [`receiving_since`]: Self::receiving_since
    pub(crate) fn set_receiving_since(&self, started: u64) {
        self.receiving_since.set(started);
    }

    pub(crate) fn new(limit: QueueLimit, budget: Rc<ByteBudget>, incoming: Rc<ByteBudget>) -> Self {
        Self {
            messages: RefCell::new(VecDeque::new()),
            bytes: Cell::new(0),
            writing: Cell::new(0),
            waker: Cell::new(None),
            overflowed: Cell::new(None),
            limit,
            budget,
            receiving: Cell::new(0),
            receiving_since: Cell::new(0),
            incoming,
        }
    }

    /// Queues a message. Past a limit the oldest offers waiting go first; an offer
    /// that does not fit even then is dropped, anything else marks the connection as
    /// too slow. Returns the offers dropped.
    pub(crate) fn push(&self, message: ToConnection) -> u64 {
        let weight = message.weight();
        self.push_weighed(message, weight)
    }

    /// [`push`](Self::push) of a message whose weight is known.
    pub(crate) fn push_weighed(&self, message: ToConnection, weight: usize) -> u64 {
        if self.overflowed.get().is_some() {
            self.wake();
            return 0;
        }
        let fits = |queue: &Self| {
            queue.messages.borrow().len() < queue.limit.messages
                && queue.bytes.get() + weight <= queue.limit.bytes
        };
        let mut dropped = 0;
        let mut room = fits(self);
        while !room && self.drop_oldest_offer() {
            dropped += 1;
            room = fits(self);
        }
        if room {
            self.messages.borrow_mut().push_back(message);
            self.bytes.set(self.bytes.get() + weight);
            self.budget.add(weight);
        } else if is_offer(&message) {
            dropped += 1;
        } else {
            self.overflow_with(Overflow::Connection);
        }
        self.wake();
        dropped
    }

    /// Drops the oldest offer waiting; false when none waits.
    fn drop_oldest_offer(&self) -> bool {
        let mut messages = self.messages.borrow_mut();
        let Some(at) = messages.iter().position(is_offer) else {
            return false;
        };
        let offer = messages.remove(at).expect("found");
        let weight = offer.weight();
        self.bytes.set(self.bytes.get() - weight);
        self.budget.remove(weight);
        true
    }

    /// Drops every offer waiting; returns how many.
    pub(crate) fn drop_offers(&self) -> u64 {
        let mut dropped = 0;
        while self.drop_oldest_offer() {
            dropped += 1;
        }
        dropped
    }

    /// The next message to write; its bytes stay counted in the budget until the
    /// write they go into is done ([`set_writing`](Self::set_writing)).
    pub(crate) fn pop(&self) -> Option<ToConnection> {
        let message = {
            let mut messages = self.messages.borrow_mut();
            let message = messages.pop_front()?;
            if messages.is_empty() {
                // An idle connection keeps no queue: a few hundred bytes each, for a
                // new allocation when its next messages come.
                *messages = VecDeque::new();
            }
            message
        };
        let weight = message.weight();
        self.bytes.set(self.bytes.get() - weight);
        if self.overflowed.get().is_none() {
            self.writing.set(self.writing.get() + weight);
        }
        Some(message)
    }

    /// The connection's write under way holds `bytes` (0 once it is done): what the
    /// budget counts for it from now on, in place of the messages popped for it.
    pub(crate) fn set_writing(&self, bytes: usize) {
        if self.overflowed.get().is_none() {
            self.budget.remove(self.writing.get());
            self.budget.add(bytes);
            self.writing.set(bytes);
        }
    }

    /// Whether no message waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.messages.borrow().is_empty()
    }

    /// Counts `bytes` as what this connection holds of a message still arriving.
    pub(crate) fn set_receiving(&self, bytes: usize) {
        if self.overflowed.get().is_none() {
            self.incoming.remove(self.receiving.get());
            self.incoming.add(bytes);
            self.receiving.set(bytes);
        }
    }

    /// Bytes this connection holds: waiting, and in the write under way.
    pub(crate) fn holding(&self) -> usize {
        self.bytes.get() + self.writing.get()
    }

    /// Whether a message had to be refused: the client reads too slowly.
    pub(crate) fn overflowed(&self) -> bool {
        self.overflowed.get().is_some()
    }

    /// Which limit the queue ran into, once it overflowed.
    pub(crate) fn overflow_reason(&self) -> Option<Overflow> {
        self.overflowed.get()
    }

    /// Marks the connection as too slow. It is closing: the budget stops counting
    /// it, and past the worker's budget its waiting messages go at once.
    pub(crate) fn overflow_with(&self, reason: Overflow) {
        if self.overflowed.get().is_some() {
            return;
        }
        self.overflowed.set(Some(reason));
        self.budget.remove(self.holding());
        self.writing.set(0);
        self.incoming.remove(self.receiving.replace(0));
        if reason == Overflow::Worker {
            self.messages.borrow_mut().clear();
            self.bytes.set(0);
        }
        self.wake();
    }

    fn wake(&self) {
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Resolves once the queue overflowed.
    pub(crate) async fn overflow(&self) {
        poll_fn(|cx| {
            if self.overflowed.get().is_some() {
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
            if !self.messages.borrow().is_empty() || self.overflowed.get().is_some() {
                Poll::Ready(())
            } else {
                self.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await
    }
}

/// Whether `message` is an offer from another peer: disposable.
pub(crate) fn is_offer(message: &ToConnection) -> bool {
    matches!(message, ToConnection::Message(ServerMessage::Offer(_)))
}

impl Drop for ConnectionQueue {
    fn drop(&mut self) {
        if self.overflowed.get().is_none() {
            self.budget.remove(self.holding());
            self.incoming.remove(self.receiving.get());
        }
    }
}
