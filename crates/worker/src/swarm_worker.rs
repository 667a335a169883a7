//! Swarm worker threads: each owns one [`Shard`] and serves the batches socket workers
//! send it. No sockets, no shared data, no locks.
//!
//! One loop for every tracker: take a batch, serve it at the current time, send each
//! socket worker its replies, publish the shard's size; between batches, clean a
//! slice when a pass is under way. Waiting for a batch wakes up every
//! [`Shutdown::POLL_INTERVAL`], so shutdown and cleaning happen on time on an idle
//! tracker too.

use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use shoal_common::{Config, Counters, GaugeSlot, Shutdown, Supervisor, TrackerKind};

use crate::Context;
use crate::replica::ShardDuties;
use crate::reply::ReplyRoute;
use crate::shard::{CleaningSchedule, Shard, clean_some};

/// The request channels of `workers` swarm workers, `queue_len` batches each.
pub fn swarm_channels<B>(workers: usize, queue_len: usize) -> (Vec<Sender<B>>, Vec<Receiver<B>>) {
    (0..workers)
        .map(|_| crossbeam_channel::bounded(queue_len))
        .unzip()
}

/// Starts one swarm worker thread per receiver under `supervisor`, named `swarm-N`,
/// with the shard `make(N)`; replies go out through `routes` (one per socket worker).
/// They clean every `cleaning.interval` of `config`, do their `duties` (snapshots,
/// replication) between batches and are pinned after the socket workers (whose count
/// `routes` gives).
pub fn spawn_swarm_workers<S: Shard, C: Counters + 'static, K: TrackerKind>(
    supervisor: &mut Supervisor,
    context: &Context<C>,
    config: &Config<K>,
    receivers: Vec<Receiver<S::Batch>>,
    routes: &[ReplyRoute<S::Reply>],
    duties: Vec<ShardDuties>,
    mut make: impl FnMut(usize) -> S,
) -> anyhow::Result<()> {
    let mut duties = duties.into_iter();
    for (index, requests) in receivers.into_iter().enumerate() {
        let worker = SwarmWorker {
            index,
            duties: duties.next().unwrap_or_default(),
            shard: make(index),
            requests,
            routes: routes.to_vec(),
            context: context.clone(),
            gauges: context.stats.gauge_slot(index),
            clean_every: config.cleaning.interval,
        };
        // A shard restored from a snapshot is counted before its first request.
        publish(&worker.shard, &worker.gauges);
        let core = config.cpu_pinning.core_for(routes.len() + index);
        supervisor.spawn(format!("swarm-{index}"), move || {
            shoal_common::maybe_pin_current_thread(core);
            worker.run()
        })?;
    }
    Ok(())
}

/// One swarm worker, ready to run on its own thread.
struct SwarmWorker<S: Shard, C> {
    index: usize,
    shard: S,
    requests: Receiver<S::Batch>,
    routes: Vec<ReplyRoute<S::Reply>>,
    context: Context<C>,
    gauges: GaugeSlot,
    clean_every: u32,
    duties: ShardDuties,
}

impl<S: Shard, C> SwarmWorker<S, C> {
    fn run(mut self) -> anyhow::Result<()> {
        let Context {
            clock,
            access,
            shutdown,
            ..
        } = &self.context;
        let mut cleaning = CleaningSchedule::new(self.clean_every, clock.now());
        while !shutdown.is_requested() {
            self.context
                .stats
                .swarm_beat(self.index, std::time::Instant::now());
            // During a cleaning pass or a snapshot, only look for requests between
            // slices.
            let wait = if cleaning.in_pass() {
                Duration::ZERO
            } else {
                self.duties.longest_wait(Shutdown::POLL_INTERVAL)
            };
            let received = match self.duties.wake_on() {
                // Relayed messages wake the worker as requests do.
                Some(remote) => {
                    let mut select = crossbeam_channel::Select::new();
                    let requests = select.recv(&self.requests);
                    select.recv(remote);
                    match select.ready_timeout(wait) {
                        Ok(ready) if ready == requests => match self.requests.try_recv() {
                            Ok(batch) => Ok(batch),
                            Err(crossbeam_channel::TryRecvError::Empty) => {
                                Err(RecvTimeoutError::Timeout)
                            }
                            Err(crossbeam_channel::TryRecvError::Disconnected) => {
                                Err(RecvTimeoutError::Disconnected)
                            }
                        },
                        _ => Err(RecvTimeoutError::Timeout),
                    }
                }
                None => self.requests.recv_timeout(wait),
            };
            // Everything from here to the next wait is work (busy time, for the
            // adaptive interval).
            let working_since = std::time::Instant::now();
            match received {
                Ok(batch) => {
                    let routes = &self.routes;
                    self.shard.handle(batch, clock.now(), &mut |worker, reply| {
                        routes[worker].send(reply, shutdown);
                    });
                    publish(&self.shard, &self.gauges);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            if clean_some(
                &mut self.shard,
                &mut cleaning,
                clock.now(),
                access,
                &self.gauges,
            ) {
                publish(&self.shard, &self.gauges);
            }
            self.duties.step(&mut self.shard, clock.now());
            let routes = &self.routes;
            self.shard.flush_replies(&mut |worker, reply| {
                routes[worker].send(reply, shutdown);
            });
            self.context
                .stats
                .swarm_busy(self.index, working_since.elapsed());
        }
        self.duties.finish(&mut self.shard, clock.now());
        Ok(())
    }
}

pub(crate) fn publish<S: Shard>(shard: &S, gauges: &GaugeSlot) {
    gauges.publish(shard.status());
}
