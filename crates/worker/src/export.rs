//! Sending private mode's accounting batches to the site: every batch file the
//! accounting thread writes into `private.export_directory` is POSTed to
//! `private.export_url` and/or added to a Redis stream (`private.export_redis`),
//! oldest first, and deleted once every target took it.
//!
//! The directory is the backlog. A batch is on disk (synced) before anything is sent,
//! so a site that is down, or a tracker that restarts, loses nothing: the next pass,
//! or the next run's exporter, sends what is there. Each target takes the batches in
//! order at its own pace, with its own backoff while it fails: a target that is down
//! delays no other (a batch leaves the directory once every target took it). The
//! backlog's bounds (`private.export_backlog`, `export_backlog_bytes`) are kept by the
//! accounting thread whenever it writes a batch. The backlog is bounded
//! (`private.export_backlog` batches): past it the oldest are deleted, logged and
//! counted. A batch can reach a target twice (sent, then the tracker stopped before it
//! heard the answer); each carries its id (`Idempotency-Key` over HTTP, the `batch`
//! field in the stream) and the site applies an id once.

use std::collections::HashSet;
use std::io::{Read as _, Write as _};
use std::net::{TcpStream, ToSocketAddrs as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use shoal_cluster::{Connection, StoreAddress};
use shoal_common::LogBudget;

/// How long a target may take to connect, and then to answer.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The first wait after a failed pass; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between tries while a target fails.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How often the directory is looked at for new batches.
const POLL: Duration = Duration::from_millis(250);
/// The largest batch file read (a batch of a million entries is about 150 MB).
const MAX_BATCH_FILE: u64 = 1 << 30;

/// An HTTP endpoint of the site (`http://host:port/path`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpTarget {
    /// `host:port`, as connected to and sent in `Host`.
    authority: String,
    /// The path and query POSTed to.
    path: String,
}

impl HttpTarget {
    /// Parses `http://host[:port][/path]`. HTTPS is not spoken: run the endpoint on
    /// a private network, or a local TLS proxy in front of it.
    pub fn parse(url: &str) -> Result<Self, String> {
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(
                "must start with http:// (https is not spoken: use a local TLS proxy)".into(),
            );
        };
        let (authority, path) = match rest.find('/') {
            Some(slash) => (&rest[..slash], &rest[slash..]),
            None => (rest, "/"),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err("needs a host, and no user name or password in the URL".into());
        }
        if path.bytes().any(|b| b.is_ascii_control() || b == b' ') {
            return Err("the path may not hold spaces or control characters".into());
        }
        let authority = if authority
            .rsplit_once(':')
            .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()))
        {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(Self {
            authority,
            path: path.to_owned(),
        })
    }

    /// POSTs `body`, the batch `id`; `Ok` on any 2xx answer.
    fn post(&self, id: &str, body: &[u8]) -> Result<(), String> {
        let addresses = self
            .authority
            .to_socket_addrs()
            .map_err(|err| format!("cannot resolve {}: {err}", self.authority))?;
        let mut last = format!("{} resolves to no address", self.authority);
        for address in addresses {
            match TcpStream::connect_timeout(&address, TIMEOUT) {
                Ok(stream) => return self.post_over(stream, id, body),
                Err(err) => last = format!("cannot connect to {address}: {err}"),
            }
        }
        Err(last)
    }

    fn post_over(&self, mut stream: TcpStream, id: &str, body: &[u8]) -> Result<(), String> {
        let io = |err: std::io::Error| format!("{}: {err}", self.authority);
        stream.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
        stream.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nIdempotency-Key: {id}\r\nUser-Agent: shoal/{}\r\nConnection: close\r\n\r\n",
            self.path,
            self.authority,
            body.len(),
            env!("CARGO_PKG_VERSION")
        );
        stream.write_all(head.as_bytes()).map_err(io)?;
        stream.write_all(body).map_err(io)?;
        // The status line is all that is read: "HTTP/1.1 200 OK".
        let mut answer = Vec::with_capacity(64);
        let mut buffer = [0u8; 256];
        while !answer.contains(&b'\n') && answer.len() < 4096 {
            match stream.read(&mut buffer).map_err(io)? {
                0 => break,
                read => answer.extend_from_slice(&buffer[..read]),
            }
        }
        let line = String::from_utf8_lossy(&answer);
        let line = line.lines().next().unwrap_or_default();
        match line.split(' ').nth(1) {
            Some(status) if status.len() == 3 && status.starts_with('2') => Ok(()),
            _ if line.is_empty() => Err(format!("{} closed without an answer", self.authority)),
            _ => Err(format!("{} answered {line:?}", self.authority)),
        }
    }
}

