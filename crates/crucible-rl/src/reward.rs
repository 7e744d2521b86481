//! Scalar rewards from one judge result, one named recipe each.
//!
//! Every recipe first reduces the result to an [`Outcome`] (what happened, plus the measured
//! speedup and coverage), then scores it. An `infra_error` result never reaches a recipe: it is
//! [`Error::InfraError`], and the caller must drop the sample.
//!
//! The speedup a recipe scores is, by default, `speedup_matched`: against the reference run at the
//! candidate's measured precision class, so that computing an fp32 task in fp16 or TF32 is not
//! rewarded as a faster kernel. A result without it (no timing, or no precision measurement)
//! falls back to `speedup`. [`SpeedupBasis::Fp32`] scores `speedup` always.
//!
//! A null speedup (no timing was taken, e.g. a CPU-only correctness run) means "no measured
//! speedup": the speed term is 0 in `drkernel`, `weighted` and `hierarchical`, and the below-1
//! tier (−0.1) in `tiered`. A non-finite or non-positive speedup is treated as null, since no real
//! measurement produces one. A null coverage counts as 0; coverage is clamped to [0, 1].
//!
//! Every recipe can take `shape_specialized_penalty` P (default 0, i.e. off): a correct result
//! with the flag `shape-specialized` (it failed the judge's generalization trial at other task
//! sizes) scores P less. With the default every reward is what the recipe alone gives.

use crucible_result::{EvalResult, Severity, Verdict};

use crate::error::{Error, Result};

/// The judge's finding for a candidate that fails its generalization trial.
pub const SHAPE_SPECIALIZED: &str = "shape-specialized";
/// Which of a result's speedups a recipe scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpeedupBasis {
    /// `speedup_matched` (against the reference at the candidate's measured precision class),
    /// or `speedup` when the result has none.
    #[default]
    Matched,
    /// `speedup`: against the reference as the task runs it (fp32 for an fp32 task).
    Fp32,
}

impl SpeedupBasis {
    pub const NAMES: [&'static str; 2] = ["matched", "fp32"];

    pub fn from_name(name: &str) -> Option<SpeedupBasis> {
        match name {
            "matched" => Some(SpeedupBasis::Matched),
            "fp32" => Some(SpeedupBasis::Fp32),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SpeedupBasis::Matched => "matched",
            SpeedupBasis::Fp32 => "fp32",
        }
    }

    /// The speedup of `result` on this basis (unfiltered).
    pub fn speedup(self, result: &EvalResult) -> Option<f64> {
        match self {
            SpeedupBasis::Matched => result.speedup_matched.or(result.speedup),
            SpeedupBasis::Fp32 => result.speedup,
        }
    }
}

/// What a judge result says about the candidate, in the terms the recipes use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Rejected by the verifier or a runtime defense (verdict `rejected`, or any finding of
    /// severity `reject`, e.g. `no-triton-launch` for a decoy kernel). Checked before anything
    /// else: a hack that also "passed" is still a hack.
    Hack,
    CompileError,
    /// `runtime_error`, `timeout` or `crashed`: the kernel built but produced no answer.
    RuntimeFailure,
    Incorrect,
    Correct,
}

/// A judge result reduced to what the recipes read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub kind: Kind,
    /// Finite and positive, or `None`.
    pub speedup: Option<f64>,
    /// In [0, 1], or `None`.
    pub coverage: Option<f64>,
    /// The judge flagged the candidate `shape-specialized`: correct at the task's sizes only.
    pub shape_specialized: bool,
}

impl Outcome {
    /// Classifies `result`, with the default (matched) speedup. Fails with
    /// [`Error::InfraError`] for `infra_error`, and [`Error::NotJudged`] for the service's
    /// deadline `timeout`, before looking at anything else, so that neither is ever charged to
    /// the candidate.
    pub fn from_result(result: &EvalResult) -> Result<Outcome> {
        Outcome::from_result_with(result, SpeedupBasis::default())
    }

