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
//!
//! And Triton's kernel launchers: at a compiled kernel's first launch Triton generates a C
//! launcher from the kernel's argument types and builds it with gcc (0.2-0.9 s a candidate on an
//! H200), keyed by its source, which depends on nothing but those types. A candidate's process
//! says which types it built one for (the `launcher` field of its `compiling` note); the judge
//! keeps each well-formed list ([`LauncherSignatures`]), and the pool builds the next seed with
//! them: the source is Triton's own, generated in the trusted process from the type names (which
//! only ever select from Triton's tables, never reach the C text), so a candidate can only ask
//! for a launcher Triton would have built, and never hands another candidate anything it wrote.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::device::Device;
use crate::runtime::{Runtime, harness_env, triton_cache_dir};

/// The build (`crucible_harness.triton_seed`): Triton's CUDA utilities, without touching the
/// device, Triton's key (in [`KEY_FILE`]) and the launchers listed in [`LAUNCHERS_FILE`].
const BUILD_MODULE: &str = "crucible_harness.triton_seed";
const KEY_FILE: &str = "triton-key";
/// The launchers' argument types for the build, one JSON list of lists.
const LAUNCHERS_FILE: &str = "launchers.json";
/// What the build reports (JSON): launchers built and failed.
const REPORT_FILE: &str = "report.json";
/// The build's stderr.
const LOG_FILE: &str = "build.log";
/// Triton 3.6's key is about 1.9 kB (its version and about thirty hex digests); anything far
/// longer, or not printable, is not one.
const KEY_MAX_BYTES: usize = 64 << 10;
/// A build that takes longer is abandoned (candidates then build their own, as before).
const BUILD_WITHIN: Duration = Duration::from_secs(180);

/// A Triton cache directory that holds the CUDA utilities and the launchers built for it, and
/// Triton's key.
#[derive(Debug)]
pub struct TritonSeed {
    cache: PathBuf,
    key: Option<String>,
    /// The launchers' argument types this seed was built with (some may have failed to build).
    launchers: BTreeSet<Vec<String>>,
    // Dropped last: holds `cache`.
    _dir: tempfile::TempDir,
}

/// How one build went, from [`REPORT_FILE`].
#[derive(Debug, Default, serde::Deserialize)]
struct BuildReport {
    launchers_built: usize,
    launchers_failed: usize,
}

impl TritonSeed {
    /// Builds the seed for a GPU `device`; `None` (logged) on the CPU or when the build fails.
    pub fn build(runtime: &Runtime, device: Device) -> Option<TritonSeed> {
        Self::rebuild(runtime, device, None, &BTreeSet::new())
    }

    /// Builds a seed that also holds the launchers for `launchers`, starting from a copy of
    /// `previous` (whose utilities and launchers Triton then finds built); `None` (logged) on
    /// the CPU or when the build fails.
    pub fn rebuild(
        runtime: &Runtime,
        device: Device,
        previous: Option<&TritonSeed>,
        launchers: &BTreeSet<Vec<String>>,
    ) -> Option<TritonSeed> {
        if !device.is_gpu() {
            return None;
        }
        match Self::try_build(runtime, device, previous, launchers) {
            Ok(seed) => Some(seed),
            Err(error) => {
                tracing::warn!("cannot build Triton's seed for candidate processes: {error}");
                None
            }
        }
    }

