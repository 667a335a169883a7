//! The admin API (`[admin]`, documents/admin-api.md): a site changes private mode's
//! users and torrents, and any tracker's access list, while it serves.
//!
//! Plain HTTP with JSON bodies on an address of its own, one thread, the connection
//! handling of the monitoring endpoint (`crate::clients`: deadlines, caps on open
//! connections in all and per address, bounded heads and bodies). Every request
//! carries the bearer token read from `admin.token_path` at start, checked as soon as
//! the head is whole: a body is read only for a request that carries it.
//!
//! # Layout
//!
//! * here: the token, binding and the thread.
//! * `api`: the requests and their answers, with no I/O (unit-tested and fuzzed).

mod api;

use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use shoal_common::{AccessControl, AdminConfig, ClientRules, Shutdown};
use shoal_private::{Accounts, KeyDigest, Registry};

pub use api::AdminApi;

/// What the admin API may change of one running tracker.
#[derive(Clone, Debug)]
pub struct AdminTarget {
    /// `udp`, `http` or `ws`.
    pub protocol: &'static str,
    /// Its access list.
    pub access: Arc<AccessControl>,
    /// Its client rules.
    pub clients: Arc<ClientRules>,
    /// Private mode's users and torrents, when on (one registry may serve several
    /// trackers: they share it when they name the same files).
    pub registry: Option<Arc<Registry>>,
    /// Private mode's accounting, when on: the live state of users and torrents.
    pub accounts: Option<Arc<Accounts>>,
    /// The announce interval it gives, whose bounds the API can change.
    pub interval: Option<Arc<shoal_worker::AnnounceInterval>>,
}

/// How long one client may take, from being accepted to having read the answer: a
/// body of a megabyte fits over a slow link, a connection held open does not stay.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Shortest and longest token accepted, in characters.
pub(crate) const TOKEN_LEN: std::ops::RangeInclusive<usize> = 32..=256;

/// The admin API, bound but not serving yet (bound and the token read before
/// privileges are dropped).
#[derive(Debug)]
pub(crate) struct Bound {
    listener: TcpListener,
    token: KeyDigest,
    max_body: usize,
    body_budget: usize,
}

/// Binds the API's address and reads its token.
pub(crate) fn bind(config: &AdminConfig) -> anyhow::Result<Bound> {
    let token = read_token(&config.token_path)
        .with_context(|| format!("admin.token_path {}", config.token_path.display()))?;
    let listener = TcpListener::bind(config.address).with_context(|| {
        format!(
            "cannot listen on {} for [admin] (is the port in use? change admin.address)",
            config.address
        )
    })?;
    listener.set_nonblocking(true)?;
    Ok(Bound {
        listener,
        token,
        max_body: config.max_body_bytes as usize,
        body_budget: config.body_budget_bytes as usize,
    })
}

impl Bound {
    /// Serves `targets` from a thread of its own until `shutdown`.
    pub(crate) fn spawn(self, targets: Vec<AdminTarget>, shutdown: Shutdown) -> anyhow::Result<()> {
        let address = self.listener.local_addr()?;
        log::info!("admin API on http://{address}/v1/ (documents/admin-api.md)");
        let api = std::cell::RefCell::new(AdminApi::new(self.token, targets));
        let limits = crate::clients::Limits {
            timeout: CLIENT_TIMEOUT,
            max_body: self.max_body,
            max_clients: crate::clients::MAX_CLIENTS,
            per_address: crate::clients::PER_ADDRESS,
            body_budget: self.body_budget,
        };
        std::thread::Builder::new()
            .name("admin".into())
            .spawn(move || {
                let served = crate::clients::serve(
                    self.listener,
                    &shutdown,
                    limits,
                    |head, from| api.borrow_mut().check_head(head, from),
                    |head, body| api.borrow_mut().respond(head, body),
                    || {},
                );
                if let Err(err) = served {
                    log::error!("admin API stopped: {err}");
                }
            })
            .context("cannot start the admin thread")?;
        Ok(())
    }
}

/// Reads the token file: one line, [`TOKEN_LEN`] characters without blanks, not
/// readable by others. Only its digest is kept.
fn read_token(path: &Path) -> anyhow::Result<KeyDigest> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .permissions()
        .mode();
    if mode & 0o004 != 0 {
        bail!(
            "the token file may be read by any user (mode {:o}): `chmod o-r` it",
            mode & 0o777
        );
    }
    let text = shoal_common::read_to_string_bounded(path, 4096)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let token = text.trim();
    if !TOKEN_LEN.contains(&token.len()) || !token.bytes().all(|b| b.is_ascii_graphic()) {
        bail!(
            "the token must be one line of {} to {} characters without blanks (e.g. `openssl rand -hex 32`)",
            TOKEN_LEN.start(),
            TOKEN_LEN.end()
        );
    }
    Ok(KeyDigest::of_secret(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_must_be_private_and_long_enough() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("shoal-admin-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        let write = |text: &str, mode: u32| {
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        let good = "0123456789abcdef0123456789abcdef";
        write(&format!("{good}\n"), 0o640);
        assert_eq!(
            read_token(&path).unwrap(),
            KeyDigest::of_secret(good.as_bytes())
        );
        write(good, 0o644);
        let err = format!("{:#}", read_token(&path).unwrap_err());
        assert!(err.contains("chmod o-r"), "{err}");
        write("short\n", 0o600);
        let err = format!("{:#}", read_token(&path).unwrap_err());
        assert!(err.contains("32 to 256 characters"), "{err}");
        assert!(!err.contains("short"), "the token is not echoed: {err}");
        write(&format!("{good} {good}\n"), 0o600);
        assert!(read_token(&path).is_err(), "a blank inside");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
