//! Passkeys: where a client's announce carries one, and how it is held.
//!
//! A site gives each user an announce URL with a key in it. Clients send that URL as
//! they were given it, so the key comes in one of the forms sites use:
//!
//! * a path segment before the tracker path: `/<key>/announce` (Gazelle, Ocelot,
//!   UNIT3D) or after it: `/announce/<key>` (XBT-style);
//! * a query parameter: `/announce?passkey=<key>` (the parameter name is configured).
//!
//! Over UDP the same path and query arrive as BEP 41 URL data, which libtorrent
//! (qBittorrent, Deluge) sends with every announce; over WebTorrent they are the path
//! of the WebSocket upgrade.
//!
//! The key is never kept: [`KeyDigest`] is a 128-bit keyed hash of it (two SipHash-1-3
//! values of the key, tagged 0 and 1, under a random key chosen at start). Lookups compare digests, so a log line,
//! a core dump or a snapshot holds no key, and no one who does not know the process's
//! random keys can make two keys collide.

use std::hash::{BuildHasher as _, RandomState};
use std::sync::OnceLock;

/// The longest key accepted, in bytes. Sites use 32 (Gazelle, UNIT3D) or 40
/// characters; anything far longer is not a key.
pub const MAX_KEY_LEN: usize = 128;

/// The shortest key accepted: shorter ones are guessable (and would show whole in
/// the four characters a log may name).
pub const MIN_KEY_LEN: usize = 16;

/// A key as it arrives: [`MIN_KEY_LEN`] to [`MAX_KEY_LEN`] characters of
/// `A-Z a-z 0-9 - _`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Passkey<'a>(&'a [u8]);

impl<'a> Passkey<'a> {
    /// `bytes` as a key, if it has the form of one.
    pub fn new(bytes: &'a [u8]) -> Option<Self> {
        let allowed = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_';
        ((MIN_KEY_LEN..=MAX_KEY_LEN).contains(&bytes.len()) && bytes.iter().all(allowed))
            .then_some(Self(bytes))
    }

    /// Its digest, what the registry is keyed by: for a stateless key whose MAC is
    /// right (`stateless`), its user and version; for any other, a keyed hash.
    pub fn digest(self) -> KeyDigest {
        match crate::stateless::verify(self.0) {
            Some((user, version)) => KeyDigest::derived(user, version),
            None => KeyDigest::of(self.0),
        }
    }

    /// The first four characters and the length, for logs: enough to tell two keys
    /// apart when helping a user, never enough to use one.
    pub fn redacted(self) -> String {
        let shown = &self.0[..self.0.len().min(4)];
        format!(
            "{}… ({} characters)",
            String::from_utf8_lossy(shown),
            self.0.len()
        )
    }
}

impl std::fmt::Debug for Passkey<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Passkey({})", self.redacted())
    }
}

/// A 128-bit keyed digest of a passkey.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyDigest([u64; 2]);

/// A digest is already a keyed hash of its key: tables use it as their hash
/// (`DigestHasher`) instead of hashing it again. The second word is mixed in for the
/// digests of stateless keys, whose first word is the same for every user.
impl std::hash::Hash for KeyDigest {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.0[0] ^ self.0[1].wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
}

/// The first word of a stateless key's digest (`stateless`): "STATELES".
const STATELESS: u64 = 0x5354_4154_454c_4553;

/// The hasher of tables keyed by [`KeyDigest`]: the digest's first word, as it is.
/// Safe only for keys that are outputs of a secret-keyed hash, as digests are (no
/// one can choose keys whose digests collide in a table).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DigestHasher(u64);

impl std::hash::Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = word;
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used by `KeyDigest`; anything else is folded in.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }
}

impl KeyDigest {
    /// The digest of a verified stateless key of `user` at `version`.
    pub(crate) fn derived(user: u32, version: u16) -> Self {
        Self([STATELESS, u64::from(version) << 32 | u64::from(user)])
    }

    /// The user and version of a stateless key's digest.
    pub(crate) fn stateless(self) -> Option<(u32, u16)> {
        (self.0[0] == STATELESS).then_some((self.0[1] as u32, (self.0[1] >> 32) as u16))
    }

    /// The digest of any secret (the admin API's token too): two digests are equal
    /// when their secrets are, and comparing them tells a timing observer nothing
    /// about either secret, which no one outside the process can hash.
    pub fn of_secret(secret: &[u8]) -> Self {
        Self::of(secret)
    }

    fn of(key: &[u8]) -> Self {
        static STATE: OnceLock<RandomState> = OnceLock::new();
        let state = STATE.get_or_init(RandomState::new);
        Self([state.hash_one((0u8, key)), state.hash_one((1u8, key))])
    }
}

/// What the tracker's URL looked like, for finding the key in it.
#[derive(Clone, Copy, Debug)]
pub struct KeyPlaces<'a> {
    /// The configured paths a key may stand before or after (`/announce`, `/scrape`).
    pub paths: &'a [&'a str],
    /// The query parameter that may carry the key (`passkey`).
    pub parameter: &'a str,
    /// Whether a path of one segment that is none of `paths` is the key itself
    /// (`udp://tracker:6969/<key>`, `wss://tracker/<key>`): UDP and WebTorrent have
    /// no paths to route on, and sites hand out such URLs.
    pub bare: bool,
}

/// A request target split by where its key was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Located<'a> {
    /// The tracker path with the key taken out (`/announce`), to route on.
    pub path: &'a [u8],
    /// The key, if the target carried one of the right form.
    pub key: Option<Passkey<'a>>,
    /// The query, unchanged (the key parameter is ignored by the request parser).
    pub query: &'a [u8],
}

