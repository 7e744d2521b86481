//! Parquet interop with pyarrow, both ways: Rust writes and pyarrow reads (types, values and the
//! schema tag), pyarrow writes (pandas-style types, missing and extra columns) and Rust reads, and
//! a file pyarrow re-wrote from Rust's comes back unchanged.
//!
//! The interpreter is `$CRUCIBLE_PYTHON` (CI sets it to a venv with pyarrow). When it is unset,
//! the local dev venv is used if it exists; otherwise the test prints why and skips.

use std::path::{Path, PathBuf};
use std::process::Command;

use crucible_rl::TrajectoryRecord;
use crucible_rl::io;

const DEV_VENV_PYTHON: &str = "/root/.cache/crucible/venv-67c592603d0ab7b2/bin/python";

fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CRUCIBLE_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let dev = Path::new(DEV_VENV_PYTHON);
    dev.exists().then(|| dev.to_path_buf())
}

const SCRIPT: &str = r#"
import json, sys
import pyarrow as pa
import pyarrow.parquet as pq

rust_file, expected_jsonl, py_file, rewritten_file = sys.argv[1:5]

# 1. Rust -> pyarrow: exact types, schema tag, values.
table = pq.read_table(rust_file)
s = table.schema
want = {
    "prompt_id": pa.string(), "sample": pa.uint32(), "turn": pa.uint32(),
    "response": pa.string(), "token_ids": pa.list_(pa.uint32()),
    "rollout_logprobs": pa.list_(pa.float32()), "train_logprobs": pa.list_(pa.float32()),
    "judge_result": pa.string(), "truncated": pa.bool_(), "error": pa.string(),
    "reward": pa.float64(), "return": pa.float64(), "advantage": pa.float64(),
    "weight": pa.float64(), "mask_reason": pa.string(),
}
assert s.names == list(want), s.names
for name, t in want.items():
    assert s.field(name).type == t, (name, s.field(name).type, t)
assert not s.field("prompt_id").nullable and s.field("reward").nullable
assert s.metadata[b"crucible.schema"] == b"crucible.trajectory/1", s.metadata
expected = [json.loads(l) for l in open(expected_jsonl, encoding="utf-8") if l.strip()]
rows = table.to_pylist()
assert len(rows) == len(expected), (len(rows), len(expected))
for got, exp in zip(rows, expected):
    for k in want:
        assert got[k] == exp.get(k), (k, got[k], exp.get(k))

# 2. pyarrow -> Rust, written the way pandas would: int64, float64, large strings, an extra
#    column, no output columns.
py = pa.table({
    "prompt_id": pa.array(["a", "a", "b"], pa.large_string()),
    "sample": pa.array([0, 1, 0], pa.int64()),
    "turn": pa.array([0, 0, 0], pa.int64()),
    "response": ["r0", None, "r2 ✓"],
    "token_ids": pa.array([[5, 6], [], None], pa.list_(pa.int64())),
    "rollout_logprobs": pa.array([[-0.5, -0.25], [], None], pa.large_list(pa.float64())),
    "train_logprobs": pa.array([None, [], [-1.5]], pa.list_(pa.float32())),
    "judge_result": [None, '{"x": 1}', None],
    "truncated": [False, True, None],
    "reward": [1.0, None, -0.5],
    "note": ["extra", "column", "here"],
})
pq.write_table(py, py_file)

# 3. Rust -> pyarrow -> Rust: pyarrow re-writes Rust's file untouched.
pq.write_table(pq.read_table(rust_file), rewritten_file)
print("pyarrow", pa.__version__, "ok")
"#;

fn records() -> Vec<TrajectoryRecord> {
    vec![
        TrajectoryRecord {
            prompt_id: "level2/19_ReLU".into(),
            sample: 3,
            turn: 0,
            response: "plan ✓</think>@triton.jit\ndef k(): pass".into(),
            token_ids: vec![0, 17, u32::MAX],
            rollout_logprobs: vec![-0.5, -1.25, -8.0],
            train_logprobs: Some(vec![-0.5, -1.0, -7.75]),
            judge_result: Some(r#"{"verdict":"correct","speedup":1.5}"#.into()),
            truncated: false,
            error: None,
            reward: Some(1.75),
            ret: Some(2.25),
            advantage: Some(-0.125),
            weight: Some(1.0),
            mask_reason: None,
        },
        TrajectoryRecord {
            prompt_id: "level2/19_ReLU".into(),
            sample: 3,
            turn: 1,
            truncated: true,
            error: Some("generation stopped".into()),
            weight: Some(0.0),
            mask_reason: Some("episode_error".into()),
            ..TrajectoryRecord::default()
        },
    ]
}

#[test]
fn parquet_round_trips_with_pyarrow() {
    let Some(python) = python() else {
        eprintln!(
            "SKIP parquet_round_trips_with_pyarrow: CRUCIBLE_PYTHON is unset and {DEV_VENV_PYTHON} does not exist"
        );
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let path = |n: &str| dir.path().join(n);
    let recs = records();
    io::write(&path("rust.parquet"), &recs).expect("write parquet");
    io::write(&path("expected.jsonl"), &recs).expect("write jsonl");
    std::fs::write(path("check.py"), SCRIPT).expect("write script");

    let out = Command::new(&python)
        .arg(path("check.py"))
        .args(
            [
                "rust.parquet",
                "expected.jsonl",
                "py.parquet",
                "rewritten.parquet",
            ]
            .map(path),
        )
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(
        out.status.success(),
        "{} failed:\n{}{}",
        python.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let rewritten = io::read(&path("rewritten.parquet")).expect("read rewritten");
    assert_eq!(rewritten.records, recs);

    let py = io::read(&path("py.parquet")).expect("read pyarrow file");
    assert_eq!(py.ignored_columns, vec!["note".to_string()]);
    let want = vec![
        TrajectoryRecord {
            prompt_id: "a".into(),
            response: "r0".into(),
            token_ids: vec![5, 6],
            rollout_logprobs: vec![-0.5, -0.25],
            reward: Some(1.0),
            ..TrajectoryRecord::default()
        },
        TrajectoryRecord {
            prompt_id: "a".into(),
            sample: 1,
            train_logprobs: Some(vec![]),
            judge_result: Some(r#"{"x": 1}"#.into()),
            truncated: true,
            ..TrajectoryRecord::default()
        },
        TrajectoryRecord {
            prompt_id: "b".into(),
            response: "r2 ✓".into(),
            train_logprobs: Some(vec![-1.5]),
            reward: Some(-0.5),
            ..TrajectoryRecord::default()
        },
    ];
    assert_eq!(py.records, want);
}
