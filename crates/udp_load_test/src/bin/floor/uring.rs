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
//! Sends are made with `MSG_DONTWAIT`, so each completes (or fails, and the reply is
//! dropped) as it is issued; still, each round's replies live in an arena that is
//! reused only once all its sends have completed.

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

/// A ring set up for one socket, with its receive buffers registered.
pub(crate) struct Server {
    ring: IoUring,
    buffers: BufferRing,
    /// Only its lengths matter to a multishot receive: room for either family's
    /// address, no control messages. The kernel reads it whenever the receive is
    /// armed, so it is never freed.
    receive_header: &'static libc::msghdr,
    batch: usize,
}

impl Server {
    /// Sets up the ring, registers `socket` as its file 0 and the buffer ring as group
    /// [`GROUP`]. Fails where io_uring is unavailable (kernels before 6.1, which lack
    /// `DEFER_TASKRUN`; a seccomp profile or `kernel.io_uring_disabled` refusing it).
    pub(crate) fn new(socket: &UdpSocket, batch: usize) -> io::Result<Self> {
        let ring: IoUring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_coop_taskrun()
            .setup_cqsize(4 * BUFFERS as u32)
            .build((batch as u32 + 1).next_power_of_two())?;
        let buffers = BufferRing::new(&ring)?;
        // The socket as a registered file: each entry then names it by index, and the
        // kernel skips looking the descriptor up (and counting a reference) per entry.
        ring.submitter().register_files(&[socket.as_raw_fd()])?;
        // SAFETY: all-zero bytes are a valid msghdr (null pointers, zero lengths).
        let receive_header: &'static mut libc::msghdr = Box::leak(Box::new(unsafe { zeroed() }));
        receive_header.msg_namelen = size_of::<libc::sockaddr_in6>() as libc::socklen_t;
        Ok(Self {
            ring,
            buffers,
            receive_header,
            batch,
        })
    }

