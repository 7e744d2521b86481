//! Confinement of the candidate process, which runs hostile code.
//!
//! Layers, each on its own enough to stop one class of attack (one module each):
//!
//! - **PID namespace** ([`pid`]). The process the judge spawns (the *supervisor*) unshares a PID
//!   namespace and forks its *init*, which forks the candidate. The candidate cannot see or name
//!   the judge, and when init dies (the candidate exited, the judge's timeout killed the process
//!   group, or the supervisor died with the judge) the kernel kills everything left in the
//!   namespace, including children that called `setsid` or double-forked. Init reports the
//!   candidate's wait status through a pipe and the supervisor ends the same way, so exit codes
//!   and signals reach the judge unchanged. A private mount namespace gets a /proc of the new PID
//!   namespace, so the candidate sees only its own processes.
//! - **A minimal root** ([`root`]), built by init in that mount namespace: only the paths of
//!   the Landlock rules exist, bound at their own places (read-only but for the scratch, shared
//!   and device paths), with a /proc of the namespace. No socket file of the host can be named,
//!   which Landlock (up to ABI 7) does not cover, and no host path can be looked up.
//! - **Network and IPC namespaces**: nothing but a downed loopback, no System V IPC shared with
//!   the host.
//! - **A user id of its own** ([`caps`]: `UID_BASE` + the supervisor's pid, unique while it
//!   lives), with every capability dropped but `CAP_DAC_OVERRIDE` (the scratch directories and
//!   the Python install belong to root). Root is exempt from `RLIMIT_NPROC` and may raise its
//!   hard limits; this user is not, so the process limit stops a fork bomb, and without
//!   `CAP_KILL` it cannot signal any root process.
//! - **Landlock** ([`landlock`]): read-only system and Python directories, writes only in its own
//!   scratch directory, and in the referee's shared-tensor directory only to files that already
//!   exist (so it can plant no symlink or file for the root referee to open); no TCP bind or
//!   connect, and (scoping) no signals to or abstract-socket connections with processes outside
//!   the sandbox. Landlock also refuses `ptrace` and `/proc/<pid>/mem` of processes outside it
//!   (it leaves `/proc/<pid>/environ` readable by the same user on Linux 6.18; the PID
//!   namespace hides the judge's).
//! - **seccomp** ([`seccomp`]): no `AF_UNIX` sockets (Landlock does not cover connecting to a
//!   socket file, and `CAP_DAC_OVERRIDE` would open root daemons' sockets such as docker.sock)
//!   and no user namespaces (the kernel surface that most container escapes go through).
//! - **rlimits** on core dumps, file size, open files and processes, plus `no_new_privs`; a
//!   **pids cgroup** ([`cgroup`]) with the same process limit, where the host has one; and the
//!   PID namespace's own **pid_max** (Linux 6.14 and later keep it per namespace), which init
//!   sets to the process limit plus the 300 PIDs the kernel reserves (see `pid::RESERVED_PIDS`).
//!
//! Everything that allocates happens in the parent before fork: paths, the Landlock ruleset (the
//! `landlock` crate), the seccomp filters (compiled to BPF by `seccompiler`), probing the kernel.
//! The judge is multithreaded, so between fork and exec only async-signal-safe work may run: raw
//! system calls, each module's child side saying why it needs them. Features the kernel lacks are
//! found once per judge process (probed in throwaway forked children) and skipped;
//! [`Sandbox::missing_features`] lists them, and the judge reports them as a `sandbox-degraded`
//! finding instead of failing.
//!
//! On a GPU the layers in `Sandbox::gpu_layers` apply, by default all but the user id (see
//! `Layers::GPU_DEFAULT`): CUDA IPC will not map the referee's memory into another user's
//! process. The candidate stays uid 0 with every capability dropped; Landlock also lets it write
//! its own /proc/<pid> and the seccomp filter lets it make Unix sockets (CUDA needs both); the
//! minimal root leaves it no socket file of the host's to connect to (measured on an H200 by
//! `scripts/gpu-check sandbox`: CUDA, both transports, timing and the profiler work inside it).
//! Without the minimal root (`--gpu-sandbox` without `root`), an empty tmpfs over /run hides the
//! daemons' sockets instead.
//! uid 0 is exempt from `RLIMIT_NPROC`, so the process limit comes from a pids cgroup of the
//! candidate's own where the host has a writable v1 pids hierarchy (on every host, not only GPU
//! ones), and from the namespace's pid_max (measured on the two-GPU H200 host, which has no
//! writable pids cgroup: without it a candidate forked 300 of 300 processes under a limit of
//! 64).

