//! `shoal check-host [-c FILE]`: reads this host and says, with the fix for each, what a
//! busy tracker of that config would run into: socket-buffer ceilings, conntrack on the
//! UDP port, UDP early demux, locked memory and open files against the config, which
//! backend the configured `io_backend` gets here, and CPUs against the worker threads.
//!
//! Sans-IO: [`read_host`] gathers the facts (files under a root directory, so tests
//! give it a tree of their own; limits and the io_uring probe from the kernel),
//! [`Needs::of`] takes what the config asks for, and [`check`] compares the two.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use shoal_common::IoBackend;

use crate::config::{SectionParts as _, ShoalConfig};

pub(crate) const USAGE: &str = "\
shoal check-host: is this host set up for a busy tracker of this config?

Usage: shoal check-host [-c FILE]

Reads the config as the tracker does (FILE, then SHOAL__ variables) and this host
(sysctls, conntrack, the limits of this shell, io_uring, CPUs), and prints one line
per check: `ok`, or `tune` with what to change and how. Limits are this shell's:
under systemd the unit's LimitNOFILE= and LimitMEMLOCK= apply instead (the shipped
units set both). documents/deployment.md, \"Host tuning\", explains each.
Exit status: 0 when every check is ok, 1 when something should change, 2 for a
command-line mistake.
";

/// Where the host-tuning section is, for every fix.
const GUIDE: &str = "documents/deployment.md, \"Host tuning\"";

/// What the host has, as far as a tracker cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Host {
    /// CPUs this process may run on.
    pub cpus: usize,
    /// `net.core.rmem_max`, `net.core.wmem_max` (bytes), when readable.
    pub rmem_max: Option<u64>,
    pub wmem_max: Option<u64>,
    /// `net.ipv4.udp_early_demux`, when readable.
    pub udp_early_demux: Option<u64>,
    /// Connection tracking: `None` when the module is not loaded.
    pub conntrack: Option<Conntrack>,
    /// RLIMIT_MEMLOCK and RLIMIT_NOFILE, soft and hard (`u64::MAX`: unlimited).
    pub memlock: (u64, u64),
    pub nofile: (u64, u64),
    /// Whether io_uring can be set up here; the reason when not.
    pub io_uring: Result<(), String>,
}

/// Connection tracking, when its module is loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Conntrack {
    /// `net.netfilter.nf_conntrack_count` and `_max`.
    pub count: u64,
    pub max: u64,
    /// UDP entries whose original destination port is one of the tracker's, when
    /// `/proc/net/nf_conntrack` is readable (root): proof that announces are tracked.
    pub tracked_udp: Option<u64>,
}

