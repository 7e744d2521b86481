//! The zygote: one long-lived Python process per device that has imported torch, triton and
//! numpy (never CUDA) and forks a referee, or a candidate process, for each evaluation.
//!
//! A referee started fresh pays an interpreter's import of torch, triton and numpy, about
//! 4 CPU-seconds on the H200 host and the largest part of a warm worker's CPU after the
//! candidate's; forked from the zygote it reaches its first kernel in 0.4
//! (`scripts/probe/fork_start.py`). A referee still serves exactly one evaluation: the fork only
//! skips the imports, and each child creates its own CUDA context.
//!
//! A candidate process forked from it saves the same imports and is confined exactly as a
//! spawned one: the judge plans its sandbox ([`crucible_sandbox::Plan`], with its own pids
//! cgroup) and the child, once it holds only its own descriptors, enters it through the sandbox
//! crate's cdylib (`libcrucible_sandbox.so`, [`sandbox_library`]) before any candidate code is
//! loaded. The zygote is trusted (it runs no candidate code) and holds nothing of any
//! evaluation: what a candidate inherits is the imports.
//!
//! The zygote leaves a child that ended a zombie until the judge releases it, so the child's pid,
//! and with it its process group id, cannot be reused while the judge may still signal the
//! group; the judge reads how it ended from /proc (`exit_code`). Before any signal the judge also
//! checks that the pid's parent is still the zygote: if the zygote died, its children died with
//! it (their parent-death signal) and were reaped elsewhere.

use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{Value, json};

use crucible_sandbox::{PidsCgroup, Plan, Sandbox};

use crate::device::Device;
use crate::error::InfraError;
use crate::process::{ExitDescription, HarnessProcess, Spawn};
use crate::protocol::{Hello, HelloFailure, Reply, parse_reply};
use crate::runtime::{Runtime, harness_env};

/// How long the zygote may take to import torch, triton and numpy before its first fork.
const HELLO_WITHIN: Duration = Duration::from_secs(180);
/// How long one fork may take (the zygote answers as soon as `fork` returns).
const FORK_WITHIN: Duration = Duration::from_secs(30);
/// How long a killed child may take to end before it is released anyway.
const DEATH_WITHIN: Duration = Duration::from_secs(5);

/// The environment variable naming the sandbox crate's cdylib, for the zygote to load; when the
/// judge's own environment does not set it, the library is looked for beside the judge's
/// executable, in `deps/` there (where cargo leaves it when it built the binary only) and one
/// directory up (a test binary lives in `deps/`).
pub const SANDBOX_LIBRARY_ENV: &str = "CRUCIBLE_SANDBOX_LIB";
const SANDBOX_LIBRARY_NAME: &str = "libcrucible_sandbox.so";

/// The sandbox crate's cdylib the zygote confines candidates with: found, and built from the
/// same sources as this judge (its `crucible_sandbox_build_id` is this crate's). Looked for once
/// per process; where there is none, or another build's, that is logged once and candidate
/// processes are spawned.
pub fn sandbox_library() -> Option<&'static Path> {
    static LIBRARY: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    LIBRARY
        .get_or_init(|| {
            find_sandbox_library()
                .inspect_err(|why| {
                    tracing::warn!("candidate processes are spawned, not forked: {why}")
                })
                .ok()
        })
        .as_deref()
}

fn find_sandbox_library() -> Result<std::path::PathBuf, String> {
    let path = match std::env::var_os(SANDBOX_LIBRARY_ENV) {
        Some(path) => std::path::PathBuf::from(path),
        None => {
            let exe = std::env::current_exe().map_err(|e| format!("no executable path: {e}"))?;
            let dir = exe.parent().unwrap_or(Path::new("/"));
            [dir, &dir.join("deps"), dir.parent().unwrap_or(dir)]
                .into_iter()
                .map(|dir| dir.join(SANDBOX_LIBRARY_NAME))
                .find(|path| path.is_file())
                .ok_or_else(|| {
                    format!(
                        "no {SANDBOX_LIBRARY_NAME} beside {} (or in ${SANDBOX_LIBRARY_ENV})",
                        exe.display()
                    )
                })?
        }
    };
    let id = library_build_id(&path)?;
    if id != crucible_sandbox::ffi::BUILD_ID {
        return Err(format!(
            "{} was built from other sources than this judge (build id {id:016x}, the judge's {:016x})",
            path.display(),
            crucible_sandbox::ffi::BUILD_ID
        ));
    }
    Ok(path)
}

