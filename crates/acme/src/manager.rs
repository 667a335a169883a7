//! The ACME thread of one tracker: obtains a certificate for the configured names
//! when there is none, renews it before it ends, and backs off when the CA fails,
//! keeping whatever certificate is in force. Nothing on the request path waits for it:
//! it writes the files and asks the tracker to load them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use futures_lite::future::block_on;
use instant_acme::{
    Account, AuthorizationStatus, ChallengeType, Identifier, NewAccount, NewOrder, OrderStatus,
};

use crate::Validity;
use crate::alpn::AlpnChallenges;
use crate::https::BlockingHttps;
use crate::store::Store;

/// The longest wait between two failed attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(6 * 3600);

/// The longest the CA may take to validate the challenges, or to issue.
const ORDER_TIMEOUT: Duration = Duration::from_secs(180);

/// How often a certificate in force is looked at again, whatever its renewal date:
/// a clock that jumped or a file replaced by hand is noticed within this.
const RECHECK: Duration = Duration::from_secs(12 * 3600);

/// What a tracker's ACME thread is told.
#[derive(Clone, Debug)]
pub struct AcmeSettings {
    /// The tracker, for log lines and the thread's name.
    pub tracker: &'static str,
    /// The names the certificate is for (DNS names, no wildcards).
    pub names: Vec<String>,
    /// The CA's directory URL.
    pub directory_url: String,
    /// Contact URLs for the account (`mailto:...`); may be empty.
    pub contact: Vec<String>,
    /// PEM file of the CA certificates trusted when talking to the CA.
    pub ca_certificates: PathBuf,
    /// Where the account, certificate and key are kept.
    pub storage: PathBuf,
    /// Renew this long before the certificate ends (at most a third of its life).
    pub renew_before: Duration,
    /// The wait after a first failure; it doubles up to six hours.
    pub first_retry: Duration,
}

/// What the ACME thread has done, for metrics.
#[derive(Debug, Default)]
pub struct AcmeStatus {
    /// Certificates obtained.
    pub issued: AtomicU64,
    /// Attempts that failed.
    pub failed: AtomicU64,
    /// Why the last attempt failed, while the next has not succeeded.
    last_error: Mutex<Option<String>>,
}

impl AcmeStatus {
    /// Why the last attempt failed (the CA's reason when it gave one); `None` once an
    /// attempt succeeds.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().expect("ACME status lock").clone()
    }

    fn set_last_error(&self, error: Option<String>) {
        *self.last_error.lock().expect("ACME status lock") = error;
    }
}

/// Loads the certificate files just written into the tracker and returns the new
/// certificate's validity.
pub type Install = Box<dyn Fn() -> anyhow::Result<Validity> + Send>;

/// A tracker's running ACME thread; dropping it stops the thread.
#[derive(Debug)]
pub struct Acme {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    status: Arc<AcmeStatus>,
}

impl Acme {
    /// The certificate and key files the tracker loads, in `settings.storage` (which
    /// is created, mode 0700, when missing).
    pub fn files(settings: &AcmeSettings) -> anyhow::Result<(PathBuf, PathBuf)> {
        let store = Store::open(&settings.storage)?;
        Ok((store.certificate_path(), store.private_key_path()))
    }

    /// Starts the thread: it serves challenges through `challenges`, counts into
    /// `status` and calls `install` after each new certificate.
    pub fn start(
        settings: AcmeSettings,
        challenges: Arc<AlpnChallenges>,
        status: Arc<AcmeStatus>,
        install: Install,
    ) -> anyhow::Result<Self> {
        let store = Store::open(&settings.storage)?;
        let https = BlockingHttps::trusting(&settings.ca_certificates).context(
            "cannot set up the connection to the ACME CA (network.acme_ca_certificates_path)",
        )?;
        let (stop, stopped) = mpsc::channel();
        let mut worker = Worker {
            settings,
            store,
            https,
            challenges,
            install,
            stopped,
            status: status.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("{}-acme", worker.settings.tracker))
            .spawn(move || worker.run())
            .context("cannot start the ACME thread")?;
        Ok(Self {
            stop: Some(stop),
            thread: Some(thread),
            status,
        })
    }

    /// What it has done so far.
    pub fn status(&self) -> &Arc<AcmeStatus> {
        &self.status
    }
}

