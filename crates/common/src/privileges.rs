//! Dropping root privileges once the sockets are bound.
//!
//! A tracker may need root to bind a port below 1024 and nothing afterwards. The order
//! is fixed: look up the user and group (needs /etc/passwd, so before any chroot),
//! chroot and chdir into it, drop supplementary groups, setgid, then setuid; last,
//! check that root cannot be regained. glibc applies setuid/setgid to every thread of
//! the process, so workers already running lose their privileges too.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use shoal_toml_config::TomlConfig;

use crate::config::Problems;

/// Privilege dropping settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct PrivilegeConfig {
    /// After binding the sockets, switch to `user` (and `group`). Requires starting
    /// as root; the usual reason is binding a port below 1024.
    pub drop_privileges: bool,
    /// Also chroot into `chroot_path` before switching user.
    pub chroot: bool,
    /// Directory to chroot into. Files read later (the access list on reload) are
    /// looked up inside it.
    pub chroot_path: PathBuf,
    /// User to run as.
    pub user: String,
    /// Group to run as; empty means the user's primary group.
    pub group: String,
}

impl Default for PrivilegeConfig {
    fn default() -> Self {
        Self {
            drop_privileges: false,
            chroot: false,
            chroot_path: PathBuf::from("/var/empty"),
            user: "nobody".into(),
            group: String::new(),
        }
    }
}

impl PrivilegeConfig {
    /// Records configuration problems.
    pub fn validate(&self, problems: &mut Problems) {
        problems.check(
            !self.drop_privileges || !self.user.is_empty(),
            "user",
            "must be set to drop privileges",
        );
        problems.check(
            !self.chroot || self.drop_privileges,
            "chroot",
            "needs drop_privileges = true (a chroot is only safe once root is given up)",
        );
        problems.check(
            !self.chroot || self.chroot_path.is_absolute(),
            "chroot_path",
            "must be an absolute path",
        );
    }
}

/// Applies `config` if it asks for dropping privileges; logs what it did.
pub fn drop_privileges(config: &PrivilegeConfig) -> anyhow::Result<()> {
    if !config.drop_privileges {
        return Ok(());
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "privileges.drop_privileges is set but the tracker was not started as root; \
             start it as root or set privileges.drop_privileges = false"
        );
    }
    let (uid, primary_gid) = lookup_user(&config.user)?;
    let gid = if config.group.is_empty() {
        primary_gid
    } else {
        lookup_group(&config.group)?
    };

    if config.chroot {
        let path = CString::new(config.chroot_path.as_os_str().as_bytes())
            .context("chroot_path contains NUL")?;
        // SAFETY: path is a valid NUL-terminated string; "/" likewise.
        unsafe {
            check(libc::chroot(path.as_ptr()))
                .with_context(|| format!("cannot chroot into {}", config.chroot_path.display()))?;
            check(libc::chdir(c"/".as_ptr())).context("cannot chdir into the chroot")?;
        }
    }
    // SAFETY: plain system calls with integer arguments; setgroups with size 0 ignores
    // the list pointer.
    unsafe {
        check(libc::setgroups(0, std::ptr::null())).context("cannot drop supplementary groups")?;
        check(libc::setgid(gid)).with_context(|| format!("cannot switch to group id {gid}"))?;
        check(libc::setuid(uid))
            .with_context(|| format!("cannot switch to user {}", config.user))?;
        if libc::setuid(0) == 0 {
            bail!("root could be regained after dropping privileges; refusing to run");
        }
    }
    let chroot = if config.chroot {
        format!(", chrooted into {}", config.chroot_path.display())
    } else {
        String::new()
    };
    log::info!(
        "dropped privileges: running as user {} (uid {uid}, gid {gid}){chroot}",
        config.user
    );
    Ok(())
}

