//! The floor on io_uring: can a different way into the kernel lower it?
//!
//! Requests come in through one multishot `recvmsg`: armed once, it posts a completion
//! for every datagram, each in a buffer the kernel takes from a ring of provided
//! buffers registered with it, so no system call is made per batch to receive.
//! Replies go out as one `sendmsg` entry each, submitted together in the same
//! `io_uring_enter` that waits for the next requests. One system call per round
//! instead of `recvmmsg` plus `sendmmsg`. The socket is a registered file, so no
//! entry looks its descriptor up.
//!
//! The ring is set up for one thread (`SINGLE_ISSUER`, `DEFER_TASKRUN`): the kernel
//! does the ring's deferred work only when this thread enters it, in a batch, rather
//! than interrupting it for each datagram.
//!
//! A reply's bytes, address and headers must stay put until the kernel has sent it.
//! UDP sends on a socket with room complete while they are submitted, but one that
//! finds the send buffer full waits in the kernel, so each round's replies live in an
//! arena that is reused only once all its sends have completed.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::UdpSocket;
use std::os::fd::AsRawFd as _;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::{IoUring, cqueue, opcode, types};

use super::{SLOT, write_reply};

/// Provided receive buffers (a power of two, at most 32,768).
const BUFFERS: u16 = 4096;
/// Bytes per provided buffer: the multishot header, the source address and a request.
const BUFFER_LEN: usize = 2048;
/// The buffer group the multishot receive takes its buffers from.
const GROUP: u16 = 0;
/// `user_data` of the multishot receive; a send's is its arena's index + 1.
const RECEIVE: u64 = 0;
/// The longest reply to a request of [`SLOT`] bytes: a scrape of 74 info hashes.
const LONGEST_REPLY: usize = 8 + 74 * 12;

/// Serves until an error: one multishot receive, replies in rounds of up to `batch`.
pub(crate) fn serve(socket: &UdpSocket, batch: usize) -> io::Result<()> {
    let mut ring: IoUring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_coop_taskrun()
        .setup_cqsize(4 * BUFFERS as u32)
        .build((batch as u32 + 1).next_power_of_two())?;
    let mut buffers = BufferRing::new(&ring)?;
    // The socket as a registered file: each entry then names it by index, and the
    // kernel skips looking the descriptor up (and counting a reference) per entry.
    ring.submitter().register_files(&[socket.as_raw_fd()])?;
    let fd = types::Fixed(0);
    // Only the lengths matter to a multishot receive: room for either family's address,
    // no control messages. The kernel reads it whenever it re-arms, so it lives as long
    // as the loop.
    // SAFETY: all-zero bytes are a valid msghdr (null pointers, zero lengths).
    let mut receive_header: Box<libc::msghdr> = Box::new(unsafe { zeroed() });
    receive_header.msg_namelen = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
    let receive = opcode::RecvMsgMulti::new(fd, &raw const *receive_header, GROUP)
        .build()
        .user_data(RECEIVE);

    let mut arenas: Vec<Box<Arena>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut sent_back: Vec<usize> = Vec::new();
    let mut armed = false;
    loop {
        if !armed {
            // SAFETY: the entry points at `receive_header`, which outlives the loop, and
            // at the buffer group registered above.
            unsafe { push(&mut ring, &receive)? };
            armed = true;
        }
        ring.submit_and_wait(1)?;

        let current = free.pop().unwrap_or_else(|| {
            arenas.push(Box::new(Arena::new(batch)));
            arenas.len() - 1
        });
        let arena = &mut arenas[current];
        for cqe in ring.completion() {
            if cqe.user_data() != RECEIVE {
                sent_back.push(cqe.user_data() as usize - 1);
                continue;
            }
            armed &= cqueue::more(cqe.flags());
            let Ok(len) = usize::try_from(cqe.result()) else {
                // A multishot that ends for want of buffers (ENOBUFS), of room in the
                // completion queue (EOVERFLOW) or by cancellation is re-armed above;
                // anything else is a fault of the socket.
                let error = -cqe.result();
                if [libc::ENOBUFS, libc::EOVERFLOW, libc::ECANCELED, libc::EINTR].contains(&error) {
                    continue;
                }
                return Err(io::Error::from_raw_os_error(error));
            };
            let Some(id) = cqueue::buffer_select(cqe.flags()) else {
                continue;
            };
            if let Ok(message) = types::RecvMsgOut::parse(&buffers.get(id)[..len], &receive_header)
                && !message.is_payload_truncated()
            {
                arena.add(message.name_data(), message.payload_data());
            }
            buffers.give_back(id);
            if arena.is_full() {
                break;
            }
        }
        buffers.publish();
        for index in sent_back.drain(..) {
            let done = &mut arenas[index];
            done.pending -= 1;
            if done.pending == 0 {
                done.clear();
                free.push(index);
            }
        }

        let arena = &mut arenas[current];
        if arena.is_empty() {
            free.push(current);
            continue;
        }
        arena.pending = arena.len();
        for entry in arena.sends(fd, current as u64 + 1) {
            // SAFETY: the entry points into the arena, which is boxed (it does not move)
            // and is neither cleared nor reused until this send's completion arrives.
            unsafe { push(&mut ring, &entry)? };
        }
    }
}

