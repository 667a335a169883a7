//! Sockets for shoal's socket workers, and every `unsafe` call on them in one audited
//! place.
//!
//! Each socket worker has sockets of its own bound to the same addresses
//! (`SO_REUSEPORT`), so the kernel spreads clients over the workers; the UDP tracker
//! moves many datagrams per system call (`recvmmsg`, `sendmmsg`) and sleeps on its
//! sockets and a wake-up descriptor at once. What changes here is how shoal talks to
//! the kernel's socket layer; no protocol and no worker logic lives here.
//!
//! # Layout
//!
//! Every module is private; what other crates use is re-exported at the root below.
//!
//! * `sockets`: binding per worker, refusing a port another process holds, socket
//!   buffer sizes, receive queue figures, don't-fragment.
//! * `udp_batch`: many datagrams per system call (`recvmmsg`, `sendmmsg`).
//! * `sleep`: sleeping until a socket is readable or another thread wakes the worker
//!   (`poll` on the sockets and an `eventfd`).

mod sleep;
mod sockets;
mod udp_batch;

pub use sleep::{Doorbell, Ready, Want, wait as wait_for_sockets};
pub use sockets::{
    ReceiveQueue, bind_failure, bind_listeners, bind_per_worker, cap_connection_buffers,
    may_force_recv_buffer, receive_queue, report_recv_buffer, rmem_max, send_fragmenting,
    sends_unfragmented, set_dont_fragment, set_recv_buffer, somaxconn, stop_listening,
    too_big_unfragmented,
};
pub use udp_batch::{MAX_BATCH, RecvBatch, SendBatch};
