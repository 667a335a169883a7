//! A dispatcher with real channels and real shards, and no sockets: what the unit
//! tests drive, and what the `udp_dispatch` fuzz target feeds arbitrary datagrams.

use std::net::SocketAddr;
use std::sync::Arc;

use crossbeam_channel::Receiver;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use shoal_common::{AccessControl, AccessList, AccessListMode};
use shoal_swarm::{BitTorrentMap, ServerTime};
use shoal_udp_protocol::*;

use super::Dispatcher;
use crate::config::Config;
use crate::connection_id::ConnectionIds;
use crate::messages::{Job, Replies};
use crate::shard::UdpShard;

pub(crate) struct Rig {
    pub(crate) dispatcher: Dispatcher,
    pub(crate) queues: Vec<Receiver<Job>>,
    shards: Vec<UdpShard>,
    pub(crate) now: ServerTime,
}

pub(crate) fn rig_with(
    swarm_workers: usize,
    queue_len: usize,
    access: AccessControl,
    config: Config,
) -> Rig {
    rig_private(swarm_workers, queue_len, access, config, None)
}

/// [`rig_with`] in private mode when `private` is given.
pub(crate) fn rig_private(
    swarm_workers: usize,
    queue_len: usize,
    access: AccessControl,
    config: Config,
    private: Option<Arc<shoal_private::Registry>>,
) -> Rig {
    let (senders, queues): (Vec<_>, Vec<_>) = (0..swarm_workers)
        .map(|_| crossbeam_channel::bounded(queue_len))
        .unzip();
    let ids = ConnectionIds::with_keys((7, 8), config.protocol.connection_id_lifetime);
    let rules = shoal_common::ClientRules::from_config(&config.clients).unwrap();
    let sessions = private.as_ref().map(|_| {
        Arc::new(shoal_private::Sessions::new(
            config.cleaning.peer_timeout,
            config.private.min_interval,
            config.private.peer_lists_per_minute,
        ))
    });
    // No jitter: tests read exact intervals.
    let mut settings = shoal_worker::AnnounceInterval::settings_for(
        &config,
        config.protocol.announce_interval / 2,
        u32::MAX,
    );
    settings.jitter_percent = 0;
    let interval = Arc::new(shoal_worker::AnnounceInterval::new(settings));
    let gates = super::Gates {
        access: Arc::new(access),
        client_rules: Arc::new(rules),
        private,
        sessions,
        accounts: None,
        interval: interval.clone(),
    };
    let dispatcher = Dispatcher::new(0, &config, ids, gates, senders);
    let shards = (0..swarm_workers)
        .map(|i| {
            UdpShard::new(
                BitTorrentMap::new(
                    config.cleaning.peer_timeout,
                    shoal_swarm::Capacity::UNLIMITED,
                ),
                SmallRng::seed_from_u64(i as u64),
                interval.clone(),
                None,
            )
        })
        .collect();
    Rig {
        dispatcher,
        queues,
        shards,
        now: ServerTime(10),
    }
}

#[cfg(test)]
pub(crate) fn rig(swarm_workers: usize) -> Rig {
    rig_with(
        swarm_workers,
        16,
        AccessControl::with_list(AccessListMode::Off, AccessList::default()),
        Config::default(),
    )
}

pub(crate) fn client(n: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, n], 40000))
}

impl Rig {
    /// Handles one packet, runs every queued job through its shard, and returns the
    /// replies in the order the socket worker would send them.
    pub(crate) fn exchange(
        &mut self,
        packet: &[u8],
        from: SocketAddr,
    ) -> Vec<(SocketAddr, Response)> {
        let mut out = Replies::default();
        self.dispatcher
            .handle_packet(packet, from, self.now, &mut out);
        self.dispatcher.flush_jobs(&mut out).unwrap();
        for (queue, shard) in self.queues.iter().zip(&mut self.shards) {
            while let Ok(mut job) = queue.try_recv() {
                shard.serve(&mut job, self.now);
                for (bytes, packet) in job.replies.iter_packets() {
                    out.bytes.extend_from_slice(bytes);
                    out.finish_packet(packet.client, packet.kind);
                }
                self.dispatcher.merge_scrape_parts(&job, &mut out);
                self.dispatcher.recycle(job);
            }
        }
        out.iter_packets()
            .map(|(bytes, packet)| {
                let family = if packet.client.is_ipv4() {
                    PeerFamily::V4
                } else {
                    PeerFamily::V6
                };
                (packet.client, Response::parse(bytes, family).unwrap())
            })
            .collect()
    }

    #[cfg(test)]
    pub(crate) fn connect(&mut self, from: SocketAddr) -> ConnectionId {
        let mut packet = Vec::new();
        Request::Connect(ConnectRequest {
            transaction_id: TransactionId(1),
        })
        .write(&mut packet);
        match &self.exchange(&packet, from)[..] {
            [(to, Response::Connect(reply))] if *to == from => reply.connection_id,
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Feeds `data` to a dispatcher as a series of datagrams and checks every reply.
///
/// Each datagram is a record: a flags byte, a length byte, then that many bytes. The
/// flags pick the client (low 3 bits; bit 3: an IPv6 one), whether the first 8 bytes
/// are replaced by a valid connection id for that client (bit 4, so announces and
/// scrapes get past the check), and whether the clock moves on first (bit 5: a
/// second; bit 6: past every lifetime). Whatever the bytes, nothing panics, every reply
/// parses, goes to the client that asked, and a request gets at most one reply.
pub(crate) fn fuzz(data: &[u8]) {
    let mut config = Config::default();
    config.protocol.max_scrape_torrents = 8;
    config.limits.max_pending_scrapes = 4;
    config.per_ip.table_size = 16;
    config.per_ip.requests_per_second = 50;
    config.per_ip.burst = 20;
    let access = AccessControl::with_list(AccessListMode::Off, AccessList::default());
    let mut rig = rig_with(3, 2, access, config);
    let mut clients = Vec::new();
    let mut rest = data;
    while let [flags, len, tail @ ..] = rest {
        let len = usize::from(*len).min(tail.len());
        let (packet, next) = tail.split_at(len);
        rest = next;
        if flags & 0x20 != 0 {
            rig.now = rig.now.plus(1);
        }
        if flags & 0x40 != 0 {
            rig.now = rig.now.plus(10_000);
        }
        let n = flags & 7;
        let from = if flags & 8 == 0 {
            client(n)
        } else {
            SocketAddr::from((
                std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(n)),
                40000,
            ))
        };
        let mut packet = packet.to_vec();
        if flags & 0x10 != 0 && packet.len() >= 8 {
            let id = rig.dispatcher.ids.issue(from.ip(), rig.now);
            packet[..8].copy_from_slice(&id.0.to_be_bytes());
        }
        if !clients.contains(&from) {
            clients.push(from);
        }
        // Every reply parses (exchange checks) and goes to a client that asked; merged
        // scrapes of earlier requests may complete here, so there can be several.
        for (to, _) in rig.exchange(&packet, from) {
            assert!(clients.contains(&to), "a reply to {to}, who asked nothing");
        }
    }
}
