//! Landlock: what the candidate may read, write and execute, no TCP, and (scoping) no signals
//! or abstract-socket connections out of the sandbox.
//!
//! The parent builds the ruleset with the `landlock` crate: the kernel's ABI is probed through
//! it, and every rule it can know before fork (system, Python, scratch and shared directories,
//! device files) is added there. Two rules can only be made in the child, after fork: the
//! candidate's own /proc/self (its pid is not known before) and the private /proc that its PID
//! namespace mounts (rules follow inodes). Those two and `landlock_restrict_self` are raw
//! system calls: the crate's `add_rule` and `restrict_self` consume the `RulesetCreated` (the
//! child only has the confinement by reference), go through its compatibility bookkeeping and
//! error types, which it does not promise to keep free of allocation, and between fork and exec
//! of the multithreaded judge only async-signal-safe calls may run. The struct and rule type
//! for those calls come from `linux-raw-sys`.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ::landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    PathFdError, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, make_bitflags,
};
use linux_raw_sys::landlock::{landlock_path_beneath_attr, landlock_rule_type};

use super::check;

/// The newest ABI whose rights the sandbox uses: TCP rules came with 4, scoping with 6. Later
/// ABIs bring rights (UDP, connecting to Unix socket files) that would change what a candidate
/// may do, so they stay unused until measured on the GPU host.
const NEWEST_ABI_USED: ABI = ABI::V6;

/// The newest ABI up to `NEWEST_ABI_USED` whose every right this kernel supports (`Unsupported`
/// without Landlock). Asked through the crate: a ruleset that requires an ABI's rights fails to
/// build on a kernel that lacks one of them.
pub(super) fn kernel_abi() -> ABI {
    [ABI::V6, ABI::V5, ABI::V4, ABI::V3, ABI::V2, ABI::V1]
        .into_iter()
        .find(|&abi| abi <= NEWEST_ABI_USED && requirable(abi, true).is_ok())
        .unwrap_or(ABI::Unsupported)
}

/// A ruleset handling every right of `abi` (the scopes only if `scoping`), all of them
/// required: nothing is silently dropped.
fn requirable(abi: ABI, scoping: bool) -> Result<Ruleset, ::landlock::RulesetError> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))?;
    // Handled with no rule: every TCP bind and connect is refused.
    let net = AccessNet::from_all(abi);
    if !net.is_empty() {
        ruleset = ruleset.handle_access(net)?;
    }
    // No signals to, and no abstract-socket connections with, processes outside the sandbox.
    let scopes = Scope::from_all(abi);
    if scoping && !scopes.is_empty() {
        ruleset = ruleset.scope(scopes)?;
    }
    Ok(ruleset)
}

/// The paths a candidate's rules name besides the system directories.
pub(super) struct Paths<'a> {
    /// Read and execute: the Python directories and the harness.
    pub read_exec: &'a [PathBuf],
    /// Read and write everything: the scratch directory.
    pub read_write: &'a [PathBuf],
    /// Read and write files that already exist: the referee's shared tensors.
    pub shared_files: &'a [PathBuf],
    /// Also the NVIDIA device files.
    pub gpu_devices: bool,
}

/// What a candidate may do beneath one path of its rules. The minimal root (`super::root`)
/// shows it exactly these paths, so both layers read one list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) enum Reach {
    /// Read and execute (system, Python and harness directories).
    ReadExec,
    /// Read only (/proc, /sys).
    Read,
    /// Read, write and ioctl a device file.
    Device,
    /// A directory of device files (`/dev/nvidia-caps`).
    DeviceDir,
    /// Everything but making device nodes (the scratch directory).
    ReadWrite,
    /// Read and write the files that exist; create nothing (the referee's shared tensors).
    SharedFiles,
}

