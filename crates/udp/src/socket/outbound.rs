//! Sending replies: batched per address family, queued when the kernel's buffer is full.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::SocketAddr;

use mio::net::UdpSocket;
use mio::{Interest, Registry, Token};
use shoal_common::metrics::Traffic;
use shoal_common::udp_batch::{MAX_BATCH, SendBatch};

use crate::messages::{Replies, ReplyKind};
use crate::stats::SocketCounters;

/// One family's socket with its readiness and queued replies.
pub(crate) struct Endpoint {
    pub(crate) socket: UdpSocket,
    pub(crate) token: Token,
    /// Not yet read to `WouldBlock` since its last readiness event.
    pub(crate) readable: bool,
    /// Replies waiting for room in the kernel's send buffer.
    queue: VecDeque<(SocketAddr, Vec<u8>, ReplyKind)>,
    /// Whether epoll reports writability (wanted only while `queue` is non-empty).
    watching_writable: bool,
}

impl Endpoint {
    pub(crate) fn new(socket: UdpSocket, token: Token) -> Self {
        Self {
            socket,
            token,
            readable: true,
            queue: VecDeque::new(),
            watching_writable: false,
        }
    }
}

/// The endpoints of a socket worker, slot 0 for IPv4 and 1 for IPv6.
pub(crate) type Endpoints = [Option<Endpoint>; 2];

/// The slot of the endpoint that talks to `client`.
pub(crate) fn slot_for(client: &SocketAddr) -> usize {
    usize::from(client.is_ipv6())
}

/// Sends replies with as few system calls as possible.
pub(crate) struct Outbound {
    batch: SendBatch,
    /// Scratch: (client, start, end, kind) of the packets of one family.
    pending: Vec<(SocketAddr, u32, u32, ReplyKind)>,
    queue_len: usize,
}

impl Outbound {
    pub(crate) fn new(queue_len: usize) -> Self {
        Self {
            batch: SendBatch::new(),
            pending: Vec::new(),
            queue_len,
        }
    }

    /// Sends every packet of `replies`; what the kernel will not take now is queued.
    pub(crate) fn send(
        &mut self,
        endpoints: &mut Endpoints,
        replies: &Replies,
        counters: &mut SocketCounters,
        traffic: &mut Traffic,
    ) {
        if replies.packets.is_empty() {
            return;
        }
        for (slot, endpoint) in endpoints.iter_mut().enumerate() {
            self.pending.clear();
            let mut start = 0;
            for packet in &replies.packets {
                if slot_for(&packet.client) == slot {
                    self.pending
                        .push((packet.client, start, packet.end, packet.kind));
                }
                start = packet.end;
            }
            if self.pending.is_empty() {
                continue;
            }
            let Some(endpoint) = endpoint else {
                counters.send_failures += self.pending.len() as u64;
                continue;
            };
            let bytes = &replies.bytes;
            let mut next = 0;
            // Behind queued replies, new ones wait their turn.
            while endpoint.queue.is_empty() && next < self.pending.len() {
                let chunk = &self.pending[next..self.pending.len().min(next + MAX_BATCH)];
                let packets = chunk.iter().map(|&(client, start, end, _)| {
                    (Some(client), &bytes[start as usize..end as usize])
                });
                match self.batch.send(&endpoint.socket, packets) {
                    Ok(sent) => {
                        for &(_, start, end, kind) in &chunk[..sent] {
                            count_reply(counters, kind, slot);
                            traffic.bytes_sent += u64::from(end - start);
                        }
                        next += sent;
                        if sent < chunk.len() {
                            break; // the buffer filled up
                        }
                    }
                    Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                    Err(err) if err.kind() == ErrorKind::Interrupted => {}
                    Err(err) => {
                        // The first packet of the chunk failed (e.g. an unroutable
                        // address); drop it and go on with the rest.
                        log::debug!("send to {} failed: {err}", chunk[0].0);
                        counters.send_failures += 1;
                        next += 1;
                    }
                }
            }
            for &(client, start, end, kind) in &self.pending[next..] {
                if endpoint.queue.len() < self.queue_len {
                    endpoint.queue.push_back((
                        client,
                        bytes[start as usize..end as usize].to_vec(),
                        kind,
                    ));
                } else {
                    counters.send_failures += 1;
                }
            }
        }
    }

    /// Sends queued replies the kernel now has room for, and asks epoll for
    /// writability exactly while some remain.
    pub(crate) fn retry_queued(
        &mut self,
        endpoints: &mut Endpoints,
        registry: &Registry,
        counters: &mut SocketCounters,
        traffic: &mut Traffic,
    ) {
        for (slot, endpoint) in endpoints.iter_mut().enumerate() {
            let Some(endpoint) = endpoint else { continue };
            while let Some((client, bytes, kind)) = endpoint.queue.front() {
                match endpoint.socket.send_to(bytes, *client) {
                    Ok(sent) => {
                        count_reply(counters, *kind, slot);
                        traffic.bytes_sent += sent as u64;
                    }
                    Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => counters.send_failures += 1,
                }
                endpoint.queue.pop_front();
            }
            let want_writable = !endpoint.queue.is_empty();
            if want_writable != endpoint.watching_writable {
                let interest = if want_writable {
                    Interest::READABLE | Interest::WRITABLE
                } else {
                    Interest::READABLE
                };
                if registry
                    .reregister(&mut endpoint.socket, endpoint.token, interest)
                    .is_ok()
                {
                    endpoint.watching_writable = want_writable;
                }
            }
        }
    }
}

/// Counts a reply sent from the endpoint in `slot` (1: IPv6).
fn count_reply(counters: &mut SocketCounters, kind: ReplyKind, slot: usize) {
    let (all, ipv6) = match kind {
        ReplyKind::Connect => (
            &mut counters.connect_replies,
            &mut counters.connect_replies_v6,
        ),
        ReplyKind::Announce => (
            &mut counters.announce_replies,
            &mut counters.announce_replies_v6,
        ),
        ReplyKind::Scrape => (
            &mut counters.scrape_replies,
            &mut counters.scrape_replies_v6,
        ),
        ReplyKind::Error => (&mut counters.error_replies, &mut counters.error_replies_v6),
    };
    *all += 1;
    *ipv6 += slot as u64;
}
