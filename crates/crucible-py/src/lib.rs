//! `crucible._native`: the Rust half of the Python package `crucible`.
//!
//! Thin glue, like the CLI: every decision is made by the crates it calls (`crucible-verify`,
//! `crucible-judge`, `crucible-rl`), so Python gets the same verdicts, rewards and advantages as
//! `crucible verify`, `crucible eval`, `crucible reward` and `crucible advantages`. Long work
//! (judging, batch math) runs with the GIL released.

mod agent;
mod convert;
mod judge;
mod rl;
mod verify;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<judge::PyEvalResult>()?;
    m.add_class::<judge::Judge>()?;
    m.add_class::<rl::PyRecipe>()?;
    agent::register(m)?;
    m.add_function(wrap_pyfunction!(verify::verify, m)?)?;
    m.add_function(wrap_pyfunction!(verify::rules_markdown, m)?)?;
    m.add_function(wrap_pyfunction!(judge::builtin_tasks, m)?)?;
    m.add_function(wrap_pyfunction!(judge::default_venv_python, m)?)?;
    m.add_function(wrap_pyfunction!(rl::advantages, m)?)?;
    m.add_function(wrap_pyfunction!(rl::prompt_keys, m)?)?;
    m.add("ESTIMATORS", crucible_rl::Estimator::NAMES.to_vec())?;
    m.add("RECIPES", crucible_rl::Recipe::NAMES.to_vec())?;
    m.add("REASONS", rl::reason_names())?;
    m.add("OUTCOME_KINDS", rl::KIND_NAMES.to_vec())?;
    Ok(())
}
