//! The PID namespace (with its supervisor and init), the mount namespace with a private /proc
//! and an empty /run, and the network and IPC namespaces unshared with it.
//!
//! All of it runs between fork and exec, and it forks twice more there: raw system calls only
//! (no allocation, no locks), since the judge that forked is multithreaded.

use std::io;

use super::landlock::{PreparedRuleset, Reach};
use super::root::MinimalRoot;
use super::{check, errno};

/// Exit status of the supervisor or init when their own bookkeeping fails.
const SUPERVISOR_FAILED: libc::c_int = 125;

/// Whether a PID and mount namespace with a private /proc can be made here. Runs in a throwaway
/// forked child (see `super::probe`); its own child mounts in its own namespace only.
pub(super) fn namespace_works() -> bool {
    // SAFETY: raw system calls in a throwaway forked child.
    unsafe { as_new_namespace_init(&|| mount_private_proc(None, None).is_ok()) }
}

/// Whether init can build a minimal root here (`pivot_root` needs the host's root to be a mount
/// point, which an initramfs root is not). Plans one with a directory of its own, and builds it
/// in a throwaway forked child.
pub(super) fn minimal_root_works() -> bool {
    let Ok(dir) = tempfile::tempdir() else {
        return false;
    };
    let rules = [(dir.path().to_path_buf(), Reach::ReadWrite)];
    let Ok(root) = MinimalRoot::plan(&rules, dir.path()) else {
        return false;
    };
    let Ok(cwd) = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: raw system calls in a throwaway forked child (see `super::probe`).
    super::probe(&|| unsafe {
        as_new_namespace_init(&|| {
            libc::chdir(cwd.as_ptr()) == 0 && mount_private_proc(None, Some(&root)).is_ok()
        })
    })
}

/// Runs `check` as init of new PID and mount namespaces (a child of the caller, which unshares
/// them); whether it held.
///
/// # Safety
///
/// Only in a throwaway forked child (see `super::probe`): it unshares namespaces, and `check`
/// makes raw system calls only.
unsafe fn as_new_namespace_init(check: &dyn Fn() -> bool) -> bool {
    // SAFETY: raw system calls in the caller's throwaway child (the function's contract).
    unsafe {
        if libc::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNS) != 0 {
            return false;
        }
        let pid = libc::fork();
        if pid == 0 {
            libc::_exit(if check() { 0 } else { 1 });
        }
        let mut status = 0;
        pid > 0
            && libc::waitpid(pid, &mut status, 0) == pid
            && libc::WIFEXITED(status)
            && libc::WEXITSTATUS(status) == 0
    }
}

/// The kernel's `RESERVED_PIDS`: after a PID namespace's PIDs first wrap around, new tasks get
/// PIDs from here up to pid_max only (kernel/pid.c, `alloc_pid`), in every namespace.
pub(super) const RESERVED_PIDS: u64 = 300;

/// The smallest pid_max the kernel accepts (`RESERVED_PIDS` + 1).
pub(super) const PID_MAX_FLOOR: u64 = RESERVED_PIDS + 1;

/// Whether this kernel keeps pid_max per PID namespace (Linux 6.14 and later), so that init can
/// cap the number of tasks in the candidate's namespace. Decided by the kernel's release: on an
/// older kernel the same file is the host's one pid_max, which a probe must never write.
pub(super) fn namespace_pid_max_works() -> bool {
    let Ok(release) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return false;
    };
    let mut numbers = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    if version < (6, 14) {
        return false;
    }
    let host_before = std::fs::read_to_string("/proc/sys/kernel/pid_max");
    // SAFETY: raw system calls in a throwaway forked child (see `super::probe`).
    let works = super::probe(&|| unsafe {
        as_new_namespace_init(&|| {
            mount_private_proc(None, None).is_ok()
                && cap_namespace_tasks(PID_MAX_FLOOR).is_ok()
                && read_pid_max() == Some(PID_MAX_FLOOR)
        })
    });
    // The host's own value must not have moved (it would, were the file not per namespace).
    works && std::fs::read_to_string("/proc/sys/kernel/pid_max").ok() == host_before.ok()
}

