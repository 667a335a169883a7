//! TLS: certificates from PEM files (written by the operator, or by ACME), swapped
//! atomically on reload.
//!
//! Handshakes take the certificate in force from an [`ArcSwapOption`]; connections
//! already open keep theirs. A reload that fails (missing file, no certificate, a key
//! that does not match) keeps the old certificate and logs why, so a botched renewal
//! never takes the tracker down.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context as _, bail};
use arc_swap::ArcSwapOption;
use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, ServerSessionMemoryCache};
use rustls::sign::CertifiedKey;
use shoal_acme::{ACME_TLS_ALPN, AcmeStatus, AlpnChallenges, Validity};

use crate::tickets::Tickets;

/// Most bytes of a certificate or key file: a chain of a few certificates is a few
/// kilobytes.
const MAX_PEM_FILE: u64 = 1 << 20;

/// Most sessions kept for TLS 1.2 clients that resume by session id rather than by
/// ticket (every TLS 1.3 client, and TLS 1.2 ones that take tickets, resume from
/// tickets and cost nothing here): 256 bytes or so each.
const SESSION_CACHE: usize = 4096;

/// The ring provider with suites ordered for cheap handshakes: those whose key
/// schedule hashes with SHA-256 (done in hardware on x86-64 CPUs with SHA
/// extensions, and on ARMv8) before AES-256-GCM-SHA384, whose SHA-384 ring computes
/// in portable code there: it was 13.5% of the CPU of resumed TLS 1.3 handshakes
/// (documents/benchmarks/tls-2026-11-27.md). OpenSSL clients (libtorrent, curl)
/// list AES-256-GCM-SHA384 first; browsers AES-128-GCM-SHA256. Every suite stays on
/// offer.
fn provider() -> rustls::crypto::CryptoProvider {
    use rustls::crypto::ring::cipher_suite::*;
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites = vec![
        TLS13_AES_128_GCM_SHA256,
        TLS13_CHACHA20_POLY1305_SHA256,
        TLS13_AES_256_GCM_SHA384,
        TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
        TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ];
    provider
}

/// How sessions resume, kept across certificate reloads: ticket keys and the session
/// cache.
#[derive(Clone, Debug)]
pub(crate) struct Resumption {
    tickets: Arc<Tickets>,
    sessions: Arc<ServerSessionMemoryCache>,
}

impl Resumption {
    pub(crate) fn new() -> anyhow::Result<Self> {
        Ok(Self {
            tickets: Tickets::new()?,
            sessions: ServerSessionMemoryCache::new(SESSION_CACHE),
        })
    }
}

/// The certificate in force, and the ACME validation certificates when the tracker
/// obtains its own: what a handshake is shown. Swapped, not rebuilt, on reload, so
/// the server config (and its resumption state) stays.
#[derive(Debug)]
struct Certificates {
    current: ArcSwapOption<CertifiedKey>,
    challenges: Option<Arc<AlpnChallenges>>,
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(challenges) = &self.challenges {
            let validating = hello
                .alpn()
                .is_some_and(|mut offered| offered.any(|protocol| protocol == ACME_TLS_ALPN));
            // The CA's validation (RFC 8737): only ever a validation certificate, or no
            // handshake at all.
            if validating {
                return hello.server_name().and_then(|name| challenges.get(name));
            }
        }
        self.current.load_full()
    }
}

