//! The one error type of the crate.

use std::path::PathBuf;

/// Everything that can go wrong in this crate. Row numbers are 0-based positions in the batch
/// as given; callers that read a file add its path (the `io` functions already do).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The judge itself failed. Such a result carries no information about the candidate, so
    /// it has no reward: the caller must drop the sample instead of scoring it.
    #[error(
        "the judge failed on this sample (verdict infra_error); drop the sample, do not score it"
    )]
    InfraError,
    /// The service's `timeout` for a task whose deadline passed before its evaluation ended:
    /// the candidate was not judged, so, like an `infra_error`, the sample has no reward.
    #[error(
        "the task's deadline passed before the judge finished (a service timeout, not the candidate's); drop the sample, do not score it"
    )]
    NotJudged,
    #[error(
        "unknown reward recipe `{0}` (expected one of: drkernel, weighted, tiered, hierarchical)"
    )]
    UnknownRecipe(String),
    #[error("invalid {name} = {value}: {why}")]
    InvalidParam {
        name: &'static str,
        value: String,
        why: &'static str,
    },
    #[error("row {row} (0-based): prompt `{prompt}` sample {sample} turn {turn} appears twice")]
    DuplicateTurn {
        row: usize,
        prompt: String,
        sample: u32,
        turn: u32,
    },
    #[error(
        "row {row} (0-based): prompt `{prompt}` sample {sample} has turn {turn} but not turn {missing}; turns must run 0, 1, 2, ..."
    )]
    TurnGap {
        row: usize,
        prompt: String,
        sample: u32,
        turn: u32,
        missing: u32,
    },
    #[error(
        "row {row} (0-based): reward is null (or NaN) and no recipe was given to compute it from judge_result"
    )]
    MissingReward { row: usize },
    #[error("row {row} (0-based): reward {value} is not a finite number")]
    BadReward { row: usize, value: f64 },
    #[error("row {row} (0-based): judge_result is not a crucible.result document: {source}")]
    BadJudgeResult {
        row: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("row {row} (0-based): MRS needs train_logprobs, but the column is null")]
    MissingTrainLogprobs { row: usize },
    #[error("row {row} (0-based): {what} has {got} entries but rollout_logprobs has {expected}")]
    LengthMismatch {
        row: usize,
        what: &'static str,
        got: usize,
        expected: usize,
    },
    #[error("prompt ids `{0}` and `{1}` hash to the same key; rename one")]
    PromptKeyCollision(String, String),
    #[error("{}: cannot tell the format from the extension (use .parquet or .jsonl)", path.display())]
    UnknownFormat { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}: not a trajectory record: {source}", path.display())]
    JsonLine {
        path: PathBuf,
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}: {source}", path.display())]
    Parquet {
        path: PathBuf,
        #[source]
        source: parquet::errors::ParquetError,
    },
    #[error("{}: {source}", path.display())]
    Arrow {
        path: PathBuf,
        #[source]
        source: arrow_schema::ArrowError,
    },
    #[error("{}: column `{column}`: {problem}", path.display())]
    Column {
        path: PathBuf,
        column: &'static str,
        problem: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
