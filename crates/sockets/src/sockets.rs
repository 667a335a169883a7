//! Sockets for socket workers that each have their own (SO_REUSEPORT), bound to the
//! same addresses, so the kernel spreads clients over the workers.

use std::net::{SocketAddr, TcpListener};

use anyhow::Context as _;
use socket2::{Domain, Protocol, Socket, Type};

/// Binds `workers` sockets of type `kind` (UDP or TCP) to each of `addresses` with
/// `bind`. Returns the sockets per worker (in the order of `addresses`) and the bound
/// addresses, one per configured address: port 0 resolved, shared by every worker.
///
/// The workers' sockets share their port through SO_REUSEPORT, which would also let a
/// second tracker started by the same user join the group silently (both serving,
/// each a share of the clients) instead of failing on a busy port. So each UDP address
/// is first bound alone, without SO_REUSEPORT (`exclusive_port`): that fails while
/// anything holds the port, and for port 0 it picks a port nobody holds. TCP cannot
/// be probed that way: the connections a just-stopped tracker left in TIME_WAIT make
/// a lone bind fail even with SO_REUSEADDR, which would break every quick restart.
/// [`bind_listeners`] checks the kernel's table of listening sockets instead.
pub fn bind_per_worker<S>(
    addresses: &[SocketAddr],
    workers: usize,
    kind: Type,
    mut bind: impl FnMut(SocketAddr) -> anyhow::Result<S>,
    local_addr: impl Fn(&S) -> std::io::Result<SocketAddr>,
) -> anyhow::Result<(Vec<Vec<S>>, Vec<SocketAddr>)> {
    let mut sockets: Vec<Vec<S>> = (0..workers).map(|_| Vec::new()).collect();
    let mut bound = Vec::with_capacity(addresses.len());
    for &configured in addresses {
        let mut addr = if kind == Type::DGRAM {
            exclusive_port(configured, kind)?
        } else {
            configured
        };
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
/// [`bind_per_worker`]), each queueing up to `backlog` connections not yet accepted,
/// and fails if another process listens on one of the ports too (`foreign_listener`).
pub fn bind_listeners(
    addresses: &[SocketAddr],
    workers: usize,
    backlog: u32,
) -> anyhow::Result<(Vec<Vec<TcpListener>>, Vec<SocketAddr>)> {
    let (sockets, bound) = bind_per_worker(
        addresses,
        workers,
        Type::STREAM,
        |addr| bind_listener(addr, backlog),
        TcpListener::local_addr,
    )?;
    let ours: Vec<u64> = sockets.iter().flatten().filter_map(socket_inode).collect();
    for &addr in &bound {
        if let Some(other) = foreign_listener(addr, &ours) {
            anyhow::bail!(
                "cannot listen on TCP {addr}: another process listens on {other} with \
                 SO_REUSEPORT too (an instance of this tracker still running?), and the \
                 kernel would split the clients between the two; stop it (`ss -ltnp \
                 'sport = :{}'` shows which), or change {}",
                addr.port(),
                address_key(addr)
            );
        }
    }
    Ok((sockets, bound))
}

/// A listening TCP socket that overlaps `addr` (same port; same address, or either
/// one the wildcard) and is none of `ours` (socket inodes), from the kernel's tables
/// (`/proc/net/tcp`, `/proc/net/tcp6`). `None` also when the tables cannot be read:
/// the check is a safeguard, and a system without /proc still runs.
///
/// Only a process of the same user can have joined our SO_REUSEPORT group, which is
/// what this is for; any other would have made our bind fail already.
fn foreign_listener(addr: SocketAddr, ours: &[u64]) -> Option<SocketAddr> {
    let table = if addr.is_ipv6() {
        "/proc/net/tcp6"
    } else {
        "/proc/net/tcp"
    };
    let text = std::fs::read_to_string(table).ok()?;
    text.lines()
        .skip(1)
        .filter_map(parse_listener)
        .find(|&(other, inode)| {
            other.port() == addr.port()
                && (other.ip() == addr.ip()
                    || other.ip().is_unspecified()
                    || addr.ip().is_unspecified())
                && !ours.contains(&inode)
        })
        .map(|(other, _)| other)
}

/// The local address and inode of one line of `/proc/net/tcp{,6}` if it is a
/// listening socket (state 0A). Addresses are hex words in the kernel's byte order.
fn parse_listener(line: &str) -> Option<(SocketAddr, u64)> {
    const LISTEN: &str = "0A";
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.get(3) != Some(&LISTEN) {
        return None;
    }
    let (ip, port) = fields.get(1)?.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let mut bytes = Vec::with_capacity(16);
    for word in (0..ip.len()).step_by(8) {
        let word = u32::from_str_radix(ip.get(word..word + 8)?, 16).ok()?;
        bytes.extend_from_slice(&word.to_ne_bytes());
    }
    let ip = match bytes.len() {
        4 => std::net::IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?),
        16 => std::net::IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?),
        _ => return None,
    };
    let inode = fields.get(9)?.parse().ok()?;
    Some((SocketAddr::new(ip, port), inode))
}

