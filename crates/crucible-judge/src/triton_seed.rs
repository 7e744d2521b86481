//! Triton's CUDA utilities, built once by a trusted process and copied into each candidate
//! process's own Triton cache.
//!
//! Every candidate process on a GPU builds Triton's driver (`cuda_utils`: gcc of `driver.c` at
//! -O3) before its hello, into its private cache, which starts empty: the same module, compiled
//! again for every evaluation. Triton looks it up by the hash of its source and platform, so a
//! cache that already holds it skips the compiler. The seed is built by a process that runs no
//! candidate code, and each candidate gets a copy (never a link): what a candidate does to its
//! copy stays in its own scratch directory. A seed that is stale (another Triton) is only a miss.
//!
//! The same process computes Triton's key (`triton_key()`: a SHA-256 over Triton's sources and
//! its 415 MB library, which every process computes before its first compile, once per thread
//! that compiles at the same time) and candidates are given it (`CRUCIBLE_TRITON_KEY`); it only
//! names entries of the candidate's own cache.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::device::Device;
use crate::runtime::{Runtime, harness_env, triton_cache_dir};

/// The build: Triton's CUDA utilities, without touching the device, and Triton's key (in the
/// file [`KEY_FILE`] of the working directory).
fn build_script() -> String {
    format!(
        "from triton.backends.nvidia.driver import CudaUtils; CudaUtils(); {}",
        key_script()
    )
}

/// Writes Triton's key into [`KEY_FILE`]; needs no device.
fn key_script() -> String {
    format!(
        "from triton.runtime.cache import triton_key; open({KEY_FILE:?}, 'w').write(triton_key())"
    )
}
const KEY_FILE: &str = "triton-key";
/// Triton 3.6's key is about 1.9 kB (its version and about thirty hex digests); anything far
/// longer, or not printable, is not one.
const KEY_MAX_BYTES: usize = 64 << 10;
/// A build that takes longer is abandoned (candidates then build their own, as before).
const BUILD_WITHIN: Duration = Duration::from_secs(180);

/// A Triton cache directory that holds the CUDA utilities and nothing else.
#[derive(Debug)]
pub struct TritonSeed {
    cache: PathBuf,
    key: Option<String>,
    // Dropped last: holds `cache`.
    _dir: tempfile::TempDir,
}

impl TritonSeed {
    /// Builds the seed for a GPU `device`; `None` (logged) on the CPU or when the build fails.
    pub fn build(runtime: &Runtime, device: Device) -> Option<TritonSeed> {
        if !device.is_gpu() {
            return None;
        }
        match Self::try_build(runtime, device) {
            Ok(seed) => Some(seed),
            Err(error) => {
                tracing::warn!(
                    "candidate processes build Triton's CUDA utilities themselves: {error}"
                );
                None
            }
        }
    }

    fn try_build(runtime: &Runtime, device: Device) -> Result<TritonSeed, String> {
        let dir = tempfile::Builder::new()
            .prefix("crucible-triton-seed-")
            .tempdir()
            .map_err(|e| format!("a directory for it: {e}"))?;
        let env = harness_env(runtime, device, dir.path()).map_err(|e| e.to_string())?;
        let cache = triton_cache_dir(dir.path());
        let mut child = Command::new(&runtime.python)
            .args(["-c", &build_script()])
            .env_clear()
            .envs(env)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", runtime.python.display()))?;
        let deadline = Instant::now() + BUILD_WITHIN;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("the build took over {BUILD_WITHIN:?}"));
                }
                Err(e) => return Err(format!("waiting for the build: {e}")),
            }
        };
        if !status.success() {
            let mut log = String::new();
            if let Some(mut stderr) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut stderr, &mut log);
            }
            let tail = &log[log.len().saturating_sub(1500)..];
            return Err(format!("the build failed ({status}): {}", tail.trim()));
        }
        if std::fs::read_dir(&cache).map_or(true, |mut entries| entries.next().is_none()) {
            return Err("the build left nothing in its cache".into());
        }
        let key = read_key(&dir.path().join(KEY_FILE));
        if let Err(error) = &key {
            tracing::warn!("candidate processes compute Triton's key themselves: {error}");
        }
        Ok(TritonSeed {
            cache,
            key: key.ok(),
            _dir: dir,
        })
    }

    /// Triton's key as the trusted build computed it, where it could.
    pub(crate) fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// Copies the seed into `cache` (a candidate's Triton cache directory, created if needed).
    pub(crate) fn plant(&self, cache: &Path) -> std::io::Result<()> {
        copy_tree(&self.cache, cache)
    }
}

/// The key the build wrote: one line of printable ASCII.
fn read_key(path: &Path) -> Result<String, String> {
    let key =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    if key.is_empty() || key.len() > KEY_MAX_BYTES || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{} holds no key ({} bytes, or not printable)",
            path.display(),
            key.len()
        ));
    }
    Ok(key)
}

/// Copies the directory tree `from` into `to` (regular files and directories only).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_writes_the_key_where_it_is_read() {
        let runtime = match Runtime::discover() {
            Ok(runtime) => runtime,
            Err(error) => {
                eprintln!("SKIPPED: no judge Python runtime ({error}); set CRUCIBLE_PYTHON");
                return;
            }
        };
        assert!(build_script().ends_with(&key_script()));
        let dir = tempfile::tempdir().expect("dir");
        let status = Command::new(&runtime.python)
            .args(["-c", &key_script()])
            .current_dir(dir.path())
            .status()
            .expect("run the judge's Python");
        assert!(status.success());
        let key = read_key(&dir.path().join(KEY_FILE)).expect("a key");
        // Triton's version, then the digests of its sources and its library.
        assert!(
            key.starts_with(|c: char| c.is_ascii_digit()) && key.len() > 1000,
            "{key}"
        );
    }

    #[test]
    fn a_key_is_one_printable_line() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join(KEY_FILE);
        std::fs::write(&path, "3.6.00355c3e-c8b82f70").expect("write");
        assert_eq!(read_key(&path).as_deref(), Ok("3.6.00355c3e-c8b82f70"));
        for bad in ["", "3.6.0 abc", "3.6.0\nabc"] {
            std::fs::write(&path, bad).expect("write");
            assert!(read_key(&path).is_err(), "{bad:?}");
        }
        std::fs::write(&path, "a".repeat(KEY_MAX_BYTES + 1)).expect("write");
        assert!(read_key(&path).is_err());
        assert!(read_key(&dir.path().join("absent")).is_err());
    }

    #[test]
    fn a_tree_is_copied_file_by_file() {
        let from = tempfile::tempdir().expect("dir");
        std::fs::create_dir_all(from.path().join("key")).expect("mkdir");
        std::fs::write(from.path().join("key/cuda_utils.so"), b"module").expect("write");
        let to = tempfile::tempdir().expect("dir");
        let cache = to.path().join("triton");
        copy_tree(from.path(), &cache).expect("copy");
        assert_eq!(
            std::fs::read(cache.join("key/cuda_utils.so")).expect("copied"),
            b"module"
        );
        // A copy, not a link: writing it leaves the seed as it was.
        std::fs::write(cache.join("key/cuda_utils.so"), b"changed").expect("write");
        assert_eq!(
            std::fs::read(from.path().join("key/cuda_utils.so")).expect("seed"),
            b"module"
        );
    }
}
