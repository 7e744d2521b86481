//! Where the Python side lives: the interpreter and the harness files.
//!
//! The harness is compiled into the binary and written out once per content hash, so a
//! `crucible` binary copied to another machine carries the exact Python it was tested with.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::device::{Device, DeviceError};

/// The harness sources, embedded at build time.
const HARNESS_FILES: &[(&str, &str)] = &[
    (
        "__init__.py",
        include_str!("../../../python/crucible_harness/__init__.py"),
    ),
    (
        "common.py",
        include_str!("../../../python/crucible_harness/common.py"),
    ),
    (
        "referee.py",
        include_str!("../../../python/crucible_harness/referee.py"),
    ),
    (
        "precision.py",
        include_str!("../../../python/crucible_harness/precision.py"),
    ),
    (
        "fused_stats.py",
        include_str!("../../../python/crucible_harness/fused_stats.py"),
    ),
    (
        "candidate.py",
        include_str!("../../../python/crucible_harness/candidate.py"),
    ),
    (
        "audit.py",
        include_str!("../../../python/crucible_harness/audit.py"),
    ),
    (
        "zygote.py",
        include_str!("../../../python/crucible_harness/zygote.py"),
    ),
    (
        "triton_seed.py",
        include_str!("../../../python/crucible_harness/triton_seed.py"),
    ),
    (
        "protocol.py",
        include_str!("../../../python/crucible_harness/protocol.py"),
    ),
    (
        "protocol.json",
        include_str!("../../../python/crucible_harness/protocol.json"),
    ),
];

/// The pinned Python requirements; the bootstrap venv is keyed by their hash.
pub const REQUIREMENTS_LOCK: &str = include_str!("../../../python/requirements.lock");

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(
        "no Python runtime for the judge: set CRUCIBLE_PYTHON to an interpreter with torch and \
         triton, or run `scripts/bootstrap` to create {0}"
    )]
    NoPython(PathBuf),
    #[error("CRUCIBLE_PYTHON points at {0}, which does not exist")]
    BadPythonOverride(PathBuf),
    #[error("cannot write the harness to {path}: {source}")]
    Harness {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The Python interpreter and harness location every evaluation uses.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub python: PathBuf,
    /// Directory to put on PYTHONPATH (holds the `crucible_harness` package).
    pub harness_root: PathBuf,
    /// Compiled bytecode of torch, triton, numpy and the harness (`PYTHONPYCACHEPREFIX`), which
    /// harness processes read and never write; `None` when it could not be made.
    pub bytecode: Option<PathBuf>,
}

/// `$CRUCIBLE_CACHE`, else `$XDG_CACHE_HOME/crucible`, else `~/.cache/crucible`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CRUCIBLE_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("crucible");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/tmp".into());
    PathBuf::from(home).join(".cache").join("crucible")
}

fn short_hash(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
    }
    hex(&hasher.finalize()[..8])
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The venv directory `scripts/bootstrap` creates for the current lock file.
pub fn default_venv() -> PathBuf {
    cache_dir().join(format!("venv-{}", short_hash(&[REQUIREMENTS_LOCK])))
}

impl Runtime {
    /// Finds the interpreter (`CRUCIBLE_PYTHON`, else the bootstrap venv) and writes the harness.
    pub fn discover() -> Result<Runtime, RuntimeError> {
        let python = match std::env::var_os("CRUCIBLE_PYTHON") {
            Some(p) => {
                let p = PathBuf::from(p);
                // A bare name ("python3") is looked up on PATH at spawn time.
                if p.components().count() > 1 && !p.exists() {
                    return Err(RuntimeError::BadPythonOverride(p));
                }
                p
            }
            None => {
                let venv = default_venv();
                let python = venv.join("bin").join("python");
                if !python.exists() {
                    return Err(RuntimeError::NoPython(venv));
                }
                python
            }
        };
        Runtime::with_python(python)
    }

