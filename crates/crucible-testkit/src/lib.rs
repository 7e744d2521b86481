//! Test support shared by the workspace's integration tests and benches (a dev-dependency only;
//! nothing in a shipped binary links it).

mod redis_server;

pub use redis_server::{AppendFsync, RedisServer};

use std::path::Path;

/// The turns an agent run (`crucible bench`, `rollout`, `distill`) recorded in its run directory,
/// in order (`records.jsonl`, one JSON object a line). Panics on a missing or malformed file.
pub fn recorded_turns(run_dir: &Path) -> Vec<serde_json::Value> {
    let path = run_dir.join("records.jsonl");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")))
        .collect()
}
