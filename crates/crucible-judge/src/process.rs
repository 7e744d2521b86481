//! One harness process (referee or candidate) and the private channel to it: spawned by fork
//! and exec from the judge, or forked by the zygote (`crate::zygote`).
//!
//! The channel is a Unix socket pair whose child end the child keeps open across exec, at the
//! number `CRUCIBLE_CHANNEL_FD` names (a referee the zygote forks has it on fd 3); stdout and
//! stderr are only captured as logs, so nothing the candidate prints can pose as a reply.
//! Every request has a deadline; a process that misses it is killed with its whole process
//! group, and a process that dies is reported with its exit status or signal.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::sandbox::{PidsCgroup, Sandbox};
use crate::zygote::{ForkAs, ForkedChild, ZygoteLink};

/// The environment variable that tells a spawned harness process its channel's descriptor.
const CHANNEL_FD_ENV: &str = "CRUCIBLE_CHANNEL_FD";

/// At most this much of a child's stdout+stderr is kept for diagnostics.
const LOG_CAP: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("no reply within {0:?}")]
    Timeout(Duration),
    #[error("the process ended: {0}")]
    Exited(ExitDescription),
    #[error("malformed reply: {0}")]
    Protocol(String),
    #[error("channel I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// How a child process ended.
#[derive(Debug, Clone)]
pub struct ExitDescription {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl std::fmt::Display for ExitDescription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.signal, self.code) {
            (Some(sig), _) => write!(f, "killed by signal {sig} ({})", signal_name(sig)),
            (None, Some(code)) => write!(f, "exited with status {code}"),
            (None, None) => write!(f, "ended with an unknown status"),
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV, segmentation fault",
        libc::SIGABRT => "SIGABRT, abort",
        libc::SIGKILL => "SIGKILL",
        libc::SIGBUS => "SIGBUS, bus error",
        libc::SIGFPE => "SIGFPE, arithmetic fault",
        libc::SIGILL => "SIGILL, illegal instruction",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

impl From<ExitStatus> for ExitDescription {
    fn from(status: ExitStatus) -> Self {
        ExitDescription {
            code: status.code(),
            signal: status.signal(),
        }
    }
}

/// What to start: the interpreter, the harness module and the child's environment.
pub struct Spawn {
    pub python: PathBuf,
    pub module: &'static str,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub sandbox: Option<Sandbox>,
}

pub struct HarnessProcess {
    owner: Owner,
    /// The candidate's pids cgroup; dropped (removed) after the process is killed.
    _cgroup: Option<PidsCgroup>,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    log: Arc<Mutex<Vec<u8>>>,
    exited: Option<ExitDescription>,
}

impl HarnessProcess {
    pub fn spawn(spec: Spawn) -> std::io::Result<HarnessProcess> {
        let (parent_end, child_end) = UnixStream::pair()?;
        let child_fd = child_end.as_raw_fd();
        let mut cmd = Command::new(&spec.python);
        cmd.arg("-u")
            .arg("-m")
            .arg(spec.module)
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env(CHANNEL_FD_ENV, child_fd.to_string())
            .current_dir(&spec.cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Built here, before fork: the child may not allocate.
        let (confinement, cgroup) = match &spec.sandbox {
            Some(sandbox) => {
                let (confinement, cgroup) = sandbox.prepare(&spec.python)?;
                (Some(confinement), cgroup)
            }
            None => (None, None),
        };
        let judge_pid = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs between fork and exec; it only makes async-signal-safe
        // system calls (setsid, prctl, getppid, fcntl and the sandbox's own calls, which are raw
        // system calls too).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // Die with the judge: an orphaned candidate must not keep a GPU busy. With a PID
                // namespace this reaches the candidate through the sandbox's init.
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != judge_pid {
                    // The judge died before the signal was armed.
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                // The channel stays where it is, its number in the environment: moving it onto
                // a fixed number would close whatever held that number at the fork, which the
                // judge's other threads decide (the prepared Landlock ruleset, std's exec-error
                // pipe). A ruleset replaced so failed the spawn with EBADFD, one in many.
                if libc::fcntl(child_fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some(confinement) = &confinement {
                    confinement.enter()?;
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        drop(child_end);
        let log = drain_logs(
            [
                child
                    .stdout
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
                child
                    .stderr
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
            ]
            .into_iter()
            .flatten(),
        );
        let reader = BufReader::new(parent_end.try_clone()?);
        Ok(HarnessProcess {
            owner: Owner::Spawned(child),
            _cgroup: cgroup,
            writer: parent_end,
            reader,
            log,
            exited: None,
        })
    }

    /// A referee or candidate process (`what`) forked by the zygote behind `link`, working in
    /// `cwd` with exactly `env`: the same channel (on fd 3) and the same captured logs as a
    /// spawned one.
    pub(crate) fn forked(
        link: &Arc<ZygoteLink>,
        cwd: &Path,
        env: &[(String, String)],
        what: ForkAs,
    ) -> std::io::Result<HarnessProcess> {
        let (parent_end, child_end) = UnixStream::pair()?;
        let (stdout_read, stdout_write) = std::io::pipe()?;
        let (stderr_read, stderr_write) = std::io::pipe()?;
        let (pid, zygote_pid) = link.fork(
            cwd,
            env,
            [
                child_end.as_raw_fd(),
                stdout_write.as_raw_fd(),
                stderr_write.as_raw_fd(),
            ],
            &what,
        )?;
        // Kept (and removed when dropped) only once the child exists to be in it.
        let cgroup = match what {
            ForkAs::Candidate { cgroup, .. } => cgroup,
            ForkAs::Referee => None,
        };
        // The child has its copies; without ours closed, its end of a log would never come.
        drop((child_end, stdout_write, stderr_write));
        let owner = Owner::Forked(ForkedChild::new(pid, zygote_pid, Arc::clone(link)));
        let log =
            drain_logs([stdout_read, stderr_read].map(|s| Box::new(s) as Box<dyn Read + Send>));
        let reader = BufReader::new(parent_end.try_clone()?);
        Ok(HarnessProcess {
            owner,
            _cgroup: cgroup,
            writer: parent_end,
            reader,
            log,
            exited: None,
        })
    }

    /// Waits for the next message from the child.
    pub fn receive(&mut self, timeout: Duration) -> Result<Value, ChannelError> {
        if let Some(exit) = &self.exited {
            return Err(ChannelError::Exited(exit.clone()));
        }
        self.reader.get_ref().set_read_timeout(Some(timeout))?;
        let deadline = Instant::now() + timeout;
        let mut line = String::new();
        loop {
            match self.reader.read_line(&mut line) {
                Ok(0) => return Err(ChannelError::Exited(self.reap())),
                Ok(_) if line.ends_with('\n') => break,
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if Instant::now() >= deadline {
                        self.kill();
                        return Err(ChannelError::Timeout(timeout));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
        serde_json::from_str(&line).map_err(|e| ChannelError::Protocol(format!("{e}: {line:.200}")))
    }

    /// Sends one request and waits for its reply.
    pub fn request(&mut self, msg: &Value, timeout: Duration) -> Result<Value, ChannelError> {
        self.send(msg)?;
        self.receive(timeout)
    }

    /// Writes one message with file descriptors attached (`SCM_RIGHTS`): the zygote's fork.
    pub(crate) fn send_with_fds(&mut self, msg: &Value, fds: &[RawFd]) -> std::io::Result<()> {
        let mut bytes = serde_json::to_vec(msg)?;
        bytes.push(b'\n');
        crate::zygote::send_with_fds(&mut self.writer, &bytes, fds)
    }

    /// Writes one message (a line of JSON) to the child.
    pub(crate) fn send(&mut self, msg: &Value) -> Result<(), ChannelError> {
        let mut bytes =
            serde_json::to_vec(msg).map_err(|e| ChannelError::Protocol(e.to_string()))?;
        bytes.push(b'\n');
        match self.writer.write_all(&bytes) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                Err(ChannelError::Exited(self.reap()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// [`HarnessProcess::request`], during which the child may also send notes
    /// (`{"note": "..."}`, see `protocol.rs`): each goes to `on_note`, and what that returns, if
    /// anything, is written back before waiting on. The deadline covers the whole exchange
    /// except the time `on_note` takes: that is the judge's (waiting for a GPU share, or for the
    /// referee's work), and a child waiting for its answer must not run out of time over it.
    pub fn request_noting(
        &mut self,
        msg: &Value,
        timeout: Duration,
        on_note: &mut NoteHandler<'_>,
    ) -> Result<Value, ChannelError> {
        let mut deadline = Instant::now() + timeout;
        let mut reply = self.request(msg, timeout)?;
        loop {
            let Some(note) = note_of(&reply) else {
                return Ok(reply);
            };
            let handling = Instant::now();
            let answer = on_note(note, &reply).map_err(ChannelError::Protocol)?;
            deadline += handling.elapsed();
            if let Some(answer) = answer {
                self.send(&answer)?;
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                self.kill();
                return Err(ChannelError::Timeout(timeout));
            }
            reply = self.receive(remaining).map_err(|e| match e {
                ChannelError::Timeout(_) => ChannelError::Timeout(timeout),
                other => other,
            })?;
        }
    }

    /// Waits briefly for the child to finish and records how it ended.
    fn reap(&mut self) -> ExitDescription {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.owner.try_wait() {
                Ok(Some(exit)) => {
                    self.exited = Some(exit.clone());
                    self.kill_group();
                    return exit;
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => {
                    self.kill();
                    let exit = ExitDescription {
                        code: None,
                        signal: None,
                    };
                    self.exited = Some(exit.clone());
                    return exit;
                }
            }
        }
    }

    /// The child's pid (the judge's view; inside a PID namespace the child sees another).
    pub fn pid(&self) -> u32 {
        self.owner.id()
    }

    /// Whether something from the child waits to be read (a message, or the end of its channel
    /// when it died), without waiting or reading it.
    pub fn has_message(&self) -> bool {
        if !self.reader.buffer().is_empty() {
            return true;
        }
        let mut poll = libc::pollfd {
            fd: self.reader.get_ref().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call; a zero timeout never blocks.
        let ready = unsafe { libc::poll(&mut poll, 1, 0) };
        ready > 0 && poll.revents != 0
    }

    /// Whether the child is still running (it has not exited and nobody has reaped it).
    pub fn running(&mut self) -> bool {
        self.exited.is_none() && matches!(self.owner.try_wait(), Ok(None))
    }

    /// Stops (`SIGSTOP`) or resumes (`SIGCONT`) the process and its group, so that nothing it
    /// runs can touch shared memory while the referee reads it.
    pub fn freeze(&self, frozen: bool) {
        if !self.owner.may_signal() {
            return;
        }
        let pid = self.owner.id() as libc::pid_t;
        let sig = if frozen { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: plain syscall on the child's own process group.
        unsafe {
            libc::kill(-pid, sig);
        }
    }

    pub(crate) fn kill_group(&self) {
        if !self.owner.may_signal() {
            return;
        }
        let pid = self.owner.id() as libc::pid_t;
        // SAFETY: plain syscall; the child called setsid, so its pid is its process group id.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }

    /// Kills the process and everything it started.
    pub fn kill(&mut self) {
        self.kill_group();
        self.owner.kill_and_wait();
    }

    /// Ends the process and its group. Nothing is left to flush on the Python side, and an
    /// interpreter that has imported torch takes about a second to exit politely.
    pub fn shutdown(mut self) {
        self.kill();
    }

    /// The tail of what the process printed (stdout and stderr interleaved), for diagnostics.
    pub fn log_tail(&self, max: usize) -> String {
        // A short grace period lets the drain threads pick up the last bytes of a dead child.
        std::thread::sleep(Duration::from_millis(20));
        let log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
        let start = log.len().saturating_sub(max);
        String::from_utf8_lossy(&log[start..]).into_owned()
    }
}

/// Whose child the process is: this process's (spawned by fork and exec), or the referee
/// zygote's (forked from it; see `crate::zygote`).
enum Owner {
    Spawned(Child),
    Forked(ForkedChild),
}

impl Owner {
    fn id(&self) -> u32 {
        match self {
            Owner::Spawned(child) => child.id(),
            Owner::Forked(child) => child.id(),
        }
    }

    /// How it ended, or `None` while it runs.
    fn try_wait(&mut self) -> std::io::Result<Option<ExitDescription>> {
        match self {
            Owner::Spawned(child) => Ok(child.try_wait()?.map(ExitDescription::from)),
            Owner::Forked(child) => Ok(child.try_wait()),
        }
    }

    /// Whether its pid and process group id still name it (a forked child's could be reused
    /// once it has been released).
    fn may_signal(&self) -> bool {
        match self {
            Owner::Spawned(_) => true,
            Owner::Forked(child) => child.may_signal(),
        }
    }

    fn kill_and_wait(&mut self) {
        match self {
            Owner::Spawned(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Owner::Forked(child) => child.kill_and_release(),
        }
    }
}

/// The child's output streams, each drained into one shared log by a thread of its own.
fn drain_logs(streams: impl IntoIterator<Item = Box<dyn Read + Send>>) -> Arc<Mutex<Vec<u8>>> {
    let log = Arc::new(Mutex::new(Vec::new()));
    for stream in streams {
        let log = Arc::clone(&log);
        std::thread::spawn(move || drain_into(stream, &log));
    }
    log
}

impl Drop for HarnessProcess {
    fn drop(&mut self) {
        if self.exited.is_none() {
            self.kill();
        }
    }
}

/// The text of a note (`{"note": "..."}` and nothing else), if `message` is one.
fn note_of(message: &Value) -> Option<&str> {
    let object = message.as_object()?;
    // A note names itself and may say which launcher it builds (`LauncherSignatures`); a
    // message with anything else is a reply.
    if object
        .keys()
        .any(|key| key != "note" && key != NOTE_LAUNCHER_FIELD)
    {
        return None;
    }
    object.get("note")?.as_str()
}

/// What the judge does with a child's note: given the note's name and the whole message, the
/// answer to send (if any), or why the note is a protocol error.
pub type NoteHandler<'a> = dyn FnMut(&str, &Value) -> Result<Option<Value>, String> + 'a;

/// The optional field of a `compiling` note naming the launcher's argument types.
const NOTE_LAUNCHER_FIELD: &str = "launcher";

fn drain_into(mut stream: Box<dyn Read + Send>, log: &Mutex<Vec<u8>>) {
    let mut buf = [0u8; 8192];
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        if let Ok(mut log) = log.lock() {
            log.extend_from_slice(&buf[..n]);
            if log.len() > 2 * LOG_CAP {
                let cut = log.len() - LOG_CAP;
                log.drain(..cut);
            }
        }
    }
}

/// `setpriority` on a process group: every thread of every process in it (threads started
/// later inherit it). A negative nice needs `CAP_SYS_NICE`, which the judge has as root; the
/// candidate, without capabilities, can only lower its own.
pub(crate) fn set_group_nice(group: libc::pid_t, nice: i32) -> std::io::Result<()> {
    // SAFETY: plain syscall on a process group id.
    let done = unsafe { libc::setpriority(libc::PRIO_PGRP, group as libc::id_t, nice) };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// CPU seconds (user and system) used so far by every process of a process group, with the
/// children each has waited for (a candidate's compiler runs), read from /proc. Processes that
/// ended and were reaped by someone outside the group are not counted.
pub(crate) fn group_cpu_seconds(group: libc::pid_t) -> f64 {
    // SAFETY: plain syscall without arguments.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks_per_s <= 0 {
        return 0.0;
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let ticks: u64 = entries
        .flatten()
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .filter_map(|stat| group_ticks(&stat, group))
        .sum();
    ticks as f64 / ticks_per_s as f64
}

/// Whether `pid` names no running process: gone, or ended and not yet waited for (a zombie).
pub fn has_ended(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat_fields(&stat)?.first().map(|state| *state == "Z"))
        .unwrap_or(true)
}

/// The fields of a /proc/PID/stat line from field 3 (the state) on.
pub(crate) fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    // The command name (field 2) may hold spaces and parentheses: fields count from its end.
    Some(stat.get(stat.rfind(')')? + 2..)?.split(' ').collect())
}

/// utime + stime + cutime + cstime from one /proc/PID/stat line, if the process is in `group`.
fn group_ticks(stat: &str, group: libc::pid_t) -> Option<u64> {
    let fields = stat_fields(stat)?;
    // Fields 3 (state), 4 (ppid), 5 (pgrp) ... 14-17 (utime, stime, cutime, cstime).
    let pgrp: libc::pid_t = fields.get(2)?.parse().ok()?;
    if pgrp != group {
        return None;
    }
    fields
        .get(11..15)?
        .iter()
        .map(|f| f.parse::<u64>().ok())
        .sum()
}

/// Whether this process may give a process back a priority it lowered: `CAP_SYS_NICE`
/// (root's), or an `RLIMIT_NICE` that reaches its own nice value.
pub fn can_raise_priority() -> bool {
    const CAP_SYS_NICE: u32 = 23;
    let capable = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
            u64::from_str_radix(hex.trim(), 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_NICE) != 0);
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscall filling one rlimit struct.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NICE, &mut limit) } == 0;
    // RLIMIT_NICE allows nice values down to 20 - rlim_cur.
    let by_limit = got
        && 20 - i64::try_from(limit.rlim_cur).unwrap_or(i64::MAX).min(40) <= i64::from(own_nice());
    capable || by_limit
}

/// This process's own nice value (what the harness processes inherit at spawn).
pub(crate) fn own_nice() -> i32 {
    // SAFETY: plain syscall on this process; -1 is also a valid nice, so errno tells failure
    // apart, and for the calling process there is none to expect.
    unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    #[test]
    fn a_stat_line_counts_only_in_its_group_and_its_name_may_hold_anything() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime ...
        let stat = "42 (a) b (c) R 1 77 77 0 -1 0 0 0 0 0 10 20 30 40 20 0 1 0 5 6 7";
        assert_eq!(group_ticks(stat, 77), Some(100));
        assert_eq!(group_ticks(stat, 78), None);
        assert_eq!(group_ticks("garbage", 77), None);
    }

    /// A shell in a group of its own runs a CPU-bound child shell and waits for it; the child
    /// writes its own /proc stat line as it ends. The group's count holds that child's time
    /// (the parent's `cutime`), whatever else the machine is doing; a group nobody is in has none.
    #[test]
    fn a_group_counts_the_cpu_of_the_children_it_waited_for() {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().expect("a temp dir");
        let (stat, done) = (dir.path().join("stat"), dir.path().join("done"));
        let script = format!(
            "sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; cat /proc/$$/stat > {}'; \
             touch {}; sleep 30",
            stat.display(),
            done.display()
        );
        let mut parent = std::process::Command::new("sh")
            .args(["-c", &script])
            .process_group(0)
            .spawn()
            .expect("sh");
        let group = parent.id() as libc::pid_t;
        let until = Instant::now() + Duration::from_secs(60);
        while !done.exists() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let used = group_cpu_seconds(group);
        let _ = parent.kill();
        let _ = parent.wait();
        let child_stat = std::fs::read_to_string(&stat).expect("the child's stat");
        let fields: Vec<u64> = child_stat[child_stat.rfind(')').expect("comm") + 2..]
            .split(' ')
            .skip(11)
            .take(2)
            .map(|f| f.parse().expect("ticks"))
            .collect();
        // SAFETY: plain syscall without arguments.
        let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        let child_s = fields.iter().sum::<u64>() as f64 / ticks_per_s;
        assert!(child_s > 0.02, "the loop used {child_s} s");
        assert!(
            used >= child_s,
            "the group {used} s, its child alone {child_s} s"
        );
        assert_eq!(group_cpu_seconds(i32::MAX - 1), 0.0);
    }
}

#[cfg(test)]
mod nice_tests {
    use super::*;

    /// The nice value of a process, from /proc/PID/stat (field 19).
    fn nice_of(pid: u32) -> i32 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
        let after_name = &stat[stat.rfind(')').expect("comm") + 2..];
        after_name
            .split(' ')
            .nth(16)
            .expect("nice")
            .parse()
            .expect("number")
    }

    /// A child that sleeps as the leader of a process group of its own, and that group.
    fn sleeping_group_leader() -> (std::process::Child, libc::pid_t) {
        use std::os::unix::process::CommandExt;
        let child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("sleep");
        let group = child.id() as libc::pid_t;
        (child, group)
    }

    /// The answer matches what the kernel allows: lower a child's priority, then try to give it
    /// back.
    #[test]
    fn can_raise_priority_says_whether_a_lowered_priority_comes_back() {
        let (mut child, group) = sleeping_group_leader();
        let own = own_nice();
        if own > 14 {
            eprintln!("SKIPPED: this test runs at nice {own}, with no room to lower a child's");
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        set_group_nice(group, own + 5).expect("lowering is always allowed");
        let restored = set_group_nice(group, own).is_ok();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(can_raise_priority(), restored);
    }

    #[test]
    fn a_group_gets_the_priority_and_gives_it_back() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: raising a priority needs root (CAP_SYS_NICE)");
            return;
        }
        let (mut child, group) = sleeping_group_leader();
        let before = nice_of(child.id());
        assert_eq!(before, own_nice());
        set_group_nice(group, -7).expect("raise");
        assert_eq!(nice_of(child.id()), -7);
        set_group_nice(group, before).expect("restore");
        assert_eq!(nice_of(child.id()), before);
        let _ = child.kill();
        let _ = child.wait();
        assert!(set_group_nice(group, 0).is_err(), "the group is gone");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_may_name_its_launcher_and_nothing_else() {
        use serde_json::json;
        assert_eq!(note_of(&json!({"note": "compiled"})), Some("compiled"));
        let launcher = json!({"note": "compiling", "launcher": ["*fp32", "i32"]});
        assert_eq!(note_of(&launcher), Some("compiling"));
        // Anything else beside it makes a reply (whose checks then apply), never a note.
        assert_eq!(note_of(&json!({"note": "compiling", "ok": true})), None);
        assert_eq!(note_of(&json!({"launcher": ["i32"]})), None);
        assert_eq!(note_of(&json!({"note": 3})), None);
    }

    #[test]
    fn this_process_is_alive_and_an_unused_pid_is_not() {
        assert!(!has_ended(std::process::id()));
        assert!(has_ended(u32::MAX - 1));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(200)); // exited, not yet waited for: a zombie
        assert!(has_ended(pid));
        child.wait().unwrap();
    }
}