/// The inode the kernel's socket tables list `socket` under.
fn socket_inode(socket: &TcpListener) -> Option<u64> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: `stat` is plain integers, for which all zeros is a valid value.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one `stat` into the value we own; the descriptor stays open
    // for the borrow of `socket`.
    let result = unsafe { libc::fstat(socket.as_raw_fd(), &raw mut stat) };
    (result == 0).then_some(stat.st_ino)
}

/// The config key of an address's family.
fn address_key(addr: SocketAddr) -> &'static str {
    if addr.is_ipv6() {
        "network.address_ipv6"
    } else {
        "network.address_ipv4"
    }
}

/// `addr` with a port nobody holds: binds a socket of type `kind` there without
/// SO_REUSEPORT, notes the port (the kernel's choice for port 0) and lets it go. A
/// port held by anyone, SO_REUSEPORT or not, fails here with the fix.
pub(crate) fn exclusive_port(addr: SocketAddr, kind: Type) -> anyhow::Result<SocketAddr> {
    let protocol = if kind == Type::DGRAM { "UDP" } else { "TCP" };
    let socket = Socket::new(Domain::for_address(addr), kind, None)
        .with_context(|| format!("cannot create a {protocol} socket"))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true).context("cannot set IPV6_V6ONLY")?;
    }
    socket
        .bind(&addr.into())
        .map_err(|err| bind_failure(protocol, addr, &err))?;
    socket
        .local_addr()
        .ok()
        .and_then(|bound| bound.as_socket())
        .context("cannot read the bound address")
}

/// A listening TCP socket with SO_REUSEPORT and, for IPv6, IPV6_V6ONLY (IPv4
/// clients use the IPv4 socket), queueing up to `backlog` connections not yet
/// accepted (the kernel caps it at net.core.somaxconn).
fn bind_listener(addr: SocketAddr, backlog: u32) -> anyhow::Result<TcpListener> {
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
        .listen(i32::try_from(backlog).unwrap_or(i32::MAX))
        .with_context(|| format!("cannot listen on {addr}"))?;
    Ok(socket.into())
}

