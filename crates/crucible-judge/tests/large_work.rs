//! Large device work keeps apart: once a trial's referee reports tensors of the large-work size
//! (`EvalConfig::large_work_bytes`), the rest of that trial and every later untimed claim on the
//! device is the gate's large share. Real harness processes on the CPU, with a gate that records
//! which stage took which kind of claim; the size is lowered to what a CPU trial holds.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crucible_judge::{
    Device, DeviceSharing, EvalConfig, Generalize, LargeTasks, Runtime, StageLimits, StageObserver,
    TimedPhaseGate, TimedPhaseGuard, evaluate,
};
use crucible_result::Verdict;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    Share,
    Large,
    /// The large-evaluation claim holder's share, ahead of waiting timed phases.
    Ahead,
    Exclusive,
    /// The large-evaluation claim, taken.
    LargeEvaluation,
    /// The large-evaluation claim, dropped.
    LargeEvaluationDropped,
}

/// The current stage (told by the judge as a stage observer) and each claim taken in it.
#[derive(Debug, Default)]
struct Recorder {
    stage: Mutex<String>,
    claims: Mutex<Vec<(String, Claim)>>,
    /// What the gate answers when asked whether a timed phase waits for the device.
    timed_phase_waits: AtomicBool,
}

impl Recorder {
    fn record(&self, claim: Claim) -> TimedPhaseGuard {
        self.log(claim);
        Box::new(())
    }

    fn log(&self, claim: Claim) {
        let stage = self.stage.lock().unwrap().clone();
        self.claims.lock().unwrap().push((stage, claim));
    }
}

/// Logs its own drop.
struct Dropped(Arc<Recorder>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.log(Claim::LargeEvaluationDropped);
    }
}

impl StageObserver for Recorder {
    fn stage_started(&self, name: &str) {
        *self.stage.lock().unwrap() = name.to_string();
    }
}

/// The recorder as the gate: its large-evaluation claim logs its own drop.
#[derive(Debug)]
struct Gate(Arc<Recorder>);

impl TimedPhaseGate for Gate {
    fn enter(&self) -> TimedPhaseGuard {
        self.0.record(Claim::Exclusive)
    }

    fn share(&self) -> TimedPhaseGuard {
        self.0.record(Claim::Share)
    }

    fn share_large(&self) -> TimedPhaseGuard {
        self.0.record(Claim::Large)
    }

    fn share_ahead(&self) -> TimedPhaseGuard {
        self.0.record(Claim::Ahead)
    }

    fn large_evaluation(&self, _stop: &dyn Fn() -> bool) -> Option<TimedPhaseGuard> {
        self.0.log(Claim::LargeEvaluation);
        Some(Box::new(Dropped(Arc::clone(&self.0))))
    }

    fn timed_phase_waiting(&self) -> bool {
        self.0.timed_phase_waits.load(Ordering::Relaxed)
    }
}

/// What a trial of the relu fixture holds at its small size: an 8 x 100 float32 input, its
/// pristine copy, the expected output and the output slot.
const TRIAL_BYTES: u64 = 4 * 8 * 100 * 4;

/// The claims of one honest relu evaluation with large work from `large_work_bytes` on.
fn claims(large_work_bytes: u64) -> Option<Vec<(String, Claim)>> {
    claims_knowing(large_work_bytes, None)
}

/// [`claims`], with the tasks earlier evaluations found large.
fn claims_knowing(
    large_work_bytes: u64,
    large_tasks: Option<Arc<LargeTasks>>,
) -> Option<Vec<(String, Claim)>> {
    claims_with(|cfg| {
        cfg.large_work_bytes = large_work_bytes;
        cfg.large_tasks = large_tasks;
    })
}

/// The claims of one honest relu evaluation under the configuration `set` leaves.
fn claims_with(set: impl FnOnce(&mut EvalConfig)) -> Option<Vec<(String, Claim)>> {
    evaluated_with(set).map(|(claims, _)| claims)
}

/// The claims an evaluation took, each with its stage, and its result's findings' codes.
type Evaluated = (Vec<(String, Claim)>, Vec<String>);

/// [`claims_with`], and the result's findings' codes.
fn evaluated_with(set: impl FnOnce(&mut EvalConfig)) -> Option<Evaluated> {
    evaluated(false, set)
}

