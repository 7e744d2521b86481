//! `verify`: the static verifier, as `crucible verify --json` runs it.

use std::path::PathBuf;

use crucible_verify::Policy;
use pyo3::prelude::*;

use crate::convert::{to_py, value_error};

/// The policy from a preset name or a TOML file, as the CLI picks it.
pub fn policy(preset: &str, file: Option<PathBuf>) -> PyResult<Policy> {
    match file {
        Some(path) => Policy::from_file(path).map_err(value_error),
        None => Policy::preset(preset).map_err(value_error),
    }
}

/// Checks a candidate's source without running it; returns
/// `{"rejected": bool, "flagged": bool, "policy": str, "findings": [...]}`.
#[pyfunction]
#[pyo3(signature = (source, policy="strict", policy_file=None))]
pub fn verify<'py>(
    py: Python<'py>,
    source: &str,
    policy: &str,
    policy_file: Option<PathBuf>,
) -> PyResult<Bound<'py, PyAny>> {
    let policy = self::policy(policy, policy_file)?;
    let source = source.to_owned();
    let report = py.detach(|| crucible_verify::verify(&source, &policy));
    let doc = serde_json::json!({
        "rejected": report.rejected(),
        "flagged": report.flagged(),
        "policy": policy.name(),
        "findings": report.findings,
    });
    to_py(py, &doc)
}

/// The verifier's rule reference (docs/verifier-rules.md) as Markdown.
#[pyfunction]
pub fn rules_markdown() -> String {
    crucible_verify::rules_markdown()
}
