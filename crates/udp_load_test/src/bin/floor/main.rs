//! `shoal_udp_floor`: the cheapest BEP 15 responder we know how to write, for
//! benchmarks.
//!
//! One thread and one socket, no state and no checks: it reads every queued request
//! with one `recvmmsg` (up to [`BATCH`], the batch shoal's socket workers read), writes
//! fixed replies into one reused buffer and sends them all with one `sendmmsg`, and
//! sleeps in `poll` only when nothing is queued. So it pays the kernel's per-packet
//! cost and almost nothing else: `tracker CPU per reply − floor CPU per reply` is what a
//! tracker itself adds. Replies have the sizes a tracker's would: an announce reply
//! carries as many peers as the request asks for (up to 30, all 127.0.0.1:6881); a
//! scrape reply has one zeroed entry per info hash.
//!
//! `--one-by-one` answers with one `recvfrom` and one `sendto` per request instead: the
//! floor of the benchmark documents before 2026-11-23, which batching trackers beat.
//!
//! Replies go out unfragmented from an IPv4 socket, with an IP id of zero, as
//! shoal_udp's do (`shoal_sockets::set_dont_fragment`: the kernel then hashes
//! no id per datagram); `--may-fragment` leaves the kernel's default, the floor of the
//! documents before 2026-11-24.
//!
//! `--recv-buffer BYTES` asks for a socket receive buffer of that size (as root, past
//! net.core.rmem_max, the way shoal_udp does) instead of the kernel's default: with the
//! buffer a tracker is configured with, the floor shows what a deep queue itself costs
//! under a load that sends faster than the responder answers.
//!
//! Ways to lower the floor itself, each measured against it (documents/benchmarks/
//! floor-2026-11-23.md, section "Lowering the floor"):
//!
//! - `--batch N`: read up to N datagrams per `recvmmsg` (1 to 1024) instead of 64;
//! - `--busy-poll`: never sleep in `poll`; call `recvmmsg` again at once when nothing
//!   is queued;
//! - `--io-uring`: receive with one multishot `recvmsg` on io_uring into a ring of
//!   provided buffers registered with the kernel, and send each batch's replies as
//!   `sendmsg` entries submitted in the same `io_uring_enter` that waits for the next
//!   requests (module [`uring`]).
//!
//! Usage: `shoal_udp_floor ADDRESS [--one-by-one | --io-uring] [--batch N] [--busy-poll]
//! [--recv-buffer BYTES] [--may-fragment]` (e.g. `127.0.0.1:3001`). It runs until killed.

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd as _;

use shoal_sockets::{MAX_BATCH, RecvBatch, SendBatch};

mod uring;

/// Peers in an announce reply at most.
const MAX_PEERS: usize = 30;
/// Datagrams read per `recvmmsg` unless `--batch` says otherwise: as many as a shoal
/// socket worker reads.
const BATCH: usize = 64;
/// Largest request read (a scrape of 74 info hashes fits).
const SLOT: usize = 1500;

const USAGE: &str = "usage: shoal_udp_floor ADDRESS [--one-by-one | --io-uring] [--batch N] \
                     [--busy-poll] [--recv-buffer BYTES] [--may-fragment]";

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
struct Options {
    address: String,
    mode: Mode,
    batch: usize,
    busy_poll: bool,
    recv_buffer: Option<usize>,
    /// Leave IPv4 replies fragmentable (the kernel's default), hashing an IP id each.
    may_fragment: bool,
}

/// How requests are read and replies sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `recvmmsg` and `sendmmsg`.
    Batched,
    /// `recvfrom` and `sendto`.
    OneByOne,
    /// Multishot `recvmsg` and `sendmsg` entries on io_uring.
    IoUring,
}

fn parse_options(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let address = args.next().ok_or("no address given")?;
    let mut options = Options {
        address,
        mode: Mode::Batched,
        batch: BATCH,
        busy_poll: false,
        recv_buffer: None,
        may_fragment: false,
    };
    let set_mode = |options: &mut Options, mode: Mode| {
        if options.mode != Mode::Batched && options.mode != mode {
            return Err("--one-by-one and --io-uring exclude each other".to_string());
        }
        options.mode = mode;
        Ok(())
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--one-by-one" => set_mode(&mut options, Mode::OneByOne)?,
            "--io-uring" => set_mode(&mut options, Mode::IoUring)?,
            "--busy-poll" => options.busy_poll = true,
            "--may-fragment" => options.may_fragment = true,
            "--batch" => {
                let value = args.next().ok_or("--batch needs a number of datagrams")?;
                options.batch = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_BATCH).contains(n))
                    .ok_or(format!(
                        "--batch {value}: not a number from 1 to {MAX_BATCH}"
                    ))?;
            }
            "--recv-buffer" => {
                let value = args.next().ok_or("--recv-buffer needs a size in bytes")?;
                let bytes = value
                    .parse()
                    .map_err(|_| format!("--recv-buffer {value}: not a size in bytes"))?;
                options.recv_buffer = Some(bytes);
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    if options.busy_poll && options.mode != Mode::Batched {
        return Err("--busy-poll applies to the batched floor only".into());
    }
    Ok(options)
}

