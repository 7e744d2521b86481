//! The SFT set: trajectories whose final kernel is correct, honest (no `reject` or `flag`
//! finding) and at least `min_speedup` times the reference, as chat conversations (the final
//! turn's prompt and its response), in JSONL and Parquet with a `messages` column of
//! `{role, content}` structs, the form `datasets.load_dataset` and TRL's `SFTTrainer` read.
//! Duplicates (the same final code, whitespace aside) are kept once, the fastest per task first,
//! at most `per_task` per task.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, Float64Array, ListArray, RecordBatch, StringArray, StructArray, UInt32Array,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields, Schema};
use crucible_result::Severity;
use crucible_rl::reward::SpeedupBasis;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::client::Message;
use crate::episode::TurnRecord;
use crate::error::{Error, Result};
use crate::store::Episodes;

#[derive(Debug, Clone)]
pub struct Filter {
    /// Least speedup on `basis`; at 0 or below an untimed (CPU) result passes too.
    pub min_speedup: f64,
    pub basis: SpeedupBasis,
    pub per_task: usize,
}

/// One SFT example.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Example {
    pub messages: Vec<Message>,
    pub task: String,
    pub level: String,
    pub sample: u32,
    pub turn: u32,
    pub speedup: Option<f64>,
    pub speedup_matched: Option<f64>,
    pub code_sha256: String,
}

/// Why episodes were left out, and how many were kept.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    pub episodes: usize,
    pub kept: usize,
    pub no_final_kernel: usize,
    pub incorrect: usize,
    pub dishonest: usize,
    pub slow: usize,
    pub duplicate: usize,
    pub over_cap: usize,
}

enum Verdict {
    Keep(f64),
    NoKernel,
    Incorrect,
    Dishonest,
    Slow,
}

fn judge_final(last: &TurnRecord, f: &Filter) -> Verdict {
    let Some(result) = last.result.as_ref().filter(|_| last.code.is_some()) else {
        return Verdict::NoKernel;
    };
    if !result.correct {
        return Verdict::Incorrect;
    }
    let dishonest = last.is_hack()
        || result
            .findings
            .iter()
            .any(|x| matches!(x.severity, Severity::Reject | Severity::Flag));
    if dishonest {
        return Verdict::Dishonest;
    }
    match last.speedup(f.basis) {
        Some(s) if s >= f.min_speedup => Verdict::Keep(s),
        None if f.min_speedup <= 0.0 => Verdict::Keep(0.0),
        _ => Verdict::Slow,
    }
}

/// Code with trailing spaces and blank lines ignored, hashed.
fn code_key(code: &str) -> String {
    let normal: Vec<&str> = code
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    let digest = Sha256::digest(normal.join("\n").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Selects the examples of `episodes` under `f`.
pub fn select(episodes: &Episodes, f: &Filter) -> (Vec<Example>, Tally) {
    let mut tally = Tally::default();
    let mut by_task: BTreeMap<&str, Vec<(f64, &TurnRecord)>> = BTreeMap::new();
    for turns in episodes.values() {
        tally.episodes += 1;
        let Some(last) = turns.last() else { continue };
        match judge_final(last, f) {
            Verdict::Keep(s) => by_task.entry(&last.task).or_default().push((s, last)),
            Verdict::NoKernel => tally.no_final_kernel += 1,
            Verdict::Incorrect => tally.incorrect += 1,
            Verdict::Dishonest => tally.dishonest += 1,
            Verdict::Slow => tally.slow += 1,
        }
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (_, mut kept) in by_task {
        // Fastest first; ties by sample, so the choice is deterministic.
        kept.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.sample.cmp(&b.1.sample)));
        let mut taken = 0;
        for (_, t) in kept {
            let key = code_key(t.code.as_deref().unwrap_or_default());
            if !seen.insert(key.clone()) {
                tally.duplicate += 1;
            } else if taken >= f.per_task {
                tally.over_cap += 1;
            } else {
                taken += 1;
                out.push(example(t, key));
            }
        }
    }
    tally.kept = out.len();
    (out, tally)
}

fn example(t: &TurnRecord, code_sha256: String) -> Example {
    let mut messages = t.messages.clone();
    messages.push(Message::assistant(t.response.clone()));
    Example {
        messages,
        task: t.task.clone(),
        level: t.level.clone(),
        sample: t.sample,
        turn: t.turn,
        speedup: t.speedup(SpeedupBasis::Fp32),
        speedup_matched: t.speedup(SpeedupBasis::Matched),
        code_sha256,
    }
}

pub fn write_jsonl(path: &Path, examples: &[Example]) -> Result<()> {
    let mut text = String::new();
    for e in examples {
        text.push_str(&serde_json::to_string(e).map_err(|x| Error::output(path)(x.to_string()))?);
        text.push('\n');
    }
    std::fs::write(path, text).map_err(Error::io(path))
}

pub fn write_parquet(path: &Path, examples: &[Example]) -> Result<()> {
    let err = |x: String| Error::output(path)(x);
    let batch = to_batch(examples).map_err(|x| err(x.to_string()))?;
    let file = std::fs::File::create(path).map_err(Error::io(path))?;
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .build();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(props))
        .map_err(|x| err(x.to_string()))?;
    writer.write(&batch).map_err(|x| err(x.to_string()))?;
    writer.close().map_err(|x| err(x.to_string()))?;
    Ok(())
}

fn to_batch(examples: &[Example]) -> std::result::Result<RecordBatch, arrow_schema::ArrowError> {
    let message_fields = Fields::from(vec![
        Field::new("role", DataType::Utf8, false),
        Field::new("content", DataType::Utf8, false),
    ]);
    let all: Vec<&Message> = examples.iter().flat_map(|e| &e.messages).collect();
    let structs = StructArray::try_new(
        message_fields.clone(),
        vec![
            Arc::new(StringArray::from_iter_values(all.iter().map(|m| &m.role))),
            Arc::new(StringArray::from_iter_values(
                all.iter().map(|m| &m.content),
            )),
        ],
        None,
    )?;
    let item = Arc::new(Field::new("item", DataType::Struct(message_fields), true));
    let messages = ListArray::try_new(
        item.clone(),
        OffsetBuffer::from_lengths(examples.iter().map(|e| e.messages.len())),
        Arc::new(structs),
        None,
    )?;
    let strs = |f: fn(&Example) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(examples.iter().map(f)))
    };
    let floats = |f: fn(&Example) -> Option<f64>| -> ArrayRef {
        Arc::new(Float64Array::from_iter(examples.iter().map(f)))
    };
    let ints = |f: fn(&Example) -> u32| -> ArrayRef {
        Arc::new(UInt32Array::from_iter_values(examples.iter().map(f)))
    };
    let schema = Arc::new(Schema::new(vec![
        Field::new("messages", DataType::List(item), false),
        Field::new("task", DataType::Utf8, false),
        Field::new("level", DataType::Utf8, false),
        Field::new("sample", DataType::UInt32, false),
        Field::new("turn", DataType::UInt32, false),
        Field::new("speedup", DataType::Float64, true),
        Field::new("speedup_matched", DataType::Float64, true),
        Field::new("code_sha256", DataType::Utf8, false),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(messages),
            strs(|e| &e.task),
            strs(|e| &e.level),
            ints(|e| e.sample),
            ints(|e| e.turn),
            floats(|e| e.speedup),
            floats(|e| e.speedup_matched),
            strs(|e| &e.code_sha256),
        ],
    )
}
