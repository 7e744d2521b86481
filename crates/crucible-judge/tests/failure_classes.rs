//! Every failure class, and every runtime hack defense that works on the CPU, caused by a real
//! candidate file in a real candidate process (Triton interpreter, CPU tensors).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crucible_judge::{Device, DeviceSharing, EvalConfig, Runtime, StageLimits, evaluate};
use crucible_result::{EvalResult, FailureClass, Severity, Verdict};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn runtime() -> Runtime {
    Runtime::discover().expect("the judge's Python runtime (run scripts/bootstrap)")
}

fn judge_with(task: &str, candidate: &str, cfg: &EvalConfig) -> EvalResult {
    let (task, candidate) = (fixture(task), fixture(candidate));
    let task_src = std::fs::read(&task).expect("task fixture");
    let candidate_src = std::fs::read(&candidate).expect("candidate fixture");
    evaluate(
        &runtime(),
        &task,
        &task_src,
        &candidate,
        &candidate_src,
        cfg,
    )
}

/// Runtime behaviour only: the static verifier would stop most of these candidates first.
fn runtime_config() -> EvalConfig {
    let mut cfg = EvalConfig::new(Device::Cpu);
    cfg.limits = StageLimits::uniform(Device::Cpu, Duration::from_secs(30));
    cfg.verify_policy = None;
    cfg
}

fn judge(candidate: &str) -> EvalResult {
    judge_with("task_relu.py", candidate, &runtime_config())
}

fn assert_failure(result: &EvalResult, verdict: Verdict, class: FailureClass) {
    let failure = result.failure.as_ref().unwrap_or_else(|| {
        panic!(
            "expected {class:?}, got {:?} with no failure",
            result.verdict
        )
    });
    assert_eq!(
        (result.verdict, failure.class),
        (verdict, class),
        "{failure:#?}"
    );
    assert!(!result.correct);
    assert!(!failure.message.is_empty(), "a failure needs a diagnostic");
}

fn has_finding(result: &EvalResult, code: &str, severity: Severity) -> bool {
    result
        .findings
        .iter()
        .any(|f| f.code == code && f.severity == severity)
}

#[test]
fn honest_candidate_is_correct_with_seeds_and_no_timing() {
    let result = judge("honest_relu.py");
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    assert!(result.correct);
    assert_eq!(
        result.trials.len(),
        6,
        "five trials and the repeat of the first"
    );
    assert!(result.trials.iter().all(|t| t.passed));
    assert_eq!(result.trials[5].repeat_of, Some(0));
    assert_eq!(result.trials[5].seed, result.trials[0].seed);
    assert_eq!(result.seeds.trials.len(), 5);
    assert!(result.timing.is_none() && result.speedup.is_none());
    assert!(
        result
            .timing_skipped
            .as_deref()
            .unwrap_or("")
            .contains("interpreter")
    );
    assert_eq!(result.size_profile, "small");
    assert!(result.env.triton_interpret);
    // Autotune under the interpreter picks the first config and says so.
    let launch = &result.launches[0];
    assert_eq!(launch.kernel, "relu_kernel");
    assert!(
        launch
            .autotune_config
            .as_deref()
            .unwrap_or("")
            .contains("BLOCK: 128")
    );
}

#[test]
fn seed_replays_an_evaluation_exactly() {
    let mut cfg = runtime_config();
    cfg.seed = Some(1234);
    let a = judge_with("task_relu.py", "wrong_relu.py", &cfg);
    let b = judge_with("task_relu.py", "wrong_relu.py", &cfg);
    assert_eq!(a.seeds, b.seeds);
    assert_eq!(a.trials, b.trials, "same seed, same inputs, same errors");
}

/// KernelBench issue #165 as a candidate: outputs far below atol make the elementwise tolerance
/// vacuous, so a softmax scaled by 1.5 passes every trial. Its error against the float64
/// reference (50%) refuses it at the precision stage; the honest kernel stays correct.
#[test]
fn an_output_within_atol_only_because_it_is_tiny_is_incorrect() {
    let cfg = runtime_config();
    let honest = judge_with("task_wide_softmax.py", "honest_wide_softmax.py", &cfg);
    assert_eq!(honest.verdict, Verdict::Correct, "{:#?}", honest.failure);
    assert!(honest.findings.iter().all(|f| f.severity != Severity::Flag));
    let scaled = judge_with("task_wide_softmax.py", "atol_carried_softmax.py", &cfg);
    assert_refused_at_the_precision_stage(&scaled);
}