    /// [`Outcome::from_result`] with the speedup taken on `basis`.
    pub fn from_result_with(result: &EvalResult, basis: SpeedupBasis) -> Result<Outcome> {
        let kind = match result.verdict {
            Verdict::InfraError => return Err(Error::InfraError),
            Verdict::Timeout if result.deadline_passed() => return Err(Error::NotJudged),
            _ if is_hack(result) => Kind::Hack,
            Verdict::CompileError => Kind::CompileError,
            Verdict::RuntimeError | Verdict::Timeout | Verdict::Crashed => Kind::RuntimeFailure,
            Verdict::Incorrect => Kind::Incorrect,
            // The verdict and the flag must agree; a document where they do not is not trusted
            // to be correct.
            Verdict::Correct if result.correct => Kind::Correct,
            Verdict::Correct => Kind::Incorrect,
            Verdict::Rejected => Kind::Hack,
        };
        Ok(Outcome {
            kind,
            speedup: basis.speedup(result).filter(|s| s.is_finite() && *s > 0.0),
            coverage: result
                .coverage
                .filter(|c| c.is_finite())
                .map(|c| c.clamp(0.0, 1.0)),
            shape_specialized: result.findings.iter().any(|f| f.code == SHAPE_SPECIALIZED),
        })
    }

    pub fn is_correct(&self) -> bool {
        self.kind == Kind::Correct
    }

    /// `penalty` for a correct but shape-specialized result, else 0.
    fn specialization_penalty(&self, penalty: f64) -> f64 {
        if self.is_correct() && self.shape_specialized {
            penalty
        } else {
            0.0
        }
    }

    fn speedup_or_zero(&self) -> f64 {
        self.speedup.unwrap_or(0.0)
    }

    fn coverage_or_zero(&self) -> f64 {
        self.coverage.unwrap_or(0.0)
    }
}

/// A hack or decoy: verdict `rejected`, or any finding of severity `reject`.
pub fn is_hack(result: &EvalResult) -> bool {
    result.verdict == Verdict::Rejected
        || result
            .findings
            .iter()
            .any(|f| f.severity == Severity::Reject)
}

/// Dr. Kernel's shipped recipe: 0 for any failure, rejection or decoy; otherwise
/// `0.5·correct + 0.5·min(speedup, cap) + 0.5·coverage·correct` (here `correct` is 1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DrKernel {
    /// Speedup cap; 3.0 in the recipe.
    pub speedup_cap: f64,
    /// Subtracted from a correct, shape-specialized result; 0 (off) by default.
    pub shape_specialized_penalty: f64,
    pub speedup: SpeedupBasis,
}

impl Default for DrKernel {
    fn default() -> Self {
        DrKernel {
            speedup_cap: 3.0,
            shape_specialized_penalty: 0.0,
            speedup: SpeedupBasis::default(),
        }
    }
}

impl DrKernel {
    pub fn score(&self, o: &Outcome) -> f64 {
        if !o.is_correct() {
            return 0.0;
        }
        0.5 + 0.5 * o.speedup_or_zero().min(self.speedup_cap) + 0.5 * o.coverage_or_zero()
            - o.specialization_penalty(self.shape_specialized_penalty)
    }
}

/// `0.5·correct + 0.5·[speedup ≥ threshold] + w·coverage`. Hacks score 0, and the speed and
/// coverage terms count only for correct results, so a wrong kernel earns nothing for being fast
/// or for launching Triton.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weighted {
    /// `w`, the coverage weight.
    pub coverage_weight: f64,
    /// 1.01 in the recipe: a speedup within timing noise of 1 does not count.
    pub speedup_threshold: f64,
    /// Subtracted from a correct, shape-specialized result; 0 (off) by default.
    pub shape_specialized_penalty: f64,
    pub speedup: SpeedupBasis,
}

impl Default for Weighted {
    fn default() -> Self {
        Weighted {
            coverage_weight: 0.5,
            speedup_threshold: 1.01,
            shape_specialized_penalty: 0.0,
            speedup: SpeedupBasis::default(),
        }
    }
}

