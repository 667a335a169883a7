//! Which connection gives way when a socket worker is full: the one quiet the longest.
//!
//! A TCP tracker holds a fixed number of connections per socket worker. Refusing
//! newcomers once it is full lets whoever holds the slots keep them: from a few dozen
//! addresses an attacker can open them all and keep each with a message now and then.
//! So each connection that can spare its place holds a [`Place`] in its worker's
//! [`EvictionOrder`], and a newcomer that finds the worker full closes the one whose
//! place is oldest ([`EvictionOrder::evict_oldest`]).
//!
//! What "quiet" means is the tracker's: an HTTP connection holds a place while it
//! waits for a request (a request being answered is never cut off); a WebTorrent
//! connection holds one for its whole life and moves to the newest end with every
//! tracker message it sends ([`Place::touch`]), so bytes, pings or a message dripped
//! in pieces do not keep it; a TLS handshake holds one from the moment the connection
//! was accepted, so a drip of bytes cannot make an unfinished handshake new again.
//! An honest client is the newest: it talks when it connects and whenever it
//! announces.
//!
//! One executor, one thread: `Cell` and `RefCell` suffice.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// The connections of one socket worker that may give way, oldest first.
#[derive(Debug, Default)]
pub(crate) struct EvictionOrder {
    next: Cell<u64>,
    /// By when each was last heard from (a counter: earlier is smaller).
    places: RefCell<BTreeMap<u64, Rc<Notice>>>,
}

/// A connection's notice that it is to close.
#[derive(Debug, Default)]
struct Notice {
    evicted: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

/// A connection's place in an `EvictionOrder`, left when dropped.
#[derive(Debug)]
pub struct Place<'a> {
    order: &'a EvictionOrder,
    at: u64,
    notice: Rc<Notice>,
}

impl EvictionOrder {
    /// A place at the newest end for a connection that may give way from now on.
    pub(crate) fn enter(&self) -> Place<'_> {
        let notice = Rc::new(Notice::default());
        let at = self.newest(notice.clone());
        Place {
            order: self,
            at,
            notice,
        }
    }

    fn newest(&self, notice: Rc<Notice>) -> u64 {
        let at = self.next.get();
        self.next.set(at + 1);
        self.places.borrow_mut().insert(at, notice);
        at
    }

    /// Tells the connection quiet the longest to close; false when none may.
    pub(crate) fn evict_oldest(&self) -> bool {
        let Some((_, notice)) = self.places.borrow_mut().pop_first() else {
            return false;
        };
        notice.evicted.set(true);
        if let Some(waker) = notice.waker.borrow_mut().take() {
            waker.wake();
        }
        true
    }

    /// How many connections hold a place.
    pub(crate) fn len(&self) -> usize {
        self.places.borrow().len()
    }
}

impl Place<'_> {
    /// The connection was heard from: it moves to the newest end (unless it was told
    /// to close already).
    pub fn touch(&mut self) {
        if self.notice.evicted.get() {
            return;
        }
        self.order.places.borrow_mut().remove(&self.at);
        self.at = self.order.newest(self.notice.clone());
    }

    /// Whether this connection was told to close to make room.
    pub fn is_evicted(&self) -> bool {
        self.notice.evicted.get()
    }

    /// Completes when this connection is told to close to make room.
    pub fn evicted(&self) -> impl Future<Output = ()> + '_ {
        Evicted {
            notice: &self.notice,
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if !self.notice.evicted.get() {
            self.order.places.borrow_mut().remove(&self.at);
        }
    }
}

struct Evicted<'a> {
    notice: &'a Notice,
}

impl Future for Evicted<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<()> {
        if self.notice.evicted.get() {
            return Poll::Ready(());
        }
        *self.notice.waker.borrow_mut() = Some(context.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_quiet_longest_gives_way_and_one_that_left_does_not() {
        let order = EvictionOrder::default();
        let first = order.enter();
        let second = order.enter();
        {
            // This one left (its request began, or it closed).
            let _third = order.enter();
        }
        assert_eq!(order.len(), 2);
        assert!(order.evict_oldest());
        assert!(first.is_evicted());
        assert!(!second.is_evicted());
        drop(first);
        assert!(order.evict_oldest());
        assert!(second.is_evicted());
        assert!(!order.evict_oldest(), "none left");
        drop(second);
        assert_eq!(order.len(), 0);
    }

    #[test]
    fn a_connection_heard_from_becomes_the_newest() {
        let order = EvictionOrder::default();
        let mut talkative = order.enter();
        let quiet = order.enter();
        talkative.touch();
        assert!(order.evict_oldest());
        assert!(quiet.is_evicted() && !talkative.is_evicted());
        // Once evicted, a message does not take it back.
        assert!(order.evict_oldest());
        talkative.touch();
        assert!(talkative.is_evicted());
        assert_eq!(order.len(), 0);
    }

    #[test]
    fn an_evicted_connection_is_woken() {
        let order = EvictionOrder::default();
        let place = order.enter();
        let mut evicted = std::pin::pin!(place.evicted());
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
        order.evict_oldest();
        assert!(woken.load(std::sync::atomic::Ordering::SeqCst));
        assert!(evicted.as_mut().poll(&mut context).is_ready());
    }
}
