//! Waiting for datagrams, room to send or a wake-up, with poll(2) rather than epoll.
//!
//! A socket registered with epoll stays on the socket's wait queue for as long as it
//! is registered, so the kernel runs epoll's callback (two spinlocks, interrupts off)
//! for every datagram that arrives and for every sent reply it frees, even while the
//! worker is busy and never waits. poll(2) joins the queues only while it sleeps, and
//! a loaded socket worker does not sleep. A socket worker waits on at most three
//! descriptors (IPv4, IPv6, its [`Doorbell`]), so poll's linear scan costs nothing.
//! With epoll, freeing sent replies alone (`sock_wfree` waking the queue) took about
//! 4% of a loaded worker's time in the floor bench's profile
//! (documents/benchmarks/floor-2026-11-23.md).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// An eventfd other threads ring to end a [`wait`]: a swarm worker with replies for a
/// sleeping socket worker, or a shutdown request.
#[derive(Debug)]
pub struct Doorbell {
    fd: OwnedFd,
}

impl Doorbell {
    pub fn new() -> io::Result<Self> {
        // SAFETY: plain system call; the descriptor is checked before it is owned.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    /// Wakes the thread waiting on this doorbell, or makes its next wait return at once.
    pub fn ring(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer. A full counter (EAGAIN) means a
        // ring is already pending, which is all a ring needs to achieve.
        unsafe { libc::write(self.fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Takes the pending rings, so that the next wait sleeps again.
    fn drain(&self) {
        let mut count = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer; EAGAIN (nothing pending) is
        // fine.
        unsafe { libc::read(self.fd.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
    }
}

/// What to wait for on one socket.
#[derive(Clone, Copy, Debug)]
pub struct Want {
    pub fd: RawFd,
    /// Room in the send buffer (replies are queued).
    pub writable: bool,
}

/// What a socket's wait found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    /// A datagram (or a pending error) to read.
    pub readable: bool,
    /// Room to send.
    pub writable: bool,
}

/// Waits up to `timeout` (zero: just looks) until one of `sockets` is ready or the
/// doorbell rings; returns what each socket has, in order. Interrupted waits return
/// with nothing ready.
pub fn wait<const N: usize>(
    sockets: [Option<Want>; N],
    doorbell: &Doorbell,
    timeout: Duration,
) -> io::Result<[Ready; N]> {
    let mut fds = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 3];
    debug_assert!(N < fds.len());
    for (slot, want) in sockets.iter().enumerate() {
        if let Some(want) = want {
            fds[slot] = libc::pollfd {
                fd: want.fd,
                events: libc::POLLIN | if want.writable { libc::POLLOUT } else { 0 },
                revents: 0,
            };
        }
    }
    fds[N] = libc::pollfd {
        fd: doorbell.fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = timeout.as_millis().min(i32::MAX as u128) as i32;
    // Round up, so that a short timeout sleeps rather than spins.
    let millis = if millis == 0 && !timeout.is_zero() {
        1
    } else {
        millis
    };
    // SAFETY: `fds` is a live array of N + 1 pollfds (negative fds are skipped).
    let result = unsafe { libc::poll(fds.as_mut_ptr(), (N + 1) as libc::nfds_t, millis) };
    let mut ready = [Ready::default(); N];
    if result < 0 {
        let err = io::Error::last_os_error();
        return if err.kind() == io::ErrorKind::Interrupted {
            Ok(ready)
        } else {
            Err(err)
        };
    }
    if fds[N].revents != 0 {
        doorbell.drain();
    }
    for (slot, ready) in ready.iter_mut().enumerate() {
        let revents = fds[slot].revents;
        // An error or hang-up is reported as readable: reading returns it.
        ready.readable = revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0;
        ready.writable = revents & libc::POLLOUT != 0;
    }
    Ok(ready)
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::time::Instant;

    use super::*;

    fn want(socket: &UdpSocket) -> Option<Want> {
        Some(Want {
            fd: socket.as_raw_fd(),
            writable: false,
        })
    }

    #[test]
    fn a_datagram_ends_the_wait_for_its_socket_only() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let doorbell = Doorbell::new().unwrap();
        let nothing = wait([want(&a), want(&b)], &doorbell, Duration::ZERO).unwrap();
        assert_eq!(nothing, [Ready::default(); 2]);
        a.send_to(b"x", b.local_addr().unwrap()).unwrap();
        let ready = wait([want(&a), want(&b)], &doorbell, Duration::from_secs(5)).unwrap();
        assert!(!ready[0].readable && ready[1].readable, "{ready:?}");
    }

    #[test]
    fn a_ring_ends_the_wait_once() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let doorbell = Doorbell::new().unwrap();
        doorbell.ring();
        doorbell.ring();
        let started = Instant::now();
        let ready = wait([want(&a)], &doorbell, Duration::from_secs(5)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(ready, [Ready::default()]);
        // Both rings were taken: the next wait sleeps its whole timeout.
        let started = Instant::now();
        wait([want(&a)], &doorbell, Duration::from_millis(50)).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(45));
    }

    #[test]
    fn a_ring_from_another_thread_wakes_a_sleeper() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let doorbell = std::sync::Arc::new(Doorbell::new().unwrap());
        let ringer = doorbell.clone();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            ringer.ring();
        });
        let started = Instant::now();
        wait([want(&a), None], &doorbell, Duration::from_secs(10)).unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        thread.join().unwrap();
    }

    #[test]
    fn room_to_send_is_reported_when_asked_for() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let doorbell = Doorbell::new().unwrap();
        let asked = Some(Want {
            fd: a.as_raw_fd(),
            writable: true,
        });
        let ready = wait([asked], &doorbell, Duration::from_secs(5)).unwrap();
        assert!(ready[0].writable && !ready[0].readable);
        let ready = wait([want(&a)], &doorbell, Duration::ZERO).unwrap();
        assert!(!ready[0].writable);
    }
}