impl Weighted {
    pub fn score(&self, o: &Outcome) -> f64 {
        if !o.is_correct() {
            return 0.0;
        }
        let fast = o.speedup.is_some_and(|s| s >= self.speedup_threshold);
        0.5 + if fast { 0.5 } else { 0.0 } + self.coverage_weight * o.coverage_or_zero()
            - o.specialization_penalty(self.shape_specialized_penalty)
    }
}

/// Fixed penalties for failures, then a staircase on speedup for correct results.
#[derive(Debug, Clone, PartialEq)]
pub struct Tiered {
    pub hack: f64,
    pub compile_error: f64,
    /// `runtime_error`, `timeout`, `crashed`. The recipe names no value for these; they are
    /// charged like a compile failure because neither produced an answer.
    pub runtime_failure: f64,
    pub incorrect: f64,
    /// Correct but slower than the reference (or speedup unknown).
    pub below_one: f64,
    /// `(minimum speedup, reward)`, ascending by speedup.
    pub tiers: Vec<(f64, f64)>,
    /// Subtracted from a correct, shape-specialized result; 0 (off) by default.
    pub shape_specialized_penalty: f64,
    pub speedup: SpeedupBasis,
}

impl Default for Tiered {
    fn default() -> Self {
        Tiered {
            hack: -1.0,
            compile_error: -0.5,
            runtime_failure: -0.5,
            incorrect: -0.3,
            below_one: -0.1,
            tiers: vec![(1.0, 0.2), (1.2, 0.4), (1.5, 0.6), (2.0, 0.8), (3.0, 1.0)],
            shape_specialized_penalty: 0.0,
            speedup: SpeedupBasis::default(),
        }
    }
}

impl Tiered {
    pub fn score(&self, o: &Outcome) -> f64 {
        match o.kind {
            Kind::Hack => self.hack,
            Kind::CompileError => self.compile_error,
            Kind::RuntimeFailure => self.runtime_failure,
            Kind::Incorrect => self.incorrect,
            Kind::Correct => {
                let s = o.speedup_or_zero();
                self.tiers
                    .iter()
                    .rev()
                    .find(|(min, _)| s >= *min)
                    .map_or(self.below_one, |(_, r)| *r)
                    - o.specialization_penalty(self.shape_specialized_penalty)
            }
        }
    }
}

/// TritonRL's hierarchical reward: one reward for the plan (reasoning) segment of a response and
/// one for the code segment.
///
/// - plan = syntax · functional · [correct and speedup > threshold]: a plan is only good if the
///   kernel it led to is faster.
/// - code = syntax · functional · correct.
///
/// `syntax` is "not a compile failure" and `functional` is "not a hack". The scalar reward is
/// `alpha·plan + (1 − alpha)·code`; the segment boundary only decides which tokens a trainer gives
/// which reward (see [`Hierarchical::split`]). A shape-specialization penalty P is taken from
/// both segments, so the total drops by exactly P, as in the other recipes.
#[derive(Debug, Clone, PartialEq)]
pub struct Hierarchical {
    /// Plan weight α in [0, 1].
    pub alpha: f64,
    /// The text that ends the plan segment, e.g. `</think>`.
    pub boundary: String,
    pub speedup_threshold: f64,
    /// Subtracted from both segments of a correct, shape-specialized result; 0 (off) by default.
    pub shape_specialized_penalty: f64,
    pub speedup: SpeedupBasis,
}

impl Default for Hierarchical {
    fn default() -> Self {
        Hierarchical {
            alpha: 0.5,
            boundary: "</think>".to_string(),
            speedup_threshold: 1.0,
            shape_specialized_penalty: 0.0,
            speedup: SpeedupBasis::default(),
        }
    }
}

/// Rewards of the two segments of one response.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SegmentRewards {
    pub plan: f64,
    pub code: f64,
    /// `alpha·plan + (1 − alpha)·code`.
    pub total: f64,
}

