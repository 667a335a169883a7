//! TLS from rustls's client through the server's own stream (rustls's unbuffered
//! connection, `shoal_tcp`'s tls_stream), with any read sizes, a socket that takes
//! little at a time, key updates, altered records, bytes that are not TLS and closes
//! on either side; or records sealed by hand under the client's keys (handshake
//! messages split and padded, which rustls's client never sends). See the rig in
//! `shoal_tcp` for the format. No panic or loop, every byte arrives once and in
//! order, no plaintext the client did not send, the stream keeps at most a record and
//! a read.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shoal_tcp::fuzzing::tls_stream(data));
