//! Content keys (the result cache and in-flight duplicate sharing) and the result documents the
//! store writes itself (`timeout`, `infra_error`).

use serde::Serialize;
use sha2::{Digest, Sha256};

use crucible_result::{
    DEADLINE_STAGE_QUEUED, DEADLINE_STAGE_RUNNING, Env, EvalResult, Failure, FailureClass, FileRef,
    SCHEMA, Seeds, Stage, StageStatus, Tolerance,
};

use crate::types::{JudgeOptions, TaskSpec};

/// What an evaluation's outcome depends on, in a fixed field order (canonical JSON).
#[derive(Serialize)]
struct Content<'a> {
    task_source: &'a str,
    candidate_source: &'a str,
    options: &'a JudgeOptions,
    versions: &'a str,
}

fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn content_hash(spec: &TaskSpec, versions: &str) -> String {
    let content = Content {
        task_source: &spec.task_source,
        candidate_source: &spec.candidate_source,
        options: &spec.options,
        versions,
    };
    // Serializing plain strings and options cannot fail; an empty key would only miss the cache.
    let json = serde_json::to_vec(&content).unwrap_or_default();
    sha256_hex(&json)
}

/// The result cache key: sha256 over the canonical JSON of (task source, candidate source,
/// options, judge versions string).
pub fn cache_key(spec: &TaskSpec, versions: &str) -> String {
    content_hash(spec, versions)
}

/// The key under which identical in-flight submissions share one evaluation: the cache key
/// without versions (which worker will run it is not known at submit).
pub fn dedup_key(spec: &TaskSpec) -> String {
    content_hash(spec, "\u{0}in-flight")
}

/// The verdict string of a result document, if it has one.
pub fn verdict_of(result: &serde_json::Value) -> Option<&str> {
    result.get("verdict").and_then(|v| v.as_str())
}

/// `(stage name, duration_s)` of every stage of a result document.
pub fn stages_of(result: &serde_json::Value) -> Vec<(String, f64)> {
    let Some(stages) = result.get("stages").and_then(|s| s.as_array()) else {
        return Vec::new();
    };
    stages
        .iter()
        .filter_map(|stage| {
            let name = stage.get("name")?.as_str()?;
            let duration = stage.get("duration_s")?.as_f64()?;
            Some((name.to_string(), duration))
        })
        .collect()
}

/// Whether a result may be reused by content: never a fault of the judge or the clock.
pub fn is_cacheable(result: &serde_json::Value) -> bool {
    !matches!(verdict_of(result), None | Some("infra_error" | "timeout"))
}

/// A result document the store writes for a task that no evaluation finished, as JSON.
fn store_result(
    spec: &TaskSpec,
    class: FailureClass,
    stage: &str,
    message: String,
    wall_s: f64,
) -> serde_json::Value {
    serde_json::to_value(store_document(spec, class, stage, message, wall_s))
        .unwrap_or(serde_json::Value::Null)
}

/// A result document for a task that no evaluation finished.
fn store_document(
    spec: &TaskSpec,
    class: FailureClass,
    stage: &str,
    message: String,
    wall_s: f64,
) -> EvalResult {
    let file = |name: &str, text: &str| FileRef {
        name: name.to_string(),
        path: String::new(),
        sha256: sha256_hex(text.as_bytes()),
    };
    let seed = spec.options.seed.unwrap_or(0);
    EvalResult {
        schema: SCHEMA.to_string(),
        verdict: class.verdict(),
        correct: false,
        speedup: None,
        speedup_matched: None,
        speedup_matched_class: None,
        timing: None,
        timing_skipped: Some(message.clone()),
        coverage: None,
        precision: None,
        profile: None,
        failure: Some(Failure {
            class,
            stage: stage.to_string(),
            message: message.clone(),
        }),
        findings: Vec::new(),
        stages: vec![Stage {
            name: stage.to_string(),
            status: StageStatus::Failed,
            duration_s: wall_s.max(0.0),
            diagnostics: vec![message],
        }],
        seeds: Seeds {
            base: seed,
            init: seed,
            trials: Vec::new(),
            timing: seed,
        },
        tolerance: Tolerance {
            profile: spec
                .options
                .tolerance
                .clone()
                .unwrap_or_else(|| "kb-v0".to_string()),
            atol: 0.0,
            rtol: 0.0,
        },
        size_profile: spec
            .options
            .size_profile
            .clone()
            .unwrap_or_else(|| "default".to_string()),
        trials: Vec::new(),
        generalization: None,
        launches: Vec::new(),
        task: file(&spec.task_name, &spec.task_source),
        candidate: file("candidate", &spec.candidate_source),
        env: Env {
            device: "none".to_string(),
            crucible: env!("CARGO_PKG_VERSION").to_string(),
            ..Env::default()
        },
        wall_s: wall_s.max(0.0),
    }
}