/// A Redis or Valkey stream the batches are added to.
#[derive(Clone, Debug)]
pub struct RedisTarget {
    store: StoreAddress,
    stream: String,
}

impl RedisTarget {
    /// Parses `redis://[[user]:password@]host:port[/database]`; batches go to `stream`.
    pub fn parse(url: &str, stream: &str) -> Result<Self, String> {
        let Some(rest) = url.strip_prefix("redis://") else {
            return Err("must start with redis://".into());
        };
        let (login, rest) = match rest.rsplit_once('@') {
            Some((login, rest)) => (Some(login), rest),
            None => (None, rest),
        };
        let (username, password) = match login.map(|login| login.split_once(':')) {
            None => (String::new(), String::new()),
            Some(Some((user, password))) => (user.to_owned(), password.to_owned()),
            Some(None) => return Err("the login is user:password or :password".into()),
        };
        let (address, database) = match rest.split_once('/') {
            Some((address, "")) => (address, 0),
            Some((address, database)) => (
                address,
                database
                    .parse()
                    .map_err(|_| "the database after / is a number".to_owned())?,
            ),
            None => (rest, 0),
        };
        if !address.contains(':') {
            return Err("needs host:port".into());
        }
        if stream.is_empty() {
            return Err("the stream name is empty".into());
        }
        Ok(Self {
            store: StoreAddress {
                address: address.to_owned(),
                username,
                password,
                database,
                timeout: TIMEOUT,
            },
            stream: stream.to_owned(),
        })
    }
}

/// Where the batches go.
#[derive(Clone, Debug, Default)]
pub struct ExportTargets {
    /// The site's HTTP endpoint.
    pub http: Option<HttpTarget>,
    /// A Redis stream.
    pub redis: Option<RedisTarget>,
}

impl ExportTargets {
    /// Whether there is anywhere to send batches to.
    pub fn any(&self) -> bool {
        self.http.is_some() || self.redis.is_some()
    }
}

/// What the exporter did, for /metrics.
#[derive(Debug, Default)]
pub struct ExportStats {
    /// Batches the HTTP endpoint took, and tries that failed.
    pub http_sent: AtomicU64,
    pub http_failed: AtomicU64,
    /// Batches the Redis stream took, and tries that failed.
    pub redis_sent: AtomicU64,
    pub redis_failed: AtomicU64,
    /// Batches waiting in the directory at the last look.
    pub backlog: AtomicU64,
}

