//! What ACME keeps on disk, in its storage directory (mode 0700): the account
//! (`account.json`, its private key inside, mode 0600), the certificate chain
//! (`certificate.pem`), its key (`private_key.pem`, 0600) and the names it was
//! ordered for (`names`), each replaced whole by a rename.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, ensure};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde_json::json;

use crate::Validity;

/// Most bytes of any file here.
const MAX_FILE: u64 = 1 << 20;

/// The storage directory.
#[derive(Clone, Debug)]
pub(crate) struct Store {
    directory: PathBuf,
}

impl Store {
    /// The store in `directory`, created (0700) if missing; refused if others may read
    /// it, for the keys inside.
    pub(crate) fn open(directory: &Path) -> anyhow::Result<Self> {
        if !directory.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(directory)
                .with_context(|| format!("cannot create {}", directory.display()))?;
        }
        let metadata = fs::metadata(directory)
            .with_context(|| format!("cannot read {}", directory.display()))?;
        ensure!(
            metadata.is_dir(),
            "{} is not a directory",
            directory.display()
        );
        let mode = metadata.permissions().mode() & 0o777;
        ensure!(
            mode & 0o077 == 0,
            "{} is open to other users (mode {mode:o}): it holds private keys; chmod 700 it",
            directory.display()
        );
        Ok(Self {
            directory: directory.to_path_buf(),
        })
    }

    /// The certificate chain file (PEM, leaf first).
    pub(crate) fn certificate_path(&self) -> PathBuf {
        certificate_path(&self.directory)
    }

    /// The private key file (PEM, PKCS#8).
    pub(crate) fn private_key_path(&self) -> PathBuf {
        private_key_path(&self.directory)
    }

    /// The validity of the certificate kept for exactly `names`; `None` when there is
    /// none, it was ordered for other names, or it cannot be read.
    pub(crate) fn current(&self, names: &[String]) -> Option<Validity> {
        let kept = fs::read_to_string(self.directory.join("names")).ok()?;
        if kept.lines().map(str::to_owned).collect::<Vec<_>>() != names {
            return None;
        }
        let pem = shoal_common::read_bounded(&self.certificate_path(), MAX_FILE).ok()?;
        let leaf = CertificateDer::pem_slice_iter(&pem).next()?.ok()?;
        Validity::of_der(&leaf).ok()
    }

    /// The account kept for the CA at `directory_url`, as instant-acme stores it.
    pub(crate) fn account(&self, directory_url: &str) -> Option<instant_acme::AccountCredentials> {
        let path = self.directory.join("account.json");
        let text = shoal_common::read_to_string_bounded(&path, MAX_FILE).ok()?;
        let mut kept: serde_json::Value = serde_json::from_str(&text).ok()?;
        if kept["directory"] != directory_url {
            return None;
        }
        serde_json::from_value(kept["credentials"].take()).ok()
    }

    /// Keeps the account of the CA at `directory_url`.
    pub(crate) fn save_account(
        &self,
        directory_url: &str,
        credentials: &instant_acme::AccountCredentials,
    ) -> anyhow::Result<()> {
        let kept = json!({ "directory": directory_url, "credentials": credentials });
        self.replace("account.json", kept.to_string().as_bytes(), 0o600)
    }

    /// Forgets the account: the next attempt creates one.
    pub(crate) fn forget_account(&self) {
        let _ = fs::remove_file(self.directory.join("account.json"));
    }

    /// Keeps a new certificate chain and key for `names`.
    pub(crate) fn save_certificate(
        &self,
        names: &[String],
        chain_pem: &str,
        key_pem: &str,
    ) -> anyhow::Result<()> {
        // The key first: a certificate whose key is not there yet would not load, while
        // a new key beside the old certificate is caught the same way (they must
        // match) and ordered again.
        self.replace("private_key.pem", key_pem.as_bytes(), 0o600)?;
        self.replace("certificate.pem", chain_pem.as_bytes(), 0o644)?;
        let mut listed = names.join("\n");
        listed.push('\n');
        self.replace("names", listed.as_bytes(), 0o644)
    }

    /// Writes `name` whole: a temporary file synced, then renamed over it.
    fn replace(&self, name: &str, contents: &[u8], mode: u32) -> anyhow::Result<()> {
        let target = self.directory.join(name);
        let temporary = self.directory.join(format!(".{name}.new"));
        let written = (|| {
            let _ = fs::remove_file(&temporary);
            let mut file = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&temporary)?;
            file.write_all(contents)?;
            file.sync_all()?;
            fs::rename(&temporary, &target)
        })();
        written.with_context(|| format!("cannot write {}", target.display()))
    }
}

/// The certificate chain file ACME keeps in `directory`.
pub fn certificate_path(directory: &Path) -> PathBuf {
    directory.join("certificate.pem")
}

/// The private key file ACME keeps in `directory`.
pub fn private_key_path(directory: &Path) -> PathBuf {
    directory.join("private_key.pem")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_private_and_a_certificate_counts_for_its_names_only() {
        let directory =
            std::env::temp_dir().join(format!("shoal-acme-store-{}", std::process::id()));
        let _ = fs::remove_dir_all(&directory);
        let store = Store::open(&directory.join("acme")).unwrap();
        let mode = |path: &Path| fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&directory.join("acme")), 0o700);

        let names = vec![
            "tracker.example".to_owned(),
            "www.tracker.example".to_owned(),
        ];
        assert!(store.current(&names).is_none(), "nothing yet");
        let key = rcgen::KeyPair::generate().unwrap();
        let certificate = rcgen::CertificateParams::new(names.clone())
            .unwrap()
            .self_signed(&key)
            .unwrap();
        store
            .save_certificate(&names, &certificate.pem(), &key.serialize_pem())
            .unwrap();
        assert!(store.current(&names).is_some());
        assert!(
            store.current(&names[..1]).is_none(),
            "other names: order again"
        );
        assert_eq!(mode(&store.private_key_path()), 0o600);
        assert_eq!(mode(&store.certificate_path()), 0o644);

        fs::set_permissions(directory.join("acme"), fs::Permissions::from_mode(0o755)).unwrap();
        let err = Store::open(&directory.join("acme")).unwrap_err();
        assert!(format!("{err}").contains("chmod 700"), "{err}");
        fs::remove_dir_all(&directory).unwrap();
    }
}
