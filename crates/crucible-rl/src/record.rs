//! The trajectory row trainers exchange (`crucible.trajectory/1`, documented in
//! `docs/trajectory-schema.md`), and the glue from rows to [`advantage::compute`].

use std::collections::HashMap;

use crucible_result::EvalResult;
use serde::{Deserialize, Deserializer, Serialize};

use crate::advantage::{self, Config, Reason, Summary, TurnInput};
use crate::error::{Error, Result};
use crate::reward::{Outcome, Recipe};
use crate::sampling::{LogRatio, prompt_key};

/// The schema tag stored in Parquet metadata under [`SCHEMA_KEY`].
pub const SCHEMA: &str = "crucible.trajectory/1";
pub const SCHEMA_KEY: &str = "crucible.schema";

/// One turn of one sample of one prompt. The first block of fields is rollout input; the last
/// five (`reward` aside, which may be given) are written by [`process`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrajectoryRecord {
    pub prompt_id: String,
    pub sample: u32,
    pub turn: u32,
    #[serde(default)]
    pub response: String,
    #[serde(default)]
    pub token_ids: Vec<u32>,
    /// Per-token log-probs under the rollout engine, aligned with `token_ids`.
    #[serde(default)]
    pub rollout_logprobs: Vec<f32>,
    /// Per-token log-probs under the trainer; needed only for MRS.
    #[serde(default)]
    pub train_logprobs: Option<Vec<f32>>,
    /// The judge's `crucible.result/1` document as JSON text; null for a void turn (no kernel).
    /// In JSONL an embedded object is accepted too.
    #[serde(default, deserialize_with = "json_text")]
    pub judge_result: Option<String>,
    #[serde(default)]
    pub truncated: bool,
    /// A rollout-side failure (generation crashed, tool timed out): masks the whole episode.
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub reward: Option<f64>,
    /// Discounted return `G_t`.
    #[serde(default, rename = "return")]
    pub ret: Option<f64>,
    #[serde(default)]
    pub advantage: Option<f64>,
    /// Loss weight, 1 or 0.
    #[serde(default)]
    pub weight: Option<f64>,
    /// Why `weight` is 0 (see [`Reason`]).
    #[serde(default)]
    pub mask_reason: Option<String>,
}

/// Accepts a JSON string or an embedded JSON value, keeping it as text.
fn json_text<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<String>, D::Error> {
    Ok(match Option::<serde_json::Value>::deserialize(d)? {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(s)) => Some(s),
        Some(v) => Some(v.to_string()),
    })
}

/// Turns records into estimator inputs.
///
/// With a recipe, rewards are recomputed from `judge_result` (a void turn gets
/// [`Recipe::void_reward`]); without one, the `reward` column is used as given. A turn is
/// errored when its verdict is `infra_error` or its `error` is set, whatever its reward says.
/// Train/rollout log-ratios are computed when `with_log_ratio` (MRS) is set.
pub fn turn_inputs(
    records: &[TrajectoryRecord],
    recipe: Option<&Recipe>,
    with_log_ratio: bool,
) -> Result<Vec<TurnInput>> {
    let keys = prompt_keys(records)?;
    records
        .iter()
        .zip(keys)
        .enumerate()
        .map(|(row, (r, prompt))| {
            let outcome = match &r.judge_result {
                None => None,
                Some(text) => {
                    let result: EvalResult = serde_json::from_str(text)
                        .map_err(|source| Error::BadJudgeResult { row, source })?;
                    let basis = recipe.map(Recipe::speedup_basis).unwrap_or_default();
                    match Outcome::from_result_with(&result, basis) {
                        Ok(o) => Some(Ok(o)),
                        Err(Error::InfraError | Error::NotJudged) => Some(Err(())),
                        Err(e) => return Err(e),
                    }
                }
            };
            let errored = r.error.is_some() || matches!(outcome, Some(Err(())));
            let outcome = outcome.and_then(|o| o.ok());
            let reward = match (recipe, &outcome) {
                (Some(rec), Some(o)) => rec.score(o),
                (Some(rec), None) => rec.void_reward(),
                // NaN reads as "missing" and is reported only if the turn is used.
                (None, _) => r.reward.unwrap_or(f64::NAN),
            };
            let log_ratio = if with_log_ratio {
                log_ratio(row, r)?
            } else {
                None
            };
            if !r.token_ids.is_empty()
                && !r.rollout_logprobs.is_empty()
                && r.token_ids.len() != r.rollout_logprobs.len()
            {
                return Err(Error::LengthMismatch {
                    row,
                    what: "token_ids",
                    got: r.token_ids.len(),
                    expected: r.rollout_logprobs.len(),
                });
            }
            Ok(TurnInput {
                prompt,
                sample: r.sample,
                turn: r.turn,
                reward,
                correct: outcome.is_some_and(|o| o.is_correct()),
                coverage: outcome.and_then(|o| o.coverage),
                void: r.judge_result.is_none(),
                errored,
                truncated: r.truncated,
                log_ratio,
            })
        })
        .collect()
}

