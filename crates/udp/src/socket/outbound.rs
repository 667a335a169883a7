//! Sending replies: batched per address family, queued when the kernel's buffer is full.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::SocketAddr;

use shoal_common::Traffic;
use shoal_sockets::{MAX_BATCH, SendBatch, send_fragmenting, too_big_unfragmented};
use std::net::UdpSocket;

use crate::messages::{Job, Replies, ReplyKind};
use crate::stats::SocketCounters;

/// One family's socket with its readiness and queued replies.
pub(crate) struct Endpoint {
    /// A non-blocking socket.
    pub(crate) socket: UdpSocket,
    /// Not read to `WouldBlock` since poll last said it was readable.
    pub(crate) readable: bool,
    /// Replies waiting for room in the kernel's send buffer.
    queue: VecDeque<(SocketAddr, Vec<u8>, ReplyKind)>,
}

impl Endpoint {
    pub(crate) fn new(socket: UdpSocket) -> Self {
        Self {
            socket,
            readable: true,
            queue: VecDeque::new(),
        }
    }

    /// Whether replies wait for room to send (so a wait should end when there is).
    pub(crate) fn wants_writable(&self) -> bool {
        !self.queue.is_empty()
    }
}

/// The endpoints of a socket worker, slot 0 for IPv4 and 1 for IPv6.
pub(crate) type Endpoints = [Option<Endpoint>; 2];

/// The slot of the endpoint that talks to `client`.
pub(crate) fn slot_for(client: &SocketAddr) -> usize {
    usize::from(client.is_ipv6())
}

/// A packet waiting to be sent: where to, which of the sources holds it, where in
/// that source's bytes, and what it is.
#[derive(Clone, Copy)]
struct Pending {
    client: SocketAddr,
    source: u32,
    start: u32,
    end: u32,
    kind: ReplyKind,
}

/// Sends replies with as few system calls as possible.
pub(crate) struct Outbound {
    batch: SendBatch,
    /// Scratch: the packets of one family.
    pending: Vec<Pending>,
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

    /// Sends every reply of `jobs`, then of `own`, in order, in as few calls as the
    /// kernel takes them; what it will not take now is queued.
    pub(crate) fn send(
        &mut self,
        endpoints: &mut Endpoints,
        jobs: &[Job],
        own: &Replies,
        counters: &mut SocketCounters,
        traffic: &mut Traffic,
    ) {
        // Source i is job i's replies; source `jobs.len()` is `own`.
        let source = |i: usize| jobs.get(i).map_or(own, |job| &job.replies);
        let sources = jobs.len() + 1;
        if (0..sources).all(|i| source(i).packets.is_empty()) {
            return;
        }
        for (slot, endpoint) in endpoints.iter_mut().enumerate() {
            self.pending.clear();
            for index in 0..sources {
                let mut start = 0;
                for packet in &source(index).packets {
                    if slot_for(&packet.client) == slot {
                        self.pending.push(Pending {
                            client: packet.client,
                            source: index as u32,
                            start,
                            end: packet.end,
                            kind: packet.kind,
                        });
                    }
                    start = packet.end;
                }
            }
            if self.pending.is_empty() {
                continue;
            }
            let Some(endpoint) = endpoint else {
                counters.send_failures += self.pending.len() as u64;
                continue;
            };
            let bytes =
                |p: &Pending| &source(p.source as usize).bytes[p.start as usize..p.end as usize];
            let mut next = 0;
            // Behind queued replies, new ones wait their turn.
            while endpoint.queue.is_empty() && next < self.pending.len() {
                let chunk = &self.pending[next..self.pending.len().min(next + MAX_BATCH)];
                let packets = chunk.iter().map(|p| (Some(p.client), bytes(p)));
                match self.batch.send(&endpoint.socket, packets) {
                    Ok(sent) => {
                        for p in &chunk[..sent] {
                            count_reply(counters, p.kind, slot);
                            traffic.bytes_sent += u64::from(p.end - p.start);
                        }
                        next += sent;
                        if sent < chunk.len() {
                            break; // the buffer filled up
                        }
                    }
                    Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                    Err(err) if err.kind() == ErrorKind::Interrupted => {}
                    // Too big to go unfragmented (the IPv4 socket's setting, see
                    // `bind_socket`): queued with what follows it; `retry_queued`
                    // sends it in fragments.
                    Err(err) if too_big_unfragmented(&err) => break,
                    Err(err) => {
                        // The first packet of the chunk failed (e.g. an unroutable
                        // address); drop it and go on with the rest.
                        log::debug!("send to {} failed: {err}", chunk[0].client);
                        counters.send_failures += 1;
                        next += 1;
                    }
                }
            }
            for p in &self.pending[next..] {
                if endpoint.queue.len() < self.queue_len {
                    endpoint
                        .queue
                        .push_back((p.client, bytes(p).to_vec(), p.kind));
                } else {
                    counters.send_failures += 1;
                }
            }
        }
    }