/// Sets pid_max of the calling process's PID namespace (as shown by the /proc mounted for it):
/// at most `pid_max - 1` tasks can then live in the namespace. Only where
/// `namespace_pid_max_works`.
///
/// # Safety
///
/// Raw system calls only: runs in init, between fork and exec.
unsafe fn cap_namespace_tasks(pid_max: u64) -> io::Result<()> {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut rest = pid_max;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let text = &digits[start..];
    // SAFETY: a static NUL-terminated path and a valid buffer of the length written.
    unsafe {
        let fd = libc::open(
            c"/proc/sys/kernel/pid_max".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        check(fd)?;
        let written = libc::write(fd, text.as_ptr().cast(), text.len());
        let write_error = io::Error::last_os_error();
        libc::close(fd);
        if written != text.len() as isize {
            return Err(write_error);
        }
    }
    Ok(())
}

/// pid_max as the calling process's /proc shows it.
unsafe fn read_pid_max() -> Option<u64> {
    let mut buffer = [0u8; 24];
    // SAFETY: a static NUL-terminated path and a valid buffer of the length read.
    let n = unsafe {
        let fd = libc::open(
            c"/proc/sys/kernel/pid_max".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return None;
        }
        let n = libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len());
        libc::close(fd);
        n
    };
    let mut value = 0u64;
    for &byte in buffer.get(..usize::try_from(n).ok()?)? {
        match byte {
            b'0'..=b'9' => value = value * 10 + u64::from(byte - b'0'),
            b'\n' => break,
            _ => return None,
        }
    }
    Some(value)
}

/// Supervisor → init → candidate, in new PID and mount namespaces (and those in `namespaces`).
/// With `pid_max`, init sets the namespace's own pid_max to it before forking the candidate: the
/// namespace then holds at most `pid_max - 1` tasks, init's included (the process limit of a
/// uid-0 candidate where no pids cgroup is writable). Returns in the candidate only.
///
/// # Safety
///
/// Only in a freshly forked, single-threaded child before exec (see `Confinement::enter`).
pub(super) unsafe fn enter(
    namespaces: libc::c_int,
    ruleset: Option<&PreparedRuleset>,
    root: Option<&MinimalRoot>,
    pid_max: Option<u64>,
) -> io::Result<()> {
    // SAFETY: raw system calls in the forked child (see the function's contract).
    unsafe {
        // Init writes the candidate's wait status here; the supervisor holds the read end, so
        // init can also tell whether the supervisor is still alive.
        let mut pipe = [-1; 2];
        check(libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC))?;
        let [read_end, write_end] = pipe;
        check(libc::unshare(
            libc::CLONE_NEWPID | libc::CLONE_NEWNS | namespaces,
        ))?;
        match libc::fork() {
            -1 => return Err(io::Error::last_os_error()),
            0 => {}
            init => supervise(init, read_end, write_end),
        }
        // Init: pid 1 of the new namespace. The parent-death signal is not inherited across
        // fork; with it, the judge's death reaches the namespace through the supervisor.
        libc::close(read_end);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if supervisor_gone(write_end) {
            libc::_exit(SUPERVISOR_FAILED);
        }
        mount_private_proc(ruleset, root)?;
        if let Some(pid_max) = pid_max {
            cap_namespace_tasks(pid_max)?;
        }
        match libc::fork() {
            -1 => return Err(io::Error::last_os_error()),
            0 => {}
            candidate => reap(candidate, write_end),
        }
        libc::close(write_end);
    }
    Ok(())
}

/// Makes every mount of the calling process's (new) mount namespace private: nothing mounted
/// in it afterwards propagates to the host's.
///
/// # Safety
///
/// One raw system call; for a child between fork and exec.
pub(super) unsafe fn make_mounts_private() -> io::Result<()> {
    // SAFETY: a raw system call with a static NUL-terminated path.
    check(unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        )
    })
}

/// Mounts a /proc of the new PID namespace, in the new mount namespace: the candidate sees only
/// its own processes, and pids in /proc match what getpid() says (the CUDA driver fails to
/// initialize otherwise). With a minimal root, init builds it and /proc comes with it;
/// otherwise the new /proc goes over the host's and an empty tmpfs over /run. The new /proc
/// needs a Landlock rule of its own: rules follow inodes, and the parent's rule is on the
/// host's /proc.
unsafe fn mount_private_proc(
    ruleset: Option<&PreparedRuleset>,
    root: Option<&MinimalRoot>,
) -> io::Result<()> {
    // SAFETY: raw system calls with static NUL-terminated strings and valid structs.
    unsafe {
        make_mounts_private()?;
        if let Some(root) = root {
            root.enter()?;
            if let Some(ruleset) = ruleset {
                ruleset.allow_private_proc()?;
            }
            return Ok(());
        }
        check(libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ))?;
        // Daemons keep their Unix sockets in /run (docker, containerd, dbus); an empty tmpfs
        // over it hides them from a candidate that may make Unix sockets (on a GPU).
        if libc::access(c"/run".as_ptr(), libc::F_OK) == 0 {
            check(libc::mount(
                c"tmpfs".as_ptr(),
                c"/run".as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                c"size=1m,mode=755".as_ptr().cast(),
            ))?;
        }
    }
    if let Some(ruleset) = ruleset {
        ruleset.allow_private_proc()?;
    }
    Ok(())
}

