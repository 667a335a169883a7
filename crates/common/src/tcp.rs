//! Listening TCP sockets for trackers whose socket workers each accept on their own
//! socket (SO_REUSEPORT), so the kernel spreads connections over the workers.

use std::net::{SocketAddr, TcpListener};

use anyhow::Context as _;
use socket2::{Domain, Protocol, Socket, Type};

/// Binds `workers` listening sockets to each of `addresses`. Returns the sockets per
/// worker and the bound addresses (port 0 resolved to the port the first socket got,
/// which the others then share).
pub fn bind_listeners(
    addresses: &[SocketAddr],
    workers: usize,
) -> anyhow::Result<(Vec<Vec<TcpListener>>, Vec<SocketAddr>)> {
    let mut listeners: Vec<Vec<TcpListener>> = (0..workers).map(|_| Vec::new()).collect();
    let mut bound = Vec::new();
    for &configured in addresses {
        let mut addr = configured;
        for (index, worker) in listeners.iter_mut().enumerate() {
            let listener = bind_listener(addr)?;
            if index == 0 {
                addr = listener
                    .local_addr()
                    .context("cannot read the bound address")?;
                bound.push(addr);
            }
            worker.push(listener);
        }
    }
    Ok((listeners, bound))
}

/// A listening TCP socket with SO_REUSEPORT and, for IPv6, IPV6_V6ONLY (IPv4
/// clients use the IPv4 socket).
fn bind_listener(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .with_context(|| format!("cannot create a TCP socket for {addr}"))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true).context("cannot set IPV6_V6ONLY")?;
    }
    socket
        .set_reuse_address(true)
        .context("cannot set SO_REUSEADDR")?;
    socket
        .set_reuse_port(true)
        .context("cannot set SO_REUSEPORT")?;
    socket.bind(&addr.into()).with_context(|| {
        let hint = if addr.is_ipv6() {
            " (set network.use_ipv6 = false if this host has no IPv6)"
        } else {
            ""
        };
        format!("cannot bind TCP {addr}{hint}")
    })?;
    socket
        .listen(1024)
        .with_context(|| format!("cannot listen on {addr}"))?;
    Ok(socket.into())
}
