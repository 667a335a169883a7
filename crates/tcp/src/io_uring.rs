//! Whether this process may use io_uring, asked before any executor starts.
//!
//! The HTTP and WebTorrent trackers run on glommio, which needs io_uring, when
//! `network.io_backend` asks for it (`"io_uring"`, or `"auto"`). Docker's
//! default seccomp profile blocks it, the `kernel.io_uring_disabled` sysctl turns it
//! off, and kernels before 5.8 lack what glommio uses. Deep inside glommio any of
//! these reads as "cannot start the executor"; here it becomes the cause and the fix.

use anyhow::bail;

/// Size of the kernel's `struct io_uring_params`.
const PARAMS_SIZE: usize = 120;

/// Sets up (and closes) a one-entry ring; an error that names the cause and the fix
/// when the kernel refuses.
///
/// The probe runs on a thread of its own: tearing a ring down queues kernel work on the
/// thread that made it, which interrupts that thread's next blocking call with EINTR.
pub fn check_available() -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name("io_uring-probe".into())
        .spawn(probe)
        .map_err(|err| anyhow::anyhow!("cannot start a thread: {err}"))?
        .join()
        .map_err(|_| anyhow::anyhow!("the io_uring probe panicked"))?
}

fn probe() -> anyhow::Result<()> {
    let mut params = [0u8; PARAMS_SIZE];
    // SAFETY: io_uring_setup reads and writes `params`, which we own and which has the
    // size of the kernel's struct; the returned descriptor is closed below.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if fd >= 0 {
        // SAFETY: the descriptor is ours and used nowhere else.
        unsafe { libc::close(fd as libc::c_int) };
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()
        .and_then(|text| text.trim().parse::<u8>().ok());
    explain(err, sysctl)
}

fn explain(err: std::io::Error, io_uring_disabled: Option<u8>) -> anyhow::Result<()> {
    let cause = match (err.raw_os_error(), io_uring_disabled) {
        (Some(libc::ENOSYS), _) => {
            "this kernel has no io_uring (Linux 5.8 or newer has it), or a seccomp filter hides \
             it, as the default profiles of Docker and podman do (a profile that allows \
             io_uring_setup, io_uring_enter and io_uring_register lifts that)"
        }
        (_, Some(2)) => {
            "io_uring is disabled by the kernel.io_uring_disabled sysctl (2: for everyone); \
             set it to 0 (sysctl -w kernel.io_uring_disabled=0, and in /etc/sysctl.d/ to keep it)"
        }
        (_, Some(1)) => {
            "io_uring is limited by the kernel.io_uring_disabled sysctl (1: only for the group in \
             kernel.io_uring_group); add the tracker's user to that group or set the sysctl to 0"
        }
        (Some(libc::EPERM | libc::EACCES), _) => {
            "the process may not use io_uring (a seccomp filter such as Docker's default profile, \
             or a security module); a seccomp profile that allows io_uring_setup, \
             io_uring_enter and io_uring_register, and no SystemCallFilter= in the systemd \
             unit, lift that"
        }
        (Some(libc::ENOMEM), _) => {
            "the kernel could not allocate the ring: raise the locked-memory limit \
             (ulimit -l, LimitMEMLOCK= in systemd)"
        }
        _ => "the kernel refused io_uring_setup",
    };
    bail!(
        "io_uring is unavailable ({err}): {cause}. The HTTP and WebTorrent trackers need it; the UDP tracker does not."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_its_fix() {
        let sysctl = explain(std::io::Error::from_raw_os_error(libc::EPERM), Some(2)).unwrap_err();
        assert!(
            sysctl.to_string().contains("kernel.io_uring_disabled=0"),
            "{sysctl}"
        );
        let seccomp = explain(std::io::Error::from_raw_os_error(libc::EPERM), Some(0)).unwrap_err();
        assert!(seccomp.to_string().contains("seccomp"), "{seccomp}");
        let missing = explain(std::io::Error::from_raw_os_error(libc::ENOSYS), None).unwrap_err();
        assert!(missing.to_string().contains("5.8"), "{missing}");
    }

    #[test]
    fn this_machine_has_it() {
        // The HTTP and WebTorrent tests need io_uring anyway; this says why first.
        check_available().expect("io_uring is available where the tests run");
    }
}
