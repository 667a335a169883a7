//! The process's own use of memory, CPU and file descriptors, under the names every
//! Prometheus client library gives them (`process_resident_memory_bytes`, ...), read
//! from `/proc/self` when scraped.
//!
//! These are what an operator's alerts are written against: resident memory is most
//! of what a memory limit under systemd (`MemoryMax=`, which also counts the kernel's
//! socket buffers and page cache) counts, and a tracker that runs out of
//! file descriptors stops accepting connections. Dashboards and alert rules written
//! for any other service work unchanged with the standard names. Nothing here runs on
//! the request path.

use shoal_common::Observation;

/// What `/proc/self` says about this process.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ProcessStats {
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident memory (RSS), in bytes.
    pub resident_bytes: u64,
    /// Virtual memory, in bytes.
    pub virtual_bytes: u64,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
    /// File descriptors open now.
    pub open_fds: u64,
    /// The most it may open (`RLIMIT_NOFILE`, soft), if limited.
    pub max_fds: Option<u64>,
}

/// Adds the `process_*` families to `out`; nothing where `/proc` cannot be read.
pub(crate) fn observe(out: &mut Observation) {
    let Some(stats) = ProcessStats::read() else {
        return;
    };
    out.counter_seconds(
        "process_cpu_seconds",
        "Total user and system CPU time spent in seconds.",
        stats.cpu_seconds,
    );
    out.gauge(
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        &[],
        stats.resident_bytes as f64,
    );
    out.gauge(
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes.",
        &[],
        stats.virtual_bytes as f64,
    );
    out.gauge(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        &[],
        stats.start_time_seconds,
    );
    out.gauge(
        "process_open_fds",
        "Number of open file descriptors.",
        &[],
        stats.open_fds as f64,
    );
    if let Some(max) = stats.max_fds {
        out.gauge(
            "process_max_fds",
            "Maximum number of open file descriptors.",
            &[],
            max as f64,
        );
    }
}

impl ProcessStats {
    /// Reads this process's figures; `None` where `/proc` is not there.
    pub(crate) fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot_time = boot_time(&std::fs::read_to_string("/proc/stat").ok()?)?;
        // SAFETY: sysconf only reads a system constant.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if ticks <= 0 || page <= 0 {
            return None;
        }
        let stat = parse_stat(&stat)?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        Some(Self {
            cpu_seconds: (stat.utime + stat.stime) as f64 / ticks as f64,
            resident_bytes: stat.rss_pages * page as u64,
            virtual_bytes: stat.vsize,
            start_time_seconds: boot_time as f64 + stat.start_ticks as f64 / ticks as f64,
            // The listing of /proc/self/fd holds a descriptor of its own while it runs.
            open_fds: open_fds.saturating_sub(1),
            max_fds: max_fds(),
        })
    }
}

/// The fields of `/proc/self/stat` used here, in the kernel's units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    utime: u64,
    stime: u64,
    start_ticks: u64,
    vsize: u64,
    rss_pages: u64,
}

/// Parses `/proc/<pid>/stat` (proc(5)). The command name in parentheses may hold
/// spaces and parentheses itself, so fields are counted from the last `)`.
fn parse_stat(stat: &str) -> Option<Stat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: state is field 3; utime 14, stime 15, starttime 22, vsize 23,
    // rss 24 (1-based, as proc(5) numbers them).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        start_ticks: field(22)?,
        vsize: field(23)?,
        rss_pages: field(24)?,
    })
}

/// The `btime` line of `/proc/stat`: when the system booted, in seconds since the
/// epoch.
fn boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

fn max_fds() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct it is given.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    (ok && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with a space and a parenthesis, as a thread may be named.
        let line = "4242 (shoal (x) 1) S 1 4242 4242 0 -1 4194560 1200 0 0 0 \
                    150 25 0 0 20 0 9 0 123456 987654321 3000 18446744073709551615 \
                    1 1 0 0 0 0 0 4096 0 0 0 0 17 0 0 0 0 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                utime: 150,
                stime: 25,
                start_ticks: 123456,
                vsize: 987654321,
                rss_pages: 3000,
            })
        );
        assert_eq!(parse_stat("4242 (cut short) S 1 2"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn boot_time_is_the_btime_line() {
        assert_eq!(
            boot_time("cpu  1 2 3\nintr 5\nbtime 1763942400\nprocesses 9\n"),
            Some(1_763_942_400)
        );
        assert_eq!(boot_time("cpu  1 2 3\n"), None);
    }

    #[test]
    fn this_process_reads_as_a_live_process() {
        let stats = ProcessStats::read().expect("/proc/self is readable (Linux)");
        // A buffer of 128 MiB, written, shows in resident memory.
        let before = stats.resident_bytes;
        let buffer = std::hint::black_box(vec![1u8; 128 << 20]);
        let touched: u64 = buffer.iter().step_by(4096).map(|&b| u64::from(b)).sum();
        let after = ProcessStats::read().unwrap();
        assert_eq!(touched, 32_768);
        assert!(
            after.resident_bytes >= before + (100 << 20),
            "{before} -> {}",
            after.resident_bytes
        );
        assert!(after.virtual_bytes >= after.resident_bytes);
        drop(buffer);
        // At least the file held open here (other tests open and close their own).
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        let with_file = ProcessStats::read().unwrap();
        drop(file);
        assert!(with_file.open_fds >= 1);
        if let Some(max) = with_file.max_fds {
            assert!(max >= with_file.open_fds);
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            stats.start_time_seconds <= now + 1.0 && stats.start_time_seconds > now - 86_400.0,
            "started at {} (now {now})",
            stats.start_time_seconds
        );
        assert!(after.cpu_seconds >= stats.cpu_seconds && stats.cpu_seconds >= 0.0);
    }
}
