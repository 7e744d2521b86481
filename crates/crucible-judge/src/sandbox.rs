//! Confinement of the candidate process, which runs hostile code.
//!
//! Layers, each on its own enough to stop one class of attack:
//!
//! - **PID namespace.** The process the judge spawns (the *supervisor*) unshares a PID namespace
//!   and forks its *init*, which forks the candidate. The candidate cannot see or name the judge,
//!   and when init dies (the candidate exited, the judge's timeout killed the process group, or
//!   the supervisor died with the judge) the kernel kills everything left in the namespace,
//!   including children that called `setsid` or double-forked. Init reports the candidate's wait
//!   status through a pipe and the supervisor ends the same way, so exit codes and signals reach
//!   the judge unchanged. A private mount namespace gets a /proc of the new PID namespace, so
//!   the candidate sees only its own processes.
//! - **Network and IPC namespaces**: nothing but a downed loopback, no System V IPC shared with
//!   the host.
//! - **A user id of its own** (`UID_BASE` + the supervisor's pid, unique while it lives), with
//!   every capability dropped but `CAP_DAC_OVERRIDE` (the scratch directories and the Python
//!   install belong to root). Root is exempt from `RLIMIT_NPROC` and may raise its hard limits;
//!   this user is not, so the process limit stops a fork bomb, and without `CAP_KILL` it cannot
//!   signal any root process.
//! - **Landlock**: read-only system and Python directories, writes only in its own scratch
//!   directory, and in the referee's shared-tensor directory only to files that already exist
//!   (so it can plant no symlink or file for the root referee to open); no TCP bind or connect,
//!   and (scoping) no signals to or abstract-socket connections with processes outside the
//!   sandbox. Landlock also refuses `ptrace` and `/proc/<pid>/{environ,mem,...}` of processes
//!   outside it.
//! - **seccomp**: no `AF_UNIX` sockets (Landlock does not cover connecting to a socket file, and
//!   `CAP_DAC_OVERRIDE` would open root daemons' sockets such as docker.sock) and no user
//!   namespaces (the kernel surface that most container escapes go through).
//! - **rlimits** on core dumps, file size, open files and processes, plus `no_new_privs`; and a
//!   **pids cgroup** with the same process limit, where the host has one.
//!
//! Everything that allocates (paths, the Landlock ruleset, probing the kernel) happens in the
//! parent before fork; between fork and exec only raw system calls run. Features the kernel
//! lacks are found once per judge process (probed in throwaway forked children) and skipped;
//! [`Sandbox::missing_features`] lists them, and the judge reports them as a `sandbox-degraded`
//! finding instead of failing.
//!
//! On a GPU the layers in `Sandbox::gpu_layers` apply, by default all but the user id (see
//! `Layers::GPU_DEFAULT`): CUDA IPC will not map the referee's memory into another user's
//! process. The candidate stays uid 0 with every capability dropped; Landlock also lets it write
//! its own /proc/<pid>, the seccomp filter lets it make Unix sockets (CUDA needs both), and an
//! empty tmpfs over /run hides the daemons' sockets. uid 0 is exempt from `RLIMIT_NPROC`, so
//! the process limit comes from a pids cgroup of the candidate's own where the host has a
//! writable v1 pids hierarchy (on every host, not only GPU ones). Left open on a GPU: Unix
//! sockets at paths outside /run.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// Resource limits and isolation for one candidate process.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// Largest file the process may write, in bytes.
    pub max_file_bytes: u64,
    /// Most file descriptors open at once.
    pub max_open_files: u64,
    /// Most tasks (processes and threads together) the candidate may have at once.
    pub max_processes: u64,
    /// Move into a fresh network namespace (no interfaces but a downed loopback).
    pub isolate_network: bool,
    /// Paths the process may read and execute besides the system and Python directories.
    pub read_only: Vec<PathBuf>,
    /// Directories the process may read and write.
    pub read_write: Vec<PathBuf>,
    /// Directories whose existing files the process may read and write; it may create, remove
    /// or rename nothing there.
    pub shared_files: Vec<PathBuf>,
    /// Give access to the NVIDIA device files (CUDA).
    pub gpu_devices: bool,
    /// The layers applied to a candidate on a GPU (all of them apply on the CPU).
    pub gpu_layers: Layers,
    /// Landlock's signal and abstract-socket scoping (ABI 6); off only to diagnose.
    pub landlock_scoping: bool,
}

/// The confinement layers that can be switched off one by one (the network namespace, the
/// rlimits and no_new_privs always apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layers {
    pub landlock: bool,
    pub seccomp: bool,
    pub pid_namespace: bool,
    pub ipc_namespace: bool,
    pub own_user: bool,
}

