//! Episodes as the RL core's trajectory rows (`crucible.trajectory/1`): one row per turn, the
//! judge's result as JSON text, a void turn where no code was found, a rollout error where the
//! model server gave up. Rewards, returns, masks and advantages come from
//! [`crucible_rl::record::process`], so the masking rules are the RL core's own.

use std::path::Path;

use crucible_rl::advantage::{Config, Summary};
use crucible_rl::{Recipe, TrajectoryRecord};
use serde::Serialize;

use crate::client::Message;
use crate::error::{Error, Result};
use crate::store::Episodes;

/// The trajectory rows of `episodes`, before rewards and advantages.
pub fn rows(episodes: &Episodes) -> Vec<TrajectoryRecord> {
    episodes
        .values()
        .flatten()
        .map(|t| TrajectoryRecord {
            prompt_id: t.task.clone(),
            sample: t.sample,
            turn: t.turn,
            response: t.response.clone(),
            rollout_logprobs: t.logprobs.clone(),
            judge_result: t
                .result
                .as_ref()
                .and_then(|r| serde_json::to_string(r).ok()),
            truncated: t.finish_reason.as_deref() == Some("length"),
            error: t.error.clone(),
            ..TrajectoryRecord::default()
        })
        .collect()
}

/// What a trainer needs beside a row: the prompt the turn was generated from.
#[derive(Serialize)]
struct PromptRow<'a> {
    prompt_id: &'a str,
    sample: u32,
    turn: u32,
    messages: &'a [Message],
}

/// Scores and writes the trajectories to `out` (Parquet or JSONL by extension), and the
/// prompts beside them as `<out stem>.prompts.jsonl`; returns the RL core's summary.
pub fn write(
    episodes: &Episodes,
    recipe: &Recipe,
    cfg: &Config,
    out: &Path,
) -> Result<(Vec<TrajectoryRecord>, Summary)> {
    let mut rows = rows(episodes);
    let summary = crucible_rl::record::process(&mut rows, Some(recipe), cfg)?;
    crucible_rl::io::write(out, &rows)?;
    let prompts = out.with_extension("prompts.jsonl");
    let mut text = String::new();
    for t in episodes.values().flatten() {
        let row = PromptRow {
            prompt_id: &t.task,
            sample: t.sample,
            turn: t.turn,
            messages: &t.messages,
        };
        let line =
            serde_json::to_string(&row).map_err(|e| Error::output(&prompts)(e.to_string()))?;
        text.push_str(&line);
        text.push('\n');
    }
    std::fs::write(&prompts, text).map_err(Error::io(&prompts))?;
    Ok((rows, summary))
}
