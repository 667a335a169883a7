//! Peer addresses and the peer record.
//!
//! Addresses are kept in their compact wire form (BEP 23 for IPv4, BEP 7 for IPv6):
//! four or sixteen address bytes followed by the port, big-endian. A peer is identified
//! by exactly these bytes (IP + port), and writing a compact peer list is a copy.

use std::fmt;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::time::ServerTime;

/// An IPv4 peer address: 4 address bytes then 2 port bytes, big-endian.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct V4Addr(pub [u8; 6]);

/// An IPv6 peer address: 16 address bytes then 2 port bytes, big-endian.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct V6Addr(pub [u8; 18]);

impl V4Addr {
    /// The compact form of `ip:port`.
    pub fn new(ip: Ipv4Addr, port: u16) -> Self {
        let mut bytes = [0; 6];
        bytes[..4].copy_from_slice(&ip.octets());
        bytes[4..].copy_from_slice(&port.to_be_bytes());
        Self(bytes)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        u16::from_be_bytes([self.0[4], self.0[5]])
    }

    /// The address as a socket address.
    pub fn to_socket_addr(self) -> SocketAddrV4 {
        let [a, b, c, d, p0, p1] = self.0;
        SocketAddrV4::new(Ipv4Addr::new(a, b, c, d), u16::from_be_bytes([p0, p1]))
    }
}

impl V6Addr {
    /// The compact form of `[ip]:port`.
    pub fn new(ip: Ipv6Addr, port: u16) -> Self {
        let mut bytes = [0; 18];
        bytes[..16].copy_from_slice(&ip.octets());
        bytes[16..].copy_from_slice(&port.to_be_bytes());
        Self(bytes)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        u16::from_be_bytes([self.0[16], self.0[17]])
    }

    /// The address as a socket address.
    pub fn to_socket_addr(self) -> SocketAddrV6 {
        let mut ip = [0; 16];
        ip.copy_from_slice(&self.0[..16]);
        let port = u16::from_be_bytes([self.0[16], self.0[17]]);
        SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, 0)
    }
}

impl fmt::Debug for V4Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_socket_addr())
    }
}

impl fmt::Debug for V6Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_socket_addr())
    }
}

/// A BitTorrent peer's address, of either family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerAddress {
    /// IPv4.
    V4(V4Addr),
    /// IPv6.
    V6(V6Addr),
}

impl PeerAddress {
    /// The address of a client at `ip` listening on `port`. An IPv4 address mapped into
    /// IPv6 (`::ffff:a.b.c.d`, as a dual-stack socket sees IPv4 clients) is an IPv4
    /// peer, so that IPv4 clients are sent it.
    pub fn new(ip: IpAddr, port: u16) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(ip) => Self::V4(V4Addr::new(ip, port)),
            IpAddr::V6(ip) => Self::V6(V6Addr::new(ip, port)),
        }
    }
}

/// What a peer is known by in its list: its address (BitTorrent, where a peer is an
/// IP and port) or its peer id (WebTorrent, where peers are reached through their
/// connection). Anything small, copyable and hashable will do.
pub trait PeerKey: Copy + Eq + Hash + fmt::Debug + 'static {}

impl<T: Copy + Eq + Hash + fmt::Debug + 'static> PeerKey for T {}

/// A peer address in its compact wire form. Implemented by [`V4Addr`] and [`V6Addr`].
pub trait PeerAddr: PeerKey {
    /// The address in wire form.
    fn as_bytes(&self) -> &[u8];
    /// The address as a socket address.
    fn socket_addr(&self) -> SocketAddr;
}

impl PeerAddr for V4Addr {
    fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    fn socket_addr(&self) -> SocketAddr {
        SocketAddr::V4(self.to_socket_addr())
    }
}

impl PeerAddr for V6Addr {
    fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    fn socket_addr(&self) -> SocketAddr {
        SocketAddr::V6(self.to_socket_addr())
    }
}

/// What a tracker keeps with each peer besides its key (nothing for UDP, the peer id
/// for HTTP, the connection and pending offers for WebTorrent), and the few rules that
/// depend on it. The defaults are BitTorrent's.
pub trait PeerData: Sized {
    /// Whether a seeder may be sent other seeders when its swarm has no leechers.
    /// Harmless for BitTorrent clients; for WebTorrent it would open a WebRTC
    /// connection between two browsers that have nothing to give each other.
    const SEEDERS_MEET_SEEDERS: bool = true;