/// What the config asks of the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Needs {
    /// The UDP tracker's ports and receive buffer, when it runs.
    pub udp: Option<UdpNeeds>,
    /// Each TCP tracker that runs.
    pub tcp: Vec<TcpNeeds>,
    /// Worker threads of every tracker together, with how they add up.
    pub threads: usize,
    pub threads_by_tracker: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UdpNeeds {
    pub ports: Vec<u16>,
    pub recv_buffer: u64,
    pub sockets: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TcpNeeds {
    pub name: &'static str,
    pub backend: IoBackend,
    pub socket_workers: usize,
    pub io_memory: usize,
    /// Open connections at the limit: socket workers × `network.max_connections`.
    pub connections: u64,
    /// The larger of each connection's kernel send and receive buffers.
    pub connection_buffer: u64,
}

impl Needs {
    pub(crate) fn of(config: &ShoalConfig) -> Self {
        let trackers = config.tracker();
        let mut threads = 0;
        let mut by_tracker = Vec::new();
        let mut count = |name: &str, sockets: usize, swarms: usize| {
            threads += sockets + swarms;
            by_tracker.push(format!("{name} {sockets}+{swarms}"));
        };
        let udp = trackers.udp.enabled().then(|| {
            let udp = trackers.udp.tracker();
            let network = &udp.network;
            let (sockets, swarms) = (udp.socket_worker_count(), udp.swarm_worker_count());
            count("udp", sockets, swarms);
            let mut ports = Vec::new();
            let families = [
                (network.use_ipv4, network.address_ipv4),
                (network.use_ipv6, network.address_ipv6),
            ];
            for (used, address) in families {
                if used && !ports.contains(&address.port()) {
                    ports.push(address.port());
                }
            }
            let per_family = families.iter().filter(|(used, _)| *used).count() as u64;
            UdpNeeds {
                ports,
                recv_buffer: network.socket_recv_buffer_size as u64,
                sockets: sockets as u64 * per_family,
            }
        });
        let mut tcp = Vec::new();
        if trackers.http.enabled() {
            let http = trackers.http.tracker();
            let (sockets, swarms) = (http.socket_worker_count(), http.swarm_worker_count());
            count("http", sockets, swarms);
            tcp.push(TcpNeeds {
                name: "http",
                backend: http.network.io_backend,
                socket_workers: sockets,
                io_memory: http.limits.io_memory,
                connections: (sockets * http.network.max_connections) as u64,
                connection_buffer: http
                    .network
                    .socket_send_buffer_size
                    .max(http.network.socket_recv_buffer_size)
                    as u64,
            });
        }
        if trackers.ws.enabled() {
            let ws = trackers.ws.tracker();
            let (sockets, swarms) = (ws.socket_worker_count(), ws.swarm_worker_count());
            count("ws", sockets, swarms);
            tcp.push(TcpNeeds {
                name: "ws",
                backend: ws.network.io_backend,
                socket_workers: sockets,
                io_memory: ws.limits.io_memory,
                connections: (sockets * ws.network.max_connections) as u64,
                connection_buffer: ws
                    .network
                    .socket_send_buffer_size
                    .max(ws.network.socket_recv_buffer_size)
                    as u64,
            });
        }
        Self {
            udp,
            tcp,
            threads,
            threads_by_tracker: by_tracker.join(", "),
        }
    }
}

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing to change.
    Ok,
    /// The tracker runs, but a busy one loses something: change it.
    Tune,
}

/// One check's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Finding {
    pub verdict: Verdict,
    /// What was checked, in two or three words.
    pub topic: &'static str,
    /// What was found.
    pub found: String,
    /// What to do, for `Tune`.
    pub fix: Option<String>,
}

fn ok(topic: &'static str, found: String) -> Finding {
    Finding {
        verdict: Verdict::Ok,
        topic,
        found,
        fix: None,
    }
}

fn tune(topic: &'static str, found: String, fix: String) -> Finding {
    Finding {
        verdict: Verdict::Tune,
        topic,
        found,
        fix: Some(fix),
    }
}

/// Every check of `host` against `needs`, in the order they are printed.
pub(crate) fn check(host: &Host, needs: &Needs) -> Vec<Finding> {
    let mut findings = vec![check_cpus(host, needs)];
    if let Some(udp) = &needs.udp {
        findings.push(check_udp_buffer(host, udp));
        findings.push(check_conntrack(host, udp));
        findings.push(check_early_demux(host));
    }
    if let Some(finding) = check_connection_buffers(host, &needs.tcp) {
        findings.push(finding);
    }
    findings.extend(check_backends(host, &needs.tcp));
    findings.push(check_open_files(host, needs));
    findings
}

fn check_cpus(host: &Host, needs: &Needs) -> Finding {
    let found = format!(
        "{} worker threads ({}) on {} CPUs",
        needs.threads, needs.threads_by_tracker, host.cpus
    );
    if needs.threads <= host.cpus {
        ok("cpus", found)
    } else {
        tune(
            "cpus",
            format!("{found}: workers share cores, and a busy one waits for another"),
            "lower socket_workers and swarm_workers (socket_workers = 0 takes the CPUs the \
             swarm workers leave), or run fewer trackers in this process"
                .into(),
        )
    }
}

