//! Credentials: a user id of the candidate's own with only `CAP_DAC_OVERRIDE`, or uid 0 with no
//! capability at all (on a GPU), and never `CAP_SYS_PTRACE`.
//!
//! Everything here runs in the forked child, so it is raw system calls: glibc's `setresuid` and
//! friends would try to change every thread of the (multithreaded) judge through a signal
//! handshake, and the `caps` crate builds its sets in a `HashSet`, which allocates. The kernel's
//! structs and numbers come from `linux-raw-sys`.

use std::io;

use linux_raw_sys::general::{
    __user_cap_data_struct, __user_cap_header_struct, _LINUX_CAPABILITY_VERSION_3,
    CAP_DAC_OVERRIDE, CAP_SYS_PTRACE,
};

use super::{check, errno};

/// First user id of the range candidates run as; far above any account a system creates.
pub(super) const UID_BASE: u32 = 1_500_000_000;

/// The calling process's own user id: `UID_BASE` + its pid, unique while it lives.
pub(super) fn own_uid() -> u32 {
    // SAFETY: getpid has no preconditions.
    UID_BASE + unsafe { libc::getpid() } as u32
}

/// Removes `CAP_SYS_PTRACE` from the bounding set: no exec gives it back, even to uid 0.
pub(super) fn drop_ptrace() -> io::Result<()> {
    // SAFETY: a raw prctl on the calling process's own bounding set.
    check(unsafe {
        libc::prctl(
            libc::PR_CAPBSET_DROP,
            CAP_SYS_PTRACE as libc::c_ulong,
            0,
            0,
            0,
        )
    })
}

