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

/// The warning to log when a tracker that gets its certificate by TLS-ALPN-01
/// listens on no port 443: the CA connects to port 443 of each name, so validation
/// reaches the tracker only through a port forward (which is why this does not
/// refuse to start).
pub(crate) fn acme_port_warning(
    name: &'static str,
    addresses: &[std::net::SocketAddr],
) -> Option<String> {
    if addresses.is_empty() || addresses.iter().any(|addr| addr.port() == 443) {
        return None;
    }
    let mut ports: Vec<u16> = addresses.iter().map(|addr| addr.port()).collect();
    ports.sort_unstable();
    ports.dedup();
    let listed: Vec<String> = ports.iter().map(u16::to_string).collect();
    let ports = match listed.len() {
        1 => format!("port {}", listed[0]),
        _ => format!("ports {}", listed.join(" and ")),
    };
    Some(format!(
        "{name}: the ACME CA validates each name on its port 443 (TLS-ALPN-01), and this \
         tracker listens on {ports}: certificates are issued only if port 443 of the \
         names' addresses is forwarded to it"
    ))
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

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::acme_port_warning;

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter().map(|addr| addr.parse().unwrap()).collect()
    }

    #[test]
    fn a_tracker_off_port_443_is_told_that_validation_needs_a_forward() {
        assert_eq!(
            acme_port_warning("http", &addrs(&["0.0.0.0:443", "[::]:443"])),
            None
        );
        assert_eq!(
            acme_port_warning("http", &addrs(&["0.0.0.0:8443", "[::]:443"])),
            None
        );
        let warning = acme_port_warning("ws", &addrs(&["0.0.0.0:8443", "[::]:8443"])).unwrap();
        assert!(warning.starts_with("ws: "), "{warning}");
        assert!(warning.contains("listens on port 8443:"), "{warning}");
        let warning = acme_port_warning("ws", &addrs(&["0.0.0.0:8443", "[::]:9443"])).unwrap();
        assert!(warning.contains("ports 8443 and 9443:"), "{warning}");
        assert!(warning.contains("forwarded"), "{warning}");
    }
}
