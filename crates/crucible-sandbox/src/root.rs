//! The minimal root: the candidate's mount namespace shows only the paths its Landlock rules
//! name (`landlock::rule_paths`), bound at the same places, a /proc of its PID namespace and a
//! few /dev links; nothing else of the host's tree exists for it.
//!
//! Landlock (up to ABI 7, Linux 6.18) does not cover connecting to a Unix socket file, and on a
//! GPU the seccomp filter must let the candidate make Unix sockets (CUDA needs them): without
//! this layer a candidate could connect to any socket file it can name (a Redis or database
//! socket, an agent's, a daemon's outside /run). It also ends what Landlock leaves to path
//! lookups: `stat` of any host path, learning which files exist.
//!
//! How (the way bubblewrap builds its root): in the private mount namespace, a tmpfs is mounted
//! on an existing directory and made the root (`pivot_root`), the host's root kept at /oldroot;
//! a second tmpfs at /newroot receives the bind mounts, from /oldroot/<canonical path> to
//! /newroot/<canonical path>, read-only except the scratch, shared and device paths; the
//! symbolic links met on the way to each rule's path are made again (so `/lib64/ld-linux…` or a
//! venv's `bin/python` resolve the same way); /oldroot is detached and /newroot becomes the root.
//! Rules follow inodes and a bind mount shows the same ones, so the Landlock ruleset built on
//! the host's paths applies unchanged.
//!
//! The parent plans every step (paths as C strings, in order); the child (init of the PID
//! namespace, between fork and exec) only makes raw system calls.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::check;
use super::landlock::Reach;

/// Where the host's root hangs while the new one is built, and where that is built.
const OLD_ROOT: &str = "/oldroot";
const NEW_ROOT: &str = "/newroot";
/// Symbolic links followed while planning one path before giving up (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// One step of building the new root, with every path absolute in the first tmpfs root.
#[derive(Debug)]
enum Step {
    /// A directory (an existing one is fine).
    Dir(CString),
    /// An empty file to bind a file over.
    File(CString),
    /// `target` → `text`, as on the host (an existing one is fine).
    Link { text: CString, target: CString },
    /// A bind mount of the host's `source` (under /oldroot) at `target`, with its submounts.
    Bind {
        source: CString,
        target: CString,
        read_only: bool,
    },
    /// A /proc of the candidate's PID namespace.
    Proc(CString),
}

/// The planned root for one spawn (see the module's text).
#[derive(Debug)]
pub(super) struct MinimalRoot {
    /// An existing directory the first tmpfs is mounted on.
    base: CString,
    /// `base` + /oldroot, the first pivot's put_old.
    base_old_root: CString,
    steps: Vec<Step>,
}

/// How a bound path is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    ReadOnly,
    /// Read and write: scratch, shared files, devices.
    Writable,
}

impl MinimalRoot {
    /// Plans the root that shows `rules` (paths that do not exist are left out, as Landlock
    /// leaves them out) with the tmpfs mounted on `base`, an existing directory.
    pub(super) fn plan(rules: &[(PathBuf, Reach)], base: &Path) -> io::Result<MinimalRoot> {
        let mut planner = Planner::default();
        for (path, reach) in rules {
            let mode = match reach {
                // Mounted fresh for the PID namespace below.
                _ if path == Path::new("/proc") => continue,
                Reach::ReadExec | Reach::Read => Mode::ReadOnly,
                Reach::Device | Reach::DeviceDir | Reach::ReadWrite | Reach::SharedFiles => {
                    Mode::Writable
                }
            };
            planner.add(path, mode)?;
        }
        let mut steps = planner.into_steps()?;
        steps.push(Step::Dir(new_root_path("/proc")?));
        steps.push(Step::Proc(new_root_path("/proc")?));
        // What programs expect of /dev besides its device files.
        steps.push(Step::Dir(new_root_path("/dev")?));
        for (name, text) in [
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ] {
            steps.push(Step::Link {
                text: c_path(Path::new(text))?,
                target: new_root_path(&format!("/dev/{name}"))?,
            });
        }
        Ok(MinimalRoot {
            base: c_path(base)?,
            base_old_root: c_path(&base.join(OLD_ROOT.trim_start_matches('/')))?,
            steps,
        })
    }