    /// Sends queued replies the kernel now has room for.
    pub(crate) fn retry_queued(
        &mut self,
        endpoints: &mut Endpoints,
        counters: &mut SocketCounters,
        traffic: &mut Traffic,
    ) {
        for (slot, endpoint) in endpoints.iter_mut().enumerate() {
            let Some(endpoint) = endpoint else { continue };
            while let Some((client, bytes, kind)) = endpoint.queue.front() {
                match send_one(&endpoint.socket, bytes, *client) {
                    Ok(sent) => {
                        count_reply(counters, *kind, slot);
                        traffic.bytes_sent += sent as u64;
                    }
                    Err(err) if err.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => counters.send_failures += 1,
                }
                endpoint.queue.pop_front();
            }
        }
    }
}

/// Sends one datagram, in fragments if it is too big for the path unfragmented.
fn send_one(socket: &UdpSocket, bytes: &[u8], client: SocketAddr) -> std::io::Result<usize> {
    match socket.send_to(bytes, client) {
        Err(err) if too_big_unfragmented(&err) && client.is_ipv4() => {
            log::debug!(
                "a reply of {} bytes to {client} is bigger than the path MTU: sent in fragments",
                bytes.len()
            );
            send_fragmenting(socket, bytes, client)
        }
        result => result,
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
        ReplyKind::Backoff => (
            &mut counters.backoff_replies,
            &mut counters.backoff_replies_v6,
        ),
    };
    *all += 1;
    *ipv6 += slot as u64;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::socket::bind::bind_socket;

    #[test]
    fn a_reply_refused_for_its_size_holds_back_no_other() {
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let to = client.local_addr().unwrap();
        let socket = bind_socket(SocketAddr::from(([127, 0, 0, 1], 0)), 0).unwrap();
        let mut endpoints: Endpoints = [Some(Endpoint::new(socket)), None];
        // First a reply bigger than any UDP datagram (EMSGSIZE whole or in
        // fragments), then two ordinary ones.
        let mut own = Replies::default();
        own.bytes.resize(70_000, 0);
        own.finish_packet(to, ReplyKind::Announce);
        for reply in [&b"first"[..], b"second"] {
            own.bytes.extend_from_slice(reply);
            own.finish_packet(to, ReplyKind::Connect);
        }
        let mut outbound = Outbound::new(16);
        let (mut counters, mut traffic) = (SocketCounters::default(), Traffic::default());
        outbound.send(&mut endpoints, &[], &own, &mut counters, &mut traffic);
        outbound.retry_queued(&mut endpoints, &mut counters, &mut traffic);

        let mut buf = [0u8; 64];
        for expected in [&b"first"[..], b"second"] {
            let (len, _) = client.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..len], expected);
        }
        assert_eq!(counters.send_failures, 1);
        assert_eq!(counters.connect_replies, 2);
        assert!(!endpoints[0].as_ref().unwrap().wants_writable());
    }
}