impl Layers {
    pub const ALL: Layers = Layers {
        landlock: true,
        seccomp: true,
        pid_namespace: true,
        ipc_namespace: true,
        own_user: true,
    };
    pub const NONE: Layers = Layers {
        landlock: false,
        seccomp: false,
        pid_namespace: false,
        ipc_namespace: false,
        own_user: false,
    };
    /// The names `parse` accepts, in order.
    pub const NAMES: [&'static str; 5] = ["landlock", "seccomp", "pid", "ipc", "user"];

    /// What a candidate on a GPU gets by default, measured with `scripts/gpu-sandbox-probe` and
    /// `scripts/gpu-check hacks,sandbox` on the H200 test host (driver 580, kernel 6.18): CUDA
    /// works under Landlock once the candidate may write its own /proc/<pid> (CUDA names its
    /// threads there), under the seccomp filter once it allows Unix sockets, and under the PID and
    /// IPC namespaces. CUDA IPC refuses to import the referee's memory into a process of another
    /// user id, so the candidate stays uid 0, without any capability.
    pub const GPU_DEFAULT: Layers = Layers {
        landlock: true,
        seccomp: true,
        pid_namespace: true,
        ipc_namespace: true,
        own_user: false,
    };

    /// Parses a comma list of `NAMES`, or `all` / `none`.
    pub fn parse(text: &str) -> Result<Layers, String> {
        let mut layers = Layers::NONE;
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "all" => layers = Layers::ALL,
                "none" => {}
                "landlock" => layers.landlock = true,
                "seccomp" => layers.seccomp = true,
                "pid" => layers.pid_namespace = true,
                "ipc" => layers.ipc_namespace = true,
                "user" => layers.own_user = true,
                other => {
                    return Err(format!(
                        "unknown sandbox layer `{other}` (expected all, none or a comma list of {})",
                        Layers::NAMES.join(", ")
                    ));
                }
            }
        }
        Ok(layers)
    }

    /// What each layer missing from this set leaves open, for the `sandbox-degraded` finding.
    fn off_on_gpu(self) -> Vec<&'static str> {
        let mut off = Vec::new();
        if !self.landlock {
            off.push("Landlock (off on a GPU)");
        }
        if !self.seccomp {
            off.push("seccomp filter (off on a GPU)");
        }
        if !self.pid_namespace {
            off.push("PID namespace (off on a GPU)");
        }
        if !self.ipc_namespace {
            off.push("IPC namespace (off on a GPU)");
        }
        if !self.own_user {
            off.push(
                "a user id of its own (off on a GPU: CUDA IPC needs the referee's; the candidate \
                 runs as uid 0 with no capabilities)",
            );
        }
        off
    }
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox {
            max_file_bytes: 1 << 30,
            max_open_files: 1024,
            // Threads count too: torch starts one per core, so this leaves room on a large host.
            max_processes: 1024,
            isolate_network: true,
            read_only: Vec::new(),
            read_write: Vec::new(),
            shared_files: Vec::new(),
            gpu_devices: false,
            gpu_layers: Layers::GPU_DEFAULT,
            landlock_scoping: true,
        }
    }
}

// --- kernel interfaces libc does not define -------------------------------------------------

const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

const FS_EXECUTE: u64 = 1 << 0;
const FS_WRITE_FILE: u64 = 1 << 1;
const FS_READ_FILE: u64 = 1 << 2;
const FS_READ_DIR: u64 = 1 << 3;
const FS_MAKE_CHAR: u64 = 1 << 6;
const FS_MAKE_BLOCK: u64 = 1 << 11;
/// Rights 0..=12 exist since ABI 1.
const FS_ABI1: u64 = (1 << 13) - 1;
const FS_REFER: u64 = 1 << 13;
const FS_TRUNCATE: u64 = 1 << 14;
const FS_IOCTL_DEV: u64 = 1 << 15;
/// The rights that apply to a file rather than a directory (a rule on a file may only grant these).
const FS_FILE_RIGHTS: u64 = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV;

const NET_BIND_TCP: u64 = 1 << 0;
const NET_CONNECT_TCP: u64 = 1 << 1;
const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;

/// `struct landlock_ruleset_attr` as of ABI 6; the kernel accepts the larger struct from older
/// ABIs as long as the fields they lack are zero.
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// `struct landlock_path_beneath_attr` (packed in the kernel's header).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const CAP_DAC_OVERRIDE: u32 = 1;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// First user id of the range candidates run as; far above any account a system creates.
const UID_BASE: u32 = 1_500_000_000;

/// `CAP_SYS_PTRACE` from `<linux/capability.h>` (the libc crate does not export it).
const CAP_SYS_PTRACE: libc::c_ulong = 19;