/// [`evaluated_with`], the gate saying whether a timed phase waits for the device as
/// `timed_phase_waits` does.
fn evaluated(timed_phase_waits: bool, set: impl FnOnce(&mut EvalConfig)) -> Option<Evaluated> {
    let runtime = match Runtime::discover() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("SKIPPED: no judge Python runtime ({error}); set CRUCIBLE_PYTHON");
            return None;
        }
    };
    let recorder = Arc::new(Recorder {
        timed_phase_waits: AtomicBool::new(timed_phase_waits),
        ..Recorder::default()
    });
    let mut cfg = EvalConfig::new(Device::Cpu);
    cfg.limits = StageLimits::uniform(Device::Cpu, Duration::from_secs(120));
    cfg.trials = 2;
    cfg.timed_phases = Some(Arc::new(Gate(Arc::clone(&recorder))));
    cfg.stage_observer = Some(recorder.clone());
    set(&mut cfg);
    let (task, candidate) = (fixture("task_relu.py"), fixture("honest_relu.py"));
    let result = evaluate(
        &runtime,
        &task,
        &std::fs::read(&task).unwrap(),
        &candidate,
        &std::fs::read(&candidate).unwrap(),
        &cfg,
    );
    assert_eq!(result.verdict, Verdict::Correct, "{:#?}", result.failure);
    let claims = recorder.claims.lock().unwrap().clone();
    let codes = result.findings.iter().map(|f| f.code.clone()).collect();
    Some((claims, codes))
}

/// The stages whose claims were large.
fn large_stages(claims: &[(String, Claim)]) -> Vec<&str> {
    claims
        .iter()
        .filter(|(_, claim)| *claim == Claim::Large)
        .map(|(stage, _)| stage.as_str())
        .collect()
}

#[test]
fn a_large_trial_takes_the_large_share_from_its_run_on() {
    let Some(claims) = claims(TRIAL_BYTES) else {
        return;
    };
    // A claim is taken just before its stage is told, so it carries the name of the stage
    // before. The ordinary ones: the reference, the load and trial 0's prepare, which told the
    // size; from trial 0's run on, only large ones.
    let first_large = claims
        .iter()
        .position(|(_, claim)| *claim == Claim::Large)
        .expect("a large share");
    assert_eq!(first_large, 3, "{claims:?}");
    assert_eq!(claims[first_large].0, "trial_0", "{claims:?}");
    assert!(
        claims[first_large..]
            .iter()
            .all(|(_, claim)| *claim == Claim::Large),
        "{claims:?}"
    );
    for stage in ["trial_1", "repeat", "precision"] {
        assert!(
            claims.iter().any(|(s, _)| s == stage),
            "no claim in {stage}: {claims:?}"
        );
    }
}

#[test]
fn below_the_size_trials_share_and_the_precision_measurement_goes_by_its_own_estimate() {
    let Some(claims) = claims(TRIAL_BYTES + 1) else {
        return;
    };
    // 36 bytes per output element: 28,800 for the 800 outputs, above the size, so the
    // precision measurement alone is large.
    assert_eq!(large_stages(&claims), ["precision"], "{claims:?}");
    assert!(claims.iter().any(|(s, _)| s == "repeat"), "{claims:?}");
}

#[test]
fn a_task_found_large_is_large_from_the_first_claim_of_its_next_evaluation() {
    let large = Arc::new(LargeTasks::new());
    let Some(first) = claims_knowing(TRIAL_BYTES, Some(Arc::clone(&large))) else {
        return;
    };
    // The first evaluation finds out as the evaluation without the set does.
    let first_large = first.iter().position(|(_, claim)| *claim == Claim::Large);
    assert_eq!(first_large, Some(3), "{first:?}");
    let second = claims_knowing(TRIAL_BYTES, Some(Arc::clone(&large))).expect("runtime");
    assert!(
        second.iter().all(|(_, claim)| *claim == Claim::Large),
        "the reference, the load and trial 0's prepare too: {second:?}"
    );
    assert!(second.iter().any(|(s, _)| s == "trial_0"), "{second:?}");
    // Below the size nothing is recorded: another task's evaluation beside it is unaffected.
    let other = Arc::new(LargeTasks::new());
    claims_knowing(TRIAL_BYTES + 1, Some(Arc::clone(&other))).expect("runtime");
    let after = claims_knowing(TRIAL_BYTES + 1, Some(other)).expect("runtime");
    assert_eq!(large_stages(&after), ["precision"], "{after:?}");
}

