//! 20-byte ids as WebTorrent sends them.
//!
//! The JavaScript client turns each byte of an info hash, peer id or offer id into the
//! character with that code (`String.fromCharCode`), so an id is a JSON string of
//! exactly 20 characters, each U+0000..=U+00FF. On the wire those characters are UTF-8
//! (bytes 0x80..=0xFF take two bytes) or JSON escapes (`\u0000`); both are read here.
//! A string with a character above U+00FF, or not 20 characters long, is not an id.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a string is not an id.
pub(crate) const INVALID_ID: &str = "an id must be 20 characters, each U+0000 to U+00FF";

/// An info hash, peer id or offer id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Id20(pub [u8; 20]);

impl Id20 {
    /// Reads an id from its character form; `None` unless it is 20 characters,
    /// each at most U+00FF.
    pub fn from_chars(text: &str) -> Option<Self> {
        let mut bytes = [0u8; 20];
        let mut chars = text.chars();
        for byte in &mut bytes {
            *byte = u8::try_from(u32::from(chars.next()?)).ok()?;
        }
        chars.next().is_none().then_some(Self(bytes))
    }

    /// The character form (one char per byte).
    pub fn to_chars(&self) -> String {
        self.0.iter().map(|&byte| char::from(byte)).collect()
    }
}

impl fmt::Debug for Id20 {
    /// Hex, as operators read info hashes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Id20 {
    /// The character form, written without allocating.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write as _;
        for &byte in &self.0 {
            f.write_char(char::from(byte))?;
        }
        Ok(())
    }
}

impl Serialize for Id20 {
    /// The character form as UTF-8 in a stack buffer (at most two bytes per
    /// character), written in one call: ids are in every message, so this is hot.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut utf8 = [0u8; 40];
        let mut len = 0;
        for &byte in &self.0 {
            len += char::from(byte).encode_utf8(&mut utf8[len..]).len();
        }
        let text = std::str::from_utf8(&utf8[..len]).expect("encode_utf8 writes UTF-8");
        serializer.serialize_str(text)
    }
}

impl<'de> Deserialize<'de> for Id20 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IdVisitor;
        impl Visitor<'_> for IdVisitor {
            type Value = Id20;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string of 20 characters, each U+0000 to U+00FF")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Id20, E> {
                Id20::from_chars(text)
                    .ok_or_else(|| E::custom("an id must be 20 characters, each U+0000 to U+00FF"))
            }
        }
        deserializer.deserialize_str(IdVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_value_round_trips_through_json() {
        for start in (0..=255u8).step_by(20) {
            let mut bytes = [0u8; 20];
            for (i, byte) in bytes.iter_mut().enumerate() {
                *byte = start.wrapping_add(i as u8);
            }
            let id = Id20(bytes);
            let json = serde_json::to_string(&id).unwrap();
            assert_eq!(serde_json::from_str::<Id20>(&json).unwrap(), id, "{json}");
        }
    }

    #[test]
    fn escapes_and_utf8_both_read() {
        // Control characters must be escaped in JSON (JSON.stringify does);
        // others may come raw as UTF-8.
        let escaped = format!("\"\\u0000\\u00ff{}\"", "a".repeat(18));
        let raw = format!("\"\\u0000\u{ff}{}\"", "a".repeat(18));
        let expected = {
            let mut bytes = [b'a'; 20];
            bytes[0] = 0;
            bytes[1] = 0xff;
            Id20(bytes)
        };
        assert_eq!(serde_json::from_str::<Id20>(&escaped).unwrap(), expected);
        assert_eq!(serde_json::from_str::<Id20>(&raw).unwrap(), expected);
    }

    #[test]
    fn wrong_lengths_and_wide_characters_are_refused() {
        assert!(Id20::from_chars(&"a".repeat(19)).is_none());
        assert!(Id20::from_chars(&"a".repeat(21)).is_none());
        assert!(Id20::from_chars(&format!("{}\u{100}", "a".repeat(19))).is_none());
        // 20 characters but 40 bytes of UTF-8 is fine.
        assert!(Id20::from_chars(&"\u{e9}".repeat(20)).is_some());
    }
}
