//! Requests on their way to swarm workers and replies on their way back, inside one
//! socket worker (one executor, one thread: `Rc` and `RefCell` suffice).
//!
//! A connection task calls [`announce`] or [`scrape`] with what its HTTP request needs
//! (one part for an announce, one per swarm worker for a scrape) and awaits the
//! answer. Parts go into a per-swarm-worker outbox; the first part of a round
//! schedules a flush task, which runs after every task that is ready now has run, so
//! all parts of one round of the event loop leave in one channel message per swarm
//! worker. Replies come back through [`Router::deliver`], called by the reply pump.
//!
//! Announces and scrapes wait in separate tables, each typed by what its calls
//! resolve to, and a reply finds its table by its own kind: a call gets the answer
//! to the question it asked or [`CallError::Busy`], never another kind of answer.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crossbeam_channel::Sender;
use shoal_worker::{LocalSwarm, SwarmLink};

use crate::messages::{
    AnnounceAnswer, AnnounceWork, CallError, ReplyTo, ScrapeCounts, ScrapeWork, Slot, SwarmReply,
    SwarmReplyKind, SwarmRequest, SwarmRequestKind,
};
use crate::shard::HttpShard;

/// What the parts of one call add up to.
trait Gather: Default {
    /// What one swarm worker answers.
    type Part;
    /// Adds one part.
    fn gather(&mut self, part: Self::Part);
    /// The table the router keeps calls of this kind in.
    fn table(router: &mut Router) -> &mut Calls<Self>;
}

/// An announce has one part: its answer.
impl Gather for Option<AnnounceAnswer> {
    type Part = AnnounceAnswer;

    fn gather(&mut self, part: AnnounceAnswer) {
        *self = Some(part);
    }

    fn table(router: &mut Router) -> &mut Calls<Self> {
        &mut router.announces
    }
}

/// A scrape has one part per swarm worker it touches.
impl Gather for ScrapeCounts {
    type Part = ScrapeCounts;

    fn gather(&mut self, part: ScrapeCounts) {
        self.extend(part);
    }

    fn table(router: &mut Router) -> &mut Calls<Self> {
        &mut router.scrapes
    }
}

#[derive(Debug, Default)]
enum CallState<T> {
    #[default]
    Free,
    Waiting {
        parts_left: u32,
        waker: Option<Waker>,
        gathered: T,
    },
    Done(Result<T, CallError>),
}

#[derive(Debug, Default)]
struct Entry<T> {
    generation: u32,
    state: CallState<T>,
}

/// Calls of one kind waiting for their parts. A slot's generation tells a reply for
/// an abandoned call (the client went away) from one for the slot's next user.
#[derive(Debug)]
struct Calls<T> {
    slots: Vec<Entry<T>>,
    free: Vec<u32>,
}

impl<T> Default for Calls<T> {
    fn default() -> Self {
        Self {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T: Gather> Calls<T> {
    /// A slot for a call of `parts` parts.
    fn open(&mut self, parts: u32) -> Slot {
        let index = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Entry {
                generation: 0,
                state: CallState::Free,
            });
            (self.slots.len() - 1) as u32
        });
        let entry = &mut self.slots[index as usize];
        entry.generation = entry.generation.wrapping_add(1);
        entry.state = CallState::Waiting {
            parts_left: parts,
            waker: None,
            gathered: T::default(),
        };
        Slot {
            index,
            generation: entry.generation,
        }
    }

    /// Adds a part to the call in `slot`; the last one completes it.
    fn part(&mut self, slot: Slot, part: T::Part) {
        let Some(entry) = self.live(slot) else {
            return;
        };
        let CallState::Waiting {
            parts_left,
            gathered,
            ..
        } = &mut entry.state
        else {
            return;
        };
        gathered.gather(part);
        *parts_left -= 1;
        if *parts_left == 0 {
            let gathered = std::mem::take(gathered);
            self.finish(slot, Ok(gathered));
        }
    }

    fn finish(&mut self, slot: Slot, result: Result<T, CallError>) {
        let Some(entry) = self.live(slot) else { return };
        if let CallState::Waiting { waker, .. } =
            std::mem::replace(&mut entry.state, CallState::Done(result))
            && let Some(waker) = waker
        {
            waker.wake();
        }
    }

    fn live(&mut self, slot: Slot) -> Option<&mut Entry<T>> {
        self.slots.get_mut(slot.index as usize).filter(|entry| {
            entry.generation == slot.generation && !matches!(entry.state, CallState::Free)
        })
    }

    fn release(&mut self, slot: Slot) {
        if let Some(entry) = self.live(slot) {
            entry.state = CallState::Free;
            self.free.push(slot.index);
        }
    }

    /// The call's result once complete, freeing its slot.
    fn poll(&mut self, slot: Slot, cx: &Context<'_>) -> Poll<Result<T, CallError>> {
        let Some(entry) = self.live(slot) else {
            return Poll::Ready(Err(CallError::Busy));
        };
        match std::mem::take(&mut entry.state) {
            CallState::Waiting {
                parts_left,
                gathered,
                ..
            } => {
                entry.state = CallState::Waiting {
                    parts_left,
                    waker: Some(cx.waker().clone()),
                    gathered,
                };
                Poll::Pending
            }
            CallState::Done(result) => {
                self.free.push(slot.index);
                Poll::Ready(result)
            }
            CallState::Free => Poll::Ready(Err(CallError::Busy)),
        }
    }
}