fn check_udp_buffer(host: &Host, udp: &UdpNeeds) -> Finding {
    let Some(rmem_max) = host.rmem_max else {
        return ok(
            "udp buffer",
            "net.core.rmem_max is not readable here; nothing to compare".into(),
        );
    };
    if udp.recv_buffer <= rmem_max {
        return ok(
            "udp buffer",
            format!(
                "net.core.rmem_max {rmem_max} covers the UDP receive buffer ({} bytes)",
                udp.recv_buffer
            ),
        );
    }
    tune(
        "udp buffer",
        format!(
            "net.core.rmem_max is {rmem_max} bytes, below the configured UDP receive buffer of {} \
             (network.socket_recv_buffer_size): the sockets get {rmem_max}, bursts are dropped \
             sooner, and the overload shrink cannot grow the buffer back",
            udp.recv_buffer
        ),
        format!(
            "sysctl -w net.core.rmem_max={} (and the same line in /etc/sysctl.d/60-shoal.conf)",
            udp.recv_buffer
        ),
    )
}

fn check_connection_buffers(host: &Host, tcp: &[TcpNeeds]) -> Option<Finding> {
    let largest = tcp.iter().map(|t| t.connection_buffer).max()?;
    let ceiling = host.rmem_max?.min(host.wmem_max?);
    Some(if largest <= ceiling {
        ok(
            "tcp buffers",
            format!("rmem_max and wmem_max cover the connection buffers ({largest} bytes)"),
        )
    } else {
        tune(
            "tcp buffers",
            format!(
                "a connection buffer of {largest} bytes (network.socket_send_buffer_size or \
                 socket_recv_buffer_size) is above net.core.rmem_max or wmem_max ({ceiling}): \
                 connections get the ceiling"
            ),
            format!("sysctl -w net.core.rmem_max={largest} net.core.wmem_max={largest}"),
        )
    })
}

fn notrack_rules(ports: &[u16]) -> String {
    let ports = if ports.len() == 1 {
        ports[0].to_string()
    } else {
        let list: Vec<String> = ports.iter().map(u16::to_string).collect();
        format!("{{ {} }}", list.join(", "))
    };
    format!(
        "exempt the tracker's UDP port from conntrack (nftables): \
         nft add table inet shoal_notrack; \
         nft add chain inet shoal_notrack pre '{{ type filter hook prerouting priority raw; }}'; \
         nft add rule inet shoal_notrack pre udp dport {ports} notrack; \
         nft add chain inet shoal_notrack out '{{ type filter hook output priority raw; }}'; \
         nft add rule inet shoal_notrack out udp sport {ports} notrack \
         (keep it in /etc/nftables.conf)"
    )
}

fn check_conntrack(host: &Host, udp: &UdpNeeds) -> Finding {
    let Some(conntrack) = &host.conntrack else {
        return ok(
            "conntrack",
            "connection tracking is not loaded: announces cost no conntrack entry".into(),
        );
    };
    let ports: Vec<String> = udp.ports.iter().map(u16::to_string).collect();
    let ports_text = ports.join(", ");
    let found = match conntrack.tracked_udp {
        Some(0) => {
            return ok(
                "conntrack",
                format!(
                    "connection tracking is loaded ({} of {} entries) but holds no entry for UDP \
                     port {ports_text}: exempt, or no traffic yet (run this again under load)",
                    conntrack.count, conntrack.max
                ),
            );
        }
        Some(entries) => format!(
            "{entries} conntrack entries for UDP port {ports_text} ({} of {} in use): every \
             announce is tracked, and at nf_conntrack_max the kernel drops new packets of every \
             service",
            conntrack.count, conntrack.max
        ),
        None => format!(
            "connection tracking is loaded ({} of {} entries); unless a rule exempts UDP port \
             {ports_text}, every announce makes an entry (/proc/net/nf_conntrack, readable by \
             root, would tell)",
            conntrack.count, conntrack.max
        ),
    };
    tune("conntrack", found, notrack_rules(&udp.ports))
}

fn check_early_demux(host: &Host) -> Finding {
    match host.udp_early_demux {
        Some(1) => tune(
            "udp early demux",
            "net.ipv4.udp_early_demux is 1: each datagram pays a lookup for a connected socket, \
             and a tracker's sockets are not connected"
                .into(),
            "sysctl -w net.ipv4.udp_early_demux=0 (a few percent of a busy core; keep it at 1 if \
             the host also serves connected UDP, such as QUIC clients)"
                .into(),
        ),
        Some(value) => ok(
            "udp early demux",
            format!("net.ipv4.udp_early_demux is {value}"),
        ),
        None => ok(
            "udp early demux",
            "net.ipv4.udp_early_demux is not readable here".into(),
        ),
    }
}

