//! Triton's CUDA utilities, built once by a trusted process and copied into each candidate
//! process's own Triton cache.
//!
//! Every candidate process on a GPU builds Triton's driver (`cuda_utils`: gcc of `driver.c` at
//! -O3) before its hello, into its private cache, which starts empty: the same module, compiled
//! again for every evaluation. Triton looks it up by the hash of its source and platform, so a
//! cache that already holds it skips the compiler. The seed is built by a process that runs no
//! candidate code, and each candidate gets a copy (never a link): what a candidate does to its
//! copy stays in its own scratch directory. A seed that is stale (another Triton) is only a miss.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::device::Device;
use crate::runtime::{Runtime, harness_env, triton_cache_dir};

/// The build: Triton's CUDA utilities, without touching the device.
const BUILD: &str = "from triton.backends.nvidia.driver import CudaUtils; CudaUtils()";
/// A build that takes longer is abandoned (candidates then build their own, as before).
const BUILD_WITHIN: Duration = Duration::from_secs(180);

/// A Triton cache directory that holds the CUDA utilities and nothing else.
#[derive(Debug)]
pub struct TritonSeed {
    cache: PathBuf,
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
            .args(["-c", BUILD])
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
        Ok(TritonSeed { cache, _dir: dir })
    }

    /// Copies the seed into `cache` (a candidate's Triton cache directory, created if needed).
    pub(crate) fn plant(&self, cache: &Path) -> std::io::Result<()> {
        copy_tree(&self.cache, cache)
    }
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