mod caps;
mod cgroup;
pub mod ffi;
mod landlock;
mod pid;
mod root;
mod seccomp;

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ::landlock::ABI;

pub use cgroup::PidsCgroup;

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
    /// A pids cgroup per candidate where the host has one; off only to test the other process
    /// limits.
    pub pids_cgroup: bool,
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
    /// The minimal root ([`root`]): only the rule paths exist. Needs the PID namespace's
    /// mount namespace.
    pub minimal_root: bool,
}

/// A `--gpu-sandbox` name that is no layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown sandbox layer `{0}` (expected all, none or a comma list of {names})", names = Layers::NAMES.join(", "))]
pub struct UnknownLayer(pub String);

impl Layers {
    pub const ALL: Layers = Layers {
        landlock: true,
        seccomp: true,
        pid_namespace: true,
        ipc_namespace: true,
        own_user: true,
        minimal_root: true,
    };
    pub const NONE: Layers = Layers {
        landlock: false,
        seccomp: false,
        pid_namespace: false,
        ipc_namespace: false,
        own_user: false,
        minimal_root: false,
    };
    /// The names `parse` accepts, in order.
    pub const NAMES: [&'static str; 6] = ["landlock", "seccomp", "pid", "ipc", "user", "root"];

    /// What a candidate on a GPU gets by default, measured with `scripts/gpu-sandbox-probe` and
    /// `scripts/gpu-check hacks,sandbox` on the H200 test host (driver 580, kernel 6.18): CUDA
    /// works under Landlock once the candidate may write its own /proc/<pid> (CUDA names its
    /// threads there), under the seccomp filter once it allows Unix sockets, and under the PID and
    /// IPC namespaces. CUDA IPC refuses to import the referee's memory into a process of another
    /// user id, so the candidate stays uid 0, without any capability. The minimal root works
    /// there too (`scripts/gpu-check sandbox` on the H200 host, 2026-12: CUDA with both
    /// transports, timing and the profiler inside it, and a host socket file out of reach).
    pub const GPU_DEFAULT: Layers = Layers {
        landlock: true,
        seccomp: true,
        pid_namespace: true,
        ipc_namespace: true,
        own_user: false,
        minimal_root: true,
    };

    /// Parses a comma list of `NAMES`, or `all` / `none`.
    pub fn parse(text: &str) -> Result<Layers, UnknownLayer> {
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
                "root" => layers.minimal_root = true,
                other => return Err(UnknownLayer(other.to_string())),
            }
        }
        Ok(layers)
    }

    /// The set as `parse` reads it: a comma list of `NAMES`, or `none`.
    pub fn names(self) -> String {
        let on = [
            self.landlock,
            self.seccomp,
            self.pid_namespace,
            self.ipc_namespace,
            self.own_user,
            self.minimal_root,
        ];
        let names: Vec<&str> = Self::NAMES
            .iter()
            .zip(on)
            .filter_map(|(name, on)| on.then_some(*name))
            .collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(",")
        }
    }

    /// The minimal root is built in the PID namespace's mount namespace: without that layer it
    /// does not apply, whatever `minimal_root` says.
    fn minimal_root_applies(self) -> bool {
        self.minimal_root && self.pid_namespace
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
        if !self.minimal_root_applies() {
            off.push(
                "a minimal root (off on a GPU in this configuration; Unix socket files outside \
                 /run stay reachable)",
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
            pids_cgroup: true,
        }
    }
}

// --- probing -------------------------------------------------------------------------------

