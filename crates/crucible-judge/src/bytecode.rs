//! Compiled bytecode for the harness processes, made once per interpreter and harness.
//!
//! Every harness process is a fresh interpreter that imports torch, triton and numpy. Where the
//! packages ship without `.pyc` files (pip's `--no-compile`; the H200 test machine's venv has none
//! for torch's 2,141 modules) and processes may not write them (`PYTHONDONTWRITEBYTECODE`, which
//! the harness sets so that no process, least of all a candidate, writes code another one
//! loads), each start compiled torch from source: measured on an H200 host, `import torch,
//! triton, numpy` took 6.4 CPU-seconds without bytecode and 3.9 with it, and the profiler's
//! first use 5.1 s against 1.2 s (`scripts/probe/bytecode_cost.sh`).
//!
//! So the judge compiles those packages and the harness once, into a directory of its cache
//! that harness processes get as `PYTHONPYCACHEPREFIX` and only read (the candidate's sandbox
//! lists it read-only). Python checks each file's source size and modification time before it
//! uses its bytecode, so a stale directory costs speed, never correctness. Failing to make it
//! is logged and costs only speed.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::runtime::hex;

/// Marks a directory whose compilation finished.
const STAMP: &str = ".complete";

/// Compiles, in a process pool, every module of the packages harness processes import and of
/// the harness. The packages are found without importing them.
const COMPILE: &str = r#"
import compileall, importlib.util, sys
dirs = [sys.argv[1]]
for name in ("torch", "triton", "numpy"):
    spec = importlib.util.find_spec(name)
    if spec is not None and spec.submodule_search_locations:
        dirs.extend(spec.submodule_search_locations)
ok = all(compileall.compile_dir(d, quiet=2, workers=0) for d in dirs)
sys.exit(0 if ok else 1)
"#;

/// The bytecode directory for `python` and `harness_root`, compiled now if it is not there yet;
/// `None` if it cannot be made.
pub(crate) fn prepare(cache: &Path, python: &Path, harness_root: &Path) -> Option<PathBuf> {
    let dir = cache.join(format!("bytecode-{}", key(python, harness_root)));
    if dir.join(STAMP).exists() {
        return Some(dir);
    }
    match compile_once(cache, &dir, python, harness_root) {
        Ok(()) => Some(dir),
        Err(error) => {
            tracing::warn!(
                "no compiled bytecode for the harness processes ({error}); each will compile \
                 torch from source where its install ships none"
            );
            None
        }
    }
}

/// Which interpreter (by its resolved path) and which harness the bytecode is for.
fn key(python: &Path, harness_root: &Path) -> String {
    let python = std::fs::canonicalize(python).unwrap_or_else(|_| python.to_path_buf());
    let mut hasher = Sha256::new();
    hasher.update(python.as_os_str().as_encoded_bytes());
    hasher.update([0]);
    hasher.update(harness_root.as_os_str().as_encoded_bytes());
    hex(&hasher.finalize()[..8])
}

/// Compiles into a staging directory renamed into place, under a lock so that judges starting
/// together compile once and the others wait for it.
fn compile_once(
    cache: &Path,
    dir: &Path,
    python: &Path,
    harness_root: &Path,
) -> std::io::Result<()> {
    std::fs::create_dir_all(cache)?;
    let lock = File::create(dir.with_extension("lock"))?;
    lock.lock()?;
    if dir.join(STAMP).exists() {
        return Ok(());
    }
    let staging = tempfile::Builder::new()
        .prefix(".bytecode-")
        .tempdir_in(cache)?;
    let status = Command::new(python)
        .args(["-c", COMPILE])
        .arg(harness_root)
        .env_clear()
        .env("PYTHONPYCACHEPREFIX", staging.path())
        .envs(std::env::var_os("PATH").map(|p| ("PATH", p)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !status.success() {
        return Err(std::io::Error::other(format!(
            "{} could not compile the packages ({status})",
            python.display()
        )));
    }
    File::create(staging.path().join(STAMP))?;
    let staged = staging.keep();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&staged, dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_depends_on_the_interpreter_and_the_harness() {
        let a = key(Path::new("/nonexistent/python"), Path::new("/h1"));
        assert_eq!(a, key(Path::new("/nonexistent/python"), Path::new("/h1")));
        assert_ne!(a, key(Path::new("/nonexistent/python"), Path::new("/h2")));
        assert_ne!(a, key(Path::new("/nonexistent/python3"), Path::new("/h1")));
    }

    #[test]
    fn an_interpreter_that_cannot_compile_leaves_no_directory() {
        let cache = tempfile::tempdir().expect("temp dir");
        let got = prepare(cache.path(), Path::new("/bin/false"), Path::new("/h"));
        assert_eq!(got, None);
        let left: Vec<_> = std::fs::read_dir(cache.path())
            .expect("read cache")
            .filter_map(Result::ok)
            .filter(|e| e.path().is_dir())
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}