/// Exit status of the supervisor or init when their own bookkeeping fails.
const SUPERVISOR_FAILED: libc::c_int = 125;

// --- probing -------------------------------------------------------------------------------

/// What this kernel (and the judge's privileges) allow.
struct Support {
    landlock_abi: i32,
    net_namespace: bool,
    ipc_namespace: bool,
    pid_namespace: bool,
    own_user: bool,
    seccomp: bool,
    missing: Vec<&'static str>,
}

fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| {
        // SAFETY: the version query takes no pointers.
        let abi = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<RulesetAttr>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        } as i32;
        let landlock_abi = abi.max(0);
        // SAFETY (all probes): they run in a throwaway forked child.
        let net_namespace = probe(|| unsafe { libc::unshare(libc::CLONE_NEWNET) == 0 });
        let ipc_namespace = probe(|| unsafe { libc::unshare(libc::CLONE_NEWIPC) == 0 });
        let pid_namespace = probe(probe_pid_namespace);
        let own_user = probe(|| unsafe { become_user(UID_BASE + libc::getpid() as u32).is_ok() });
        let seccomp = probe(|| unsafe { install_seccomp(false).is_ok() });
        let mut missing = Vec::new();
        if landlock_abi < 1 {
            missing.push("Landlock (filesystem confinement, TCP rules and signal scoping)");
        } else {
            if landlock_abi < 4 {
                missing.push("Landlock TCP rules (ABI 4)");
            }
            if landlock_abi < 6 {
                missing.push("Landlock signal and abstract-socket scoping (ABI 6)");
            }
        }
        if !net_namespace {
            missing.push("network namespace");
        }
        if !ipc_namespace {
            missing.push("IPC namespace");
        }
        if !pid_namespace {
            missing.push("PID namespace");
        }
        if !own_user {
            missing.push("a user id of its own (the process limit is not enforced)");
        }
        if !seccomp {
            missing.push("seccomp filter (Unix sockets and user namespaces stay open)");
        }
        Support {
            landlock_abi,
            net_namespace,
            ipc_namespace,
            pid_namespace,
            own_user,
            seccomp,
            missing,
        }
    })
}

/// Runs `check` in a forked child, so a namespace, credential or filter change never touches the
/// judge. The checks only make raw system calls.
fn probe(check: fn() -> bool) -> bool {
    // SAFETY: the child only makes raw system calls (the probes below) and leaves with `_exit`.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            libc::_exit(if check() { 0 } else { 1 });
        }
        if pid < 0 {
            return false;
        }
        let mut status = 0;
        while libc::waitpid(pid, &mut status, 0) < 0 {
            if errno() != libc::EINTR {
                return false;
            }
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

fn probe_pid_namespace() -> bool {
    // SAFETY: runs in a throwaway forked child; its own child mounts in its own namespace only.
    unsafe {
        if libc::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNS) != 0 {
            return false;
        }
        let pid = libc::fork();
        if pid == 0 {
            libc::_exit(if mount_private_proc(None).is_ok() {
                0
            } else {
                1
            });
        }
        let mut status = 0;
        pid > 0
            && libc::waitpid(pid, &mut status, 0) == pid
            && libc::WIFEXITED(status)
            && libc::WEXITSTATUS(status) == 0
    }
}

// --- the parent's side ---------------------------------------------------------------------

impl Sandbox {
    /// This sandbox for one candidate process: the harness to import, its own scratch directory
    /// (HOME, TMPDIR, Triton's cache), the directories of files it shares with the referee and,
    /// on a GPU, the device files.
    pub fn for_candidate(
        mut self,
        harness_root: &Path,
        scratch: &Path,
        shared: &[&Path],
        gpu: bool,
    ) -> Sandbox {
        self.read_only.push(harness_root.to_path_buf());
        self.read_write.push(scratch.to_path_buf());
        self.shared_files
            .extend(shared.iter().map(|p| p.to_path_buf()));
        self.gpu_devices |= gpu;
        self
    }