/// What this kernel (and the judge's privileges) allow.
struct Support {
    /// The newest Landlock ABI this kernel supports, up to the newest the sandbox uses.
    landlock_abi: ABI,
    net_namespace: bool,
    ipc_namespace: bool,
    pid_namespace: bool,
    own_user: bool,
    seccomp: bool,
    /// pid_max is per PID namespace (Linux 6.14+): init can cap the tasks in the candidate's.
    namespace_pid_max: bool,
    /// A minimal root can be built (`pivot_root` in the private mount namespace).
    minimal_root: bool,
    missing: Vec<&'static str>,
}

fn support() -> &'static Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    SUPPORT.get_or_init(|| {
        let landlock_abi = landlock::kernel_abi();
        // SAFETY (the namespace and credential probes): they run in a throwaway forked child.
        let net_namespace = probe(&|| unsafe { libc::unshare(libc::CLONE_NEWNET) == 0 });
        let ipc_namespace = probe(&|| unsafe { libc::unshare(libc::CLONE_NEWIPC) == 0 });
        let pid_namespace = probe(&pid::namespace_works);
        let namespace_pid_max = pid_namespace && pid::namespace_pid_max_works();
        let minimal_root = pid_namespace && pid::minimal_root_works();
        let own_user = probe(&|| unsafe { caps::become_user(caps::own_uid()).is_ok() });
        // Compiled here, before the fork: the probe only installs it.
        let seccomp = seccomp::Filters::build(false)
            .is_ok_and(|filters| probe(&|| filters.install().is_ok()));
        let mut missing = Vec::new();
        if landlock_abi < ABI::V1 {
            missing.push("Landlock (filesystem confinement, TCP rules and signal scoping)");
        } else {
            if landlock_abi < ABI::V4 {
                missing.push("Landlock TCP rules (ABI 4)");
            }
            if landlock_abi < ABI::V6 {
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
        if !minimal_root {
            missing.push(
                "a minimal root (the host's paths stay visible, and its Unix socket files \
                 reachable where Unix sockets are allowed)",
            );
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
            namespace_pid_max,
            minimal_root,
            missing,
        }
    })
}