    fn try_build(
        runtime: &Runtime,
        device: Device,
        previous: Option<&TritonSeed>,
        launchers: &BTreeSet<Vec<String>>,
    ) -> Result<TritonSeed, String> {
        let dir = tempfile::Builder::new()
            .prefix("crucible-triton-seed-")
            .tempdir()
            .map_err(|e| format!("a directory for it: {e}"))?;
        let cache = triton_cache_dir(dir.path());
        if let Some(previous) = previous {
            previous
                .plant(&cache)
                .map_err(|e| format!("copying the previous seed: {e}"))?;
        }
        let listed = serde_json::to_vec(launchers).map_err(|e| e.to_string())?;
        std::fs::write(dir.path().join(LAUNCHERS_FILE), listed)
            .map_err(|e| format!("writing {LAUNCHERS_FILE}: {e}"))?;
        run_build(runtime, device, dir.path())?;
        if std::fs::read_dir(&cache).map_or(true, |mut entries| entries.next().is_none()) {
            return Err("the build left nothing in its cache".into());
        }
        let key = read_key(&dir.path().join(KEY_FILE));
        if let Err(error) = &key {
            tracing::warn!("candidate processes compute Triton's key themselves: {error}");
        }
        let report = std::fs::read(dir.path().join(REPORT_FILE))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<BuildReport>(&bytes).ok())
            .unwrap_or_default();
        tracing::info!(
            "Triton's seed for candidate processes: {} launchers built, {} failed, of {} listed",
            report.launchers_built,
            report.launchers_failed,
            launchers.len()
        );
        Ok(TritonSeed {
            cache,
            key: key.ok(),
            launchers: launchers.clone(),
            _dir: dir,
        })
    }

    /// Triton's key as the trusted build computed it, where it could.
    pub(crate) fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The launchers' argument types this seed was built with.
    pub fn launchers(&self) -> &BTreeSet<Vec<String>> {
        &self.launchers
    }

    /// Copies the seed into `cache` (a candidate's Triton cache directory, created if needed).
    pub(crate) fn plant(&self, cache: &Path) -> std::io::Result<()> {
        copy_tree(&self.cache, cache)
    }
}

/// Runs the build in `dir` (its working directory) to its end, within [`BUILD_WITHIN`].
fn run_build(runtime: &Runtime, device: Device, dir: &Path) -> Result<(), String> {
    let env = harness_env(runtime, device, dir).map_err(|e| e.to_string())?;
    let log_path = dir.join(LOG_FILE);
    let log = std::fs::File::create(&log_path).map_err(|e| format!("creating its log: {e}"))?;
    let mut child = Command::new(&runtime.python)
        .args(["-m", BUILD_MODULE])
        .env_clear()
        .envs(env)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", runtime.python.display()))?;
    let deadline = Instant::now() + BUILD_WITHIN;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("the build took over {BUILD_WITHIN:?}"));
            }
            Err(e) => return Err(format!("waiting for the build: {e}")),
        }
    };
    if !status.success() {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let tail = &log[log.floor_char_boundary(log.len().saturating_sub(1500))..];
        return Err(format!("the build failed ({status}): {}", tail.trim()));
    }
    Ok(())
}

/// The argument types of the launchers candidates' processes built, as their `compiling` notes
/// named them, shared by an engine's evaluations and its pool (which builds them into the next
/// seed). Only well-formed lists are kept, at most [`MAX_LAUNCHERS`] of them.
#[derive(Debug, Default)]
pub struct LauncherSignatures {
    state: Mutex<LauncherState>,
    learned: Condvar,
}

#[derive(Debug, Default)]
struct LauncherState {
    known: BTreeSet<Vec<String>>,
    /// Known lists no seed was built with yet.
    new: bool,
}

/// Launchers kept per engine: a candidate's process could otherwise name new lists forever.
pub const MAX_LAUNCHERS: usize = 256;
/// Arguments of one kernel, and characters of one type name (`*fp8e4b15`, `constexpr`).
const MAX_ARGUMENTS: usize = 128;
const MAX_TYPE_NAME: usize = 24;

impl LauncherSignatures {
    pub fn new() -> LauncherSignatures {
        LauncherSignatures::default()
    }

    /// Keeps the `launcher` field of a candidate's `compiling` note, if it is a well-formed list
    /// of type names (untrusted: anything else is ignored, never an error).
    pub fn learn(&self, note: &Value) {
        let Some(types) = note.get("launcher").and_then(launcher_types) else {
            return;
        };
        let mut state = self.lock();
        if state.known.len() < MAX_LAUNCHERS && state.known.insert(types) {
            state.new = true;
            self.learned.notify_all();
        }
    }

    /// Every known list, once there are lists no seed was built with (waiting up to `wait`).
    pub fn wait_for_new(&self, wait: Duration) -> Option<BTreeSet<Vec<String>>> {
        let state = self.lock();
        let (mut state, _) = self
            .learned
            .wait_timeout_while(state, wait, |state| !state.new)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !state.new {
            return None;
        }
        state.new = false;
        Some(state.known.clone())
    }

