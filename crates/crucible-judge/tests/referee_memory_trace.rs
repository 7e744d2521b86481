//! The referee's memory trace: with `CRUCIBLE_REFEREE_MEMORY_TRACE` in the judge's environment,
//! each referee request appends a line on what the referee (and on a GPU, the device) holds;
//! candidates never get the variable. Real harness processes on the CPU. One test in this
//! binary, since it sets a process-wide variable.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crucible_judge::{
    Device, EvalConfig, REFEREE_MEMORY_TRACE_ENV, Runtime, StageLimits, evaluate,
};
use crucible_result::Verdict;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn each_referee_request_appends_what_the_referee_holds() {
    let runtime = match Runtime::discover() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("SKIPPED: no judge Python runtime ({error}); set CRUCIBLE_PYTHON");
            return;
        }
    };
    let dir = tempfile::tempdir().expect("a directory");
    let trace = dir.path().join("referee-memory.jsonl");
    // SAFETY: the only test of this binary; nothing else reads the environment meanwhile.
    unsafe { std::env::set_var(REFEREE_MEMORY_TRACE_ENV, &trace) };
    let mut cfg = EvalConfig::new(Device::Cpu);
    cfg.limits = StageLimits::uniform(Device::Cpu, Duration::from_secs(120));
    cfg.trials = 2;
    let (task, candidate) = (fixture("task_relu.py"), fixture("honest_relu.py"));
    let result = evaluate(
        &runtime,
        &task,
        &std::fs::read(&task).expect("the task"),
        &candidate,
        &std::fs::read(&candidate).expect("the candidate"),
        &cfg,
    );
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    let text = std::fs::read_to_string(&trace).expect("a trace");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    let requests: Vec<(String, String)> = lines
        .iter()
        .map(|line| {
            (
                line["op"].as_str().unwrap_or_default().to_string(),
                line["trial"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for expected in [
        ("init", ""),
        ("prepare", "trial_0"),
        ("check", "trial_0"),
        ("prepare", "trial_1"),
        ("check", "trial_1"),
    ] {
        assert!(
            requests.contains(&(expected.0.to_string(), expected.1.to_string())),
            "{expected:?} not in {requests:?}"
        );
    }
    // One process wrote them all: the referee, not the candidate.
    let pids: std::collections::BTreeSet<u64> = lines
        .iter()
        .filter_map(|line| line["pid"].as_u64())
        .collect();
    assert_eq!(pids.len(), 1, "{pids:?}");
    // Each line says how long its request took to handle, within the evaluation's own wall,
    // and when it was written (unix time, in order), to line up with other processes' samples.
    let mut written = 0.0;
    for line in &lines {
        let seconds = line["seconds"].as_f64().expect("seconds");
        assert!((0.0..result.wall_s.max(1.0)).contains(&seconds), "{line}");
        let at = line["at"].as_f64().expect("at");
        assert!(at >= written && at > 1.7e9, "{line}");
        written = at;
    }
    // A trial's tensors are held from its prepare to its check.
    let held = |op: &str, trial: &str| {
        lines
            .iter()
            .find(|line| line["op"] == op && line["trial"] == trial)
            .and_then(|line| line["live_tensor_bytes"].as_u64())
            .expect("a figure")
    };
    assert!(
        held("prepare", "trial_1") > held("check", "trial_1"),
        "{text}"
    );
}