/// The export thread of one tracker; [`finish`](Self::finish) makes a last pass and
/// ends it (batches still unsent stay in the directory for the next run).
#[derive(Debug)]
pub struct Exporter {
    /// What it did.
    pub stats: Arc<ExportStats>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Exporter {
    /// Starts exporting tracker `name`'s batches in `directory` to `targets`.
    pub fn start(
        name: &str,
        directory: &Path,
        targets: ExportTargets,
    ) -> anyhow::Result<Arc<Self>> {
        let stats = Arc::new(ExportStats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut pass = Pass {
            name: name.to_owned(),
            directory: directory.to_owned(),
            stats: stats.clone(),
            http: targets.http.map(Lane::new),
            redis: targets.redis.map(|target| Lane::new((target, None))),
            failures: LogBudget::new(3, Duration::from_secs(60)),
        };
        let stopping = stop.clone();
        let waiting = pass.waiting().len();
        if waiting > 0 {
            log::info!(
                "{name}: {waiting} accounting batches wait in {} from an earlier run; they are \
                 sent first",
                directory.display()
            );
        }
        let thread = std::thread::Builder::new()
            .name(format!("{name}-export"))
            .spawn(move || {
                while !stopping.load(Relaxed) {
                    let next = pass.run(Instant::now());
                    std::thread::sleep(POLL.min(next.saturating_duration_since(Instant::now())));
                }
                // The last batch was written before the stop: one more try each.
                pass.run_all();
                let left = pass.waiting().len();
                if left > 0 {
                    log::warn!(
                        "{}: {left} accounting batches not yet taken by every target stay in \
                         {}; the next start sends them",
                        pass.name,
                        pass.directory.display()
                    );
                }
            })?;
        Ok(Arc::new(Self {
            stats,
            stop,
            thread: Mutex::new(Some(thread)),
        }))
    }

    /// Makes a last pass (each target within its timeout) and ends the thread.
    pub fn finish(&self) {
        self.stop.store(true, Relaxed);
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.finish();
    }
}

/// One target's progress: the batches it took that others have not yet, and when it
/// is tried next.
struct Lane<T> {
    target: T,
    /// Batch files this target took (deleted once every target did).
    taken: HashSet<PathBuf>,
    next_try: Instant,
    backoff: Duration,
    /// Since when, and how many passes in a row, it has failed.
    failing: Option<(Instant, u32)>,
}

impl<T> Lane<T> {
    fn new(target: T) -> Self {
        Self {
            target,
            taken: HashSet::new(),
            next_try: Instant::now(),
            backoff: FIRST_BACKOFF,
            failing: None,
        }
    }

    /// [`run`](Self::run), and what it means for the log: the failure, or, when a
    /// target that failed took every batch it was given, how long it was away and
    /// how many passes failed meanwhile.
    fn run_and_note(
        &mut self,
        batches: &[(String, PathBuf)],
        now: Instant,
        send: impl FnMut(&mut T, &str, &[u8]) -> Result<(), String>,
    ) -> Result<Option<(Duration, u32)>, String> {
        match self.run(batches, now, send) {
            Some(problem) => {
                let (since, passes) = self.failing.unwrap_or((now, 0));
                self.failing = Some((since, passes + 1));
                Err(problem)
            }
            None => Ok(self
                .failing
                .take()
                .map(|(since, passes)| (now.saturating_duration_since(since), passes))),
        }
    }

    /// Sends every batch of `batches` it has not taken, oldest first, with `send`;
    /// stops at the first failure (the rest wait, so that the site sees batches in
    /// order) and backs off from `now`. The failure, if one.
    fn run(
        &mut self,
        batches: &[(String, PathBuf)],
        now: Instant,
        mut send: impl FnMut(&mut T, &str, &[u8]) -> Result<(), String>,
    ) -> Option<String> {
        for (id, path) in batches {
            if self.taken.contains(path) {
                continue;
            }
            let sent = shoal_common::read_bounded(path, MAX_BATCH_FILE)
                .map_err(|err| format!("cannot read {}: {err}", path.display()))
                .and_then(|body| send(&mut self.target, id, &body));
            match sent {
                Ok(()) => {
                    self.taken.insert(path.clone());
                }
                Err(problem) => {
                    self.next_try = now + self.backoff;
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                    return Some(format!("{id}: {problem}"));
                }
            }
        }
        self.backoff = FIRST_BACKOFF;
        self.next_try = now;
        None
    }

    /// Whether it took `path`, or there is no such target.
    fn took(lane: &Option<Self>, path: &Path) -> bool {
        lane.as_ref().is_none_or(|lane| lane.taken.contains(path))
    }
}

/// The directory and the targets' lanes.
struct Pass {
    name: String,
    directory: PathBuf,
    stats: Arc<ExportStats>,
    http: Option<Lane<HttpTarget>>,
    /// The stream, and the connection to its store while it works.
    redis: Option<Lane<(RedisTarget, Option<Connection>)>>,
    failures: LogBudget,
}

impl Pass {
    /// Gives every target whose time has come the batches it has not taken, and
    /// deletes those every target took; returns when a target is due next.
    fn run(&mut self, now: Instant) -> Instant {
        self.run_due(now, false)
    }

    /// One more try for every target, due or not (at stop).
    fn run_all(&mut self) {
        self.run_due(Instant::now(), true);
    }

    fn run_due(&mut self, now: Instant, all: bool) -> Instant {
        let batches = self.waiting();
        let stats = self.stats.clone();
        let mut failed = Vec::new();
        let mut back = Vec::new();
        let mut note = |kind: &str, outcome: Result<Option<(Duration, u32)>, String>| match outcome
        {
            Err(problem) => failed.push(format!("{kind}, batch {problem}")),
            Ok(Some((away, passes))) => back.push((kind.to_owned(), away, passes)),
            Ok(None) => {}
        };
        if let Some(lane) = &mut self.http
            && (all || lane.next_try <= now)
        {
            note(
                "HTTP",
                lane.run_and_note(&batches, now, |target, id, body| {
                    counted(target.post(id, body), &stats.http_sent, &stats.http_failed)
                }),
            );
        }
        if let Some(lane) = &mut self.redis
            && (all || lane.next_try <= now)
        {
            note(
                "Redis",
                lane.run_and_note(&batches, now, |(target, connection), id, body| {
                    let sent = xadd(target, connection, id, body).map_err(|err| format!("{err:#}"));
                    if sent.is_err() {
                        *connection = None;
                    }
                    counted(sent, &stats.redis_sent, &stats.redis_failed)
                }),
            );
        }
        for (kind, away, passes) in back {
            log::info!(
                "{}: accounting batches reach the {kind} target again, after {:.0} s and {passes} \
                 failed tries; its backlog is sent",
                self.name,
                away.as_secs_f64()
            );
        }
        for problem in failed {
            if let Some(left_out) = self.failures.take(Instant::now()) {
                log::warn!(
                    "{}: accounting batches not exported ({problem}); kept, tried again with \
                     a growing wait (other targets go on){}",
                    self.name,
                    shoal_common::left_out(left_out)
                );
            }
        }
        // What every target took leaves the directory.
        let mut left = batches.len();
        for (_, path) in &batches {
            if Lane::took(&self.http, path) && Lane::took(&self.redis, path) {
                let _ = std::fs::remove_file(path);
                left -= 1;
                for lane in [
                    self.http.as_mut().map(|l| &mut l.taken),
                    self.redis.as_mut().map(|l| &mut l.taken),
                ]
                .into_iter()
                .flatten()
                {
                    lane.remove(path);
                }
            }
        }
        self.stats.backlog.store(left as u64, Relaxed);
        let due = |lane: Option<Instant>| lane.unwrap_or(now + MAX_BACKOFF);
        due(self.http.as_ref().map(|l| l.next_try))
            .min(due(self.redis.as_ref().map(|l| l.next_try)))
            .max(now + POLL)
    }

    /// This tracker's batches, oldest first, with their ids; what the lanes took of
    /// files gone meanwhile (deleted past the backlog) is forgotten.
    fn waiting(&mut self) -> Vec<(String, PathBuf)> {
        let batches: Vec<(String, PathBuf)> =
            shoal_private::batch_files(&self.directory, &self.name)
                .into_iter()
                .map(|file| (file.id, file.path))
                .collect();
        let present: HashSet<&PathBuf> = batches.iter().map(|(_, path)| path).collect();
        for lane in [
            self.http.as_mut().map(|l| &mut l.taken),
            self.redis.as_mut().map(|l| &mut l.taken),
        ]
        .into_iter()
        .flatten()
        {
            lane.retain(|path| present.contains(path));
        }
        batches
    }
}

/// Counts a try in `sent` or `failed` and hands its outcome on.
fn counted(
    outcome: Result<(), String>,
    sent: &AtomicU64,
    failed: &AtomicU64,
) -> Result<(), String> {
    let counter = if outcome.is_ok() { sent } else { failed };
    counter.fetch_add(1, Relaxed);
    outcome
}

/// Adds batch `id` to `target`'s stream, opening the connection when there is none.
fn xadd(
    target: &RedisTarget,
    connection: &mut Option<Connection>,
    id: &str,
    body: &[u8],
) -> anyhow::Result<()> {
    let connection = match connection {
        Some(connection) => connection,
        None => connection.insert(Connection::open(&target.store)?),
    };
    let reply = connection.command(&[
        b"XADD",
        target.stream.as_bytes(),
        b"*",
        b"batch",
        id.as_bytes(),
        b"json",
        body,
    ])?;
    reply.ok().map(drop).map_err(|err| anyhow::anyhow!("{err}"))
}

#[cfg(test)]
mod tests;
