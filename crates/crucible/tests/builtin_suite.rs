//! The whole builtin suite through the real `crucible eval --device cpu` binary: every honest
//! solution is correct, every deliberately wrong one is incorrect.

use std::path::{Path, PathBuf};
use std::process::Command;

use crucible_result::{EvalResult, Verdict};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn eval_dir(candidates: &str) -> Vec<EvalResult> {
    let output = Command::new(env!("CARGO_BIN_EXE_crucible"))
        .current_dir(repo())
        .args(["eval", "--device", "cpu", "--json", "-j", "2"])
        .args(["--task-dir", "tasks/builtin", "--candidate-dir", candidates])
        .output()
        .expect("run crucible");
    assert!(
        output.status.success(),
        "crucible eval failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one result per line"))
        .collect()
}

#[test]
fn honest_builtin_solutions_are_correct() {
    let results = eval_dir("examples/solutions");
    assert!(
        results.len() >= 12,
        "the builtin suite has at least 12 tasks"
    );
    for r in &results {
        assert_eq!(
            r.verdict,
            Verdict::Correct,
            "{}: {:#?}",
            r.task.name,
            r.failure
        );
        assert!(r.timing.is_none(), "no timing on the CPU");
        assert!(!r.launches.is_empty(), "{} launched no kernel", r.task.name);
        // Every builtin task declares GENERALIZE, and no honest solution is shape-specialized.
        let generalized = r.generalization.as_ref().map(|g| g.status);
        assert_eq!(
            generalized,
            Some(crucible_result::GeneralizationStatus::Passed),
            "{}: {:#?}",
            r.task.name,
            r.generalization
        );
        assert!(
            r.findings
                .iter()
                .all(|f| f.severity == crucible_result::Severity::Info),
            "{}: {:?}",
            r.task.name,
            r.findings
        );
    }
}

#[test]
fn wrong_builtin_solutions_are_incorrect() {
    let results = eval_dir("examples/wrong");
    assert!(results.len() >= 6);
    for r in &results {
        assert_eq!(
            r.verdict,
            Verdict::Incorrect,
            "{}: {:#?}",
            r.task.name,
            r.failure
        );
        let failed = r.trials.iter().find(|t| !t.passed).expect("a failed trial");
        assert!(failed.outputs.iter().any(|o| o.mismatched > 0));
    }
}

#[test]
fn a_missing_candidate_file_is_a_clear_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_crucible"))
        .current_dir(repo())
        .args([
            "eval",
            "--device",
            "cpu",
            "--task",
            "tasks/builtin/01_relu.py",
        ])
        .args(["--candidate", "no/such/file.py"])
        .output()
        .expect("run crucible");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no/such/file.py"), "{stderr}");
}