/// The softmax scaled by 1.5 passed every trial within atol and was refused by its error
/// against float64 (50%).
fn assert_refused_at_the_precision_stage(scaled: &EvalResult) {
    assert_failure(scaled, Verdict::Incorrect, FailureClass::Incorrect);
    assert!(
        scaled
            .trials
            .iter()
            .all(|t| t.passed && t.outputs[0].mismatched == 0),
        "every element of every trial is within atol"
    );
    let failure = scaled.failure.as_ref().expect("failure");
    assert_eq!(failure.stage, "precision");
    assert!(
        failure.message.contains("relative RMS error of 5.000e-1"),
        "{}",
        failure.message
    );
}

/// The same scaled softmax when the float64 copy finds no device memory. Beside other
/// evaluations (seen at 8 at once on an H200) or a warm pool's waiting pairs (seen with twelve
/// on an 80 GiB H100) their memory may be why, so it is the judge's `infra_error`, which the
/// engine retries with the device cleared, never a pass; with nothing else on the device, the
/// shortage is the task's size and the measurement is left undone, as the result says.
#[test]
fn out_of_memory_at_the_precision_stage_beside_other_processes_is_retried_not_passed() {
    let mut cfg = runtime_config();
    cfg.device_sharing = DeviceSharing::Evaluations;
    let task = "task_wide_softmax_no_float64_room.py";
    let shared = judge_with(task, "atol_carried_softmax.py", &cfg);
    assert_failure(&shared, Verdict::InfraError, FailureClass::InfraError);
    let failure = shared.failure.as_ref().expect("failure");
    assert_eq!(failure.stage, "precision");
    assert!(
        failure.message.contains("ran out of device memory")
            && failure.message.contains("Tried to allocate 12.00 GiB"),
        "{}",
        failure.message
    );
    // Waiting processes keep their memory: no pause, at once the judge's fault.
    cfg.device_sharing = DeviceSharing::WaitingProcesses;
    let beside_pool = judge_with(task, "atol_carried_softmax.py", &cfg);
    assert_failure(&beside_pool, Verdict::InfraError, FailureClass::InfraError);
    let failure = beside_pool.failure.as_ref().expect("failure");
    assert!(
        failure
            .message
            .contains("while the warm pool's waiting processes shared the device")
            && failure.message.contains("(1 attempts)"),
        "{}",
        failure.message
    );
    cfg.device_sharing = DeviceSharing::Nobody;
    let alone = judge_with(task, "atol_carried_softmax.py", &cfg);
    assert_eq!(alone.verdict, Verdict::Correct, "{:#?}", alone.failure);
    let unmeasured = alone
        .precision
        .as_ref()
        .and_then(|p| p.unmeasured.as_deref())
        .unwrap_or("");
    assert!(unmeasured.contains("ran out of memory"), "{unmeasured}");
}

/// A shortage that passes (another evaluation's float64 copy held the memory for a moment) is
/// waited out in place: the measurement is asked for again after a pause and the scaled softmax
/// is `incorrect` as it is alone, with no retry of the whole evaluation.
#[test]
fn a_passing_shortage_at_the_precision_stage_is_waited_out_in_place() {
    let mut cfg = runtime_config();
    cfg.device_sharing = DeviceSharing::Evaluations;
    let task = "task_wide_softmax_float64_room_later.py";
    let scaled = judge_with(task, "atol_carried_softmax.py", &cfg);
    assert_refused_at_the_precision_stage(&scaled);
    let retried = scaled
        .findings
        .iter()
        .find(|f| f.code == "precision-retried")
        .expect("the retry is noted");
    assert!(retried.message.contains("attempt 2"), "{}", retried.message);
}

#[test]
fn wrong_values_are_incorrect_with_error_statistics() {
    let result = judge("wrong_relu.py");
    assert_failure(&result, Verdict::Incorrect, FailureClass::Incorrect);
    let trial = &result.trials[0];
    assert!(!trial.passed);
    assert!(trial.outputs[0].max_abs > 0.1);
    assert!(trial.outputs[0].mismatched > 0);
    assert!(trial.message.as_deref().unwrap_or("").contains("differ"));
}

#[test]
fn wrong_shape_is_incorrect() {
    let result = judge("wrong_shape.py");
    assert_failure(&result, Verdict::Incorrect, FailureClass::Incorrect);
    assert!(result.failure.unwrap().message.contains("shape"));
}

#[test]
fn tensor_subclass_output_is_incorrect() {
    let result = judge("tensor_subclass.py");
    assert_failure(&result, Verdict::Incorrect, FailureClass::Incorrect);
    assert!(
        result
            .failure
            .unwrap()
            .message
            .contains("exactly torch.Tensor")
    );
}

#[test]
fn syntax_error_is_a_compile_error() {
    let result = judge("syntax_error.py");
    assert_failure(&result, Verdict::CompileError, FailureClass::SyntaxError);
}

