//! The harness protocol is strict on both sides: a referee reply that lacks a field is a clear
//! `infra_error` (never a silent default), and a candidate process that writes a reply of its
//! own making is charged with it. Real processes on the CPU.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crucible_judge::{Device, EvalConfig, Runtime, StageLimits, evaluate};
use crucible_result::{EvalResult, FailureClass, Verdict};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn config() -> EvalConfig {
    let mut cfg = EvalConfig::new(Device::Cpu);
    cfg.limits = StageLimits::uniform(Device::Cpu, Duration::from_secs(30));
    cfg.verify_policy = None;
    cfg.trials = 1;
    cfg
}

fn judge(runtime: &Runtime, candidate: &str) -> EvalResult {
    let (task, candidate) = (fixture("task_relu.py"), fixture(candidate));
    let task_src = std::fs::read(&task).expect("task fixture");
    let candidate_src = std::fs::read(&candidate).expect("candidate fixture");
    evaluate(
        runtime,
        &task,
        &task_src,
        &candidate,
        &candidate_src,
        &config(),
    )
}

/// A copy of the embedded harness whose referee answers `prepare` without its `payload`.
fn runtime_with_a_broken_referee(dir: &Path) -> Runtime {
    let runtime = Runtime::discover().expect("the judge's Python runtime (run scripts/bootstrap)");
    let package = dir.join("crucible_harness");
    std::fs::create_dir_all(&package).expect("mkdir");
    for entry in std::fs::read_dir(runtime.harness_root.join("crucible_harness")).expect("harness")
    {
        let path = entry.expect("entry").path();
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        if path.file_name().is_some_and(|n| n == "referee.py") {
            let renamed = text.replace(
                r#"return {"payload": payload,"#,
                r#"return {"pay_load": payload,"#,
            );
            assert_ne!(
                renamed, text,
                "the referee's prepare reply changed shape; update this test"
            );
            text = renamed;
        }
        std::fs::write(package.join(path.file_name().expect("name")), text).expect("write");
    }
    Runtime {
        python: runtime.python,
        harness_root: dir.to_path_buf(),
        bytecode: runtime.bytecode,
    }
}

#[test]
fn a_referee_reply_without_a_field_is_a_clear_infra_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let result = judge(&runtime_with_a_broken_referee(dir.path()), "honest_relu.py");
    assert_eq!(result.verdict, Verdict::InfraError, "{:#?}", result.failure);
    let failure = result.failure.expect("a failure");
    assert_eq!(failure.stage, "trial_0");
    assert!(failure.message.contains("payload"), "{}", failure.message);
}

#[test]
fn a_reply_the_candidate_writes_itself_is_its_own_crash() {
    let result = judge(&Runtime::discover().expect("runtime"), "forged_reply.py");
    assert_eq!(result.verdict, Verdict::Crashed, "{:#?}", result.failure);
    let failure = result.failure.expect("a failure");
    assert_eq!(failure.class, FailureClass::Crashed);
    assert!(
        failure.message.contains("corrupted the judge's channel"),
        "{}",
        failure.message
    );
}
