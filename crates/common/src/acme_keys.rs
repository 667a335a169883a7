//! The `acme_*` keys of a TLS `[network]` section (certificates obtained from an ACME
//! CA by the tracker itself; the `shoal_acme` crate does the work) and their checks.

use std::path::{Path, PathBuf};

use crate::Problems;

/// Let's Encrypt's production directory, the default CA.
pub const LETS_ENCRYPT: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// Most names on one certificate (Let's Encrypt's limit).
const MAX_NAMES: usize = 100;

/// The ACME keys of a TLS `[network]` section, read where the section's TLS is set up.
#[derive(Clone, Copy, Debug)]
pub struct AcmeKeys<'a> {
    /// Names the certificate is for.
    pub names: &'a [String],
    /// The CA's directory URL.
    pub directory_url: &'a str,
    /// Contact e-mail address; empty for none.
    pub contact_email: &'a str,
    /// Where the account, certificate and key are kept (each tracker in a
    /// subdirectory of its name).
    pub storage: &'a Path,
    /// CA certificates trusted when talking to the CA.
    pub ca_certificates: &'a Path,
    /// Days before the end to renew.
    pub renew_days_before: u32,
    /// Seconds to wait after a first failure.
    pub retry_seconds: u32,
}

impl AcmeKeys<'_> {
    /// The directory one tracker keeps its files in.
    pub fn storage_of(&self, tracker: &str) -> PathBuf {
        self.storage.join(tracker)
    }

    /// Records problems with the keys.
    pub fn validate(&self, problems: &mut Problems) {
        if self.names.len() > MAX_NAMES {
            problems.add("acme_names", format!("at most {MAX_NAMES} names"));
        }
        for name in self.names {
            if let Err(problem) = check_name(name) {
                problems.add("acme_names", format!("{name:?}: {problem}"));
            }
        }
        let lowered: std::collections::HashSet<String> = self
            .names
            .iter()
            .map(|name| name.to_ascii_lowercase())
            .collect();
        problems.check(
            lowered.len() == self.names.len(),
            "acme_names",
            "a name is listed twice",
        );
        problems.check(
            self.directory_url.starts_with("https://") && self.directory_url.len() > 8,
            "acme_directory_url",
            "must be the CA's https:// directory URL",
        );
        problems.check(
            self.contact_email.is_empty()
                || (self.contact_email.contains('@')
                    && !self
                        .contact_email
                        .contains(|c: char| c.is_whitespace() || c == ',' || c.is_control())),
            "acme_contact_email",
            "must be one e-mail address, or empty",
        );
        problems.check(
            !self.storage.as_os_str().is_empty(),
            "acme_storage_path",
            "must name a directory (created if missing) for the account and certificate",
        );
        if let Some(problem) = crate::files::unreadable(self.ca_certificates) {
            problems.add("acme_ca_certificates_path", problem);
        }
        problems.within("acme_renew_days_before", self.renew_days_before, 1..=365);
        problems.within("acme_retry_seconds", self.retry_seconds, 1..=86_400);
    }
}

/// Whether `name` can be validated by TLS-ALPN-01: a DNS name of letters, digits and
/// hyphens in dot-separated labels, not an address and not a wildcard.
fn check_name(name: &str) -> Result<(), &'static str> {
    if name.starts_with("*.") {
        return Err("wildcards need DNS-01 validation, which the tracker does not do");
    }
    if name.parse::<std::net::IpAddr>().is_ok() {
        return Err("an address, not a name: public CAs issue for names");
    }
    if name.is_empty() || name.len() > 253 {
        return Err("a name is 1 to 253 characters");
    }
    let labels: Vec<&str> = name.trim_end_matches('.').split('.').collect();
    let label_ok = |label: &&str| {
        (1..=63).contains(&label.len())
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if labels.len() < 2 || !labels.iter().all(label_ok) {
        return Err(
            "not a DNS name (letters, digits and hyphens, two labels or more; IDNs in their xn-- form)",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_urls_are_checked() {
        for good in [
            "tracker.example.com",
            "xn--bcher-kva.example",
            "a-b.c1.example.",
        ] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in [
            "*.example.com",
            "127.0.0.1",
            "::1",
            "localhost",
            "",
            "-a.example",
            "a_b.example",
            "tracker example.com",
            "a..example",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        let names = vec![
            "tracker.example.com".to_owned(),
            "Tracker.Example.com".to_owned(),
        ];
        let keys = AcmeKeys {
            names: &names,
            directory_url: "http://ca.example/directory",
            contact_email: "ops@example.com, other@example.com",
            storage: Path::new(""),
            ca_certificates: Path::new("/nonexistent/roots.pem"),
            renew_days_before: 0,
            retry_seconds: 0,
        };
        let mut problems = Problems::default();
        keys.validate(&mut problems);
        let text = problems.to_string();
        for key in [
            "acme_names",
            "acme_directory_url",
            "acme_contact_email",
            "acme_storage_path",
            "acme_ca_certificates_path",
            "acme_renew_days_before",
            "acme_retry_seconds",
        ] {
            assert!(text.contains(key), "{key} in {text}");
        }
    }
}