/// Runs `check` in a forked child, so a namespace, credential or filter change never touches the
/// judge. The checks only make raw system calls (async-signal-safe: the judge may have threads).
fn probe(check: &dyn Fn() -> bool) -> bool {
    // SAFETY: the child only runs `check` (raw system calls) and leaves with `_exit`.
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

// --- the parent's side ---------------------------------------------------------------------

impl Sandbox {
    /// This sandbox for one candidate process: the code it imports (read-only), its own scratch directory
    /// (HOME, TMPDIR, Triton's cache), the directories of files it shares with the referee and,
    /// on a GPU, the device files.
    pub fn for_candidate(
        mut self,
        code: &[&Path],
        scratch: &Path,
        shared: &[&Path],
        gpu: bool,
    ) -> Sandbox {
        self.read_only.extend(code.iter().map(|p| p.to_path_buf()));
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
                missing.push(if self.gpu_layers.minimal_root_applies() {
                    "the seccomp ban on Unix sockets (off on a GPU: CUDA needs them; the minimal \
                     root shows no socket file of the host's)"
                } else {
                    "the seccomp ban on Unix sockets (off on a GPU: CUDA needs them; daemon \
                     sockets in /run are hidden)"
                });
            }
        }
        let process_limit = self.process_limit();
        if process_limit.is_none() {
            missing.push(
                "a process limit (uid 0 is exempt from RLIMIT_NPROC, no pids cgroup is writable \
                 and the kernel has no pid_max per PID namespace)",
            );
        } else if process_limit != Some(self.max_processes) {
            missing.push(
                "an exact process limit (uid 0 is exempt from RLIMIT_NPROC and no pids cgroup \
                 is writable: the PID namespace's pid_max holds the candidate to the limit plus \
                 300 tasks)",
            );
        }
        missing
    }

    /// The most tasks (processes and threads) the candidate can have on this host: the limit
    /// asked for, or 300 more where only the PID namespace's pid_max enforces it; `None` where
    /// nothing does.
    pub fn process_limit(&self) -> Option<u64> {
        let support = support();
        let layers = self.layers();
        if (support.own_user && layers.own_user)
            || (self.pids_cgroup && cgroup::host_has_pids_cgroup())
        {
            Some(self.max_processes)
        } else if support.pid_namespace && layers.pid_namespace && support.namespace_pid_max {
            Some(self.namespace_pid_max() - 2)
        } else {
            None
        }
    }

    /// The pid_max init sets in the candidate's namespace. Once a namespace's PIDs wrap around,
    /// the kernel hands out only those from `RESERVED_PIDS` up, so pid_max must leave
    /// `max_processes` above them: with the floor (301) a fork bomb that reached it left one PID,
    /// and the candidate's own Triton compile (gcc and its children) failed on an H200 after it.
    /// The namespace then holds init and at most `max_processes + RESERVED_PIDS` tasks.
    fn namespace_pid_max(&self) -> u64 {
        // Always above the kernel's floor (`PID_MAX_FLOOR`).
        self.max_processes.saturating_add(pid::RESERVED_PIDS + 2)
    }

    /// Everything `enter` needs, built before fork: the Landlock ruleset, the seccomp filters and
    /// the plan; and the pids cgroup the child joins, for the parent to keep (and remove) once
    /// the child is gone.
    pub fn prepare(&self, python: &Path) -> io::Result<(Confinement, Option<PidsCgroup>)> {
        let (plan, cgroup) = self.plan(python)?;
        Ok((plan.confinement()?, cgroup))
    }

    /// What confining one process takes, decided here (the kernel's support, the rule paths,
    /// which asks `python` for its directories, and a fresh pids cgroup, which the caller keeps
    /// and drops once the process is gone), as plain data: a process that has none of that
    /// state, the candidate zygote's child, builds its [`Confinement`] from it ([`ffi`]).
    pub fn plan(&self, python: &Path) -> io::Result<(Plan, Option<PidsCgroup>)> {
        let support = support();
        let layers = self.layers();
        let landlock_on = support.landlock_abi >= ABI::V1 && layers.landlock;
        let pid_namespace = support.pid_namespace && layers.pid_namespace;
        let root_on = pid_namespace && support.minimal_root && layers.minimal_root_applies();
        // One list for both layers: what Landlock opens is all the minimal root shows.
        let rules = if landlock_on || root_on {
            let mut read_exec = landlock::python_dirs(python)?.to_vec();
            read_exec.extend(self.read_only.iter().cloned());
            landlock::rule_paths(&landlock::Paths {
                read_exec: &read_exec,
                read_write: &self.read_write,
                shared_files: &self.shared_files,
                gpu_devices: self.gpu_devices,
            })?
        } else {
            Vec::new()
        };
        // The tmpfs that becomes the first root is mounted on the scratch directory (any
        // existing directory does; the scratch always exists).
        let minimal_root_base = root_on.then(|| {
            self.read_write
                .first()
                .cloned()
                .unwrap_or_else(std::env::temp_dir)
        });
        let mut namespaces = 0;
        if self.isolate_network && support.net_namespace {
            namespaces |= libc::CLONE_NEWNET;
        }
        if support.ipc_namespace && layers.ipc_namespace {
            namespaces |= libc::CLONE_NEWIPC;
        }
        let cgroup = if self.pids_cgroup {
            PidsCgroup::create(self.max_processes)?
        } else {
            None
        };
        let plan = Plan {
            rules,
            landlock_abi: landlock_on.then_some(support.landlock_abi as i32),
            landlock_scoping: self.landlock_scoping,
            minimal_root_base,
            // CUDA's driver fails to initialize (error 304) when it cannot make a Unix socket.
            seccomp_unix_sockets: (support.seccomp && layers.seccomp).then_some(self.gpu_devices),
            cgroup_procs: cgroup.as_ref().map(PidsCgroup::procs_file),
            max_file_bytes: self.max_file_bytes,
            max_open_files: self.max_open_files,
            max_processes: self.max_processes,
            namespaces,
            pid_namespace,
            pid_max: support.namespace_pid_max.then(|| self.namespace_pid_max()),
            own_user: support.own_user && layers.own_user,
        };
        Ok((plan, cgroup))
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
        // SAFETY: `enter` only makes async-signal-safe system calls (see its contract).
        unsafe {
            command.pre_exec(move || confinement.enter());
        }
        command.status()
    }
}

