//! The generalization trial: one more trial with the task's module-level size constants
//! changed, so that a candidate that works only at the exact shapes of `get_inputs` (sizes or
//! strides hard-coded) shows.
//!
//! The referee (trusted) picks the values and first checks that the reference itself works at
//! them; the same candidate process builds a second `ModelNew` from the perturbed init inputs
//! and runs one trial exactly like the others (fresh seeded inputs, NaN-poisoned output slots,
//! frozen while the referee compares). Whatever goes wrong there, a crash included, is at most
//! the flag `shape-specialized`: KernelBench fixes the shapes, and the correctness trials have
//! already passed.

use std::path::Path;
use std::time::Instant;

use crucible_result::{
    Failure, FailureClass, Finding, Generalization, GeneralizationStatus, PerturbedConstant, Seeds,
    Severity, Stage, StageStatus, Trial,
};

use super::calls::{candidate_call, referee_call};
use super::record::{output_error, own_launches};
use super::{Evaluation, Stop, splitmix64};
use crate::process::HarnessProcess;
use crate::protocol::{
    CandidateRequest, CheckReply, Done, GeneralizePlanReply, GeneralizeReply, PrepareReply,
    RefereeRequest, RunReply,
};

/// Whether the generalization trial runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Generalize {
    /// For tasks that declare `GENERALIZE` (the builtin suite does); KernelBench files do not.
    #[default]
    Auto,
    /// For every task that does not opt out with `GENERALIZE = False`.
    On,
    Off,
}

impl Generalize {
    pub fn parse(name: &str) -> Option<Generalize> {
        match name {
            "auto" => Some(Generalize::Auto),
            "on" => Some(Generalize::On),
            "off" => Some(Generalize::Off),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Generalize::Auto => "auto",
            Generalize::On => "on",
            Generalize::Off => "off",
        }
    }
}

/// The stage's name, and the referee's key for the trial's buffers.
const STAGE: &str = "generalize";

/// The finding a candidate gets for failing the trial.
pub const SHAPE_SPECIALIZED: &str = "shape-specialized";

/// The seed of the trial's inputs: derived from the base seed, so `--seed` replays it, and
/// unlike any correctness trial's.
fn trial_seed(seeds: &Seeds) -> u64 {
    let mut state = seeds.base ^ 0x6765_6e65_7261_6c69;
    splitmix64(&mut state) & ((1u64 << 53) - 1)
}

/// How the trial ended.
enum Outcome {
    Passed(Trial),
    Skipped {
        reason: String,
        opted_out: bool,
    },
    Failed {
        message: String,
        trial: Option<Trial>,
        /// The candidate process died or hung: nothing is left to time.
        lost: bool,
    },
}

/// Runs the generalization trial when it is asked for, after the correctness trials passed.
/// Returns whether the candidate process is still usable.
pub(super) fn generalize_stage(
    eval: &mut Evaluation<'_>,
    referee: &mut HarnessProcess,
    candidate: &mut HarnessProcess,
    task_abs: &Path,
) -> Result<bool, Stop> {
    let cfg = eval.cfg;
    if cfg.generalize == Generalize::Off {
        return Ok(true);
    }
    let started = Instant::now();
    let request = RefereeRequest::GeneralizePlan {
        mode: cfg.generalize.name().to_string(),
    };
    let plan: GeneralizePlanReply = referee_call(referee, &request, cfg.limits.load)?;
    if !plan.requested {
        return Ok(true);
    }
    // Its stage record is written here (its status is not the trial's outcome), but watchers
    // (the engine's current stage, its probes) learn of it as of any other stage.
    if let Some(observer) = &cfg.stage_observer {
        observer.stage_started(STAGE);
    }
    let mut record = Generalization {
        status: GeneralizationStatus::Skipped,
        source: plan.source.clone().unwrap_or_else(|| "auto".into()),
        constants: plan
            .constants
            .iter()
            .map(|c| PerturbedConstant {
                name: c.name.clone(),
                from: c.from,
                to: c.to,
            })
            .collect(),
        trial: None,
        message: None,
    };
    let outcome = {
        let _gpu = super::session::untimed_gpu_work(eval);
        attempt(eval, referee, candidate, task_abs, &plan)?
    };
    let (status, diagnostics, usable) = record_outcome(eval, &mut record, outcome);
    eval.stages.push(Stage {
        name: STAGE.to_string(),
        status,
        duration_s: started.elapsed().as_secs_f64(),
        diagnostics,
    });
    eval.generalization = Some(record);
    Ok(usable)
}

