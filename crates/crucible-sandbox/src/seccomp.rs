//! seccomp: no `AF_UNIX` sockets (off on a GPU: CUDA needs them) and no user namespaces.
//!
//! The filters are compiled to BPF by `seccompiler` in the parent. seccompiler gives a filter a
//! single action for every rule, and each refusal here has its own errno, so there is one filter
//! per errno; the kernel runs every filter a process has, and each call is refused by at most
//! one of them. The child installs them with `seccompiler::apply_filter`, which (in 0.5) makes
//! two raw system calls, `prctl(PR_SET_NO_NEW_PRIVS)` and `seccomp(SECCOMP_SET_MODE_FILTER)`,
//! and allocates nothing, errors included: safe between fork and exec.
//!
//! x32 calls (x86_64's other ABI: the call number with bit 30 set) reach the same kernel code
//! as the native ones, so the filters refuse the x32 twin of each call they refuse. The rest of
//! the x32 ABI is not refused (seccompiler matches numbers one by one, not a range, and the
//! hand-written filter this replaced refused all of it with `EPERM`): it reaches only code that
//! the native calls, which the filters allow, reach too, and most kernels disable it (`ENOSYS`).

use std::collections::BTreeMap;
use std::io;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The candidate's seccomp filters, compiled.
pub(super) struct Filters {
    programs: Vec<BpfProgram>,
}

impl Filters {
    /// Compiles the filters, with `AF_UNIX` sockets allowed if `unix_sockets` (on a GPU).
    ///
    /// - `clone3` fails with `ENOSYS`: its flags sit in a struct in memory, out of a filter's
    ///   reach, and on `ENOSYS` libc falls back to `clone`, whose flags the filter sees.
    /// - `clone` and `unshare` with `CLONE_NEWUSER` fail with `EPERM`.
    /// - `socket(AF_UNIX, ..)` fails with `EACCES` unless `unix_sockets`.
    ///
    /// Everything else is allowed; a call from another architecture (i386 through `int 0x80`)
    /// kills the process, as seccompiler's prologue does for every filter.
    pub(super) fn build(unix_sockets: bool) -> io::Result<Filters> {
        let new_user = || {
            rule(SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(libc::CLONE_NEWUSER as u64),
                libc::CLONE_NEWUSER as u64,
            ))
        };
        let mut refusals = vec![
            (
                libc::EPERM,
                vec![
                    (libc::SYS_clone, vec![new_user()?]),
                    (libc::SYS_unshare, vec![new_user()?]),
                ],
            ),
            // An empty rule list matches every call.
            (libc::ENOSYS, vec![(libc::SYS_clone3, vec![])]),
        ];
        if !unix_sockets {
            // The family is an int: the kernel ignores the upper half of the register, and so
            // does this comparison (Dword).
            let unix = rule(SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                libc::AF_UNIX as u64,
            ))?;
            refusals.push((libc::EACCES, vec![(libc::SYS_socket, vec![unix])]));
        }
        let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(io::Error::other)?;
        let programs = refusals
            .into_iter()
            .map(|(errno, rules)| {
                let filter = SeccompFilter::new(
                    with_x32_twins(rules),
                    SeccompAction::Allow,
                    SeccompAction::Errno(errno as u32),
                    arch,
                )
                .map_err(io::Error::other)?;
                BpfProgram::try_from(filter).map_err(io::Error::other)
            })
            .collect::<io::Result<_>>()?;
        Ok(Filters { programs })
    }

    /// Installs the filters on the calling process. Async-signal-safe (see the module's doc).
    pub(super) fn install(&self) -> io::Result<()> {
        for program in &self.programs {
            seccompiler::apply_filter(program).map_err(|err| match err {
                seccompiler::Error::Prctl(err) | seccompiler::Error::Seccomp(err) => err,
                // An empty program; `build` makes none.
                _ => io::Error::from_raw_os_error(libc::EINVAL),
            })?;
        }
        Ok(())
    }
}

fn rule(condition: Result<SeccompCondition, seccompiler::BackendError>) -> io::Result<SeccompRule> {
    SeccompRule::new(vec![condition.map_err(io::Error::other)?]).map_err(io::Error::other)
}