#[test]
fn import_error_is_a_compile_error() {
    let result = judge("import_error.py");
    assert_failure(&result, Verdict::CompileError, FailureClass::ImportError);
    assert!(
        result
            .failure
            .unwrap()
            .message
            .contains("triton_extra_fast_ops")
    );
}

#[test]
fn missing_model_new_is_a_compile_error() {
    let result = judge("missing_model_new.py");
    assert_failure(
        &result,
        Verdict::CompileError,
        FailureClass::MissingModelNew,
    );
}

#[test]
fn triton_rejected_kernel_is_a_compile_error() {
    let result = judge("compile_error.py");
    assert_failure(
        &result,
        Verdict::CompileError,
        FailureClass::TritonCompileError,
    );
}

#[test]
fn exception_in_forward_is_a_runtime_error() {
    let result = judge("runtime_error.py");
    assert_failure(&result, Verdict::RuntimeError, FailureClass::RuntimeError);
    assert_eq!(result.failure.unwrap().stage, "trial_0");
}

#[test]
fn out_of_memory_is_a_runtime_error() {
    let result = judge("out_of_memory.py");
    assert_failure(&result, Verdict::RuntimeError, FailureClass::OutOfMemory);
}

#[test]
fn infinite_loop_times_out_in_its_stage() {
    let mut cfg = runtime_config();
    cfg.limits = StageLimits::uniform(Device::Cpu, Duration::from_secs(3));
    cfg.verify_policy = None;
    let result = judge_with("task_relu.py", "infinite_loop.py", &cfg);
    assert_failure(&result, Verdict::Timeout, FailureClass::Timeout);
    assert_eq!(result.failure.unwrap().stage, "trial_0");
}

#[test]
fn segfault_is_a_crash_with_the_signal() {
    let result = judge("segfault.py");
    assert_failure(&result, Verdict::Crashed, FailureClass::Crashed);
    assert!(result.failure.unwrap().message.contains("SIGSEGV"));
}

#[test]
fn os_exit_is_a_crash() {
    let result = judge("os_exit.py");
    assert_failure(&result, Verdict::Crashed, FailureClass::Crashed);
    assert!(
        result
            .failure
            .unwrap()
            .message
            .contains("exited with status 0")
    );
}

#[test]
fn broken_task_is_an_infra_error_not_the_candidates() {
    let result = judge_with("broken_task.py", "honest_relu.py", &runtime_config());
    assert_failure(&result, Verdict::InfraError, FailureClass::InfraError);
    assert!(result.failure.unwrap().message.contains("undefined_scale"));
}

#[test]
fn decoy_kernel_with_torch_doing_the_work_is_rejected() {
    let result = judge("decoy_kernel.py");
    assert_eq!(result.verdict, Verdict::Rejected, "{:#?}", result.failure);
    assert!(has_finding(&result, "no-triton-launch", Severity::Reject));
}

#[test]
fn fake_result_lines_on_stdout_are_only_log_text() {
    let result = judge("fake_stdout.py");
    assert_failure(&result, Verdict::Incorrect, FailureClass::Incorrect);
}

#[test]
fn input_mutation_is_rejected() {
    let result = judge("input_mutation.py");
    assert_eq!(result.verdict, Verdict::Rejected, "{:#?}", result.failure);
    assert!(has_finding(&result, "input-mutated", Severity::Reject));
}

#[test]
fn returning_the_input_is_rejected() {
    let result = judge("output_alias.py");
    assert_eq!(result.verdict, Verdict::Rejected, "{:#?}", result.failure);
    assert!(has_finding(
        &result,
        "output-aliases-input",
        Severity::Reject
    ));
}

#[test]
fn a_crash_does_not_affect_the_next_evaluation() {
    let crashed = judge("segfault.py");
    assert_eq!(crashed.verdict, Verdict::Crashed);
    let next = judge("honest_relu.py");
    assert_eq!(next.verdict, Verdict::Correct, "{:#?}", next.failure);
}

#[test]
fn verifier_rejects_before_any_process_starts() {
    let result = judge_with("task_relu.py", "segfault.py", &EvalConfig::new(Device::Cpu));
    assert_failure(&result, Verdict::Rejected, FailureClass::Rejected);
    assert_eq!(result.failure.as_ref().unwrap().stage, "verify");
    assert!(
        result.stages.iter().all(|s| s.name != "start"),
        "no process may start"
    );
    assert!(
        result
            .findings
            .iter()
            .any(|f| f.severity == Severity::Reject && f.line.is_some())
    );
}