fn kib(bytes: u64) -> String {
    if bytes == u64::MAX {
        "unlimited".into()
    } else {
        format!("{} KiB", bytes / 1024)
    }
}

/// Which backend each TCP tracker gets, and whether locked memory allows io_uring.
fn check_backends(host: &Host, tcp: &[TcpNeeds]) -> Vec<Finding> {
    let wanting: Vec<&TcpNeeds> = tcp
        .iter()
        .filter(|t| t.backend != IoBackend::Epoll)
        .collect();
    let shares: Vec<(usize, usize)> = wanting
        .iter()
        .map(|t| (t.socket_workers, t.io_memory))
        .collect();
    let needed = shoal_tcp::locked_memory_needed(&shares);
    let (_, hard) = host.memlock;
    let mut findings = Vec::new();
    for tracker in tcp {
        let topic = if tracker.name == "http" {
            "http backend"
        } else {
            "ws backend"
        };
        // What `auto` does where io_uring is refused; a forced `io_uring` does not start.
        let instead = if tracker.backend == IoBackend::IoUring {
            "the configured io_uring will not start"
        } else {
            "`auto` serves with epoll"
        };
        let finding = match (tracker.backend, &host.io_uring) {
            (IoBackend::Epoll, _) => ok(topic, format!("{}: epoll", tracker.name)),
            (_, Err(reason)) => tune(
                topic,
                format!(
                    "{}: io_uring cannot be set up here ({reason}); {instead}",
                    tracker.name
                ),
                "nothing, if epoll suits you (the default, measured faster: \
                 documents/benchmarks/backends-2026-11-29.md): remove network.io_backend \
                 or set it to \"epoll\"; otherwise allow io_uring as the reason says"
                    .into(),
            ),
            (_, Ok(())) if hard < needed => tune(
                topic,
                format!(
                    "{}: io_uring is available, but the locked-memory limit ({} hard) is below \
                     the {} the io_uring trackers need together: {instead}",
                    tracker.name,
                    kib(hard),
                    kib(needed)
                ),
                format!(
                    "LimitMEMLOCK=infinity in the unit (the shipped units have it), `ulimit -l {}` \
                     in a shell, or a memlock line in /etc/security/limits.conf",
                    needed.div_ceil(1024)
                ),
            ),
            (_, Ok(())) => ok(
                topic,
                format!(
                    "{}: io_uring (locked memory: {} needed, {} allowed)",
                    tracker.name,
                    kib(needed),
                    kib(hard)
                ),
            ),
        };
        findings.push(finding);
    }
    findings
}

fn check_open_files(host: &Host, needs: &Needs) -> Finding {
    // Each connection, each UDP socket, the listeners, and room for the process's own
    // (log, metrics, snapshots, the executors' descriptors). The tracker raises its
    // soft limit to the hard one at start, so the hard limit is what counts.
    let connections: u64 = needs.tcp.iter().map(|t| t.connections).sum();
    let udp_sockets = needs.udp.as_ref().map_or(0, |udp| udp.sockets);
    let needed = connections + udp_sockets + 1024;
    let (soft, hard) = host.nofile;
    let found = format!(
        "open files: {} soft, {} hard (the tracker raises the soft limit to the hard one); \
         at every connection limit the trackers hold about {needed}",
        limit_text(soft),
        limit_text(hard)
    );
    if hard >= needed {
        ok("open files", found)
    } else {
        tune(
            "open files",
            format!("{found}: past the hard limit new connections fail to be accepted"),
            format!(
                "LimitNOFILE={} or more in the unit (the shipped units have 1048576), or \
                 `ulimit -Hn {needed}` before starting; or lower network.max_connections",
                needed.max(1_048_576)
            ),
        )
    }
}