/// Reads a certificate chain and a private key (PKCS#8, PKCS#1/RSA or SEC1/EC) that
/// belong together, and the chain's validity (`None` when its leaf's dates cannot be
/// read: served all the same).
pub(crate) fn load_certified_key(
    certificate: &Path,
    private_key: &Path,
) -> anyhow::Result<(Arc<CertifiedKey>, Option<Validity>)> {
    let pem = shoal_common::read_bounded(certificate, MAX_PEM_FILE)
        .with_context(|| format!("cannot read certificate file {}", certificate.display()))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .with_context(|| format!("invalid PEM in certificate file {}", certificate.display()))?;
    let Some(leaf) = chain.first() else {
        bail!("no certificate in {}", certificate.display());
    };
    let validity = Validity::of_der(leaf).ok();
    let pem = shoal_common::read_bounded(private_key, MAX_PEM_FILE)
        .with_context(|| format!("cannot read private key file {}", private_key.display()))?;
    let key = PrivateKeyDer::from_pem_slice(&pem).with_context(|| {
        format!(
            "no usable private key (PKCS#8, PKCS#1 or SEC1) in {}",
            private_key.display()
        )
    })?;
    let certified = CertifiedKey::from_der(chain, key, &provider()).with_context(|| {
        format!(
            "certificate {} and key {} cannot be used together",
            certificate.display(),
            private_key.display()
        )
    })?;
    Ok((Arc::new(certified), validity))
}

/// The server config for HTTP/1.1 (which WebSocket upgrades from too), showing
/// `certificates` and resuming sessions through `resumption`.
fn server_config(
    certificates: Arc<Certificates>,
    resumption: &Resumption,
) -> anyhow::Result<Arc<ServerConfig>> {
    let acme = certificates.challenges.is_some();
    let mut config = ServerConfig::builder_with_provider(Arc::new(provider()))
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS protocol versions")?
        .with_no_client_auth()
        .with_cert_resolver(certificates);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    if acme {
        // Chosen only by a client that offers nothing else: the CA validating.
        config.alpn_protocols.push(ACME_TLS_ALPN.to_vec());
    }
    // The server's order: SHA-256 suites first (see `provider`).
    config.ignore_client_order = true;
    config.ticketer = resumption.tickets.clone();
    config.session_storage = resumption.sessions.clone();
    // One ticket per handshake: a tracker client opens one connection at a time
    // (rustls's default of two costs a second seal and 200-odd bytes for nothing).
    config.send_tls13_tickets = 1;
    Ok(Arc::new(config))
}

/// Whether a connection negotiated ACME's validation protocol: it is closed after
/// the handshake, never served.
pub(crate) fn is_acme_validation(alpn: Option<&[u8]>) -> bool {
    alpn == Some(ACME_TLS_ALPN)
}

/// The TLS config of a tracker: one server config for its lifetime, whose
/// certificate is swapped on reload.
#[derive(Debug)]
pub struct TlsConfig {
    /// The tracker, for log lines.
    name: &'static str,
    config: Arc<ServerConfig>,
    certificates: Arc<Certificates>,
    certificate: PathBuf,
    private_key: PathBuf,
    /// The certificate's end, in seconds since the Unix epoch (0: none or unknown).
    expiry: AtomicU64,
    /// What ACME has done, when on.
    acme: Option<Arc<AcmeStatus>>,
}

impl TlsConfig {
    /// Loads the files for tracker `name`; fails if they are not usable.
    pub fn load(
        name: &'static str,
        certificate: &Path,
        private_key: &Path,
    ) -> anyhow::Result<Self> {
        let (certified, validity) = load_certified_key(certificate, private_key)?;
        let certificates = Arc::new(Certificates {
            current: ArcSwapOption::from(Some(certified)),
            challenges: None,
        });
        Ok(Self {
            name,
            config: server_config(certificates.clone(), &Resumption::new()?)?,
            certificates,
            certificate: certificate.to_path_buf(),
            private_key: private_key.to_path_buf(),
            expiry: AtomicU64::new(validity.map_or(0, |validity| validity.not_after_unix())),
            acme: None,
        })
    }

    /// The TLS config of tracker `name` whose certificate ACME obtains into
    /// `files` (certificate, key): what is there already is served (when it
    /// loads), and handshakes fail until there is one. ACME's validation
    /// certificates are shown through `challenges`.
    pub fn for_acme(
        name: &'static str,
        (certificate, private_key): (PathBuf, PathBuf),
        challenges: Arc<AlpnChallenges>,
    ) -> anyhow::Result<Self> {
        let (current, expiry) = match load_certified_key(&certificate, &private_key) {
            Ok((certified, validity)) => (
                Some(certified),
                validity.map_or(0, |validity| validity.not_after_unix()),
            ),
            Err(err) => {
                if certificate.exists() {
                    log::warn!(
                        "{name}: the certificate ACME kept does not load ({err:#}): ordering a new one"
                    );
                }
                (None, 0)
            }
        };
        let certificates = Arc::new(Certificates {
            current: ArcSwapOption::from(current),
            challenges: Some(challenges),
        });
        Ok(Self {
            name,
            config: server_config(certificates.clone(), &Resumption::new()?)?,
            certificates,
            certificate,
            private_key,
            expiry: AtomicU64::new(expiry),
            acme: Some(Arc::default()),
        })
    }

