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
        set_recv_buffer(&socket, recv_buffer_size);
    }
    socket
        .bind(&addr.into())
        .map_err(|err| shoal_common::sockets::bind_failure("UDP", addr, &err))?;
    Ok(socket.into())
}

/// Asks for a receive buffer of `size` bytes; as root, past net.core.rmem_max.
fn set_recv_buffer(socket: &Socket, size: usize) {
    if socket.set_recv_buffer_size(size).is_err() {
        log::warn!("cannot set the socket receive buffer to {size} bytes");
    }
    // Linux reports double the usable size it granted.
    let granted = socket.recv_buffer_size().unwrap_or(0) / 2;
    if granted < size {
        let forced = force_recv_buffer(socket, size);
        let granted = socket.recv_buffer_size().unwrap_or(0) / 2;
        if !forced || granted < size {
            log::warn!(
                "socket receive buffer is {granted} bytes, not the {size} configured; raise \
                 net.core.rmem_max (sysctl) or start as root"
            );
        }
    }
}

/// SO_RCVBUFFORCE, which root may use to exceed net.core.rmem_max.
fn force_recv_buffer(socket: &Socket, size: usize) -> bool {
    use std::os::fd::AsRawFd as _;
    let value = libc::c_int::try_from(size).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt reads an int from a valid pointer with the length we pass.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    result == 0
}
