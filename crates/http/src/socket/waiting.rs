//! Connections waiting for a request, oldest first, so that a full worker can close
//! the one that has waited longest instead of turning newcomers away.
//!
//! A socket worker holds `network.max_connections`. Refusing newcomers once it is
//! full lets whoever holds the slots keep them: from a few dozen addresses an attacker
//! can open them all and keep each alive with one request every half minute. Most of
//! the time such a connection sits waiting for its next request; so does an honest
//! keep-alive connection between announces, and closing it costs its client one new
//! connection. So when a newcomer finds the worker full, the connection that has been
//! waiting longest is closed to make room ([`WaitingConnections::evict_oldest`]). A
//! connection waits from the moment it begins to wait for a request until the request's
//! head is whole, so one that sent a byte and stopped gives way too (honest clients send
//! a head in one go: they are the newest); a request being served, or its answer on
//! the way, is never cut off this way.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// The connections of one socket worker that wait for a request.
#[derive(Debug, Default)]
pub(crate) struct WaitingConnections {
    next: Cell<u64>,
    /// By when each began to wait (a counter: earlier is smaller).
    waiting: RefCell<BTreeMap<u64, Rc<Eviction>>>,
}

/// A waiting connection's notice that it is to close.
#[derive(Debug, Default)]
pub(crate) struct Eviction {
    evicted: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

/// A connection's place among the waiting ones, left when dropped (its request began).
pub(crate) struct Waiting<'a> {
    connections: &'a WaitingConnections,
    order: u64,
    eviction: Rc<Eviction>,
}

impl WaitingConnections {
    /// Records a connection that begins to wait for a request.
    pub(crate) fn wait(&self) -> Waiting<'_> {
        let order = self.next.get();
        self.next.set(order + 1);
        let eviction = Rc::new(Eviction::default());
        self.waiting.borrow_mut().insert(order, eviction.clone());
        Waiting {
            connections: self,
            order,
            eviction,
        }
    }

    /// Tells the connection that has waited longest to close; false when none waits.
    pub(crate) fn evict_oldest(&self) -> bool {
        let Some((_, eviction)) = self.waiting.borrow_mut().pop_first() else {
            return false;
        };
        eviction.evicted.set(true);
        if let Some(waker) = eviction.waker.borrow_mut().take() {
            waker.wake();
        }
        true
    }

    /// How many wait now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.waiting.borrow().len()
    }
}

impl Waiting<'_> {
    /// Whether this connection was told to close to make room.
    pub(crate) fn is_evicted(&self) -> bool {
        self.eviction.evicted.get()
    }

    /// Completes when this connection is told to close to make room.
    pub(crate) fn evicted(&self) -> impl Future<Output = ()> + '_ {
        Evicted {
            eviction: &self.eviction,
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.connections.waiting.borrow_mut().remove(&self.order);
    }
}

struct Evicted<'a> {
    eviction: &'a Eviction,
}

impl Future for Evicted<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        if self.eviction.evicted.get() {
            return Poll::Ready(());
        }
        *self.eviction.waker.borrow_mut() = Some(context.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_waiting_longest_is_evicted_and_one_that_began_a_request_is_not() {
        let connections = WaitingConnections::default();
        let first = connections.wait();
        let second = connections.wait();
        {
            // This one's request began: it left the waiting ones.
            let _third = connections.wait();
        }
        assert_eq!(connections.len(), 2);
        assert!(connections.evict_oldest());
        assert!(first.eviction.evicted.get());
        assert!(!second.eviction.evicted.get());
        drop(first);
        assert!(connections.evict_oldest());
        assert!(second.eviction.evicted.get());
        assert!(!connections.evict_oldest(), "none waits any more");
        drop(second);
        assert_eq!(connections.len(), 0);
    }

    #[test]
    fn an_evicted_connection_is_woken() {
        let connections = WaitingConnections::default();
        let waiting = connections.wait();
        let mut evicted = std::pin::pin!(waiting.evicted());
        let woken = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        struct Flag(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl std::task::Wake for Flag {
            fn wake(self: std::sync::Arc<Self>) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let waker = Waker::from(std::sync::Arc::new(Flag(woken.clone())));
        let mut context = Context::from_waker(&waker);
        assert!(evicted.as_mut().poll(&mut context).is_pending());
        connections.evict_oldest();
        assert!(woken.load(std::sync::atomic::Ordering::SeqCst));
        assert!(evicted.as_mut().poll(&mut context).is_ready());
    }
}