/// Why binding `addr` failed and what to do, for the start-up error.
pub fn bind_failure(protocol: &str, addr: SocketAddr, err: &std::io::Error) -> anyhow::Error {
    let key = address_key(addr);
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

/// Caps the kernel buffers of every connection `listener` accepts from now on: a
/// connection inherits its listener's sizes, and a size set by hand is not grown by
/// the kernel's autotuning. Without a cap, a client that sends pipelined requests and
/// never reads makes the kernel hold megabytes for it (tcp_wmem's and tcp_rmem's
/// ceilings): 1,000 such clients pinned 2 GB of the host's TCP memory, near the point
/// where all of its TCP stalls. 0 leaves a direction to the kernel.
pub fn cap_connection_buffers(
    listener: &TcpListener,
    send: usize,
    receive: usize,
) -> std::io::Result<()> {
    let socket = socket2::SockRef::from(listener);
    if send > 0 {
        socket.set_send_buffer_size(send)?;
    }
    if receive > 0 {
        socket.set_recv_buffer_size(receive)?;
    }
    Ok(())
}

/// Stops `listener`'s socket listening, whoever else holds a descriptor of it: the
/// port is free again at once, and accepts waiting on it end (EINVAL). On io_uring an
/// accept in flight keeps its listener's socket alive past the descriptor's close
/// until the ring is torn down, so a tracker stopped and started again in one process
/// found its port still taken; `listener` is a duplicate (`try_clone`) kept for this.
pub fn stop_listening(listener: &TcpListener) -> std::io::Result<()> {
    match socket2::SockRef::from(listener).shutdown(std::net::Shutdown::Both) {
        // Linux reports ENOTCONN for a socket that was listening, and stops it all
        // the same.
        Err(err) if err.raw_os_error() == Some(libc::ENOTCONN) => Ok(()),
        other => other,
    }
}

/// Asks for a receive buffer of `size` bytes; with CAP_NET_ADMIN, past
/// net.core.rmem_max. Returns the size granted (what Linux reports, halved: it doubles
/// the request); [`report_recv_buffer`] says what a shortfall means.
pub fn set_recv_buffer(socket: &Socket, size: usize) -> usize {
    if socket.set_recv_buffer_size(size).is_err() {
        log::warn!("cannot set the socket receive buffer to {size} bytes");
    }
    // Linux reports double the usable size it granted.
    let granted = socket.recv_buffer_size().unwrap_or(0) / 2;
    if granted < size {
        force_recv_buffer(socket, size);
        return socket.recv_buffer_size().unwrap_or(0) / 2;
    }
    granted
}

/// Says, once for a tracker's sockets, that the kernel granted `granted` bytes of the
/// `size` configured (net.core.rmem_max caps a process without CAP_NET_ADMIN), and
/// what sets it: the host's sysctl, which the Debian package sets and a container
/// cannot. A warning when the operator asked for `size`; information when `size` is
/// the built-in `default`, since a host's stock ceiling is its normal state and the
/// tracker serves on (check-host and the deployment guide say what it costs).
pub fn report_recv_buffer(what: &str, granted: usize, size: usize, default: usize) {
    if let Some((level, text)) = recv_buffer_report(what, granted, size, default) {
        log::log!(level, "{text}");
    }
}

/// What [`report_recv_buffer`] logs, and at which level; `None` when nothing is short.
fn recv_buffer_report(
    what: &str,
    granted: usize,
    size: usize,
    default: usize,
) -> Option<(log::Level, String)> {
    if granted >= size {
        return None;
    }
    let level = if size == default {
        log::Level::Info
    } else {
        log::Level::Warn
    };
    let text = format!(
        "{what}: the socket receive buffer is {granted} bytes, not the {size} configured, as \
         net.core.rmem_max caps it: bursts past it are dropped. The host sets it (sysctl \
         net.core.rmem_max={size}; the Debian package's /usr/lib/sysctl.d/60-shoal.conf \
         does; a container cannot, its host must)"
    );
    Some((level, text))
}

/// Whether this process may set a receive buffer past net.core.rmem_max (it has
/// CAP_NET_ADMIN). Asks for `size`, the buffer `socket` has now, so a yes changes
/// nothing.
pub fn may_force_recv_buffer(socket: &Socket, size: usize) -> bool {
    force_recv_buffer(socket, size)
}

/// net.core.rmem_max: the largest receive buffer a process without CAP_NET_ADMIN may
/// ask for. `None` when /proc cannot be read (read it before a chroot).
pub fn rmem_max() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/net/core/rmem_max")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// net.core.somaxconn: the kernel's cap on a listener's backlog. `None` when /proc
/// cannot be read.
pub fn somaxconn() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// What the kernel holds for a socket's receive side (`SO_MEMINFO`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiveQueue {
    /// Bytes queued, counted as the kernel charges them (with each datagram's
    /// bookkeeping, about 1 KiB per small datagram).
    pub queued: u32,
    /// The most it may queue, on the same scale (twice the buffer size asked for).
    pub capacity: u32,
    /// Datagrams dropped since the socket was created, mostly because the queue was
    /// full; wraps at 2^32.
    pub drops: u32,
}

