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
pub const GLOMMIO_MINIMUM: u64 = 512 * 1024;

/// Locked memory needed for `executors` executors with `io_memory` bytes each.
pub fn needed(executors: usize, io_memory: usize) -> u64 {
    executors as u64 * io_memory as u64 + GLOMMIO_MINIMUM
}

/// Makes sure the locked-memory limit covers `executors` executors with `io_memory`
/// bytes of io_uring buffers each (see [`ensure`]).
pub fn ensure_for(executors: usize, io_memory: usize) -> anyhow::Result<()> {
    ensure(needed(executors, io_memory), executors, io_memory)
}

/// Makes sure the soft limit covers `needed` bytes, raising it if the hard limit allows.
pub fn ensure(needed: u64, executors: usize, io_memory: usize) -> anyhow::Result<()> {
    let (soft, hard) = current_limits()?;
    if soft >= needed {
        return Ok(());
    }
    if hard >= needed && set_soft_limit(needed, hard).is_ok() {
        log::info!(
            "raised the locked-memory limit from {} KiB to {} KiB for io_uring",
            soft / 1024,
            needed / 1024
        );
        return Ok(());
    }
    bail!(
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

    #[test]
    fn a_limit_nobody_can_reach_fails_with_the_fix() {
        let err = ensure(u64::MAX, 4, 1 << 20).unwrap_err().to_string();
        assert!(
            err.contains("4 socket worker(s) × limits.io_memory = 1024 KiB"),
            "{err}"
        );
        assert!(err.contains("LimitMEMLOCK="), "{err}");
    }

    #[test]
    fn a_small_need_is_met() {
        ensure(needed(1, 64 * 1024), 1, 64 * 1024).unwrap();
    }
}