fn log_ratio(row: usize, r: &TrajectoryRecord) -> Result<Option<LogRatio>> {
    let Some(train) = &r.train_logprobs else {
        return Ok(None);
    };
    if train.len() != r.rollout_logprobs.len() {
        return Err(Error::LengthMismatch {
            row,
            what: "train_logprobs",
            got: train.len(),
            expected: r.rollout_logprobs.len(),
        });
    }
    Ok(Some(LogRatio::from_logprobs(train, &r.rollout_logprobs)))
}

/// Stable keys of the prompt ids, refusing the (astronomically unlikely) collision.
fn prompt_keys(records: &[TrajectoryRecord]) -> Result<Vec<u64>> {
    let mut by_id: HashMap<&str, u64> = HashMap::new();
    let mut by_key: HashMap<u64, &str> = HashMap::new();
    let mut keys = Vec::with_capacity(records.len());
    for r in records {
        let key = *by_id
            .entry(&r.prompt_id)
            .or_insert_with(|| prompt_key(&r.prompt_id));
        if let Some(other) = by_key.insert(key, &r.prompt_id)
            && other != r.prompt_id
        {
            return Err(Error::PromptKeyCollision(other.into(), r.prompt_id.clone()));
        }
        keys.push(key);
    }
    Ok(keys)
}

/// Computes rewards (with a recipe), returns, masks, rejections and advantages, and writes them
/// into the records. With a recipe, `reward` is overwritten, and set to null on errored turns:
/// an infra failure has no reward.
pub fn process(
    records: &mut [TrajectoryRecord],
    recipe: Option<&Recipe>,
    cfg: &Config,
) -> Result<Summary> {
    let inputs = turn_inputs(records, recipe, cfg.mrs.is_some())?;
    let (outputs, summary) =
        advantage::compute(&inputs, cfg).map_err(|e| name_prompt(e, records))?;
    for ((rec, inp), out) in records.iter_mut().zip(&inputs).zip(&outputs) {
        if recipe.is_some() {
            rec.reward = Some(inp.reward).filter(|_| !inp.errored);
        }
        rec.ret = out.ret;
        rec.advantage = out.advantage;
        rec.weight = Some(out.weight);
        rec.mask_reason = out.reason.map(|r| Reason::as_str(r).to_string());
    }
    Ok(summary)
}