/// `SO_MEMINFO` in asm-generic/socket.h, which x86-64 and ARM64 use (libc exports
/// only the offsets into its answer).
const SO_MEMINFO: libc::c_int = 55;

/// Reads what the kernel holds for `socket`'s receive side. Fails on kernels before
/// 4.19 (no drop count in the answer) as well as on errors.
pub fn receive_queue(socket: &impl std::os::fd::AsRawFd) -> std::io::Result<ReceiveQueue> {
    let mut info = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
    let mut len = size_of_val(&info) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes to `info`, which has that many.
    let result = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if result != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if (len as usize) < size_of_val(&info) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "SO_MEMINFO has no drop count on this kernel",
        ));
    }
    Ok(ReceiveQueue {
        queued: info[libc::SK_MEMINFO_RMEM_ALLOC as usize],
        capacity: info[libc::SK_MEMINFO_RCVBUF as usize],
        drops: info[libc::SK_MEMINFO_DROPS as usize],
    })
}

/// SO_RCVBUFFORCE, which root may use to exceed net.core.rmem_max.
fn force_recv_buffer(socket: &Socket, size: usize) -> bool {
    let value = libc::c_int::try_from(size).unwrap_or(libc::c_int::MAX);
    set_int_option(socket, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, value).is_ok()
}

/// Makes an IPv4 UDP socket send its datagrams unfragmented, with an IP id of zero
/// (`IP_MTU_DISCOVER` = `IP_PMTUDISC_DO`), or again as Linux does by default
/// (`IP_PMTUDISC_WANT`) when `on` is false.
///
/// Linux already sets DF on UDP datagrams by default, but keeps the right to
/// fragment them, and so hashes a fresh IP id for every one (`__ip_select_ident`, a
/// SipHash and an atomic on a table every core shares): about 2% of a UDP tracker's
/// CPU under load (documents/benchmarks/floor-2026-11-23.md). A datagram that may not
/// be fragmented needs no id. The cost: one larger than the path MTU is refused with
/// EMSGSIZE instead of sent in fragments, so a sender must retry those with
/// [`send_fragmenting`]. Tracker replies are far below common MTUs at the default
/// limits, so that is rare.
pub fn set_dont_fragment(socket: &Socket, on: bool) -> std::io::Result<()> {
    let mode = if on {
        libc::IP_PMTUDISC_DO
    } else {
        libc::IP_PMTUDISC_WANT
    };
    set_int_option(socket, libc::IPPROTO_IP, libc::IP_MTU_DISCOVER, mode)
}

