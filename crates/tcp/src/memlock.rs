//! Locked memory for io_uring.
//!
//! glommio registers its io_uring buffers with the kernel, which locks them in RAM and
//! counts them against the process's locked-memory limit (RLIMIT_MEMLOCK, `ulimit -l`).
//! Many systems default to 64 KiB or 8 MiB, too little for several socket workers, and
//! the failure deep inside glommio would not say how to fix it. So the limit is checked
//! before any executor starts: if the soft limit is too low but the hard limit allows,
//! the soft limit is raised; otherwise start-up fails with the numbers and the fixes.

use std::sync::Mutex;

use anyhow::bail;

/// glommio's own minimum for the whole process.
pub(crate) const GLOMMIO_MINIMUM: u64 = 512 * 1024;

/// The least `limits.io_memory` a socket worker can run with.
pub(crate) const MIN_IO_MEMORY: usize = 64 * 1024;

/// Checks a `limits.io_memory` value.
pub fn validate_io_memory(problems: &mut shoal_common::Problems, io_memory: usize) {
    // Locked memory per socket worker: 1 GiB is far past what a worker's io_uring
    // buffers can use.
    problems.within("io_memory", io_memory, MIN_IO_MEMORY..=1 << 30);
}

/// Locked memory `executors` executors with `io_memory` bytes each lock.
pub(crate) fn own_share(executors: usize, io_memory: usize) -> u64 {
    executors as u64 * io_memory as u64
}

/// The locked-memory limit a process needs for io_uring trackers with `shares`
/// (socket workers, `limits.io_memory`) each: every share and glommio's own minimum,
/// as the start-up check counts it (`shoal check-host` compares it with the limits).
pub fn locked_memory_needed(shares: &[(usize, usize)]) -> u64 {
    shares
        .iter()
        .map(|&(executors, io_memory)| own_share(executors, io_memory))
        .sum::<u64>()
        + GLOMMIO_MINIMUM
}

/// Locked memory the io_uring trackers of this process hold between them: in the
/// combined `shoal` process the HTTP and WebTorrent trackers share one limit, so each
/// is checked against what the others already hold.
static CLAIMED: Mutex<u64> = Mutex::new(0);

/// A tracker's share of the locked-memory limit, given back when it is dropped (when
/// the tracker stops, or never serves).
#[derive(Debug)]
pub(crate) struct MemlockClaim {
    bytes: u64,
}

impl Drop for MemlockClaim {
    fn drop(&mut self) {
        let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
        *claimed = claimed.saturating_sub(self.bytes);
    }
}

/// Claims the locked memory of `executors` executors with `io_memory` bytes of io_uring
/// buffers each for tracker `name`, on top of what other trackers of this process
/// hold, raising the soft limit when the hard limit allows; an error with the numbers
/// and the fixes when it cannot.
pub(crate) fn claim(
    name: &str,
    executors: usize,
    io_memory: usize,
) -> anyhow::Result<MemlockClaim> {
    let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
    let own = own_share(executors, io_memory);
    let need = Need {
        name,
        others: *claimed,
        executors,
        io_memory,
    };
    ensure(&need)?;
    *claimed += own;
    Ok(MemlockClaim { bytes: own })
}

/// What one tracker needs locked, beside what others hold.
struct Need<'a> {
    name: &'a str,
    /// Bytes other trackers of this process hold.
    others: u64,
    executors: usize,
    io_memory: usize,
}

impl Need<'_> {
    /// The limit that covers everyone: every share and glommio's own minimum.
    fn total(&self) -> u64 {
        self.others + own_share(self.executors, self.io_memory) + GLOMMIO_MINIMUM
    }
}

/// Makes sure the soft limit covers `need`, raising it if the hard limit allows.
fn ensure(need: &Need<'_>) -> anyhow::Result<()> {
    let (soft, hard) = current_limits()?;
    let total = need.total();
    match decide(total, soft, hard) {
        Decision::Enough => Ok(()),
        Decision::Raise if set_soft_limit(total, hard).is_ok() => {
            log::info!(
                "{}: raised the locked-memory limit from {} KiB to {} KiB for io_uring",
                need.name,
                soft / 1024,
                total / 1024
            );
            Ok(())
        }
        Decision::Raise | Decision::Refuse => bail!("{}", explain(need, soft, hard)),
    }
}