/// With `exclusive_checks`, the repeat and the precision measurement run inside one exclusive
/// claim, taken as the repeat begins, and take no share of their own.
#[test]
fn exclusive_checks_hold_the_device_from_the_repeat_to_the_precision_measurement() {
    let (Some(held), Some(shared)) = (
        claims_with(|cfg| cfg.exclusive_checks = true),
        claims(u64::MAX),
    ) else {
        return;
    };
    let exclusive: Vec<&(String, Claim)> = held
        .iter()
        .filter(|(_, claim)| *claim == Claim::Exclusive)
        .collect();
    // Taken in the repeat, so its wait counts there (a claim taken outside a stage carries the
    // name of the stage before: the generalization trial's share is the last "precision" one).
    assert_eq!(exclusive.len(), 1, "{held:?}");
    assert_eq!(exclusive[0].0, "repeat", "{held:?}");
    let count = |claims: &[(String, Claim)], stage: &str| {
        claims
            .iter()
            .filter(|(s, c)| s == stage && *c != Claim::Exclusive)
            .count()
    };
    assert_eq!(count(&held, "repeat"), 0, "{held:?}");
    assert!(count(&shared, "repeat") > 0, "{shared:?}");
    assert_eq!(
        count(&held, "precision") + 1,
        count(&shared, "precision"),
        "{held:?} {shared:?}"
    );
    assert!(
        !shared.iter().any(|(_, c)| *c == Claim::Exclusive),
        "{shared:?}"
    );
}

/// What an evaluation at the small relu size needs at its peak by the judge's estimate: the
/// trial's tensors and the precision measurement's 36 bytes for each of the 800 outputs.
const EVALUATION_BYTES: u64 = TRIAL_BYTES + 36 * 8 * 100;

/// An evaluation beside others (`DeviceSharing::Evaluations`) whose referee sizes its trials.
fn sized(
    large_work_bytes: u64,
    device_memory_bytes: Option<u64>,
    large_tasks: Option<Arc<LargeTasks>>,
) -> Option<Evaluated> {
    evaluated_with(|cfg| {
        cfg.device_sharing = DeviceSharing::Evaluations;
        cfg.large_work_bytes = large_work_bytes;
        cfg.device_memory_bytes = device_memory_bytes;
        cfg.large_tasks = large_tasks;
    })
}

#[test]
fn beside_other_evaluations_the_referees_sizing_makes_the_first_evaluation_large_from_its_load() {
    let large = Arc::new(LargeTasks::new());
    let Some((claims, codes)) = sized(TRIAL_BYTES, None, Some(Arc::clone(&large))) else {
        return;
    };
    // Only the reference's own claim, which came before its reply, is ordinary; no
    // large-evaluation claim without the device's memory.
    assert_eq!(claims[0].1, Claim::Share, "{claims:?}");
    assert!(
        claims[1..].iter().all(|(_, claim)| *claim == Claim::Large),
        "{claims:?}"
    );
    assert!(
        !codes.iter().any(|c| c == "ran-one-large-at-a-time"),
        "{codes:?}"
    );
    // The next evaluation of the task knows from the start.
    let (next, _) = sized(u64::MAX, None, Some(large)).expect("runtime");
    assert!(
        next.iter().all(|(_, claim)| *claim == Claim::Large),
        "{next:?}"
    );
    // One below the size: the sizing changes nothing.
    let (small, _) = sized(TRIAL_BYTES + 1, None, None).expect("runtime");
    assert_eq!(large_stages(&small), ["precision"], "{small:?}");
}

