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
//! and cheaply. When the queue has been calm (nothing dropped, at most a quarter
//! full) for [`RESTORE_AFTER`], the configured size comes back for the next burst.
//!
//! Growing a buffer past net.core.rmem_max needs CAP_NET_ADMIN, which a tracker that
//! dropped its privileges no longer has. A queue that could not be restored would stay
//! small for good, so it is shrunk only when the configured size can be set again.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use shoal_common::sockets::{self, ReceiveQueue};

/// How often a socket worker looks at its queues.
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_millis(100);
/// How long a queue must overflow before it is shrunk: longer than a burst.
pub(crate) const SHRINK_AFTER: Duration = Duration::from_millis(300);
/// How long a shrunk queue must stay calm before the configured size comes back.
pub(crate) const RESTORE_AFTER: Duration = Duration::from_secs(1);

/// The buffer sizes a socket worker's queues switch between.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct QueueSizes {
    /// `network.socket_recv_buffer_size`; 0 leaves the kernel's default (and the
    /// queue alone).
    pub(crate) configured: usize,
    /// `network.overload_recv_buffer_size`; 0 never shrinks.
    pub(crate) overload: usize,
    /// net.core.rmem_max when the tracker started, if /proc could be read.
    pub(crate) rmem_max: Option<usize>,
}

impl QueueSizes {
    /// Whether there is anything to switch between.
    fn switchable(&self) -> bool {
        self.overload > 0 && self.configured > self.overload
    }
}

/// What a [`Policy`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// Set the overload size.
    Shrink,
    /// Set the configured size again.
    Restore,
}

/// When to shrink and restore, from what the kernel says at each check.
#[derive(Debug, Default)]
pub(crate) struct Policy {
    shrunk: bool,
    last_drops: Option<u32>,
    /// Since when every check has seen what would change the state: an overflowing
    /// queue (new drops, at least half full) while not shrunk, a calm one (no drops,
    /// a quarter full at most) while shrunk.
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
            (
                !dropped && queue.queued <= queue.capacity / 4,
                RESTORE_AFTER,
            )
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
    policy: Policy,
    /// Whether the kernel answers `SO_MEMINFO`; without it nothing is watched.
    watched: bool,
    /// Whether the queue may be shrunk: sizes to switch between, and (once an
    /// overflow asked) a way back.
    shrinkable: bool,
    /// Whether the process may force a buffer past net.core.rmem_max
    /// ([`sockets::may_force_recv_buffer`]; replaceable in tests, which run as root).
    may_force: fn(&UdpSocket, usize) -> bool,
    /// When the queue was shrunk, and the drops counted then.
    shrunk_at: Option<(Instant, u32)>,
    /// Drops counted at the last check, for the statistics.
    counted_drops: Option<u32>,
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
    /// A guard for `socket`, whose buffer was set to `sizes.configured`.
    pub(crate) fn new(socket: &UdpSocket, sizes: QueueSizes) -> Self {
        let readable = match sockets::receive_queue(socket) {
            Ok(_) => true,
            Err(err) => {
                log::info!(
                    "the UDP receive queue is not watched (kernel drops are not counted, and an overflowing queue is not shrunk): {err}"
                );
                false
            }
        };
        Self {
            sizes,
            policy: Policy::default(),
            watched: readable,
            shrinkable: sizes.switchable(),
            may_force: |socket, size| {
                sockets::may_force_recv_buffer(&socket2::SockRef::from(socket), size)
            },
            shrunk_at: None,
            counted_drops: None,
            addr: socket.local_addr().ok(),
        }
    }

    /// Looks at the queue at `now` and shrinks or restores it if the policy says so.
    pub(crate) fn check(&mut self, socket: &UdpSocket, now: Instant) -> Checked {
        let mut checked = Checked::default();
        if !self.watched {
            return checked;
        }
        let Ok(queue) = sockets::receive_queue(socket) else {
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
                    sockets::set_recv_buffer(&socket2::SockRef::from(socket), self.sizes.overload);
                    self.shrunk_at = Some((now, queue.drops));
                    checked.shrunk = true;
                    log::info!(
                        "UDP {}: the receive queue has overflowed for {} ms (the kernel dropped datagrams); its buffer goes from {} to {} bytes while this lasts, so that requests wait less and cost less",
                        self.addr_text(),
                        SHRINK_AFTER.as_millis(),
                        self.sizes.configured,
                        self.sizes.overload,
                    );
                } else {
                    // Drops are still counted; the policy is not asked again.
                    self.shrinkable = false;
                    log::warn!(
                        "UDP {}: the receive queue overflows, but its buffer is not shrunk: it could not grow back to {} bytes without CAP_NET_ADMIN, and net.core.rmem_max is {}; raise rmem_max to at least that to let it",
                        self.addr_text(),
                        self.sizes.configured,
                        self.sizes
                            .rmem_max
                            .map_or("unknown".to_string(), |max| max.to_string()),
                    );
                }
            }
            Some(Change::Restore) => {
                let granted = sockets::set_recv_buffer(
                    &socket2::SockRef::from(socket),
                    self.sizes.configured,
                );
                checked.restored = true;
                let (since, drops_then) = self.shrunk_at.take().unwrap_or((now, queue.drops));
                log::info!(
                    "UDP {}: the overload is over; receive buffer back to {granted} bytes after {:.1} s ({} datagrams dropped by the kernel meanwhile)",
                    self.addr_text(),
                    now.duration_since(since).as_secs_f64(),
                    queue.drops.wrapping_sub(drops_then),
                );
            }
            None => {}
        }
        checked
    }

    fn restorable(&self, socket: &UdpSocket) -> bool {
        restorable(&self.sizes, || {
            (self.may_force)(socket, self.sizes.configured)
        })
    }

    fn addr_text(&self) -> String {
        self.addr
            .map_or("socket".to_string(), |addr| addr.to_string())
    }
}

