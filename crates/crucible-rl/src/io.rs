//! Reading and writing [`TrajectoryRecord`]s as JSONL or Parquet; the format follows the file
//! extension. Every error names the file.
//!
//! Parquet is read leniently so that files written by pandas or pyarrow load as they are: any
//! integer width for `sample`, `turn` and `token_ids`, float32 or float64 for numbers, regular,
//! large or view strings and lists, and missing optional columns (null or empty). Columns this
//! schema does not know are skipped and reported in [`Loaded::ignored_columns`]. Parquet is
//! written with the exact types of `docs/trajectory-schema.md`, snappy-compressed.
//!
//! JSONL cannot carry NaN or infinities (JSON has no such numbers); use Parquet for those.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::builder::{Float32Builder, ListBuilder, UInt32Builder};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Float64Array, RecordBatch, StringArray, UInt32Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

use crate::error::{Error, Result};
use crate::record::{SCHEMA, SCHEMA_KEY, TrajectoryRecord};

/// Rows per Arrow batch when writing: bounds memory and keeps string offsets far below 2 GiB.
const WRITE_BATCH_ROWS: usize = 4096;

/// A file format, chosen by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Parquet,
}

impl Format {
    pub fn from_path(path: &Path) -> Result<Format> {
        match path.extension().and_then(|e| e.to_str()) {
            Some("jsonl" | "ndjson") => Ok(Format::Jsonl),
            Some("parquet" | "pq") => Ok(Format::Parquet),
            _ => Err(Error::UnknownFormat { path: path.into() }),
        }
    }
}

/// Records read from a file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Loaded {
    pub records: Vec<TrajectoryRecord>,
    /// Parquet columns outside the schema; they are not carried into written output.
    pub ignored_columns: Vec<String>,
}

pub fn read(path: &Path) -> Result<Loaded> {
    match Format::from_path(path)? {
        Format::Jsonl => Ok(Loaded {
            records: read_jsonl(path)?,
            ignored_columns: vec![],
        }),
        Format::Parquet => read_parquet(path),
    }
}

pub fn write(path: &Path, records: &[TrajectoryRecord]) -> Result<()> {
    match Format::from_path(path)? {
        Format::Jsonl => write_jsonl(path, records),
        Format::Parquet => write_parquet(path, records),
    }
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.into(),
        source,
    }
}

/// One record per line; blank lines are skipped.
pub fn read_jsonl(path: &Path) -> Result<Vec<TrajectoryRecord>> {
    let file = File::open(path).map_err(io_err(path))?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io_err(path))?;
        if line.trim().is_empty() {
            continue;
        }
        let rec = serde_json::from_str(&line).map_err(|source| Error::JsonLine {
            path: path.into(),
            line: i + 1,
            source,
        })?;
        out.push(rec);
    }
    Ok(out)
}

pub fn write_jsonl(path: &Path, records: &[TrajectoryRecord]) -> Result<()> {
    let file = File::create(path).map_err(io_err(path))?;
    let mut w = BufWriter::new(file);
    for r in records {
        serde_json::to_writer(&mut w, r).map_err(|e| Error::Io {
            path: path.into(),
            source: e.into(),
        })?;
        w.write_all(b"\n").map_err(io_err(path))?;
    }
    w.flush().map_err(io_err(path))
}

/// The Arrow schema written to Parquet.
pub fn arrow_schema() -> SchemaRef {
    // `item`, nullable: the element field Arrow's list builders (and pyarrow) use.
    let list = |t| DataType::List(Arc::new(Field::new("item", t, true)));
    let fields = vec![
        Field::new("prompt_id", DataType::Utf8, false),
        Field::new("sample", DataType::UInt32, false),
        Field::new("turn", DataType::UInt32, false),
        Field::new("response", DataType::Utf8, false),
        Field::new("token_ids", list(DataType::UInt32), false),
        Field::new("rollout_logprobs", list(DataType::Float32), false),
        Field::new("train_logprobs", list(DataType::Float32), true),
        Field::new("judge_result", DataType::Utf8, true),
        Field::new("truncated", DataType::Boolean, false),
        Field::new("error", DataType::Utf8, true),
        Field::new("reward", DataType::Float64, true),
        Field::new("return", DataType::Float64, true),
        Field::new("advantage", DataType::Float64, true),
        Field::new("weight", DataType::Float64, true),
        Field::new("mask_reason", DataType::Utf8, true),
    ];
    let meta = std::collections::HashMap::from([(SCHEMA_KEY.to_string(), SCHEMA.to_string())]);
    Arc::new(Schema::new(fields).with_metadata(meta))
}

