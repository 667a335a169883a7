//! Private mode's accounting against the real HTTP tracker (`shoal http`) killed as
//! hosts kill it: SIGKILL at random moments, kills injected between the steps of a flush, and a
//! full disk. The test plays the clients and the site (which applies each batch id
//! once) and reconciles what the site was credited with what the clients reported:
//! never more, and less only by what was reported just before a kill.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use shoal_common::testing::{Process, Site};

const BINARY: &str = env!("CARGO_BIN_EXE_shoal");
const KEYS: [&str; 3] = [
    "6f0d1b2c3d4e5f60718293a4b5c6d7e8",
    "a1b2c3d4e5f60718293a4b5c6d7e8f90",
    "ccccccccccccccccccccccccccccccc1",
];
const USERS: [u32; 3] = [17, 18, 19];
const TORRENTS: [([u8; 20], u32); 2] = [([0xaa; 20], 1001), ([0xbb; 20], 1002)];

/// A private tracker's files: users, torrents, its config, the export directory.
struct Site_ {
    files: PathBuf,
    export: PathBuf,
    config: PathBuf,
}

impl Site_ {
    /// Files under a new directory; batches exported into `export` (a directory of
    /// the test's, or one it mounted).
    fn new(name: &str, export: Option<PathBuf>) -> Self {
        Self::with(name, export, "")
    }

    /// [`new`](Self::new), with `extra` added to the config.
    fn with(name: &str, export: Option<PathBuf>, extra: &str) -> Self {
        let files =
            std::env::temp_dir().join(format!("shoal-accounting-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&files);
        std::fs::create_dir_all(&files).unwrap();
        let export = export.unwrap_or_else(|| files.join("batches"));
        std::fs::create_dir_all(&export).unwrap();
        let users: String = USERS
            .iter()
            .zip(KEYS)
            .map(|(id, key)| format!("{id} {key}\n"))
            .collect();
        std::fs::write(files.join("users"), users).unwrap();
        let torrents: String = TORRENTS
            .iter()
            .map(|(hash, id)| format!("{} {id} up=150 down=50\n", hex(hash)))
            .collect();
        std::fs::write(files.join("torrents"), torrents).unwrap();
        let config = files.join("http.toml");
        std::fs::write(
            &config,
            format!(
                "[network]\naddress_ipv4 = \"127.0.0.1:0\"\nuse_ipv6 = false\n\
                 [statistics]\ninterval = 0\n\
                 [limits]\nio_memory = 262144\n\
                 [per_ip]\nrequests_per_second = 100000\nburst = 100000\n\
                 [private]\nenabled = true\nusers_path = \"{}\"\ntorrents_path = \"{}\"\n\
                 export_directory = \"{}\"\nexport_interval = 1\n{extra}",
                files.join("users").display(),
                files.join("torrents").display(),
                export.display()
            ),
        )
        .unwrap();
        Self {
            files,
            export,
            config,
        }
    }

    /// Starts the tracker (with `env`, through `wrap` when given: a command and its
    /// arguments the binary is handed to) and waits until it serves.
    fn start(&self, env: &[(&str, &str)], wrap: &[&str]) -> (Process, Option<SocketAddr>) {
        let mut command = match wrap.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(BINARY);
                command
            }
            None => Command::new(BINARY),
        };
        command.arg("http").arg("-c").arg(&self.config);
        for (key, value) in env {
            command.env(key, value);
        }
        let mut process = Process::start(command);
        // A kill injected at start (the fold into a new base) ends it before it serves.
        let address = process
            .line_within("listening on http://", Duration::from_secs(20))
            .and_then(|line| {
                line.split("listening on http://")
                    .nth(1)?
                    .split('/')
                    .next()?
                    .parse()
                    .ok()
            });
        (process, address)
    }
}

impl Drop for Site_ {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.files);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn percent(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("%{b:02X}")).collect()
}

