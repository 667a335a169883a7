//! Requests on their way to swarm workers and replies on their way back, inside one
//! socket worker (one glommio executor, one thread: `Rc` and `RefCell` suffice).
//!
//! A connection task calls [`call`] with the requests its HTTP request needs
//! (one for an announce, one per swarm worker for a scrape) and awaits the merged
//! reply. Requests go into a per-swarm-worker outbox; the first request of a round
//! schedules a flush task, which runs after every task that is ready now has run, so
//! all requests of one round of the event loop leave in one channel message per swarm
//! worker. Replies come back through [`Router::deliver`], called by the reply pump.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crossbeam_channel::Sender;
use shoal_http_protocol::InfoHash;
use shoal_runtime::{LocalSwarm, SwarmLink};
use shoal_swarm::ScrapeStats;

use crate::messages::{ReplyTo, Slot, SwarmReply, SwarmReplyKind, SwarmRequest, SwarmRequestKind};
use crate::shard::HttpShard;

/// Why a call has no reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CallError {
    /// A swarm worker's queue was full: the request was shed.
    Busy,
}

/// What a call resolves to.
#[derive(Debug)]
pub(crate) enum Merged {
    /// An announce reply.
    Announce(SwarmReplyKind),
    /// Scrape counts from every part, in arrival order.
    Scrape(Vec<(InfoHash, ScrapeStats)>),
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Free,
    Waiting {
        parts_left: u32,
        waker: Option<Waker>,
        announce: Option<SwarmReplyKind>,
        scrape: Vec<(InfoHash, ScrapeStats)>,
    },
    Done(Result<Merged, CallError>),
}

#[derive(Debug, Default)]
struct Entry {
    generation: u32,
    state: State,
}

/// The router of one socket worker.
#[derive(Debug)]
pub(crate) struct Router {
    socket_worker: u16,
    /// Batches for the swarm workers, or the torrents kept here.
    pub(crate) link: SwarmLink<HttpShard>,
    slots: Vec<Entry>,
    free: Vec<u32>,
}

