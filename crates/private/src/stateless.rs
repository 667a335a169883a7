//! Stateless passkeys: a key the site derives from a user id, a key version and a
//! secret it shares with the tracker, so that a new user needs no sync at all.
//!
//! `key = <user id>-<version>-<mac>`, where `mac` is the first 16 bytes, as 32
//! lowercase hex digits, of HMAC-SHA256(secret, "shoal passkey 1" 0x00 user id (4 bytes,
//! big-endian) version (2 bytes, big-endian)). The tracker checks the MAC (in
//! constant time) and knows the user without a registry entry; the site registers a
//! user only to restrict them (disabled, seeding only, a peer cap) or to retire old
//! keys (`min_key_version`). Keys of users in the users file work as before.
//!
//! The secret is process-wide ([`set_secret`], once at start): a key names a user, not
//! a tracker, and the trackers of one process share one users table. Its bytes are
//! those of `private.key_secret_path` with trailing whitespace taken off
//! ([`secret_of_file`]): `openssl rand -hex 32 > key.secret` writes 64 hex digits
//! and a newline, and the secret is the 64 digits, as the site reads them with
//! `.rstrip()`. [`fingerprint_hex`] is what the tracker logs of it at start, for a site
//! to compare with its own.

use std::sync::OnceLock;

use ring::hmac;

/// The secret and the HMAC key made of it.
struct Secret {
    key: hmac::Key,
    /// A digest of the secret, to tell a second tracker's secret from the first's.
    fingerprint: [u8; 32],
}

static SECRET: OnceLock<Secret> = OnceLock::new();

/// The shortest secret accepted, in bytes.
pub const MIN_SECRET: usize = 32;

/// The secret a secret file holds: its bytes with trailing whitespace (a newline)
/// taken off. The one definition the tracker uses and documents/private.md states.
pub fn secret_of_file(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii_end()
}

/// The secret's fingerprint as logged at start: the first 8 hex digits of the
/// SHA-256 of the secret's bytes (a site compares it with its own; it tells nothing
/// usable about the secret).
pub fn fingerprint_hex(secret: &[u8]) -> String {
    hex(&fingerprint(secret)[..4])
}

/// Makes `secret` the process's; a second call with the same secret is fine, with
/// another it is an error (two trackers of one process must share one).
pub fn set_secret(secret: &[u8]) -> Result<(), &'static str> {
    if secret.len() < MIN_SECRET {
        return Err("the key secret must be at least 32 bytes");
    }
    let fingerprint = fingerprint(secret);
    let set = SECRET.get_or_init(|| Secret {
        key: hmac::Key::new(hmac::HMAC_SHA256, secret),
        fingerprint,
    });
    if set.fingerprint == fingerprint {
        Ok(())
    } else {
        Err("the trackers of one process must share one key secret")
    }
}

fn fingerprint(secret: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret);
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// The key of `user` at `version` under `secret`: what a site hands out.
pub fn derive_key(secret: &[u8], user: u32, version: u16) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret);
    format!("{user}-{version}-{}", hex(&mac(&key, user, version)))
}

fn mac(key: &hmac::Key, user: u32, version: u16) -> [u8; 16] {
    let mut message = [0u8; 22];
    message[..16].copy_from_slice(b"shoal passkey 1\0");
    message[16..20].copy_from_slice(&user.to_be_bytes());
    message[20..].copy_from_slice(&version.to_be_bytes());
    let tag = hmac::sign(key, &message);
    let mut out = [0u8; 16];
    out.copy_from_slice(&tag.as_ref()[..16]);
    out
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(32), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// The user and version `key` was derived for, if it has the form of a derived key
/// and its MAC is right under the process's secret; `None` without a secret.
pub(crate) fn verify(key: &[u8]) -> Option<(u32, u16)> {
    let secret = SECRET.get()?;
    let text = std::str::from_utf8(key).ok()?;
    let mut parts = text.splitn(3, '-');
    // One written form per key: no sign, no leading zero, a lower-case MAC (other
    // spellings of the same user and version would be other keys to refuse apart).
    let user = crate::registry::canonical_number(parts.next()?)?;
    let version = u16::try_from(crate::registry::canonical_number(parts.next()?)?).ok()?;
    let given = parts.next()?;
    if given.len() != 32 {
        return None;
    }
    let mut tag = [0u8; 16];
    for (out, pair) in tag.iter_mut().zip(given.as_bytes().chunks(2)) {
        let digit = |b: u8| match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            _ => None,
        };
        *out = digit(pair[0])? * 16 + digit(pair[1])?;
    }
    // Compared in constant time: how much of a guess matched must not show.
    let expected = mac(&secret.key, user, version);
    let same = expected
        .iter()
        .zip(&tag)
        .fold(0u8, |diff, (a, b)| diff | (a ^ b))
        == 0;
    same.then_some((user, version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_file_s_newline_is_not_the_secret_s() {
        assert_eq!(secret_of_file(b"abcd\n"), b"abcd");
        assert_eq!(secret_of_file(b"abcd \r\n\n"), b"abcd");
        assert_eq!(secret_of_file(b" ab cd"), b" ab cd");
        // sha256("abc") = ba7816bf...
        assert_eq!(fingerprint_hex(b"abc"), "ba7816bf");
    }

    #[test]
    fn keys_match_the_documented_recipe() {
        // documents/private.md's Python recipe, run on the same inputs.
        assert_eq!(
            derive_key(b"0123456789abcdef0123456789abcdef", 42, 1),
            "42-1-cbd08a8ce91685077e63a73b298da097"
        );
    }
}
