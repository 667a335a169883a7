//! Many datagrams per system call: `recvmmsg` and `sendmmsg` (Linux).
//!
//! On a busy UDP server the kernel's per-call overhead dominates: one `recvfrom` and one
//! `sendto` per request cost more than parsing and answering it. These wrappers move up
//! to a batch of datagrams per call and keep every buffer allocated for the life of the
//! batch, so the hot path allocates nothing.
//!
//! The `mmsghdr`s point into buffers owned by the same struct. The buffers are boxed
//! slices that never grow, so the pointers stay valid when the struct moves; they are
//! refreshed before every call anyway.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

/// The kernel's limit on datagrams per `sendmmsg`/`recvmmsg` call (UIO_MAXIOV).
pub const MAX_BATCH: usize = 1024;

/// One received datagram.
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    /// Its payload (cut at the slot size if `truncated`).
    pub bytes: &'a [u8],
    /// Where it came from (`None` for an address family this module does not decode).
    pub source: Option<SocketAddr>,
    /// Whether it was longer than the slot and lost its tail.
    pub truncated: bool,
}

/// Receives up to `capacity` datagrams per call into fixed slots.
pub struct RecvBatch {
    slot_len: usize,
    buffers: Box<[u8]>,
    iovecs: Box<[libc::iovec]>,
    addrs: Box<[libc::sockaddr_storage]>,
    headers: Box<[libc::mmsghdr]>,
    received: usize,
}

// SAFETY: the raw pointers inside point only into this struct's own boxed slices, and
// are used only through `&mut self`; moving the struct to another thread is as safe as
// moving the boxes.
unsafe impl Send for RecvBatch {}

impl std::fmt::Debug for RecvBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBatch")
            .field("capacity", &self.headers.len())
            .field("slot_len", &self.slot_len)
            .field("received", &self.received)
            .finish()
    }
}

impl RecvBatch {
    /// A batch of `capacity` slots (at most [`MAX_BATCH`]) of `slot_len` bytes each.
    pub fn new(capacity: usize, slot_len: usize) -> Self {
        let capacity = capacity.clamp(1, MAX_BATCH);
        Self {
            slot_len,
            buffers: vec![0; capacity * slot_len].into_boxed_slice(),
            // SAFETY: iovec, sockaddr_storage and mmsghdr are plain C structs for which
            // all-zero bytes are valid (null pointers, zero lengths).
            iovecs: (0..capacity).map(|_| unsafe { zeroed() }).collect(),
            // SAFETY: as above.
            addrs: (0..capacity).map(|_| unsafe { zeroed() }).collect(),
            // SAFETY: as above.
            headers: (0..capacity).map(|_| unsafe { zeroed() }).collect(),
            received: 0,
        }
    }

    /// Receives as many datagrams as are queued, up to the capacity, without
    /// blocking. Returns how many; `Err(WouldBlock)` when none were queued.
    pub fn recv(&mut self, socket: &impl AsRawFd) -> io::Result<usize> {
        self.received = 0;
        let base = self.buffers.as_mut_ptr();
        for i in 0..self.headers.len() {
            // SAFETY: i * slot_len + slot_len <= buffers.len() by construction.
            let slot = unsafe { base.add(i * self.slot_len) };
            self.iovecs[i] = libc::iovec {
                iov_base: slot.cast(),
                iov_len: self.slot_len,
            };
            let header = &mut self.headers[i];
            header.msg_hdr.msg_name = (&raw mut self.addrs[i]).cast();
            header.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            header.msg_hdr.msg_iov = &raw mut self.iovecs[i];
            header.msg_hdr.msg_iovlen = 1;
            header.msg_hdr.msg_control = std::ptr::null_mut();
            header.msg_hdr.msg_controllen = 0;
            header.msg_hdr.msg_flags = 0;
            header.msg_len = 0;
        }
        // SAFETY: every header points at a live iovec, slot and address of this struct,
        // with the lengths set above; the kernel writes at most those lengths.
        let count = unsafe {
            libc::recvmmsg(
                socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                self.headers.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if count < 0 {
            return Err(io::Error::last_os_error());
        }
        self.received = count as usize;
        Ok(self.received)
    }

    /// Number of datagrams from the last [`recv`](Self::recv).
    pub fn len(&self) -> usize {
        self.received
    }

    /// Whether the last receive got nothing.
    pub fn is_empty(&self) -> bool {
        self.received == 0
    }

    /// Datagram `index` of the last receive.
    ///
    /// # Panics
    /// If `index >= self.len()`.
    pub fn get(&self, index: usize) -> Datagram<'_> {
        assert!(
            index < self.received,
            "datagram {index} of {}",
            self.received
        );
        let header = &self.headers[index];
        let len = (header.msg_len as usize).min(self.slot_len);
        let start = index * self.slot_len;
        Datagram {
            bytes: &self.buffers[start..start + len],
            source: decode_addr(&self.addrs[index], header.msg_hdr.msg_namelen),
            truncated: header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        }
    }

    /// The datagrams of the last receive.
    pub fn iter(&self) -> impl Iterator<Item = Datagram<'_>> {
        (0..self.received).map(|index| self.get(index))
    }
}