/// What to do about a soft and hard locked-memory limit when `needed` bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    /// The soft limit covers it.
    Enough,
    /// The hard limit would: raise the soft one.
    Raise,
    /// Nothing this process may do covers it.
    Refuse,
}

fn decide(needed: u64, soft: u64, hard: u64) -> Decision {
    if soft >= needed {
        Decision::Enough
    } else if hard >= needed {
        Decision::Raise
    } else {
        Decision::Refuse
    }
}

/// The error for a limit that is too low: the numbers, and every way to fix it.
fn explain(need: &Need<'_>, soft: u64, hard: u64) -> String {
    let total = need.total();
    let others = if need.others > 0 {
        format!(
            ", plus {} KiB the process's other io_uring trackers hold",
            need.others / 1024
        )
    } else {
        String::new()
    };
    format!(
        "{}: the locked-memory limit (RLIMIT_MEMLOCK) is {} KiB (hard limit {} KiB), but io_uring \
         needs {} KiB here: {} socket worker(s) × limits.io_memory = {} KiB, plus 512 KiB{others}. \
         Raise the limit (`ulimit -l {}` in the starting shell, `LimitMEMLOCK={}` in a systemd \
         unit, or a memlock line in /etc/security/limits.conf), or lower limits.io_memory or \
         socket_workers",
        need.name,
        soft / 1024,
        hard / 1024,
        total.div_ceil(1024),
        need.executors,
        need.io_memory / 1024,
        total.div_ceil(1024),
        total,
    )
}

fn current_limits() -> anyhow::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } != 0 {
        bail!(
            "cannot read the locked-memory limit: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok((limit.rlim_cur, limit.rlim_max))
}

fn set_soft_limit(soft: u64, hard: u64) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;

    #[test]
    fn the_soft_limit_is_raised_only_when_the_hard_limit_allows() {
        let needed = own_share(4, 1 << 20) + GLOMMIO_MINIMUM;
        assert_eq!(decide(needed, needed, needed), Decision::Enough);
        assert_eq!(decide(needed, 64 * KIB, u64::MAX), Decision::Raise);
        assert_eq!(decide(needed, 64 * KIB, needed), Decision::Raise);
        assert_eq!(decide(needed, 64 * KIB, 1024 * KIB), Decision::Refuse);
    }

    #[test]
    fn a_refusal_gives_the_numbers_and_the_fixes() {
        let need = Need {
            name: "http",
            others: 0,
            executors: 4,
            io_memory: 1 << 20,
        };
        let text = explain(&need, 64 * KIB, 64 * KIB);
        assert!(text.starts_with("http: "), "{text}");
        assert!(text.contains("is 64 KiB (hard limit 64 KiB)"), "{text}");
        assert!(
            text.contains("4 socket worker(s) × limits.io_memory = 1024 KiB, plus 512 KiB."),
            "{text}"
        );
        assert!(text.contains("`ulimit -l 4608`"), "{text}");
        assert!(text.contains("LimitMEMLOCK=4718592"), "{text}");
    }

    #[test]
    fn what_other_trackers_hold_counts_and_is_named() {
        let need = Need {
            name: "ws",
            others: 2048 * KIB,
            executors: 2,
            io_memory: 1 << 20,
        };
        assert_eq!(need.total(), (2048 + 2048 + 512) * KIB);
        let text = explain(&need, 64 * KIB, 64 * KIB);
        assert!(text.starts_with("ws: "), "{text}");
        assert!(
            text.contains("plus 2048 KiB the process's other io_uring trackers hold"),
            "{text}"
        );
        assert!(text.contains("`ulimit -l 4608`"), "{text}");
    }

    #[test]
    fn claims_add_up_and_are_given_back() {
        // The only test of this crate that claims.
        let before = *CLAIMED.lock().unwrap();
        let first = claim("test", 1, 64 * 1024).unwrap();
        let second = claim("test", 2, 64 * 1024).unwrap();
        assert_eq!(*CLAIMED.lock().unwrap(), before + 3 * 64 * 1024);
        drop(first);
        assert_eq!(*CLAIMED.lock().unwrap(), before + 2 * 64 * 1024);
        drop(second);
        assert_eq!(*CLAIMED.lock().unwrap(), before);
    }
}