// --- the child's side: async-signal-safe calls only ----------------------------------------

/// How to confine one process, as data: what [`Sandbox::plan`] decided, for
/// [`Plan::confinement`] to build anywhere (in the judge before a spawn, or in the candidate
/// zygote's child after its fork, see [`ffi`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// The paths Landlock opens and the minimal root shows, each with its reach.
    rules: Vec<(PathBuf, landlock::Reach)>,
    /// The Landlock ABI to build the ruleset for; `None` without Landlock.
    landlock_abi: Option<i32>,
    landlock_scoping: bool,
    /// The directory the minimal root's first tmpfs is mounted on; `None` without the root.
    minimal_root_base: Option<PathBuf>,
    /// Whether the seccomp filter lets Unix sockets through (a GPU's); `None` without seccomp.
    seccomp_unix_sockets: Option<bool>,
    /// `cgroup.procs` of the candidate's pids cgroup, which the child joins first.
    cgroup_procs: Option<PathBuf>,
    max_file_bytes: u64,
    max_open_files: u64,
    max_processes: u64,
    /// `CLONE_NEW*` flags to unshare besides the PID namespace.
    namespaces: libc::c_int,
    pid_namespace: bool,
    /// The pid_max init sets in the PID namespace (where the kernel keeps one per namespace).
    pid_max: Option<u64>,
    own_user: bool,
}

impl Plan {
    /// The confinement this plan describes: the Landlock ruleset (opening every rule path), the
    /// minimal root's steps and the compiled seccomp filters. Allocates: before fork, or in a
    /// child that is single-threaded.
    pub fn confinement(&self) -> io::Result<Confinement> {
        let landlock = match self.landlock_abi {
            Some(abi) => Some(landlock::prepare(
                ABI::from(abi),
                &self.rules,
                self.landlock_scoping,
            )?),
            None => None,
        };
        let minimal_root = match &self.minimal_root_base {
            Some(base) => Some(root::MinimalRoot::plan(&self.rules, base)?),
            None => None,
        };
        let seccomp = match self.seccomp_unix_sockets {
            Some(unix_sockets) => Some(seccomp::Filters::build(unix_sockets)?),
            None => None,
        };
        let cgroup_procs = match &self.cgroup_procs {
            Some(path) => Some(CString::new(path.as_os_str().as_encoded_bytes())?),
            None => None,
        };
        Ok(Confinement {
            landlock,
            seccomp,
            cgroup_procs,
            max_file_bytes: self.max_file_bytes,
            max_open_files: self.max_open_files,
            max_processes: self.max_processes,
            namespaces: self.namespaces,
            pid_namespace: self.pid_namespace,
            minimal_root,
            pid_max: self.pid_max,
            own_user: self.own_user,
        })
    }
}

/// The prepared sandbox for one spawn; applied by `enter` between fork and exec.
pub struct Confinement {
    landlock: Option<landlock::PreparedRuleset>,
    seccomp: Option<seccomp::Filters>,
    /// `cgroup.procs` of the candidate's pids cgroup, which the child joins first.
    cgroup_procs: Option<CString>,
    max_file_bytes: u64,
    max_open_files: u64,
    max_processes: u64,
    /// `CLONE_NEW*` flags to unshare besides the PID namespace.
    namespaces: libc::c_int,
    pid_namespace: bool,
    /// Built by init in the PID namespace's mount namespace.
    minimal_root: Option<root::MinimalRoot>,
    /// The pid_max init sets in the PID namespace (where the kernel keeps one per namespace).
    pid_max: Option<u64>,
    own_user: bool,
}

