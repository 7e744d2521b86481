//! Compiled bytecode for the harness processes, made once per interpreter (and harness).
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

/// Compiles, in a process pool, the harness (`argv[1]`) and, unless `argv[2]` is `harness`,
/// every module of the packages harness processes import, found without importing them. With
/// `PYTHONPYCACHEPREFIX` set, Python reads bytecode only under the prefix, never from the
/// `__pycache__` directories an install ships, so the standard library is compiled here too,
/// and so are the packages torch imports later: the profiler's first start imports sympy and
/// mpmath (470 modules; measured on an H200, 2.5 of that start's 3.7 CPU-seconds were
/// `compile`, `scripts/probe/profiler_first_start.py`). torch, triton, numpy and the harness
/// must compile; the rest is best effort (a file that does not compile is compiled, or fails,
/// at its import as before).
const COMPILE: &str = r#"
import compileall, importlib.util, re, sys, sysconfig
def compile_package(name):
    spec = importlib.util.find_spec(name)
    if spec is None:
        return True
    if spec.submodule_search_locations:
        return all(compileall.compile_dir(d, quiet=2, workers=0) for d in spec.submodule_search_locations)
    if spec.origin and spec.origin.endswith(".py"):
        return compileall.compile_file(spec.origin, quiet=2)
    return True
ok = compileall.compile_dir(sys.argv[1], quiet=2, workers=0)
if sys.argv[2] != "harness":
    ok = all([compile_package(name) for name in ("torch", "triton", "numpy")]) and ok
    skip = re.compile(r"/(test|tests|idlelib|tkinter|turtledemo|lib2to3|ensurepip|site-packages|dist-packages)/")
    compileall.compile_dir(sysconfig.get_paths()["stdlib"], quiet=2, workers=0, rx=skip)
    for name in ("sympy", "mpmath", "torchgen", "typing_extensions", "_distutils_hack"):
        compile_package(name)
sys.exit(0 if ok else 1)
"#;

/// Marks a directory whose packages were compiled, by what compiled them: a directory made
/// by an earlier `COMPILE` (fewer packages) is made again.
fn packages_stamp() -> String {
    format!(".complete-{}", hex(&Sha256::digest(COMPILE)[..8]))
}

/// The bytecode directory for `python`, with the packages and `harness_root` compiled now if
/// they are not there yet; `None` if it cannot be made. One directory per interpreter: a new
/// harness (another content hash, another directory) adds its few files to it.
pub(crate) fn prepare(cache: &Path, python: &Path, harness_root: &Path) -> Option<PathBuf> {
    let dir = cache.join(format!("bytecode-{}", key(python)));
    let harness_stamp = harness_stamp(harness_root);
    if dir.join(packages_stamp()).exists() && dir.join(&harness_stamp).exists() {
        return Some(dir);
    }
    match compile_once(cache, &dir, python, harness_root, &harness_stamp) {
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

/// Which interpreter the bytecode is for, by its resolved path.
fn key(python: &Path) -> String {
    let python = std::fs::canonicalize(python).unwrap_or_else(|_| python.to_path_buf());
    let mut hasher = Sha256::new();
    hasher.update(python.as_os_str().as_encoded_bytes());
    hex(&hasher.finalize()[..8])
}

/// Marks a harness (named by its content-hashed directory) as compiled.
fn harness_stamp(harness_root: &Path) -> String {
    let name = harness_root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!(".compiled-{name}")
}

/// Under a lock, so that judges starting together compile once and the others wait: the
/// packages into a staging directory renamed into place, or, where they are there already,
/// only the harness, in place (Python writes each file atomically).
fn compile_once(
    cache: &Path,
    dir: &Path,
    python: &Path,
    harness_root: &Path,
    harness_stamp: &str,
) -> std::io::Result<()> {
    std::fs::create_dir_all(cache)?;
    let lock = File::create(dir.with_extension("lock"))?;
    lock.lock()?;
    if dir.join(packages_stamp()).exists() {
        if !dir.join(harness_stamp).exists() {
            compile(python, harness_root, dir, "harness")?;
            File::create(dir.join(harness_stamp))?;
        }
        return Ok(());
    }
    let staging = tempfile::Builder::new()
        .prefix(".bytecode-")
        .tempdir_in(cache)?;
    compile(python, harness_root, staging.path(), "all")?;
    File::create(staging.path().join(harness_stamp))?;
    File::create(staging.path().join(packages_stamp()))?;
    let staged = staging.keep();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&staged, dir)
}

fn compile(python: &Path, harness_root: &Path, into: &Path, what: &str) -> std::io::Result<()> {
    let status = Command::new(python)
        .args(["-c", COMPILE])
        .arg(harness_root)
        .arg(what)
        .env_clear()
        .env("PYTHONPYCACHEPREFIX", into)
        .envs(std::env::var_os("PATH").map(|p| ("PATH", p)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{} could not compile {what} ({status})",
            python.display()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_directory_per_interpreter_one_stamp_per_harness() {
        let a = key(Path::new("/nonexistent/python"));
        assert_eq!(a, key(Path::new("/nonexistent/python")));
        assert_ne!(a, key(Path::new("/nonexistent/python3")));
        assert_eq!(
            harness_stamp(Path::new("/c/harness-ab12")),
            ".compiled-harness-ab12"
        );
    }

    /// A second harness adds its bytecode to the interpreter's directory; the packages are not
    /// compiled again. (The system `python3` has no torch: only the harnesses and the standard
    /// library are compiled.)
    #[test]
    fn a_new_harness_is_compiled_into_the_same_directory() {
        let cache = tempfile::tempdir().expect("temp dir");
        let python = Path::new("/usr/bin/python3");
        if !python.exists() {
            eprintln!("skipped: no /usr/bin/python3");
            return;
        }
        let harness = |name: &str| {
            let root = cache.path().join(name);
            std::fs::create_dir_all(root.join("pkg")).expect("mkdir");
            std::fs::write(root.join("pkg/module.py"), "X = 1\n").expect("write");
            root
        };
        let (first, second) = (harness("harness-aaaa"), harness("harness-bbbb"));
        let dir = prepare(cache.path(), python, &first).expect("bytecode for the first");
        assert_eq!(prepare(cache.path(), python, &second), Some(dir.clone()));
        for root in [&first, &second] {
            let relative = root
                .join("pkg")
                .strip_prefix("/")
                .expect("absolute")
                .to_path_buf();
            let compiled = std::fs::read_dir(dir.join(relative))
                .expect("the harness's bytecode")
                .filter_map(Result::ok)
                .any(|e| e.file_name().to_string_lossy().starts_with("module."));
            assert!(compiled, "no bytecode for {}", root.display());
        }
        // The standard library too: under a prefix Python ignores the install's own bytecode.
        let stdlib = Command::new(python)
            .args([
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['stdlib'])",
            ])
            .output()
            .expect("the standard library's path");
        let stdlib = String::from_utf8_lossy(&stdlib.stdout).trim().to_string();
        let json = dir.join(stdlib.trim_start_matches('/')).join("json");
        let compiled = std::fs::read_dir(&json)
            .unwrap_or_else(|e| panic!("no bytecode for {}: {e}", json.display()))
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with("decoder."));
        assert!(
            compiled,
            "no bytecode for json.decoder in {}",
            json.display()
        );
        let dirs = std::fs::read_dir(cache.path())
            .expect("cache")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("bytecode-"))
            .filter(|e| e.path().is_dir())
            .count();
        assert_eq!(dirs, 1);
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