/// The user whose access to the config's files is checked besides this process's
/// (see [`check_files_for`](crate::files::check_files_for)), when this process is root:
/// `[privileges] user` (with its one group, as [`drop_privileges`] leaves it) when the
/// config drops privileges; else, for `-P` (`print_config`), the `shoal` user the
/// packaged units run as, with its groups, when it exists. `None` otherwise (a
/// process that is not root is checked as itself).
pub fn file_user(config: &PrivilegeConfig, print_config: bool) -> Option<crate::files::FileUser> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    if config.drop_privileges {
        let (uid, primary_gid) = lookup_user(&config.user).ok()?;
        let gid = if config.group.is_empty() {
            primary_gid
        } else {
            lookup_group(&config.group).ok()?
        };
        return Some(crate::files::FileUser::new(
            &config.user,
            "privileges.user",
            uid,
            vec![gid],
        ));
    }
    if !print_config {
        return None;
    }
    let (uid, gid) = lookup_user(UNIT_USER).ok()?;
    Some(crate::files::FileUser::new(
        UNIT_USER,
        "the packaged units' User=",
        uid,
        groups_of(UNIT_USER, gid),
    ))
}

/// The user the packaged systemd units run as.
const UNIT_USER: &str = "shoal";

/// Every group `name` is in (as initgroups gives a process started as it), `gid`
/// first.
fn groups_of(name: &str, gid: libc::gid_t) -> Vec<u32> {
    let Ok(c_name) = CString::new(name) else {
        return vec![gid];
    };
    let mut groups = vec![0 as libc::gid_t; 64];
    loop {
        let mut count = groups.len() as libc::c_int;
        // SAFETY: `groups` holds `count` entries; getgrouplist writes at most that many
        // and sets `count` to the number it has.
        let rc =
            unsafe { libc::getgrouplist(c_name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            groups.truncate(count.max(0) as usize);
            return groups;
        }
        if groups.len() >= 65_536 {
            return vec![gid];
        }
        groups.resize((count.max(0) as usize).max(groups.len() * 2), 0);
    }
}

fn check(result: libc::c_int) -> std::io::Result<()> {
    if result == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// (uid, primary gid) of a user name.
fn lookup_user(name: &str) -> anyhow::Result<(libc::uid_t, libc::gid_t)> {
    let c_name = CString::new(name).context("user name contains NUL")?;
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: passwd is plain data; getpwnam_r writes it and strings into `buffer`,
    // whose length we pass, and sets `found` to null or to `passwd`.
    unsafe {
        let mut passwd: libc::passwd = std::mem::zeroed();
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwnam_r(
            c_name.as_ptr(),
            &mut passwd,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        );
        if rc != 0 {
            bail!(
                "cannot look up user {name}: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
        if found.is_null() {
            bail!("privileges.user: no such user {name:?}");
        }
        Ok((passwd.pw_uid, passwd.pw_gid))
    }
}

/// gid of a group name.
fn lookup_group(name: &str) -> anyhow::Result<libc::gid_t> {
    let c_name = CString::new(name).context("group name contains NUL")?;
    let mut buffer = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: as in lookup_user, for getgrnam_r.
    unsafe {
        let mut group: libc::group = std::mem::zeroed();
        let mut found: *mut libc::group = std::ptr::null_mut();
        let rc = libc::getgrnam_r(
            c_name.as_ptr(),
            &mut group,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        );
        if rc != 0 {
            bail!(
                "cannot look up group {name}: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
        if found.is_null() {
            bail!("privileges.group: no such group {name:?}");
        }
        Ok(group.gr_gid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_and_groups_are_looked_up() {
        assert_eq!(lookup_user("root").unwrap(), (0, 0));
        assert_eq!(lookup_group("root").unwrap(), 0);
        let err = lookup_user("no-such-user-shoal").unwrap_err();
        assert!(err.to_string().contains("no such user"), "{err}");
    }

    #[test]
    fn chroot_without_dropping_is_rejected() {
        let mut problems = Problems::default();
        PrivilegeConfig {
            chroot: true,
            ..Default::default()
        }
        .validate(&mut problems);
        assert!(
            problems
                .to_string()
                .contains("chroot: needs drop_privileges"),
            "{problems}"
        );
    }

    #[test]
    fn nothing_happens_when_not_asked() {
        drop_privileges(&PrivilegeConfig::default()).unwrap();
    }
}