    /// The config for a new connection.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }

    /// The end of the certificate in force, in seconds since the Unix epoch; 0 when
    /// there is none or its dates cannot be read.
    pub fn expiry(&self) -> u64 {
        self.expiry.load(Ordering::Relaxed)
    }

    /// What ACME has done, when the certificate comes from it.
    pub fn acme_status(&self) -> Option<&Arc<AcmeStatus>> {
        self.acme.as_ref()
    }

    /// Reads the files again; on failure the old certificate stays.
    pub fn reload(&self) -> anyhow::Result<Option<Validity>> {
        let (certified, validity) = load_certified_key(&self.certificate, &self.private_key)?;
        self.certificates.current.store(Some(certified));
        self.expiry.store(
            validity.map_or(0, |validity| validity.not_after_unix()),
            Ordering::Relaxed,
        );
        Ok(validity)
    }

    /// Reloads and logs the outcome; for signal handlers.
    pub fn reload_and_log(&self) -> Option<String> {
        Some(match self.reload() {
            Ok(_) => {
                log::info!(
                    "{}: TLS certificate reloaded from {}",
                    self.name,
                    self.certificate.display()
                );
                format!("{} TLS certificate reloaded", self.name)
            }
            Err(err) => {
                log::error!(
                    "{}: TLS certificate not reloaded, keeping the old one: {err:#}",
                    self.name
                );
                format!("{} TLS certificate kept: reload failed", self.name)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// Runs `openssl` with `args`, where "OUT" stands for `out`; `None` when openssl is
    /// not installed.
    fn openssl(args: &[&str], out: &Path) -> Option<()> {
        let args = args.iter().map(|arg| {
            if *arg == "OUT" {
                out.as_os_str()
            } else {
                arg.as_ref()
            }
        });
        let output = Command::new("openssl").args(args).output().ok()?;
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        Some(())
    }

    #[test]
    fn pkcs8_pkcs1_and_sec1_keys_load() {
        let dir = std::env::temp_dir().join(format!("shoal-tls-formats-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases: [(&str, &[&str], &str); 3] = [
            (
                "pkcs8",
                &[
                    "genpkey",
                    "-algorithm",
                    "EC",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-out",
                    "OUT",
                ],
                "BEGIN PRIVATE KEY",
            ),
            (
                "pkcs1",
                &["genrsa", "-traditional", "-out", "OUT", "2048"],
                "BEGIN RSA PRIVATE KEY",
            ),
            (
                "sec1",
                &[
                    "ecparam",
                    "-name",
                    "prime256v1",
                    "-genkey",
                    "-noout",
                    "-out",
                    "OUT",
                ],
                "BEGIN EC PRIVATE KEY",
            ),
        ];
        for (name, key_args, header) in cases {
            let key = dir.join(format!("{name}.key"));
            let cert = dir.join(format!("{name}.crt"));
            openssl(key_args, &key).expect("openssl is installed (scripts/test.sh installs it)");
            let key_text = key.to_str().unwrap();
            openssl(
                &[
                    "req",
                    "-x509",
                    "-new",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=localhost",
                    "-key",
                    key_text,
                    "-out",
                    "OUT",
                ],
                &cert,
            )
            .unwrap();
            assert!(
                std::fs::read_to_string(&key).unwrap().contains(header),
                "{name} key format"
            );
            load_certified_key(&cert, &key).unwrap_or_else(|err| panic!("{name}: {err:#}"));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