impl Router {
    /// A router for `socket_worker` sending to `swarms`, or, when `local` is given,
    /// answering from its own torrents.
    pub(crate) fn new(
        socket_worker: usize,
        swarms: Vec<Sender<Vec<SwarmRequest>>>,
        local: Option<LocalSwarm<HttpShard>>,
    ) -> Self {
        Self {
            socket_worker: socket_worker as u16,
            link: SwarmLink::new(swarms, local),
            slots: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Number of swarm workers (1 when the torrents are kept here).
    pub(crate) fn swarm_workers(&self) -> usize {
        self.link.shards()
    }

    /// Queues `parts` (swarm worker, request) for one reply and returns the future of
    /// that reply. The caller must make sure [`Router::flush`] runs (see
    /// [`call`]).
    fn enqueue(&mut self, parts: Vec<(usize, SwarmRequestKind)>) -> (Slot, bool) {
        let index = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Entry::default());
            (self.slots.len() - 1) as u32
        });
        let entry = &mut self.slots[index as usize];
        entry.generation = entry.generation.wrapping_add(1);
        entry.state = State::Waiting {
            parts_left: parts.len() as u32,
            waker: None,
            announce: None,
            scrape: Vec::new(),
        };
        let slot = Slot {
            index,
            generation: entry.generation,
        };
        for (worker, kind) in parts {
            let reply_to = ReplyTo {
                socket_worker: self.socket_worker,
                slot,
            };
            self.link
                .batch(worker)
                .push(SwarmRequest { reply_to, kind });
        }
        (slot, self.link.needs_flush())
    }

    /// Sends every outbox to its swarm worker. Requests that find a full queue fail
    /// their calls with [`CallError::Busy`] at once.
    pub(crate) fn flush(&mut self) {
        for (_, batch) in self.link.flush() {
            self.link.count_shed(batch.len());
            for request in batch {
                self.finish(request.reply_to.slot, Err(CallError::Busy));
            }
        }
    }

    /// Takes replies from a swarm worker.
    pub(crate) fn deliver(&mut self, replies: Vec<SwarmReply>) {
        for reply in replies {
            let Some(entry) = self.live(reply.slot) else {
                continue;
            };
            let State::Waiting {
                parts_left,
                announce,
                scrape,
                ..
            } = &mut entry.state
            else {
                continue;
            };
            match reply.kind {
                SwarmReplyKind::Scrape(counts) => scrape.extend(counts),
                other => *announce = Some(other),
            }
            *parts_left -= 1;
            if *parts_left == 0 {
                let merged = match announce.take() {
                    Some(announce) => Merged::Announce(announce),
                    None => Merged::Scrape(std::mem::take(scrape)),
                };
                self.finish(reply.slot, Ok(merged));
            }
        }
    }

    fn finish(&mut self, slot: Slot, result: Result<Merged, CallError>) {
        let Some(entry) = self.live(slot) else { return };
        if let State::Waiting { waker, .. } =
            std::mem::replace(&mut entry.state, State::Done(result))
            && let Some(waker) = waker
        {
            waker.wake();
        }
    }

    fn live(&mut self, slot: Slot) -> Option<&mut Entry> {
        self.slots.get_mut(slot.index as usize).filter(|entry| {
            entry.generation == slot.generation && !matches!(entry.state, State::Free)
        })
    }

    fn release(&mut self, slot: Slot) {
        if let Some(entry) = self.live(slot) {
            entry.state = State::Free;
            self.free.push(slot.index);
        }
    }

    /// Answers `parts` from the local torrents, if this worker keeps them; otherwise
    /// gives the parts back.
    fn answer_locally(
        &mut self,
        parts: Vec<(usize, SwarmRequestKind)>,
    ) -> Result<Merged, Vec<(usize, SwarmRequestKind)>> {
        let Some(local) = self.link.local() else {
            return Err(parts);
        };
        Ok(local.serve(|shard, now| {
            let mut announce = None;
            let mut scrape = Vec::new();
            for (_, kind) in parts {
                match shard.serve(kind, now) {
                    SwarmReplyKind::Scrape(counts) => scrape.extend(counts),
                    other => announce = Some(other),
                }
            }
            announce.map_or(Merged::Scrape(scrape), Merged::Announce)
        }))
    }
}

/// Sends `parts` and waits for the merged reply.
pub(crate) async fn call(
    router: &Rc<RefCell<Router>>,
    parts: Vec<(usize, SwarmRequestKind)>,
) -> Result<Merged, CallError> {
    let parts = match router.borrow_mut().answer_locally(parts) {
        Ok(merged) => return Ok(merged),
        Err(parts) => parts,
    };
    let (slot, schedule_flush) = router.borrow_mut().enqueue(parts);
    if schedule_flush {
        let router = router.clone();
        // Runs after the tasks already queued, so their requests share the batch.
        glommio::spawn_local(async move { router.borrow_mut().flush() }).detach();
    }
    ReplyFuture {
        router: router.clone(),
        slot,
        done: false,
    }
    .await
}

/// Resolves when the slot's reply is complete. Dropping it early (the connection went
/// away) frees the slot; late replies then find a newer generation and are ignored.
struct ReplyFuture {
    router: Rc<RefCell<Router>>,
    slot: Slot,
    done: bool,
}

impl Future for ReplyFuture {
    type Output = Result<Merged, CallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut router = self.router.borrow_mut();
        let slot = self.slot;
        let Some(entry) = router.live(slot) else {
            return Poll::Ready(Err(CallError::Busy));
        };
        match &mut entry.state {
            State::Waiting { waker, .. } => {
                *waker = Some(cx.waker().clone());
                Poll::Pending
            }
            State::Done(_) => {
                let State::Done(result) = std::mem::take(&mut entry.state) else {
                    unreachable!()
                };
                router.free.push(slot.index);
                drop(router);
                self.done = true;
                Poll::Ready(result)
            }
            State::Free => Poll::Ready(Err(CallError::Busy)),
        }
    }
}

impl Drop for ReplyFuture {
    fn drop(&mut self) {
        if !self.done
            && let Ok(mut router) = self.router.try_borrow_mut()
        {
            router.release(self.slot);
        }
    }
}