/// Every path the candidate's rules name, with its reach. Paths that do not exist are kept:
/// each layer skips them.
pub(super) fn rule_paths(paths: &Paths) -> io::Result<Vec<(PathBuf, Reach)>> {
    let mut rules: Vec<(PathBuf, Reach)> = Vec::new();
    for dir in [
        "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc",
    ] {
        rules.push((dir.into(), Reach::ReadExec));
    }
    // The library directories the judge passes on to the harness (see `harness_env`).
    for key in ["LD_LIBRARY_PATH", "CUDA_HOME"] {
        if let Some(value) = std::env::var_os(key) {
            rules.extend(std::env::split_paths(&value).map(|p| (p, Reach::ReadExec)));
        }
    }
    rules.extend(paths.read_exec.iter().map(|p| (p.clone(), Reach::ReadExec)));
    for dir in ["/proc", "/sys"] {
        rules.push((dir.into(), Reach::Read));
    }
    for dev in ["null", "zero", "full", "random", "urandom"] {
        rules.push((Path::new("/dev").join(dev), Reach::Device));
    }
    if paths.gpu_devices {
        // /dev/nvidia0.., nvidiactl, nvidia-uvm, nvidia-caps/: named one by one, since the
        // rest of /dev (disks among them) must stay closed.
        for entry in std::fs::read_dir("/dev")?.flatten() {
            if entry.file_name().as_bytes().starts_with(b"nvidia") {
                let reach = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    Reach::DeviceDir
                } else {
                    Reach::Device
                };
                rules.push((entry.path(), reach));
            }
        }
    }
    rules.extend(
        paths
            .read_write
            .iter()
            .map(|p| (p.clone(), Reach::ReadWrite)),
    );
    rules.extend(
        paths
            .shared_files
            .iter()
            .map(|p| (p.clone(), Reach::SharedFiles)),
    );
    Ok(rules)
}

/// A ruleset ready for `restrict_self` in the child.
pub(super) struct PreparedRuleset {
    fd: OwnedFd,
    /// The rights on the candidate's own /proc/<pid> (the handled subset).
    own_proc_access: u64,
    /// The rights on the private /proc of a PID namespace, as on the host's.
    proc_access: u64,
}

/// CUDA names its threads by writing /proc/self/task/<tid>/comm (and fails to initialize, error
/// 304, when it cannot); a process's own /proc entries affect only itself.
const OWN_PROC_ACCESS: BitFlags<AccessFs> =
    make_bitflags!(AccessFs::{ReadFile | WriteFile | ReadDir | Truncate});
const READ: BitFlags<AccessFs> = make_bitflags!(AccessFs::{ReadFile | ReadDir});

/// Builds the ruleset for `abi` (from `kernel_abi`): the rights of that ABI handled, one rule
/// per path of `rules` (from `rule_paths`); scoping if `scoping` and the ABI has it.
pub(super) fn prepare(
    abi: ABI,
    rules: &[(PathBuf, Reach)],
    scoping: bool,
) -> io::Result<PreparedRuleset> {
    let handled = AccessFs::from_all(abi);
    let ruleset = requirable(abi, scoping).map_err(io::Error::other)?;
    // Best effort for the rules only: what `kernel_abi` found is all handled, so the one thing
    // left to drop is a directory right on a rule for a file, which the kernel would refuse.
    let mut created = ruleset
        .create()
        .map_err(io::Error::other)?
        .set_compatibility(CompatLevel::BestEffort);

    let read_exec = make_bitflags!(AccessFs::{Execute | ReadFile | ReadDir});
    let device = make_bitflags!(AccessFs::{ReadFile | WriteFile | Truncate | IoctlDev});
    // Device nodes cannot be made without CAP_MKNOD anyway; say so in the rules too.
    let read_write = handled & !make_bitflags!(AccessFs::{MakeChar | MakeBlock});
    let shared = make_bitflags!(AccessFs::{ReadFile | WriteFile | Truncate | ReadDir});
    let rules = rules.iter().map(|(path, reach)| {
        let access = match reach {
            Reach::ReadExec => read_exec,
            Reach::Read => READ,
            Reach::Device => device,
            Reach::DeviceDir => device | AccessFs::ReadDir,
            Reach::ReadWrite => read_write,
            Reach::SharedFiles => shared,
        };
        (path, access)
    });

    for (path, access) in rules {
        let access = access & handled;
        // A filesystem root would open everything below it.
        if !path.is_absolute() || path.parent().is_none() || access.is_empty() {
            continue;
        }
        let parent = match PathFd::new(path) {
            Ok(fd) => fd,
            // A path that does not exist is skipped.
            Err(PathFdError::OpenCall { source, .. })
                if matches!(
                    source.raw_os_error(),
                    Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
                ) =>
            {
                continue;
            }
            Err(err) => return Err(io::Error::other(err)),
        };
        created = created
            .add_rule(PathBeneath::new(parent, access))
            .map_err(|err| {
                io::Error::other(format!("landlock rule for {}: {err}", path.display()))
            })?;
    }
    let fd: Option<OwnedFd> = created.into();
    Ok(PreparedRuleset {
        fd: fd.ok_or_else(|| io::Error::other("the kernel made no Landlock ruleset"))?,
        own_proc_access: (OWN_PROC_ACCESS & handled).bits(),
        proc_access: (READ & handled).bits(),
    })
}