/// The `timeout` result of a task whose deadline passed. `was_running`: whether a worker had it.
pub fn timeout_result(spec: &TaskSpec, waited_s: f64, was_running: bool) -> serde_json::Value {
    let deadline = spec.deadline_s.unwrap_or(0.0);
    let (stage, where_) = if was_running {
        (DEADLINE_STAGE_RUNNING, "while a worker was evaluating it")
    } else {
        (DEADLINE_STAGE_QUEUED, "before any worker started it")
    };
    let message = format!(
        "deadline passed: the task asked for a result within {deadline} s of submission and \
         {waited_s:.3} s went by {where_}; the candidate was not judged (not its fault)"
    );
    store_result(spec, FailureClass::Timeout, stage, message, waited_s)
}

/// The `infra_error` result of a task that failed for reasons of the judge `attempts` times.
pub fn infra_error_result(
    spec: &TaskSpec,
    attempts: u32,
    reason: &str,
    wall_s: f64,
) -> serde_json::Value {
    let message = format!(
        "the judge failed {attempts} time(s) on this task for reasons outside the candidate; \
         last: {reason}"
    );
    store_result(
        spec,
        FailureClass::InfraError,
        "infrastructure",
        message,
        wall_s,
    )
}

/// The `infra_error` result of a task its client could not have judged (the service
/// unreachable, the task refused or cancelled there): `reason` says why.
pub fn not_judged_result(spec: &TaskSpec, reason: &str, wall_s: f64) -> EvalResult {
    let message = format!("the candidate was not judged (not its fault): {reason}");
    store_document(
        spec,
        FailureClass::InfraError,
        "infrastructure",
        message,
        wall_s,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_depend_on_content_options_and_versions_only() {
        let a = TaskSpec::new("t", "task", "cand");
        let mut b = a.clone();
        b.client = "other".into();
        b.priority = 5;
        assert_eq!(cache_key(&a, "v1"), cache_key(&b, "v1"));
        assert_ne!(cache_key(&a, "v1"), cache_key(&a, "v2"));
        b.options.trials = Some(3);
        assert_ne!(cache_key(&a, "v1"), cache_key(&b, "v1"));
        assert_ne!(dedup_key(&a), dedup_key(&b));
        assert_eq!(cache_key(&a, "v1").len(), 64);
    }

    #[test]
    fn store_written_results_are_proper_result_documents() {
        let mut spec = TaskSpec::new("01_relu", "task", "cand");
        spec.deadline_s = Some(2.0);
        let doc = timeout_result(&spec, 2.5, false);
        let parsed: EvalResult = serde_json::from_value(doc.clone()).unwrap();
        assert_eq!(parsed.verdict, crucible_result::Verdict::Timeout);
        assert!(parsed.deadline_passed(), "the candidate was not judged");
        let running: EvalResult = serde_json::from_value(timeout_result(&spec, 2.5, true)).unwrap();
        assert!(running.deadline_passed());
        assert_eq!(parsed.failure.unwrap().class, FailureClass::Timeout);
        assert_eq!(verdict_of(&doc), Some("timeout"));
        assert!(!is_cacheable(&doc));
        let infra = infra_error_result(&spec, 3, "worker lost", 1.0);
        assert_eq!(verdict_of(&infra), Some("infra_error"));
        assert!(
            infra["failure"]["message"]
                .as_str()
                .unwrap()
                .contains("worker lost")
        );
    }
}
