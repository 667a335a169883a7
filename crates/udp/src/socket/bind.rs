//! Creating the UDP sockets.

use std::net::SocketAddr;

use anyhow::Context as _;
use socket2::{Domain, Protocol, Socket, Type};

/// A non-blocking UDP socket bound to `addr` with SO_REUSEPORT (so every socket worker
/// can bind the same address) and, for IPv6, IPV6_V6ONLY (IPv4 clients use the IPv4
/// socket and are never seen as mapped addresses).
pub(crate) fn bind_socket(
    addr: SocketAddr,
    recv_buffer_size: usize,
) -> anyhow::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .with_context(|| format!("cannot create a UDP socket for {addr}"))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true).context("cannot set IPV6_V6ONLY")?;
    }
    socket
        .set_reuse_port(true)
        .context("cannot set SO_REUSEPORT")?;
    socket
        .set_nonblocking(true)
        .context("cannot make the socket non-blocking")?;
    if recv_buffer_size > 0 {
        shoal_common::sockets::set_recv_buffer(&socket, recv_buffer_size);
    }
    socket
        .bind(&addr.into())
        .map_err(|err| shoal_common::sockets::bind_failure("UDP", addr, &err))?;
    Ok(socket.into())
}