impl Drop for Acme {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread's state.
struct Worker {
    settings: AcmeSettings,
    store: Store,
    https: BlockingHttps,
    challenges: Arc<AlpnChallenges>,
    install: Install,
    stopped: mpsc::Receiver<()>,
    status: Arc<AcmeStatus>,
}

/// The thread was asked to stop.
#[derive(Debug)]
struct Stopping;

impl std::fmt::Display for Stopping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the tracker is stopping")
    }
}

impl std::error::Error for Stopping {}

impl Worker {
    fn run(&mut self) {
        let tracker = self.settings.tracker;
        let mut backoff = self.settings.first_retry;
        // Whether the last attempt replaced an account the CA had forgotten (once in a
        // row, without waiting).
        let mut account_renewed = false;
        // Whether the kept certificate was seen to load into the tracker.
        let mut loads = false;
        loop {
            let mut kept = self.store.current(&self.settings.names);
            if kept.is_some() && !loads {
                // A damaged file, or a key that is not the certificate's, is ordered
                // anew rather than left unserved until its renewal date.
                loads = match (self.install)() {
                    Ok(_) => true,
                    Err(err) => {
                        log::warn!(
                            "{tracker}: ACME: the kept certificate does not load ({err:#}): ordering a new one"
                        );
                        false
                    }
                };
                kept = kept.filter(|_| loads);
            }
            let wait = match kept {
                Some(validity) => validity
                    .renew_at(self.settings.renew_before)
                    .duration_since(SystemTime::now())
                    .unwrap_or_default(),
                None => Duration::ZERO,
            };
            if !wait.is_zero() {
                log::debug!("{tracker}: ACME: next renewal in {} s", wait.as_secs());
                if self.pause(wait.min(RECHECK)) {
                    return;
                }
                continue;
            }
            let started = Instant::now();
            let attempt = self.obtain();
            let gone = attempt.as_ref().err().is_some_and(account_gone);
            if !gone {
                account_renewed = false;
            }
            match attempt {
                Ok(validity) => {
                    loads = true;
                    self.status.issued.fetch_add(1, Ordering::Relaxed);
                    self.status.set_last_error(None);
                    backoff = self.settings.first_retry;
                    log::info!(
                        "{tracker}: ACME: certificate for {} obtained from {} in {:.1} s, valid until {}",
                        self.settings.names.join(", "),
                        self.settings.directory_url,
                        started.elapsed().as_secs_f64(),
                        shoal_common::utc_timestamp(validity.not_after),
                    );
                }
                Err(err) if err.is::<Stopping>() => return,
                Err(err) => {
                    self.status.set_last_error(Some(format!("{err:#}")));
                    self.status.failed.fetch_add(1, Ordering::Relaxed);
                    if gone && !account_renewed {
                        // The CA no longer knows the account (its database was reset,
                        // or the account was deactivated): a new one, at once.
                        log::warn!(
                            "{tracker}: ACME: {} no longer knows our account: creating a new one",
                            self.settings.directory_url
                        );
                        self.store.forget_account();
                        account_renewed = true;
                        continue;
                    }
                    log::error!(
                        "{tracker}: ACME: no certificate for {} from {} (the one in force, if any, stays): {err:#}; trying again in {} s",
                        self.settings.names.join(", "),
                        self.settings.directory_url,
                        backoff.as_secs(),
                    );
                    if self.pause(backoff) {
                        return;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// Waits `wait`; true when asked to stop meanwhile.
    fn pause(&self, wait: Duration) -> bool {
        !matches!(
            self.stopped.recv_timeout(wait),
            Err(RecvTimeoutError::Timeout)
        )
    }

    /// One order, from the account to the installed certificate.
    fn obtain(&self) -> anyhow::Result<Validity> {
        let account = self.account()?;
        let result = self.order(&account);
        // Whatever happened, the validation certificates are no longer shown.
        self.challenges.clear();
        let (chain, key) = result?;
        self.store
            .save_certificate(&self.settings.names, &chain, &key)?;
        (self.install)().context("the new certificate does not load")
    }

    /// The account kept for this CA, or a new one (kept).
    fn account(&self) -> anyhow::Result<Account> {
        let url = &self.settings.directory_url;
        let builder = || Account::builder_with_http(Box::new(self.https.clone()));
        if let Some(credentials) = self.store.account(url) {
            return block_on(builder().from_credentials(credentials))
                .with_context(|| format!("cannot reach the CA at {url}"));
        }
        let contact: Vec<&str> = self.settings.contact.iter().map(String::as_str).collect();
        let new = NewAccount {
            contact: &contact,
            terms_of_service_agreed: true,
            only_return_existing: false,
        };
        let (account, credentials) = block_on(builder().create(&new, url.clone(), None))
            .with_context(|| format!("cannot create an account at {url}"))?;
        self.store.save_account(url, &credentials)?;
        log::info!("{}: ACME: account created at {url}", self.settings.tracker);
        Ok(account)
    }

    /// Orders, answers the challenges and downloads the certificate: the chain and
    /// the key, in PEM.
    fn order(&self, account: &Account) -> anyhow::Result<(String, String)> {
        let identifiers: Vec<Identifier> = self
            .settings
            .names
            .iter()
            .map(|name| Identifier::Dns(name.clone()))
            .collect();
        let mut order = block_on(account.new_order(&NewOrder::new(&identifiers)))
            .context("the CA refused the order")?;
        let mut authorizations = order.authorizations();
        while let Some(authorization) = block_on(authorizations.next()) {
            let mut authorization = authorization.context("cannot read an authorization")?;
            match authorization.status {
                AuthorizationStatus::Pending => {}
                AuthorizationStatus::Valid => continue,
                other => bail!("an authorization is {other:?}"),
            }
            let name = authorization.identifier().to_string();
            let mut challenge = authorization
                .challenge(ChallengeType::TlsAlpn01)
                .with_context(|| format!("the CA offers no tls-alpn-01 challenge for {name}"))?;
            self.challenges
                .insert(&name, challenge.key_authorization().digest().as_ref())?;
            block_on(challenge.set_ready()).context("cannot start the challenge")?;
        }

        let deadline = Instant::now() + ORDER_TIMEOUT;
        loop {
            let state = block_on(order.refresh()).context("cannot follow the order")?;
            match state.status {
                OrderStatus::Ready => break,
                OrderStatus::Invalid => bail!("the CA refused: {}", self.reasons(&mut order)),
                OrderStatus::Valid => break,
                OrderStatus::Pending | OrderStatus::Processing => {}
            }
            self.poll_pause(deadline, "validate the challenges")?;
        }

        let key = rcgen::KeyPair::generate().context("cannot make a key")?;
        let mut params = rcgen::CertificateParams::new(self.settings.names.clone())
            .context("a name the certificate cannot hold")?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let request = params
            .serialize_request(&key)
            .context("cannot make the certificate request")?;
        block_on(order.finalize_csr(request.der())).context("the CA refused to finalize")?;
        loop {
            if let Some(chain) =
                block_on(order.certificate()).context("cannot download the certificate")?
            {
                return Ok((chain, key.serialize_pem()));
            }
            self.poll_pause(deadline, "issue the certificate")?;
        }
    }

    /// A second between polls of an order; fails past `deadline` or when stopping.
    fn poll_pause(&self, deadline: Instant, what: &str) -> anyhow::Result<()> {
        if Instant::now() >= deadline {
            bail!("the CA did not {what} within {} s", ORDER_TIMEOUT.as_secs());
        }
        if self.pause(Duration::from_secs(1)) {
            return Err(Stopping.into());
        }
        Ok(())
    }

    /// Why the CA refused an order: the problem of each challenge that failed, with
    /// its name, or else the order's own.
    fn reasons(&self, order: &mut instant_acme::Order) -> String {
        let mut reasons = Vec::new();
        let mut authorizations = order.authorizations();
        while let Some(Ok(mut authorization)) = block_on(authorizations.next()) {
            let Ok(state) = block_on(authorization.refresh()) else {
                continue;
            };
            let name = state.identifier().to_string();
            for challenge in &state.challenges {
                if let Some(problem) = &challenge.error {
                    reasons.push(format!("{name}: {problem}"));
                }
            }
        }
        if reasons.is_empty()
            && let Some(problem) = &order.state().error
        {
            reasons.push(problem.to_string());
        }
        if reasons.is_empty() {
            "no reason given".to_owned()
        } else {
            reasons.join("; ")
        }
    }
}

/// Whether `err` is the CA saying the account does not exist.
fn account_gone(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<instant_acme::Error>(),
            Some(instant_acme::Error::Api(problem))
                if problem.r#type.as_deref() == Some("urn:ietf:params:acme:error:accountDoesNotExist")
        )
    })
}