pub fn write_parquet(path: &Path, records: &[TrajectoryRecord]) -> Result<()> {
    let arrow_err = |source| Error::Arrow {
        path: path.into(),
        source,
    };
    let pq_err = |source| Error::Parquet {
        path: path.into(),
        source,
    };
    let schema = arrow_schema();
    let file = File::create(path).map_err(io_err(path))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut writer = ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(pq_err)?;
    for chunk in records.chunks(WRITE_BATCH_ROWS) {
        let batch = to_batch(&schema, chunk).map_err(arrow_err)?;
        writer.write(&batch).map_err(pq_err)?;
    }
    writer.close().map_err(pq_err)?;
    Ok(())
}

fn to_batch(
    schema: &SchemaRef,
    rows: &[TrajectoryRecord],
) -> std::result::Result<RecordBatch, arrow_schema::ArrowError> {
    let strs = |f: fn(&TrajectoryRecord) -> Option<&str>| -> ArrayRef {
        Arc::new(StringArray::from_iter(rows.iter().map(f)))
    };
    let floats = |f: fn(&TrajectoryRecord) -> Option<f64>| -> ArrayRef {
        Arc::new(Float64Array::from_iter(rows.iter().map(f)))
    };
    let mut tokens = ListBuilder::new(UInt32Builder::new());
    let mut rollout = ListBuilder::new(Float32Builder::new());
    let mut train = ListBuilder::new(Float32Builder::new());
    for r in rows {
        tokens.values().append_slice(&r.token_ids);
        tokens.append(true);
        rollout.values().append_slice(&r.rollout_logprobs);
        rollout.append(true);
        if let Some(t) = &r.train_logprobs {
            train.values().append_slice(t);
        }
        train.append(r.train_logprobs.is_some());
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| &r.prompt_id),
        )),
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.sample))),
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.turn))),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| &r.response),
        )),
        Arc::new(tokens.finish()),
        Arc::new(rollout.finish()),
        Arc::new(train.finish()),
        strs(|r| r.judge_result.as_deref()),
        Arc::new(BooleanArray::from(
            rows.iter().map(|r| r.truncated).collect::<Vec<_>>(),
        )),
        strs(|r| r.error.as_deref()),
        floats(|r| r.reward),
        floats(|r| r.ret),
        floats(|r| r.advantage),
        floats(|r| r.weight),
        strs(|r| r.mask_reason.as_deref()),
    ];
    RecordBatch::try_new(schema.clone(), columns)
}

const KNOWN: [&str; 15] = [
    "prompt_id",
    "sample",
    "turn",
    "response",
    "token_ids",
    "rollout_logprobs",
    "train_logprobs",
    "judge_result",
    "truncated",
    "error",
    "reward",
    "return",
    "advantage",
    "weight",
    "mask_reason",
];

pub fn read_parquet(path: &Path) -> Result<Loaded> {
    let pq_err = |source| Error::Parquet {
        path: path.into(),
        source,
    };
    let file = File::open(path).map_err(io_err(path))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(pq_err)?;
    let ignored_columns = builder
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .filter(|n| !KNOWN.contains(&n.as_str()))
        .collect();
    for required in ["prompt_id", "sample", "turn"] {
        if builder.schema().field_with_name(required).is_err() {
            return Err(column_err(
                path,
                required,
                "is missing (it is required)".into(),
            ));
        }
    }
    let reader = builder.build().map_err(pq_err)?;
    let mut records = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|source| Error::Arrow {
            path: path.into(),
            source,
        })?;
        decode(&batch, records.len(), &mut records).map_err(|(col, p)| column_err(path, col, p))?;
    }
    Ok(Loaded {
        records,
        ignored_columns,
    })
}

fn column_err(path: &Path, column: &'static str, problem: String) -> Error {
    Error::Column {
        path: PathBuf::from(path),
        column,
        problem,
    }
}