impl Hierarchical {
    pub fn segments(&self, o: &Outcome) -> SegmentRewards {
        let syntax = o.kind != Kind::CompileError;
        let functional = o.kind != Kind::Hack;
        let gate = if syntax && functional { 1.0 } else { 0.0 };
        let fast = o.is_correct() && o.speedup.is_some_and(|s| s > self.speedup_threshold);
        let penalty = o.specialization_penalty(self.shape_specialized_penalty);
        let plan = gate * if fast { 1.0 } else { 0.0 } - penalty;
        let code = gate * if o.is_correct() { 1.0 } else { 0.0 } - penalty;
        SegmentRewards {
            plan,
            code,
            total: self.alpha * plan + (1.0 - self.alpha) * code,
        }
    }

    /// Byte offset where the code segment starts: just after the first occurrence of the
    /// boundary. `None` when the response has no boundary; the whole response is then code.
    pub fn split(&self, response: &str) -> Option<usize> {
        if self.boundary.is_empty() {
            return None;
        }
        response
            .find(&self.boundary)
            .map(|at| at + self.boundary.len())
    }
}

/// A named, configured reward recipe.
#[derive(Debug, Clone, PartialEq)]
pub enum Recipe {
    DrKernel(DrKernel),
    Weighted(Weighted),
    Tiered(Tiered),
    Hierarchical(Hierarchical),
}