/// Queues `entry`, submitting what is queued first when the queue is full.
///
/// # Safety
/// What `entry` points at must stay valid until its completion arrives.
unsafe fn push(ring: &mut IoUring, entry: &io_uring::squeue::Entry) -> io::Result<()> {
    loop {
        // SAFETY: passed on from the caller.
        if unsafe { ring.submission().push(entry) }.is_ok() {
            return Ok(());
        }
        ring.submit()?;
    }
}

/// One round's replies: their bytes, addresses and `sendmsg` headers.
struct Arena {
    capacity: usize,
    bytes: Vec<u8>,
    /// End of each reply in `bytes`.
    ends: Vec<usize>,
    addresses: Box<[libc::sockaddr_storage]>,
    address_lens: Box<[libc::socklen_t]>,
    iovecs: Box<[libc::iovec]>,
    headers: Box<[libc::msghdr]>,
    /// Sends submitted and not yet completed.
    pending: usize,
}

impl Arena {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            // Room for a full round. The iovecs point into it only once the round is
            // complete (`sends`), and it is not touched again until every send has
            // completed, so even growing it could not move a reply being sent.
            bytes: Vec::with_capacity(capacity * LONGEST_REPLY),
            ends: Vec::with_capacity(capacity),
            // SAFETY: all-zero bytes are a valid sockaddr_storage.
            addresses: (0..capacity).map(|_| unsafe { zeroed() }).collect(),
            address_lens: vec![0; capacity].into_boxed_slice(),
            // SAFETY: all-zero bytes are a valid iovec (null, empty).
            iovecs: (0..capacity).map(|_| unsafe { zeroed() }).collect(),
            // SAFETY: all-zero bytes are a valid msghdr (null pointers, zero lengths).
            headers: (0..capacity).map(|_| unsafe { zeroed() }).collect(),
            pending: 0,
        }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    fn is_full(&self) -> bool {
        self.ends.len() == self.capacity
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// Writes the reply to `request` from the client at `address` (raw sockaddr bytes).
    fn add(&mut self, address: &[u8], request: &[u8]) {
        let slot = self.ends.len();
        if slot == self.capacity || address.len() > size_of::<libc::sockaddr_storage>() {
            return;
        }
        if !write_reply(request, &mut self.bytes) {
            return;
        }
        // SAFETY: `address` fits in a sockaddr_storage (checked above); the bytes are
        // the kernel's own sockaddr for this datagram.
        unsafe {
            std::ptr::copy_nonoverlapping(
                address.as_ptr(),
                (&raw mut self.addresses[slot]).cast::<u8>(),
                address.len(),
            );
        }
        self.address_lens[slot] = address.len() as libc::socklen_t;
        self.ends.push(self.bytes.len());
    }

    /// A `sendmsg` entry for each reply, with `tag` as its `user_data`.
    fn sends(
        &mut self,
        fd: types::Fixed,
        tag: u64,
    ) -> impl Iterator<Item = io_uring::squeue::Entry> + '_ {
        let base = self.bytes.as_ptr();
        let mut start = 0;
        for (slot, &end) in self.ends.iter().enumerate() {
            self.iovecs[slot] = libc::iovec {
                // SAFETY: start <= end <= bytes.len().
                iov_base: unsafe { base.add(start) }.cast_mut().cast(),
                iov_len: end - start,
            };
            let header = &mut self.headers[slot];
            header.msg_name = (&raw mut self.addresses[slot]).cast();
            header.msg_namelen = self.address_lens[slot];
            header.msg_iov = &raw mut self.iovecs[slot];
            header.msg_iovlen = 1;
            start = end;
        }
        self.headers[..self.ends.len()]
            .iter()
            .map(move |header| opcode::SendMsg::new(fd, header).build().user_data(tag))
    }
}

