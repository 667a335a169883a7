//! Swarm workers: each owns the torrents whose info hashes map to it and serves
//! batches of requests from the socket workers. No sockets, no shared data, no locks.

use std::sync::Arc;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use shoal_common::reply_route::ReplyRoute;
use shoal_common::{AccessControl, Shutdown};
use shoal_swarm::Clock;

use crate::messages::{ConnectionRef, Delivery, SwarmRequest, ToConnection};
use crate::stats::Stats;
use crate::swarm::{SwarmSettings, Swarms};

/// Everything a swarm worker needs.
pub(crate) struct SwarmWorker {
    pub(crate) settings: SwarmSettings,
    pub(crate) clean_every: u32,
    pub(crate) clock: Arc<Clock>,
    pub(crate) access: Arc<AccessControl>,
    pub(crate) requests: Receiver<Vec<SwarmRequest>>,
    pub(crate) routes: Vec<ReplyRoute<Vec<Delivery>>>,
    pub(crate) stats: Arc<Stats>,
    pub(crate) index: usize,
    pub(crate) shutdown: Shutdown,
}

impl SwarmWorker {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let mut swarms = Swarms::new(self.settings, rand::make_rng());
        let mut next_clean = self.clock.now().plus(self.clean_every);
        let gauges = self.stats.swarm(self.index);
        let mut produced: Vec<(ConnectionRef, ToConnection)> = Vec::new();
        // Messages grouped by the socket worker they go to.
        let mut outgoing: Vec<Vec<Delivery>> = self.routes.iter().map(|_| Vec::new()).collect();

        while !self.shutdown.is_requested() {
            match self.requests.recv_timeout(Shutdown::POLL_INTERVAL) {
                Ok(batch) => {
                    let now = self.clock.now();
                    for request in batch {
                        swarms.handle(request, now, &mut produced);
                    }
                    for (to, message) in produced.drain(..) {
                        outgoing[usize::from(to.worker)].push((to.id, message));
                    }
                    for (worker, messages) in outgoing.iter_mut().enumerate() {
                        if !messages.is_empty() {
                            self.routes[worker].send(std::mem::take(messages), &self.shutdown);
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            let now = self.clock.now();
            if now >= next_clean {
                let access = self.access.snapshot();
                let (torrents, peers) = swarms.clean(now, |hash| access.allows(&hash.0));
                gauges.publish(torrents, peers);
                next_clean = now.plus(self.clean_every);
            }
        }
        Ok(())
    }
}