#[test]
fn an_evaluation_that_would_not_fit_twice_holds_the_large_evaluation_claim_to_its_end() {
    let Some((claims, codes)) = sized(TRIAL_BYTES, Some(2 * EVALUATION_BYTES - 1), None) else {
        return;
    };
    let taken = claims
        .iter()
        .position(|(_, claim)| *claim == Claim::LargeEvaluation)
        .expect("the claim taken");
    // Taken in its own stage, right after the reference's reply, before the load's claim, and
    // given back only after the last claim of the evaluation.
    assert_eq!(taken, 1, "{claims:?}");
    assert_eq!(claims[taken].0, "large-claim", "{claims:?}");
    assert_eq!(
        claims.last().map(|(_, claim)| *claim),
        Some(Claim::LargeEvaluationDropped),
        "{claims:?}"
    );
    let held = claims.iter().filter(|(_, c)| *c == Claim::LargeEvaluation);
    assert_eq!(held.count(), 1, "{claims:?}");
    // Every share while it holds the claim goes ahead of waiting timed phases: the load's (which
    // carries the name of the stage before), the trials', the repeat's and the precision
    // measurement's.
    let holding = &claims[taken + 1..claims.len() - 1];
    assert!(
        holding.iter().all(|(_, claim)| *claim == Claim::Ahead),
        "{claims:?}"
    );
    for stage in ["trial_0", "trial_1", "repeat", "precision"] {
        assert!(
            holding.iter().any(|(s, _)| s == stage),
            "none in {stage}: {claims:?}"
        );
    }
    assert!(
        codes.iter().any(|c| c == "ran-one-large-at-a-time"),
        "{codes:?}"
    );
    // Where two fit, or with evaluations of nobody else beside it, it is not taken.
    for (sharing, memory) in [
        (DeviceSharing::Evaluations, 2 * EVALUATION_BYTES),
        (DeviceSharing::Nobody, 2 * EVALUATION_BYTES - 1),
    ] {
        let (claims, codes) = evaluated_with(|cfg| {
            cfg.device_sharing = sharing;
            cfg.large_work_bytes = TRIAL_BYTES;
            cfg.device_memory_bytes = Some(memory);
        })
        .expect("runtime");
        assert!(
            !claims.iter().any(|(_, c)| *c == Claim::LargeEvaluation),
            "{sharing:?} {memory}: {claims:?}"
        );
        assert!(
            !codes.iter().any(|c| c == "ran-one-large-at-a-time"),
            "{codes:?}"
        );
    }
}

/// The generalization plan runs nothing on the device, so it takes no share: with the repeat
/// and the precision measurement inside one exclusive claim (`exclusive_checks`), an evaluation
/// of a task that declares no generalization trial (the relu fixture, as KernelBench's files)
/// takes no claim after that one (a share for the plan waited for other evaluations' timed
/// phases, 0.56 s median per correct candidate on an H100 at N 4); with `Generalize::On` the
/// trial runs, and takes its share in its own stage.
#[test]
fn the_generalization_plan_takes_no_share_of_the_device_and_its_trial_does() {
    let checks_held = |generalize: Generalize| {
        claims_with(|cfg| {
            cfg.exclusive_checks = true;
            cfg.generalize = generalize;
        })
    };
    let (Some(auto), Some(on)) = (checks_held(Generalize::Auto), checks_held(Generalize::On))
    else {
        return;
    };
    let after_the_checks = |claims: &[(String, Claim)]| {
        let exclusive = claims
            .iter()
            .position(|(_, claim)| *claim == Claim::Exclusive)
            .expect("the checks' exclusive claim");
        claims[exclusive + 1..].to_vec()
    };
    assert_eq!(after_the_checks(&auto), [], "{auto:?}");
    assert_eq!(
        after_the_checks(&on),
        [("generalize".to_string(), Claim::Share)],
        "{on:?}"
    );
}

/// A trial after the first (whose candidate has compiled) and the repeat each take one share
/// for their prepare, run and check, where trial 0 takes one for each (and lets the run's go
/// while the candidate compiles): each share asked for while a timed phase waits waits for it.
#[test]
fn later_trials_and_the_repeat_take_one_share_each() {
    let Some(claims) = claims(u64::MAX) else {
        return;
    };
    let count = |stage: &str| claims.iter().filter(|(s, _)| s == stage).count();
    // Trial 0's prepare share carries the name of the stage before it (the load's).
    assert!(count("trial_0") >= 2, "{claims:?}");
    assert_eq!(count("trial_1"), 1, "{claims:?}");
    assert_eq!(count("repeat"), 1, "{claims:?}");
}

#[test]
fn a_trials_share_lets_a_waiting_timed_phase_go_first_between_its_prepare_run_and_check() {
    let Some((claims, _)) = evaluated(true, |cfg| cfg.large_work_bytes = u64::MAX) else {
        return;
    };
    let count = |stage: &str| claims.iter().filter(|(s, _)| s == stage).count();
    // Taken before the prepare, again after it and after the run: three where no timed
    // phase waits takes one (`later_trials_and_the_repeat_take_one_share_each`).
    assert_eq!(count("trial_1"), 3, "{claims:?}");
    assert_eq!(count("repeat"), 3, "{claims:?}");
    assert!(
        claims.iter().all(|(_, claim)| *claim != Claim::Large),
        "{claims:?}"
    );
}
