//! /metrics as documented, both ways: a `shoal` with every feature on (private mode
//! with accounting and both export targets, a cluster through a real redis-server,
//! swarm snapshots, TLS, the admin API) is scraped; every family documents/metrics.md
//! names is exposed under that name, every family exposed is documented, and
//! `promtool` (Debian's prometheus package, installed by scripts/test.sh) checks the
//! scrape, the shipped alerting rules and the dashboard's queries (each series they
//! ask for exposed) and runs the alerting rules' unit tests.

mod support;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use shoal_common::testing::{Process, RedisServer, post_endpoint};
use support::{Announce, Protocol, get, loopback};

const KEY: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";

/// Families a running tracker exposes only once an ACME CA has been talked to
/// (`network.acme_names`): crates/http/tests/acme.rs runs one (pebble).
const NEEDS_ACME: [&str; 2] = ["shoal_acme_orders_total", "shoal_acme_validations_total"];

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every metric family named in documents/metrics.md's tables.
fn documented() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repository().join("documents/metrics.md")).unwrap();
    text.lines()
        .filter_map(|line| line.strip_prefix("| "))
        .filter_map(|row| row.split(" | ").next())
        .flat_map(|cell| cell.split('`').skip(1).step_by(2))
        .filter(|name| name.starts_with("shoal_") || name.starts_with("process_"))
        .map(str::to_owned)
        .collect()
}

/// The families of a scrape in the classic text format (`# TYPE <name> <kind>`).
fn exposed(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split(' ').next())
        .map(str::to_owned)
        .collect()
}

/// The series named in PromQL `expressions`.
fn series_in<'e>(expressions: impl IntoIterator<Item = &'e str>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for expression in expressions {
        let bytes = expression.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            let rest = &expression[at..];
            let starts = rest.starts_with("shoal_") || rest.starts_with("process_");
            let boundary =
                at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
            if starts && boundary {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                at += name.len();
                names.insert(name);
            } else {
                at += 1;
            }
        }
    }
    names
}