/// Column name and problem.
type ColErr = (&'static str, String);

fn decode(
    batch: &RecordBatch,
    first_row: usize,
    out: &mut Vec<TrajectoryRecord>,
) -> std::result::Result<(), ColErr> {
    let columns = Columns::read(&BatchColumns { batch, first_row })?;
    columns.into_records(first_row, out)
}

/// One record batch's columns, read as this schema's types (a missing optional column: nulls).
struct Columns {
    prompt_id: Vec<Option<String>>,
    sample: Vec<u32>,
    turn: Vec<u32>,
    response: Vec<Option<String>>,
    token_ids: Vec<Option<Vec<u32>>>,
    rollout_logprobs: Vec<Option<Vec<f32>>>,
    train_logprobs: Vec<Option<Vec<f32>>>,
    judge_result: Vec<Option<String>>,
    truncated: Vec<Option<bool>>,
    error: Vec<Option<String>>,
    reward: Vec<Option<f64>>,
    ret: Vec<Option<f64>>,
    advantage: Vec<Option<f64>>,
    weight: Vec<Option<f64>>,
    mask_reason: Vec<Option<String>>,
}

impl Columns {
    fn read(batch: &BatchColumns<'_>) -> std::result::Result<Columns, ColErr> {
        Ok(Columns {
            prompt_id: batch.strings("prompt_id")?,
            sample: batch.u32s("sample")?,
            turn: batch.u32s("turn")?,
            response: batch.strings("response")?,
            token_ids: batch.u32_lists("token_ids")?,
            rollout_logprobs: batch.float_lists("rollout_logprobs")?,
            train_logprobs: batch.float_lists("train_logprobs")?,
            judge_result: batch.strings("judge_result")?,
            truncated: batch.bools("truncated")?,
            error: batch.strings("error")?,
            reward: batch.floats("reward")?,
            ret: batch.floats("return")?,
            advantage: batch.floats("advantage")?,
            weight: batch.floats("weight")?,
            mask_reason: batch.strings("mask_reason")?,
        })
    }

    /// The records, row by row; a null `prompt_id` is the row's error.
    fn into_records(
        self,
        first_row: usize,
        out: &mut Vec<TrajectoryRecord>,
    ) -> std::result::Result<(), ColErr> {
        let rows = self.sample.len();
        let mut prompt_id = self.prompt_id.into_iter();
        let mut response = self.response.into_iter();
        let mut token_ids = self.token_ids.into_iter();
        let mut rollout = self.rollout_logprobs.into_iter();
        let mut train = self.train_logprobs.into_iter();
        let mut judge = self.judge_result.into_iter();
        let mut error = self.error.into_iter();
        let mut mask_reason = self.mask_reason.into_iter();
        for i in 0..rows {
            let next = |it: &mut std::vec::IntoIter<Option<String>>| it.next().flatten();
            out.push(TrajectoryRecord {
                prompt_id: next(&mut prompt_id)
                    .ok_or_else(|| row_error("prompt_id", first_row + i, "is null"))?,
                sample: self.sample[i],
                turn: self.turn[i],
                response: next(&mut response).unwrap_or_default(),
                token_ids: token_ids.next().flatten().unwrap_or_default(),
                rollout_logprobs: rollout.next().flatten().unwrap_or_default(),
                train_logprobs: train.next().flatten(),
                judge_result: next(&mut judge),
                truncated: self.truncated[i].unwrap_or(false),
                error: next(&mut error),
                reward: self.reward[i],
                ret: self.ret[i],
                advantage: self.advantage[i],
                weight: self.weight[i],
                mask_reason: next(&mut mask_reason),
            });
        }
        Ok(())
    }
}

fn row_error(column: &'static str, row: usize, what: &str) -> ColErr {
    (column, format!("row {row} (0-based): {what}"))
}

/// A record batch's columns by name, each read as one of this schema's types.
struct BatchColumns<'a> {
    batch: &'a RecordBatch,
    /// The batch's first row in the file, for the errors.
    first_row: usize,
}

