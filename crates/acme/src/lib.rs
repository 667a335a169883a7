//! Certificates the HTTP and WebTorrent trackers obtain and renew themselves from an
//! ACME CA (RFC 8555), such as Let's Encrypt: no proxy and no certbot in front of
//! them.
//!
//! One thread per tracker ([`Acme`]) keeps an account and a certificate in a storage
//! directory, orders a certificate when there is none for the configured names,
//! renews it before it ends, and backs off while the CA fails, the certificate in
//! force staying in force. Validation is TLS-ALPN-01 (RFC 8737) on the tracker's own
//! TLS port: the tracker shows [`AlpnChallenges`]' certificates to the CA's
//! connections (ALPN `acme-tls/1`), so no other port or process is needed.
//!
//! # Layout
//!
//! Every module is private; what other crates use is re-exported at the root below.
//!
//! * `manager`: the ACME thread of one tracker: order, renew, back off.
//! * `alpn`: TLS-ALPN-01 challenge certificates, shown by the tracker's TLS port.
//! * `https`: the blocking HTTPS client instant-acme speaks through.
//! * `store`: the account, certificate and key on disk, each replaced whole.
//! * `validity`: a certificate's `notBefore` and `notAfter`, read from its DER.

mod alpn;
mod https;
mod manager;
mod store;
mod validity;

pub use alpn::{ACME_TLS_ALPN, AlpnChallenges};
pub use manager::{Acme, AcmeSettings, AcmeStatus, Install};
pub use store::{certificate_path, private_key_path};
pub use validity::Validity;