/// `crucible_sandbox_build_id()` of the library at `path`, loaded for the call and unloaded.
fn library_build_id(path: &Path) -> Result<u64, String> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{} has a NUL in its path", path.display()))?;
    // SAFETY: dlopen of a path and dlsym of a symbol the sandbox crate exports with the signature
    // `extern "C" fn() -> u64` (a constant, no side effects); the handle is closed after the call.
    unsafe {
        let handle = libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if handle.is_null() {
            let why = libc::dlerror();
            let why = if why.is_null() {
                "unknown error".to_string()
            } else {
                std::ffi::CStr::from_ptr(why).to_string_lossy().into_owned()
            };
            return Err(format!("cannot load {}: {why}", path.display()));
        }
        let symbol = libc::dlsym(handle, c"crucible_sandbox_build_id".as_ptr());
        let id = if symbol.is_null() {
            Err(format!(
                "{} has no crucible_sandbox_build_id",
                path.display()
            ))
        } else {
            let build_id: extern "C" fn() -> u64 = std::mem::transmute(symbol);
            Ok(build_id())
        };
        libc::dlclose(handle);
        id
    }
}

/// Forks referees for one device. Cheap to clone; the zygote process ends with the last clone
/// (its channel closes) and takes its children with it.
#[derive(Clone)]
pub struct HarnessZygote {
    link: Arc<ZygoteLink>,
}

pub(crate) struct ZygoteLink {
    process: Mutex<Option<Zygote>>,
    python: std::path::PathBuf,
    /// The cdylib the zygote confines candidates with (in its environment too); without it,
    /// it forks referees only.
    sandbox_library: Option<&'static Path>,
    env: Vec<(String, String)>,
    // Dropped last: the zygote's HOME and TMPDIR.
    dir: tempfile::TempDir,
}

struct Zygote {
    process: HarnessProcess,
    said_hello: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Forked {
    pid: u32,
}

impl HarnessZygote {
    /// Starts the zygote for `device` without waiting for its imports (the first fork does).
    /// The zygote gets `SIGKILL` when the thread that started it ends (its parent-death
    /// signal), and its referees with it: start it on a thread that outlives its use. A zygote
    /// that died is started again by the next fork, on the forking thread.
    pub fn start(runtime: &Runtime, device: Device) -> Result<HarnessZygote, InfraError> {
        let dir = tempfile::Builder::new()
            .prefix("crucible-zygote-")
            .tempdir()
            .map_err(InfraError::io("creating the zygote's directory"))?;
        let mut env = harness_env(runtime, device, dir.path())?;
        let sandbox_library = sandbox_library();
        if let Some(library) = &sandbox_library {
            env.push((SANDBOX_LIBRARY_ENV.into(), library.display().to_string()));
        }
        let link = Arc::new(ZygoteLink {
            process: Mutex::new(None),
            python: runtime.python.clone(),
            sandbox_library,
            env,
            dir,
        });
        let zygote = link
            .spawn()
            .map_err(InfraError::io("starting the zygote"))?;
        if let Ok(mut process) = link.process.lock() {
            *process = Some(zygote);
        }
        Ok(HarnessZygote { link })
    }

    /// A referee forked from the zygote, working in `cwd` with exactly `env` (what a fresh
    /// referee would get). A zygote that died is started again first.
    pub(crate) fn fork(
        &self,
        cwd: &Path,
        env: &[(String, String)],
    ) -> std::io::Result<HarnessProcess> {
        HarnessProcess::forked(&self.link, cwd, env, ForkAs::Referee)
    }

    /// A candidate process forked from the zygote, working in `cwd` with exactly `env`, and
    /// confined by `sandbox` as a spawned one would be (its plan made here, the child entering
    /// it before it loads anything of the candidate's). An error when the zygote has no sandbox
    /// library to confine it with.
    pub(crate) fn fork_candidate(
        &self,
        cwd: &Path,
        env: &[(String, String)],
        sandbox: Option<&Sandbox>,
    ) -> std::io::Result<HarnessProcess> {
        if !self.forks_candidates() {
            return Err(std::io::Error::other(format!(
                "no usable {SANDBOX_LIBRARY_NAME} to confine a forked candidate with"
            )));
        }
        let (plan, cgroup) = match sandbox {
            Some(sandbox) => {
                let (plan, cgroup) = sandbox.plan(&self.link.python)?;
                (Some(plan), cgroup)
            }
            None => (None, None),
        };
        HarnessProcess::forked(&self.link, cwd, env, ForkAs::Candidate { plan, cgroup })
    }

    /// Whether the zygote can fork candidate processes: it has the sandbox library
    /// ([`sandbox_library`]) to confine them with.
    pub fn forks_candidates(&self) -> bool {
        self.link.sandbox_library.is_some()
    }

    /// The zygote's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        let mut process = self.link.process.lock().ok()?;
        let zygote = process.as_mut()?;
        zygote.process.running().then(|| zygote.process.pid())
    }
}