/// One announce; the body if the tracker answered.
fn announce(tracker: SocketAddr, target: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&tracker, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// A BitTorrent client of one user in one torrent, with the totals of its session.
#[derive(Clone, Debug)]
struct Client {
    user: usize,
    torrent: usize,
    peer_id: [u8; 20],
    uploaded: u64,
    downloaded: u64,
    left: u64,
    /// Whether its next announce starts a session.
    starting: bool,
    /// Its accepted reports: when, totals, the session they belong to.
    reports: Vec<Accepted>,
    session: u32,
    /// Whether it started with bytes left.
    leecher: bool,
}

#[derive(Clone, Copy, Debug)]
struct Accepted {
    at: Instant,
    uploaded: u64,
    downloaded: u64,
    session: u32,
}

impl Client {
    fn new(number: u8, user: usize, torrent: usize, left: u64) -> Self {
        let mut peer_id = *b"-qB4650-000000000000";
        peer_id[19] = b'a' + number;
        Self {
            user,
            torrent,
            peer_id,
            uploaded: 0,
            downloaded: 0,
            left,
            starting: true,
            reports: Vec::new(),
            session: 0,
            leecher: left > 0,
        }
    }

    /// Announces its totals (with `event`, or `started` when a session begins);
    /// whether the tracker took it.
    fn announce(&mut self, tracker: SocketAddr, event: &str) -> bool {
        let event = if self.starting { "started" } else { event };
        let target = format!(
            "/{}/announce?info_hash={}&peer_id={}&port={}&uploaded={}&downloaded={}&left={}{}",
            KEYS[self.user],
            percent(&TORRENTS[self.torrent].0),
            percent(&self.peer_id),
            6881 + u16::from(self.peer_id[19]),
            self.uploaded,
            self.downloaded,
            self.left,
            if event.is_empty() {
                String::new()
            } else {
                format!("&event={event}")
            }
        );
        let Some(body) = announce(tracker, &target) else {
            return false;
        };
        assert!(body.contains("8:interval"), "{body}");
        self.reports.push(Accepted {
            at: Instant::now(),
            uploaded: self.uploaded,
            downloaded: self.downloaded,
            session: self.session,
        });
        self.starting = false;
        if event == "stopped" {
            self.starting = true;
            self.session += 1;
            self.uploaded = 0;
            self.downloaded = 0;
        }
        true
    }

    /// What its accepted reports may credit: every step up between two reports of
    /// one session (a session's first report is its baseline).
    fn reported(&self) -> (u64, u64) {
        self.reports
            .windows(2)
            .filter(|pair| pair[0].session == pair[1].session)
            .fold((0, 0), |(up, down), pair| {
                (
                    up + pair[1].uploaded.saturating_sub(pair[0].uploaded),
                    down + pair[1].downloaded.saturating_sub(pair[0].downloaded),
                )
            })
    }

    /// What the reports in `window` may have lost with a kill: their own steps, and
    /// the step of the client's next report after them (a baseline the kill lost
    /// makes that report a first sight). When the next report starts a new session
    /// (the kill lost the `stopped` before it), the whole of that session: the
    /// restored baseline is the old session's, higher, and a `started` in the same
    /// second as it reads as a report overtaken, not a restart, so the new session
    /// is credited only past the old total.
    fn at_risk(&self, (from, to): (Instant, Instant)) -> (u64, u64) {
        let mut indices: Vec<usize> = (0..self.reports.len())
            .filter(|&i| self.reports[i].at >= from && self.reports[i].at <= to)
            .collect();
        let Some(&last) = indices.last() else {
            return (0, 0);
        };
        if let Some(next) = self.reports.get(last + 1) {
            indices.push(last + 1);
            if next.session != self.reports[last].session {
                let session = next.session;
                indices.extend(
                    (last + 2..self.reports.len())
                        .take_while(|&i| self.reports[i].session == session),
                );
            }
        }
        indices
            .into_iter()
            .filter(|&i| i > 0 && self.reports[i - 1].session == self.reports[i].session)
            .fold((0, 0), |(up, down), i| {
                let (before, report) = (self.reports[i - 1], self.reports[i]);
                (
                    up + report.uploaded.saturating_sub(before.uploaded),
                    down + report.downloaded.saturating_sub(before.downloaded),
                )
            })
    }

    /// What the reports in `window` may have the site credit beyond the steps of
    /// its sessions: a `stopped` the kill lost leaves the old session's baseline
    /// restored, and the next session's `started`, when its totals are above that
    /// baseline, reads as the session going on (a `started` is a restart only below
    /// it), so its first totals (bytes the client moved before that report) may be
    /// credited too. Never more than those totals: that would be a byte credited
    /// twice.
    fn over_risk(&self, (from, to): (Instant, Instant)) -> (u64, u64) {
        (0..self.reports.len().saturating_sub(1))
            .filter(|&i| self.reports[i].at >= from && self.reports[i].at <= to)
            .filter(|&i| self.reports[i + 1].session != self.reports[i].session)
            .fold((0, 0), |(up, down), i| {
                let first = self.reports[i + 1];
                (up + first.uploaded, down + first.downloaded)
            })
    }

    /// Whether it was a leecher that has nothing left now (completed once).
    fn finished(&self) -> bool {
        self.leecher && self.left == 0
    }
}

/// A small xorshift generator: the test prints its seed, `SHOAL_TEST_SEED` repeats one.
struct Random(u64);

impl Random {
    fn new() -> Self {
        let seed = std::env::var("SHOAL_TEST_SEED")
            .ok()
            .and_then(|seed| seed.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        eprintln!("SHOAL_TEST_SEED={seed}");
        Self(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Twelve clients: each user in each torrent, seeders and leechers.
fn population() -> Vec<Client> {
    let mut clients = Vec::new();
    for user in 0..3 {
        for torrent in 0..2 {
            let number = clients.len() as u8;
            clients.push(Client::new(number, user, torrent, 0));
            let number = clients.len() as u8;
            clients.push(Client::new(number, user, torrent, 1 << 20));
        }
    }
    clients
}

/// A round of announces: each client (or a random half) moves its totals on and
/// announces; now and then a leecher completes or a client stops and starts again.
fn announce_round(tracker: SocketAddr, clients: &mut [Client], random: &mut Random) {
    for client in clients.iter_mut() {
        if random.below(2) == 0 {
            continue;
        }
        client.uploaded += random.below(50_000);
        let mut event = "";
        if client.left > 0 {
            let got = random.below(300_000).min(client.left);
            client.downloaded += got;
            client.left -= got;
            if client.left == 0 {
                event = "completed";
            }
        } else if random.below(40) == 0 {
            event = "stopped";
        }
        client.announce(tracker, event);
    }
}

/// What the kills of a run put at risk for one (user, torrent), uploaded and
/// downloaded: bytes reported that may be lost, and bytes a lost `stopped` may have
/// credited beyond the sessions' steps ([`Client::over_risk`]).
#[derive(Clone, Copy, Debug, Default)]
struct Risk {
    lost: (u64, u64),
    over: (u64, u64),
}

/// What the kills of `windows` put at risk, per (user, torrent).
fn at_risk(clients: &[Client], windows: &[(Instant, Instant)]) -> BTreeMap<(u32, u32), Risk> {
    let mut risk: BTreeMap<(u32, u32), Risk> = BTreeMap::new();
    for client in clients {
        for window in windows {
            let lost = client.at_risk(*window);
            let over = client.over_risk(*window);
            let sum = risk
                .entry((USERS[client.user], TORRENTS[client.torrent].1))
                .or_default();
            sum.lost.0 += lost.0;
            sum.lost.1 += lost.1;
            sum.over.0 += over.0;
            sum.over.1 += over.1;
        }
    }
    risk
}

/// Checks the site's credits against the clients' reports: never more than they
/// reported (and what a lost `stopped` lets through, `risk.over`), less by at most
/// `risk.lost`; seeding time never more than the wall time of
/// the test; a completion per leecher that finished at most.
fn reconcile(site: &Site, clients: &[Client], risk: &BTreeMap<(u32, u32), Risk>, span: Duration) {
    let mut reported: BTreeMap<(u32, u32), (u64, u64, u64)> = BTreeMap::new();
    for client in clients {
        let key = (USERS[client.user], TORRENTS[client.torrent].1);
        let (up, down) = client.reported();
        let sum = reported.entry(key).or_default();
        sum.0 += up;
        sum.1 += down;
        sum.2 += u64::from(client.finished());
    }
    for (&(user, torrent), &(up, down, completions)) in &reported {
        let got = site.credited(user, torrent);
        let Risk {
            lost: (risk_up, risk_down),
            over: (over_up, over_down),
        } = risk.get(&(user, torrent)).copied().unwrap_or_default();
        assert!(
            got.uploaded <= up + over_up && got.downloaded <= down + over_down,
            "({user}, {torrent}) credited more than reported: {got:?}, reported {up} up {down} \
             down, {over_up} up {over_down} down more at most after a lost stopped"
        );
        assert!(
            up.saturating_sub(got.uploaded) <= risk_up
                && down.saturating_sub(got.downloaded) <= risk_down,
            "({user}, {torrent}) lost more than the kills' windows held: {got:?}, reported {up} \
             up {down} down, at risk {risk_up} up {risk_down} down"
        );
        // up=150 down=50 on every torrent, applied to totals: within a byte of the
        // factor times the bytes for each run of reports credited from one baseline
        // (fewer than the reports).
        let reports = clients
            .iter()
            .filter(|client| (USERS[client.user], TORRENTS[client.torrent].1) == (user, torrent))
            .map(|client| client.reports.len() as u64)
            .sum::<u64>();
        assert!(
            got.credited_uploaded <= got.uploaded * 3 / 2 + reports,
            "{got:?}"
        );
        assert!(
            got.credited_downloaded <= got.downloaded / 2 + reports,
            "{got:?}"
        );
        assert!(
            got.seed_seconds <= span.as_secs() + 2,
            "({user}, {torrent}) seeded {} s in a test of {span:?}",
            got.seed_seconds
        );
        assert!(
            got.completed <= completions,
            "{got:?}, {completions} completed"
        );
    }
    assert_eq!(site.repeated, 0, "no batch reached the site twice");
}

/// `runs` runs of the tracker (each started with `env_for`'s environment, through
/// `wrap`) with the population announcing, most ended by a kill, a few by a clean
/// stop; a last run ends cleanly. Returns what the site got and what the kills put
/// at risk.
fn runs(
    tracker_site: &Site_,
    runs: usize,
    random: &mut Random,
    mut env_for: impl FnMut(usize, &mut Random) -> Vec<(String, String)>,
    wrap: &[&str],
) -> Outcome {
    let began = Instant::now();
    let mut site = Site::new(&tracker_site.export);
    let mut clients = population();
    let mut windows = Vec::new();
    for run in 0..=runs {
        let env = if run == runs {
            Vec::new()
        } else {
            env_for(run, random)
        };
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (mut process, address) = tracker_site.start(&env, wrap);
        if let Some(address) = address {
            let rounds = if run == runs { 1 } else { 1 + random.below(5) };
            for _ in 0..rounds {
                announce_round(address, &mut clients, random);
                std::thread::sleep(Duration::from_millis(random.below(700)));
                if process.wait_exit(Duration::ZERO).is_some() {
                    break;
                }
            }
        }
        if run == runs {
            // Every client once more, a batch, and a clean stop.
            if let Some(address) = address {
                for client in &mut clients {
                    client.uploaded += 1;
                    assert!(client.announce(address, ""));
                }
            }
            std::thread::sleep(Duration::from_millis(2500));
            process.stop();
        } else if env.is_empty() && run % 5 == 4 && process.wait_exit(Duration::ZERO).is_none() {
            // Every fifth run a clean stop (an upgrade, a reload of the unit): the kills
            // after it must not credit again what was credited before it. (Not in a
            // run with a kill injected: it may come in the stop's last flush.)
            process.stop();
        } else {
            // Killed at a random moment, if an injected kill did not end it first.
            std::thread::sleep(Duration::from_millis(random.below(2000)));
            if process.wait_exit(Duration::ZERO).is_none() {
                process.kill();
            }
            let died = Instant::now();
            windows.push((died - Duration::from_secs(4), died));
        }
        site.take();
    }
    let risk = at_risk(&clients, &windows);
    Outcome {
        site,
        clients,
        risk,
        span: began.elapsed(),
        kills: windows.len(),
    }
}

/// What [`runs`] leaves: the site, the clients, what the kills put at risk per
/// (user, torrent), how long it took, how many runs were killed.
struct Outcome {
    site: Site,
    clients: Vec<Client>,
    risk: BTreeMap<(u32, u32), Risk>,
    span: Duration,
    kills: usize,
}

/// The defect's own sequence: a client's announces across a clean stop, a kill and
/// a restart credit exactly what it reported (the baselines of the last clean stop
/// were restored after the kill and the killed run's bytes credited again: 5,000
/// bytes for 3,000).
#[test]
fn a_kill_between_clean_stops_credits_each_byte_once() {
    let files = Site_::new("three-runs", None);
    let mut site = Site::new(&files.export);
    let mut client = Client::new(0, 0, 0, 0);
    for (uploaded, end) in [(Some(1000), "stop"), (Some(3000), "kill"), (None, "stop")] {
        let (process, address) = files.start(&[], &[]);
        let address = address.expect("serving");
        if client.starting {
            assert!(client.announce(address, ""));
            std::thread::sleep(Duration::from_millis(2500));
        }
        client.uploaded = uploaded.unwrap_or(client.uploaded);
        assert!(client.announce(address, ""));
        std::thread::sleep(Duration::from_millis(2500));
        match end {
            "stop" => drop(process.stop()),
            _ => drop(process.kill()),
        }
        site.take();
    }
    let credited = site.credited(17, 1001);
    assert_eq!(credited.uploaded, 3000, "{credited:?}");
    assert_eq!(credited.credited_uploaded, 4500, "{credited:?}");
    assert_eq!(site.repeated, 0);
}

/// Forty-two runs, most killed at random moments, some by kills injected at each step
/// of a flush (and of the fold into a new base), a few stopped cleanly, with twelve
/// clients announcing, stopping, completing and starting again throughout; reconciled
/// with what they reported.
#[test]
fn kills_at_random_moments_never_credit_twice() {
    const STEPS: [&str; 5] = ["partial", "torn", "journal", "published", "base"];
    let files = Site_::new("random-kills", None);
    let mut random = Random::new();
    let injected = std::cell::Cell::new(0);
    let Outcome {
        site,
        clients,
        risk,
        span,
        kills,
    } = runs(
        &files,
        42,
        &mut random,
        |run, random| {
            // Every fourth run carries an injected kill, the steps in turn.
            if run % 4 != 3 {
                return Vec::new();
            }
            let step = STEPS[injected.get() % STEPS.len()];
            injected.set(injected.get() + 1);
            let n = if step == "base" {
                1
            } else {
                1 + random.below(3)
            };
            vec![("SHOAL_TEST_CRASH_AT".into(), format!("{step}:{n}"))]
        },
        &[],
    );
    assert!(site.batches() > 20, "{} batches", site.batches());
    assert!(kills >= 30, "{kills} kills");
    reconcile(&site, &clients, &risk, span);
    let reported: u64 = clients.iter().map(|client| client.reported().0).sum();
    let at_risk: u64 = risk.values().map(|risk| risk.lost.0).sum();
    eprintln!(
        "{} batches; uploaded reported {reported}, credited {}, at risk {at_risk}",
        site.batches(),
        site.credits.values().map(|c| c.uploaded).sum::<u64>()
    );
}

/// The same in a cluster: the baselines are in the store (a real redis-server), the
/// store's transaction is the commit, and a node killed before its batch file loses
/// those credits but never doubles them.
#[test]
fn a_cluster_node_killed_at_random_moments_never_credits_twice() {
    let redis = shoal_common::testing::RedisServer::start();
    let files = Site_::with(
        "cluster-kills",
        None,
        &format!(
            "[cluster]\nstore = \"{}\"\nname = \"kills\"\nnode = \"a\"\n",
            redis.address()
        ),
    );
    let mut random = Random::new();
    let Outcome {
        site,
        clients,
        risk,
        span,
        kills,
    } = runs(&files, 16, &mut random, |_, _| Vec::new(), &[]);
    assert!(kills >= 10, "{kills} kills");
    assert!(site.batches() > 8, "{} batches", site.batches());
    reconcile(&site, &clients, &risk, span);
}

/// A tmpfs of `size` bytes mounted on `directory` in a mount namespace of its own,
/// held by a process that sleeps: the tracker is started in that namespace, and the
/// test reads the directory through the holder's `/proc/<pid>/root`. Nothing is
/// mounted on the host; the mount goes with the holder (killed when dropped).
struct SmallDisk {
    holder: Process,
    directory: PathBuf,
}

impl SmallDisk {
    /// Needs root (or an unprivileged user namespace): the test fails without.
    fn mount(directory: &std::path::Path, size: usize) -> Self {
        let mut command = Command::new("unshare");
        command.args(["--mount", "--propagation", "private", "sh", "-c"]).arg(format!(
            "mount -t tmpfs -o size={size},mode=0700 shoal-test '{}' && echo mounted >&2 && exec sleep 600",
            directory.display()
        ));
        let mut holder = Process::start(command);
        if holder
            .line_within("mounted", Duration::from_secs(10))
            .is_none()
        {
            panic!(
                "a small tmpfs for the full-disk test needs root (unshare --mount, mount -t \
                 tmpfs): {:#?}",
                holder.log
            );
        }
        Self {
            holder,
            directory: directory.to_owned(),
        }
    }

    /// The mounted directory, as this process reaches it.
    fn seen(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.holder.pid()))
            .join(self.directory.strip_prefix("/").expect("an absolute path"))
    }

    /// The command that runs a program inside the namespace.
    fn enter(&self) -> Vec<String> {
        vec![
            "nsenter".into(),
            format!("--target={}", self.holder.pid()),
            "--mount".into(),
            "--".into(),
        ]
    }

    /// Fills what is left of the disk; the filler's path.
    fn fill(&self) -> PathBuf {
        let filler = self.seen().join(".filler");
        let mut file = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 4096];
        while file.write_all(&block).is_ok() {}
        filler
    }
}

/// A disk that fills up while clients announce: flushes commit nothing and say so,
/// the tracker killed while it is full starts again on its files as they are, and
/// once space is back every byte reported is credited once (less what the kill's
/// window put at risk).
#[test]
fn a_full_disk_delays_batches_and_credits_nothing_twice() {
    let files = Site_::new("full-disk", None);
    let disk = SmallDisk::mount(&files.export, 256 * 1024);
    let enter = disk.enter();
    let enter: Vec<&str> = enter.iter().map(String::as_str).collect();
    let mut site = Site::new(&disk.seen());
    let mut clients = population();
    let mut random = Random::new();
    let began = Instant::now();
    let mut windows = Vec::new();

    // Batches flow.
    let (process, address) = files.start(&[], &enter);
    let address = address.expect("serving");
    for _ in 0..3 {
        announce_round(address, &mut clients, &mut random);
        std::thread::sleep(Duration::from_millis(600));
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert!(site.take() > 0, "batches before the disk filled");
    // The disk fills: nothing is committed, and the log says so.
    let full_since = Instant::now();
    let filler = disk.fill();
    let mut process = process;
    for _ in 0..4 {
        announce_round(address, &mut clients, &mut random);
        std::thread::sleep(Duration::from_millis(600));
    }
    process.line_with("not written");
    assert_eq!(site.take(), 0, "no batch while the disk is full");
    // Killed while full; started again on the full disk.
    process.kill();
    windows.push((full_since - Duration::from_secs(4), Instant::now()));
    let (process, address) = files.start(&[], &enter);
    let address = address.expect("a full disk does not stop the tracker");
    assert!(
        process.logged("not folded into a new base"),
        "{:#?}",
        process.log
    );
    for _ in 0..3 {
        announce_round(address, &mut clients, &mut random);
        std::thread::sleep(Duration::from_millis(600));
    }
    // Space is back: what waited in memory goes out with the next flush.
    std::fs::remove_file(&filler).unwrap();
    for _ in 0..3 {
        announce_round(address, &mut clients, &mut random);
        std::thread::sleep(Duration::from_millis(600));
    }
    for client in &mut clients {
        client.uploaded += 1;
        assert!(client.announce(address, ""));
    }
    std::thread::sleep(Duration::from_millis(2500));
    let log = process.stop();
    assert!(site.take() > 0, "batches once space is back");
    let risk = at_risk(&clients, &windows);
    reconcile(&site, &clients, &risk, began.elapsed());
    assert!(
        !log.iter().any(|line| line.contains("panicked")),
        "{log:#?}"
    );
}

/// A total no client reaches (past `private.max_session_bytes`, 1 PiB) is refused
/// before anything counts it, and credits nothing.
#[test]
fn a_total_no_client_reaches_is_refused_and_credits_nothing() {
    let files = Site_::new("implausible", None);
    let mut site = Site::new(&files.export);
    let (process, address) = files.start(&[], &[]);
    let address = address.expect("serving");
    let mut client = Client::new(0, 0, 0, 0);
    assert!(client.announce(address, ""));
    let target = |uploaded: u64| {
        format!(
            "/{}/announce?info_hash={}&peer_id={}&port=6881&uploaded={uploaded}&downloaded=0&left=0",
            KEYS[0],
            percent(&TORRENTS[0].0),
            percent(&client.peer_id),
        )
    };
    let refused = announce(address, &target((1 << 50) + 1)).expect("an answer");
    assert!(
        refused.contains("uploaded or downloaded total out of range"),
        "{refused}"
    );
    let served = announce(address, &target(1000)).expect("an answer");
    assert!(served.contains("8:interval"), "{served}");
    std::thread::sleep(Duration::from_millis(2500));
    process.stop();
    site.take();
    assert_eq!(site.credited(17, 1001).uploaded, 1000);
}
