//! The generalization trial: real candidate processes on the CPU (Triton interpreter) against
//! tasks whose size constants the referee perturbs. Failing it is a flag, never a reject.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crucible_judge::{Device, EvalConfig, Generalize, Runtime, StageLimits, evaluate};
use crucible_result::{EvalResult, GeneralizationStatus, Severity, StageStatus, Verdict};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn judge_with(task: &str, candidate: &str, cfg: &EvalConfig) -> EvalResult {
    let runtime = Runtime::discover().expect("the judge's Python runtime (run scripts/bootstrap)");
    let (task, candidate) = (fixture(task), fixture(candidate));
    let task_src = std::fs::read(&task).expect("task fixture");
    let candidate_src = std::fs::read(&candidate).expect("candidate fixture");
    evaluate(&runtime, &task, &task_src, &candidate, &candidate_src, cfg)
}

/// Runtime behaviour only (the verifier would flag some of these fallbacks first), with the
/// default `--generalize auto`: the fixture tasks declare `GENERALIZE`.
fn config() -> EvalConfig {
    let mut cfg = EvalConfig::new(Device::Cpu);
    cfg.limits = StageLimits::uniform(Device::Cpu, Duration::from_secs(30));
    cfg.verify_policy = None;
    cfg
}

fn judge(task: &str, candidate: &str) -> EvalResult {
    judge_with(task, candidate, &config())
}

fn assert_correct(result: &EvalResult) {
    assert_eq!(
        result.verdict,
        Verdict::Correct,
        "{:#?}\n{:#?}",
        result.failure,
        result.findings
    );
    assert!(result.correct);
    assert!(result.trials.iter().all(|t| t.passed));
}

fn specialized_message(result: &EvalResult) -> String {
    let flagged: Vec<_> = result
        .findings
        .iter()
        .filter(|f| f.code == "shape-specialized")
        .collect();
    assert_eq!(flagged.len(), 1, "{:#?}", result.findings);
    assert_eq!(flagged[0].severity, Severity::Flag);
    flagged[0].message.clone()
}

fn has_code(result: &EvalResult, code: &str) -> bool {
    result.findings.iter().any(|f| f.code == code)
}

#[test]
fn an_honest_masked_candidate_generalizes() {
    let result = judge("task_generalize_rowsum.py", "honest_rowsum.py");
    assert_correct(&result);
    assert!(
        !has_code(&result, "shape-specialized"),
        "{:?}",
        result.findings
    );
    let g = result.generalization.as_ref().expect("the trial ran");
    assert_eq!(g.status, GeneralizationStatus::Passed);
    assert_eq!(g.source, "auto");
    // From the `small` profile: the batch to the largest odd number <= 8 / 2, the row length
    // to the odd number below it.
    let changed: Vec<_> = g
        .constants
        .iter()
        .map(|c| (c.name.as_str(), c.from, c.to))
        .collect();
    assert_eq!(changed, [("batch_size", 8, 3), ("dim", 100, 99)]);
    let trial = g.trial.as_ref().expect("the trial");
    assert!(trial.passed);
    assert_eq!(trial.outputs[0].shape, [3]);
    assert!(!result.seeds.trials.contains(&trial.seed));
    let stage = result
        .stages
        .iter()
        .find(|s| s.name == "generalize")
        .expect("stage");
    assert_eq!(stage.status, StageStatus::Ok);
    // After the repeat and the precision measurement, as the last stage on the CPU.
    let names: Vec<_> = result.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names[names.len() - 3..],
        ["repeat", "precision", "generalize"]
    );
}

#[test]
fn a_row_length_baked_into_the_mask_is_shape_specialized() {
    let result = judge("task_generalize_rowsum.py", "specialized_rowsum.py");
    assert_correct(&result);
    let message = specialized_message(&result);
    assert!(message.contains("dim 100 -> 99"), "{message}");
    assert!(message.contains("differ beyond"), "{message}");
    let g = result.generalization.as_ref().expect("the trial ran");
    assert_eq!(g.status, GeneralizationStatus::Failed);
    let trial = g.trial.as_ref().expect("the trial ran to the comparison");
    assert!(!trial.passed);
    assert!(trial.outputs[0].mismatched > 0);
    let stage = result
        .stages
        .iter()
        .find(|s| s.name == "generalize")
        .expect("stage");
    assert_eq!(stage.status, StageStatus::Failed);
}