    /// Whether an announce (or stop, or leave) carrying `by` may change or remove the
    /// peer that holds `self`. A WebTorrent peer id belongs to the connection that
    /// announced it; a BitTorrent peer is its address, which nobody else can announce.
    fn may_change(&self, by: &Self) -> bool {
        let _ = by;
        true
    }

    /// Whether a change from another node (`[cluster]`) carrying `incoming` may
    /// refresh or remove the live peer that holds `self`. BitTorrent peers are their
    /// addresses, so any node's change is about the same peer; a WebTorrent peer id
    /// belongs to one connection, so only the node holding it speaks for it.
    fn may_replicate(&self, incoming: &Self) -> bool {
        let _ = incoming;
        true
    }

    /// Takes the data of a re-announce; the default replaces it.
    fn refresh(&mut self, new: Self) {
        *self = new;
    }

    /// Called by cleaning for every peer it keeps, to drop what expired inside the
    /// data (WebTorrent's unanswered offers).
    fn tidy(&mut self, now: ServerTime) {
        let _ = now;
    }
}

impl PeerData for () {}

/// HTTP keeps the peer id for dictionary-model replies.
impl PeerData for [u8; 20] {}

/// One peer of one torrent. Whether it is a seeder is given by where it sits in its
/// [`PeerList`](crate::PeerList), not by a field, and its expiry is kept as bytes (no
/// alignment), which keeps the record at 10 bytes for IPv4 UDP peers (12 with an
/// aligned `u32`: a sixth of all peer memory was padding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer<K, X> {
    /// The time after which the peer is dropped unless it announces again
    /// ([`expires`](Self::expires)).
    expires: [u8; 4],
    /// What the peer is known by; private, since its list indexes peers by it.
    key: K,
    /// What else a tracker keeps per peer.
    pub extra: X,
}

impl<K, X> Peer<K, X> {
    /// A peer known by `key` until `expires`.
    pub fn new(key: K, expires: ServerTime, extra: X) -> Self {
        Self {
            expires: expires.0.to_ne_bytes(),
            key,
            extra,
        }
    }

    /// The time after which the peer is dropped unless it announces again.
    pub fn expires(&self) -> ServerTime {
        ServerTime(u32::from_ne_bytes(self.expires))
    }

    /// Sets when the peer expires.
    pub fn set_expires(&mut self, at: ServerTime) {
        self.expires = at.0.to_ne_bytes();
    }

    /// What the peer is known by (its address, or its peer id).
    pub fn key(&self) -> &K {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_records_have_no_padding() {
        assert_eq!(std::mem::size_of::<Peer<V4Addr, ()>>(), 10);
        assert_eq!(std::mem::size_of::<Peer<V6Addr, ()>>(), 22);
        assert_eq!(std::mem::size_of::<Peer<V4Addr, [u8; 20]>>(), 30);
        let mut peer = Peer::new(V4Addr([1; 6]), ServerTime(7), ());
        peer.set_expires(ServerTime(u32::MAX - 1));
        assert_eq!(peer.expires(), ServerTime(u32::MAX - 1));
    }

    #[test]
    fn compact_forms_round_trip() {
        let v4 = V4Addr::new(Ipv4Addr::new(10, 1, 2, 3), 6881);
        assert_eq!(v4.0, [10, 1, 2, 3, 0x1a, 0xe1]);
        assert_eq!(v4.to_socket_addr(), "10.1.2.3:6881".parse().unwrap());

        let ip: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let v6 = V6Addr::new(ip, 51413);
        assert_eq!(&v6.0[16..], &51413u16.to_be_bytes());
        assert_eq!(v6.to_socket_addr(), "[2001:db8::1]:51413".parse().unwrap());
        assert_eq!(format!("{v6:?}"), "[2001:db8::1]:51413");
    }

    #[test]
    fn mapped_ipv4_clients_get_ipv4_peer_addresses() {
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(
            PeerAddress::new(mapped, 6881),
            PeerAddress::V4(V4Addr::new([192, 0, 2, 7].into(), 6881))
        );
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert!(matches!(PeerAddress::new(v6, 1), PeerAddress::V6(_)));
    }
}
