//! The judge options a task carries, and how they become the judge's configuration.

use crucible_judge::{EvalConfig, Generalize, ToleranceProfile, VerifyPolicy};

/// How the judge should run one evaluation: the queue's type, carried by every task.
pub use crucible_queue::JudgeOptions;

/// The most correctness trials a task may ask for.
pub const MAX_TRIALS: u32 = 100;

/// Options a task may not carry; the API can refuse them at submission with this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    #[error("trials must be 1..={MAX_TRIALS}, got {0}")]
    Trials(u32),
    #[error("unknown tolerance profile `{0}` (kb-v0, strict)")]
    Tolerance(String),
    #[error("unknown generalize setting `{0}` (auto, on, off)")]
    Generalize(String),
    #[error("verify policy: {0}")]
    VerifyPolicy(String),
}

/// Applies `options` to `cfg` (which holds the engine's defaults).
pub fn apply(options: &JudgeOptions, cfg: &mut EvalConfig) -> Result<(), OptionsError> {
    if let Some(trials) = options.trials {
        if !(1..=MAX_TRIALS).contains(&trials) {
            return Err(OptionsError::Trials(trials));
        }
        cfg.trials = trials;
    }
    cfg.seed = options.seed.or(cfg.seed);
    if let Some(profile) = &options.size_profile {
        cfg.size_profile = Some(profile.clone());
    }
    if options.timing == Some(false) {
        cfg.timing = None;
    }
    if let Some(name) = &options.tolerance {
        cfg.tolerance =
            ToleranceProfile::parse(name).ok_or_else(|| OptionsError::Tolerance(name.clone()))?;
    }
    if let Some(name) = &options.generalize {
        cfg.generalize =
            Generalize::parse(name).ok_or_else(|| OptionsError::Generalize(name.clone()))?;
    }
    if let Some(name) = &options.verify_policy {
        // Presets only: a task never names a file on the worker's disk.
        let policy =
            VerifyPolicy::preset(name).map_err(|e| OptionsError::VerifyPolicy(e.to_string()))?;
        cfg.verify_policy = Some(policy);
    }
    Ok(())
}

/// Whether a task may carry `options` (the checks `apply` makes, without a configuration).
pub fn check(options: &JudgeOptions) -> Result<(), OptionsError> {
    apply(options, &mut EvalConfig::new(crucible_judge::Device::Cpu))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_keep_the_configuration_and_bad_names_are_refused() {
        let mut cfg = EvalConfig::new(crucible_judge::Device::Cpu);
        apply(&JudgeOptions::default(), &mut cfg).expect("defaults apply");
        assert_eq!(cfg.trials, 5);
        let bad = |options: JudgeOptions| check(&options).is_err();
        assert!(bad(JudgeOptions {
            trials: Some(0),
            ..Default::default()
        }));
        assert!(bad(JudgeOptions {
            tolerance: Some("loose".into()),
            ..Default::default()
        }));
        assert!(bad(JudgeOptions {
            generalize: Some("maybe".into()),
            ..Default::default()
        }));
        assert!(bad(JudgeOptions {
            verify_policy: Some("/etc/passwd".into()),
            ..Default::default()
        }));
        let mut cfg = EvalConfig::new(crucible_judge::Device::Cpu);
        let options = JudgeOptions {
            trials: Some(3),
            seed: Some(7),
            timing: Some(false),
            tolerance: Some("strict".into()),
            ..Default::default()
        };
        apply(&options, &mut cfg).expect("valid options apply");
        assert_eq!((cfg.trials, cfg.seed), (3, Some(7)));
        assert!(cfg.timing.is_none());
        assert_eq!(cfg.tolerance, ToleranceProfile::Strict);
    }
}