    /// How many lists are known.
    pub fn len(&self) -> usize {
        self.lock().known.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LauncherState> {
        // A set of lists stays whole whatever panicked while holding it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A launcher's argument types from a note: a list of Triton type names (`*fp32`, `i32`,
/// `constexpr`, ...): ASCII letters and digits, a pointer's leading `*`.
fn launcher_types(value: &Value) -> Option<Vec<String>> {
    let items = value.as_array()?;
    if items.is_empty() || items.len() > MAX_ARGUMENTS {
        return None;
    }
    items
        .iter()
        .map(|item| {
            let name = item.as_str()?;
            let bare = name.strip_prefix('*').unwrap_or(name);
            let well_formed = !bare.is_empty()
                && name.len() <= MAX_TYPE_NAME
                && bare.bytes().all(|b| b.is_ascii_alphanumeric());
            well_formed.then(|| name.to_string())
        })
        .collect()
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
    fn the_build_writes_the_key_and_tries_every_launcher() {
        let runtime = match Runtime::discover() {
            Ok(runtime) => runtime,
            Err(error) => {
                eprintln!("SKIPPED: no judge Python runtime ({error}); set CRUCIBLE_PYTHON");
                return;
            }
        };
        let dir = tempfile::tempdir().expect("dir");
        let listed = serde_json::json!([["*fp32", "*fp32", "i32", "constexpr"], ["nonsense"]]);
        std::fs::write(dir.path().join(LAUNCHERS_FILE), listed.to_string()).expect("write");
        // Without a GPU (CI) Triton's CUDA utilities cannot link, and the build says so; the key
        // and the launchers come first either way.
        let built = run_build(&runtime, Device::Cpu, dir.path());
        let key = read_key(&dir.path().join(KEY_FILE)).expect("a key");
        // Triton's version, then the digests of its sources and its library.
        assert!(
            key.starts_with(|c: char| c.is_ascii_digit()) && key.len() > 1000,
            "{key}"
        );
        let report: BuildReport =
            serde_json::from_slice(&std::fs::read(dir.path().join(REPORT_FILE)).expect("a report"))
                .expect("report JSON");
        assert_eq!(
            report.launchers_built + report.launchers_failed,
            2,
            "{built:?}"
        );
        assert!(
            report.launchers_failed >= 1,
            "an unknown type builds nothing"
        );
        let log = std::fs::read_to_string(dir.path().join(LOG_FILE)).expect("log");
        assert!(log.contains("launcher for ['nonsense']"), "{log}");
    }

    #[test]
    fn only_well_formed_launcher_lists_are_learned() {
        let learned = LauncherSignatures::new();
        let note = |launcher: Value| serde_json::json!({"note": "compiling", "launcher": launcher});
        learned.learn(&note(serde_json::json!([
            "*fp32",
            "*bf16",
            "i32",
            "constexpr"
        ])));
        learned.learn(&note(serde_json::json!([
            "*fp32",
            "*bf16",
            "i32",
            "constexpr"
        ])));
        for bad in [
            serde_json::json!([]),
            serde_json::json!("*fp32"),
            serde_json::json!(["*fp32", 3]),
            serde_json::json!(["*fp32", ["i32"]]),
            serde_json::json!(["*"]),
            serde_json::json!(["i32); system(\"id\")"]),
            serde_json::json!(["**fp32"]),
            serde_json::json!(["x".repeat(MAX_TYPE_NAME + 1)]),
            serde_json::json!(vec!["i32"; MAX_ARGUMENTS + 1]),
        ] {
            learned.learn(&note(bad));
        }
        learned.learn(&serde_json::json!({"note": "compiling"}));
        assert_eq!(learned.len(), 1);
        let new = learned.wait_for_new(Duration::ZERO).expect("one new list");
        assert_eq!(
            new.into_iter().collect::<Vec<_>>(),
            vec![vec!["*fp32", "*bf16", "i32", "constexpr"]]
        );
        // Nothing new since: a seed was built with it.
        assert!(learned.wait_for_new(Duration::from_millis(10)).is_none());
        for i in 0..MAX_LAUNCHERS + 10 {
            learned.learn(&note(serde_json::json!(vec!["i32"; 1 + i % MAX_ARGUMENTS])));
            learned.learn(&note(serde_json::json!([format!("i{i}")])));
        }
        assert_eq!(learned.len(), MAX_LAUNCHERS);
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
