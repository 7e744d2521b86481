//! The process limit for uid 0: a pids cgroup (cgroup v1 hierarchy) of each candidate's own, and
//! the sweep of the empty cgroups that killed judges left behind.

use std::ffi::{CStr, CString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use super::check;

/// A pids cgroup of one candidate: its process limit where `RLIMIT_NPROC` does not bind (uid 0
/// is exempt, and a GPU candidate stays uid 0). Removed, after killing whatever is left in it,
/// when dropped.
pub(crate) struct PidsCgroup {
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

    /// The `cgroup.procs` file a child writes to join, as the C string `join` takes.
    pub(super) fn procs_path(&self) -> io::Result<CString> {
        Ok(CString::new(
            self.dir.join("cgroup.procs").as_os_str().as_bytes(),
        )?)
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