/// Scratch space for sending many datagrams per call.
pub struct SendBatch {
    iovecs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_storage>,
    addr_lens: Vec<libc::socklen_t>,
    headers: Vec<libc::mmsghdr>,
}

// SAFETY: the scratch vectors only hold pointers during `send`, which borrows the data
// they point to; between calls the pointers are stale and never dereferenced.
unsafe impl Send for SendBatch {}

impl std::fmt::Debug for SendBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBatch")
            .field("capacity", &self.headers.capacity())
            .finish()
    }
}

impl Default for SendBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl SendBatch {
    /// Empty scratch space.
    pub fn new() -> Self {
        Self {
            iovecs: Vec::new(),
            addrs: Vec::new(),
            addr_lens: Vec::new(),
            headers: Vec::new(),
        }
    }

    /// Sends `packets` (destination, payload) in one call, up to [`MAX_BATCH`] of them.
    /// A `None` destination means the socket's connected peer. Returns how many were
    /// sent, counting from the first; `Err(WouldBlock)` when the first could not be.
    pub fn send<'a>(
        &mut self,
        socket: &impl AsRawFd,
        packets: impl IntoIterator<Item = (Option<SocketAddr>, &'a [u8])>,
    ) -> io::Result<usize> {
        self.iovecs.clear();
        self.addrs.clear();
        self.addr_lens.clear();
        self.headers.clear();
        for (to, bytes) in packets.into_iter().take(MAX_BATCH) {
            self.iovecs.push(libc::iovec {
                iov_base: bytes.as_ptr().cast_mut().cast(),
                iov_len: bytes.len(),
            });
            // SAFETY: all-zero is a valid sockaddr_storage.
            let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
            let len = to.map_or(0, |addr| encode_addr(addr, &mut storage));
            self.addrs.push(storage);
            self.addr_lens.push(len);
        }
        if self.iovecs.is_empty() {
            return Ok(0);
        }
        for i in 0..self.iovecs.len() {
            // SAFETY: all-zero is a valid mmsghdr.
            let mut header: libc::mmsghdr = unsafe { zeroed() };
            if self.addr_lens[i] > 0 {
                header.msg_hdr.msg_name = (&raw mut self.addrs[i]).cast();
                header.msg_hdr.msg_namelen = self.addr_lens[i];
            }
            header.msg_hdr.msg_iov = &raw mut self.iovecs[i];
            header.msg_hdr.msg_iovlen = 1;
            self.headers.push(header);
        }
        // SAFETY: each header points at an iovec and address in our vectors (not
        // resized from here on) and each iovec at a payload borrowed for this call;
        // sendmmsg only reads them.
        let count = unsafe {
            libc::sendmmsg(
                socket.as_raw_fd(),
                self.headers.as_mut_ptr(),
                self.headers.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if count < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(count as usize)
    }
}

fn encode_addr(addr: SocketAddr, storage: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(addr) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: addr.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(addr.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            unsafe { std::ptr::write((storage as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(addr) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: addr.port().to_be(),
                sin6_flowinfo: addr.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: addr.ip().octets(),
                },
                sin6_scope_id: addr.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            unsafe { std::ptr::write((storage as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

fn decode_addr(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;

    use super::*;

    fn pair(addr: &str) -> Option<(UdpSocket, UdpSocket)> {
        let a = UdpSocket::bind(addr).ok()?;
        let b = UdpSocket::bind(addr).ok()?;
        b.set_nonblocking(true).unwrap();
        Some((a, b))
    }

    #[test]
    fn sends_and_receives_batches_with_addresses() {
        for addr in ["127.0.0.1:0", "[::1]:0"] {
            let Some((sender, receiver)) = pair(addr) else {
                continue;
            };
            let to = receiver.local_addr().unwrap();
            let payloads: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; usize::from(i) + 1]).collect();
            let mut send = SendBatch::new();
            let sent = send
                .send(&sender, payloads.iter().map(|p| (Some(to), p.as_slice())))
                .unwrap();
            assert_eq!(sent, 10);

            let mut batch = RecvBatch::new(4, 64);
            let mut got = Vec::new();
            while got.len() < 10 {
                match batch.recv(&receiver) {
                    Ok(n) => {
                        assert!(n <= 4);
                        for datagram in batch.iter() {
                            assert_eq!(datagram.source, Some(sender.local_addr().unwrap()));
                            assert!(!datagram.truncated);
                            got.push(datagram.bytes.to_vec());
                        }
                    }
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                    Err(err) => panic!("{err}"),
                }
            }
            assert_eq!(got, payloads);
            assert_eq!(
                batch.recv(&receiver).unwrap_err().kind(),
                io::ErrorKind::WouldBlock
            );
        }
    }

    #[test]
    fn a_batch_reads_whole_addresses_after_shorter_ones() {
        // The kernel shortens a header's address room to the last address it wrote
        // there (16 bytes for IPv4); an IPv6 address read with that room would lose
        // its tail. One batch reads IPv4 datagrams, then IPv6 ones into the same slots.
        let Some((sender6, receiver6)) = pair("[::1]:0") else {
            return; // No IPv6 loopback here.
        };
        let (sender4, receiver4) = pair("127.0.0.1:0").unwrap();
        let mut batch = RecvBatch::new(4, 16);
        for (sender, receiver) in [(&sender4, &receiver4), (&sender6, &receiver6)] {
            let to = receiver.local_addr().unwrap();
            for _ in 0..3 {
                sender.send_to(b"x", to).unwrap();
            }
            let mut got = 0;
            while got < 3 {
                match batch.recv(receiver) {
                    Ok(n) => {
                        for datagram in batch.iter() {
                            assert_eq!(datagram.source, Some(sender.local_addr().unwrap()));
                        }
                        got += n;
                    }
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::yield_now();
                    }
                    Err(err) => panic!("{err}"),
                }
            }
        }
    }

    #[test]
    fn long_datagrams_are_marked_truncated() {
        let (sender, receiver) = pair("127.0.0.1:0").unwrap();
        sender
            .send_to(&[7u8; 100], receiver.local_addr().unwrap())
            .unwrap();
        let mut batch = RecvBatch::new(2, 16);
        while batch.recv(&receiver).is_err() {
            std::thread::yield_now();
        }
        let datagram = batch.get(0);
        assert!(datagram.truncated);
        assert_eq!(datagram.bytes, &[7u8; 16]);
    }

    #[test]
    fn connected_sockets_need_no_addresses() {
        let (sender, receiver) = pair("127.0.0.1:0").unwrap();
        sender.connect(receiver.local_addr().unwrap()).unwrap();
        let sent = SendBatch::new()
            .send(&sender, [(None, &b"a"[..]), (None, &b"bc"[..])])
            .unwrap();
        assert_eq!(sent, 2);
        let mut batch = RecvBatch::new(8, 16);
        let mut total = 0;
        while total < 2 {
            total += batch.recv(&receiver).unwrap_or(0);
        }
    }
}
