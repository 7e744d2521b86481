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