/// The rules keyed by call number, with each call's x32 twin on x86_64: an x32 call (the number
/// with bit 30 set, same architecture) reaches the same kernel code with the same arguments, so
/// it gets the same answer.
fn with_x32_twins(rules: Vec<(libc::c_long, Vec<SeccompRule>)>) -> BTreeMap<i64, Vec<SeccompRule>> {
    let mut map = BTreeMap::new();
    for (nr, chain) in rules {
        #[cfg(target_arch = "x86_64")]
        map.insert(
            nr | linux_raw_sys::general::__X32_SYSCALL_BIT as i64,
            chain.clone(),
        );
        map.insert(nr, chain);
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer_probe;

    fn run_probe(unix_sockets: bool) {
        let filters = Filters::build(unix_sockets).expect("compile the filters");
        let name = "seccomp::tests::probe_filters";
        let output = layer_probe::run(
            name,
            &[("UNIX_SOCKETS", unix_sockets.to_string())],
            move || filters.install(),
        );
        layer_probe::assert_passed(name, &output);
    }

    #[test]
    fn the_filter_refuses_unix_sockets_and_user_namespaces() {
        run_probe(false);
    }

    #[test]
    fn the_gpu_filter_allows_unix_sockets_and_still_refuses_user_namespaces() {
        run_probe(true);
    }

    /// The result of a raw system call: its return value or its errno.
    fn raw(result: libc::c_long) -> Result<libc::c_long, i32> {
        if result < 0 {
            Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
        } else {
            Ok(result)
        }
    }

    fn socket(nr: libc::c_long, family: u64) -> Result<libc::c_long, i32> {
        // SAFETY: socket takes no pointers; a descriptor it returns is closed.
        let result = raw(unsafe { libc::syscall(nr, family, libc::SOCK_STREAM, 0) });
        if let Ok(fd) = result {
            // SAFETY: closes the descriptor just made.
            unsafe { libc::close(fd as i32) };
        }
        result
    }

    #[test]
    #[ignore = "a probe: run confined by the tests above"]
    fn probe_filters() {
        if !layer_probe::in_probe() {
            return;
        }
        let unix_sockets: bool = std::env::var("UNIX_SOCKETS").unwrap().parse().unwrap();
        let unix = libc::AF_UNIX as u64;
        if unix_sockets {
            assert!(socket(libc::SYS_socket, unix).is_ok());
        } else {
            assert_eq!(socket(libc::SYS_socket, unix), Err(libc::EACCES));
            // The kernel reads the family as an int: junk in the upper half changes nothing.
            assert_eq!(socket(libc::SYS_socket, unix | 1 << 32), Err(libc::EACCES));
            #[cfg(target_arch = "x86_64")]
            {
                let x32 = libc::SYS_socket | linux_raw_sys::general::__X32_SYSCALL_BIT as i64;
                assert_eq!(socket(x32, unix), Err(libc::EACCES), "the x32 twin");
            }
        }
        assert!(socket(libc::SYS_socket, libc::AF_INET as u64).is_ok());

        let new_user = libc::CLONE_NEWUSER as libc::c_long;
        // SAFETY: unshare takes no pointers.
        let unshare = |flags: libc::c_long| raw(unsafe { libc::syscall(libc::SYS_unshare, flags) });
        assert_eq!(unshare(new_user), Err(libc::EPERM));
        assert_eq!(
            unshare(new_user | libc::CLONE_NEWNS as i64),
            Err(libc::EPERM)
        );
        // Other namespaces pass the filter (the probe runs as root; only seccomp applies).
        assert_eq!(unshare(libc::CLONE_NEWUTS as i64), Ok(0));
        // SAFETY: a raw clone with no new stack; if the filter let it through, the child leaves
        // at once.
        let cloned = raw(unsafe {
            libc::syscall(libc::SYS_clone, new_user | libc::SIGCHLD as i64, 0, 0, 0, 0)
        });
        if cloned == Ok(0) {
            // SAFETY: the child of a clone that should not have happened.
            unsafe { libc::_exit(0) };
        }
        assert_eq!(cloned, Err(libc::EPERM), "clone(CLONE_NEWUSER)");
        // Without the filter this would be EINVAL (no struct given).
        // SAFETY: clone3 with a null struct and size 0 makes nothing.
        let clone3 = raw(unsafe { libc::syscall(libc::SYS_clone3, 0usize, 0usize) });
        assert_eq!(clone3, Err(libc::ENOSYS));

        // Threads (clone3 refused, libc falls back to clone) and processes still start.
        assert_eq!(std::thread::spawn(|| 7).join().unwrap(), 7);
        let status = std::process::Command::new("/bin/true")
            .status()
            .expect("/bin/true");
        assert!(status.success());
    }
}
