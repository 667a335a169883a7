//! Peer addresses and the peer record.
//!
//! Addresses are kept in their compact wire form (BEP 23 for IPv4, BEP 7 for IPv6):
//! four or sixteen address bytes followed by the port, big-endian. A peer is identified
//! by exactly these bytes (IP + port), and writing a compact peer list is a copy.

use std::fmt;
use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use crate::peer_list::PeerList;
use crate::time::ServerTime;
use crate::torrents::Torrent;

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

/// One address family's peer address. Implemented by [`V4Addr`] and [`V6Addr`]; it
/// tells the torrent map which of a torrent's two peer lists an announce belongs to.
pub trait PeerAddr: Copy + Eq + Hash + fmt::Debug + 'static {
    /// The address in wire form.
    fn as_bytes(&self) -> &[u8];
    /// The address as a socket address.
    fn socket_addr(&self) -> SocketAddr;
    /// The torrent's peers of this family, if it has any list for it.
    fn peers_of<X>(torrent: &Torrent<X>) -> Option<&PeerList<Self, X>>;
    /// The torrent's peers of this family, created empty if missing.
    fn peers_of_mut<X>(torrent: &mut Torrent<X>) -> &mut PeerList<Self, X>;
}

impl PeerAddr for V4Addr {
    fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    fn socket_addr(&self) -> SocketAddr {
        SocketAddr::V4(self.to_socket_addr())
    }

    fn peers_of<X>(torrent: &Torrent<X>) -> Option<&PeerList<Self, X>> {
        Some(&torrent.v4)
    }

    fn peers_of_mut<X>(torrent: &mut Torrent<X>) -> &mut PeerList<Self, X> {
        &mut torrent.v4
    }
}

impl PeerAddr for V6Addr {
    fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    fn socket_addr(&self) -> SocketAddr {
        SocketAddr::V6(self.to_socket_addr())
    }

    fn peers_of<X>(torrent: &Torrent<X>) -> Option<&PeerList<Self, X>> {
        torrent.v6.as_deref()
    }

    fn peers_of_mut<X>(torrent: &mut Torrent<X>) -> &mut PeerList<Self, X> {
        torrent.v6.get_or_insert_with(Default::default)
    }
}

/// One peer of one torrent. Whether it is a seeder is given by where it sits in its
/// [`PeerList`], not by a field, which keeps the record at 12 bytes for IPv4 UDP peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer<A, X> {
    /// The time after which the peer is dropped unless it announces again.
    pub expires: ServerTime,
    /// Address and port the peer listens on.
    pub addr: A,
    /// What else a tracker keeps per peer (the peer id for HTTP; nothing for UDP).
    pub extra: X,
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn ipv4_udp_peers_take_twelve_bytes() {
        assert_eq!(std::mem::size_of::<Peer<V4Addr, ()>>(), 12);
        assert_eq!(std::mem::size_of::<Peer<V6Addr, ()>>(), 24);
    }
}
