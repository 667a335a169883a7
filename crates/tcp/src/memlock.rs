//! Locked memory for io_uring.
//!
//! glommio registers its io_uring buffers with the kernel, which locks them in RAM and
//! counts them against the process's locked-memory limit (RLIMIT_MEMLOCK, `ulimit -l`).
//! Many systems default to 64 KiB or 8 MiB, too little for several socket workers, and
//! the failure deep inside glommio would not say how to fix it. So the limit is checked
//! before any executor starts: if the soft limit is too low but the hard limit allows,
//! the soft limit is raised; otherwise start-up fails with the numbers and the fixes.

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

/// Locked memory needed for `executors` executors with `io_memory` bytes each.
pub(crate) fn needed(executors: usize, io_memory: usize) -> u64 {
    executors as u64 * io_memory as u64 + GLOMMIO_MINIMUM
}

/// Makes sure the locked-memory limit covers `executors` executors with `io_memory`
/// bytes of io_uring buffers each (see [`ensure`]).
pub(crate) fn ensure_for(executors: usize, io_memory: usize) -> anyhow::Result<()> {
    ensure(needed(executors, io_memory), executors, io_memory)
}

/// Makes sure the soft limit covers `needed` bytes, raising it if the hard limit allows.
pub(crate) fn ensure(needed: u64, executors: usize, io_memory: usize) -> anyhow::Result<()> {
    let (soft, hard) = current_limits()?;
    match decide(needed, soft, hard) {
        Decision::Enough => Ok(()),
        Decision::Raise if set_soft_limit(needed, hard).is_ok() => {
            log::info!(
                "raised the locked-memory limit from {} KiB to {} KiB for io_uring",
                soft / 1024,
                needed / 1024
            );
            Ok(())
        }
        Decision::Raise | Decision::Refuse => {
            bail!("{}", explain(needed, soft, hard, executors, io_memory))
        }
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
fn explain(needed: u64, soft: u64, hard: u64, executors: usize, io_memory: usize) -> String {
    format!(
        "the locked-memory limit (RLIMIT_MEMLOCK) is {} KiB (hard limit {} KiB), but io_uring needs {} KiB \
         here: {executors} socket worker(s) × limits.io_memory = {} KiB, plus 512 KiB. Raise the limit \
         (`ulimit -l {}` in the starting shell, `LimitMEMLOCK={}` in a systemd unit, or a memlock line in \
         /etc/security/limits.conf), or lower limits.io_memory or socket_workers",
        soft / 1024,
        hard / 1024,
        needed.div_ceil(1024),
        io_memory / 1024,
        needed.div_ceil(1024),
        needed,
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
        let needed = needed(4, 1 << 20);
        assert_eq!(decide(needed, needed, needed), Decision::Enough);
        assert_eq!(decide(needed, 64 * KIB, u64::MAX), Decision::Raise);
        assert_eq!(decide(needed, 64 * KIB, needed), Decision::Raise);
        assert_eq!(decide(needed, 64 * KIB, 1024 * KIB), Decision::Refuse);
    }

    #[test]
    fn a_refusal_gives_the_numbers_and_the_fixes() {
        let needed = needed(4, 1 << 20);
        let text = explain(needed, 64 * KIB, 64 * KIB, 4, 1 << 20);
        assert!(text.contains("is 64 KiB (hard limit 64 KiB)"), "{text}");
        assert!(
            text.contains("4 socket worker(s) × limits.io_memory = 1024 KiB"),
            "{text}"
        );
        assert!(text.contains("`ulimit -l 4608`"), "{text}");
        assert!(text.contains("LimitMEMLOCK=4718592"), "{text}");
    }

    #[test]
    fn a_small_need_is_met() {
        ensure(needed(1, 64 * 1024), 1, 64 * 1024).unwrap();
    }
}