fn main() -> std::io::Result<()> {
    let options = match parse_options(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(problem) => {
            eprintln!("{problem}; {USAGE}");
            std::process::exit(2);
        }
    };
    let socket = UdpSocket::bind(&options.address)?;
    if let Some(bytes) = options.recv_buffer {
        shoal_sockets::set_recv_buffer(&socket2::SockRef::from(&socket), bytes);
    }
    if socket.local_addr()?.is_ipv4() && !options.may_fragment {
        // Replies are at most 896 bytes (a scrape of 74 torrents), far below the MTU
        // of the loopback interface benches run on: none is refused unfragmented.
        shoal_sockets::set_dont_fragment(&socket2::SockRef::from(&socket), true)?;
    }
    // io_uring is set up before "listening" is printed, so that where it is not
    // available the floor says so and stops instead of seeming to serve.
    let uring = match options.mode {
        Mode::IoUring => match uring::Server::new(&socket, options.batch) {
            Ok(server) => Some(server),
            Err(err) => {
                eprintln!("shoal_udp_floor: io_uring is not available here: {err}");
                std::process::exit(1);
            }
        },
        _ => None,
    };
    eprintln!(
        "shoal_udp_floor listening on udp://{}",
        socket.local_addr()?
    );
    match (options.mode, uring) {
        (Mode::IoUring, Some(server)) => server.run(),
        (Mode::OneByOne, _) => one_by_one(&socket),
        _ => batched(&socket, options.batch, options.busy_poll),
    }
}

/// Batches of requests in, batches of replies out.
fn batched(socket: &UdpSocket, batch: usize, busy_poll: bool) -> std::io::Result<()> {
    socket.set_nonblocking(true)?;
    let mut recv = RecvBatch::new(batch, SLOT);
    let mut send = SendBatch::new();
    let mut replies = Vec::with_capacity(batch * (20 + 6 * MAX_PEERS));
    let mut sent_to: Vec<(SocketAddr, usize)> = Vec::with_capacity(batch);
    loop {
        match recv.recv(socket) {
            Ok(_) => {}
            Err(err) if err.kind() == ErrorKind::WouldBlock => {
                if !busy_poll {
                    wait_readable(socket);
                }
                continue;
            }
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        }
        replies.clear();
        sent_to.clear();
        for datagram in recv.iter() {
            let Some(client) = datagram.source else {
                continue;
            };
            if write_reply(datagram.bytes, &mut replies) {
                sent_to.push((client, replies.len()));
            }
        }
        let mut start = 0;
        let packets = sent_to.iter().map(|&(client, end)| {
            let packet = &replies[start..end];
            start = end;
            (Some(client), packet)
        });
        // Best effort: what the send buffer cannot take is dropped, like a tracker
        // under overload.
        let _ = send.send(socket, packets);
    }
}

/// One `recvfrom` and one `sendto` per request.
fn one_by_one(socket: &UdpSocket) -> std::io::Result<()> {
    let mut request = [0u8; SLOT];
    let mut reply = Vec::with_capacity(2048);
    loop {
        let (len, client) = socket.recv_from(&mut request)?;
        reply.clear();
        if write_reply(&request[..len], &mut reply) {
            let _ = socket.send_to(&reply, client);
        }
    }
}

/// Appends the reply to `request` to `out`; false when there is none to send.
fn write_reply(request: &[u8], out: &mut Vec<u8>) -> bool {
    let len = request.len();
    if len < 16 {
        return false;
    }
    let action = u32::from_be_bytes([request[8], request[9], request[10], request[11]]);
    out.extend_from_slice(&action.to_be_bytes());
    out.extend_from_slice(&request[12..16]); // transaction id
    match action {
        0 => out.extend_from_slice(&0x5eed_0000_0000_0001u64.to_be_bytes()),
        1 if len >= 98 => {
            out.extend_from_slice(&1800u32.to_be_bytes());
            out.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]); // leechers, seeders
            let wanted = i32::from_be_bytes([request[92], request[93], request[94], request[95]]);
            let peers = if wanted <= 0 {
                MAX_PEERS
            } else {
                (wanted as usize).min(MAX_PEERS)
            };
            for _ in 0..peers {
                out.extend_from_slice(&[127, 0, 0, 1, 0x1a, 0xe1]);
            }
        }
        2 => {
            let entries = (len - 16) / 20;
            out.resize(out.len() + entries * 12, 0);
        }
        _ => {
            out.truncate(out.len() - 8);
            return false;
        }
    }
    true
}

