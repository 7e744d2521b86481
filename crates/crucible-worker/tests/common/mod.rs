//! What the worker's integration tests share: the judge's fixtures and runtime.

use std::path::Path;
use std::time::{Duration, Instant};

use crucible_judge::{Device, EvalConfig, Runtime, StageLimits};
use crucible_worker::engine::Probe;
use crucible_worker::{Engine, EngineOptions, Tuning};

/// A file of `crates/crucible-judge/tests/fixtures`.
pub fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crucible-judge/tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The judge's runtime, or `None` (with a message) where this machine has none.
pub fn runtime() -> Option<Runtime> {
    match Runtime::discover() {
        Ok(runtime) => Some(runtime),
        Err(error) => {
            eprintln!("SKIPPED: no judge Python runtime ({error}); set CRUCIBLE_PYTHON");
            None
        }
    }
}

/// Polls `probe` every 50 ms until it gives a value; panics after `within`.
pub fn wait_until<T>(what: &str, within: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + within;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// This process's descendants running `crucible_harness`: every pool's referees, candidate
/// harnesses and zygote (a sandboxed candidate runs under an init of its own, which
/// descends from this process too). A test binary's tests run at once, so only a binary with one
/// test that starts processes can count them.
#[allow(dead_code)] // not every test binary counts processes
pub fn harness_descendants() -> Vec<u32> {
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat[stat.rfind(')')? + 2..].split(' ').nth(1)?.parse().ok()
    };
    let me = std::process::id();
    let descends = |mut pid: u32| {
        while let Some(parent) = parent_of(pid) {
            if parent == me {
                return true;
            }
            if parent <= 1 {
                return false;
            }
            pid = parent;
        }
        false
    };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains("crucible_harness") && descends(*pid)
        })
        .collect()
}

/// A CPU engine that judges `concurrency` evaluations at once, every stage limited to 60 s,
/// `configure` applied to its judge configuration, watched by `probe`; returned once its warm
/// pool holds `pool_depth` pairs that said hello.
#[allow(dead_code)] // not every test binary starts an engine with a pool
pub fn cpu_engine_with_ready_pool(
    runtime: Runtime,
    concurrency: usize,
    pool_depth: usize,
    probe: Probe,
    configure: impl FnOnce(&mut EvalConfig),
) -> Engine {
    let mut base = EvalConfig::new(Device::Cpu);
    base.limits = StageLimits::uniform(Device::Cpu, Duration::from_secs(60));
    configure(&mut base);
    let tuning = Tuning {
        base: Some(base),
        probe: Some(probe),
        pool_depth: Some(pool_depth),
        ..Tuning::default()
    };
    let options = EngineOptions {
        concurrency,
        ..EngineOptions::default()
    };
    let engine = Engine::with_tuning(runtime, Device::Cpu, options, tuning).expect("an engine");
    wait_until("the pool's pairs ready", Duration::from_secs(180), || {
        (engine.warm() >= pool_depth).then_some(())
    });
    engine
}