fn promtool(args: &[&str], input: Option<&str>) -> Result<String, String> {
    let mut command = Command::new("promtool");
    command
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command
        .spawn()
        .expect("promtool (Debian's prometheus package; scripts/test.sh installs it)");
    if let Some(input) = input {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

/// A `shoal` with every feature on; returns it, its monitoring address and the
/// trackers' addresses.
fn start_everything(
    dir: &Path,
    redis: &RedisServer,
    site: SocketAddr,
) -> (Process, SocketAddr, Vec<(Protocol, SocketAddr)>) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::create_dir_all(dir.join("batches")).unwrap();
    std::fs::create_dir_all(dir.join("state")).unwrap();
    std::fs::write(dir.join("users"), format!("17 {KEY}\n")).unwrap();
    std::fs::write(dir.join("torrents"), format!("{} 1001\n", "aa".repeat(20))).unwrap();
    std::fs::write(dir.join("token"), "f1e2d3c4b5a69788f1e2d3c4b5a69788\n").unwrap();
    std::fs::set_permissions(dir.join("token"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost", "-keyout"])
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .output()
        .expect("openssl");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let private = format!(
        "enabled = true\nusers_path = \"{}\"\ntorrents_path = \"{}\"\n\
         export_directory = \"{}\"\nexport_interval = 1\nexport_url = \"http://{site}/batches\"\n\
         export_redis = \"redis://{}\"\n",
        dir.join("users").display(),
        dir.join("torrents").display(),
        dir.join("batches").display(),
        redis.address()
    );
    let cluster = format!("store = \"{}\"\nname = \"metrics\"\n", redis.address());
    let tls = format!(
        "enable_tls = true\ntls_certificate_path = \"{}\"\ntls_private_key_path = \"{}\"\n",
        dir.join("cert.pem").display(),
        dir.join("key.pem").display()
    );
    let state = format!("directory = \"{}\"\n", dir.join("state").display());
    let mut config = format!(
        "[metrics]\nenabled = true\naddress = \"127.0.0.1:0\"\n\
         [admin]\nenabled = true\naddress = \"127.0.0.1:0\"\ntoken_path = \"{}\"\n",
        dir.join("token").display()
    );
    for name in ["udp", "http", "ws"] {
        let tls = if name == "udp" { "" } else { tls.as_str() };
        config.push_str(&format!(
            "{}{tls}\
             [{name}.private]\n{private}[{name}.cluster]\n{cluster}node = \"{name}\"\n",
            loopback(name)
        ));
        if name != "ws" {
            config.push_str(&format!("[{name}.state]\n{state}"));
        }
    }
    std::fs::write(dir.join("shoal.toml"), config).unwrap();
    // The HTTP and WebTorrent trackers speak TLS here (https://, wss://): the
    // traffic goes to the UDP tracker.
    let mut command = Command::new(support::BINARY);
    command.arg("-c").arg(dir.join("shoal.toml"));
    let mut process = Process::start(command);
    let udp = process.address_after("listening on udp://");
    let monitor = process.address_after("health on http://");
    (process, monitor, vec![(Protocol::Udp, udp)])
}

#[test]
fn every_documented_family_is_exposed_and_every_exposed_one_documented() {
    let redis = RedisServer::start();
    let (site, _batches) = post_endpoint(Vec::new());
    let dir = std::env::temp_dir().join(format!("shoal-metrics-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (process, monitor, trackers) = start_everything(&dir, &redis, site);
    // Some traffic, a batch credited and exported.
    for (uploaded, event) in [(0, "started"), (4096, "")] {
        for &(protocol, address) in &trackers {
            let reply = protocol.announce(
                address,
                &Announce {
                    key: Some(KEY),
                    uploaded,
                    left: 0,
                    event,
                    ..Announce::default()
                },
            );
            assert!(reply.failure.is_none(), "{reply:?}");
        }
    }
    let scrape = || get(monitor, "/metrics");
    assert!(
        shoal_common::testing::eventually(|| {
            scrape().contains("shoal_accounting_exports_total{protocol=\"udp\",target=\"http\",outcome=\"sent\"} 1")
        }),
        "{}",
        scrape()
    );
    let scrape = scrape();
    process.stop();
    let _ = std::fs::remove_dir_all(&dir);

    let exposed = exposed(&scrape);
    let documented = documented();
    let undocumented: Vec<&String> = exposed.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "exposed, not in documents/metrics.md: {undocumented:?}"
    );
    let missing: Vec<&String> = documented
        .difference(&exposed)
        .filter(|name| !NEEDS_ACME.contains(&name.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "in documents/metrics.md, not exposed: {missing:?}"
    );
    assert!(
        !scrape.contains("_total_total"),
        "a counter named with its own _total"
    );

    promtool(&["check", "metrics"], Some(&scrape)).unwrap_or_else(|problems| panic!("{problems}"));

    // The shipped alerting rules: valid, unit-tested, over series shoal exposes.
    let alerts = repository().join("packaging/prometheus/shoal-alerts.yml");
    let text = std::fs::read_to_string(&alerts).unwrap();
    promtool(&["check", "rules", alerts.to_str().unwrap()], None)
        .unwrap_or_else(|problems| panic!("{problems}"));
    let tests = repository().join("packaging/prometheus/shoal-alerts.test.yml");
    promtool(&["test", "rules", tests.to_str().unwrap()], None)
        .unwrap_or_else(|problems| panic!("{problems}"));
    let expressions: Vec<&str> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("expr: "))
        .collect();
    let asked = series_in(expressions.iter().copied());
    let samples = sample_names(&scrape);
    let unknown: Vec<&String> = asked.difference(&samples).collect();
    assert!(
        unknown.is_empty(),
        "the alerting rules ask for series shoal does not expose: {unknown:?}"
    );

    // The dashboard's queries (Grafana's variables filled in): valid PromQL, as
    // recording rules, over series shoal exposes.
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repository().join("packaging/grafana/shoal.json")).unwrap(),
    )
    .unwrap();
    let queries: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|panel| panel["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|target| target["expr"].as_str().map(str::to_owned))
        .map(|expr| {
            expr.replace("$__rate_interval", "5m")
                .replace("$instance", ".*")
        })
        .collect();
    assert!(queries.len() > 10, "{} queries", queries.len());
    let unknown: Vec<String> = series_in(queries.iter().map(String::as_str))
        .difference(&samples)
        .cloned()
        .collect();
    assert!(
        unknown.is_empty(),
        "the dashboard asks for series shoal does not expose: {unknown:?}"
    );
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, query) in queries.iter().enumerate() {
        rules.push_str(&format!(
            "      - record: shoal:dashboard_query_{i}\n        expr: {}\n",
            serde_json::Value::String(query.clone())
        ));
    }
    let rules_file =
        std::env::temp_dir().join(format!("shoal-dashboard-rules-{}.yml", std::process::id()));
    std::fs::write(&rules_file, rules).unwrap();
    let checked = promtool(&["check", "rules", rules_file.to_str().unwrap()], None);
    let _ = std::fs::remove_file(&rules_file);
    checked.unwrap_or_else(|problems| panic!("the dashboard's queries: {problems}"));
}

/// The names of the samples of a scrape (a histogram's `_bucket`, `_sum`, `_count`
/// included).
fn sample_names(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}
