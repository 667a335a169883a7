//! A receive queue that shrinks while its socket overflows.
//!
//! A large receive buffer (8 MiB by default) absorbs bursts. Under overload that lasts
//! (a flood, or more clients than the workers can serve) it fills and stays full: the
//! kernel drops what does not fit either way, and every datagram that does waits
//! behind thousands of others, about 20 ms at half a million a second. By then its
//! memory has left the cache, and the kernel's allocator takes its slow path with so
//! many buffers held, so each request costs more: on loopback under
//! aquatic_udp_load_test shoal_udp answered about a quarter fewer requests a second
//! with 8 MiB than with the kernel's 208 KiB (documents/benchmarks/floor-2026-11-23.md).
//!
//! So once the kernel has been dropping datagrams for [`SHRINK_AFTER`] while the
//! queue is at least half full, the buffer is set to the smaller overload size; the
//! kernel then drops the excess on arrival, and what is answered is answered soon
//! and cheaply. When the queue has been at most a quarter full at every check for
//! [`RESTORE_AFTER`], the size the socket had comes back for the next burst. Drops
//! do not keep it small then: a queue that the worker keeps nearly empty is not
//! overloaded, and if short bursts still overflow the small buffer, that is what the
//! large one is for (and a flood that stays on keeps the small one full).
//!
//! Growing a buffer past net.core.rmem_max needs CAP_NET_ADMIN, which a tracker that
//! dropped its privileges no longer has. A queue that could not be restored would stay
//! small for good, so it is shrunk only when its size can be set again.
//!
//! An attacker who floods in spells can make a queue shrink and grow over and over;
//! each change is counted, but only a few are logged in a row, then one message a
//! minute at most (`shoal_common::log_budget`), so the log is not flooded too.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use shoal_common::{LogBudget, left_out};
use shoal_sockets::ReceiveQueue;

/// How often a socket worker looks at its queues.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_millis(100);
/// How long a queue must overflow before it is shrunk: longer than a burst.
pub(crate) const SHRINK_AFTER: Duration = Duration::from_millis(300);
/// How long a shrunk queue must stay short before its size comes back.
pub(crate) const RESTORE_AFTER: Duration = Duration::from_secs(1);
/// Changes a socket logs in a row before the rest are only counted.
const LOG_BURST: u32 = 6;
/// How often one more change message is allowed once [`LOG_BURST`] are spent.
const LOG_REFILL: Duration = Duration::from_secs(60);

/// What a socket worker's queues may switch to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct QueueSizes {
    /// `network.overload_recv_buffer_size`; 0 never shrinks.
    pub(crate) overload: usize,
    /// net.core.rmem_max when the tracker started, if /proc could be read.
    pub(crate) rmem_max: Option<usize>,
}

/// What a [`Policy`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// Set the overload size.
    Shrink,
    /// Set the size the socket had again.
    Restore,
}

/// When to shrink and restore, from what the kernel says at each check.
#[derive(Debug, Default)]
pub(crate) struct Policy {
    shrunk: bool,
    last_drops: Option<u32>,
    /// Since when every check has seen what would change the state: an overflowing
    /// queue (new drops, at least half full) while not shrunk, a short one (a quarter
    /// full at most) while shrunk.
    holding_since: Option<Instant>,
}

impl Policy {
    /// Takes a check of the queue at `now`; returns what to change, if anything.
    pub(crate) fn check(&mut self, now: Instant, queue: ReceiveQueue) -> Option<Change> {
        let dropped = self
            .last_drops
            .is_some_and(|last| queue.drops.wrapping_sub(last) > 0);
        self.last_drops = Some(queue.drops);
        let (holds, for_how_long) = if self.shrunk {
            (queue.queued <= queue.capacity / 4, RESTORE_AFTER)
        } else {
            (dropped && queue.queued >= queue.capacity / 2, SHRINK_AFTER)
        };
        if !holds {
            self.holding_since = None;
            return None;
        }
        let since = *self.holding_since.get_or_insert(now);
        if now.duration_since(since) < for_how_long {
            return None;
        }
        self.shrunk = !self.shrunk;
        self.holding_since = None;
        Some(if self.shrunk {
            Change::Shrink
        } else {
            Change::Restore
        })
    }
}