/// Drops every capability but `keep` from the bounding set: out of it, no exec can give a
/// capability back.
fn drop_bounding_set(keep: Option<u32>) -> io::Result<()> {
    // The kernel may know more capabilities than these headers: go on until it says EINVAL.
    for cap in 0..64 {
        if Some(cap) == keep {
            continue;
        }
        // SAFETY: a raw prctl on the calling process's own bounding set.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } < 0 {
            if errno() == libc::EINVAL {
                break; // past the last capability this kernel knows
            }
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sets the calling thread's effective, permitted and inheritable sets to `caps` (a bit mask
/// of the first 32 capabilities; the upper 32 are emptied).
fn set_capabilities(caps: u32) -> io::Result<()> {
    let header = __user_cap_header_struct {
        version: _LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let low = __user_cap_data_struct {
        effective: caps,
        permitted: caps,
        inheritable: caps,
    };
    let high = __user_cap_data_struct {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    };
    let data = [low, high];
    // SAFETY: capset reads one valid header and the two data structs version 3 expects.
    check(unsafe {
        libc::syscall(
            libc::SYS_capset,
            &header as *const __user_cap_header_struct,
            data.as_ptr(),
        )
    } as libc::c_int)
}

/// Empties every capability set, the bounding set included, so that exec gives none back even
/// to uid 0.
///
/// # Safety
///
/// Changes the credentials of the calling thread only: call it in a single-threaded child.
pub(super) unsafe fn drop_all() -> io::Result<()> {
    drop_bounding_set(None)?;
    // SAFETY: a raw prctl on the calling process's own ambient set.
    check(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    })?;
    set_capabilities(0)
}

/// Switches to `uid` (and the same gid), keeping only `CAP_DAC_OVERRIDE`, also across exec.
///
/// # Safety
///
/// Changes the credentials of the calling thread only: call it in a single-threaded child.
pub(super) unsafe fn become_user(uid: u32) -> io::Result<()> {
    drop_bounding_set(Some(CAP_DAC_OVERRIDE))?;
    // SAFETY: raw system calls on the calling thread's credentials; setgroups gets an empty list.
    unsafe {
        // Raw system calls: glibc's wrappers would try to change every thread of the judge.
        check(libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) as i32)?;
        check(libc::syscall(libc::SYS_setresgid, uid, uid, uid) as i32)?;
        check(libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0))?;
        check(libc::syscall(libc::SYS_setresuid, uid, uid, uid) as i32)?;
    }
    // The scratch directories and the Python install belong to root.
    set_capabilities(1 << CAP_DAC_OVERRIDE)?;
    // Ambient: kept across exec by a process that is not root.
    // SAFETY: a raw prctl on the calling process's own ambient set.
    check(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_RAISE,
            CAP_DAC_OVERRIDE as libc::c_ulong,
            0,
            0,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer_probe;
    use linux_raw_sys::general::CAP_SYS_ADMIN;

    /// The capability sets of the calling process, from /proc/self/status.
    fn capability_sets() -> Vec<(String, u64)> {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        status
            .lines()
            .filter_map(|line| {
                let (name, value) = line.split_once(':')?;
                let name = name.strip_prefix("Cap")?;
                Some((
                    name.to_string(),
                    u64::from_str_radix(value.trim(), 16).ok()?,
                ))
            })
            .collect()
    }

    fn run_probe(case: &str, confine: impl FnMut() -> io::Result<()> + Send + Sync + 'static) {
        let name = "caps::tests::probe_credentials";
        let judge = std::process::id().to_string();
        let output = layer_probe::run(
            name,
            &[("CASE", case.to_string()), ("JUDGE", judge)],
            confine,
        );
        layer_probe::assert_passed(name, &output);
    }

    #[test]
    fn a_candidate_at_uid_0_has_no_capability() {
        // SAFETY: drop_all makes raw system calls only, in the forked child.
        run_probe("none", || unsafe { drop_all() });
    }

    #[test]
    fn a_candidate_with_its_own_user_keeps_only_dac_override() {
        // SAFETY: become_user makes raw system calls only, in the forked child.
        run_probe("own-user", || unsafe { become_user(own_uid()) });
    }

    #[test]
    fn no_candidate_gets_cap_sys_ptrace_back() {
        run_probe("no-ptrace", drop_ptrace);
    }

    #[test]
    #[ignore = "a probe: run confined by the tests above"]
    fn probe_credentials() {
        if !layer_probe::in_probe() {
            return;
        }
        let case = std::env::var("CASE").expect("CASE");
        let sets = capability_sets();
        assert_eq!(sets.len(), 5, "{sets:?}");
        // SAFETY: getuid and getpid have no preconditions.
        let (uid, pid) = unsafe { (libc::getuid(), libc::getpid()) };
        let judge: libc::pid_t = std::env::var("JUDGE").unwrap().parse().unwrap();
        // SAFETY: signal 0 only checks whether the judge may be signalled.
        let signal_judge = unsafe { libc::kill(judge, 0) };
        let ptrace = 1u64 << CAP_SYS_PTRACE;
        match case.as_str() {
            "none" => {
                assert_eq!(uid, 0);
                for (name, bits) in &sets {
                    assert_eq!(*bits, 0, "Cap{name} is not empty: {sets:?}");
                }
            }
            "own-user" => {
                assert_eq!(uid, UID_BASE + pid as u32);
                // Every set, the bounding and ambient ones included, holds it and nothing else.
                let dac_override = 1u64 << CAP_DAC_OVERRIDE;
                for (name, bits) in &sets {
                    assert_eq!(*bits, dac_override, "Cap{name}: {sets:?}");
                }
                // No CAP_KILL and another user: the root judge cannot be signalled.
                assert_eq!(signal_judge, -1);
                assert_eq!(errno(), libc::EPERM);
            }
            "no-ptrace" => {
                assert_eq!(uid, 0);
                let get = |n: &str| sets.iter().find(|(name, _)| name == n).unwrap().1;
                assert_eq!(get("Bnd") & ptrace, 0, "{sets:?}");
                assert_eq!(get("Eff") & ptrace, 0, "{sets:?}");
                // Only CAP_SYS_PTRACE went: root still has CAP_SYS_ADMIN, for instance.
                assert_ne!(get("Eff") & (1 << CAP_SYS_ADMIN), 0, "{sets:?}");
            }
            other => panic!("unknown case {other}"),
        }
    }
}