    /// What this sandbox runs without on this host: the protections the kernel lacks (probed
    /// once per judge process) and, on a GPU, those that are off there. Empty when complete.
    pub fn missing_features(&self) -> Vec<&'static str> {
        let mut missing = support().missing.clone();
        if self.gpu_devices {
            missing.extend(self.gpu_layers.off_on_gpu());
            if self.gpu_layers.seccomp {
                missing.push(
                    "the seccomp ban on Unix sockets (off on a GPU: CUDA needs them; daemon \
                     sockets in /run are hidden)",
                );
            }
        }
        let own_user = support().own_user && self.layers().own_user;
        if !own_user && pids_cgroup_parent().is_none() {
            missing.push("a process limit (uid 0 is exempt from RLIMIT_NPROC and no pids cgroup is writable)");
        }
        missing
    }

    /// Everything `enter` needs, built before fork: the Landlock ruleset and the plan; and the
    /// pids cgroup the child joins, for the parent to keep (and remove) once the child is gone.
    pub(crate) fn prepare(&self, python: &Path) -> io::Result<(Confinement, Option<PidsCgroup>)> {
        let support = support();
        let layers = self.layers();
        let ruleset = if support.landlock_abi >= 1 && layers.landlock {
            Some(self.ruleset(support.landlock_abi, python)?)
        } else {
            None
        };
        let mut namespaces = 0;
        if self.isolate_network && support.net_namespace {
            namespaces |= libc::CLONE_NEWNET;
        }
        if support.ipc_namespace && layers.ipc_namespace {
            namespaces |= libc::CLONE_NEWIPC;
        }
        let cgroup = PidsCgroup::create(self.max_processes)?;
        let cgroup_procs = match &cgroup {
            Some(cgroup) => Some(CString::new(
                cgroup.dir.join("cgroup.procs").as_os_str().as_bytes(),
            )?),
            None => None,
        };
        let confinement = Confinement {
            ruleset,
            cgroup_procs,
            max_file_bytes: self.max_file_bytes,
            max_open_files: self.max_open_files,
            max_processes: self.max_processes,
            namespaces,
            pid_namespace: support.pid_namespace && layers.pid_namespace,
            own_user: support.own_user && layers.own_user,
            seccomp: support.seccomp && layers.seccomp,
            unix_sockets: self.gpu_devices,
            own_proc_access: OWN_PROC_ACCESS & handled_fs(support.landlock_abi),
        };
        Ok((confinement, cgroup))
    }

    fn layers(&self) -> Layers {
        if self.gpu_devices {
            self.gpu_layers
        } else {
            Layers::ALL
        }
    }

    /// Runs `command` confined like a candidate (its environment as the caller set it). For
    /// finding out what a program needs from the sandbox: `crucible sandbox-exec`.
    pub fn run(
        &self,
        python: &Path,
        command: &mut std::process::Command,
    ) -> io::Result<std::process::ExitStatus> {
        use std::os::unix::process::CommandExt;
        let (confinement, _cgroup) = self.prepare(python)?;
        // SAFETY: `enter` only makes raw system calls (see its contract).
        unsafe {
            command.pre_exec(move || confinement.enter());
        }
        command.status()
    }

    fn ruleset(&self, abi: i32, python: &Path) -> io::Result<OwnedFd> {
        let handled_fs = handled_fs(abi);
        let attr = RulesetAttr {
            handled_access_fs: handled_fs,
            // Handled with no rule: every TCP bind and connect is refused.
            handled_access_net: if abi >= 4 {
                NET_BIND_TCP | NET_CONNECT_TCP
            } else {
                0
            },
            scoped: if abi >= 6 && self.landlock_scoping {
                SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
            } else {
                0
            },
        };
        // SAFETY: `attr` is a valid ruleset attribute of the size passed.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                &attr as *const RulesetAttr,
                std::mem::size_of::<RulesetAttr>(),
                0u32,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor (close-on-exec) and nothing else owns it.
        let ruleset = unsafe { OwnedFd::from_raw_fd(fd as i32) };

        let read_exec = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR;
        let read = FS_READ_FILE | FS_READ_DIR;
        let device = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV;
        // Device nodes cannot be made without CAP_MKNOD anyway; say so in the rules too.
        let read_write = handled_fs & !(FS_MAKE_CHAR | FS_MAKE_BLOCK);
        let shared = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_READ_DIR;

        let mut rules: Vec<(PathBuf, u64)> = Vec::new();
        for dir in [
            "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc",
        ] {
            rules.push((dir.into(), read_exec));
        }
        rules.extend(python_dirs(python)?.iter().map(|p| (p.clone(), read_exec)));
        // The library directories the judge passes on to the harness (see `harness_env`).
        for key in ["LD_LIBRARY_PATH", "CUDA_HOME"] {
            if let Some(value) = std::env::var_os(key) {
                rules.extend(std::env::split_paths(&value).map(|p| (p, read_exec)));
            }
        }
        rules.extend(self.read_only.iter().map(|p| (p.clone(), read_exec)));
        for dir in ["/proc", "/sys"] {
            rules.push((dir.into(), read));
        }
        for dev in ["null", "zero", "full", "random", "urandom"] {
            rules.push((Path::new("/dev").join(dev), device));
        }
        if self.gpu_devices {
            // /dev/nvidia0.., nvidiactl, nvidia-uvm, nvidia-caps/: named one by one, since the
            // rest of /dev (disks among them) must stay closed.
            for entry in std::fs::read_dir("/dev")?.flatten() {
                if entry.file_name().as_bytes().starts_with(b"nvidia") {
                    rules.push((entry.path(), device | FS_READ_DIR));
                }
            }
        }
        rules.extend(self.read_write.iter().map(|p| (p.clone(), read_write)));
        rules.extend(self.shared_files.iter().map(|p| (p.clone(), shared)));

        for (path, access) in rules {
            // A filesystem root would open everything below it.
            if path.is_absolute() && path.parent().is_some() {
                add_rule(&ruleset, &path, access & handled_fs)?;
            }
        }
        Ok(ruleset)
    }
}

