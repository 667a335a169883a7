//! Where a TCP tracker's certificate comes from: the files the operator names, or an
//! ACME CA through `shoal_acme` (the files it keeps, loaded the same way).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use shoal_acme::{Acme, AcmeSettings, AlpnChallenges};
use shoal_common::{AcmeKeys, TcpNetwork};

use crate::tls::TlsConfig;

/// An ACME thread to start once the tracker serves (the CA validates through it).
#[derive(Debug)]
pub(crate) struct AcmeStart {
    settings: AcmeSettings,
    challenges: Arc<AlpnChallenges>,
    tls: Arc<TlsConfig>,
}

impl AcmeStart {
    /// Starts the thread; each certificate it obtains is loaded into the tracker.
    pub(crate) fn start(self) -> anyhow::Result<Acme> {
        let tls = self.tls;
        let status = tls
            .acme_status()
            .cloned()
            .context("an ACME start without ACME's TLS config")?;
        Acme::start(
            self.settings,
            self.challenges,
            status,
            Box::new(move || {
                let validity = tls.reload()?;
                validity.context("the new certificate's dates cannot be read")
            }),
        )
    }
}

/// The TLS config of tracker `name` from its `[network]` keys (none when TLS is off),
/// and the ACME thread to start when the certificate comes from a CA.
pub(crate) fn set_up(
    name: &'static str,
    network: &impl TcpNetwork,
) -> anyhow::Result<(Option<Arc<TlsConfig>>, Option<AcmeStart>)> {
    if let Some(keys) = network.acme() {
        let settings = acme_settings(name, &keys);
        let files = Acme::files(&settings).context(
            "cannot use network.acme_storage_path (a directory the tracker's user may create \
             and write, open to no other user)",
        )?;
        let challenges = AlpnChallenges::new();
        let tls = Arc::new(TlsConfig::for_acme(name, files, challenges.clone())?);
        let start = AcmeStart {
            settings,
            challenges,
            tls: tls.clone(),
        };
        return Ok((Some(tls), Some(start)));
    }
    let Some((certificate, key)) = network.tls_files() else {
        return Ok((None, None));
    };
    let tls = TlsConfig::load(name, certificate, key).context(
        "cannot load TLS (network.tls_certificate_path, network.tls_private_key_path: PEM \
         files readable by the tracker's user; or enable_tls = false)",
    )?;
    Ok((Some(Arc::new(tls)), None))
}

/// What the ACME thread of tracker `name` is told, from the keys.
fn acme_settings(name: &'static str, keys: &AcmeKeys<'_>) -> AcmeSettings {
    AcmeSettings {
        tracker: name,
        names: keys.names.to_vec(),
        directory_url: keys.directory_url.to_owned(),
        contact: if keys.contact_email.is_empty() {
            Vec::new()
        } else {
            vec![format!("mailto:{}", keys.contact_email)]
        },
        ca_certificates: keys.ca_certificates.to_path_buf(),
        storage: keys.storage_of(name),
        renew_before: Duration::from_secs(u64::from(keys.renew_days_before) * 86_400),
        first_retry: Duration::from_secs(keys.retry_seconds.into()),
    }
}
