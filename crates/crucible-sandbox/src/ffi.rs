//! The C entry point of this crate's cdylib, for the candidate zygote (`crucible_harness/zygote.py`):
//! a trusted Python process that imported torch, triton and numpy once, and forks a child per
//! candidate instead of the judge spawning a fresh interpreter. The child calls
//! [`crucible_sandbox_enter`] with the [`Plan`] the judge made for that candidate, so it is
//! confined by the same code, layer for layer, as a spawned candidate is between fork and exec.
//!
//! The child is single-threaded (it was just forked), so building the confinement there may
//! allocate; the plan carries every decision that needs the judge's state (the kernel's support,
//! the Python directories, the pids cgroup), so nothing is probed again per child.

use std::ffi::c_int;

use crate::Plan;

/// An identity of this crate's sources: the judge loads only a cdylib built from the same ones
/// (a plan's format, or what entering it does, may differ in any other).
pub const BUILD_ID: u64 = {
    let sources: [&str; 8] = [
        include_str!("lib.rs"),
        include_str!("ffi.rs"),
        include_str!("caps.rs"),
        include_str!("cgroup.rs"),
        include_str!("landlock.rs"),
        include_str!("pid.rs"),
        include_str!("root.rs"),
        include_str!("seccomp.rs"),
    ];
    // FNV-1a over every byte, each source's length mixed in after it.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < sources.len() {
        let bytes = sources[i].as_bytes();
        let mut j = 0;
        while j < bytes.len() {
            hash = (hash ^ bytes[j] as u64).wrapping_mul(0x0100_0000_01b3);
            j += 1;
        }
        hash = (hash ^ bytes.len() as u64).wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
};

/// [`BUILD_ID`] of this library, for the judge to compare with its own before it hands the
/// library to the zygote.
#[unsafe(no_mangle)]
pub extern "C" fn crucible_sandbox_build_id() -> u64 {
    BUILD_ID
}

/// Confines the calling process by `plan` (the JSON of a [`Plan`], `plan_len` bytes). With a
/// PID namespace it returns only in the candidate, two forks down; the supervisor and init it
/// leaves behind never return (they end with the candidate's status). Returns 0 when confined;
/// otherwise -1, with what failed written to `error` (at most `error_len` bytes, NUL-terminated).
///
/// # Safety
///
/// `plan` must point at `plan_len` readable bytes and `error` at `error_len` writable ones. Only
/// in a single-threaded process that is to become a candidate: it changes the process's
/// namespaces, root, credentials and system-call filter for good.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn crucible_sandbox_enter(
    plan: *const u8,
    plan_len: usize,
    error: *mut u8,
    error_len: usize,
) -> c_int {
    // SAFETY: the caller's contract on `plan`.
    let plan = unsafe { std::slice::from_raw_parts(plan, plan_len) };
    let entered = serde_json::from_slice::<Plan>(plan)
        .map_err(|e| format!("the sandbox plan does not parse: {e}"))
        .and_then(|plan| {
            plan.confinement()
                .map_err(|e| format!("preparing the sandbox: {e}"))
        })
        .and_then(|confinement| {
            // SAFETY: the caller's contract: a single-threaded process becoming a candidate.
            unsafe { confinement.enter() }.map_err(|e| format!("entering the sandbox: {e}"))
        });
    match entered {
        Ok(()) => 0,
        Err(message) => {
            // SAFETY: the caller's contract on `error`.
            let out = unsafe { std::slice::from_raw_parts_mut(error, error_len) };
            if let Some(room) = error_len.checked_sub(1) {
                let bytes = message.as_bytes();
                let n = bytes.len().min(room);
                out[..n].copy_from_slice(&bytes[..n]);
                out[n] = 0;
            }
            -1
        }
    }
}
