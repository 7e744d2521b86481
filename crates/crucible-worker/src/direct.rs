//! A stand-in evaluator that runs the plain judge (a fresh referee and candidate per task) until
//! the warm `Engine` is wired in; also what `crucible worker --cold` runs, to compare the two.

use std::time::Instant;

use crucible_judge::{
    Device, EvalConfig, Generalize, Runtime, StageLimits, TimingConfig, ToleranceProfile,
};
use crucible_queue::{JudgeOptions, Lease};
use crucible_result::EvalResult;

use crate::run::Evaluator;

/// Judges each task in fresh processes with `crucible_judge::evaluate`.
pub struct DirectEvaluator {
    runtime: Runtime,
    device: Device,
    versions: String,
}

impl DirectEvaluator {
    pub fn new(runtime: Runtime, device: Device) -> DirectEvaluator {
        let versions = format!("crucible {} direct {device}", env!("CARGO_PKG_VERSION"));
        DirectEvaluator {
            runtime,
            device,
            versions,
        }
    }
}

/// The judge configuration a task's options ask for, on this device.
pub fn eval_config(device: Device, options: &JudgeOptions) -> EvalConfig {
    let mut cfg = EvalConfig::new(device);
    cfg.seed = options.seed;
    if let Some(trials) = options.trials {
        cfg.trials = trials.clamp(1, 1000);
    }
    if let Some(tolerance) = options
        .tolerance
        .as_deref()
        .and_then(ToleranceProfile::parse)
    {
        cfg.tolerance = tolerance;
    }
    cfg.size_profile.clone_from(&options.size_profile);
    if let Some(generalize) = options.generalize.as_deref().and_then(Generalize::parse) {
        cfg.generalize = generalize;
    }
    if options.timing == Some(false) {
        cfg.timing = None;
    } else if cfg.timing.is_none() {
        cfg.timing = Some(TimingConfig::default());
    }
    match options.verify_policy.as_deref() {
        Some("off") => cfg.verify_policy = None,
        Some(name) => {
            if let Ok(policy) = crucible_judge::VerifyPolicy::preset(name) {
                cfg.verify_policy = Some(policy);
            }
        }
        None => {}
    }
    cfg
}

impl Evaluator for DirectEvaluator {
    fn versions(&self) -> String {
        self.versions.clone()
    }

    fn evaluate(&self, lease: &Lease, deadline: Option<Instant>) -> Result<EvalResult, String> {
        let mut cfg = eval_config(self.device, &lease.spec.options);
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            cfg.limits =
                StageLimits::uniform(self.device, left.max(std::time::Duration::from_secs(1)));
        }
        let scratch = match tempfile::tempdir() {
            Ok(dir) => dir,
            Err(err) => return Err(format!("scratch directory: {err}")),
        };
        let name = safe_file_name(&lease.spec.task_name);
        let task_path = scratch.path().join(format!("{name}.py"));
        let candidate_path = scratch.path().join(format!("{name}_candidate.py"));
        if let Err(err) = std::fs::write(&task_path, &lease.spec.task_source)
            .and_then(|()| std::fs::write(&candidate_path, &lease.spec.candidate_source))
        {
            return Err(format!("writing the task files: {err}"));
        }
        Ok(crucible_judge::evaluate(
            &self.runtime,
            &task_path,
            lease.spec.task_source.as_bytes(),
            &candidate_path,
            lease.spec.candidate_source.as_bytes(),
            &cfg,
        ))
    }
}

fn safe_file_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if cleaned.is_empty() {
        "task".into()
    } else {
        cleaned
    }
}
