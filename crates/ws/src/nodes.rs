//! What WebTorrent nodes of one cluster (`[cluster]`) tell each other, as bytes.
//!
//! **Membership changes** go into the shared stream every node reads, like UDP's and
//! HTTP's, but in a record of WebTorrent's own: a peer is a peer id on a connection of
//! the writing node, not an address.
//!
//! ```text
//! change:  info hash [20] | peer id [20] | seconds left u32 (0: it left)
//!          | flags u8 (1: seeder, 2: counted a download) | worker u16 | connection u64
//! ```
//!
//! **Relayed messages** (offers to a peer on another node, and the answers back) go into
//! that node's inbox, one record each:
//!
//! ```text
//! message: kind u8 (1 offer, 2 answer) | info hash [20]
//!          | to: peer id [20] | worker u16 | connection u64     (a peer of the reader)
//!          | from: peer id [20] | worker u16 | connection u64   (a peer of the writer)
//!          | from is a seeder u8 | offer id [20] | length u32 | session description
//! ```
//!
//! Integers are little-endian. A connection is named as its own node knows it, so a
//! record never names a third node: the writer is the entry's origin. Readers check
//! every length and flag, and a session description must be JSON, bounded like a
//! client's message.

use serde_json::value::RawValue;
use shoal_swarm::RecordError;
use shoal_ws_protocol::{Id20, RawJson};

use crate::messages::ConnectionRef;

/// Bytes of a change record.
pub(crate) const CHANGE_LEN: usize = 20 + 20 + 4 + 1 + 2 + 8;
/// Bytes of a relayed message before its session description.
const MESSAGE_HEAD: usize = 1 + 20 + (20 + 10) + (20 + 10) + 1 + 20 + 4;
/// The largest session description a relayed message may carry (a client's whole
/// message may be at most 16 MiB, `limits.max_message_size`).
const MAX_DESCRIPTION: usize = 16 << 20;

/// One peer's change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) info_hash: Id20,
    pub(crate) peer_id: Id20,
    /// Seconds it has to live; 0: it left.
    pub(crate) left: u32,
    pub(crate) seeder: bool,
    /// Whether this announce counted a download.
    pub(crate) downloaded: bool,
    /// Its connection on the writing node.
    pub(crate) connection: ConnectionRef,
}

impl Change {
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.info_hash.0);
        out.extend_from_slice(&self.peer_id.0);
        out.extend_from_slice(&self.left.to_le_bytes());
        out.push(u8::from(self.seeder) | (u8::from(self.downloaded) << 1));
        write_connection(self.connection, out);
    }

    /// Reads every record of `bytes`; the error says where the damage starts.
    pub(crate) fn read_all(bytes: &[u8]) -> Result<Vec<Change>, RecordError> {
        let mut changes = Vec::with_capacity(bytes.len() / CHANGE_LEN);
        for (index, record) in bytes.chunks(CHANGE_LEN).enumerate() {
            let at = index * CHANGE_LEN;
            if record.len() < CHANGE_LEN {
                return Err(RecordError::Truncated { at });
            }
            let mut reader = Reader { bytes: record };
            let info_hash = reader.id();
            let peer_id = reader.id();
            let left = reader.u32();
            let flags = reader.u8();
            if flags > 3 {
                return Err(RecordError::BadSeederFlag { at: at + 44 });
            }
            changes.push(Change {
                info_hash,
                peer_id,
                left,
                seeder: flags & 1 != 0,
                downloaded: flags & 2 != 0,
                connection: reader.connection(),
            });
        }
        Ok(changes)
    }
}

/// Which message a relayed record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An offer from a peer of the writer to a peer of the reader.
    Offer = 1,
    /// An answer from a peer of the writer to the offer of a peer of the reader.
    Answer = 2,
}

/// A peer on the node that knows its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PeerOn {
    pub(crate) peer_id: Id20,
    pub(crate) connection: ConnectionRef,
}

/// An offer or answer for a peer of another node.
#[derive(Debug)]
pub(crate) struct Relayed {
    pub(crate) kind: Kind,
    pub(crate) info_hash: Id20,
    /// The peer it is for, on the reading node.
    pub(crate) to: PeerOn,
    /// The peer it is from, on the writing node.
    pub(crate) from: PeerOn,
    /// Whether `from` is a seeder (an offer's recipient node counts it).
    pub(crate) seeder: bool,
    pub(crate) offer_id: Id20,
    /// The offer's or answer's session description, as the client sent it.
    pub(crate) description: RawJson,
}

impl Relayed {
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.push(self.kind as u8);
        out.extend_from_slice(&self.info_hash.0);
        for peer in [self.to, self.from] {
            out.extend_from_slice(&peer.peer_id.0);
            write_connection(peer.connection, out);
        }
        out.push(u8::from(self.seeder));
        out.extend_from_slice(&self.offer_id.0);
        let description = self.description.get().as_bytes();
        out.extend_from_slice(&(description.len() as u32).to_le_bytes());
        out.extend_from_slice(description);
    }

    /// Reads every record of `bytes`, or says what is wrong where.
    pub(crate) fn read_all(mut bytes: &[u8]) -> Result<Vec<Relayed>, String> {
        let mut messages = Vec::new();
        let mut at = 0;
        while !bytes.is_empty() {
            if bytes.len() < MESSAGE_HEAD {
                return Err(format!("a relayed message cut short at byte {at}"));
            }
            let mut reader = Reader { bytes };
            let kind = match reader.u8() {
                1 => Kind::Offer,
                2 => Kind::Answer,
                other => return Err(format!("a relayed message of kind {other} at byte {at}")),
            };
            let info_hash = reader.id();
            let to = reader.peer();
            let from = reader.peer();
            let seeder = match reader.u8() {
                0 => false,
                1 => true,
                other => return Err(format!("a seeder flag of {other} at byte {at}")),
            };
            let offer_id = reader.id();
            let length = reader.u32() as usize;
            if length > MAX_DESCRIPTION || reader.bytes.len() < length {
                return Err(format!(
                    "a session description of {length} bytes that does not fit, at byte {at}"
                ));
            }
            let (text, rest) = reader.bytes.split_at(length);
            let description = std::str::from_utf8(text)
                .ok()
                .and_then(|text| RawValue::from_string(text.to_owned()).ok())
                .ok_or_else(|| format!("a session description that is not JSON, at byte {at}"))?;
            messages.push(Relayed {
                kind,
                info_hash,
                to,
                from,
                seeder,
                offer_id,
                description,
            });
            at += bytes.len() - rest.len();
            bytes = rest;
        }
        Ok(messages)
    }
}