/// The router of one socket worker.
#[derive(Debug)]
pub(crate) struct Router {
    socket_worker: u16,
    /// Batches for the swarm workers, or the torrents kept here.
    pub(crate) link: SwarmLink<HttpShard>,
    announces: Calls<Option<AnnounceAnswer>>,
    scrapes: Calls<ScrapeCounts>,
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
            announces: Calls::default(),
            scrapes: Calls::default(),
        }
    }

    /// Number of swarm workers (1 when the torrents are kept here).
    pub(crate) fn swarm_workers(&self) -> usize {
        self.link.shards()
    }

    /// Queues the parts (swarm worker, request) of one call of kind `T`; returns its
    /// slot and whether a flush must be scheduled (see [`send`]).
    fn enqueue<T: Gather>(&mut self, parts: Vec<(usize, SwarmRequestKind)>) -> (Slot, bool) {
        let slot = T::table(self).open(parts.len() as u32);
        let reply_to = ReplyTo {
            socket_worker: self.socket_worker,
            slot,
        };
        for (worker, kind) in parts {
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
                let slot = request.reply_to.slot;
                match request.kind {
                    SwarmRequestKind::Announce(_) => {
                        self.announces.finish(slot, Err(CallError::Busy))
                    }
                    SwarmRequestKind::Scrape(_) => self.scrapes.finish(slot, Err(CallError::Busy)),
                }
            }
        }
    }

    /// Takes replies from a swarm worker.
    pub(crate) fn deliver(&mut self, replies: Vec<SwarmReply>) {
        for reply in replies {
            match reply.kind {
                SwarmReplyKind::Announce(answer) => self.announces.part(reply.slot, answer),
                SwarmReplyKind::Scrape(counts) => self.scrapes.part(reply.slot, counts),
            }
        }
    }
}

/// Asks swarm worker `worker` for the answer to an announce (or answers it from the
/// local torrents).
pub(crate) async fn announce(
    router: &Rc<RefCell<Router>>,
    worker: usize,
    work: AnnounceWork,
) -> Result<AnnounceAnswer, CallError> {
    if let Some(local) = router.borrow_mut().link.local() {
        return Ok(local.serve(|shard, now| shard.answer(&work, now)));
    }
    let parts = vec![(worker, SwarmRequestKind::Announce(work))];
    send::<Option<AnnounceAnswer>>(router, parts)
        .await?
        .ok_or(CallError::Busy)
}

/// Asks each swarm worker named in `parts` for its share of a scrape (or answers it
/// from the local torrents).
pub(crate) async fn scrape(
    router: &Rc<RefCell<Router>>,
    parts: Vec<(usize, ScrapeWork)>,
) -> Result<ScrapeCounts, CallError> {
    if let Some(local) = router.borrow_mut().link.local() {
        return Ok(local.serve(|shard, _| {
            let mut counts = ScrapeCounts::new();
            for (_, work) in parts {
                counts.extend(shard.scrape(work));
            }
            counts
        }));
    }
    let parts = parts
        .into_iter()
        .map(|(worker, work)| (worker, SwarmRequestKind::Scrape(work)))
        .collect();
    send::<ScrapeCounts>(router, parts).await
}

/// Sends `parts` and waits for their gathered answer.
async fn send<T: Gather>(
    router: &Rc<RefCell<Router>>,
    parts: Vec<(usize, SwarmRequestKind)>,
) -> Result<T, CallError> {
    let (slot, schedule_flush) = router.borrow_mut().enqueue::<T>(parts);
    if schedule_flush {
        let router = router.clone();
        // Runs after the tasks already queued, so their requests share the batch.
        shoal_tcp::spawn_local(async move { router.borrow_mut().flush() });
    }
    ReplyFuture::<T> {
        router: router.clone(),
        slot,
        done: false,
        kind: std::marker::PhantomData,
    }
    .await
}

/// Resolves when the slot's answer is complete. Dropping it early (the connection
/// went away) frees the slot; late replies then find a newer generation and are
/// ignored.
struct ReplyFuture<T: Gather> {
    router: Rc<RefCell<Router>>,
    slot: Slot,
    done: bool,
    /// `fn() -> T`: the future holds no `T`, so it is `Unpin` whatever `T` is.
    kind: std::marker::PhantomData<fn() -> T>,
}

impl<T: Gather> Future for ReplyFuture<T> {
    type Output = Result<T, CallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let slot = self.slot;
        let poll = T::table(&mut self.router.borrow_mut()).poll(slot, cx);
        if poll.is_ready() {
            self.done = true;
        }
        poll
    }
}

impl<T: Gather> Drop for ReplyFuture<T> {
    fn drop(&mut self) {
        if !self.done
            && let Ok(mut router) = self.router.try_borrow_mut()
        {
            T::table(&mut router).release(self.slot);
        }
    }
}
