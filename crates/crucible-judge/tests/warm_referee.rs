//! A waiting pair's referee warmed up ahead of its evaluation (what the warm pool does on a GPU):
//! its hello is read, the warm-up runs under the share it is given, and the evaluation that then
//! takes the pair reads only the candidate process's hello and judges as with any other pair.
//! Real processes on the CPU, where the warm-up itself has nothing to do.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crucible_judge::{Device, EvalConfig, Runtime, TimedPhaseGuard, Workers, evaluate_with};
use crucible_result::Verdict;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn a_warmed_referee_judges_like_any_other() {
    let runtime = match Runtime::discover() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("SKIPPED: no judge Python runtime ({error}); set CRUCIBLE_PYTHON");
            return;
        }
    };
    let mut cfg = EvalConfig::new(Device::Cpu);
    cfg.verify_policy = None;
    let mut workers = Workers::spawn(&runtime, &cfg, false).expect("spawn a pair");
    let started = Instant::now();
    while !workers.said_hello() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no hello in 120 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // On the CPU nothing asks for it: the pool warms referees only on a GPU.
    assert!(!workers.referee_awaits_warm_up());
    assert!(!workers.referee_warmed());

    let shares = Cell::new(0);
    let share = || -> Option<TimedPhaseGuard> {
        shares.set(shares.get() + 1);
        Some(Box::new(()))
    };
    workers
        .warm_referee(&share, Duration::from_secs(60), 0)
        .expect("the warm-up");
    assert_eq!(shares.get(), 1, "the warm-up runs under one share");
    assert!(workers.referee_warmed());
    // Its hello was read, yet the pair still counts as ready to take.
    assert!(workers.said_hello());
    assert!(!workers.referee_awaits_warm_up());

    let (task, candidate) = (fixture("task_relu.py"), fixture("honest_relu.py"));
    let result = evaluate_with(
        &runtime,
        &task,
        &std::fs::read(&task).unwrap(),
        &candidate,
        &std::fs::read(&candidate).unwrap(),
        &cfg,
        Some(workers),
    );
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
}