/// Replaces the hashed prompt key in layout errors by the prompt id.
fn name_prompt(e: Error, records: &[TrajectoryRecord]) -> Error {
    match e {
        Error::DuplicateTurn {
            row, sample, turn, ..
        } => Error::DuplicateTurn {
            row,
            prompt: records[row].prompt_id.clone(),
            sample,
            turn,
        },
        Error::TurnGap {
            row,
            sample,
            turn,
            missing,
            ..
        } => Error::TurnGap {
            row,
            prompt: records[row].prompt_id.clone(),
            sample,
            turn,
            missing,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advantage::Estimator;
    use crate::reward::tests::result;
    use crucible_result::Verdict;

    fn rec(prompt: &str, sample: u32, turn: u32, judge: Option<&EvalResult>) -> TrajectoryRecord {
        TrajectoryRecord {
            prompt_id: prompt.into(),
            sample,
            turn,
            judge_result: judge.map(|j| serde_json::to_string(j).unwrap()),
            ..TrajectoryRecord::default()
        }
    }

    #[test]
    fn process_scores_masks_and_fills_columns() {
        let ok = result(Verdict::Correct, Some(2.0), Some(0.8));
        let bad = result(Verdict::Incorrect, None, None);
        let infra = result(Verdict::InfraError, None, None);
        let mut rows = vec![
            rec("p", 0, 0, Some(&bad)),
            rec("p", 0, 1, Some(&ok)),
            rec("p", 1, 0, Some(&ok)),
            rec("p", 1, 1, None),
            rec("p", 2, 0, Some(&infra)),
        ];
        let recipe = Recipe::from_name("drkernel").unwrap();
        let s = process(&mut rows, Some(&recipe), &Config::new(Estimator::Trloo)).unwrap();
        assert_eq!((s.kept, s.masked, s.rejected), (3, 2, 0));
        // drkernel: correct → 0.5 + 1.0 + 0.4 = 1.9.
        assert_eq!(rows[0].reward, Some(0.0));
        assert_eq!(rows[1].reward, Some(1.9));
        assert_eq!(rows[4].reward, None);
        assert_eq!(rows[4].mask_reason.as_deref(), Some("episode_error"));
        assert_eq!(rows[3].mask_reason.as_deref(), Some("void_after_success"));
        assert_eq!(rows[3].weight, Some(0.0));
        // Turn 0 group {G=1.9 (0 + 1.9), G=1.9}: advantages 0.
        assert_eq!(rows[0].ret, Some(1.9));
        assert_eq!(rows[0].advantage, Some(0.0));
        // Turn 1 group {1.9} alone: A = G.
        assert_eq!(rows[1].advantage, Some(1.9));
    }

    #[test]
    fn batch_rewards_score_the_recipes_speedup_basis() {
        let mut fp16 = result(Verdict::Correct, Some(5.0), Some(1.0));
        fp16.speedup_matched = Some(0.5);
        let mut recipe = Recipe::from_name("drkernel").unwrap();
        let reward = |recipe: &Recipe| {
            let inputs = turn_inputs(&[rec("p", 0, 0, Some(&fp16))], Some(recipe), false).unwrap();
            inputs[0].reward
        };
        // matched: 0.5 + 0.5*0.5 + 0.5 = 1.25; fp32: 0.5 + 0.5*3 + 0.5 = 2.5.
        assert_eq!(reward(&recipe), 1.25);
        recipe.set_speedup_basis(crate::reward::SpeedupBasis::Fp32);
        assert_eq!(reward(&recipe), 2.5);
    }

    #[test]
    fn missing_reward_without_recipe_is_named() {
        let mut rows = vec![rec("p", 0, 0, None)];
        let err = process(&mut rows, None, &Config::new(Estimator::Trloo)).unwrap_err();
        assert!(matches!(err, Error::MissingReward { row: 0 }), "{err}");
        let mut rows = vec![rec("p", 0, 0, None), rec("p", 0, 0, None)];
        rows.iter_mut().for_each(|r| r.reward = Some(0.0));
        let err = process(&mut rows, None, &Config::new(Estimator::Trloo)).unwrap_err();
        assert!(
            err.to_string().contains("prompt `p` sample 0 turn 0"),
            "{err}"
        );
    }

    #[test]
    fn bad_judge_json_and_lengths_are_named() {
        let mut r = rec("p", 0, 0, None);
        r.judge_result = Some("{\"verdict\": 3}".into());
        assert!(matches!(
            turn_inputs(&[r], None, false),
            Err(Error::BadJudgeResult { row: 0, .. })
        ));
        let mut r = rec("p", 0, 0, None);
        r.rollout_logprobs = vec![-1.0, -2.0];
        r.train_logprobs = Some(vec![-1.0]);
        assert!(matches!(
            turn_inputs(&[r], None, true),
            Err(Error::LengthMismatch {
                what: "train_logprobs",
                ..
            })
        ));
    }

    #[test]
    fn jsonl_accepts_embedded_judge_object() {
        let line = r#"{"prompt_id":"p","sample":0,"turn":0,"judge_result":{"a":1}}"#;
        let r: TrajectoryRecord = serde_json::from_str(line).unwrap();
        assert_eq!(r.judge_result.as_deref(), Some(r#"{"a":1}"#));
        let typo = r#"{"prompt_id":"p","sample":0,"turn":0,"rewrad":1}"#;
        assert!(serde_json::from_str::<TrajectoryRecord>(typo).is_err());
    }
}