    /// Uses `python` (which must import torch and triton) and writes the harness; for embedders
    /// that pick the interpreter themselves, such as the Python package.
    pub fn with_python(python: PathBuf) -> Result<Runtime, RuntimeError> {
        let cache = cache_dir();
        let harness_root = write_harness(&cache)?;
        let bytecode = crate::bytecode::prepare(&cache, &python, &harness_root);
        Ok(Runtime {
            python,
            harness_root,
            bytecode,
        })
    }
}

fn write_harness(cache: &Path) -> Result<PathBuf, RuntimeError> {
    let contents: Vec<&str> = HARNESS_FILES.iter().flat_map(|(n, c)| [*n, *c]).collect();
    let root = cache.join(format!("harness-{}", short_hash(&contents)));
    let package = root.join("crucible_harness");
    if package.join("candidate.py").exists() {
        return Ok(root);
    }
    let err = |source| RuntimeError::Harness {
        path: package.clone(),
        source,
    };
    // Written to a private directory first, then renamed, so concurrent judges never see a
    // half-written harness.
    std::fs::create_dir_all(cache).map_err(err)?;
    let staging = tempfile::Builder::new()
        .prefix(".harness-")
        .tempdir_in(cache)
        .map_err(err)?;
    let staged_pkg = staging.path().join("crucible_harness");
    std::fs::create_dir_all(&staged_pkg).map_err(err)?;
    for (name, text) in HARNESS_FILES {
        std::fs::write(staged_pkg.join(name), text).map_err(err)?;
    }
    let staged = staging.keep();
    if std::fs::rename(&staged, &root).is_err() {
        // Another judge won the race; its copy is identical.
        let _ = std::fs::remove_dir_all(&staged);
    }
    Ok(root)
}

/// The Triton cache of a harness process whose home (scratch directory) is `home`.
pub(crate) fn triton_cache_dir(home: &Path) -> PathBuf {
    home.join("triton")
}

/// The whole environment of a harness process (referee, candidate or audit), built from
/// nothing: the caller's own environment never leaks into it.
///
/// On a GPU the process sees only the requested GPU (`CUDA_VISIBLE_DEVICES` holds that one
/// entry) and calls it `cuda:0`. Triton launches on the *current* device, so a process that can
/// see several GPUs runs a candidate's kernels on `cuda:0` whatever tensor they were given;
/// with one visible GPU there is nowhere else to launch, and a candidate cannot reach another
/// tenant's GPU either.
pub(crate) fn harness_env(
    runtime: &Runtime,
    device: Device,
    home: &Path,
) -> Result<Vec<(String, String)>, DeviceError> {
    let gpu = device.visible_entry(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref())?;
    let mut env = vec![
        (
            "PYTHONPATH".to_string(),
            runtime.harness_root.display().to_string(),
        ),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        // The working directory (a scratch directory) is not on sys.path: nothing planted there
        // is ever imported.
        ("PYTHONSAFEPATH".into(), "1".into()),
        ("PYTHONUNBUFFERED".into(), "1".into()),
        ("HOME".into(), home.display().to_string()),
        (
            "TRITON_CACHE_DIR".into(),
            triton_cache_dir(home).display().to_string(),
        ),
        ("TMPDIR".into(), home.display().to_string()),
        ("CRUCIBLE_DEVICE".into(), device.harness_name().to_string()),
    ];
    // Imports read bytecode compiled once (`crate::bytecode`), never written by a harness
    // process: without it, an interpreter whose packages ship no .pyc files (the H200 test
    // machine's) compiles torch from source at every start, 2.5 CPU-seconds of its 6.4.
    if let Some(bytecode) = &runtime.bytecode {
        env.push(("PYTHONPYCACHEPREFIX".into(), bytecode.display().to_string()));
    }
    // Only what the runtimes need to find their libraries and devices; tokens, queue URLs
    // and the rest of the judge's environment never reach the harness.
    for key in [
        "PATH",
        "LD_LIBRARY_PATH",
        "CUDA_HOME",
        "CUDA_DEVICE_ORDER",
        "LANG",
        "OMP_NUM_THREADS",
    ] {
        if let Ok(value) = std::env::var(key) {
            env.push((key.to_string(), value));
        }
    }
    match gpu {
        Some(gpu) => env.push(("CUDA_VISIBLE_DEVICES".into(), gpu)),
        None => {
            env.push(("TRITON_INTERPRET".into(), "1".into()));
            env.push(("CUDA_VISIBLE_DEVICES".into(), String::new()));
        }
    }
    Ok(env)
}