/// The filesystem rights a Landlock ABI knows, all handled (denied unless a rule grants them).
fn handled_fs(abi: i32) -> u64 {
    let mut handled = FS_ABI1;
    if abi >= 2 {
        handled |= FS_REFER;
    }
    if abi >= 3 {
        handled |= FS_TRUNCATE;
    }
    if abi >= 5 {
        handled |= FS_IOCTL_DEV;
    }
    handled
}

/// CUDA names its threads by writing /proc/self/task/<tid>/comm (and fails to initialize, error
/// 304, when it cannot); a process's own /proc entries affect only itself.
const OWN_PROC_ACCESS: u64 = FS_READ_FILE | FS_WRITE_FILE | FS_READ_DIR | FS_TRUNCATE;

/// Grants `access` beneath `path`; a path that does not exist is skipped.
fn add_rule(ruleset: &OwnedFd, path: &Path, access: u64) -> io::Result<()> {
    let c_path = CString::new(path.as_os_str().as_bytes())?;
    // SAFETY: `c_path` is a valid NUL-terminated string.
    let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP) => Ok(()),
            _ => Err(err),
        };
    }
    // SAFETY: `open` just returned this descriptor and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `st` is a valid out-parameter for fstat.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let allowed = if is_dir {
        access
    } else {
        access & FS_FILE_RIGHTS
    };
    if allowed == 0 {
        return Ok(());
    }
    let attr = PathBeneathAttr {
        allowed_access: allowed,
        parent_fd: fd.as_raw_fd(),
    };
    // SAFETY: `attr` is a valid path-beneath attribute; both descriptors are open.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    if rc < 0 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("landlock rule for {}: {err}", path.display()),
        ));
    }
    Ok(())
}

/// Where the interpreter keeps its standard library and packages, asked once per interpreter:
/// the prefixes, `sys.path` after site processing (`.pth` files included) and sysconfig's paths.
/// On a GPU host these hold torch's NVIDIA libraries and Triton's ptxas too.
fn python_dirs(python: &Path) -> io::Result<Arc<[PathBuf]>> {
    static CACHE: Mutex<Vec<(PathBuf, Arc<[PathBuf]>)>> = Mutex::new(Vec::new());
    if let Some((_, dirs)) = CACHE
        .lock()
        .ok()
        .and_then(|c| c.iter().find(|(p, _)| p == python).cloned())
    {
        return Ok(dirs);
    }
    const QUERY: &str = "import os, site, sys, sysconfig\n\
        paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,\n\
                 os.path.dirname(os.path.realpath(sys.executable))]\n\
        paths += sys.path + site.getsitepackages() + list(sysconfig.get_paths().values())\n\
        sys.stdout.write('\\0'.join(p for p in paths if p))\n";
    let mut cmd = std::process::Command::new(python);
    cmd.args(["-I", "-c", QUERY])
        .env_clear()
        .stdin(std::process::Stdio::null());
    for key in ["PATH", "LD_LIBRARY_PATH"] {
        if let Some(value) = std::env::var_os(key) {
            cmd.env(key, value);
        }
    }
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "asking {} for its directories: {}\n{}",
            python.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let mut dirs: Vec<PathBuf> = out
        .stdout
        .split(|b| *b == 0)
        .filter(|p| p.starts_with(b"/"))
        .map(|p| PathBuf::from(std::ffi::OsStr::from_bytes(p)))
        .collect();
    dirs.sort();
    dirs.dedup();
    let dirs: Arc<[PathBuf]> = dirs.into();
    if let Ok(mut cache) = CACHE.lock() {
        cache.push((python.to_path_buf(), Arc::clone(&dirs)));
    }
    Ok(dirs)
}

// --- the process limit for uid 0: a pids cgroup ----------------------------------------------