impl BatchColumns<'_> {
    fn rows(&self) -> usize {
        self.batch.num_rows()
    }

    fn column(&self, name: &str) -> Option<&dyn Array> {
        self.batch.column_by_name(name).map(|c| c.as_ref())
    }

    fn row_error(&self, column: &'static str, i: usize, what: &str) -> ColErr {
        row_error(column, self.first_row + i, what)
    }

    fn strings(&self, name: &'static str) -> std::result::Result<Vec<Option<String>>, ColErr> {
        self.column(name).map_or(Ok(vec![None; self.rows()]), |c| {
            string_values(c).map_err(|p| (name, p))
        })
    }

    fn floats(&self, name: &'static str) -> std::result::Result<Vec<Option<f64>>, ColErr> {
        self.column(name).map_or(Ok(vec![None; self.rows()]), |c| {
            float_values(c).map_err(|p| (name, p))
        })
    }

    fn bools(&self, name: &'static str) -> std::result::Result<Vec<Option<bool>>, ColErr> {
        let Some(c) = self.column(name) else {
            return Ok(vec![None; self.rows()]);
        };
        let values = c
            .as_boolean_opt()
            .ok_or((name, format!("expected booleans, found {}", c.data_type())))?;
        Ok(values.iter().collect())
    }

    /// A required column of non-null values that fit a u32.
    fn u32s(&self, name: &'static str) -> std::result::Result<Vec<u32>, ColErr> {
        let c = self.column(name).ok_or((name, "is missing".to_string()))?;
        let values = int_values(c).map_err(|p| (name, p))?;
        values
            .into_iter()
            .enumerate()
            .map(|(i, x)| match x {
                Some(x) => u32::try_from(x)
                    .map_err(|_| self.row_error(name, i, &format!("{x} is not a u32"))),
                None => Err(self.row_error(name, i, "is null")),
            })
            .collect()
    }

    /// Lists of non-null u32 elements (a null list stays null).
    fn u32_lists(&self, name: &'static str) -> std::result::Result<Vec<Option<Vec<u32>>>, ColErr> {
        self.lists(
            name,
            int_values,
            |x| x.and_then(|x| u32::try_from(x).ok()),
            "has a null or non-u32 element",
        )
    }

    /// Lists of non-null float elements, as f32 (a null list stays null).
    fn float_lists(
        &self,
        name: &'static str,
    ) -> std::result::Result<Vec<Option<Vec<f32>>>, ColErr> {
        self.lists(
            name,
            float_values,
            |x| x.map(|x| x as f32),
            "has a null element",
        )
    }

    fn lists<V: Clone, T>(
        &self,
        name: &'static str,
        values: fn(&dyn Array) -> Values<V>,
        element: impl Fn(Option<V>) -> Option<T>,
        bad_element: &str,
    ) -> std::result::Result<Vec<Option<Vec<T>>>, ColErr> {
        let Some(c) = self.column(name) else {
            return Ok((0..self.rows()).map(|_| None).collect());
        };
        let lists = list_values(c, values).map_err(|p| (name, p))?;
        lists
            .into_iter()
            .enumerate()
            .map(|(i, list)| {
                list.map(|items| {
                    items
                        .into_iter()
                        .map(|x| element(x).ok_or_else(|| self.row_error(name, i, bad_element)))
                        .collect()
                })
                .transpose()
            })
            .collect()
    }
}

fn string_values(c: &dyn Array) -> std::result::Result<Vec<Option<String>>, String> {
    let own = |s: Option<&str>| s.map(str::to_owned);
    Ok(match c.data_type() {
        DataType::Utf8 => c.as_string::<i32>().iter().map(own).collect(),
        DataType::LargeUtf8 => c.as_string::<i64>().iter().map(own).collect(),
        DataType::Utf8View => c.as_string_view().iter().map(own).collect(),
        DataType::Null => vec![None; c.len()],
        other => return Err(format!("expected strings, found {other}")),
    })
}

fn int_values(c: &dyn Array) -> std::result::Result<Vec<Option<i128>>, String> {
    macro_rules! ints {
        ($t:ty) => {
            c.as_primitive::<$t>()
                .iter()
                .map(|x| x.map(i128::from))
                .collect()
        };
    }
    Ok(match c.data_type() {
        DataType::Int8 => ints!(Int8Type),
        DataType::Int16 => ints!(Int16Type),
        DataType::Int32 => ints!(Int32Type),
        DataType::Int64 => ints!(Int64Type),
        DataType::UInt8 => ints!(UInt8Type),
        DataType::UInt16 => ints!(UInt16Type),
        DataType::UInt32 => ints!(UInt32Type),
        DataType::UInt64 => ints!(UInt64Type),
        DataType::Null => vec![None; c.len()],
        other => return Err(format!("expected integers, found {other}")),
    })
}

