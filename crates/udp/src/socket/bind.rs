//! Creating the UDP sockets.

use std::net::SocketAddr;

use anyhow::Context as _;
use socket2::{Domain, Protocol, Socket, Type};

/// A non-blocking UDP socket bound to `addr` with SO_REUSEPORT (so every socket worker
/// can bind the same address) and, for IPv6, IPV6_V6ONLY (IPv4 clients use the IPv4
/// socket and are never seen as mapped addresses). An IPv4 socket sends unfragmented
/// ([`set_dont_fragment`](shoal_sockets::set_dont_fragment)), which spares
/// the kernel an IP id per reply; the rare reply too big for that is sent fragmented
/// from the queue ([`Outbound`](super::outbound::Outbound)).
pub(crate) fn bind_socket(
    addr: SocketAddr,
    recv_buffer_size: usize,
) -> anyhow::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .with_context(|| format!("cannot create a UDP socket for {addr}"))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true).context("cannot set IPV6_V6ONLY")?;
    } else if let Err(err) = shoal_sockets::set_dont_fragment(&socket, true) {
        // Only speed is lost: the kernel then hashes an IP id for every reply.
        log::warn!("cannot send unfragmented UDP replies on {addr}: {err}");
    }
    socket
        .set_reuse_port(true)
        .context("cannot set SO_REUSEPORT")?;
    socket
        .set_nonblocking(true)
        .context("cannot make the socket non-blocking")?;
    if recv_buffer_size > 0 {
        shoal_sockets::set_recv_buffer(&socket, recv_buffer_size);
    }
    socket
        .bind(&addr.into())
        .map_err(|err| shoal_sockets::bind_failure("UDP", addr, &err))?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_replies_go_unfragmented() {
        let socket = bind_socket(SocketAddr::from(([127, 0, 0, 1], 0)), 0).unwrap();
        let socket = socket2::SockRef::from(&socket);
        assert!(shoal_sockets::sends_unfragmented(&socket).unwrap());
    }
}