impl Recipe {
    pub const NAMES: [&'static str; 4] = ["drkernel", "weighted", "tiered", "hierarchical"];

    /// The recipe called `name`, with its default parameters.
    pub fn from_name(name: &str) -> Result<Recipe> {
        Ok(match name {
            "drkernel" => Recipe::DrKernel(DrKernel::default()),
            "weighted" => Recipe::Weighted(Weighted::default()),
            "tiered" => Recipe::Tiered(Tiered::default()),
            "hierarchical" => Recipe::Hierarchical(Hierarchical::default()),
            other => return Err(Error::UnknownRecipe(other.to_string())),
        })
    }

    /// Sets the penalty for a correct, shape-specialized result (any recipe).
    pub fn set_shape_specialized_penalty(&mut self, penalty: f64) {
        match self {
            Recipe::DrKernel(r) => r.shape_specialized_penalty = penalty,
            Recipe::Weighted(r) => r.shape_specialized_penalty = penalty,
            Recipe::Tiered(r) => r.shape_specialized_penalty = penalty,
            Recipe::Hierarchical(r) => r.shape_specialized_penalty = penalty,
        }
    }

    pub fn shape_specialized_penalty(&self) -> f64 {
        match self {
            Recipe::DrKernel(r) => r.shape_specialized_penalty,
            Recipe::Weighted(r) => r.shape_specialized_penalty,
            Recipe::Tiered(r) => r.shape_specialized_penalty,
            Recipe::Hierarchical(r) => r.shape_specialized_penalty,
        }
    }

    /// The speedup this recipe scores.
    pub fn speedup_basis(&self) -> SpeedupBasis {
        match self {
            Recipe::DrKernel(r) => r.speedup,
            Recipe::Weighted(r) => r.speedup,
            Recipe::Tiered(r) => r.speedup,
            Recipe::Hierarchical(r) => r.speedup,
        }
    }

    pub fn set_speedup_basis(&mut self, basis: SpeedupBasis) {
        match self {
            Recipe::DrKernel(r) => r.speedup = basis,
            Recipe::Weighted(r) => r.speedup = basis,
            Recipe::Tiered(r) => r.speedup = basis,
            Recipe::Hierarchical(r) => r.speedup = basis,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Recipe::DrKernel(_) => "drkernel",
            Recipe::Weighted(_) => "weighted",
            Recipe::Tiered(_) => "tiered",
            Recipe::Hierarchical(_) => "hierarchical",
        }
    }

    /// Checks parameters that would make rewards meaningless (NaN, α outside [0, 1]).
    pub fn validate(&self) -> Result<()> {
        let check = |name: &'static str, v: f64, ok: bool, why: &'static str| {
            if v.is_finite() && ok {
                Ok(())
            } else {
                Err(Error::InvalidParam {
                    name,
                    value: v.to_string(),
                    why,
                })
            }
        };
        let penalty = self.shape_specialized_penalty();
        check(
            "shape_specialized_penalty",
            penalty,
            penalty >= 0.0,
            "must be zero or positive",
        )?;
        match self {
            Recipe::DrKernel(r) => check(
                "speedup_cap",
                r.speedup_cap,
                r.speedup_cap > 0.0,
                "must be positive",
            ),
            Recipe::Weighted(r) => {
                check("coverage_weight", r.coverage_weight, true, "must be finite")?;
                check(
                    "speedup_threshold",
                    r.speedup_threshold,
                    true,
                    "must be finite",
                )
            }
            Recipe::Tiered(r) => {
                let ascending = r.tiers.windows(2).all(|w| w[0].0 < w[1].0);
                for &(min, reward) in &r.tiers {
                    check(
                        "tier speedup",
                        min,
                        ascending,
                        "tiers must be finite and ascending",
                    )?;
                    check("tier reward", reward, true, "must be finite")?;
                }
                Ok(())
            }
            Recipe::Hierarchical(r) => {
                check(
                    "alpha",
                    r.alpha,
                    (0.0..=1.0).contains(&r.alpha),
                    "must lie in [0, 1]",
                )?;
                check(
                    "speedup_threshold",
                    r.speedup_threshold,
                    true,
                    "must be finite",
                )
            }
        }
    }

    /// The scalar reward of `result`. For `hierarchical` this is the α-weighted total.
    pub fn reward(&self, result: &EvalResult) -> Result<f64> {
        Ok(self.score(&self.outcome(result)?))
    }

    /// `result` reduced to an [`Outcome`], with the speedup this recipe scores.
    pub fn outcome(&self, result: &EvalResult) -> Result<Outcome> {
        Outcome::from_result_with(result, self.speedup_basis())
    }

    /// The scalar reward of an already classified outcome.
    pub fn score(&self, o: &Outcome) -> f64 {
        match self {
            Recipe::DrKernel(r) => r.score(o),
            Recipe::Weighted(r) => r.score(o),
            Recipe::Tiered(r) => r.score(o),
            Recipe::Hierarchical(r) => r.segments(o).total,
        }
    }

    /// The reward of a turn that produced no kernel at all (no judge result): the same as a
    /// kernel that does not compile, so that saying nothing never beats trying.
    pub fn void_reward(&self) -> f64 {
        self.score(&Outcome {
            kind: Kind::CompileError,
            speedup: None,
            coverage: None,
            shape_specialized: false,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crucible_result::{Env, FileRef, Finding, Seeds, Tolerance};

    /// A minimal valid result document with the fields the recipes read.
    pub(crate) fn result(
        verdict: Verdict,
        speedup: Option<f64>,
        coverage: Option<f64>,
    ) -> EvalResult {
        let file = |name: &str| FileRef {
            name: name.into(),
            path: name.into(),
            sha256: "0".repeat(64),
        };
        EvalResult {
            schema: crucible_result::SCHEMA.into(),
            verdict,
            correct: verdict == Verdict::Correct,
            speedup,
            speedup_matched: None,
            speedup_matched_class: None,
            timing: None,
            timing_skipped: None,
            coverage,
            precision: None,
            profile: None,
            failure: None,
            findings: vec![],
            stages: vec![],
            seeds: Seeds {
                base: 0,
                init: 0,
                trials: vec![],
                timing: 0,
            },
            tolerance: Tolerance {
                profile: "kb-v0".into(),
                atol: 1e-2,
                rtol: 1e-2,
            },
            size_profile: "full".into(),
            trials: vec![],
            generalization: None,
            launches: vec![],
            task: file("task.py"),
            candidate: file("cand.py"),
            env: Env::default(),
            wall_s: 1.0,
        }
    }

    fn decoy() -> EvalResult {
        let mut r = result(Verdict::Correct, Some(2.0), Some(0.9));
        r.findings.push(Finding {
            code: "no-triton-launch".into(),
            severity: Severity::Reject,
            message: "no Triton kernel ran".into(),
            line: None,
            column: None,
        });
        r
    }

    fn reward(name: &str, r: &EvalResult) -> f64 {
        Recipe::from_name(name).unwrap().reward(r).unwrap()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn drkernel_hand_computed() {
        // 0.5 + 0.5*2 + 0.5*0.8 = 1.9
        assert!(close(
            reward("drkernel", &result(Verdict::Correct, Some(2.0), Some(0.8))),
            1.9
        ));
        // speedup capped at 3: 0.5 + 1.5 + 0.5*0.5 = 2.25
        assert!(close(
            reward("drkernel", &result(Verdict::Correct, Some(10.0), Some(0.5))),
            2.25
        ));
        for v in [
            Verdict::Incorrect,
            Verdict::CompileError,
            Verdict::RuntimeError,
            Verdict::Timeout,
            Verdict::Crashed,
            Verdict::Rejected,
        ] {
            assert_eq!(reward("drkernel", &result(v, Some(2.0), Some(0.9))), 0.0);
        }
        assert_eq!(reward("drkernel", &decoy()), 0.0);
    }

    #[test]
    fn weighted_hand_computed() {
        // 0.5 + 0.5 + 0.5*0.4 = 1.2
        assert!(close(
            reward("weighted", &result(Verdict::Correct, Some(1.01), Some(0.4))),
            1.2
        ));
        // 1.009 is below the threshold: 0.5 + 0 + 0.5*0.4 = 0.7
        assert!(close(
            reward(
                "weighted",
                &result(Verdict::Correct, Some(1.009), Some(0.4))
            ),
            0.7
        ));
        let custom = Recipe::Weighted(Weighted {
            coverage_weight: 0.25,
            ..Weighted::default()
        });
        let r = custom
            .reward(&result(Verdict::Correct, Some(1.5), Some(1.0)))
            .unwrap();
        assert!(close(r, 1.25));
        assert_eq!(
            reward(
                "weighted",
                &result(Verdict::Incorrect, Some(5.0), Some(1.0))
            ),
            0.0
        );
        assert_eq!(reward("weighted", &decoy()), 0.0);
    }

    #[test]
    fn tiered_hand_computed() {
        let t = |v, s| reward("tiered", &result(v, s, Some(0.5)));
        assert_eq!(t(Verdict::CompileError, None), -0.5);
        assert_eq!(t(Verdict::Incorrect, None), -0.3);
        assert_eq!(t(Verdict::RuntimeError, None), -0.5);
        assert_eq!(t(Verdict::Timeout, None), -0.5);
        assert_eq!(t(Verdict::Rejected, None), -1.0);
        assert_eq!(reward("tiered", &decoy()), -1.0);
        let cases = [
            (0.99, -0.1),
            (1.0, 0.2),
            (1.19, 0.2),
            (1.2, 0.4),
            (1.5, 0.6),
            (1.99, 0.6),
            (2.0, 0.8),
            (3.0, 1.0),
            (50.0, 1.0),
        ];
        for (s, want) in cases {
            assert_eq!(t(Verdict::Correct, Some(s)), want, "speedup {s}");
        }
    }

    #[test]
    fn hierarchical_hand_computed() {
        let h = Hierarchical {
            alpha: 0.3,
            ..Hierarchical::default()
        };
        let seg = |r: &EvalResult| h.segments(&Outcome::from_result(r).unwrap());
        let fast = seg(&result(Verdict::Correct, Some(1.5), None));
        assert_eq!((fast.plan, fast.code), (1.0, 1.0));
        assert!(close(fast.total, 1.0));
        let slow = seg(&result(Verdict::Correct, Some(0.8), None));
        assert_eq!((slow.plan, slow.code), (0.0, 1.0));
        assert!(close(slow.total, 0.7));
        let wrong = seg(&result(Verdict::Incorrect, None, None));
        assert_eq!((wrong.plan, wrong.code), (0.0, 0.0));
        let hack = seg(&decoy());
        assert_eq!((hack.plan, hack.code), (0.0, 0.0));

        assert_eq!(h.split("plan here</think>code"), Some(17));
        assert_eq!(&"plan here</think>code"[17..], "code");
        assert_eq!(h.split("just code"), None);
        let custom = Hierarchical {
            boundary: "### CODE".into(),
            ..Hierarchical::default()
        };
        assert_eq!(custom.split("think ### CODE\nx"), Some(14));
    }

    #[test]
    fn null_speedup_is_no_speed_term() {
        let cpu = result(Verdict::Correct, None, None);
        assert!(close(reward("drkernel", &cpu), 0.5));
        assert!(close(reward("weighted", &cpu), 0.5));
        assert_eq!(reward("tiered", &cpu), -0.1);
        assert!(close(reward("hierarchical", &cpu), 0.5));
        // Non-finite speedups are not measurements: same as null.
        for s in [f64::NAN, f64::INFINITY, -1.0, 0.0] {
            let r = result(Verdict::Correct, Some(s), Some(f64::NAN));
            assert!(close(reward("drkernel", &r), 0.5), "speedup {s}");
            assert_eq!(reward("tiered", &r), -0.1, "speedup {s}");
        }
    }

    fn specialized(verdict: Verdict, speedup: Option<f64>) -> EvalResult {
        let mut r = result(verdict, speedup, Some(0.8));
        r.findings.push(Finding {
            code: SHAPE_SPECIALIZED.into(),
            severity: Severity::Flag,
            message: "fails at other sizes".into(),
            line: None,
            column: None,
        });
        r
    }

    #[test]
    fn shape_specialization_costs_nothing_by_default() {
        for name in Recipe::NAMES {
            let recipe = Recipe::from_name(name).unwrap();
            for speedup in [None, Some(0.8), Some(2.0)] {
                let plain = recipe
                    .reward(&result(Verdict::Correct, speedup, Some(0.8)))
                    .unwrap();
                let flagged = recipe
                    .reward(&specialized(Verdict::Correct, speedup))
                    .unwrap();
                assert_eq!(plain, flagged, "{name}, speedup {speedup:?}");
            }
        }
    }

    #[test]
    fn a_penalty_lowers_only_correct_specialized_results_by_exactly_p() {
        for name in Recipe::NAMES {
            let plain = Recipe::from_name(name).unwrap();
            let mut penalised = plain.clone();
            penalised.set_shape_specialized_penalty(0.25);
            assert!(penalised.validate().is_ok());
            for speedup in [None, Some(0.8), Some(2.0)] {
                let base = plain
                    .reward(&specialized(Verdict::Correct, speedup))
                    .unwrap();
                let got = penalised
                    .reward(&specialized(Verdict::Correct, speedup))
                    .unwrap();
                assert!(close(got, base - 0.25), "{name}: {got} vs {base} - 0.25");
                // Unflagged results are untouched.
                let clean = result(Verdict::Correct, speedup, Some(0.8));
                assert_eq!(
                    penalised.reward(&clean).unwrap(),
                    plain.reward(&clean).unwrap()
                );
            }
            // A wrong result is not specialized, it is wrong: no double charge.
            let wrong = specialized(Verdict::Incorrect, None);
            assert_eq!(
                penalised.reward(&wrong).unwrap(),
                plain.reward(&wrong).unwrap(),
                "{name}"
            );
        }
        // Tiered, by hand: correct at 1.5x is 0.6, specialized 0.6 - 0.25.
        let mut tiered = Recipe::from_name("tiered").unwrap();
        tiered.set_shape_specialized_penalty(0.25);
        let r = tiered
            .reward(&specialized(Verdict::Correct, Some(1.5)))
            .unwrap();
        assert!(close(r, 0.35));
        let mut bad = Recipe::from_name("drkernel").unwrap();
        bad.set_shape_specialized_penalty(-1.0);
        assert!(bad.validate().is_err());
        bad.set_shape_specialized_penalty(f64::NAN);
        assert!(bad.validate().is_err());
    }

    #[test]
    fn the_matched_speedup_is_scored_by_default() {
        // fp16 in an fp32 task: 5x against the fp32 reference, 0.5x against it under autocast.
        let mut r = result(Verdict::Correct, Some(5.0), Some(1.0));
        r.speedup_matched = Some(0.5);
        r.speedup_matched_class = Some(crucible_result::PrecisionClass::Fp16);
        // 0.5 + 0.5*0.5 + 0.5*1 = 1.25; on the fp32 basis 0.5 + 0.5*3 + 0.5 = 2.5.
        assert!(close(reward("drkernel", &r), 1.25));
        assert_eq!(reward("tiered", &r), -0.1);
        let mut fp32 = Recipe::from_name("drkernel").unwrap();
        fp32.set_speedup_basis(SpeedupBasis::Fp32);
        assert_eq!(fp32.speedup_basis(), SpeedupBasis::Fp32);
        assert!(close(fp32.reward(&r).unwrap(), 2.5));
        let mut tiered = Recipe::from_name("tiered").unwrap();
        tiered.set_speedup_basis(SpeedupBasis::Fp32);
        assert_eq!(tiered.reward(&r).unwrap(), 1.0);
        // Without a matched speedup (no precision measurement) the plain one counts.
        let plain = result(Verdict::Correct, Some(2.0), Some(1.0));
        assert!(close(reward("drkernel", &plain), 2.0));
        for name in SpeedupBasis::NAMES {
            assert_eq!(SpeedupBasis::from_name(name).unwrap().name(), name);
        }
        assert_eq!(SpeedupBasis::from_name("fp16"), None);
    }

    #[test]
    fn infra_error_is_never_scored() {
        let infra = result(Verdict::InfraError, None, None);
        for name in Recipe::NAMES {
            let err = Recipe::from_name(name).unwrap().reward(&infra).unwrap_err();
            assert!(matches!(err, Error::InfraError), "{name}");
        }
    }

    #[test]
    fn a_service_deadline_is_never_scored_but_a_judge_timeout_is() {
        let timed_out = |stage: &str| {
            let mut r = result(Verdict::Timeout, None, None);
            r.failure = Some(crucible_result::Failure {
                class: crucible_result::FailureClass::Timeout,
                stage: stage.to_string(),
                message: "deadline".into(),
            });
            r
        };
        for stage in [
            crucible_result::DEADLINE_STAGE_QUEUED,
            crucible_result::DEADLINE_STAGE_RUNNING,
        ] {
            for name in Recipe::NAMES {
                let err = Recipe::from_name(name)
                    .unwrap()
                    .reward(&timed_out(stage))
                    .unwrap_err();
                assert!(matches!(err, Error::NotJudged), "{name} {stage}");
            }
        }
        // The candidate's own code ran into a stage deadline: charged.
        let judged = Outcome::from_result(&timed_out("trial_0")).unwrap();
        assert_eq!(judged.kind, Kind::RuntimeFailure);
    }

    #[test]
    fn correct_verdict_with_false_flag_is_not_correct() {
        let mut r = result(Verdict::Correct, Some(2.0), Some(1.0));
        r.correct = false;
        assert_eq!(Outcome::from_result(&r).unwrap().kind, Kind::Incorrect);
    }

    #[test]
    fn void_reward_matches_compile_failure() {
        assert_eq!(Recipe::from_name("tiered").unwrap().void_reward(), -0.5);
        assert_eq!(Recipe::from_name("drkernel").unwrap().void_reward(), 0.0);
    }

    #[test]
    fn names_round_trip_and_bad_params_are_refused() {
        for name in Recipe::NAMES {
            assert_eq!(Recipe::from_name(name).unwrap().name(), name);
        }
        assert!(matches!(
            Recipe::from_name("nope"),
            Err(Error::UnknownRecipe(_))
        ));
        let bad = Recipe::Hierarchical(Hierarchical {
            alpha: 1.5,
            ..Hierarchical::default()
        });
        assert!(bad.validate().is_err());
        let bad = Recipe::Tiered(Tiered {
            tiers: vec![(2.0, 0.1), (1.0, 0.2)],
            ..Tiered::default()
        });
        assert!(bad.validate().is_err());
    }
}
