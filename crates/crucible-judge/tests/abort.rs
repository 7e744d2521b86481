//! Stopping an evaluation from outside (its task was cancelled), with real harness processes on
//! the CPU: a candidate stuck in its first trial is killed within moments of the abort, the
//! result is the judge's `infra_error`, never the candidate's fault, and the stage observer saw
//! every stage as it started.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crucible_judge::{
    Abort, Device, EvalConfig, Runtime, StageLimits, StageObserver, Workers, evaluate_with,
};
use crucible_result::{FailureClass, StageStatus, Verdict};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[derive(Debug, Default)]
struct Stages(Mutex<Vec<String>>);

impl StageObserver for Stages {
    fn stage_started(&self, name: &str) {
        self.0.lock().unwrap().push(name.to_string());
    }
}

fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat.contains(") Z "))
        .unwrap_or(false)
}

#[test]
fn an_aborted_evaluation_is_killed_at_once_and_charged_to_nobody() {
    let runtime = match Runtime::discover() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("SKIPPED: no judge Python runtime ({error}); set CRUCIBLE_PYTHON");
            return;
        }
    };
    let stages = Arc::new(Stages::default());
    let abort = Abort::new();
    let mut cfg = EvalConfig::new(Device::Cpu);
    // Only the abort can end the stuck trial within the test.
    cfg.limits = StageLimits::uniform(Device::Cpu, Duration::from_secs(120));
    cfg.verify_policy = None;
    cfg.stage_observer = Some(stages.clone());
    cfg.abort = Some(abort.clone());
    let workers = Workers::start(&runtime, &cfg).expect("start the harness processes");
    let candidate_pid = workers.candidate_pid();
    let (task, candidate) = (fixture("task_relu.py"), fixture("infinite_loop.py"));
    let (task_src, candidate_src) = (
        std::fs::read(&task).unwrap(),
        std::fs::read(&candidate).unwrap(),
    );

    let aborted_at = std::thread::scope(|scope| {
        let aborter = scope.spawn(|| {
            let until = Instant::now() + Duration::from_secs(60);
            while !stages.0.lock().unwrap().iter().any(|s| s == "trial_0") {
                assert!(Instant::now() < until, "the first trial never started");
                std::thread::sleep(Duration::from_millis(20));
            }
            // Well inside the endless forward.
            std::thread::sleep(Duration::from_millis(500));
            abort.abort();
            Instant::now()
        });
        let result = evaluate_with(
            &runtime,
            &task,
            &task_src,
            &candidate,
            &candidate_src,
            &cfg,
            Some(workers),
        );
        let aborted_at = aborter.join().expect("the aborting thread");
        let returned_after = aborted_at.elapsed();
        eprintln!("abort -> result: {returned_after:.2?}");
        assert!(
            returned_after < Duration::from_secs(3),
            "the evaluation returned {returned_after:?} after the abort"
        );
        assert_eq!(result.verdict, Verdict::InfraError, "{:#?}", result.failure);
        let failure = result.failure.expect("a failure");
        assert_eq!(failure.class, FailureClass::InfraError);
        assert!(failure.message.contains("cancelled"), "{}", failure.message);
        let last = result.stages.last().expect("stages");
        assert_eq!(
            (last.name.as_str(), last.status),
            ("trial_0", StageStatus::Failed)
        );
        aborted_at
    });
    let seen = stages.0.lock().unwrap().clone();
    assert_eq!(seen, ["start", "reference", "load", "trial_0"]);
    let until = Instant::now() + Duration::from_secs(5);
    while running(candidate_pid) {
        assert!(
            Instant::now() < until,
            "the candidate process outlived the abort"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "abort -> candidate process gone: {:.2?}",
        aborted_at.elapsed()
    );
    assert!(abort.is_aborted());
}

#[test]
fn an_evaluation_aborted_before_its_processes_start_starts_none() {
    let runtime = match Runtime::discover() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("SKIPPED: no judge Python runtime ({error}); set CRUCIBLE_PYTHON");
            return;
        }
    };
    let abort = Abort::new();
    abort.abort();
    let mut cfg = EvalConfig::new(Device::Cpu);
    cfg.abort = Some(abort);
    let (task, candidate) = (fixture("task_relu.py"), fixture("honest_relu.py"));
    let (task_src, candidate_src) = (
        std::fs::read(&task).unwrap(),
        std::fs::read(&candidate).unwrap(),
    );
    let mut asked_for_processes = false;
    let result = crucible_judge::evaluate_taking(
        &runtime,
        ((&task, &task_src), (&candidate, &candidate_src)),
        &cfg,
        || {
            asked_for_processes = true;
            None
        },
    );
    assert!(!asked_for_processes, "an aborted evaluation took processes");
    assert_eq!(result.verdict, Verdict::InfraError);
    assert!(
        result.stages.iter().all(|s| s.name != "start"),
        "{:?}",
        result.stages
    );
}
