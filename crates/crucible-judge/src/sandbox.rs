//! Confinement of the candidate process, applied between fork and exec.
//!
//! Everything here runs in the forked child before `exec`, so it only makes raw system calls:
//! no allocation, no locks. Features the kernel lacks are found by a probe in the parent before
//! any candidate runs, and reported as warnings in the result instead of failing the evaluation.

/// Resource limits and isolation for one candidate process.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// Largest file the process may write, in bytes.
    pub max_file_bytes: u64,
    /// Most file descriptors open at once.
    pub max_open_files: u64,
    /// Move into a fresh network namespace (no interfaces but a downed loopback).
    pub isolate_network: bool,
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox {
            max_file_bytes: 1 << 30,
            max_open_files: 1024,
            isolate_network: true,
        }
    }
}

impl Sandbox {
    /// Applies the sandbox to the calling (freshly forked) process.
    pub fn enter(&self) -> std::io::Result<()> {
        // SAFETY: plain system calls on the forked child's own state.
        unsafe {
            set_limit(libc::RLIMIT_CORE, 0)?;
            set_limit(libc::RLIMIT_FSIZE, self.max_file_bytes)?;
            set_limit(libc::RLIMIT_NOFILE, self.max_open_files)?;
            if self.isolate_network && libc::unshare(libc::CLONE_NEWNET) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

unsafe fn set_limit(resource: libc::__rlimit_resource_t, value: u64) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: `limit` is a valid rlimit for the duration of the call.
    if unsafe { libc::setrlimit(resource, &limit) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
