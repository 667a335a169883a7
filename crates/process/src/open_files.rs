//! The open-files limit: one descriptor per TCP connection, so a busy HTTP or
//! WebTorrent tracker needs tens of thousands. Many systems give processes a soft
//! limit of 1024 under a much higher hard one (systemd's default: 1024 soft, 524288
//! hard); an unprivileged process may raise its soft limit up to the hard one, so the
//! tracker does that at start, as Go's runtime does for every program. Past the hard
//! limit only the operator can help (`LimitNOFILE=` in the unit; `shoal check-host`
//! compares it with the config).

/// The soft limit to set for `soft` and `hard` (`None`: leave it): the hard limit,
/// unless that is unlimited (the kernel refuses RLIM_INFINITY for open files) or
/// the soft limit is there already.
fn raised(soft: u64, hard: u64) -> Option<u64> {
    (soft < hard && hard != libc::RLIM_INFINITY).then_some(hard)
}

/// Raises the soft open-files limit to the hard one; logs what it did.
pub(crate) fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    let Some(target) = raised(limit.rlim_cur, limit.rlim_max) else {
        return;
    };
    let before = limit.rlim_cur;
    limit.rlim_cur = target;
    // SAFETY: setrlimit reads the struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0 {
        log::info!("raised the open-files limit from {before} to {target} (the hard limit)");
    } else {
        log::warn!(
            "cannot raise the open-files limit from {before} to {target}: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_goes_up_to_a_finite_hard_one() {
        assert_eq!(raised(1024, 524_288), Some(524_288));
        assert_eq!(raised(524_288, 524_288), None);
        assert_eq!(raised(1024, libc::RLIM_INFINITY), None);
    }
}