impl Confinement {
    /// Confines the calling process. With a PID namespace this returns only in the candidate
    /// (two forks down); the supervisor and init never return.
    ///
    /// # Safety
    ///
    /// Only in a freshly forked, single-threaded child before exec: it forks, changes
    /// credentials and makes only async-signal-safe system calls (no allocation, no locks).
    pub unsafe fn enter(&self) -> io::Result<()> {
        // SAFETY: raw system calls on this process's own state (see the function's contract).
        unsafe {
            // The supervisor re-raises the candidate's fatal signal on itself: no core dumps
            // anywhere, and the root-owned helpers are not dumpable (nor readable in /proc).
            set_limit(libc::RLIMIT_CORE, 0)?;
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
            // First, so the supervisor, init and everything the candidate forks count against
            // the cgroup's process limit.
            if let Some(procs) = &self.cgroup_procs {
                cgroup::join(procs)?;
            }
            // Unique while the supervisor lives, which is as long as anything of the candidate.
            let uid = caps::own_uid();
            if self.pid_namespace {
                check(libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0))?;
                pid::enter(
                    self.namespaces,
                    self.landlock.as_ref(),
                    self.minimal_root.as_ref(),
                    self.pid_max,
                )?;
            } else if self.namespaces != 0 {
                check(libc::unshare(self.namespaces))?;
            }
            // Now in the candidate. It loses the capability to trace other processes: with the
            // referee non-dumpable, neither ptrace nor /proc/<pid>/mem reaches the expected
            // outputs.
            caps::drop_ptrace()?;
            set_limit(libc::RLIMIT_FSIZE, self.max_file_bytes)?;
            set_limit(libc::RLIMIT_NOFILE, self.max_open_files)?;
            if self.own_user {
                caps::become_user(uid)?;
                // Enforced for this user only; root would be exempt.
                set_limit(libc::RLIMIT_NPROC, self.max_processes)?;
                // A credential change clears the parent-death signal; it matters where there
                // is no PID namespace (the judge is then the parent).
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            } else {
                // Still uid 0 (CUDA IPC on a GPU needs the referee's uid), but with no
                // capability: no module loading, mounts, raw devices or signals across users.
                caps::drop_all()?;
            }
            if let Some(ruleset) = &self.landlock {
                // Only now is the candidate's pid (and its /proc, private with a PID namespace)
                // known.
                ruleset.restrict_self()?;
            }
            if let Some(filters) = &self.seccomp {
                filters.install()?;
            }
        }
        Ok(())
    }
}

// --- rlimits and helpers for the child -----------------------------------------------------

/// Sets both the soft and the hard limit of `resource`: the candidate may not raise it again.
/// Async-signal-safe (one raw system call).
fn set_limit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: `limit` is a valid rlimit for the duration of the call.
    check(unsafe { libc::setrlimit(resource, &limit) })
}