impl ZygoteLink {
    fn spawn(&self) -> std::io::Result<Zygote> {
        let process = HarnessProcess::spawn(Spawn {
            python: self.python.clone(),
            module: "crucible_harness.zygote",
            env: self.env.clone(),
            cwd: self.dir.path().to_path_buf(),
            sandbox: None,
        })?;
        Ok(Zygote {
            process,
            said_hello: false,
        })
    }

    /// Asks the zygote for a child that gets `fds` (channel, stdout, stderr), forked as `what`;
    /// its pid and the zygote's.
    pub(crate) fn fork(
        &self,
        cwd: &Path,
        env: &[(String, String)],
        fds: [RawFd; 3],
        what: &ForkAs,
    ) -> std::io::Result<(u32, u32)> {
        let mut process = self
            .process
            .lock()
            .map_err(|_| std::io::Error::other("the zygote's lock is poisoned"))?;
        if !process.as_mut().is_some_and(|z| z.process.running()) {
            if let Some(dead) = process.take() {
                tracing::warn!(
                    "the zygote ended; starting another. It printed: {}",
                    dead.process.log_tail(2000).trim()
                );
            }
            *process = Some(self.spawn()?);
        }
        let Some(zygote) = process.as_mut() else {
            return Err(std::io::Error::other("no zygote"));
        };
        let asked = zygote.fork(cwd, env, fds, what);
        if asked.is_err() {
            // Whatever state it is in, the next fork starts a new one.
            *process = None;
        }
        asked
    }

    /// The judge is done with `pid` (killed, or found ended): the zygote may reap it.
    pub(crate) fn release(&self, pid: u32) {
        let Ok(mut process) = self.process.lock() else {
            return;
        };
        if let Some(zygote) = process.as_mut() {
            // Fails only when the zygote is gone, and its children with it.
            let _ = zygote.process.send(&json!({"op": "release", "pid": pid}));
        }
    }
}

impl Zygote {
    fn fork(
        &mut self,
        cwd: &Path,
        env: &[(String, String)],
        fds: [RawFd; 3],
        what: &ForkAs,
    ) -> std::io::Result<(u32, u32)> {
        let failed = |what: String| std::io::Error::other(format!("zygote: {what}"));
        if !self.said_hello {
            let hello = self
                .process
                .receive(HELLO_WITHIN)
                .map_err(|e| failed(format!("no hello: {e}; it printed: {}", self.log())))?;
            match parse_reply::<Hello, HelloFailure>(hello).map_err(failed)? {
                Reply::Ok(Hello { ready: true }) => self.said_hello = true,
                Reply::Ok(Hello { ready: false }) => return Err(failed("not ready".into())),
                Reply::Failed(HelloFailure { error }) => return Err(failed(error)),
            }
        }
        let env: serde_json::Map<String, Value> = env
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let mut request = json!({"op": "fork", "cwd": cwd, "env": env});
        if let ForkAs::Candidate { plan, .. } = what {
            // `null` where the judge runs without a sandbox.
            request["sandbox"] = json!(plan);
        }
        self.process
            .send_with_fds(&request, &fds)
            .map_err(|e| failed(format!("cannot send the fork request: {e}")))?;
        let reply = self.process.receive(FORK_WITHIN).map_err(|e| {
            failed(format!(
                "no answer to a fork: {e}; it printed: {}",
                self.log()
            ))
        })?;
        match parse_reply::<Forked, HelloFailure>(reply).map_err(failed)? {
            Reply::Ok(Forked { pid }) => Ok((pid, self.process.pid())),
            Reply::Failed(HelloFailure { error }) => Err(failed(error)),
        }
    }

    fn log(&self) -> String {
        self.process.log_tail(2000).trim().to_string()
    }
}

/// What the zygote forks.
pub(crate) enum ForkAs {
    Referee,
    /// A candidate process, confined by `plan` (entered through the sandbox library; `None`
    /// where the judge runs without a sandbox), in `cgroup`, which the judge keeps until the
    /// process is gone.
    Candidate {
        plan: Option<Plan>,
        cgroup: Option<PidsCgroup>,
    },
}

/// A referee the zygote forked: not this process's child, so it is waited for through /proc and
/// released to the zygote when the judge is done with it.
pub(crate) struct ForkedChild {
    pid: u32,
    zygote_pid: u32,
    link: Arc<ZygoteLink>,
    released: bool,
}

impl ForkedChild {
    pub(crate) fn new(pid: u32, zygote_pid: u32, link: Arc<ZygoteLink>) -> ForkedChild {
        ForkedChild {
            pid,
            zygote_pid,
            link,
            released: false,
        }
    }

    pub(crate) fn id(&self) -> u32 {
        self.pid
    }