impl PreparedRuleset {
    /// Lets the candidate read the /proc its PID namespace just mounted. Child side: raw calls.
    pub(super) fn allow_private_proc(&self) -> io::Result<()> {
        add_rule_in_child(&self.fd, c"/proc", self.proc_access)
    }

    /// Lets the candidate read and write its own /proc/<pid>, then restricts the calling
    /// process to the ruleset. Child side: raw calls (see the module's doc for why).
    pub(super) fn restrict_self(&self) -> io::Result<()> {
        add_rule_in_child(&self.fd, c"/proc/self", self.own_proc_access)?;
        // SAFETY: a raw system call on a ruleset descriptor this value owns.
        let rc =
            unsafe { libc::syscall(libc::SYS_landlock_restrict_self, self.fd.as_raw_fd(), 0u32) };
        check(rc as libc::c_int)
    }
}

/// Grants `access` beneath `path` with raw system calls only (open, landlock_add_rule, close):
/// async-signal-safe, for the forked child.
fn add_rule_in_child(ruleset: &OwnedFd, path: &CStr, access: u64) -> io::Result<()> {
    // SAFETY: raw system calls with a NUL-terminated path and a valid attribute struct; the
    // descriptor opened here is closed here.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
        check(fd)?;
        let attr = landlock_path_beneath_attr {
            allowed_access: access,
            parent_fd: fd,
        };
        let rc = libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            landlock_rule_type::LANDLOCK_RULE_PATH_BENEATH as libc::c_uint,
            &attr as *const landlock_path_beneath_attr,
            0u32,
        );
        libc::close(fd);
        check(rc as libc::c_int)
    }
}

