//! TLS-ALPN-01 (RFC 8737): the CA connects to the name's port 443 offering only the
//! `acme-tls/1` protocol, and must be shown a self-signed certificate for the name
//! carrying the SHA-256 of the challenge's key authorization. The tracker's own TLS
//! port answers it: while an order waits for validation, its certificates sit here
//! and the tracker's certificate resolver hands them to clients asking for
//! `acme-tls/1`; such connections are closed after the handshake.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

/// The ALPN protocol of TLS-ALPN-01 validation.
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// The validation certificates of the challenges under way, by name. Read only by
/// handshakes that offer `acme-tls/1`, so the lock is never on the way of clients.
#[derive(Debug, Default)]
pub struct AlpnChallenges {
    by_name: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl AlpnChallenges {
    /// A new, empty set, to share between the ACME thread and the TLS config.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// The validation certificate for `name` (the client's SNI), if its challenge is
    /// under way.
    pub fn get(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let by_name = self.by_name.lock().expect("ACME challenges lock");
        by_name.get(&name.to_ascii_lowercase()).cloned()
    }

    /// Makes and keeps the validation certificate of `name` for a key authorization
    /// whose SHA-256 is `digest`.
    pub(crate) fn insert(&self, name: &str, digest: &[u8]) -> anyhow::Result<()> {
        let certificate = validation_certificate(name, digest)?;
        let mut by_name = self.by_name.lock().expect("ACME challenges lock");
        by_name.insert(name.to_ascii_lowercase(), certificate);
        Ok(())
    }

    /// Forgets every challenge (an order finished, well or not).
    pub(crate) fn clear(&self) {
        self.by_name.lock().expect("ACME challenges lock").clear();
    }
}

/// A self-signed certificate for `name` with the critical acmeIdentifier extension
/// holding `digest`, under a fresh P-256 key.
fn validation_certificate(name: &str, digest: &[u8]) -> anyhow::Result<Arc<CertifiedKey>> {
    let key = rcgen::KeyPair::generate().context("cannot make a key")?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_owned()])
        .with_context(|| format!("{name} is not a certificate name"))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .custom_extensions
        .push(rcgen::CustomExtension::new_acme_identifier(digest));
    let certificate = params
        .self_signed(&key)
        .context("cannot sign the validation certificate")?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signing = rustls::crypto::ring::sign::any_supported_type(&key)
        .context("rustls cannot sign with the validation key")?;
    Ok(Arc::new(CertifiedKey::new(
        vec![CertificateDer::from(certificate.der().to_vec())],
        signing,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_found_by_name_until_cleared() {
        let challenges = AlpnChallenges::new();
        challenges.insert("Tracker.Example", &[7; 32]).unwrap();
        let found = challenges.get("tracker.example").expect("case-insensitive");
        // The certificate carries the digest in the acmeIdentifier extension
        // (OID 1.3.6.1.5.5.7.1.31): DER 06 08 2b 06 01 05 05 07 01 1f, then
        // critical TRUE, then an OCTET STRING holding an OCTET STRING of 32 bytes.
        let der = found.cert[0].as_ref();
        let oid = [0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x1f];
        let at = der
            .windows(oid.len())
            .position(|w| w == oid)
            .expect("the extension");
        let after = &der[at + oid.len()..];
        assert_eq!(&after[..3], &[0x01, 0x01, 0xff], "critical");
        assert_eq!(&after[3..7], &[0x04, 0x22, 0x04, 0x20]);
        assert_eq!(&after[7..39], &[7; 32]);
        assert!(challenges.get("other.example").is_none());
        challenges.clear();
        assert!(challenges.get("tracker.example").is_none());
    }
}