    /// How it ended, once it has (`None` while it runs). A pid that no longer names the
    /// zygote's child (the zygote died, and its children with it) reads as ended, status unknown.
    pub(crate) fn try_wait(&self) -> Option<ExitDescription> {
        let unknown = ExitDescription {
            code: None,
            signal: None,
        };
        let Some(stat) = self.stat() else {
            return Some(unknown);
        };
        if stat.state != 'Z' {
            return None;
        }
        // `exit_code` is the status as waitpid would report it.
        let status = stat.exit_code;
        Some(if status & 0x7f == 0 {
            ExitDescription {
                code: Some((status >> 8) & 0xff),
                signal: None,
            }
        } else {
            ExitDescription {
                code: None,
                signal: Some(status & 0x7f),
            }
        })
    }

    /// Whether signals to its pid and process group still reach only this child: it has not
    /// been released, and the zygote is still its parent (so it has not been reaped).
    pub(crate) fn may_signal(&self) -> bool {
        !self.released && self.stat().is_some()
    }

    /// `SIGKILL` to its group and itself, a wait (bounded) until it has ended, and the release.
    pub(crate) fn kill_and_release(&mut self) {
        if self.released {
            return;
        }
        if self.may_signal() {
            let pid = self.pid as libc::pid_t;
            // SAFETY: plain syscalls; the pid is the zygote's unreaped child (checked above), and
            // the child called setsid, so its pid is its group's id.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
                libc::kill(pid, libc::SIGKILL);
            }
            let deadline = Instant::now() + DEATH_WITHIN;
            while self.try_wait().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.link.release(self.pid);
        self.released = true;
    }

    /// Its /proc stat line, if the pid still names the zygote's child.
    fn stat(&self) -> Option<ProcStat> {
        let line = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        let stat = ProcStat::parse(&line)?;
        (stat.ppid == self.zygote_pid).then_some(stat)
    }
}

impl Drop for ForkedChild {
    fn drop(&mut self) {
        self.kill_and_release();
    }
}

/// The fields of a /proc/PID/stat line this module reads.
struct ProcStat {
    state: char,
    ppid: u32,
    exit_code: i32,
}

impl ProcStat {
    fn parse(line: &str) -> Option<ProcStat> {
        let fields = crate::process::stat_fields(line)?;
        // Field 3 is the state, 4 the parent, 52 the exit code (Linux 3.5 and later).
        Some(ProcStat {
            state: fields.first()?.chars().next()?,
            ppid: fields.get(1)?.parse().ok()?,
            exit_code: fields.get(49)?.trim().parse().ok()?,
        })
    }
}

/// Writes `bytes` to `stream` with `fds` attached to its first byte (`SCM_RIGHTS`).
pub(crate) fn send_with_fds(
    stream: &mut UnixStream,
    bytes: &[u8],
    fds: &[RawFd],
) -> std::io::Result<()> {
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    // u64 elements: the control buffer must be aligned for `cmsghdr`.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: msghdr is plain data; zeroed is a valid empty header.
    let mut header: libc::msghdr = unsafe { std::mem::zeroed() };
    header.msg_iov = &mut iov;
    header.msg_iovlen = 1;
    header.msg_control = control.as_mut_ptr().cast();
    header.msg_controllen = space as _;
    // SAFETY: the header points at one iovec and a control buffer of `space` bytes, both alive
    // for the call; CMSG_FIRSTHDR of such a header is non-null and the data fits (CMSG_SPACE).
    let sent = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&header);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
        std::ptr::copy_nonoverlapping(
            fds.as_ptr(),
            libc::CMSG_DATA(cmsg).cast::<RawFd>(),
            fds.len(),
        );
        libc::sendmsg(stream.as_raw_fd(), &header, libc::MSG_NOSIGNAL)
    };
    if sent < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // The descriptors went with the first byte; the rest, if the socket took only part, follows.
    stream.write_all(&bytes[sent as usize..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_library_beside_the_tests_is_this_build() {
        let path = find_sandbox_library().expect("the cdylib cargo built beside this test binary");
        assert_eq!(library_build_id(&path), Ok(crucible_sandbox::ffi::BUILD_ID));
    }

    #[test]
    fn a_file_that_is_no_sandbox_library_is_refused_with_its_reason() {
        let dir = tempfile::tempdir().expect("a directory");
        let fake = dir.path().join(SANDBOX_LIBRARY_NAME);
        std::fs::write(&fake, b"not a library").expect("the file");
        let why = library_build_id(&fake).expect_err("refused");
        assert!(why.starts_with("cannot load"), "{why}");
    }

    #[test]
    fn a_stat_line_gives_state_parent_and_exit_code() {
        let mut fields = vec!["0"; 52];
        fields[0] = "7";
        fields[1] = "(a b) c)";
        fields[2] = "Z";
        fields[3] = "42";
        fields[51] = "9";
        let stat = ProcStat::parse(&(fields.join(" ") + "\n")).expect("parses");
        assert_eq!((stat.state, stat.ppid, stat.exit_code), ('Z', 42, 9));
        assert!(ProcStat::parse("7 (short) R 1").is_none());
    }
}