fn limit_text(limit: u64) -> String {
    if limit == u64::MAX {
        "unlimited".into()
    } else {
        limit.to_string()
    }
}

/// Reads the host's facts: sysctls and conntrack under `root` (`/` but in tests), the
/// limits, CPUs and io_uring from the kernel; conntrack entries are counted for
/// `udp_ports`.
pub(crate) fn read_host(root: &Path, udp_ports: &[u16]) -> Host {
    let number = |path: &str| -> Option<u64> {
        std::fs::read_to_string(root.join(path))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let conntrack = number("proc/sys/net/netfilter/nf_conntrack_max").map(|max| Conntrack {
        count: number("proc/sys/net/netfilter/nf_conntrack_count").unwrap_or(0),
        max,
        tracked_udp: std::fs::read_to_string(root.join("proc/net/nf_conntrack"))
            .ok()
            .map(|table| count_udp_entries(&table, udp_ports)),
    });
    Host {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        rmem_max: number("proc/sys/net/core/rmem_max"),
        wmem_max: number("proc/sys/net/core/wmem_max"),
        udp_early_demux: number("proc/sys/net/ipv4/udp_early_demux"),
        conntrack,
        memlock: rlimit(libc::RLIMIT_MEMLOCK),
        nofile: rlimit(libc::RLIMIT_NOFILE),
        io_uring: shoal_tcp::io_uring_available().map_err(|err| format!("{err:#}")),
    }
}

/// UDP entries of a `/proc/net/nf_conntrack` table whose first (original direction)
/// destination port is one of `ports`.
fn count_udp_entries(table: &str, ports: &[u16]) -> u64 {
    table
        .lines()
        .filter(|line| line.split_whitespace().nth(2) == Some("udp"))
        .filter(|line| {
            line.split_whitespace()
                .find_map(|field| field.strip_prefix("dport="))
                .and_then(|port| port.parse::<u16>().ok())
                .is_some_and(|port| ports.contains(&port))
        })
        .count() as u64
}

fn rlimit(resource: libc::__rlimit_resource_t) -> (u64, u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(resource, &mut limit) } != 0 {
        return (0, 0);
    }
    let value = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            v
        }
    };
    (value(limit.rlim_cur), value(limit.rlim_max))
}

/// The report, one block per finding, and a last line with the count to change.
pub(crate) fn report(findings: &[Finding]) -> String {
    let mut out = String::new();
    for finding in findings {
        let word = match finding.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Tune => "tune",
        };
        let _ = writeln!(out, "{word}  {:<16} {}", finding.topic, finding.found);
        if let Some(fix) = &finding.fix {
            let _ = writeln!(out, "      {:<16} fix: {fix}", "");
        }
    }
    let to_change = findings
        .iter()
        .filter(|f| f.verdict == Verdict::Tune)
        .count();
    if to_change == 0 {
        let _ = writeln!(out, "every check is ok");
    } else {
        let _ = writeln!(
            out,
            "{to_change} thing(s) to change for a busy tracker ({GUIDE})"
        );
    }
    out
}