#[test]
fn verifier_reports_syntax_errors_with_line_and_column() {
    let result = judge_with(
        "task_relu.py",
        "syntax_error.py",
        &EvalConfig::new(Device::Cpu),
    );
    assert_failure(&result, Verdict::CompileError, FailureClass::SyntaxError);
    let failure = result.failure.unwrap();
    assert_eq!(failure.stage, "verify");
    assert!(
        failure.message.contains("line 7, column 25"),
        "{}",
        failure.message
    );
}

#[test]
fn honest_candidate_passes_the_strict_verifier() {
    let result = judge_with(
        "task_relu.py",
        "honest_relu.py",
        &EvalConfig::new(Device::Cpu),
    );
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    assert!(result.findings.iter().all(|f| f.severity == Severity::Info));
}

#[test]
fn replaying_a_cached_output_fails_on_fresh_inputs() {
    let result = judge("call_count_cache.py");
    assert_failure(&result, Verdict::Incorrect, FailureClass::Incorrect);
    assert_eq!(result.failure.unwrap().stage, "trial_1");
}

#[test]
fn two_runs_that_disagree_are_flagged_nondeterministic() {
    let result = judge("nondeterministic.py");
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    assert!(
        has_finding(&result, "nondeterministic", Severity::Flag),
        "{:?}",
        result.findings
    );
}

#[test]
fn a_background_thread_writing_after_return_never_scores_correct() {
    let result = judge("late_writer.py");
    assert!(!result.correct, "{:?}", result.verdict);
    assert!(
        result.verdict == Verdict::Incorrect || result.verdict == Verdict::Rejected,
        "{:?} {:?}",
        result.verdict,
        result.failure
    );
}

#[test]
fn a_kernel_skipped_in_one_grad_mode_is_a_decoy() {
    let result = judge("grad_mode_decoy.py");
    assert_eq!(result.verdict, Verdict::Rejected, "{:#?}", result.failure);
    let finding = result
        .findings
        .iter()
        .find(|f| f.code == "no-triton-launch")
        .expect("finding");
    assert!(finding.message.contains("repeat"), "{}", finding.message);
}

#[test]
fn stale_memory_from_torch_empty_is_incorrect() {
    // The reference runs in another process, so no freed result can be lying around.
    let result = judge("stale_empty.py");
    assert_failure(&result, Verdict::Incorrect, FailureClass::Incorrect);
}

#[test]
fn fp16_arithmetic_on_an_fp32_task_is_flagged_and_fails_strict() {
    let result = judge("half_precision.py");
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    assert!(
        has_finding(&result, "precision-downgrade", Severity::Flag),
        "{:?}",
        result.findings
    );
    let precision = result.precision.as_ref().and_then(|p| p.class);
    assert_eq!(precision, Some(crucible_result::PrecisionClass::Fp16));
    let mut strict = runtime_config();
    strict.tolerance = crucible_judge::ToleranceProfile::Strict;
    let result = judge_with("task_relu.py", "half_precision.py", &strict);
    assert_failure(&result, Verdict::Incorrect, FailureClass::Incorrect);
}

#[test]
fn honest_fp32_candidate_has_no_precision_finding() {
    let result = judge("honest_relu.py");
    assert!(
        result
            .findings
            .iter()
            .all(|f| f.code != "precision-downgrade")
    );
}

/// With a share per trial (`--fresh-shares`, not the default standing shares, whose
/// written-again memory and kept mappings the tests above run with), every runtime defense
/// above still decides the same.
#[test]
fn the_runtime_defenses_hold_with_fresh_shares() {
    let mut cfg = runtime_config();
    cfg.standing_shares = false;
    let judged = |candidate: &str| judge_with("task_relu.py", candidate, &cfg);
    let honest = judged("honest_relu.py");
    assert_eq!(honest.verdict, Verdict::Correct, "{:#?}", honest.failure);
    assert_eq!(honest.trials.len(), 6);
    let mutated = judged("input_mutation.py");
    assert!(has_finding(&mutated, "input-mutated", Severity::Reject));
    let aliased = judged("output_alias.py");
    assert!(has_finding(
        &aliased,
        "output-aliases-input",
        Severity::Reject
    ));
    let cached = judged("call_count_cache.py");
    assert_failure(&cached, Verdict::Incorrect, FailureClass::Incorrect);
    assert_eq!(cached.failure.map(|f| f.stage).as_deref(), Some("trial_1"));
    let late = judged("late_writer.py");
    assert!(!late.correct, "{:?}", late.verdict);
    assert_failure(
        &judged("stale_empty.py"),
        Verdict::Incorrect,
        FailureClass::Incorrect,
    );
    let nondeterministic = judged("nondeterministic.py");
    assert!(has_finding(
        &nondeterministic,
        "nondeterministic",
        Severity::Flag
    ));
}