/// One socket's receive queue: checked, shrunk and restored.
#[derive(Debug)]
pub(crate) struct QueueGuard {
    sizes: QueueSizes,
    /// The buffer size the socket had when the worker started (as `SO_RCVBUF` is
    /// asked: half what the kernel accounts): `socket_recv_buffer_size` as granted,
    /// or the kernel's default. What a restore sets again.
    restore_to: usize,
    policy: Policy,
    /// Whether the kernel answers `SO_MEMINFO`; without it nothing is watched.
    watched: bool,
    /// Whether the queue may be shrunk: a smaller size to switch to, and (once an
    /// overflow asked) a way back.
    shrinkable: bool,
    /// Whether the process may force a buffer past net.core.rmem_max
    /// ([`shoal_sockets::may_force_recv_buffer`]; replaceable in tests, which run as root).
    may_force: fn(&UdpSocket, usize) -> bool,
    /// When the queue was shrunk, and the drops counted then.
    shrunk_at: Option<(Instant, u32)>,
    /// Drops counted at the last check, for the statistics.
    counted_drops: Option<u32>,
    log: LogBudget,
    addr: Option<SocketAddr>,
}

/// What one check counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Checked {
    /// Datagrams the kernel dropped since the last check.
    pub(crate) drops: u64,
    /// Whether the queue was shrunk.
    pub(crate) shrunk: bool,
    /// Whether the queue was restored.
    pub(crate) restored: bool,
}

impl QueueGuard {
    /// A guard for `socket`, whose buffer is as the tracker set it.
    pub(crate) fn new(socket: &UdpSocket, sizes: QueueSizes) -> Self {
        let queue = shoal_sockets::receive_queue(socket)
            .inspect_err(|err| {
                log::info!(
                    "the UDP receive queue is not watched (kernel drops are not counted, and an overflowing queue is not shrunk): {err}"
                );
            })
            .ok();
        // SO_MEMINFO gives the kernel's accounting: twice what SO_RCVBUF asks for,
        // or the default (net.core.rmem_default) as it is. Half of it, asked again,
        // gives the same queue back.
        let restore_to = queue.map_or(0, |queue| queue.capacity as usize / 2);
        Self {
            sizes,
            restore_to,
            policy: Policy::default(),
            watched: queue.is_some(),
            shrinkable: sizes.overload > 0 && restore_to > sizes.overload,
            may_force: |socket, size| {
                shoal_sockets::may_force_recv_buffer(&socket2::SockRef::from(socket), size)
            },
            shrunk_at: None,
            // The kernel counts from the socket's creation, so drops while the
            // tracker was still starting (restoring a snapshot) are counted too.
            counted_drops: Some(0),
            log: LogBudget::new(LOG_BURST, LOG_REFILL),
            addr: socket.local_addr().ok(),
        }
    }