fn write_connection(connection: ConnectionRef, out: &mut Vec<u8>) {
    out.extend_from_slice(&connection.worker.to_le_bytes());
    out.extend_from_slice(&connection.id.to_le_bytes());
}

/// Reads fields off the front of bytes whose length was checked.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.bytes.split_at(N);
        self.bytes = rest;
        head.try_into().expect("N bytes")
    }

    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }

    fn id(&mut self) -> Id20 {
        Id20(self.take())
    }

    fn connection(&mut self) -> ConnectionRef {
        ConnectionRef {
            worker: u16::from_le_bytes(self.take()),
            id: u64::from_le_bytes(self.take()),
        }
    }

    fn peer(&mut self) -> PeerOn {
        PeerOn {
            peer_id: self.id(),
            connection: self.connection(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection(worker: u16, id: u64) -> ConnectionRef {
        ConnectionRef { worker, id }
    }

    #[test]
    fn changes_read_back_and_damage_is_located() {
        let change = Change {
            info_hash: Id20([1; 20]),
            peer_id: Id20([2; 20]),
            left: 300,
            seeder: true,
            downloaded: true,
            connection: connection(3, u64::MAX - 4),
        };
        let gone = Change {
            left: 0,
            seeder: false,
            downloaded: false,
            ..change
        };
        let mut bytes = Vec::new();
        change.write(&mut bytes);
        gone.write(&mut bytes);
        assert_eq!(bytes.len(), 2 * CHANGE_LEN);
        assert_eq!(Change::read_all(&bytes).unwrap(), vec![change, gone]);
        assert_eq!(
            Change::read_all(&bytes[..CHANGE_LEN + 7]),
            Err(RecordError::Truncated { at: CHANGE_LEN })
        );
        bytes[44] = 9;
        assert_eq!(
            Change::read_all(&bytes),
            Err(RecordError::BadSeederFlag { at: 44 })
        );
        assert_eq!(Change::read_all(&[]), Ok(Vec::new()));
    }

    fn offer(description: &str) -> Relayed {
        Relayed {
            kind: Kind::Offer,
            info_hash: Id20([7; 20]),
            to: PeerOn {
                peer_id: Id20([8; 20]),
                connection: connection(1, 42),
            },
            from: PeerOn {
                peer_id: Id20([9; 20]),
                connection: connection(0, 7),
            },
            seeder: true,
            offer_id: Id20([10; 20]),
            description: RawValue::from_string(description.into()).unwrap(),
        }
    }

    #[test]
    fn relayed_messages_read_back_and_every_fault_is_refused() {
        let mut bytes = Vec::new();
        offer(r#"{"type":"offer","sdp":"v=0"}"#).write(&mut bytes);
        let mut answer = offer(r#"{"type":"answer","sdp":"x"}"#);
        answer.kind = Kind::Answer;
        answer.seeder = false;
        answer.write(&mut bytes);
        let read = Relayed::read_all(&bytes).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[0].kind, Kind::Offer);
        assert_eq!(read[0].to.connection, connection(1, 42));
        assert_eq!(read[0].from.peer_id, Id20([9; 20]));
        assert!(read[0].seeder);
        assert_eq!(read[0].description.get(), r#"{"type":"offer","sdp":"v=0"}"#);
        assert_eq!(read[1].kind, Kind::Answer);
        assert_eq!(read[1].description.get(), r#"{"type":"answer","sdp":"x"}"#);

        let one = {
            let mut one = Vec::new();
            offer(r#"{"a":1}"#).write(&mut one);
            one
        };
        for cut in [1, MESSAGE_HEAD - 1, MESSAGE_HEAD, one.len() - 1] {
            assert!(Relayed::read_all(&one[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_kind = one.clone();
        bad_kind[0] = 3;
        assert!(Relayed::read_all(&bad_kind).unwrap_err().contains("kind 3"));
        let mut bad_flag = one.clone();
        bad_flag[1 + 20 + 30 + 30] = 2;
        assert!(Relayed::read_all(&bad_flag).unwrap_err().contains("seeder"));
        let mut not_json = one.clone();
        let last = not_json.len() - 1;
        not_json[last] = b'x';
        assert!(Relayed::read_all(&not_json).unwrap_err().contains("JSON"));
        let mut huge = one.clone();
        huge[MESSAGE_HEAD - 4..MESSAGE_HEAD].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            Relayed::read_all(&huge)
                .unwrap_err()
                .contains("does not fit")
        );
        assert!(Relayed::read_all(&[]).unwrap().is_empty());
    }
}