/// Whether an IPv4 socket sends unfragmented ([`set_dont_fragment`]).
pub fn sends_unfragmented(socket: &Socket) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd as _;
    let mut mode: libc::c_int = -1;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes to a valid int.
    let result = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            (&mut mode as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if result == 0 {
        Ok(mode == libc::IP_PMTUDISC_DO)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Sends `bytes` to `to` from an IPv4 socket set by [`set_dont_fragment`], letting the
/// kernel fragment this one datagram (it was refused with EMSGSIZE unfragmented); the
/// socket is unfragmented again afterwards.
pub fn send_fragmenting(
    socket: &std::net::UdpSocket,
    bytes: &[u8],
    to: SocketAddr,
) -> std::io::Result<usize> {
    let socket = socket2::SockRef::from(socket);
    set_dont_fragment(&socket, false)?;
    let sent = socket.send_to(bytes, &to.into());
    set_dont_fragment(&socket, true)?;
    sent
}

/// Whether a send failed because the datagram is larger than the path MTU and may not
/// be fragmented (see [`set_dont_fragment`]).
pub fn too_big_unfragmented(err: &std::io::Error) -> bool {
    err.raw_os_error() == Some(libc::EMSGSIZE)
}

fn set_int_option(
    socket: &Socket,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: setsockopt reads an int from a valid pointer with the length we pass.
    let result = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_buffer_is_a_warning_only_when_the_operator_chose_its_size() {
        const DEFAULT: usize = 8 << 20;
        assert_eq!(recv_buffer_report("UDP", DEFAULT, DEFAULT, DEFAULT), None);
        assert_eq!(recv_buffer_report("UDP", 32 << 20, DEFAULT, DEFAULT), None);
        let (level, text) = recv_buffer_report("UDP", 212_992, DEFAULT, DEFAULT).unwrap();
        assert_eq!(level, log::Level::Info);
        assert!(text.contains("sysctl net.core.rmem_max=8388608"), "{text}");
        assert!(
            !text.contains("root"),
            "advice the units and images cannot take: {text}"
        );
        let (level, _) = recv_buffer_report("UDP", 212_992, 16 << 20, DEFAULT).unwrap();
        assert_eq!(level, log::Level::Warn);
    }

    #[test]
    fn a_full_receive_queue_counts_its_drops() {
        let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let socket = socket2::SockRef::from(&receiver);
        let granted = set_recv_buffer(&socket, 4096);
        assert!(granted >= 2048, "granted {granted}");
        let before = receive_queue(&receiver).unwrap();
        assert_eq!((before.queued, before.drops), (0, 0));
        assert_eq!(before.capacity as usize, 2 * granted);
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        // Far more than the smallest buffer holds (each datagram is charged about
        // 1 KiB); nothing reads them.
        for _ in 0..200 {
            sender
                .send_to(&[0; 100], receiver.local_addr().unwrap())
                .unwrap();
        }
        let after = receive_queue(&receiver).unwrap();
        assert!(
            after.queued > 0 && after.queued <= after.capacity + 2048,
            "{after:?}"
        );
        assert!(after.drops > 0, "{after:?}");
    }

    #[test]
    fn an_unfragmented_socket_can_still_send_one_datagram_fragmented() {
        let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let sender = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let unfragmented = || sends_unfragmented(&socket2::SockRef::from(&sender)).unwrap();
        assert!(!unfragmented(), "the kernel's default");
        set_dont_fragment(&socket2::SockRef::from(&sender), true).unwrap();
        assert!(unfragmented());

        let to = receiver.local_addr().unwrap();
        sender.send_to(b"unfragmented", to).unwrap();
        let sent = send_fragmenting(&sender, b"may fragment", to).unwrap();
        assert_eq!(sent, 12);
        // Back to unfragmented for every other datagram.
        assert!(unfragmented());
        let mut buf = [0u8; 32];
        for expected in [&b"unfragmented"[..], b"may fragment"] {
            let (len, _) = receiver.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..len], expected);
        }

        assert!(too_big_unfragmented(&std::io::Error::from_raw_os_error(
            libc::EMSGSIZE
        )));
        assert!(!too_big_unfragmented(&std::io::Error::from_raw_os_error(
            libc::ENETUNREACH
        )));
    }

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
        let (sockets, bound) = bind_listeners(&addresses, 3, 1024).unwrap();
        assert_eq!(bound, addresses);
        assert_eq!(sockets.len(), 3);
        for worker in &sockets {
            let local: Vec<SocketAddr> = worker.iter().map(|s| s.local_addr().unwrap()).collect();
            assert_eq!(local, addresses);
        }
    }

    #[test]
    fn a_port_shared_through_so_reuseport_is_busy_for_a_new_tracker() {
        // Another tracker's worker socket: SO_REUSEPORT, same user.
        let reused_udp_port = || {
            let other = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
            other.set_reuse_port(true).unwrap();
            other
                .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
                .unwrap();
            let taken = other.local_addr().unwrap().as_socket().unwrap();
            (other, taken)
        };
        let (_other, taken) = reused_udp_port();
        let err = exclusive_port(taken, Type::DGRAM).unwrap_err().to_string();
        assert!(err.contains("another process holds the port"), "{err}");
        // The same number is free for TCP (another namespace) unless a test
        // running beside this one happens to listen on it: a few fresh ports
        // rule that out without making the check weaker.
        let tcp_free_beside_udp = (0..5).any(|_| {
            let (_other, taken) = reused_udp_port();
            exclusive_port(taken, Type::STREAM).is_ok()
        });
        assert!(tcp_free_beside_udp, "TCP is another namespace");
        // Port 0 resolves to a free port; a listening TCP port is busy.
        let listener = bind_listener(SocketAddr::from(([127, 0, 0, 1], 0)), 1024).unwrap();
        let listening = listener.local_addr().unwrap();
        let err = exclusive_port(listening, Type::STREAM)
            .unwrap_err()
            .to_string();
        assert!(err.contains("another process holds the port"), "{err}");
        let free = exclusive_port(SocketAddr::from(([127, 0, 0, 1], 0)), Type::DGRAM).unwrap();
        assert_ne!(free.port(), 0);
    }

    #[test]
    fn a_listener_queues_the_backlog_it_is_given() {
        let listener = bind_listener(SocketAddr::from(([127, 0, 0, 1], 0)), 77).unwrap();
        let port = listener.local_addr().unwrap().port();
        let output = std::process::Command::new("ss")
            .args(["-ltnH", &format!("sport = :{port}")])
            .output()
            .expect("ss (iproute2) runs");
        let text = String::from_utf8_lossy(&output.stdout);
        // State, Recv-Q (connections waiting), Send-Q (the backlog), local, peer.
        let columns: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(columns.get(2), Some(&"77"), "{text}");
        assert!(somaxconn().is_some_and(|cap| cap >= 128));
    }

    #[test]
    fn a_second_tracker_on_the_same_tcp_port_is_refused_and_a_restart_is_not() {
        // Another tracker's listener: SO_REUSEPORT, same user, so our binds succeed.
        let other = bind_listener(SocketAddr::from(([127, 0, 0, 1], 0)), 1024).unwrap();
        let taken = other.local_addr().unwrap();
        let err = bind_listeners(&[taken], 2, 1024).unwrap_err().to_string();
        assert!(
            err.contains("another process listens on 127.0.0.1:") && err.contains("ss -ltnp"),
            "{err}"
        );
        // On the wildcard address too: it would take the same clients.
        let wildcard = SocketAddr::from(([0, 0, 0, 0], taken.port()));
        assert!(bind_listeners(&[wildcard], 1, 1024).is_err());
        drop(other);

        // A restart: the old listener closed with a connection left in TIME_WAIT.
        let (sockets, bound) = bind_listeners(&[taken], 2, 1024).unwrap();
        let client = std::net::TcpStream::connect(bound[0]).unwrap();
        let accepted = sockets
            .iter()
            .flatten()
            .find_map(|listener| {
                listener.set_nonblocking(true).unwrap();
                (0..200).find_map(|_| match listener.accept() {
                    Ok((stream, _)) => Some(stream),
                    Err(_) => {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                        None
                    }
                })
            })
            .expect("one worker's listener accepts");
        drop(accepted); // the server side closes first: TIME_WAIT on the tracker's port
        drop(client);
        drop(sockets);
        bind_listeners(&[taken], 2, 1024).expect("TIME_WAIT is not a listener");
    }

    #[test]
    fn kernel_table_lines_are_read_in_the_kernels_byte_order() {
        let header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode";
        assert_eq!(parse_listener(header), None);
        let v4 = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0000000000000000 100 0 0 10 0";
        assert_eq!(
            parse_listener(v4),
            Some(("127.0.0.1:8080".parse().unwrap(), 4242))
        );
        let established = v4.replace(" 0A ", " 01 ");
        assert_eq!(parse_listener(&established), None);
        let v6 = "   1: 00000000000000000000000001000000:1A0B 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 77 1 0000000000000000 100 0 0 10 0";
        assert_eq!(
            parse_listener(v6),
            Some(("[::1]:6667".parse().unwrap(), 77))
        );
        assert_eq!(parse_listener("   2: garbage 0A"), None);
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