/// A pids cgroup (cgroup v1 hierarchy) of one candidate: its process limit where
/// `RLIMIT_NPROC` does not bind (uid 0 is exempt, and a GPU candidate stays uid 0). Removed,
/// after killing whatever is left in it, when dropped.
pub(crate) struct PidsCgroup {
    dir: PathBuf,
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
    fn create(max: u64) -> io::Result<Option<PidsCgroup>> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let Some(parent) = pids_cgroup_parent() else {
            return Ok(None);
        };
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = parent.join(format!("crucible-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir)?;
        let cgroup = PidsCgroup { dir };
        std::fs::write(cgroup.dir.join("pids.max"), max.to_string())?;
        Ok(Some(cgroup))
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
                    // SAFETY: a plain kill of a process in this candidate's cgroup.
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

// --- the child's side: raw system calls only ------------------------------------------------

/// The prepared sandbox for one spawn; applied by `enter` between fork and exec.
pub(crate) struct Confinement {
    ruleset: Option<OwnedFd>,
    /// `cgroup.procs` of the candidate's pids cgroup, which the child joins first.
    cgroup_procs: Option<CString>,
    max_file_bytes: u64,
    max_open_files: u64,
    max_processes: u64,
    /// `CLONE_NEW*` flags to unshare besides the PID namespace.
    namespaces: libc::c_int,
    pid_namespace: bool,
    own_user: bool,
    seccomp: bool,
    /// Let the seccomp filter allow `AF_UNIX` sockets (CUDA needs them).
    unix_sockets: bool,
    /// The Landlock rights on the candidate's own /proc/<pid> (the handled subset).
    own_proc_access: u64,
}

impl Confinement {
    /// Confines the calling process. With a PID namespace this returns only in the candidate
    /// (two forks down); the supervisor and init never return.
    ///
    /// # Safety
    ///
    /// Only in a freshly forked, single-threaded child before exec: it forks, changes
    /// credentials and makes only async-signal-safe system calls (no allocation, no locks).
    pub(crate) unsafe fn enter(&self) -> io::Result<()> {
        // SAFETY: raw system calls on this process's own state (see the function's contract).
        unsafe {
            // The supervisor re-raises the candidate's fatal signal on itself: no core dumps
            // anywhere, and the root-owned helpers are not dumpable (nor readable in /proc).
            set_limit(libc::RLIMIT_CORE, 0)?;
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
            // First, so the supervisor, init and everything the candidate forks count against
            // the cgroup's process limit.
            if let Some(procs) = &self.cgroup_procs {
                join_cgroup(procs)?;
            }
            // Unique while the supervisor lives, which is as long as anything of the candidate.
            let uid = UID_BASE + libc::getpid() as u32;
            if self.pid_namespace {
                check(libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0))?;
                let ruleset = self.ruleset.as_ref().map(|r| r.as_raw_fd());
                enter_pid_namespace(self.namespaces, ruleset)?;
            } else if self.namespaces != 0 {
                check(libc::unshare(self.namespaces))?;
            }
            // Now in the candidate. It loses the capability to trace other processes: with the
            // referee non-dumpable, neither ptrace nor /proc/<pid>/mem reaches the expected
            // outputs.
            check(libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0))?;
            set_limit(libc::RLIMIT_FSIZE, self.max_file_bytes)?;
            set_limit(libc::RLIMIT_NOFILE, self.max_open_files)?;
            if self.own_user {
                become_user(uid)?;
                // Enforced for this user only; root would be exempt.
                set_limit(libc::RLIMIT_NPROC, self.max_processes)?;
                // A credential change clears the parent-death signal; it matters where there
                // is no PID namespace (the judge is then the parent).
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            } else {
                // Still uid 0 (CUDA IPC on a GPU needs the referee's uid), but with no
                // capability: no module loading, mounts, raw devices or signals across users.
                drop_capabilities()?;
            }
            if let Some(ruleset) = &self.ruleset {
                // Only now is the candidate's pid (and its /proc, private with a PID namespace)
                // known.
                add_raw_rule(ruleset.as_raw_fd(), c"/proc/self", self.own_proc_access)?;
                check(
                    libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32)
                        as libc::c_int,
                )?;
            }
            if self.seccomp {
                install_seccomp(self.unix_sockets)?;
            }
        }
        Ok(())
    }
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is `procs`.
unsafe fn join_cgroup(procs: &std::ffi::CStr) -> io::Result<()> {
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

/// Supervisor → init → candidate. Returns in the candidate only.
unsafe fn enter_pid_namespace(
    namespaces: libc::c_int,
    ruleset: Option<libc::c_int>,
) -> io::Result<()> {
    // SAFETY: raw system calls in the forked child (see `Confinement::enter`).
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
        mount_private_proc(ruleset)?;
        match libc::fork() {
            -1 => return Err(io::Error::last_os_error()),
            0 => {}
            candidate => reap(candidate, write_end),
        }
        libc::close(write_end);
    }
    Ok(())
}

/// Mounts a /proc of the new PID namespace over the host's, in the new mount namespace: the
/// candidate sees only its own processes, and pids in /proc match what getpid() says (the CUDA
/// driver fails to initialize otherwise). The new /proc needs a Landlock rule of its own: rules
/// follow inodes, and the parent's rule is on the host's /proc.
unsafe fn mount_private_proc(ruleset: Option<libc::c_int>) -> io::Result<()> {
    // SAFETY: raw system calls with static NUL-terminated strings and valid structs.
    unsafe {
        // Private first, so nothing mounted here propagates to the host.
        check(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
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
        if let Some(ruleset) = ruleset {
            add_raw_rule(ruleset, c"/proc", FS_READ_FILE | FS_READ_DIR)?;
        }
    }
    Ok(())
}

/// `add_rule` for the forked child: raw system calls only, the path a static string.
unsafe fn add_raw_rule(ruleset: libc::c_int, path: &std::ffi::CStr, access: u64) -> io::Result<()> {
    // SAFETY: raw system calls with a NUL-terminated path and a valid attribute struct.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
        check(fd)?;
        let attr = PathBeneathAttr {
            allowed_access: access,
            parent_fd: fd,
        };
        let rc = libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            LANDLOCK_RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        );
        libc::close(fd);
        check(rc as libc::c_int)
    }
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

/// Drops every capability but `keep` from the bounding set: out of it, no exec can give a
/// capability back.
unsafe fn drop_bounding_set(keep: Option<u32>) -> io::Result<()> {
    // SAFETY: raw system calls on the calling process's credentials.
    unsafe {
        for cap in 0..64 {
            if Some(cap) == keep {
                continue;
            }
            if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) < 0 {
                if errno() == libc::EINVAL {
                    break; // past the last capability this kernel knows
                }
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Empties every capability set, the bounding set included, so that exec gives none back even
/// to uid 0.
unsafe fn drop_capabilities() -> io::Result<()> {
    // SAFETY: raw system calls on the calling process's credentials.
    unsafe {
        drop_bounding_set(None)?;
        check(libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        ))?;
        let header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let none = CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        };
        let data = [none, none];
        check(libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) as i32)?;
    }
    Ok(())
}

/// Switches to `uid` (and the same gid), keeping only `CAP_DAC_OVERRIDE`, also across exec.
unsafe fn become_user(uid: u32) -> io::Result<()> {
    // SAFETY: raw system calls on the calling process's credentials; the capability structs are
    // valid for the duration of the call.
    unsafe {
        drop_bounding_set(Some(CAP_DAC_OVERRIDE))?;
        // Raw system calls: glibc's wrappers would try to change every thread of the judge.
        check(libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) as i32)?;
        check(libc::syscall(libc::SYS_setresgid, uid, uid, uid) as i32)?;
        check(libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0))?;
        check(libc::syscall(libc::SYS_setresuid, uid, uid, uid) as i32)?;
        // The scratch directories and the Python install belong to root.
        let header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let keep = 1 << CAP_DAC_OVERRIDE;
        let data = [
            CapData {
                effective: keep,
                permitted: keep,
                inheritable: keep,
            },
            CapData {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            },
        ];
        check(libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) as i32)?;
        // Ambient: kept across exec by a process that is not root.
        check(libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_RAISE,
            CAP_DAC_OVERRIDE as libc::c_ulong,
            0,
            0,
        ))?;
    }
    Ok(())
}