/// A raw call's result as an `io::Error` (no allocation: an OS error is stored inline).
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
        for layers in [Layers::ALL, Layers::NONE, Layers::GPU_DEFAULT, some] {
            assert_eq!(Layers::parse(&layers.names()), Ok(layers));
        }
        assert_eq!(
            Layers::GPU_DEFAULT.names(),
            "landlock,seccomp,pid,ipc,root",
            "the names in `NAMES` order"
        );
        let err = Layers::parse("landlock,chroot").unwrap_err();
        assert!(err.to_string().contains("`chroot`"), "{err}");
    }

    #[test]
    fn a_plan_goes_through_json_unchanged() {
        let python = std::env::var_os("CRUCIBLE_PYTHON").unwrap_or_else(|| "python3".into());
        let scratch = tempfile::tempdir().expect("scratch");
        for gpu in [false, true] {
            let sandbox = Sandbox {
                gpu_devices: gpu,
                pids_cgroup: false,
                ..Sandbox::default()
            }
            .for_candidate(&[], scratch.path(), &[], gpu);
            let (plan, _cgroup) = sandbox.plan(Path::new(&python)).expect("a plan");
            let text = serde_json::to_string(&plan).expect("to JSON");
            let back: Plan = serde_json::from_str(&text).expect("from JSON");
            assert_eq!(back, plan);
            assert!(
                plan.rules.iter().any(|(path, _)| path == scratch.path()),
                "{text}"
            );
            back.confinement().expect("built from the JSON");
        }
    }

    #[test]
    fn a_plan_that_does_not_parse_is_refused_before_anything_is_applied() {
        let mut error = [0u8; 64];
        let plan = br#"{"rules": 3}"#;
        // SAFETY: valid buffers of the lengths given; the plan fails to parse, so nothing of this
        // test process is confined.
        let rc = unsafe {
            ffi::crucible_sandbox_enter(plan.as_ptr(), plan.len(), error.as_mut_ptr(), error.len())
        };
        assert_eq!(rc, -1);
        let message = std::ffi::CStr::from_bytes_until_nul(&error).expect("NUL-terminated");
        let message = message.to_string_lossy();
        assert!(
            message.starts_with("the sandbox plan does not parse"),
            "{message}"
        );
        assert_eq!(message.len(), error.len() - 1, "cut to the buffer");
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
        // The minimal root is on by default on a GPU too, so no socket file of the host's is
        // there to connect to although seccomp allows Unix sockets.
        assert!(
            !off.iter().any(|m| m.starts_with("a minimal root")),
            "{off:?}"
        );
        assert!(
            off.iter()
                .any(|m| m.contains("the minimal root shows no socket file")),
            "{off:?}"
        );
        // The minimal root needs the PID namespace's mount namespace: asked for without it,
        // it is reported as off.
        let root_without_pid = Sandbox {
            gpu_devices: true,
            gpu_layers: Layers::parse("landlock,seccomp,root").unwrap(),
            ..Sandbox::default()
        };
        assert!(
            root_without_pid
                .missing_features()
                .iter()
                .any(|m| m.starts_with("a minimal root (off on a GPU")),
        );
        let cpu = Sandbox::default();
        assert!(
            !cpu.missing_features()
                .iter()
                .any(|m| m.contains("off on a GPU"))
        );
    }
}

/// Runs a probe (an ignored test of this test binary) in a fresh process under one layer, for
/// the per-layer tests in each module: the layer is applied between fork and exec exactly as
/// `Confinement::enter` applies it, and the probe then tries what the layer must refuse.
#[cfg(test)]
pub(crate) mod layer_probe {
    use std::io;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Output};

    /// Set in a probe's environment: outside `run`, a probe does nothing.
    const PROBE_ENV: &str = "CRUCIBLE_SANDBOX_LAYER_PROBE";

    /// Whether this process is a probe started by `run` (and not `cargo test -- --ignored`).
    pub(crate) fn in_probe() -> bool {
        std::env::var_os(PROBE_ENV).is_some()
    }

    /// Starts the ignored test `name` (its full path, `sandbox::seccomp::tests::probe_...`) in
    /// a child that `confine` confines between fork and exec, with `env` added.
    ///
    /// `confine` runs between fork and exec of the multithreaded test process: it may only make
    /// async-signal-safe calls, like `Confinement::enter`.
    pub(crate) fn run(
        name: &str,
        env: &[(&str, String)],
        confine: impl FnMut() -> io::Result<()> + Send + Sync + 'static,
    ) -> Output {
        let exe = std::env::current_exe().expect("the test binary");
        let mut command = Command::new(exe);
        command
            .args([
                "--exact",
                name,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(PROBE_ENV, "1")
            .envs(env.iter().map(|(k, v)| (k, v)));
        // SAFETY: the caller's contract: `confine` is async-signal-safe.
        unsafe {
            command.pre_exec(confine);
        }
        command.output().expect("start the probe")
    }

    /// A non-blocking listener's `accept`: nothing came from the probe.
    pub(crate) fn assert_nothing_accepted<T: std::fmt::Debug>(accepted: io::Result<T>) {
        assert!(
            accepted
                .as_ref()
                .is_err_and(|e| e.kind() == io::ErrorKind::WouldBlock),
            "a connection got through: {accepted:?}"
        );
    }

    /// The probe ran (a filtered-out probe would pass vacuously) and passed.
    pub(crate) fn assert_passed(name: &str, output: &Output) {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "probe {name}: {}\n{stdout}\n{stderr}",
            output.status
        );
    }
}