    /// Builds the root and makes it the calling process's, with the working directory it had.
    /// Needs a private mount namespace of its own (see `pid::enter`).
    ///
    /// # Safety
    ///
    /// Raw system calls only: runs in init between fork and exec of the multithreaded judge.
    pub(super) unsafe fn enter(&self) -> io::Result<()> {
        let mut cwd = [0u8; libc::PATH_MAX as usize];
        // SAFETY: raw system calls with NUL-terminated paths from the plan and valid buffers
        // (see the function's contract).
        unsafe {
            // The kernel's getcwd: the length written, NUL included.
            let written = libc::syscall(libc::SYS_getcwd, cwd.as_mut_ptr(), cwd.len());
            check(written as libc::c_int)?;
            mount_tmpfs(self.base.as_ptr())?;
            make_dir(self.base_old_root.as_ptr())?;
            check(libc::syscall(
                libc::SYS_pivot_root,
                self.base.as_ptr(),
                self.base_old_root.as_ptr(),
            ) as libc::c_int)?;
            check(libc::chdir(c"/".as_ptr()))?;
            make_dir(c"/newroot".as_ptr())?;
            mount_tmpfs(c"/newroot".as_ptr())?;
            for step in &self.steps {
                step.apply()?;
            }
            // Nothing of the host's tree but the binds stays reachable.
            check(libc::umount2(c"/oldroot".as_ptr(), libc::MNT_DETACH))?;
            // The new root itself holds only mount points and links: read-only.
            check(libc::mount(
                std::ptr::null(),
                c"/newroot".as_ptr(),
                std::ptr::null(),
                libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
                std::ptr::null(),
            ))?;
            // pivot_root(".", "."): the first tmpfs lands on top of the new root; detaching it
            // leaves the new root alone.
            check(libc::chdir(c"/newroot".as_ptr()))?;
            check(
                libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as libc::c_int,
            )?;
            check(libc::umount2(c".".as_ptr(), libc::MNT_DETACH))?;
            check(libc::chdir(c"/".as_ptr()))?;
            // The working directory it had: a candidate's scratch directory, bound at its own
            // path. (`crucible sandbox-exec` may start from one the rules leave out: then /.)
            if libc::chdir(cwd.as_ptr().cast()) < 0 {
                check(libc::chdir(c"/".as_ptr()))?;
            }
        }
        Ok(())
    }
}

impl Step {
    /// # Safety
    ///
    /// Raw system calls only (see `MinimalRoot::enter`).
    unsafe fn apply(&self) -> io::Result<()> {
        // SAFETY: NUL-terminated paths from the plan; raw system calls.
        unsafe {
            match self {
                Step::Dir(path) => make_dir(path.as_ptr()),
                Step::File(path) => {
                    let fd = libc::open(
                        path.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o600,
                    );
                    if fd < 0 && super::errno() != libc::EEXIST {
                        return Err(io::Error::last_os_error());
                    }
                    if fd >= 0 {
                        libc::close(fd);
                    }
                    Ok(())
                }
                Step::Link { text, target } => {
                    if libc::symlink(text.as_ptr(), target.as_ptr()) < 0
                        && super::errno() != libc::EEXIST
                    {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                }
                Step::Bind {
                    source,
                    target,
                    read_only,
                } => {
                    check(libc::mount(
                        source.as_ptr(),
                        target.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ))?;
                    if *read_only {
                        make_read_only(target.as_ptr())?;
                    }
                    Ok(())
                }
                Step::Proc(path) => check(libc::mount(
                    c"proc".as_ptr(),
                    path.as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                )),
            }
        }
    }
}

/// A small tmpfs (it holds mount points and links only).
unsafe fn mount_tmpfs(target: *const libc::c_char) -> io::Result<()> {
    // SAFETY: raw system call; `target` is NUL-terminated (the caller's contract).
    check(unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            target,
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"size=1m,mode=755".as_ptr().cast(),
        )
    })
}