/// The supervisor (the process the judge spawned): waits for init and ends the way the candidate
/// ended.
unsafe fn supervise(init: libc::pid_t, read_end: libc::c_int, write_end: libc::c_int) -> ! {
    // SAFETY: raw system calls in the forked child; `reported` is a valid buffer of the size read.
    unsafe {
        libc::close(write_end);
        // The channel, the log pipes and the spawn's error pipe belong to the candidate alone:
        // the judge must see them close when the candidate dies.
        close_all_but(read_end);
        let mut status = 0;
        loop {
            if libc::waitpid(init, &mut status, 0) == init {
                break;
            }
            if errno() != libc::EINTR {
                libc::_exit(SUPERVISOR_FAILED);
            }
        }
        let mut reported: libc::c_int = 0;
        let size = std::mem::size_of::<libc::c_int>();
        let n = libc::read(read_end, (&mut reported as *mut libc::c_int).cast(), size);
        // Without a report init itself was killed (the judge's timeout, say): end like init.
        mirror(if n == size as isize { reported } else { status })
    }
}

/// Init of the namespace: reaps every orphan, and when the candidate ends reports its status and
/// exits, which makes the kernel kill whatever is left in the namespace.
unsafe fn reap(candidate: libc::pid_t, write_end: libc::c_int) -> ! {
    // SAFETY: raw system calls in the forked child; `status` is a valid buffer of the size written.
    unsafe {
        close_all_but(write_end);
        let mut status = 0;
        loop {
            let pid = libc::waitpid(-1, &mut status, libc::__WALL);
            if pid == candidate {
                libc::write(
                    write_end,
                    (&status as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>(),
                );
                libc::_exit(0);
            }
            if pid < 0 && errno() != libc::EINTR {
                libc::_exit(SUPERVISOR_FAILED);
            }
        }
    }
}

/// Ends the calling process the way `status` says: the same exit code, or the same signal.
unsafe fn mirror(status: libc::c_int) -> ! {
    // SAFETY: raw system calls on the calling process; the structs are valid and zero-initialized.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &action, std::ptr::null_mut());
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else {
            SUPERVISOR_FAILED
        })
    }
}

/// Whether the read end of init's pipe is closed, i.e. the supervisor already died (before
/// init's parent-death signal was armed).
unsafe fn supervisor_gone(write_end: libc::c_int) -> bool {
    let mut poll = libc::pollfd {
        fd: write_end,
        events: 0,
        revents: 0,
    };
    // SAFETY: `poll` is one valid pollfd.
    unsafe { libc::poll(&mut poll, 1, 0) > 0 && poll.revents & libc::POLLERR != 0 }
}

