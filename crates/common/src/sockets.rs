//! Sockets for socket workers that each have their own (SO_REUSEPORT), bound to the
//! same addresses, so the kernel spreads clients over the workers.

use std::net::{SocketAddr, TcpListener};

use anyhow::Context as _;
use socket2::{Domain, Protocol, Socket, Type};

/// Binds `workers` sockets to each of `addresses` with `bind`. Returns the sockets per
/// worker (in the order of `addresses`) and the bound addresses, one per configured
/// address: port 0 resolved to the port the first socket got, which the others then
/// share.
pub fn bind_per_worker<S>(
    addresses: &[SocketAddr],
    workers: usize,
    mut bind: impl FnMut(SocketAddr) -> anyhow::Result<S>,
    local_addr: impl Fn(&S) -> std::io::Result<SocketAddr>,
) -> anyhow::Result<(Vec<Vec<S>>, Vec<SocketAddr>)> {
    let mut sockets: Vec<Vec<S>> = (0..workers).map(|_| Vec::new()).collect();
    let mut bound = Vec::with_capacity(addresses.len());
    for &configured in addresses {
        let mut addr = configured;
        for (index, worker) in sockets.iter_mut().enumerate() {
            let socket = bind(addr)?;
            if index == 0 {
                addr = local_addr(&socket).context("cannot read the bound address")?;
                bound.push(addr);
            }
            worker.push(socket);
        }
    }
    Ok((sockets, bound))
}

/// Binds `workers` listening TCP sockets to each of `addresses` (see
/// [`bind_per_worker`]).
pub fn bind_listeners(
    addresses: &[SocketAddr],
    workers: usize,
) -> anyhow::Result<(Vec<Vec<TcpListener>>, Vec<SocketAddr>)> {
    bind_per_worker(addresses, workers, bind_listener, TcpListener::local_addr)
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
    socket
        .bind(&addr.into())
        .map_err(|err| bind_failure("TCP", addr, &err))?;
    socket
        .listen(1024)
        .with_context(|| format!("cannot listen on {addr}"))?;
    Ok(socket.into())
}

/// Why binding `addr` failed and what to do, for the start-up error.
pub fn bind_failure(protocol: &str, addr: SocketAddr, err: &std::io::Error) -> anyhow::Error {
    let key = if addr.is_ipv6() {
        "network.address_ipv6"
    } else {
        "network.address_ipv4"
    };
    let fix = match err.raw_os_error() {
        Some(libc::EADDRINUSE) => format!(
            "another process holds the port (`ss -lnp 'sport = :{}'` shows which): stop it, \
             or change {key}",
            addr.port()
        ),
        Some(libc::EACCES) => format!(
            "ports below 1024 need root or CAP_NET_BIND_SERVICE (AmbientCapabilities= in the \
             systemd unit), or change {key}"
        ),
        Some(libc::EADDRNOTAVAIL) => format!("this host has no such address: change {key}"),
        _ if addr.is_ipv6() => "set network.use_ipv6 = false if this host has no IPv6".to_string(),
        _ => format!("check {key}"),
    };
    anyhow::anyhow!("cannot bind {protocol} {addr}: {err}; {fix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port free on both loopback addresses right now.
    fn free_port_on_both() -> Option<u16> {
        for _ in 0..20 {
            let v4 = TcpListener::bind("127.0.0.1:0").ok()?;
            let port = v4.local_addr().ok()?.port();
            if TcpListener::bind(("::1", port)).is_ok() {
                return Some(port);
            }
        }
        None
    }

    #[test]
    fn every_worker_gets_both_families_and_both_addresses_are_reported() {
        let Some(port) = free_port_on_both() else {
            return; // no IPv6 loopback here
        };
        let addresses: Vec<SocketAddr> = vec![
            SocketAddr::from(([127, 0, 0, 1], port)),
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port)),
        ];
        let (sockets, bound) = bind_listeners(&addresses, 3).unwrap();
        assert_eq!(bound, addresses);
        assert_eq!(sockets.len(), 3);
        for worker in &sockets {
            let local: Vec<SocketAddr> = worker.iter().map(|s| s.local_addr().unwrap()).collect();
            assert_eq!(local, addresses);
        }
    }

    #[test]
    fn a_failed_bind_says_what_to_do() {
        let addr: SocketAddr = "127.0.0.1:80".parse().unwrap();
        let in_use = std::io::Error::from_raw_os_error(libc::EADDRINUSE);
        let text = bind_failure("UDP", addr, &in_use).to_string();
        assert!(
            text.contains("sport = :80") && text.contains("network.address_ipv4"),
            "{text}"
        );
        let denied = std::io::Error::from_raw_os_error(libc::EACCES);
        let text = bind_failure("TCP", addr, &denied).to_string();
        assert!(text.contains("CAP_NET_BIND_SERVICE"), "{text}");
    }
}