/// Writes the trial's outcome into `record` and the findings; returns the stage's status and
/// diagnostics and whether the candidate process is still usable.
fn record_outcome(
    eval: &mut Evaluation<'_>,
    record: &mut Generalization,
    outcome: Outcome,
) -> (StageStatus, Vec<String>, bool) {
    let changed = describe_constants(&record.constants);
    match outcome {
        Outcome::Passed(trial) => {
            record.status = GeneralizationStatus::Passed;
            record.trial = Some(trial);
            (StageStatus::Ok, vec![], true)
        }
        Outcome::Skipped { reason, opted_out } => {
            record.message = Some(reason.clone());
            if !opted_out {
                eval.findings.push(Finding::new(
                    "generalization-skipped",
                    Severity::Info,
                    format!("the generalization trial did not run: {reason}"),
                ));
            }
            (StageStatus::Skipped, vec![reason], true)
        }
        Outcome::Failed {
            message,
            trial,
            lost,
        } => {
            record.status = GeneralizationStatus::Failed;
            record.trial = trial;
            record.message = Some(message.clone());
            eval.findings.push(Finding::new(
                SHAPE_SPECIALIZED,
                Severity::Flag,
                format!(
                    "correct at the task's sizes, but not when its size constants change \
                     ({changed}): {message}\nKernelBench fixes the shapes, so this is a flag, not \
                     a reject; take sizes and strides from the inputs (x.shape, x.stride()) and \
                     mask partial blocks instead of hard-coding them"
                ),
            ));
            if lost {
                eval.timing_blocked = Some(format!(
                    "the candidate process did not survive the generalization trial ({changed}), \
                     so none was left to time"
                ));
            }
            (StageStatus::Failed, vec![message], !lost)
        }
    }
}

/// The trial itself. Only the referee's failures are errors; the candidate's are outcomes.
fn attempt(
    eval: &Evaluation<'_>,
    referee: &mut HarnessProcess,
    candidate: &mut HarnessProcess,
    task_abs: &Path,
    plan: &GeneralizePlanReply,
) -> Result<Outcome, Stop> {
    let (cfg, seeds) = (eval.cfg, &eval.seeds);
    if let Some(reason) = &plan.skip {
        return Ok(Outcome::Skipped {
            reason: reason.clone(),
            opted_out: plan.opted_out,
        });
    }
    let seed = trial_seed(seeds);
    let request = RefereeRequest::Generalize {
        task_path: task_abs.to_path_buf(),
        init_seed: seeds.init,
        seed,
    };
    let setup: GeneralizeReply =
        referee_call(referee, &request, cfg.limits.load + cfg.limits.trial)?;
    let init_inputs = match (setup.skip, setup.init_inputs) {
        (None, Some(init_inputs)) => init_inputs,
        (reason, _) => {
            return Ok(Outcome::Skipped {
                reason: reason.unwrap_or_else(|| "the referee built no init inputs".into()),
                opted_out: false,
            });
        }
    };
    let reload = CandidateRequest::Reload {
        stage: STAGE.into(),
        init_seed: seeds.init,
        init_inputs,
    };
    if let Err(stop) = candidate_call::<Done>(candidate, STAGE, &reload, cfg.limits.load) {
        return candidate_failed(stop);
    }
    let prepare = RefereeRequest::PrepareGeneralized {
        trial: STAGE.into(),
        seed,
    };
    let prepared: PrepareReply = referee_call(referee, &prepare, cfg.limits.trial)?;
    let run = CandidateRequest::RunGeneralized {
        stage: STAGE.into(),
        trial: STAGE.into(),
        payload: prepared.payload,
        grad: false,
    };
    let ran: RunReply = match candidate_call(candidate, STAGE, &run, cfg.limits.trial) {
        Ok(ran) => ran,
        Err(stop) => return candidate_failed(stop),
    };
    let check = RefereeRequest::Check {
        trial: STAGE.into(),
        keep: false,
        against_kept: false,
        precision: false,
    };
    candidate.freeze(true);
    let checked = referee_call(referee, &check, cfg.limits.trial);
    candidate.freeze(false);
    let checked: CheckReply = checked?;
    let problems = trial_problems(&ran, &checked);
    let outputs = checked.outputs.iter().map(output_error).collect();
    let message = (!problems.is_empty()).then(|| problems.join("\n"));
    let trial = Trial {
        seed,
        passed: problems.is_empty(),
        outputs,
        message: message.clone(),
        repeat_of: None,
    };
    Ok(match message {
        None => Outcome::Passed(trial),
        Some(message) => Outcome::Failed {
            message,
            trial: Some(trial),
            lost: false,
        },
    })
}