/// Whether the configured size could be set again: within net.core.rmem_max, or
/// with CAP_NET_ADMIN (`may_force`, asked only when needed).
fn restorable(sizes: &QueueSizes, may_force: impl FnOnce() -> bool) -> bool {
    sizes.rmem_max.is_some_and(|max| max >= sizes.configured) || may_force()
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
            drops += 1000;
            // The overload goes on: the small queue stays full and drops, with one
            // check now and then that sees no new drops but a full queue.
            let new = if i % 7 == 0 { 0 } else { 1000 };
            drops += new;
            checks.push(queue(CAPACITY, drops));
        }
        assert_eq!(run(&checks), vec![(4, Change::Shrink)]);
    }

    #[test]
    fn calm_must_last_without_a_break() {
        let mut checks = vec![queue(0, 0)];
        let mut drops = 0;
        for _ in 0..5 {
            drops += 10;
            checks.push(queue(CAPACITY, drops));
        }
        // Calm for 0.8 s, one more drop, then calm for good.
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

    #[test]
    fn the_guard_counts_kernel_drops_and_shrinks_a_real_socket() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let configured = 64 * 1024;
        sockets::set_recv_buffer(&socket2::SockRef::from(&receiver), configured);
        let sizes = QueueSizes {
            configured,
            overload: 8 * 1024,
            // As if rmem_max allowed the configured size: restoring needs no privilege.
            rmem_max: Some(configured),
        };
        let mut guard = QueueGuard::new(&receiver, sizes);
        let start = Instant::now();
        assert_eq!(guard.check(&receiver, start), Checked::default());
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = receiver.local_addr().unwrap();
        let mut shrunk_at = None;
        let mut drops = 0;
        for i in 1..=6u32 {
            for _ in 0..400 {
                sender.send_to(&[0; 100], to).unwrap();
            }
            let checked = guard.check(&receiver, start + CHECK_INTERVAL * i);
            drops += checked.drops;
            if checked.shrunk {
                shrunk_at = Some(i);
            }
        }
        assert!(
            drops > 0,
            "the kernel dropped datagrams, and they were counted"
        );
        assert_eq!(shrunk_at, Some(4), "shrunk 300 ms after the first overflow");
        let capacity = sockets::receive_queue(&receiver).unwrap().capacity;
        assert!(capacity <= 2 * 8 * 1024 + 4096, "buffer now {capacity}");
        // Drained and calm for a second: restored.
        let mut buf = [0; 2048];
        receiver.set_nonblocking(true).unwrap();
        while receiver.recv(&mut buf).is_ok() {}
        let mut restored_at = None;
        for i in 7..=20u32 {
            if guard.check(&receiver, start + CHECK_INTERVAL * i).restored {
                restored_at = Some(i);
                break;
            }
        }
        assert_eq!(restored_at, Some(17));
        let capacity = sockets::receive_queue(&receiver).unwrap().capacity;
        assert_eq!(capacity as usize, 2 * configured);
    }

    #[test]
    fn a_queue_is_shrunk_only_if_it_can_grow_back() {
        let sizes = |rmem_max| QueueSizes {
            configured: 8 << 20,
            overload: 256 << 10,
            rmem_max,
        };
        // Within rmem_max: no privilege needed, none asked about.
        assert!(restorable(&sizes(Some(8 << 20)), || unreachable!()));
        assert!(restorable(&sizes(Some(32 << 20)), || unreachable!()));
        // Past it, or unknown: only with CAP_NET_ADMIN.
        assert!(!restorable(&sizes(Some(4 << 20)), || false));
        assert!(restorable(&sizes(Some(4 << 20)), || true));
        assert!(!restorable(&sizes(None), || false));
        assert!(restorable(&sizes(None), || true));
    }

    #[test]
    fn a_queue_that_could_not_grow_back_is_left_alone_but_still_watched() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let configured = 64 * 1024;
        sockets::set_recv_buffer(&socket2::SockRef::from(&receiver), configured);
        let before = sockets::receive_queue(&receiver).unwrap().capacity;
        let sizes = QueueSizes {
            configured,
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
        assert_eq!(sockets::receive_queue(&receiver).unwrap().capacity, before);
    }
}