/// The provided buffers and the ring through which they are handed to the kernel.
///
/// Never unmapped: it lives as long as the process, whose only loop uses it.
struct BufferRing {
    /// `BUFFERS` entries of 16 bytes, page-aligned, shared with the kernel.
    entries: *mut types::BufRingEntry,
    memory: Box<[u8]>,
    /// The next tail to publish; the kernel sees entries up to the published one.
    tail: u16,
}

impl BufferRing {
    /// Registers the ring with `ring` as group [`GROUP`], every buffer in it.
    fn new(ring: &IoUring) -> io::Result<Self> {
        let bytes = BUFFERS as usize * size_of::<types::BufRingEntry>();
        // SAFETY: an anonymous private mapping; checked for failure below.
        let entries = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if entries == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut this = Self {
            entries: entries.cast(),
            memory: vec![0; BUFFERS as usize * BUFFER_LEN].into_boxed_slice(),
            tail: 0,
        };
        for id in 0..BUFFERS {
            this.give_back(id);
        }
        this.publish();
        // SAFETY: the mapping holds BUFFERS entries, is page-aligned (mmap) and lives as
        // long as `this`, which lives as long as the loop that uses the ring.
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                this.entries as u64,
                BUFFERS,
                GROUP,
                0,
            )?;
        }
        Ok(this)
    }

    /// The bytes of buffer `id`.
    fn get(&self, id: u16) -> &[u8] {
        let start = id as usize * BUFFER_LEN;
        &self.memory[start..start + BUFFER_LEN]
    }

    /// Puts buffer `id` back at the tail (seen by the kernel after [`publish`]).
    ///
    /// [`publish`]: Self::publish
    fn give_back(&mut self, id: u16) {
        let index = (self.tail & (BUFFERS - 1)) as usize;
        // SAFETY: index < BUFFERS, inside the mapping; the kernel reads only entries
        // before the published tail, and this one is past it.
        let entry = unsafe { &mut *self.entries.add(index) };
        entry.set_addr(self.get(id).as_ptr() as u64);
        entry.set_len(BUFFER_LEN as u32);
        entry.set_bid(id);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Lets the kernel see every buffer given back.
    fn publish(&self) {
        // SAFETY: the tail is the u16 the ABI puts in the first entry; the kernel reads
        // it concurrently, so it is written atomically, after the entries (Release).
        unsafe {
            let tail = types::BufRingEntry::tail(self.entries).cast_mut();
            AtomicU16::from_ptr(tail).store(self.tail, Ordering::Release);
        }
    }
}

// SLOT is the largest request the other floors read; the buffers leave it room after
// the multishot header (16 bytes) and an IPv6 address (28).
const _: () = assert!(BUFFER_LEN >= 16 + 28 + SLOT);