fn float_values(c: &dyn Array) -> std::result::Result<Vec<Option<f64>>, String> {
    Ok(match c.data_type() {
        DataType::Float32 => c
            .as_primitive::<Float32Type>()
            .iter()
            .map(|x| x.map(f64::from))
            .collect(),
        DataType::Float64 => c.as_primitive::<Float64Type>().iter().collect(),
        DataType::Null => vec![None; c.len()],
        other => return Err(format!("expected floats, found {other}")),
    })
}

/// Nullable values of one column, or what is wrong with its type.
type Values<T> = std::result::Result<Vec<Option<T>>, String>;

/// Decodes a list column: the child values once, then sliced per row by the offsets.
fn list_values<T: Clone>(
    c: &dyn Array,
    elements: fn(&dyn Array) -> Values<T>,
) -> Values<Vec<Option<T>>> {
    fn slice<T: Clone>(
        values: &[Option<T>],
        offsets: impl Iterator<Item = (usize, usize)>,
        valid: impl Fn(usize) -> bool,
    ) -> Vec<Option<Vec<Option<T>>>> {
        offsets
            .enumerate()
            .map(|(i, (a, b))| valid(i).then(|| values[a..b].to_vec()))
            .collect()
    }
    match c.data_type() {
        DataType::List(_) => {
            let l = c.as_list::<i32>();
            let values = elements(l.values().as_ref())?;
            let o = l.value_offsets();
            let spans = o.windows(2).map(|w| (w[0] as usize, w[1] as usize));
            Ok(slice(&values, spans, |i| l.is_valid(i)))
        }
        DataType::LargeList(_) => {
            let l = c.as_list::<i64>();
            let values = elements(l.values().as_ref())?;
            let o = l.value_offsets();
            let spans = o.windows(2).map(|w| (w[0] as usize, w[1] as usize));
            Ok(slice(&values, spans, |i| l.is_valid(i)))
        }
        DataType::Null => Ok(vec![None; c.len()]),
        other => Err(format!("expected a list, found {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn sample_records() -> Vec<TrajectoryRecord> {
        vec![
            TrajectoryRecord {
                prompt_id: "task/α".into(),
                sample: 0,
                turn: 0,
                response: "plan</think>code ✓".into(),
                token_ids: vec![1, 2, u32::MAX],
                rollout_logprobs: vec![-0.5, -1.25, -3.0],
                train_logprobs: Some(vec![-0.5, -1.0, -2.75]),
                judge_result: Some(r#"{"verdict":"correct"}"#.into()),
                truncated: true,
                error: None,
                reward: Some(1.5),
                ret: Some(2.5),
                advantage: Some(-0.25),
                weight: Some(1.0),
                mask_reason: None,
            },
            TrajectoryRecord {
                prompt_id: "task/α".into(),
                sample: 0,
                turn: 1,
                error: Some("generation crashed".into()),
                mask_reason: Some("episode_error".into()),
                weight: Some(0.0),
                ..TrajectoryRecord::default()
            },
        ]
    }

    #[test]
    fn parquet_and_jsonl_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let recs = sample_records();
        for name in ["t.parquet", "t.jsonl"] {
            let p = dir.path().join(name);
            write(&p, &recs).unwrap();
            let back = read(&p).unwrap();
            assert_eq!(back.records, recs, "{name}");
            assert!(back.ignored_columns.is_empty());
        }
    }

    #[test]
    fn parquet_round_trips_many_batches() {
        let dir = tempfile::tempdir().unwrap();
        let recs: Vec<_> = (0..10_000)
            .map(|i| TrajectoryRecord {
                prompt_id: format!("p{}", i / 8),
                sample: i % 8,
                token_ids: vec![i; (i % 3) as usize],
                ..TrajectoryRecord::default()
            })
            .collect();
        let p = dir.path().join("big.parquet");
        write(&p, &recs).unwrap();
        assert_eq!(read(&p).unwrap().records, recs);
    }

    /// Named columns of one record batch.
    type NamedColumns = Vec<(&'static str, ArrayRef)>;

    /// A Parquet file of these columns, as another writer (pandas, pyarrow) could produce it.
    fn parquet_of(path: &Path, columns: NamedColumns) {
        let batch = RecordBatch::try_from_iter(columns).unwrap();
        let mut writer =
            ArrowWriter::try_new(File::create(path).unwrap(), batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    }

    #[test]
    fn a_bad_value_is_named_by_its_column_and_row() {
        use arrow_array::{Int64Array, ListArray, StringArray, types::Int64Type};
        let dir = tempfile::tempdir().unwrap();
        let ids = || Arc::new(StringArray::from(vec![Some("p"), Some("p")])) as ArrayRef;
        let counts = || Arc::new(Int64Array::from(vec![0, 1])) as ArrayRef;
        let cases: Vec<(&str, NamedColumns, &str)> = vec![
            (
                "sample",
                vec![
                    ("prompt_id", ids()),
                    ("sample", Arc::new(Int64Array::from(vec![0, -1]))),
                    ("turn", counts()),
                ],
                "column `sample`: row 1 (0-based): -1 is not a u32",
            ),
            (
                "turn",
                vec![
                    ("prompt_id", ids()),
                    ("sample", counts()),
                    ("turn", Arc::new(Int64Array::from(vec![Some(0), None]))),
                ],
                "column `turn`: row 1 (0-based): is null",
            ),
            (
                "missing",
                vec![("prompt_id", ids()), ("sample", counts())],
                "column `turn`: is missing",
            ),
            (
                "prompt_id",
                vec![
                    (
                        "prompt_id",
                        Arc::new(StringArray::from(vec![None, Some("p")])),
                    ),
                    ("sample", counts()),
                    ("turn", counts()),
                ],
                "column `prompt_id`: row 0 (0-based): is null",
            ),
            (
                "token_ids",
                vec![
                    ("prompt_id", ids()),
                    ("sample", counts()),
                    ("turn", counts()),
                    (
                        "token_ids",
                        Arc::new(ListArray::from_iter_primitive::<Int64Type, _, _>(vec![
                            Some(vec![Some(1)]),
                            Some(vec![Some(2), None]),
                        ])),
                    ),
                ],
                "column `token_ids`: row 1 (0-based): has a null or non-u32 element",
            ),
            (
                "truncated",
                vec![
                    ("prompt_id", ids()),
                    ("sample", counts()),
                    ("turn", counts()),
                    ("truncated", ids()),
                ],
                "column `truncated`: expected booleans, found Utf8",
            ),
        ];
        for (name, columns, want) in cases {
            let p = dir.path().join(format!("{name}.parquet"));
            parquet_of(&p, columns);
            let e = read(&p).unwrap_err().to_string();
            assert!(
                e.contains(&format!("{name}.parquet")) && e.contains(want),
                "{name}: {e}"
            );
        }
        // Null lists and absent optional columns are empty, not errors.
        let p = dir.path().join("lenient.parquet");
        let lists =
            ListArray::from_iter_primitive::<Int64Type, _, _>(vec![None, Some(vec![Some(7)])]);
        parquet_of(
            &p,
            vec![
                ("prompt_id", ids()),
                ("sample", counts()),
                ("turn", counts()),
                ("token_ids", Arc::new(lists)),
            ],
        );
        let records = read(&p).unwrap().records;
        assert_eq!(records[0].token_ids, Vec::<u32>::new());
        assert_eq!(records[1].token_ids, vec![7]);
        assert_eq!(
            (records[1].sample, records[1].truncated, records[1].reward),
            (1, false, None)
        );
    }

    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.jsonl");
        std::fs::write(
            &p,
            "{\"prompt_id\":\"p\",\"sample\":0,\"turn\":0}\n\n{oops\n",
        )
        .unwrap();
        let e = read(&p).unwrap_err().to_string();
        assert!(e.contains("bad.jsonl:3:"), "{e}");
        let p = dir.path().join("x.csv");
        assert!(read(&p).unwrap_err().to_string().contains("x.csv"));
        let p = dir.path().join("missing.parquet");
        assert!(
            read(&p)
                .unwrap_err()
                .to_string()
                .contains("missing.parquet")
        );
        let p = dir.path().join("garbage.parquet");
        std::fs::write(&p, b"not parquet").unwrap();
        assert!(
            read(&p)
                .unwrap_err()
                .to_string()
                .contains("garbage.parquet")
        );
    }
}