/// A candidate failure in this stage is an outcome (at most a flag), a referee failure stays
/// the judge's.
fn candidate_failed(stop: Stop) -> Result<Outcome, Stop> {
    match stop {
        Stop::Candidate(failure) => Ok(Outcome::Failed {
            message: failure_text(&failure),
            trial: None,
            lost: process_lost(failure.class),
        }),
        infra => Err(infra),
    }
}

/// Whether a failure leaves the candidate process unusable for the stages after this one: it
/// died, it was killed at the deadline, or (on a GPU) its CUDA context is broken and the harness
/// has exited.
fn process_lost(class: FailureClass) -> bool {
    matches!(
        class,
        FailureClass::Crashed | FailureClass::Timeout | FailureClass::CudaError
    )
}

fn failure_text(failure: &Failure) -> String {
    let class = serde_json::to_value(failure.class)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    format!("{class}: {}", failure.message.trim_end())
}

/// Everything wrong with the trial. The correctness trials turn some of these into rejects;
/// here every one of them only says the candidate does not generalize.
fn trial_problems(ran: &RunReply, checked: &CheckReply) -> Vec<String> {
    let mut problems: Vec<String> = match &ran.problem {
        Some(problem) => vec![problem.clone()],
        None => checked.problems.clone(),
    };
    if !checked.mutated_inputs.is_empty() {
        problems.push(format!(
            "forward wrote into its input(s) {:?}",
            checked.mutated_inputs
        ));
    }
    if !checked.changed_after_return.is_empty() {
        problems.push("the outputs changed after forward returned".to_string());
    }
    if !ran.aliased_outputs.is_empty() {
        problems.push("forward returned one of its inputs as an output".to_string());
    }
    if own_launches(&ran.launches).is_empty() {
        problems.push(
            "forward launched none of the file's own @triton.jit kernels at these sizes (a \
             fallback for shapes the kernel does not handle?)"
                .to_string(),
        );
    }
    problems
}

/// `batch_size 8 -> 3, dim 64 -> 63`.
fn describe_constants(constants: &[PerturbedConstant]) -> String {
    constants
        .iter()
        .map(|c| format!("{} {} -> {}", c.name, c.from, c.to))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip() {
        for mode in [Generalize::Auto, Generalize::On, Generalize::Off] {
            assert_eq!(Generalize::parse(mode.name()), Some(mode));
        }
        assert_eq!(Generalize::parse("yes"), None);
    }

    #[test]
    fn the_trial_seed_is_replayable_and_not_a_trial_seed() {
        let seeds = super::super::derive_seeds(7, 5);
        assert_eq!(trial_seed(&seeds), trial_seed(&seeds));
        assert!(!seeds.trials.contains(&trial_seed(&seeds)));
        assert!(trial_seed(&seeds) < 1 << 53);
        assert_ne!(
            trial_seed(&seeds),
            trial_seed(&super::super::derive_seeds(8, 5))
        );
    }

    #[test]
    fn only_a_dead_or_hung_process_blocks_timing() {
        assert!(process_lost(FailureClass::Crashed));
        assert!(process_lost(FailureClass::Timeout));
        assert!(process_lost(FailureClass::CudaError));
        assert!(!process_lost(FailureClass::RuntimeError));
        assert!(!process_lost(FailureClass::Incorrect));
    }
}
