//! The agent's prompts and feedback (`crucible-agent`): what a multi-turn rollout shows the model,
//! the same text `crucible agent` shows it, so trainer integrations give the same feedback.

use crucible_agent::prompt;
use pyo3::prelude::*;

use crate::rl::with_result;

/// The first user message for a task (the task, what `ModelNew` must be, an example).
#[pyfunction]
pub fn first_turn(task_name: &str, task_source: &str) -> String {
    prompt::first_turn(task_name, task_source)
}

/// The reviewer's note on a judged answer (`EvalResult`, JSON string or dict): verdict, error
/// excerpt, mismatch, speed, coverage, findings; at most `max_tokens` tokens (as `crucible agent
/// --feedback-tokens`, default 512).
#[pyfunction]
#[pyo3(signature = (result, max_tokens=512))]
pub fn feedback(result: &Bound<'_, PyAny>, max_tokens: usize) -> PyResult<String> {
    with_result(result, |r| prompt::feedback(r, max_tokens))
}

/// The note on an answer without code in it.
#[pyfunction]
pub fn no_code_feedback(reason: &str) -> String {
    prompt::no_code_feedback(reason)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SYSTEM_PROMPT", prompt::SYSTEM)?;
    m.add_function(wrap_pyfunction!(first_turn, m)?)?;
    m.add_function(wrap_pyfunction!(feedback, m)?)?;
    m.add_function(wrap_pyfunction!(no_code_feedback, m)?)?;
    Ok(())
}