/// Where the interpreter keeps its standard library and packages, asked once per interpreter:
/// the prefixes, `sys.path` after site processing (`.pth` files included) and sysconfig's paths.
/// On a GPU host these hold torch's NVIDIA libraries and Triton's ptxas too.
pub(super) fn python_dirs(python: &Path) -> io::Result<Arc<[PathBuf]>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer_probe;
    use std::io::ErrorKind;

    /// Reads and writes outside the rules, TCP, signals out of the sandbox and other processes'
    /// /proc entries are refused; the rules' own paths work.
    #[test]
    fn landlock_confines_files_tcp_signals_and_proc() {
        let abi = kernel_abi();
        if abi < ABI::V1 {
            eprintln!("SKIPPED landlock_confines_files_tcp_signals_and_proc: no Landlock here");
            return;
        }
        let dir = tempfile::tempdir().expect("test directory");
        let scratch = dir.path().join("scratch");
        let shared = dir.path().join("shared");
        for sub in [&scratch, &shared] {
            std::fs::create_dir(sub).unwrap();
        }
        std::fs::write(dir.path().join("secret.txt"), "the judge's secret").unwrap();
        std::fs::write(shared.join("slot"), "input").unwrap();
        // The probe is this test binary: it must be able to load itself.
        let exe = std::env::current_exe().unwrap();
        let paths = Paths {
            read_exec: &[exe.parent().unwrap().to_path_buf()],
            read_write: std::slice::from_ref(&scratch),
            shared_files: std::slice::from_ref(&shared),
            gpu_devices: false,
        };
        let rules = rule_paths(&paths).expect("rule paths");
        let ruleset = prepare(abi, &rules, true).expect("ruleset");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp listener");
        listener.set_nonblocking(true).unwrap();
        let name = "landlock::tests::probe_landlock";
        let output = layer_probe::run(
            name,
            &[
                ("DIR", dir.path().display().to_string()),
                ("JUDGE", std::process::id().to_string()),
                ("PORT", listener.local_addr().unwrap().port().to_string()),
                ("ABI", (abi as i32).to_string()),
            ],
            move || {
                // As in `Confinement::enter`: no_new_privs first (an unprivileged process
                // needs it to restrict itself).
                // SAFETY: a raw prctl on the calling process.
                super::check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
                ruleset.restrict_self()
            },
        );
        layer_probe::assert_passed(name, &output);
        layer_probe::assert_nothing_accepted(listener.accept());
        assert!(!dir.path().join("escape.txt").exists());
        assert!(!shared.join("planted").exists());
        assert_eq!(
            std::fs::read_to_string(scratch.join("mine.txt")).unwrap(),
            "ok"
        );
    }

    #[test]
    #[ignore = "a probe: run confined by landlock_confines_files_tcp_signals_and_proc"]
    fn probe_landlock() {
        if !layer_probe::in_probe() {
            return;
        }
        let var = |name: &str| std::env::var(name).expect(name);
        let dir = PathBuf::from(var("DIR"));
        let abi: i32 = var("ABI").parse().unwrap();
        let refused = |result: io::Result<()>, what: &str| match result {
            Err(err) => assert_eq!(err.kind(), ErrorKind::PermissionDenied, "{what}: {err}"),
            Ok(()) => panic!("{what} was allowed"),
        };
        // System directories read; nothing else outside the rules.
        assert!(std::fs::read("/etc/passwd").is_ok());
        refused(
            std::fs::read(dir.join("secret.txt")).map(drop),
            "reading outside",
        );
        refused(std::fs::read_dir(&dir).map(drop), "listing outside");
        // Writes in the scratch directory only.
        std::fs::write(dir.join("scratch/mine.txt"), "ok").expect("write in scratch");
        refused(
            std::fs::write(dir.join("escape.txt"), "x"),
            "writing outside",
        );
        // The shared directory: its existing files, and nothing new.
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("shared/slot"))
            .expect("write a shared file");
        refused(
            std::fs::write(dir.join("shared/planted"), "x"),
            "creating a shared file",
        );
        // Its own /proc entries, not another process's.
        std::fs::write("/proc/self/comm", "probe").expect("write /proc/self/comm");
        let judge = var("JUDGE");
        // Landlock refuses ptrace of processes outside the sandbox, and what needs ptrace's
        // rights (/proc/<pid>/mem). (On Linux 6.18 it lets environ and maps be read: there the
        // PID namespace and the user id keep the judge out of sight.)
        refused(
            std::fs::read(format!("/proc/{judge}/mem")).map(drop),
            "the judge's memory",
        );
        let judge: libc::pid_t = judge.parse().unwrap();
        // SAFETY: PTRACE_ATTACH takes no pointers; it must fail.
        let rc = unsafe { libc::ptrace(libc::PTRACE_ATTACH, judge, 0, 0) };
        assert_eq!(
            (rc, super::super::errno()),
            (-1, libc::EPERM),
            "ptrace attach"
        );
        if abi >= 4 {
            let port: u16 = var("PORT").parse().unwrap();
            refused(
                std::net::TcpStream::connect(("127.0.0.1", port)).map(drop),
                "TCP connect",
            );
            refused(
                std::net::TcpListener::bind("127.0.0.1:0").map(drop),
                "TCP bind",
            );
        }
        if abi >= 6 {
            // SAFETY: signal 0 only checks whether the judge may be signalled.
            let rc = unsafe { libc::kill(judge, 0) };
            assert_eq!(rc, -1, "signalled the judge");
            assert_eq!(super::super::errno(), libc::EPERM);
        }
    }
}
