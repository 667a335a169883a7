//! `shoal_udp_floor`: the cheapest possible BEP 15 responder, for benchmarks.
//!
//! One thread, one blocking socket, one `recvfrom` and one `sendto` per request, fixed
//! replies, no state, no checks. No tracker built on plain sockets can use less CPU per
//! reply, so `tracker CPU per reply − floor CPU per reply` is what the tracker itself
//! costs. Replies have the sizes a tracker's would: an announce reply carries as many
//! peers as the request asks for (up to 30, all 127.0.0.1:6881); a scrape reply has one
//! zeroed entry per info hash.
//!
//! Usage: `shoal_udp_floor ADDRESS` (e.g. `127.0.0.1:3001`). It runs until killed.

use std::net::UdpSocket;

const MAX_PEERS: usize = 30;

fn main() -> std::io::Result<()> {
    let Some(address) = std::env::args().nth(1) else {
        eprintln!("usage: shoal_udp_floor ADDRESS");
        std::process::exit(2);
    };
    let socket = UdpSocket::bind(&address)?;
    eprintln!(
        "shoal_udp_floor listening on udp://{}",
        socket.local_addr()?
    );
    let mut request = [0u8; 2048];
    let mut reply = Vec::with_capacity(2048);
    loop {
        let (len, client) = socket.recv_from(&mut request)?;
        if len < 16 {
            continue;
        }
        reply.clear();
        let action = u32::from_be_bytes([request[8], request[9], request[10], request[11]]);
        reply.extend_from_slice(&action.to_be_bytes());
        reply.extend_from_slice(&request[12..16]); // transaction id
        match action {
            0 => reply.extend_from_slice(&0x5eed_0000_0000_0001u64.to_be_bytes()),
            1 if len >= 98 => {
                reply.extend_from_slice(&1800u32.to_be_bytes());
                reply.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]); // leechers, seeders
                let wanted =
                    i32::from_be_bytes([request[92], request[93], request[94], request[95]]);
                let peers = if wanted <= 0 {
                    MAX_PEERS
                } else {
                    (wanted as usize).min(MAX_PEERS)
                };
                for _ in 0..peers {
                    reply.extend_from_slice(&[127, 0, 0, 1, 0x1a, 0xe1]);
                }
            }
            2 => reply.resize(8 + (len - 16) / 20 * 12, 0),
            _ => continue,
        }
        // Best effort: a full send buffer drops the reply, like a tracker under overload.
        let _ = socket.send_to(&reply, client);
    }
}
