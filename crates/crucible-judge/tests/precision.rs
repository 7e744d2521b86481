//! The measured precision class: real candidates in real processes (Triton's interpreter on the
//! CPU computes `tl.dot` in float32 and honours the casts a kernel makes), measured by the referee
//! against a float64 copy of the reference.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crucible_judge::{Device, EvalConfig, Runtime, StageLimits, evaluate};
use crucible_result::{EvalResult, PrecisionClass, Severity, Verdict};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn judge(task: &Path, candidate: &Path) -> EvalResult {
    judge_with(task, candidate, &config())
}

fn config() -> EvalConfig {
    let mut cfg = EvalConfig::new(Device::Cpu);
    cfg.limits = StageLimits::uniform(Device::Cpu, Duration::from_secs(60));
    // In-kernel casts pass the static verifier; runtime behaviour is what is tested here.
    cfg.verify_policy = None;
    cfg
}

fn judge_with(task: &Path, candidate: &Path, cfg: &EvalConfig) -> EvalResult {
    let runtime = Runtime::discover().expect("the judge's Python runtime (run scripts/bootstrap)");
    let task_src = std::fs::read(task).expect("task file");
    let candidate_src = std::fs::read(candidate).expect("candidate file");
    evaluate(&runtime, task, &task_src, candidate, &candidate_src, cfg)
}

fn matmul(candidate: &str) -> EvalResult {
    judge(&repo("tasks/builtin/09_matmul.py"), &fixture(candidate))
}

fn downgrade(result: &EvalResult) -> Option<&str> {
    result
        .findings
        .iter()
        .find(|f| f.code == "precision-downgrade" && f.severity == Severity::Flag)
        .map(|f| f.message.as_str())
}

/// The class, the reference's class and what decided the first output's class.
fn measured(result: &EvalResult) -> (Option<PrecisionClass>, Option<PrecisionClass>, String) {
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    let precision = result.precision.as_ref().expect("a precision measurement");
    assert!(precision.unmeasured.is_none(), "{precision:#?}");
    assert!(
        result.stages.iter().any(|s| s.name == "precision"),
        "a precision stage"
    );
    let evidence = precision.outputs[0].evidence.clone();
    (precision.class, precision.reference_class, evidence)
}

#[test]
fn fp16_operands_cast_inside_the_kernel_measure_as_fp16_and_are_flagged() {
    let result = matmul("matmul_fp16_cast.py");
    let (class, reference, evidence) = measured(&result);
    assert_eq!(class, Some(PrecisionClass::Fp16), "{:#?}", result.precision);
    assert_eq!(reference, Some(PrecisionClass::Fp32));
    assert_eq!(evidence, "emulation:rn10");
    let message = downgrade(&result).expect("precision-downgrade");
    assert!(message.contains("class fp16"), "{message}");
    // No timing on the CPU: no speedup of either kind.
    assert!(result.speedup.is_none() && result.speedup_matched.is_none());
}

/// The float64 forwards run on the referee while the candidate runs trial 0, where their copies
/// fit; where they do not (here a large-work size of a few bytes), or where the configuration
/// says so, the stage runs them itself, and the measurement is the same number for number (one
/// seed: the same trial inputs).
#[test]
fn the_float64_forwards_run_ahead_where_their_copies_fit_and_measure_the_same() {
    let (task, candidate) = (
        repo("tasks/builtin/09_matmul.py"),
        fixture("matmul_tf32_truncate.py"),
    );
    let mut cfg = config();
    cfg.seed = Some(7);
    let ahead = judge_with(&task, &candidate, &cfg);
    let mut too_large = cfg.clone();
    too_large.large_work_bytes = 64;
    let mut behind = cfg.clone();
    behind.precision_ahead = false;
    let in_stage = [too_large, behind].map(|cfg| judge_with(&task, &candidate, &cfg));
    let mut ahead = {
        assert_eq!(measured(&ahead).0, Some(PrecisionClass::Tf32));
        ahead.precision.unwrap()
    };
    let seconds = ahead.forwards_ahead_s.take().expect("forwards run ahead");
    assert!(seconds > 0.0, "{seconds}");
    for result in in_stage {
        assert_eq!(measured(&result).0, Some(PrecisionClass::Tf32));
        let precision = result.precision.unwrap();
        assert_eq!(precision.forwards_ahead_s, None);
        assert_eq!(precision, ahead);
    }
}

#[test]
fn an_honest_fp32_matmul_measures_as_fp32() {
    let result = matmul("matmul_fp32.py");
    let (class, reference, _) = measured(&result);
    assert_eq!(class, Some(PrecisionClass::Fp32), "{:#?}", result.precision);
    assert_eq!(reference, Some(PrecisionClass::Fp32));
    assert!(downgrade(&result).is_none(), "{:?}", result.findings);
    let output = &result.precision.as_ref().unwrap().outputs[0];
    assert!(output.candidate_bits.unwrap_or(f64::INFINITY) >= 17.0);
}

#[test]
fn bf16_operands_measure_as_bf16() {
    let result = matmul("matmul_bf16_cast.py");
    let (class, _, _) = measured(&result);
    assert_eq!(class, Some(PrecisionClass::Bf16), "{:#?}", result.precision);
    assert!(downgrade(&result).unwrap_or("").contains("class bf16"));
}

#[test]
fn truncated_operands_measure_as_tf32() {
    let result = matmul("matmul_tf32_truncate.py");
    let (class, _, evidence) = measured(&result);
    assert_eq!(class, Some(PrecisionClass::Tf32), "{:#?}", result.precision);
    assert_eq!(evidence, "emulation:rz10");
    assert!(downgrade(&result).unwrap_or("").contains("TF32"));
}

#[test]
fn an_honest_fp16_candidate_on_an_fp16_task_is_fp16_without_a_flag() {
    let result = judge(
        &repo("tasks/builtin/10_matmul_fp16.py"),
        &repo("examples/solutions/10_matmul_fp16.py"),
    );
    let (class, reference, _) = measured(&result);
    assert_eq!(class, Some(PrecisionClass::Fp16), "{:#?}", result.precision);
    assert_eq!(reference, Some(PrecisionClass::Fp16));
    assert!(downgrade(&result).is_none(), "{:?}", result.findings);
}

#[test]
fn a_reference_without_float64_leaves_the_precision_unmeasured() {
    let result = judge(&fixture("task_dtype_fixed.py"), &fixture("honest_relu.py"));
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    let precision = result.precision.as_ref().expect("a precision entry");
    assert_eq!(precision.class, None);
    let reason = precision.unmeasured.as_deref().unwrap_or("");
    assert!(reason.contains("float32"), "{reason}");
    assert!(downgrade(&result).is_none());
}
