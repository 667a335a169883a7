//! Stateless TLS session tickets: a client that comes back resumes its session from
//! a ticket it holds (one AEAD decryption) instead of a full handshake (a signature
//! and a key exchange), and the tracker keeps nothing per session.
//!
//! Tickets are sealed with AES-256-GCM under a key that every socket worker shares
//! and that rotates every [`ROTATION`]: tickets sealed under the current or the
//! previous key open, so a ticket lives between one and two rotations, and a key
//! stolen from memory opens at most two periods of sessions. Keys are read through an
//! [`ArcSwap`] (no lock on the handshake path); the one that notices a rotation is
//! due makes the new key under a mutex the others skip. Keys are made at random per
//! process: a restart, or another node behind the same balancer, makes clients do a
//! full handshake once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom as _, SystemRandom};
use rustls::server::ProducesTickets;

/// How long a key seals new tickets; it opens them for as long again.
pub(crate) const ROTATION: Duration = Duration::from_secs(6 * 3600);

/// Bytes naming the key a ticket was sealed under.
const KEY_ID_LEN: usize = 4;

/// One sealing key.
struct TicketKey {
    id: [u8; KEY_ID_LEN],
    key: LessSafeKey,
}

impl TicketKey {
    fn random(rng: &SystemRandom) -> Option<Self> {
        let mut id = [0; KEY_ID_LEN];
        let mut bytes = [0; 32];
        rng.fill(&mut id).ok()?;
        rng.fill(&mut bytes).ok()?;
        let key = UnboundKey::new(&AES_256_GCM, &bytes).ok()?;
        Some(Self {
            id,
            key: LessSafeKey::new(key),
        })
    }
}

/// The keys in force.
struct KeySet {
    current: Arc<TicketKey>,
    previous: Option<Arc<TicketKey>>,
    /// When `current` gives way.
    rotate_at: Instant,
}

/// Ticket keys shared by every worker of a tracker (and kept across certificate
/// reloads: a new certificate does not end the sessions clients hold).
pub(crate) struct Tickets {
    keys: ArcSwap<KeySet>,
    rotating: Mutex<()>,
    rotation: Duration,
    rng: SystemRandom,
}

impl std::fmt::Debug for Tickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tickets")
            .field("rotation", &self.rotation)
            .finish_non_exhaustive()
    }
}

impl Tickets {
    /// Fresh keys rotating every [`ROTATION`].
    pub(crate) fn new() -> anyhow::Result<Arc<Self>> {
        Self::rotating_every(ROTATION)
    }

    /// Fresh keys rotating every `rotation` (tests use seconds).
    pub(crate) fn rotating_every(rotation: Duration) -> anyhow::Result<Arc<Self>> {
        let rng = SystemRandom::new();
        let current = TicketKey::random(&rng)
            .ok_or_else(|| anyhow::anyhow!("no randomness for TLS ticket keys"))?;
        Ok(Arc::new(Self {
            keys: ArcSwap::from_pointee(KeySet {
                current: Arc::new(current),
                previous: None,
                rotate_at: Instant::now() + rotation,
            }),
            rotating: Mutex::new(()),
            rotation,
            rng,
        }))
    }

    /// The keys in force, rotated first when it is time.
    fn keys(&self) -> arc_swap::Guard<Arc<KeySet>> {
        let keys = self.keys.load();
        if Instant::now() < keys.rotate_at {
            return keys;
        }
        drop(keys);
        // Whoever holds the lock rotates; the others go on with the keys in force.
        if let Ok(_rotating) = self.rotating.try_lock() {
            let old = self.keys.load_full();
            if Instant::now() >= old.rotate_at
                && let Some(fresh) = TicketKey::random(&self.rng)
            {
                self.keys.store(Arc::new(KeySet {
                    current: Arc::new(fresh),
                    previous: Some(old.current.clone()),
                    rotate_at: Instant::now() + self.rotation,
                }));
            }
        }
        self.keys.load()
    }
}

impl ProducesTickets for Tickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        self.rotation.as_secs().min(u64::from(u32::MAX)) as u32
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let keys = self.keys();
        let mut nonce = [0; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut ticket =
            Vec::with_capacity(KEY_ID_LEN + NONCE_LEN + plain.len() + AES_256_GCM.tag_len());
        ticket.extend_from_slice(&keys.current.id);
        ticket.extend_from_slice(&nonce);
        let mut sealed = plain.to_vec();
        keys.current
            .key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&keys.current.id),
                &mut sealed,
            )
            .ok()?;
        ticket.extend_from_slice(&sealed);
        Some(ticket)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < KEY_ID_LEN + NONCE_LEN + AES_256_GCM.tag_len() {
            return None;
        }
        let (id, rest) = ticket.split_at(KEY_ID_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let keys = self.keys();
        let key = [Some(&keys.current), keys.previous.as_ref()]
            .into_iter()
            .flatten()
            .find(|key| key.id == id)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut plain = sealed.to_vec();
        let len = key
            .key
            .open_in_place(nonce, Aad::from(&key.id), &mut plain)
            .ok()?
            .len();
        plain.truncate(len);
        Some(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_opens_under_its_key_and_the_next_one_only() {
        let tickets = Tickets::rotating_every(Duration::from_millis(50)).unwrap();
        let ticket = tickets.encrypt(b"session state").unwrap();
        assert_ne!(&ticket[KEY_ID_LEN + NONCE_LEN..][..13], b"session state");
        assert_eq!(tickets.decrypt(&ticket).unwrap(), b"session state");
        // Two tickets of the same state differ (fresh nonces).
        assert_ne!(tickets.encrypt(b"session state").unwrap(), ticket);
        // One rotation later it still opens; after two it does not.
        std::thread::sleep(Duration::from_millis(60));
        let newer = tickets.encrypt(b"newer").unwrap();
        assert_ne!(newer[..KEY_ID_LEN], ticket[..KEY_ID_LEN]);
        assert_eq!(tickets.decrypt(&ticket).unwrap(), b"session state");
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(tickets.decrypt(&ticket), None);
        assert_eq!(tickets.decrypt(&newer).unwrap(), b"newer");
    }

    #[test]
    fn forged_and_cut_tickets_do_not_open() {
        let tickets = Tickets::new().unwrap();
        let ticket = tickets.encrypt(b"state").unwrap();
        for cut in 0..ticket.len() {
            assert_eq!(tickets.decrypt(&ticket[..cut]), None, "cut at {cut}");
        }
        for flip in 0..ticket.len() {
            let mut forged = ticket.clone();
            forged[flip] ^= 1;
            assert_eq!(tickets.decrypt(&forged), None, "bit flipped at {flip}");
        }
        // Another process's (or node's) keys open nothing of these.
        let other = Tickets::new().unwrap();
        assert_eq!(other.decrypt(&ticket), None);
        assert_eq!(tickets.lifetime(), 6 * 3600);
    }
}