/// `struct seccomp_data` offsets (little-endian: the low half of `args[0]` comes first).
const SECCOMP_NR: u32 = 0;
const SECCOMP_ARCH: u32 = 4;
const SECCOMP_ARG0: u32 = 16;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;
/// x32 system calls have this bit set and numbers of their own; none is needed.
#[cfg(target_arch = "x86_64")]
const SYSCALL_ABI_BIT: u32 = 0x4000_0000;
#[cfg(not(target_arch = "x86_64"))]
const SYSCALL_ABI_BIT: u32 = u32::MAX;

const fn bpf_stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn bpf_jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

const LOAD: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
const RETURN: u32 = libc::BPF_RET | libc::BPF_K;
const fn deny(errno: libc::c_int) -> libc::sock_filter {
    bpf_stmt(RETURN, libc::SECCOMP_RET_ERRNO | errno as u32)
}

const fn jump_if(test: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    bpf_jump(libc::BPF_JMP | test | libc::BPF_K, k, jt, jf)
}

/// Refuses `socket(AF_UNIX, ..)` (with `unix_sockets` false), `clone3` (its flags are out of a
/// filter's reach; libc falls back to `clone` on ENOSYS) and `clone`/`unshare` with
/// `CLONE_NEWUSER`; allows the rest.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const fn seccomp_filter(unix_sockets: bool) -> [libc::sock_filter; 18] {
    use libc::{BPF_JEQ, BPF_JGE, BPF_JSET};
    // With Unix sockets allowed, the socket test jumps straight to the clone tests.
    let af_unix = if unix_sockets {
        u32::MAX
    } else {
        libc::AF_UNIX as u32
    };
    [
        bpf_stmt(LOAD, SECCOMP_ARCH),
        jump_if(BPF_JEQ, AUDIT_ARCH, 1, 0),
        bpf_stmt(RETURN, libc::SECCOMP_RET_KILL_PROCESS),
        bpf_stmt(LOAD, SECCOMP_NR),
        jump_if(BPF_JGE, SYSCALL_ABI_BIT, 0, 1),
        deny(libc::EPERM),
        jump_if(BPF_JEQ, libc::SYS_clone3 as u32, 0, 1),
        deny(libc::ENOSYS),
        jump_if(BPF_JEQ, libc::SYS_socket as u32, 0, 3),
        bpf_stmt(LOAD, SECCOMP_ARG0),
        jump_if(BPF_JEQ, af_unix, 0, 6),
        deny(libc::EACCES),
        jump_if(BPF_JEQ, libc::SYS_unshare as u32, 1, 0),
        jump_if(BPF_JEQ, libc::SYS_clone as u32, 0, 3),
        bpf_stmt(LOAD, SECCOMP_ARG0),
        jump_if(BPF_JSET, libc::CLONE_NEWUSER as u32, 0, 1),
        deny(libc::EPERM),
        bpf_stmt(RETURN, libc::SECCOMP_RET_ALLOW),
    ]
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
static SECCOMP_FILTER: [libc::sock_filter; 18] = seccomp_filter(false);
/// CUDA's driver fails to initialize (error 304) when it cannot make a Unix socket.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
static SECCOMP_FILTER_GPU: [libc::sock_filter; 18] = seccomp_filter(true);

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
unsafe fn install_seccomp(unix_sockets: bool) -> io::Result<()> {
    let filter = if unix_sockets {
        &SECCOMP_FILTER_GPU
    } else {
        &SECCOMP_FILTER
    };
    let program = libc::sock_fprog {
        len: filter.len() as libc::c_ushort,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: `program` points at a valid filter that lives for the whole program; the kernel
    // copies it. A filter needs no_new_privs (already set in the candidate; the probe needs it).
    unsafe {
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
        check(libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &program as *const libc::sock_fprog,
        ))
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn install_seccomp(_unix_sockets: bool) -> io::Result<()> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

unsafe fn set_limit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: `limit` is a valid rlimit for the duration of the call.
    check(unsafe { libc::setrlimit(resource, &limit) })
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn errno() -> libc::c_int {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_parse_names_all_and_none() {
        assert_eq!(Layers::parse("all"), Ok(Layers::ALL));
        assert_eq!(Layers::parse("none"), Ok(Layers::NONE));
        assert_eq!(Layers::parse(""), Ok(Layers::NONE));
        let some = Layers::parse("landlock, pid").unwrap();
        assert!(some.landlock && some.pid_namespace);
        assert!(!some.seccomp && !some.ipc_namespace && !some.own_user);
        let err = Layers::parse("landlock,chroot").unwrap_err();
        assert!(err.contains("`chroot`"), "{err}");
    }

    #[test]
    fn a_gpu_sandbox_names_what_it_runs_without() {
        let gpu = Sandbox {
            gpu_devices: true,
            ..Sandbox::default()
        };
        let off = gpu.missing_features();
        assert!(
            off.iter().any(|m| m.starts_with("a user id of its own")),
            "{off:?}"
        );
        assert!(
            !off.iter().any(|m| m.starts_with("Landlock (off")),
            "{off:?}"
        );
        let cpu = Sandbox::default();
        assert!(
            !cpu.missing_features()
                .iter()
                .any(|m| m.contains("off on a GPU"))
        );
    }

    #[test]
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn the_gpu_seccomp_filter_differs_only_in_unix_sockets() {
        let differ: Vec<usize> = (0..SECCOMP_FILTER.len())
            .filter(|&i| {
                let (a, b) = (SECCOMP_FILTER[i], SECCOMP_FILTER_GPU[i]);
                (a.code, a.jt, a.jf, a.k) != (b.code, b.jt, b.jf, b.k)
            })
            .collect();
        assert_eq!(differ, vec![10], "only the AF_UNIX comparison");
    }
}