impl KeyPlaces<'_> {
    /// Finds the key in `target` (`/path?query`, as a request line or BEP 41 URL data
    /// has it): `/<key>/announce`, `/announce/<key>` or `?<parameter>=<key>`. A target
    /// of none of those forms comes back as it was, without a key.
    pub fn locate<'t>(&self, target: &'t [u8]) -> Located<'t> {
        let (path, query) = match target.iter().position(|&b| b == b'?') {
            Some(q) => (&target[..q], &target[q + 1..]),
            None => (target, &target[target.len()..]),
        };
        let from_query = query_value(query, self.parameter.as_bytes()).and_then(Passkey::new);
        for &known in self.paths {
            let known = known.as_bytes();
            // `/<key>/announce`
            if let Some(before) = path.strip_suffix(known)
                && let Some(key) = before.strip_prefix(b"/")
                && let Some(key) = Passkey::new(key)
            {
                return Located {
                    path: &path[before.len()..],
                    key: Some(key),
                    query,
                };
            }
            // `/announce/<key>`
            if let Some(after) = path.strip_prefix(known)
                && let Some(key) = after.strip_prefix(b"/")
                && let Some(key) = Passkey::new(key)
            {
                return Located {
                    path: &path[..known.len()],
                    key: Some(key),
                    query,
                };
            }
        }
        if self.bare
            && from_query.is_none()
            && !self.paths.iter().any(|known| path == known.as_bytes())
            && let Some(key) = path.strip_prefix(b"/").and_then(Passkey::new)
        {
            return Located {
                path: &path[..0],
                key: Some(key),
                query,
            };
        }
        Located {
            path,
            key: from_query,
            query,
        }
    }
}

/// The raw value of `name` in a query string; keys are URL-safe, so a value that
/// needed percent-encoding is not a key and comes back as it is (and fails
/// [`Passkey::new`]).
fn query_value<'q>(query: &'q [u8], name: &[u8]) -> Option<&'q [u8]> {
    query.split(|&b| b == b'&').find_map(|pair| {
        let (key, value) = match pair.iter().position(|&b| b == b'=') {
            Some(eq) => (&pair[..eq], &pair[eq + 1..]),
            None => (pair, &pair[pair.len()..]),
        };
        (key == name).then_some(value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLACES: KeyPlaces<'static> = KeyPlaces {
        paths: &["/announce", "/scrape"],
        parameter: "passkey",
        bare: false,
    };
    const KEY: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";

    fn located(target: &str) -> (String, Option<String>) {
        let found = PLACES.locate(target.as_bytes());
        (
            String::from_utf8(found.path.to_vec()).unwrap(),
            found
                .key
                .map(|key| String::from_utf8(key.0.to_vec()).unwrap()),
        )
    }

    #[test]
    fn keys_are_found_where_sites_put_them() {
        let key = Some(KEY.to_owned());
        assert_eq!(
            located(&format!("/{KEY}/announce?info_hash=x")),
            ("/announce".into(), key.clone())
        );
        assert_eq!(
            located(&format!("/announce/{KEY}?info_hash=x")),
            ("/announce".into(), key.clone())
        );
        assert_eq!(
            located(&format!("/announce?info_hash=x&passkey={KEY}&port=1")),
            ("/announce".into(), key.clone())
        );
        assert_eq!(located(&format!("/{KEY}/scrape")), ("/scrape".into(), key));
        assert_eq!(located("/announce?info_hash=x"), ("/announce".into(), None));
    }

    #[test]
    fn a_bare_path_is_the_key_where_urls_have_no_route() {
        let bare = KeyPlaces {
            paths: &["/announce"],
            parameter: "passkey",
            bare: true,
        };
        let key = |target: &str| {
            bare.locate(target.as_bytes())
                .key
                .map(|key| String::from_utf8(key.0.to_vec()).unwrap())
        };
        assert_eq!(key(&format!("/{KEY}")).as_deref(), Some(KEY));
        assert_eq!(key(&format!("/{KEY}/announce")).as_deref(), Some(KEY));
        assert_eq!(key("/announce"), None);
        assert_eq!(key(""), None);
        // Not bare: the same path is routed, not a key.
        assert_eq!(located(&format!("/{KEY}")).1, None);
    }

    #[test]
    fn what_is_not_a_key_is_left_alone() {
        // A path that is neither form routes as it is (and is not found).
        assert_eq!(located("/a/b/announce"), ("/a/b/announce".into(), None));
        assert_eq!(located("/announce/"), ("/announce/".into(), None));
        // Characters no site puts in a key.
        assert_eq!(
            located("/announce?passkey=a%20b"),
            ("/announce".into(), None)
        );
        assert!(Passkey::new(&[b'a'; MAX_KEY_LEN]).is_some());
        assert!(Passkey::new(&[b'a'; MAX_KEY_LEN + 1]).is_none());
        assert!(Passkey::new(&[b'a'; MIN_KEY_LEN]).is_some());
        assert!(Passkey::new(&[b'a'; MIN_KEY_LEN - 1]).is_none());
        assert!(Passkey::new(b"").is_none());
    }

    #[test]
    fn digests_tell_keys_apart_and_logs_never_show_one() {
        let a = Passkey::new(KEY.as_bytes()).unwrap();
        let b = Passkey::new(b"6f0d1b2c3d4e5f60718293a4b5c6d7e9").unwrap();
        assert_eq!(a.digest(), Passkey::new(KEY.as_bytes()).unwrap().digest());
        assert_ne!(a.digest(), b.digest());
        assert_eq!(a.redacted(), "6f0d… (32 characters)");
        assert!(!format!("{a:?}").contains(KEY));
    }
}