    /// Looks at the queue at `now` and shrinks or restores it if the policy says so.
    pub(crate) fn check(&mut self, socket: &UdpSocket, now: Instant) -> Checked {
        let mut checked = Checked::default();
        if !self.watched {
            return checked;
        }
        let Ok(queue) = shoal_sockets::receive_queue(socket) else {
            return checked;
        };
        if let Some(last) = self.counted_drops {
            checked.drops = u64::from(queue.drops.wrapping_sub(last));
        }
        self.counted_drops = Some(queue.drops);
        if !self.shrinkable {
            return checked;
        }
        match self.policy.check(now, queue) {
            Some(Change::Shrink) => {
                if self.restorable(socket) {
                    shoal_sockets::set_recv_buffer(
                        &socket2::SockRef::from(socket),
                        self.sizes.overload,
                    );
                    self.shrunk_at = Some((now, queue.drops));
                    checked.shrunk = true;
                    if let Some(unlogged) = self.log.take(now) {
                        log::info!(
                            "UDP {}: the receive queue has overflowed for {} ms (the kernel dropped datagrams); its buffer goes from {} to {} bytes while this lasts, so that requests wait less and cost less{}",
                            self.addr_text(),
                            SHRINK_AFTER.as_millis(),
                            self.restore_to,
                            self.sizes.overload,
                            left_out(unlogged),
                        );
                    }
                } else {
                    // Drops are still counted; the policy is not asked again.
                    self.shrinkable = false;
                    log::warn!(
                        "UDP {}: the receive queue overflows, but its buffer is not shrunk: it could not grow back to {} bytes without CAP_NET_ADMIN, and net.core.rmem_max is {}; raise rmem_max to at least that and restart to let it",
                        self.addr_text(),
                        self.restore_to,
                        self.sizes
                            .rmem_max
                            .map_or("unknown".to_string(), |max| max.to_string()),
                    );
                }
            }
            Some(Change::Restore) => {
                let granted = shoal_sockets::set_recv_buffer(
                    &socket2::SockRef::from(socket),
                    self.restore_to,
                );
                checked.restored = true;
                let (since, drops_then) = self.shrunk_at.take().unwrap_or((now, queue.drops));
                if let Some(unlogged) = self.log.take(now) {
                    log::info!(
                        "UDP {}: the overload is over; receive buffer back to {granted} bytes after {:.1} s ({} datagrams dropped by the kernel meanwhile){}",
                        self.addr_text(),
                        now.duration_since(since).as_secs_f64(),
                        queue.drops.wrapping_sub(drops_then),
                        left_out(unlogged),
                    );
                }
            }
            None => {
                if let Some(unlogged) = self.log.take_for_summary(now) {
                    let state = if self.shrunk_at.is_some() {
                        format!("shrunk to {} bytes", self.sizes.overload)
                    } else {
                        format!("back to {} bytes", self.restore_to)
                    };
                    log::info!(
                        "UDP {}: the receive queue was shrunk or restored {unlogged} more times without a message; its buffer is now {state}",
                        self.addr_text(),
                    );
                }
            }
        }
        checked
    }

    fn restorable(&self, socket: &UdpSocket) -> bool {
        restorable(self.restore_to, self.sizes.rmem_max, || {
            (self.may_force)(socket, self.restore_to)
        })
    }

    fn addr_text(&self) -> String {
        self.addr
            .map_or("socket".to_string(), |addr| addr.to_string())
    }
}