/// Runs the checks for `config` on this host and prints the report.
#[allow(clippy::print_stdout)] // the report is the output
pub(crate) fn run(config: &ShoalConfig) -> ExitCode {
    let needs = Needs::of(config);
    let ports = needs
        .udp
        .as_ref()
        .map(|udp| udp.ports.clone())
        .unwrap_or_default();
    let findings = check(&read_host(Path::new("/"), &ports), &needs);
    print!("{}", report(&findings));
    if findings.iter().all(|f| f.verdict == Verdict::Ok) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host with room for the default config.
    fn roomy() -> Host {
        Host {
            cpus: 16,
            rmem_max: Some(33_554_432),
            wmem_max: Some(8_388_608),
            udp_early_demux: Some(0),
            conntrack: None,
            memlock: (u64::MAX, u64::MAX),
            nofile: (1_048_576, 1_048_576),
            io_uring: Ok(()),
        }
    }

    fn defaults() -> Needs {
        Needs::of(&ShoalConfig::default())
    }

    fn verdict_of(findings: &[Finding], topic: &str) -> Finding {
        findings
            .iter()
            .find(|f| f.topic == topic)
            .unwrap_or_else(|| panic!("no {topic} in {findings:?}"))
            .clone()
    }

    #[test]
    fn the_default_config_reads_its_needs() {
        let needs = defaults();
        let udp = needs.udp.as_ref().unwrap();
        assert_eq!(udp.ports, [6969]);
        assert_eq!(udp.recv_buffer, 8 * 1024 * 1024);
        assert_eq!(udp.sockets, 2); // one worker, two families
        assert_eq!(needs.tcp.len(), 2);
        assert_eq!(needs.tcp[0].name, "http");
        assert_eq!(needs.tcp[0].connections, 10_000);
        assert_eq!(needs.tcp[1].connections, 50_000);
        assert_eq!(needs.threads, 3);
        assert_eq!(needs.threads_by_tracker, "udp 1+0, http 1+0, ws 1+0");
    }

    #[test]
    fn a_roomy_host_passes_every_check() {
        let findings = check(&roomy(), &defaults());
        assert!(
            findings.iter().all(|f| f.verdict == Verdict::Ok),
            "{}",
            report(&findings)
        );
        assert!(report(&findings).ends_with("every check is ok\n"));
    }

    #[test]
    fn a_low_rmem_max_asks_for_the_configured_buffer() {
        let host = Host {
            rmem_max: Some(212_992),
            ..roomy()
        };
        let finding = verdict_of(&check(&host, &defaults()), "udp buffer");
        assert_eq!(finding.verdict, Verdict::Tune);
        assert!(finding.found.contains("212992"), "{finding:?}");
        assert_eq!(
            finding.fix.unwrap(),
            "sysctl -w net.core.rmem_max=8388608 (and the same line in /etc/sysctl.d/60-shoal.conf)"
        );
    }

    #[test]
    fn conntrack_is_judged_by_its_entries_for_the_port() {
        let with = |tracked_udp| Host {
            conntrack: Some(Conntrack {
                count: 120,
                max: 262_144,
                tracked_udp,
            }),
            ..roomy()
        };
        let tracked = verdict_of(&check(&with(Some(97)), &defaults()), "conntrack");
        assert_eq!(tracked.verdict, Verdict::Tune);
        assert!(
            tracked
                .found
                .starts_with("97 conntrack entries for UDP port 6969")
        );
        assert!(tracked.fix.unwrap().contains("udp dport 6969 notrack"));
        let unknown = verdict_of(&check(&with(None), &defaults()), "conntrack");
        assert_eq!(unknown.verdict, Verdict::Tune);
        let exempt = verdict_of(&check(&with(Some(0)), &defaults()), "conntrack");
        assert_eq!(exempt.verdict, Verdict::Ok);
    }

    #[test]
    fn io_uring_refused_or_short_of_locked_memory_means_epoll() {
        let refused = Host {
            io_uring: Err("a seccomp filter hides it".into()),
            ..roomy()
        };
        // The default, epoll, needs neither.
        let findings = check(&refused, &defaults());
        assert_eq!(verdict_of(&findings, "http backend").verdict, Verdict::Ok);
        assert_eq!(verdict_of(&findings, "ws backend").verdict, Verdict::Ok);
        let auto: ShoalConfig = shoal_common::parse_config(
            "[http.network]\nio_backend = \"auto\"\n[ws.network]\nio_backend = \"auto\"\n",
        )
        .unwrap();
        let finding = verdict_of(&check(&refused, &Needs::of(&auto)), "http backend");
        assert_eq!(finding.verdict, Verdict::Tune);
        assert!(finding.found.contains("`auto` serves with epoll"));
        let forced: ShoalConfig =
            shoal_common::parse_config("[http.network]\nio_backend = \"io_uring\"\n").unwrap();
        let finding = verdict_of(&check(&refused, &Needs::of(&forced)), "http backend");
        assert!(
            finding.found.contains("io_uring will not start"),
            "{finding:?}"
        );
        // The io_uring trackers need 2 × 1 MiB + 512 KiB.
        let short = Host {
            memlock: (64 * 1024, 2 * 1024 * 1024),
            ..roomy()
        };
        let findings = check(&short, &Needs::of(&auto));
        let finding = verdict_of(&findings, "ws backend");
        assert_eq!(finding.verdict, Verdict::Tune, "{}", report(&findings));
        assert!(
            finding
                .found
                .contains("(2048 KiB hard) is below the 2560 KiB"),
            "{finding:?}"
        );
    }

    #[test]
    fn open_files_and_cpus_are_counted_against_the_config() {
        let small = Host {
            cpus: 2,
            nofile: (1024, 4096),
            ..roomy()
        };
        let config: ShoalConfig =
            shoal_common::parse_config("[udp]\nsocket_workers = 2\n[http]\nsocket_workers = 2\n")
                .unwrap();
        let findings = check(&small, &Needs::of(&config));
        let files = verdict_of(&findings, "open files");
        assert_eq!(files.verdict, Verdict::Tune);
        // http 2 × 10,000 + ws 50,000 + 4 UDP sockets + 1,024.
        assert!(files.found.contains("about 71028"), "{files:?}");
        let cpus = verdict_of(&findings, "cpus");
        assert_eq!(cpus.verdict, Verdict::Tune);
        assert!(
            cpus.found
                .starts_with("7 worker threads (udp 2+1, http 2+1, ws 1+0) on 2 CPUs")
        );
    }

    #[test]
    fn early_demux_on_is_worth_turning_off() {
        let on = Host {
            udp_early_demux: Some(1),
            ..roomy()
        };
        let finding = verdict_of(&check(&on, &defaults()), "udp early demux");
        assert_eq!(finding.verdict, Verdict::Tune);
        assert!(
            finding
                .fix
                .unwrap()
                .starts_with("sysctl -w net.ipv4.udp_early_demux=0")
        );
    }

    #[test]
    fn the_host_is_read_from_its_files() {
        let root = std::env::temp_dir().join(format!("shoal-check-host-{}", std::process::id()));
        let write = |path: &str, text: &str| {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("proc/sys/net/core/rmem_max", "212992\n");
        write("proc/sys/net/core/wmem_max", "212992\n");
        write("proc/sys/net/ipv4/udp_early_demux", "1\n");
        write("proc/sys/net/netfilter/nf_conntrack_max", "262144\n");
        write("proc/sys/net/netfilter/nf_conntrack_count", "3\n");
        write(
            "proc/net/nf_conntrack",
            "ipv4     2 udp      17 29 src=10.0.0.2 dst=10.0.0.1 sport=51413 dport=6969 \
             src=10.0.0.1 dst=10.0.0.2 sport=6969 dport=51413 mark=0 zone=0 use=2\n\
             ipv6     10 udp      17 29 src=2001:db8::2 dst=2001:db8::1 sport=4000 dport=6969 \
             src=2001:db8::1 dst=2001:db8::2 sport=6969 dport=4000 mark=0 zone=0 use=2\n\
             ipv4     2 tcp      6 431999 ESTABLISHED src=10.0.0.2 dst=10.0.0.1 sport=40000 \
             dport=6969 src=10.0.0.1 dst=10.0.0.2 sport=6969 dport=40000 mark=0 zone=0 use=2\n\
             ipv4     2 udp      17 29 src=10.0.0.2 dst=10.0.0.9 sport=5353 dport=53 \
             src=10.0.0.9 dst=10.0.0.2 sport=53 dport=5353 mark=0 zone=0 use=2\n",
        );
        let host = read_host(&root, &[6969]);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(host.rmem_max, Some(212_992));
        assert_eq!(host.wmem_max, Some(212_992));
        assert_eq!(host.udp_early_demux, Some(1));
        assert_eq!(
            host.conntrack,
            Some(Conntrack {
                count: 3,
                max: 262_144,
                tracked_udp: Some(2)
            })
        );
        assert!(host.cpus >= 1);
        // Nothing under an empty root: every sysctl unknown, conntrack not loaded.
        let empty = read_host(Path::new("/nonexistent-root"), &[6969]);
        assert_eq!((empty.rmem_max, empty.conntrack), (None, None));
    }
}
