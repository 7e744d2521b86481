//! A batch that runs several evaluations at once on one device retries an out-of-memory
//! failure alone: the judge put the evaluations side by side, so memory it gave to the others is
//! never charged to the candidate. Real `crucible eval` processes on the CPU.

use std::path::{Path, PathBuf};
use std::process::Command;

use crucible_result::{EvalResult, FailureClass, Verdict};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crucible-judge/tests/fixtures")
        .join(name)
}

/// Judges `pairs` (result name, task fixture, candidate fixture), each task copied beside the
/// others into a fresh directory, `jobs` at once; the results in name order.
fn batch(jobs: &str, pairs: &[(&str, &str, &str)]) -> Vec<EvalResult> {
    let dir = tempfile::tempdir().expect("temp dir");
    let (tasks, candidates) = (dir.path().join("tasks"), dir.path().join("candidates"));
    for sub in [&tasks, &candidates] {
        std::fs::create_dir(sub).expect("mkdir");
    }
    for (name, task, candidate) in pairs {
        std::fs::copy(fixture(task), tasks.join(name)).expect("copy task");
        std::fs::copy(fixture(candidate), candidates.join(name)).expect("copy candidate");
    }
    let output = Command::new(env!("CARGO_BIN_EXE_crucible"))
        .args([
            "eval", "--device", "cpu", "--json", "--trials", "2", "-j", jobs,
        ])
        .arg("--task-dir")
        .arg(&tasks)
        .arg("--candidate-dir")
        .arg(&candidates)
        .output()
        .expect("run crucible");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut results: Vec<EvalResult> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one result per line"))
        .collect();
    results.sort_by(|a, b| a.candidate.name.cmp(&b.candidate.name));
    results
}

/// `oom.py` (always out of memory) and `honest.py` against the same ReLU task.
const RELU_PAIRS: [(&str, &str, &str); 2] = [
    ("oom.py", "task_relu.py", "out_of_memory.py"),
    ("honest.py", "task_relu.py", "honest_relu.py"),
];

fn retried(r: &EvalResult) -> bool {
    r.findings.iter().any(|f| f.code == "retried-alone")
}

#[test]
fn an_out_of_memory_failure_beside_other_evaluations_is_retried_alone() {
    let results = batch("2", &RELU_PAIRS);
    let [honest, oom] = results.as_slice() else {
        panic!("two results: {results:#?}");
    };
    assert_eq!(honest.verdict, Verdict::Correct, "{:#?}", honest.failure);
    assert!(!retried(honest));
    // Out of memory alone too: now it is the candidate's.
    assert_eq!(oom.verdict, Verdict::RuntimeError);
    assert_eq!(
        oom.failure.as_ref().map(|f| f.class),
        Some(FailureClass::OutOfMemory)
    );
    assert!(retried(oom), "{:#?}", oom.findings);
}

#[test]
fn a_batch_of_one_at_a_time_never_retries() {
    let results = batch("1", &RELU_PAIRS);
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| !retried(r)), "{results:#?}");
}

/// One at a time, but the next pair's processes start while an evaluation runs: where the
/// judge's precision measurement finds no room beside them, the evaluation is judged again
/// without them, never left unmeasured (a softmax scaled by 1.5, which only that measurement
/// refuses, would pass). The fixture task runs out of memory in its first referee only.
#[test]
fn a_precision_measurement_without_room_beside_the_next_pair_is_made_again_without_it() {
    let task = "task_wide_softmax_room_after_first_referee.py";
    let results = batch(
        "1",
        &[
            ("a_scaled.py", task, "atol_carried_softmax.py"),
            ("b_honest.py", task, "honest_wide_softmax.py"),
        ],
    );
    let [scaled, honest] = results.as_slice() else {
        panic!("two results: {results:#?}");
    };
    assert_eq!(scaled.verdict, Verdict::Incorrect, "{:#?}", scaled.failure);
    assert_eq!(
        scaled.failure.as_ref().map(|f| f.stage.as_str()),
        Some("precision")
    );
    let retry = scaled
        .findings
        .iter()
        .find(|f| f.code == "retried-alone")
        .unwrap_or_else(|| panic!("the first one is retried: {:#?}", scaled.findings));
    assert!(
        retry.message.contains("the warm pool's waiting processes"),
        "{}",
        retry.message
    );
    assert_eq!(honest.verdict, Verdict::Correct, "{:#?}", honest.failure);
    assert!(!retried(honest), "{:#?}", honest.findings);
}