/// Where a referee appends a line per request on the memory it and the device hold, when the
/// judge's own environment names a file (a diagnostic: `scripts/bench-gpu-service` sets it).
pub const REFEREE_MEMORY_TRACE_ENV: &str = "CRUCIBLE_REFEREE_MEMORY_TRACE";

/// [`harness_env`] for a referee: it also gets [`REFEREE_MEMORY_TRACE_ENV`] where the judge has
/// it (a candidate never does).
pub(crate) fn referee_env(
    runtime: &Runtime,
    device: Device,
    home: &Path,
) -> Result<Vec<(String, String)>, DeviceError> {
    let mut env = harness_env(runtime, device, home)?;
    if let Ok(path) = std::env::var(REFEREE_MEMORY_TRACE_ENV)
        && !path.is_empty()
    {
        env.push((REFEREE_MEMORY_TRACE_ENV.to_string(), path));
    }
    Ok(env)
}

/// What a long-lived caller needs to know about the device and the Python side before any
/// evaluation: the versions a result depends on, and the GPU's identity (for a lock shared by
/// every process that uses that GPU).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct DeviceFacts {
    pub torch: String,
    pub triton: Option<String>,
    pub cuda: Option<String>,
    pub python: String,
    /// The GPU model (`None` on the CPU).
    pub device_name: Option<String>,
    pub driver: Option<String>,
    /// The GPU's UUID, the same whichever process or `CUDA_VISIBLE_DEVICES` numbering asks.
    pub uuid: Option<String>,
    /// `domain:bus:device` of the GPU.
    pub pci_bus_id: Option<String>,
    /// The GPU's memory in bytes, as torch reports it (`None` on the CPU).
    pub memory_bytes: Option<u64>,
}

/// Asks a harness interpreter, set up exactly as the referee's is, about `device`.
pub fn device_facts(
    runtime: &Runtime,
    device: Device,
) -> Result<DeviceFacts, crate::error::InfraError> {
    use crate::error::InfraError;
    const PROBE: &str = r#"
import json, os, torch
from crucible_harness import common
device = os.environ.get("CRUCIBLE_DEVICE", "cpu")
info = common.env_info(torch, device)
facts = {k: info[k] for k in ("torch", "triton", "cuda", "python", "device_name", "driver")}
facts["uuid"] = facts["pci_bus_id"] = facts["memory_bytes"] = None
if device.startswith("cuda"):
    props = torch.cuda.get_device_properties(0)
    facts["memory_bytes"] = props.total_memory
    # Whatever this torch exposes; a missing identity only means a lock keyed by the index.
    try:
        facts["uuid"] = str(props.uuid) or None
    except Exception:
        pass
    try:
        ids = (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
        facts["pci_bus_id"] = "%04x:%02x:%02x" % ids
    except Exception:
        pass
print(json.dumps(facts))
"#;
    let home = tempfile::tempdir().map_err(InfraError::io("creating a scratch directory"))?;
    let env = harness_env(runtime, device, home.path())?;
    let output = std::process::Command::new(&runtime.python)
        .args(["-c", PROBE])
        .env_clear()
        .envs(env)
        .current_dir(home.path())
        .output()
        .map_err(InfraError::io("running the device probe"))?;
    let cannot = |reason: String| InfraError::CannotStart {
        who: "device probe",
        reason,
    };
    if !output.status.success() {
        return Err(cannot(String::from_utf8_lossy(&output.stderr).into_owned()));
    }
    let line = String::from_utf8_lossy(&output.stdout);
    let last = line.lines().last().unwrap_or_default();
    serde_json::from_str(last).map_err(|e| cannot(format!("unreadable probe output ({e}): {line}")))
}