unsafe fn close_all_but(keep: libc::c_int) {
    // SAFETY: closing descriptors of the calling process.
    unsafe {
        let keep = keep as libc::c_uint;
        let below = keep == 0 || libc::syscall(libc::SYS_close_range, 0u32, keep - 1, 0u32) == 0;
        let above = libc::syscall(libc::SYS_close_range, keep + 1, libc::c_uint::MAX, 0u32) == 0;
        if !(below && above) {
            // Kernels before 5.9 lack close_range.
            let mut limit: libc::rlimit = std::mem::zeroed();
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
            let top = limit.rlim_cur.min(1 << 20) as libc::c_int;
            for fd in (0..top).filter(|fd| *fd as libc::c_uint != keep) {
                libc::close(fd);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer_probe;
    use std::os::unix::process::ExitStatusExt;

    fn pid_namespace_supported() -> bool {
        if !crate::support().pid_namespace {
            eprintln!("SKIPPED: this host cannot make a PID namespace with a private /proc");
            return false;
        }
        true
    }

    /// The candidate is init's child in a namespace of its own: it sees neither the judge nor
    /// any other process, has no network but a downed loopback, no System V IPC of the host's,
    /// and an empty /run.
    #[test]
    fn the_candidate_sees_only_its_own_namespaces() {
        if !pid_namespace_supported() {
            return;
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp listener");
        listener.set_nonblocking(true).unwrap();
        let key = 0x4352_0000 | (std::process::id() as libc::key_t & 0xffff);
        // SAFETY: a plain System V call; the queue is removed below.
        let queue = unsafe { libc::msgget(key, libc::IPC_CREAT | 0o600) };
        assert!(queue >= 0, "msgget: {}", io::Error::last_os_error());
        let name = "pid::tests::probe_namespaces";
        let output = layer_probe::run(
            name,
            &[
                ("JUDGE", std::process::id().to_string()),
                ("PORT", listener.local_addr().unwrap().port().to_string()),
                ("IPC_KEY", key.to_string()),
            ],
            // SAFETY: `enter` makes raw system calls only.
            || unsafe { enter(libc::CLONE_NEWNET | libc::CLONE_NEWIPC, None, None, None) },
        );
        // SAFETY: removes the queue made above.
        unsafe { libc::msgctl(queue, libc::IPC_RMID, std::ptr::null_mut()) };
        layer_probe::assert_passed(name, &output);
        layer_probe::assert_nothing_accepted(listener.accept());
    }

    #[test]
    #[ignore = "a probe: run confined by the_candidate_sees_only_its_own_namespaces"]
    fn probe_namespaces() {
        if !layer_probe::in_probe() {
            return;
        }
        let var = |name: &str| std::env::var(name).expect(name);
        // SAFETY: getpid and getppid have no preconditions.
        let (pid, parent) = unsafe { (libc::getpid(), libc::getppid()) };
        assert_eq!((pid, parent), (2, 1), "the candidate is init's first child");
        let mut pids: Vec<u32> = std::fs::read_dir("/proc")
            .expect("/proc")
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        pids.sort();
        assert_eq!(pids, [1, 2], "only init and the candidate are visible");
        let judge: libc::pid_t = var("JUDGE").parse().unwrap();
        // SAFETY: signal 0 only checks whether the process exists and may be signalled.
        let rc = unsafe { libc::kill(judge, 0) };
        assert_eq!(
            (rc, errno()),
            (-1, libc::ESRCH),
            "the judge is out of reach"
        );
        if std::path::Path::new("/run").exists() {
            let entries = std::fs::read_dir("/run").expect("/run").count();
            assert_eq!(entries, 0, "/run is an empty tmpfs");
        }
        let devices = std::fs::read_to_string("/proc/self/net/dev").expect("net/dev");
        let interfaces: Vec<&str> = devices
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next())
            .map(str::trim)
            .collect();
        assert_eq!(interfaces, ["lo"], "{devices}");
        let port: u16 = var("PORT").parse().unwrap();
        let connected = std::net::TcpStream::connect(("127.0.0.1", port));
        assert!(connected.is_err(), "reached the host's loopback");
        let key: libc::key_t = var("IPC_KEY").parse().unwrap();
        // SAFETY: a plain System V lookup.
        let rc = unsafe { libc::msgget(key, 0) };
        assert_eq!(
            (rc, errno()),
            (-1, libc::ENOENT),
            "the host's message queue"
        );
    }

    /// Exit codes and fatal signals reach the judge unchanged through init and the supervisor.
    #[test]
    fn the_supervisor_ends_the_way_the_candidate_ended() {
        if !pid_namespace_supported() {
            return;
        }
        let name = "pid::tests::probe_ending";
        let run = |ending: &str| {
            // SAFETY: `enter` makes raw system calls only.
            let output = layer_probe::run(name, &[("ENDING", ending.into())], || unsafe {
                enter(0, None, None, None)
            });
            output.status
        };
        assert_eq!(run("exit").code(), Some(7));
        assert_eq!(run("signal").signal(), Some(libc::SIGTERM));
    }

    #[test]
    #[ignore = "a probe: run confined by the_supervisor_ends_the_way_the_candidate_ended"]
    fn probe_ending() {
        if !layer_probe::in_probe() {
            return;
        }
        match std::env::var("ENDING").as_deref() {
            Ok("exit") => std::process::exit(7),
            // SAFETY: the probe ends itself.
            Ok("signal") => unsafe {
                libc::kill(libc::getpid(), libc::SIGTERM);
            },
            other => panic!("unknown ending {other:?}"),
        }
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}