#[test]
fn sizes_that_raise_elsewhere_are_shape_specialized_with_the_error() {
    let result = judge("task_generalize_relu.py", "specialized_view.py");
    assert_correct(&result);
    let message = specialized_message(&result);
    // The task's own values, and the candidate's error, for the model to act on.
    assert!(
        message.contains("batch_size 8 -> 5, dim 100 -> 37"),
        "{message}"
    );
    assert!(
        message.contains("runtime_error") && message.contains("view"),
        "{message}"
    );
    let g = result.generalization.as_ref().expect("the trial ran");
    assert_eq!(g.source, "task");
    assert!(g.trial.is_none(), "forward raised: nothing to compare");
}

#[test]
fn a_torch_fallback_at_other_sizes_is_shape_specialized() {
    let result = judge("task_generalize_relu.py", "specialized_fallback.py");
    assert_correct(&result);
    let message = specialized_message(&result);
    assert!(message.contains("launched none"), "{message}");
    // The fallback's outputs were right: only the missing launch fails the trial.
    let trial = result
        .generalization
        .as_ref()
        .and_then(|g| g.trial.as_ref())
        .expect("trial");
    assert!(trial.outputs.iter().all(|o| o.mismatched == 0));
}

#[test]
fn a_crash_in_the_generalization_trial_is_only_a_flag() {
    let result = judge("task_generalize_relu.py", "specialized_crash.py");
    assert_correct(&result);
    assert!(result.failure.is_none());
    let message = specialized_message(&result);
    assert!(
        message.contains("crashed") && message.contains("exited with status 7"),
        "{message}"
    );
}

#[test]
fn a_hang_in_the_generalization_trial_is_only_a_flag() {
    let mut cfg = config();
    cfg.limits = StageLimits::uniform(Device::Cpu, Duration::from_secs(5));
    let result = judge_with("task_generalize_relu.py", "specialized_hang.py", &cfg);
    assert_correct(&result);
    let message = specialized_message(&result);
    assert!(
        message.contains("timeout") && message.contains("`generalize`"),
        "{message}"
    );
}

#[test]
fn a_task_that_opts_out_gets_no_trial_even_when_forced_on() {
    let mut cfg = config();
    cfg.generalize = Generalize::On;
    let result = judge_with("task_generalize_opt_out.py", "specialized_rowsum.py", &cfg);
    assert_correct(&result);
    assert!(result.findings.is_empty(), "{:?}", result.findings);
    let g = result
        .generalization
        .as_ref()
        .expect("the opt-out is recorded");
    assert_eq!(g.status, GeneralizationStatus::Skipped);
    assert!(g.trial.is_none());
    assert!(g.message.as_deref().unwrap_or("").contains("opts out"));
}

#[test]
fn off_and_undeclared_tasks_run_no_trial() {
    let mut cfg = config();
    cfg.generalize = Generalize::Off;
    let off = judge_with("task_generalize_rowsum.py", "specialized_rowsum.py", &cfg);
    // `auto` on a task without GENERALIZE (every KernelBench file).
    let undeclared = judge_with("task_relu.py", "honest_relu.py", &config());
    for result in [&off, &undeclared] {
        assert_correct(result);
        assert!(result.generalization.is_none());
        assert!(!result.stages.iter().any(|s| s.name == "generalize"));
        assert!(!has_code(result, "shape-specialized"));
    }
}

#[test]
fn forcing_it_on_perturbs_an_undeclared_task_automatically() {
    let mut cfg = config();
    cfg.generalize = Generalize::On;
    let result = judge_with("task_relu.py", "honest_relu.py", &cfg);
    assert_correct(&result);
    let g = result.generalization.as_ref().expect("the trial ran");
    assert_eq!(g.status, GeneralizationStatus::Passed, "{:?}", g.message);
    assert_eq!(g.source, "auto");
}

#[test]
fn a_reference_that_fails_at_the_perturbed_sizes_skips_the_trial() {
    let result = judge("task_generalize_rigid.py", "specialized_rowsum.py");
    // Not the candidate's fault, and not the judge's: correct, with an info finding.
    assert_correct(&result);
    assert!(!has_code(&result, "shape-specialized"));
    let skipped = result
        .findings
        .iter()
        .find(|f| f.code == "generalization-skipped")
        .expect("the skip is explained");
    assert_eq!(skipped.severity, Severity::Info);
    assert!(
        skipped.message.contains("reference fails"),
        "{}",
        skipped.message
    );
    let g = result.generalization.as_ref().expect("recorded");
    assert_eq!(g.status, GeneralizationStatus::Skipped);
    let stage = result
        .stages
        .iter()
        .find(|s| s.name == "generalize")
        .expect("stage");
    assert_eq!(stage.status, StageStatus::Skipped);
}
