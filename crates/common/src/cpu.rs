//! Pinning worker threads to CPU cores.
//!
//! Pinning keeps a worker's caches warm and stops the scheduler from stacking two busy
//! workers on one core. It pays off on dedicated machines; on shared ones, leave it off.

use serde::{Deserialize, Serialize};
use shoal_toml_config::TomlConfig;

use crate::config::{Problems, available_cpus};

/// CPU pinning settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct CpuPinningConfig {
    /// Pin each worker thread to its own core: socket workers first, then swarm
    /// workers, on consecutive cores starting at `core_offset` (wrapping around).
    pub active: bool,
    /// The first core to use (0-based).
    pub core_offset: usize,
}

impl CpuPinningConfig {
    /// The core for the `index`-th worker, if pinning is on.
    pub fn core_for(&self, index: usize) -> Option<usize> {
        self.active
            .then(|| (self.core_offset + index) % available_cpus())
    }

    /// Records configuration problems.
    pub fn validate(&self, problems: &mut Problems) {
        let cpus = available_cpus();
        problems.check(
            !self.active || self.core_offset < cpus,
            "core_offset",
            format!(
                "is {} but this machine has {cpus} usable cores (0..{cpus})",
                self.core_offset
            ),
        );
    }
}

/// Pins the calling thread to `core`.
pub(crate) fn pin_current_thread(core: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is the empty set;
    // CPU_SET writes within it for core < CPU_SETSIZE, which we check first; and
    // sched_setaffinity only reads `set` for the size we pass.
    unsafe {
        if core >= libc::CPU_SETSIZE as usize {
            return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Pins the calling thread if `core` is set, logging (not failing) if the kernel
/// refuses: a tracker running unpinned is better than no tracker.
pub fn maybe_pin_current_thread(core: Option<usize>) {
    if let Some(core) = core
        && let Err(err) = pin_current_thread(core)
    {
        log::warn!("cannot pin thread to core {core}: {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cores_wrap_around_the_machine() {
        let config = CpuPinningConfig {
            active: true,
            core_offset: 0,
        };
        let cpus = available_cpus();
        assert_eq!(config.core_for(0), Some(0));
        assert_eq!(config.core_for(cpus), Some(0));
        assert_eq!(CpuPinningConfig::default().core_for(0), None);
    }

    /// The first core this process may run on (containers may not allow core 0).
    fn first_allowed_core() -> usize {
        // SAFETY: as in pin_current_thread; sched_getaffinity fills `set`.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(
                libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set),
                0
            );
            (0..libc::CPU_SETSIZE as usize)
                .find(|&core| libc::CPU_ISSET(core, &set))
                .unwrap()
        }
    }

    #[test]
    fn pinning_to_an_allowed_core_works() {
        let core = first_allowed_core();
        std::thread::spawn(move || pin_current_thread(core).unwrap())
            .join()
            .unwrap();
        assert!(pin_current_thread(usize::MAX).is_err());
    }
}