    /// Serves until an error: one multishot receive, replies in rounds of up to
    /// `batch`.
    pub(crate) fn run(self) -> io::Result<()> {
        let Self {
            mut ring,
            mut buffers,
            receive_header,
            batch,
        } = self;
        let fd = types::Fixed(0);
        let receive = opcode::RecvMsgMulti::new(fd, receive_header, GROUP)
            .build()
            .user_data(RECEIVE);
        // What the kernel may read or write is never freed: the receive header, the
        // buffer ring and the arenas. A ring is torn down in the background after its
        // descriptor closes, so even on the way out of this function the kernel may
        // still hold their addresses.
        let mut arenas: Vec<&'static mut Arena> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        let mut sent_back: Vec<usize> = Vec::new();
        let mut armed = false;
        loop {
            if !armed {
                // SAFETY: the entry points at `receive_header` and the buffer group,
                // neither of which is ever freed.
                unsafe { push(&mut ring, &receive)? };
                armed = true;
            }
            match ring.submit_and_wait(1) {
                // A signal while waiting (SIGSTOP and SIGCONT, say): wait again.
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                result => {
                    result?;
                }
            }

            let current = free.pop().unwrap_or_else(|| {
                arenas.push(Box::leak(Box::new(Arena::new(batch))));
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
                    // A multishot that ends for want of buffers (ENOBUFS) or by
                    // cancellation is re-armed above; anything else is a fault of the
                    // socket.
                    let error = -cqe.result();
                    if [libc::ENOBUFS, libc::ECANCELED, libc::EINTR].contains(&error) {
                        continue;
                    }
                    return Err(io::Error::from_raw_os_error(error));
                };
                let Some(id) = cqueue::buffer_select(cqe.flags()) else {
                    continue;
                };
                if let Ok(message) =
                    types::RecvMsgOut::parse(buffers.received(id, len), receive_header)
                {
                    // Cut at SLOT bytes, as the other floors read requests.
                    let payload = message.payload_data();
                    arena.add(message.name_data(), &payload[..payload.len().min(SLOT)]);
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
                // SAFETY: the entry points into the arena, which never moves or is
                // freed, and is neither cleared nor reused until this send's
                // completion arrives.
                unsafe { push(&mut ring, &entry)? };
            }
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
        self.headers[..self.ends.len()].iter().map(move |header| {
            // MSG_DONTWAIT: a reply that finds the send buffer full fails at once
            // (EAGAIN in its completion) instead of waiting in the kernel, so it is
            // dropped, as the batched floor drops what `sendmmsg` cannot take.
            opcode::SendMsg::new(fd, header)
                .flags(libc::MSG_DONTWAIT as u32)
                .build()
                .user_data(tag)
        })
    }
}

/// The provided buffers and the ring through which they are handed to the kernel.
///
/// Both are anonymous mappings that are never unmapped (see [`Server::run`]), held
/// as raw pointers: the kernel writes into the buffers and reads the entries while
/// this process holds them, so no Rust reference may cover memory the kernel owns.
struct BufferRing {
    /// `BUFFERS` entries of 16 bytes (`struct io_uring_buf`), page-aligned.
    entries: *mut types::BufRingEntry,
    /// `BUFFERS` buffers of `BUFFER_LEN` bytes.
    memory: *mut u8,
    /// The next tail to publish; the kernel takes entries up to the published one.
    tail: u16,
}

impl BufferRing {
    /// Registers the ring with `ring` as group [`GROUP`], every buffer in it.
    fn new(ring: &IoUring) -> io::Result<Self> {
        let mut this = Self {
            entries: map(BUFFERS as usize * size_of::<types::BufRingEntry>())?.cast(),
            memory: map(BUFFERS as usize * BUFFER_LEN)?,
            tail: 0,
        };
        for id in 0..BUFFERS {
            this.give_back(id);
        }
        this.publish();
        // SAFETY: the mapping holds BUFFERS entries, is page-aligned (mmap) and is
        // never unmapped.
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

    /// The first `len` bytes of buffer `id`, which the kernel has just handed back
    /// filled with a datagram.
    fn received(&self, id: u16, len: usize) -> &[u8] {
        let id = usize::from(id) % BUFFERS as usize;
        // SAFETY: inside the mapping; the kernel wrote these bytes before it posted the
        // completion naming `id`, and does not touch the buffer again until it is
        // given back and published.
        unsafe { std::slice::from_raw_parts(self.memory.add(id * BUFFER_LEN), len.min(BUFFER_LEN)) }
    }

    /// Puts buffer `id` back at the tail (seen by the kernel after [`publish`]).
    ///
    /// [`publish`]: Self::publish
    fn give_back(&mut self, id: u16) {
        let index = usize::from(self.tail & (BUFFERS - 1));
        // SAFETY: index < BUFFERS, inside the mapping, and the kernel does not read an
        // entry at or past the published tail, which this one is. The fields are
        // written one by one through raw pointers (the layout of `struct io_uring_buf`:
        // addr u64, len u32, bid u16, then the u16 that in entry 0 is the ring's tail),
        // so nothing here covers the tail, which the kernel reads at any time.
        unsafe {
            let entry = self.entries.add(index).cast::<u8>();
            let buffer = self.memory.add(usize::from(id) * BUFFER_LEN);
            entry.cast::<u64>().write(buffer as u64);
            entry.add(8).cast::<u32>().write(BUFFER_LEN as u32);
            entry.add(12).cast::<u16>().write(id);
        }
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

/// `len` bytes of zeroed, page-aligned memory that is never unmapped.
fn map(len: usize) -> io::Result<*mut u8> {
    // SAFETY: an anonymous private mapping, checked for failure below.
    let memory = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if memory == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(memory.cast())
}

// The layout `give_back` writes.
const _: () = assert!(size_of::<types::BufRingEntry>() == 16);
// SLOT is the longest request the floors read (longer ones are cut there); the
// buffers leave it room after the multishot header (16 bytes) and an IPv6 address (28).
const _: () = assert!(BUFFER_LEN >= 16 + 28 + SLOT);