/// Sleeps until the socket has a datagram (or a signal interrupts).
fn wait_readable(socket: &UdpSocket) {
    let mut fd = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    unsafe {
        libc::poll(&raw mut fd, 1, -1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(action: u32, extra: &[u8]) -> Vec<u8> {
        let mut bytes = 0x0417_2710_1980u64.to_be_bytes().to_vec();
        bytes.extend_from_slice(&action.to_be_bytes());
        bytes.extend_from_slice(&7u32.to_be_bytes());
        bytes.extend_from_slice(extra);
        bytes
    }

    fn parse(args: &[&str]) -> Result<Options, String> {
        parse_options(args.iter().map(|arg| arg.to_string()))
    }

    #[test]
    fn options_are_read_in_any_order_and_bad_ones_refused() {
        assert_eq!(
            parse(&["127.0.0.1:1", "--recv-buffer", "8388608", "--one-by-one"]),
            Ok(Options {
                address: "127.0.0.1:1".into(),
                mode: Mode::OneByOne,
                batch: BATCH,
                busy_poll: false,
                recv_buffer: Some(8 << 20),
                may_fragment: false,
            })
        );
        assert_eq!(
            parse(&["127.0.0.1:1"]).map(|o| (o.mode, o.batch, o.busy_poll, o.recv_buffer)),
            Ok((Mode::Batched, 64, false, None))
        );
        assert_eq!(
            parse(&["127.0.0.1:1", "--may-fragment"]).map(|o| o.may_fragment),
            Ok(true)
        );
        assert_eq!(
            parse(&["127.0.0.1:1", "--batch", "256", "--busy-poll"])
                .map(|o| (o.batch, o.busy_poll)),
            Ok((256, true))
        );
        assert_eq!(
            parse(&["127.0.0.1:1", "--io-uring", "--batch", "1024"]).map(|o| (o.mode, o.batch)),
            Ok((Mode::IoUring, 1024))
        );
        assert!(parse(&[]).is_err());
        assert!(parse(&["127.0.0.1:1", "--recv-buffer"]).is_err());
        assert!(parse(&["127.0.0.1:1", "--recv-buffer", "8M"]).is_err());
        assert!(parse(&["127.0.0.1:1", "--fast"]).is_err());
        for batch in ["0", "1025", "many"] {
            assert!(
                parse(&["127.0.0.1:1", "--batch", batch]).is_err(),
                "{batch}"
            );
        }
        assert!(parse(&["127.0.0.1:1", "--one-by-one", "--io-uring"]).is_err());
        assert!(parse(&["127.0.0.1:1", "--io-uring", "--busy-poll"]).is_err());
    }

    #[test]
    fn replies_have_a_trackers_sizes_back_to_back() {
        let mut out = Vec::new();
        assert!(write_reply(&request(0, &[]), &mut out));
        assert_eq!(out.len(), 16);
        assert_eq!(&out[4..8], &7u32.to_be_bytes(), "transaction id echoed");

        // An announce asking for 5 peers, then one asking for the default.
        let mut announce = vec![0u8; 82];
        announce[76..80].copy_from_slice(&5i32.to_be_bytes());
        assert!(write_reply(&request(1, &announce), &mut out));
        assert_eq!(out.len(), 16 + 20 + 5 * 6);
        announce[76..80].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(write_reply(&request(1, &announce), &mut out));
        assert_eq!(out.len(), 16 + 50 + 20 + MAX_PEERS * 6);

        let before = out.len();
        assert!(write_reply(&request(2, &[0; 60]), &mut out));
        assert_eq!(out.len() - before, 8 + 3 * 12, "one entry per info hash");

        // Nothing for what is not a request, and nothing left behind.
        let before = out.len();
        assert!(!write_reply(&request(9, &[]), &mut out));
        assert!(!write_reply(&request(1, &[0; 10]), &mut out));
        assert!(!write_reply(&[1, 2, 3], &mut out));
        assert_eq!(out.len(), before);
    }
}
