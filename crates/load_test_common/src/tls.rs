//! TLS client settings both load testers use (HTTPS and wss).
//!
//! Test trackers use self-signed certificates, so any certificate is accepted;
//! handshake signatures are still verified, so the connection is real TLS with the key
//! that certificate names. ALPN offers `http/1.1`, which is what an HTTPS request and
//! a WebSocket upgrade both speak.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// A client config that accepts any server certificate.
pub fn client_config() -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(AnyCertificate {
        provider: provider.clone(),
    });
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// One simulated client's TLS config: `base` with a session store of its own when it
/// resumes sessions, as each browser or BitTorrent client has (a store shared by every
/// connection of a worker keeps a few tickets for the one server name, so most
/// connections would find none and a "resumed" run would be partly full
/// handshakes), or with resumption off.
pub fn own_sessions(
    base: &Arc<rustls::ClientConfig>,
    resumption: bool,
) -> Arc<rustls::ClientConfig> {
    let mut config = (**base).clone();
    config.resumption = if resumption {
        rustls::client::Resumption::in_memory_sessions(4)
    } else {
        rustls::client::Resumption::disabled()
    };
    Arc::new(config)
}

/// Whether `name` can be sent as the TLS server name (SNI): a DNS name or an IP address.
pub fn is_valid_server_name(name: &str) -> bool {
    ServerName::try_from(name).is_ok()
}

#[derive(Debug)]
struct AnyCertificate {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}