unsafe fn make_dir(path: *const libc::c_char) -> io::Result<()> {
    // SAFETY: raw system call; `path` is NUL-terminated (the caller's contract).
    if unsafe { libc::mkdir(path, 0o755) } < 0 && super::errno() != libc::EEXIST {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Read-only, nosuid, nodev for the bind at `target` and every mount beneath it (`/sys` brings
/// its submounts): `mount_setattr` (Linux 5.12+), else a remount of the top one.
unsafe fn make_read_only(target: *const libc::c_char) -> io::Result<()> {
    let attr = linux_raw_sys::general::mount_attr {
        attr_set: u64::from(
            linux_raw_sys::general::MOUNT_ATTR_RDONLY
                | linux_raw_sys::general::MOUNT_ATTR_NOSUID
                | linux_raw_sys::general::MOUNT_ATTR_NODEV,
        ),
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: raw system calls with a NUL-terminated path and a valid struct of the size given.
    unsafe {
        let rc = libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target,
            linux_raw_sys::general::AT_RECURSIVE,
            &attr as *const linux_raw_sys::general::mount_attr,
            std::mem::size_of::<linux_raw_sys::general::mount_attr>(),
        );
        if rc == 0 {
            return Ok(());
        }
        if super::errno() != libc::ENOSYS {
            return Err(io::Error::last_os_error());
        }
        check(libc::mount(
            std::ptr::null(),
            target,
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            std::ptr::null(),
        ))
    }
}

// --- planning (the parent's side) ----------------------------------------------------------

/// Collects, for every rule path, the symbolic links on the way to it and the canonical path
/// to bind, then orders them.
#[derive(Default)]
struct Planner {
    /// Canonical path → how it is bound (the widest asked for), and whether it is a directory.
    binds: BTreeMap<PathBuf, (Mode, bool)>,
    /// Where a link stands → its text.
    links: BTreeMap<PathBuf, PathBuf>,
}

impl Planner {
    /// Plans `path`: records each symbolic link met on the way (and the way to its target) and
    /// the bind of where it leads. A path that does not exist is left out.
    fn add(&mut self, path: &Path, mode: Mode) -> io::Result<()> {
        if !path.is_absolute() || path.parent().is_none() {
            // A filesystem root would bind everything below it (Landlock skips it too).
            return Ok(());
        }
        let Some(real) = self.walk(path, 0)? else {
            return Ok(());
        };
        let is_dir = std::fs::metadata(&real)?.is_dir();
        let entry = self.binds.entry(real).or_insert((mode, is_dir));
        entry.0 = entry.0.max(mode);
        Ok(())
    }

    /// Follows `path` component by component as the kernel would, recording the links met;
    /// returns the canonical path, or `None` when it does not exist.
    fn walk(&mut self, path: &Path, depth: usize) -> io::Result<Option<PathBuf>> {
        if depth > MAX_LINKS {
            return Ok(None);
        }
        let mut real = PathBuf::from("/");
        for component in path.components() {
            match component {
                Component::RootDir | Component::CurDir => continue,
                Component::ParentDir => {
                    real.pop();
                    continue;
                }
                Component::Normal(name) => real.push(name),
                Component::Prefix(_) => unreachable!("no path prefixes on Unix"),
            }
            let meta = match std::fs::symlink_metadata(&real) {
                Ok(meta) => meta,
                Err(err) if matches!(err.kind(), io::ErrorKind::NotFound) => return Ok(None),
                Err(err) if err.raw_os_error() == Some(libc::ENOTDIR) => return Ok(None),
                Err(err) => return Err(err),
            };
            if meta.file_type().is_symlink() {
                let text = std::fs::read_link(&real)?;
                let from = real.parent().unwrap_or(Path::new("/")).to_path_buf();
                self.links.insert(real.clone(), text.clone());
                match self.walk(&from.join(&text), depth + 1)? {
                    Some(target) => real = target,
                    None => return Ok(None),
                }
            }
        }
        Ok(Some(real))
    }

    /// The steps in an order that works: binds sorted so that a directory comes before what is
    /// bound beneath it (a bind already covered by a wider one is left out), each preceded by
    /// the directories on its way; the links last (a link inside a bound directory exists
    /// there already).
    fn into_steps(self) -> io::Result<Vec<Step>> {
        let mut steps = Vec::new();
        let mut made = BTreeSet::new();
        let mut bound: Vec<(PathBuf, Mode)> = Vec::new();
        for (path, (mode, is_dir)) in &self.binds {
            let covered = bound
                .iter()
                .any(|(outer, outer_mode)| path.starts_with(outer) && *outer_mode >= *mode);
            if covered {
                continue;
            }
            dirs_on_the_way(path, &mut made, &mut steps)?;
            let target = new_root_path_of(path)?;
            steps.push(if *is_dir {
                Step::Dir(target.clone())
            } else {
                Step::File(target.clone())
            });
            steps.push(Step::Bind {
                source: c_path(&Path::new(OLD_ROOT).join(relative(path)))?,
                target,
                read_only: *mode == Mode::ReadOnly,
            });
            bound.push((path.clone(), *mode));
        }
        for (at, text) in &self.links {
            dirs_on_the_way(at, &mut made, &mut steps)?;
            steps.push(Step::Link {
                text: c_path(text)?,
                target: new_root_path_of(at)?,
            });
        }
        Ok(steps)
    }
}

/// `Dir` steps for the ancestors of `path` not made yet.
fn dirs_on_the_way(
    path: &Path,
    made: &mut BTreeSet<PathBuf>,
    steps: &mut Vec<Step>,
) -> io::Result<()> {
    let mut ancestors: Vec<&Path> = path
        .ancestors()
        .skip(1)
        .filter(|a| a.parent().is_some())
        .collect();
    ancestors.reverse();
    for dir in ancestors {
        if made.insert(dir.to_path_buf()) {
            steps.push(Step::Dir(new_root_path_of(dir)?));
        }
    }
    Ok(())
}

fn relative(path: &Path) -> &Path {
    path.strip_prefix("/").unwrap_or(path)
}

fn new_root_path_of(path: &Path) -> io::Result<CString> {
    c_path(&Path::new(NEW_ROOT).join(relative(path)))
}

fn new_root_path(path: &str) -> io::Result<CString> {
    new_root_path_of(Path::new(path))
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a sandbox path holds a NUL byte: {}", path.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer_probe;
    use std::os::unix::fs::symlink;

    fn texts(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|step| match step {
                Step::Dir(p) => format!("dir {}", p.to_string_lossy()),
                Step::File(p) => format!("file {}", p.to_string_lossy()),
                Step::Link { text, target } => format!(
                    "link {} -> {}",
                    target.to_string_lossy(),
                    text.to_string_lossy()
                ),
                Step::Bind {
                    source,
                    target,
                    read_only,
                } => format!(
                    "bind {} {} {}",
                    source.to_string_lossy(),
                    target.to_string_lossy(),
                    if *read_only { "ro" } else { "rw" }
                ),
                Step::Proc(p) => format!("proc {}", p.to_string_lossy()),
            })
            .collect()
    }

    #[test]
    fn the_plan_binds_canonical_paths_once_and_makes_the_links_on_the_way() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("real/lib/sub")).unwrap();
        std::fs::create_dir_all(root.join("scratch")).unwrap();
        symlink("real/lib", root.join("lib")).unwrap();
        std::fs::write(root.join("real/lib/tool"), "").unwrap();
        symlink(root.join("real/lib/tool"), root.join("tool")).unwrap();
        let rules = vec![
            (root.join("lib"), Reach::ReadExec),
            // Beneath a read-only bind: covered.
            (root.join("real/lib/sub"), Reach::ReadExec),
            // A file through an absolute link: the file is bound, the link made.
            (root.join("tool"), Reach::ReadExec),
            (root.join("scratch"), Reach::ReadWrite),
            (root.join("missing"), Reach::ReadExec),
        ];
        let steps = texts(&MinimalRoot::plan(&rules, &root).unwrap().steps);
        let r = root.display();
        let binds: Vec<&String> = steps.iter().filter(|s| s.starts_with("bind")).collect();
        assert_eq!(
            binds,
            [
                &format!("bind /oldroot{r}/real/lib /newroot{r}/real/lib ro"),
                &format!("bind /oldroot{r}/scratch /newroot{r}/scratch rw"),
            ],
            "{steps:#?}"
        );
        assert!(steps.contains(&format!("link /newroot{r}/lib -> real/lib")));
        assert!(steps.contains(&format!("link /newroot{r}/tool -> {r}/real/lib/tool")));
        // Each directory is made before the bind beneath it.
        let made = steps
            .iter()
            .position(|s| *s == format!("dir /newroot{r}/real/lib"))
            .unwrap();
        let bind = steps.iter().position(|s| s == binds[0]).unwrap();
        assert!(made < bind, "{steps:#?}");
        assert!(!steps.iter().any(|s| s.contains("missing")));
    }

    /// In a minimal root, a Unix socket file outside the rules does not exist, nor does the
    /// rest of the host's tree; what the rules name works, writable only where they say so.
    #[test]
    fn a_minimal_root_shows_only_the_rule_paths() {
        if !super::super::support().minimal_root {
            eprintln!("SKIPPED a_minimal_root_shows_only_the_rule_paths: no minimal root here");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let top = dir.path().canonicalize().unwrap();
        let scratch = top.join("scratch");
        std::fs::create_dir(&scratch).unwrap();
        std::fs::write(top.join("secret.txt"), "the judge's secret").unwrap();
        let socket_path = top.join("service.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket_path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let exe = std::env::current_exe().unwrap();
        let paths = super::super::landlock::Paths {
            read_exec: &[exe.parent().unwrap().to_path_buf()],
            read_write: std::slice::from_ref(&scratch),
            shared_files: &[],
            gpu_devices: false,
        };
        let rules = super::super::landlock::rule_paths(&paths).unwrap();
        let root = MinimalRoot::plan(&rules, &scratch).unwrap();
        // A candidate starts in its scratch directory (the judge's `current_dir`).
        let cwd = c_path(&scratch).unwrap();
        let name = "root::tests::probe_minimal_root";
        let output = layer_probe::run(
            name,
            &[
                ("TOP", top.display().to_string()),
                ("EXE_DIR", exe.parent().unwrap().display().to_string()),
            ],
            move || {
                // As `pid::enter` does it: a private mount namespace first.
                // SAFETY: raw system calls in the forked child.
                unsafe {
                    check(libc::unshare(libc::CLONE_NEWNS))?;
                    super::super::pid::make_mounts_private()?;
                    check(libc::chdir(cwd.as_ptr()))?;
                    root.enter()
                }
            },
        );
        layer_probe::assert_passed(name, &output);
        layer_probe::assert_nothing_accepted(listener.accept());
        assert_eq!(
            std::fs::read_to_string(scratch.join("mine.txt")).unwrap(),
            "ok"
        );
        // The host's root is untouched.
        assert!(!Path::new("/newroot").exists() && !Path::new("/oldroot").exists());
    }

    #[test]
    #[ignore = "a probe: run in a minimal root by a_minimal_root_shows_only_the_rule_paths"]
    fn probe_minimal_root() {
        if !layer_probe::in_probe() {
            return;
        }
        let top = PathBuf::from(std::env::var("TOP").unwrap());
        let gone = |path: &Path| {
            let err = std::fs::symlink_metadata(path).expect_err("should not exist");
            assert_eq!(
                err.kind(),
                io::ErrorKind::NotFound,
                "{}: {err}",
                path.display()
            );
        };
        // The socket file is not there to connect to, nor anything else beside the scratch.
        let connect = std::os::unix::net::UnixStream::connect(top.join("service.sock"));
        assert_eq!(
            connect.map(drop).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        gone(&top.join("secret.txt"));
        for path in ["/oldroot", "/newroot", "/run", "/home", "/var", "/mnt"] {
            gone(Path::new(path));
        }
        // The directory above the scratch holds only the way to it.
        let beside: Vec<_> = std::fs::read_dir(&top)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(beside, ["scratch"]);
        // `..` from the root stays in it.
        let listing: Vec<_> = std::fs::read_dir("/../..")
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(listing.iter().any(|n| n == "proc"), "{listing:?}");
        // The working directory is the scratch directory, writable.
        assert_eq!(std::env::current_dir().unwrap(), top.join("scratch"));
        std::fs::write("mine.txt", "ok").expect("write in scratch");
        // System directories are there, read-only.
        assert!(std::fs::read("/etc/passwd").is_ok());
        let err = std::fs::write("/etc/crucible-planted", "x").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
        // The test binary's own directory (a rule) is there; its parent's other entries not.
        let exe_dir = PathBuf::from(std::env::var("EXE_DIR").unwrap());
        assert!(exe_dir.is_dir());
        // /proc is this PID namespace's (here the host's pid namespace: it exists) and /dev
        // holds the named devices and the usual links only.
        assert!(Path::new("/proc/self/status").exists());
        std::fs::write("/dev/null", "x").expect("write /dev/null");
        assert!(Path::new("/dev/fd").exists());
        gone(Path::new("/dev/sda"));
        gone(Path::new("/dev/shm"));
    }
}
