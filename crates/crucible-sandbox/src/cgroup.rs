//! The process limit for uid 0: a pids cgroup (cgroup v1 hierarchy) of each candidate's own, and
//! the sweep of the empty cgroups that killed judges left behind.

use std::ffi::CStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use super::check;

/// A pids cgroup of one candidate: its process limit where `RLIMIT_NPROC` does not bind (uid 0
/// is exempt, and a GPU candidate stays uid 0). Removed, after killing whatever is left in it,
/// when dropped.
pub struct PidsCgroup {
    dir: PathBuf,
}

/// Whether this host has a v1 pids hierarchy the judge may create cgroups in.
pub(super) fn host_has_pids_cgroup() -> bool {
    pids_cgroup_parent().is_some()
}

/// The judge's own pids cgroup, if this host has a v1 pids hierarchy the judge may create
/// cgroups in (probed once).
fn pids_cgroup_parent() -> Option<&'static Path> {
    static PARENT: OnceLock<Option<PathBuf>> = OnceLock::new();
    PARENT
        .get_or_init(|| {
            let mount = Path::new("/sys/fs/cgroup/pids");
            if !mount.join("cgroup.procs").exists() {
                return None;
            }
            // "4:pids:/some/path"
            let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
            let path = own.lines().find_map(|line| {
                let mut fields = line.splitn(3, ':');
                let controllers = fields.nth(1)?;
                let path = fields.next()?;
                controllers.split(',').any(|c| c == "pids").then_some(path)
            })?;
            let parent = mount.join(path.trim_start_matches('/'));
            remove_stale_cgroups(&parent);
            let probe = parent.join(format!("crucible-probe-{}", std::process::id()));
            std::fs::create_dir(&probe).ok()?;
            let writable = std::fs::write(probe.join("pids.max"), "1").is_ok();
            let _ = std::fs::remove_dir(&probe);
            writable.then_some(parent)
        })
        .as_deref()
}

/// Removes the cgroups of judges that were killed before they could remove their own (empty
/// once their candidates died; `rmdir` refuses any still in use).
fn remove_stale_cgroups(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let judge = name
            .to_str()
            .and_then(|n| n.strip_prefix("crucible-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if judge.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

impl PidsCgroup {
    /// A fresh cgroup limited to `max` tasks; `None` where the host has no usable pids cgroup.
    pub(super) fn create(max: u64) -> io::Result<Option<PidsCgroup>> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let Some(parent) = pids_cgroup_parent() else {
            return Ok(None);
        };
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("crucible-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let cgroup = PidsCgroup { dir };
        std::fs::write(cgroup.dir.join("pids.max"), max.to_string())?;
        Ok(Some(cgroup))
    }

    /// The `cgroup.procs` file a child writes to join.
    pub(super) fn procs_file(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        // A cgroup with tasks cannot be removed; what is left (the candidate is already dead
        // or being killed) gets SIGKILL, and dying tasks get a moment to leave.
        for _ in 0..100 {
            match std::fs::remove_dir(&self.dir) {
                Err(err) if err.kind() != io::ErrorKind::NotFound => {}
                _ => return,
            }
            if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
                for pid in procs
                    .lines()
                    .filter_map(|l| l.trim().parse::<libc::pid_t>().ok())
                {
                    // SAFETY: a plain kill of a process in this candidate's cgroup (v1 has no
                    // cgroup.kill, and std cannot signal a process it did not spawn).
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        tracing::warn!(
            "could not remove the candidate cgroup {}",
            self.dir.display()
        );
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is `procs`. Runs in the
/// forked child: raw open, write and close (std's `File` would be fine too, but the path must
/// already be a C string, and `std::fs::write` allocates one).
pub(super) fn join(procs: &CStr) -> io::Result<()> {
    // SAFETY: raw system calls with a NUL-terminated path and a one-byte buffer.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        check(fd)?;
        // "0" is the writing process itself.
        let written = libc::write(fd, c"0".as_ptr().cast(), 1);
        libc::close(fd);
        if written != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer_probe;

    const LIMIT: u64 = 16;

    /// A fork loop as uid 0, which `RLIMIT_NPROC` would not stop, stops at the cgroup's limit.
    #[test]
    fn the_pids_cgroup_stops_a_fork_loop() {
        let Some(cgroup) = PidsCgroup::create(LIMIT).expect("create the pids cgroup") else {
            eprintln!(
                "SKIPPED the_pids_cgroup_stops_a_fork_loop: this host has no writable v1 pids \
                 cgroup (/sys/fs/cgroup/pids)"
            );
            return;
        };
        let procs =
            std::ffi::CString::new(cgroup.procs_file().into_os_string().into_encoded_bytes())
                .expect("cgroup.procs path");
        let name = "cgroup::tests::probe_fork_loop";
        let output = layer_probe::run(name, &[], move || join(&procs));
        layer_probe::assert_passed(name, &output);
        drop(cgroup);
    }

    #[test]
    #[ignore = "a probe: run confined by the_pids_cgroup_stops_a_fork_loop"]
    fn probe_fork_loop() {
        if !layer_probe::in_probe() {
            return;
        }
        let mut children = Vec::new();
        let mut refused = None;
        for _ in 0..4 * LIMIT {
            // SAFETY: the child only waits for its SIGKILL (async-signal-safe calls).
            let pid = unsafe { libc::fork() };
            match pid {
                0 => loop {
                    // SAFETY: pause has no preconditions.
                    unsafe { libc::pause() };
                },
                -1 => {
                    refused = Some(io::Error::last_os_error());
                    break;
                }
                child => children.push(child),
            }
        }
        for child in &children {
            // SAFETY: killing and reaping this probe's own children.
            unsafe {
                libc::kill(*child, libc::SIGKILL);
                libc::waitpid(*child, std::ptr::null_mut(), 0);
            }
        }
        let refused = refused.expect("fork never failed");
        assert_eq!(refused.raw_os_error(), Some(libc::EAGAIN), "{refused}");
        // The probe and its threads count too.
        assert!(
            (children.len() as u64) < LIMIT && !children.is_empty(),
            "forked {} children under a limit of {LIMIT} tasks",
            children.len()
        );
    }
}