/// Whether a buffer of `size` could be set again: within net.core.rmem_max, or with
/// CAP_NET_ADMIN (`may_force`, asked only when needed).
fn restorable(size: usize, rmem_max: Option<usize>, may_force: impl FnOnce() -> bool) -> bool {
    rmem_max.is_some_and(|max| max >= size) || may_force()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPACITY: u32 = 16 << 20;

    fn queue(queued: u32, drops: u32) -> ReceiveQueue {
        ReceiveQueue {
            queued,
            capacity: CAPACITY,
            drops,
        }
    }

    /// Feeds checks 100 ms apart; returns the changes with the index of their check.
    fn run(checks: &[ReceiveQueue]) -> Vec<(usize, Change)> {
        let start = Instant::now();
        let mut policy = Policy::default();
        checks
            .iter()
            .enumerate()
            .filter_map(|(i, &q)| {
                policy
                    .check(start + CHECK_INTERVAL * i as u32, q)
                    .map(|change| (i, change))
            })
            .collect()
    }

    #[test]
    fn a_lasting_overflow_shrinks_once_and_calm_restores() {
        let mut checks = vec![queue(0, 0)];
        // Overflowing from check 1: dropping more at every check, queue full.
        let mut drops = 0;
        for _ in 0..20 {
            drops += 500;
            checks.push(queue(CAPACITY, drops));
        }
        // Calm from check 21.
        for _ in 0..15 {
            checks.push(queue(0, drops));
        }
        // 300 ms after the first overflowing check (1) is check 4; restored 1 s
        // after the first calm one (21), at check 31.
        assert_eq!(
            run(&checks),
            vec![(4, Change::Shrink), (31, Change::Restore)]
        );
    }

    #[test]
    fn a_burst_is_not_an_overload() {
        // Drops at two checks in a row, then none: shorter than SHRINK_AFTER.
        let checks = [
            queue(0, 0),
            queue(CAPACITY, 100),
            queue(CAPACITY, 200),
            queue(CAPACITY, 200),
            queue(CAPACITY, 300),
            queue(CAPACITY, 400),
            queue(0, 400),
        ];
        assert_eq!(run(&checks), vec![]);
    }

    #[test]
    fn drops_from_a_queue_that_emptied_are_not_an_overload() {
        // Something dropped between every check, but the queue is drained each time:
        // the worker keeps up; short spikes overflow it.
        let checks: Vec<_> = (0..30).map(|i| queue(CAPACITY / 8, i * 10)).collect();
        assert_eq!(run(&checks), vec![]);
    }

    #[test]
    fn a_shrunk_queue_stays_shrunk_while_the_flood_goes_on() {
        let mut checks = vec![queue(0, 0)];
        let mut drops = 0;
        for i in 0..60 {
            // The overload goes on: the small queue stays full and drops, with one
            // check now and then that sees no new drops but a full queue.
            let new = if i % 7 == 0 { 0 } else { 1000 };
            drops += new;
            checks.push(queue(CAPACITY, drops));
        }
        // Check 1 saw no new drops; the overflow counts from check 2.
        assert_eq!(run(&checks), vec![(5, Change::Shrink)]);
    }

    #[test]
    fn bursts_that_overflow_a_draining_shrunk_queue_do_not_keep_it_small() {
        let mut checks = vec![queue(0, 0)];
        let mut drops = 0;
        for _ in 0..5 {
            drops += 1000;
            checks.push(queue(CAPACITY, drops));
        }
        // The worker keeps up again (the queue an eighth full at every check), but
        // bursts still overflow the small buffer between checks: the large one is
        // what they need.
        for _ in 0..15 {
            drops += 50;
            checks.push(queue(CAPACITY / 8, drops));
        }
        assert_eq!(
            run(&checks),
            vec![(4, Change::Shrink), (16, Change::Restore)]
        );
    }

    #[test]
    fn calm_must_last_without_a_break() {
        let mut checks = vec![queue(0, 0)];
        let mut drops = 0;
        for _ in 0..5 {
            drops += 10;
            checks.push(queue(CAPACITY, drops));
        }
        // Short for 0.8 s, half full once (a spell of load), then short for good.
        checks.extend(std::iter::repeat_n(queue(0, drops), 9));
        checks.push(queue(CAPACITY / 2, drops + 1));
        checks.extend(std::iter::repeat_n(queue(0, drops + 1), 12));
        let changes = run(&checks);
        assert_eq!(changes[0], (4, Change::Shrink));
        // The break is check 15; calm again from 16, restored at 26.
        assert_eq!(changes[1..], [(26, Change::Restore)]);
    }

    #[test]
    fn the_drop_counter_may_wrap() {
        let mut checks = vec![queue(0, u32::MAX - 1000)];
        let mut drops = u32::MAX - 1000;
        for _ in 0..5 {
            drops = drops.wrapping_add(600);
            checks.push(queue(CAPACITY, drops));
        }
        assert_eq!(run(&checks), vec![(4, Change::Shrink)]);
    }

    /// Floods `receiver` until its guard shrinks it, drains it and checks until the
    /// guard restores it; returns the checks (100 ms apart) at which each happened.
    fn shrink_and_restore(receiver: &UdpSocket, sizes: QueueSizes) -> (u32, u32) {
        let mut guard = QueueGuard::new(receiver, sizes);
        let start = Instant::now();
        assert_eq!(guard.check(receiver, start), Checked::default());
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = receiver.local_addr().unwrap();
        let mut shrunk_at = None;
        let mut drops = 0;
        for i in 1..=6u32 {
            // More than any queue here holds (a datagram takes about 1 KiB of it).
            for _ in 0..1000 {
                sender.send_to(&[0; 100], to).unwrap();
            }
            let checked = guard.check(receiver, start + CHECK_INTERVAL * i);
            drops += checked.drops;
            if checked.shrunk {
                shrunk_at = Some(i);
            }
        }
        assert!(
            drops > 0,
            "the kernel dropped datagrams, and they were counted"
        );
        let capacity = shoal_sockets::receive_queue(receiver).unwrap().capacity;
        assert!(
            capacity as usize <= 2 * sizes.overload + 4096,
            "buffer now {capacity}"
        );
        // Drained and short for a second: restored.
        let mut buf = [0; 2048];
        receiver.set_nonblocking(true).unwrap();
        while receiver.recv(&mut buf).is_ok() {}
        let mut restored_at = None;
        for i in 7..=20u32 {
            if guard.check(receiver, start + CHECK_INTERVAL * i).restored {
                restored_at = Some(i);
                break;
            }
        }
        (shrunk_at.expect("shrunk"), restored_at.expect("restored"))
    }

    #[test]
    fn the_guard_counts_kernel_drops_and_shrinks_a_real_socket() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let configured = 64 * 1024;
        shoal_sockets::set_recv_buffer(&socket2::SockRef::from(&receiver), configured);
        let sizes = QueueSizes {
            overload: 8 * 1024,
            // As if rmem_max allowed the configured size: restoring needs no privilege.
            rmem_max: Some(configured),
        };
        // Shrunk 300 ms after the first overflow, restored 1 s after the first
        // short check.
        assert_eq!(shrink_and_restore(&receiver, sizes), (4, 17));
        let capacity = shoal_sockets::receive_queue(&receiver).unwrap().capacity;
        assert_eq!(capacity as usize, 2 * configured);
    }

    #[test]
    fn a_queue_left_at_the_kernels_default_comes_back_to_it() {
        // socket_recv_buffer_size = 0: the buffer the kernel gave the socket
        // (net.core.rmem_default, accounted as it is, not doubled) is what comes back.
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let default = shoal_sockets::receive_queue(&receiver).unwrap().capacity;
        let sizes = QueueSizes {
            overload: 8 * 1024,
            rmem_max: Some(default as usize),
        };
        assert_eq!(shrink_and_restore(&receiver, sizes), (4, 17));
        assert_eq!(
            shoal_sockets::receive_queue(&receiver).unwrap().capacity,
            default
        );
    }

    #[test]
    fn a_queue_no_larger_than_the_overload_size_is_never_shrunk() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        shoal_sockets::set_recv_buffer(&socket2::SockRef::from(&receiver), 64 * 1024);
        let guard = QueueGuard::new(
            &receiver,
            QueueSizes {
                overload: 64 * 1024,
                rmem_max: Some(1 << 30),
            },
        );
        assert!(guard.watched);
        assert!(!guard.shrinkable);
    }

    #[test]
    fn a_queue_is_shrunk_only_if_it_can_grow_back() {
        let size = 8 << 20;
        // Within rmem_max: no privilege needed, none asked about.
        assert!(restorable(size, Some(8 << 20), || unreachable!()));
        assert!(restorable(size, Some(32 << 20), || unreachable!()));
        // Past it, or unknown: only with CAP_NET_ADMIN.
        assert!(!restorable(size, Some(4 << 20), || false));
        assert!(restorable(size, Some(4 << 20), || true));
        assert!(!restorable(size, None, || false));
        assert!(restorable(size, None, || true));
    }

    #[test]
    fn a_queue_that_could_not_grow_back_is_left_alone_but_still_watched() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let configured = 64 * 1024;
        shoal_sockets::set_recv_buffer(&socket2::SockRef::from(&receiver), configured);
        let before = shoal_sockets::receive_queue(&receiver).unwrap().capacity;
        let sizes = QueueSizes {
            overload: 8 * 1024,
            rmem_max: Some(configured / 2),
        };
        let mut guard = QueueGuard::new(&receiver, sizes);
        guard.may_force = |_, _| false;
        let start = Instant::now();
        guard.check(&receiver, start);
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = receiver.local_addr().unwrap();
        let mut drops = 0;
        for i in 1..=8u32 {
            for _ in 0..400 {
                sender.send_to(&[0; 100], to).unwrap();
            }
            let checked = guard.check(&receiver, start + CHECK_INTERVAL * i);
            assert!(!checked.shrunk, "check {i}");
            drops += checked.drops;
        }
        assert!(drops > 0);
        assert_eq!(
            shoal_sockets::receive_queue(&receiver).unwrap().capacity,
            before
        );
    }
}
