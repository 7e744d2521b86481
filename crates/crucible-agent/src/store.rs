//! The run directory: `run.json` (the settings that decide what a turn is) and `records.jsonl`
//! (append-only, one [`TurnRecord`] per line, flushed as each turn ends). Resuming reads the
//! records back, keyed by (task, sample, turn); a last line cut by the interruption is dropped.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::episode::TurnRecord;
use crate::error::{Error, Result};

pub const RECORDS: &str = "records.jsonl";
pub const MANIFEST: &str = "run.json";

/// The settings a resumed run must share with the run it continues.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub suite: String,
    pub model: String,
    pub turns: u32,
    pub samples: u32,
    pub history: crate::episode::History,
    pub recipe: String,
    pub sampling: crate::client::Sampling,
    pub feedback_tokens: usize,
}

/// Turns of one episode, in turn order, keyed by (task, sample).
pub type Episodes = BTreeMap<(String, u32), Vec<TurnRecord>>;

pub struct Store {
    path: PathBuf,
    file: Mutex<File>,
}

impl Store {
    /// Opens `dir` for a run with `manifest`, creating it, or checking that an earlier run there
    /// had the same settings; returns the store and the turns already recorded.
    pub fn open(dir: &Path, manifest: &Manifest) -> Result<(Store, Episodes)> {
        std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
        check_manifest(dir, manifest)?;
        let path = dir.join(RECORDS);
        let (records, good_len) = if path.exists() {
            read_records(&path)?
        } else {
            (Vec::new(), 0)
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(Error::io(&path))?;
        // Drop a cut last line, so the next record starts on a line of its own.
        file.set_len(good_len).map_err(Error::io(&path))?;
        Ok((
            Store {
                path,
                file: Mutex::new(file),
            },
            group(records),
        ))
    }

    /// Appends one turn and flushes it.
    pub fn append(&self, record: &TurnRecord) -> Result<()> {
        let mut line =
            serde_json::to_string(record).map_err(|e| Error::output(&self.path)(e.to_string()))?;
        line.push('\n');
        let mut file = self
            .file
            .lock()
            .map_err(|_| Error::output(&self.path)("a writer panicked".into()))?;
        file.write_all(line.as_bytes())
            .and_then(|()| file.flush())
            .map_err(Error::io(&self.path))
    }
}

fn check_manifest(dir: &Path, manifest: &Manifest) -> Result<()> {
    let path = dir.join(MANIFEST);
    if path.exists() {
        let text = std::fs::read_to_string(&path).map_err(Error::io(&path))?;
        let earlier: Manifest = serde_json::from_str(&text).map_err(|source| Error::BadRecord {
            path: path.clone(),
            line: 1,
            source,
        })?;
        if &earlier != manifest {
            return Err(Error::ResumeMismatch {
                path,
                what: differences(&earlier, manifest),
            });
        }
        return Ok(());
    }
    let text =
        serde_json::to_string_pretty(manifest).map_err(|e| Error::output(&path)(e.to_string()))?;
    std::fs::write(&path, text).map_err(Error::io(&path))
}

fn differences(a: &Manifest, b: &Manifest) -> String {
    let (a, b) = (
        serde_json::to_value(a).unwrap_or_default(),
        serde_json::to_value(b).unwrap_or_default(),
    );
    let mut out = Vec::new();
    if let (Some(a), Some(b)) = (a.as_object(), b.as_object()) {
        for (k, va) in a {
            if b.get(k) != Some(va) {
                out.push(format!(
                    "{k}: {va} then, {} now",
                    b.get(k).unwrap_or(&serde_json::Value::Null)
                ));
            }
        }
    }
    out.join("; ")
}

/// Reads every complete record; returns them and the byte length of the good prefix.
pub fn read_records(path: &Path) -> Result<(Vec<TurnRecord>, u64)> {
    let file = File::open(path).map_err(Error::io(path))?;
    let mut reader = BufReader::new(file);
    let mut records = Vec::new();
    let mut good_len = 0u64;
    let mut line = String::new();
    let mut number = 0;
    loop {
        line.clear();
        let n = reader.read_line(&mut line).map_err(Error::io(path))?;
        if n == 0 {
            break;
        }
        number += 1;
        if !line.ends_with('\n') {
            // The interruption cut the last line: drop it, its turn runs again.
            tracing::warn!("{}: dropping a cut last line {number}", path.display());
            break;
        }
        let record = serde_json::from_str::<TurnRecord>(line.trim_end()).map_err(|source| {
            Error::BadRecord {
                path: path.to_path_buf(),
                line: number,
                source,
            }
        })?;
        records.push(record);
        good_len += n as u64;
    }
    Ok((records, good_len))
}

/// Groups records by episode, turns in order; a turn recorded twice keeps its first record.
pub fn group(records: Vec<TurnRecord>) -> Episodes {
    let mut episodes = Episodes::new();
    for r in records {
        episodes
            .entry((r.task.clone(), r.sample))
            .or_default()
            .push(r);
    }
    for turns in episodes.values_mut() {
        turns.sort_by_key(|t| t.turn);
        turns.dedup_by_key(|t| t.turn);
        // Only an unbroken prefix 0, 1, 2, ... is an episode's history.
        let prefix = turns
            .iter()
            .enumerate()
            .take_while(|(i, t)| t.turn as usize == *i)
            .count();
        turns.truncate(prefix);
    }
    episodes
}
