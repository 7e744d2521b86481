//! Rewards and advantages: `crucible-rl`, the code behind `crucible reward` and
//! `crucible advantages`, over result documents and NumPy columns.

use crucible_result::{EvalResult, Severity};
use crucible_rl::advantage::{Config, Estimator, Reason, TurnInput, TurnSource};
use crucible_rl::reward::{Kind, Outcome, Recipe, SpeedupBasis};
use crucible_rl::sampling::{GroupFilter, LogRatio, Mrs, Prs, PrsMode, prompt_key};
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::convert::value_error;
use crate::judge::PyEvalResult;

/// Outcome kinds by column code; code `INFRA` (= the length) is an `infra_error`.
pub const KIND_NAMES: [&str; 6] = [
    "hack",
    "compile_error",
    "runtime_failure",
    "incorrect",
    "correct",
    "infra_error",
];
const KINDS: [Kind; 5] = [
    Kind::Hack,
    Kind::CompileError,
    Kind::RuntimeFailure,
    Kind::Incorrect,
    Kind::Correct,
];
const INFRA: u8 = 5;

pub fn reason_names() -> Vec<&'static str> {
    Reason::ALL.iter().map(|r| r.as_str()).collect()
}

/// A result reduced to what a recipe reads, plus whether it carries a `flag` finding.
/// `None`: the result is an `infra_error`, which has no reward.
type Scored = Option<(Outcome, bool)>;

fn reduce(result: &EvalResult, basis: SpeedupBasis) -> PyResult<Scored> {
    match Outcome::from_result_with(result, basis) {
        Ok(o) => {
            let flagged = result.findings.iter().any(|f| f.severity == Severity::Flag);
            Ok(Some((o, flagged)))
        }
        Err(crucible_rl::Error::InfraError | crucible_rl::Error::NotJudged) => Ok(None),
        Err(e) => Err(value_error(e)),
    }
}

/// Reads an `EvalResult`, a JSON string or a dict (the document as plain objects).
pub fn with_result<T>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&EvalResult) -> T) -> PyResult<T> {
    if let Ok(r) = obj.cast::<PyEvalResult>() {
        return Ok(f(&r.get().inner));
    }
    let text: String = if let Ok(s) = obj.cast::<PyString>() {
        s.to_str()?.to_owned()
    } else if obj.is_instance_of::<PyDict>() {
        let json = obj.py().import("json")?;
        json.call_method1("dumps", (obj,))?.extract()?
    } else {
        return Err(value_error(
            "expected an EvalResult, a result document as a JSON string, or a dict",
        ));
    };
    let result: EvalResult = serde_json::from_str(&text)
        .map_err(|e| value_error(format!("not a crucible.result document: {e}")))?;
    Ok(f(&result))
}

/// A named reward recipe with its parameters, exactly as `crucible reward` builds it, plus an
/// optional penalty for `flag` findings.
#[pyclass(frozen, module = "crucible._native", name = "Recipe")]
pub struct PyRecipe {
    recipe: Recipe,
    flag_penalty: f64,
}

impl PyRecipe {
    fn score(&self, o: &Outcome, flagged: bool) -> f64 {
        let penalty = if o.is_correct() && flagged {
            self.flag_penalty
        } else {
            0.0
        };
        self.recipe.score(o) - penalty
    }
}

#[pymethods]
impl PyRecipe {
    /// `name`: drkernel, weighted, tiered or hierarchical. Parameters that a recipe does not
    /// have are refused, as the CLI refuses them. `flag_penalty` (default 0, as in the CLI) is
    /// taken from a correct result that carries any finding of severity `flag`.
    #[new]
    #[pyo3(signature = (name, *, speedup=None, coverage_weight=None, alpha=None, boundary=None,
        shape_specialized_penalty=None, flag_penalty=0.0))]
    fn new(
        name: &str,
        speedup: Option<&str>,
        coverage_weight: Option<f64>,
        alpha: Option<f64>,
        boundary: Option<String>,
        shape_specialized_penalty: Option<f64>,
        flag_penalty: f64,
    ) -> PyResult<PyRecipe> {
        let mut recipe = Recipe::from_name(name).map_err(value_error)?;
        let only = |p: &str, r: &str| value_error(format!("{p} applies only to recipe {r}"));
        match &mut recipe {
            Recipe::Weighted(w) => w.coverage_weight = coverage_weight.unwrap_or(w.coverage_weight),
            _ if coverage_weight.is_some() => return Err(only("coverage_weight", "weighted")),
            _ => {}
        }
        match &mut recipe {
            Recipe::Hierarchical(h) => {
                h.alpha = alpha.unwrap_or(h.alpha);
                if let Some(b) = boundary {
                    h.boundary = b;
                }
            }
            _ if alpha.is_some() => return Err(only("alpha", "hierarchical")),
            _ if boundary.is_some() => return Err(only("boundary", "hierarchical")),
            _ => {}
        }
        if let Some(p) = shape_specialized_penalty {
            recipe.set_shape_specialized_penalty(p);
        }
        if let Some(name) = speedup {
            let basis = SpeedupBasis::from_name(name)
                .ok_or_else(|| value_error(format!("unknown speedup basis `{name}`")))?;
            recipe.set_speedup_basis(basis);
        }
        recipe.validate().map_err(value_error)?;
        if !(flag_penalty.is_finite() && flag_penalty >= 0.0) {
            return Err(value_error("flag_penalty must be a finite number >= 0"));
        }
        Ok(PyRecipe {
            recipe,
            flag_penalty,
        })
    }

    #[getter]
    fn name(&self) -> &'static str {
        self.recipe.name()
    }
    #[getter]
    fn speedup_basis(&self) -> &'static str {
        self.recipe.speedup_basis().name()
    }
    #[getter]
    fn shape_specialized_penalty(&self) -> f64 {
        self.recipe.shape_specialized_penalty()
    }
    #[getter]
    fn flag_penalty(&self) -> f64 {
        self.flag_penalty
    }
    /// The reward of a turn that produced no kernel (scored like a compile failure).
    #[getter]
    fn void_reward(&self) -> f64 {
        self.recipe.void_reward()
    }

    /// The reward of one result (`EvalResult`, JSON string or dict); `None` for an
    /// `infra_error`, which has no reward: drop that sample.
    fn reward(&self, result: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
        let basis = self.recipe.speedup_basis();
        let scored = with_result(result, |r| reduce(r, basis))??;
        Ok(scored.map(|(o, flagged)| self.score(&o, flagged)))
    }

    /// Rewards of many results as a float64 array; NaN marks an `infra_error` (no reward).
    fn rewards<'py>(
        &self,
        py: Python<'py>,
        results: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let mut out = Vec::with_capacity(results.len());
        for r in &results {
            out.push(self.reward(r)?.unwrap_or(f64::NAN));
        }
        Ok(out.into_pyarray(py))
    }

    /// Rewards over columns (see `outcomes`): `kind` codes index `OUTCOME_KINDS` (5 is
    /// `infra_error`, giving NaN); NaN speedup or coverage means none was measured.
    /// Each column is a NumPy array or a pyarrow array (see `column`).
    #[pyo3(signature = (kind, speedup, coverage, shape_specialized=None, flagged=None))]
    fn score_columns<'py>(
        &self,
        py: Python<'py>,
        kind: &Bound<'py, PyAny>,
        speedup: &Bound<'py, PyAny>,
        coverage: &Bound<'py, PyAny>,
        shape_specialized: Option<&Bound<'py, PyAny>>,
        flagged: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let kind = column::<u8>(kind, "kind")?;
        let speedup = column::<f64>(speedup, "speedup")?;
        let coverage = column::<f64>(coverage, "coverage")?;
        let shape_specialized = optional_column::<bool>(shape_specialized, "shape_specialized")?;
        let flagged = optional_column::<bool>(flagged, "flagged")?;
        let kind = kind.as_slice()?;
        let n = kind.len();
        let speedup = same_len(speedup.as_slice()?, n, "speedup")?;
        let coverage = same_len(coverage.as_slice()?, n, "coverage")?;
        let shape = optional(&shape_specialized, n, "shape_specialized")?;
        let flagged = optional(&flagged, n, "flagged")?;
        if let Some(bad) = kind.iter().find(|k| **k > INFRA) {
            return Err(value_error(format!(
                "outcome kind code {bad} is not in 0..=5"
            )));
        }
        let out = py.detach(|| {
            (0..n)
                .map(|i| {
                    let Some(kind) = KINDS.get(usize::from(kind[i])) else {
                        return f64::NAN;
                    };
                    let o = Outcome {
                        kind: *kind,
                        speedup: Some(speedup[i]).filter(|s| s.is_finite() && *s > 0.0),
                        coverage: Some(coverage[i])
                            .filter(|c| c.is_finite())
                            .map(|c| c.clamp(0.0, 1.0)),
                        shape_specialized: shape.is_some_and(|s| s[i]),
                    };
                    self.score(&o, flagged.is_some_and(|f| f[i]))
                })
                .collect::<Vec<f64>>()
        });
        Ok(out.into_pyarray(py))
    }

    /// Many results as the columns `score_columns` takes: `{"kind", "speedup", "coverage",
    /// "shape_specialized", "flagged", "correct"}`.
    fn outcomes<'py>(
        &self,
        py: Python<'py>,
        results: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let basis = self.recipe.speedup_basis();
        let n = results.len();
        let (mut kind, mut speedup, mut coverage) =
            (vec![INFRA; n], vec![f64::NAN; n], vec![f64::NAN; n]);
        let (mut shape, mut flagged, mut correct) =
            (vec![false; n], vec![false; n], vec![false; n]);
        for (i, r) in results.iter().enumerate() {
            let Some((o, f)) = with_result(r, |r| reduce(r, basis))?? else {
                continue;
            };
            kind[i] = KINDS
                .iter()
                .position(|k| *k == o.kind)
                .map_or(INFRA, |p| p as u8);
            speedup[i] = o.speedup.unwrap_or(f64::NAN);
            coverage[i] = o.coverage.unwrap_or(f64::NAN);
            shape[i] = o.shape_specialized;
            flagged[i] = f;
            correct[i] = o.is_correct();
        }
        let d = PyDict::new(py);
        d.set_item("kind", kind.into_pyarray(py))?;
        d.set_item("speedup", speedup.into_pyarray(py))?;
        d.set_item("coverage", coverage.into_pyarray(py))?;
        d.set_item("shape_specialized", shape.into_pyarray(py))?;
        d.set_item("flagged", flagged.into_pyarray(py))?;
        d.set_item("correct", correct.into_pyarray(py))?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "Recipe({:?}, speedup={:?}, shape_specialized_penalty={}, flag_penalty={})",
            self.recipe.name(),
            self.recipe.speedup_basis().name(),
            self.recipe.shape_specialized_penalty(),
            self.flag_penalty
        )
    }
}

fn same_len<'a, T>(column: &'a [T], n: usize, name: &str) -> PyResult<&'a [T]> {
    if column.len() == n {
        Ok(column)
    } else {
        Err(value_error(format!(
            "{name} has {} rows, expected {n}",
            column.len()
        )))
    }
}

fn optional<'a, T: numpy::Element>(
    column: &'a Option<PyReadonlyArray1<'_, T>>,
    n: usize,
    name: &str,
) -> PyResult<Option<&'a [T]>> {
    match column {
        Some(c) => Ok(Some(same_len(c.as_slice()?, n, name)?)),
        None => Ok(None),
    }
}

/// A 1-D column: a NumPy array of `T` as it is, or a pyarrow `Array` / `ChunkedArray` as NumPy
/// through `to_numpy(zero_copy_only=False)`, which shares the Arrow buffer for one chunk of
/// numbers without nulls and copies otherwise (booleans, several chunks; nulls become NaN in a
/// float column). The dtype must match: no silent casts.
pub fn column<'py, T: numpy::Element>(
    obj: &Bound<'py, PyAny>,
    name: &str,
) -> PyResult<PyReadonlyArray1<'py, T>> {
    if let Ok(a) = obj.extract::<PyReadonlyArray1<'py, T>>() {
        return Ok(a);
    }
    let py = obj.py();
    let want = numpy::dtype::<T>(py);
    let array = if is_arrow(obj)? {
        let kwargs = PyDict::new(py);
        kwargs.set_item("zero_copy_only", false)?;
        obj.call_method("to_numpy", (), Some(&kwargs))?
    } else {
        obj.clone()
    };
    array.extract::<PyReadonlyArray1<'py, T>>().map_err(|_| {
        let got = array
            .getattr("dtype")
            .map_or_else(|_| array.get_type().to_string(), |d| d.to_string());
        value_error(format!(
            "{name} must be a 1-D array of {want} (NumPy or pyarrow), not {got}"
        ))
    })
}

fn optional_column<'py, T: numpy::Element>(
    obj: Option<&Bound<'py, PyAny>>,
    name: &str,
) -> PyResult<Option<PyReadonlyArray1<'py, T>>> {
    obj.filter(|o| !o.is_none())
        .map(|o| column::<T>(o, name))
        .transpose()
}

/// A pyarrow Array or ChunkedArray (told apart by module, not imported: pyarrow is optional).
fn is_arrow(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let module: String = obj.get_type().getattr("__module__")?.extract()?;
    Ok(module == "pyarrow.lib" || module.starts_with("pyarrow."))
}

/// The stable key of each prompt id (what `crucible advantages` groups by).
#[pyfunction]
pub fn prompt_keys<'py>(py: Python<'py>, ids: Vec<String>) -> Bound<'py, PyArray1<u64>> {
    ids.iter()
        .map(|id| prompt_key(id))
        .collect::<Vec<u64>>()
        .into_pyarray(py)
}

/// Prompt keys: a uint64 column (NumPy or pyarrow, used as they are) or prompt-id strings (a
/// sequence of str, or a pyarrow string column), hashed as `crucible advantages` hashes them.
enum Keys<'py> {
    Column(PyReadonlyArray1<'py, u64>),
    Hashed(Vec<u64>),
}

impl Keys<'_> {
    fn as_slice(&self) -> PyResult<&[u64]> {
        match self {
            Keys::Column(c) => Ok(c.as_slice()?),
            Keys::Hashed(v) => Ok(v),
        }
    }
}

fn keys_of<'py>(prompt: &Bound<'py, PyAny>) -> PyResult<Keys<'py>> {
    if let Ok(keys) = column::<u64>(prompt, "prompt") {
        return Ok(Keys::Column(keys));
    }
    let ids = if is_arrow(prompt)? {
        prompt.call_method0("to_pylist")?
    } else {
        prompt.clone()
    };
    let ids: Vec<String> = ids.extract().map_err(|_| {
        value_error("prompt must be a uint64 column or prompt-id strings (NumPy, pyarrow or str)")
    })?;
    Ok(Keys::Hashed(ids.iter().map(|id| prompt_key(id)).collect()))
}

/// Optional per-row columns of `advantages`.
struct Optional<'py> {
    correct: Option<PyReadonlyArray1<'py, bool>>,
    coverage: Option<PyReadonlyArray1<'py, f64>>,
    void: Option<PyReadonlyArray1<'py, bool>>,
    errored: Option<PyReadonlyArray1<'py, bool>>,
    truncated: Option<PyReadonlyArray1<'py, bool>>,
}

/// A batch of turns as the caller's columns, read in place: each turn is built when the
/// estimator reads it, so a large batch is never copied into rows.
struct ColumnTurns<'a> {
    keys: &'a [u64],
    sample: &'a [u32],
    turn: &'a [u32],
    reward: &'a [f64],
    correct: Option<&'a [bool]>,
    coverage: Option<&'a [f64]>,
    void: Option<&'a [bool]>,
    errored: Option<&'a [bool]>,
    truncated: Option<&'a [bool]>,
    log_ratio: Option<Vec<LogRatio>>,
}

impl<'a> ColumnTurns<'a> {
    /// Checks that every column has a row per prompt key.
    fn new(
        keys: &'a [u64],
        (sample, turn, reward): (&'a [u32], &'a [u32], &'a [f64]),
        cols: &'a Optional<'_>,
        log_ratio: Option<Vec<LogRatio>>,
    ) -> PyResult<Self> {
        let n = keys.len();
        if let Some(lr) = &log_ratio {
            same_len(lr, n, "train_logprobs")?;
        }
        Ok(ColumnTurns {
            keys,
            sample: same_len(sample, n, "sample")?,
            turn: same_len(turn, n, "turn")?,
            reward: same_len(reward, n, "reward")?,
            correct: optional(&cols.correct, n, "correct")?,
            coverage: optional(&cols.coverage, n, "coverage")?,
            void: optional(&cols.void, n, "void")?,
            errored: optional(&cols.errored, n, "errored")?,
            truncated: optional(&cols.truncated, n, "truncated")?,
            log_ratio,
        })
    }
}

impl TurnSource for ColumnTurns<'_> {
    #[inline]
    fn rows(&self) -> usize {
        self.keys.len()
    }

    #[inline]
    fn key(&self, i: usize) -> (u64, u32, u32) {
        (self.keys[i], self.sample[i], self.turn[i])
    }

    #[inline]
    fn reward(&self, i: usize) -> f64 {
        self.reward[i]
    }

    #[inline]
    fn turn(&self, i: usize) -> TurnInput {
        let void = self.void.is_some_and(|v| v[i]);
        let reward = self.reward[i];
        TurnInput {
            prompt: self.keys[i],
            sample: self.sample[i],
            turn: self.turn[i],
            reward,
            correct: self.correct.is_some_and(|c| c[i]),
            coverage: self.coverage.map(|c| c[i]).filter(|c| c.is_finite()),
            void,
            // A NaN reward is what `Recipe.rewards` gives an infra_error.
            errored: self.errored.map_or(reward.is_nan() && !void, |e| e[i]),
            truncated: self.truncated.is_some_and(|t| t[i]),
            log_ratio: self.log_ratio.as_ref().map(|lr| lr[i]),
        }
    }
}

/// Per-row train/rollout log-ratio statistics from per-token log-probs (for MRS).
fn log_ratios(
    train: Option<Vec<PyReadonlyArray1<'_, f32>>>,
    rollout: Option<Vec<PyReadonlyArray1<'_, f32>>>,
) -> PyResult<Option<Vec<LogRatio>>> {
    let (Some(train), Some(rollout)) = (train, rollout) else {
        return Ok(None);
    };
    if train.len() != rollout.len() {
        return Err(value_error(
            "train_logprobs and rollout_logprobs differ in rows",
        ));
    }
    let mut out = Vec::with_capacity(train.len());
    for (row, (t, r)) in train.iter().zip(&rollout).enumerate() {
        let (t, r) = (t.as_slice()?, r.as_slice()?);
        if t.len() != r.len() {
            return Err(value_error(format!(
                "row {row}: train_logprobs has {} tokens, rollout_logprobs {}",
                t.len(),
                r.len()
            )));
        }
        out.push(LogRatio::from_logprobs(t, r));
    }
    Ok(Some(out))
}

/// Returns, masks, rejection sampling and advantages over a batch of turns, as
/// `crucible advantages` computes them. Columns are NumPy or pyarrow arrays (see `column`). See
/// the stub for the arguments.
#[pyfunction]
#[pyo3(signature = (prompt, sample, turn, reward, *, estimator="trloo", gamma=None,
    normalize_std=true, correct=None, coverage=None, void=None, errored=None, truncated=None,
    prs=None, mrs=false, train_logprobs=None, rollout_logprobs=None, group_filter=false,
    drop_rejected_from_baseline=false, seed=0))]
#[allow(clippy::too_many_arguments)]
pub fn advantages<'py>(
    py: Python<'py>,
    prompt: &Bound<'py, PyAny>,
    sample: &Bound<'py, PyAny>,
    turn: &Bound<'py, PyAny>,
    reward: &Bound<'py, PyAny>,
    estimator: &str,
    gamma: Option<f64>,
    normalize_std: bool,
    correct: Option<&Bound<'py, PyAny>>,
    coverage: Option<&Bound<'py, PyAny>>,
    void: Option<&Bound<'py, PyAny>>,
    errored: Option<&Bound<'py, PyAny>>,
    truncated: Option<&Bound<'py, PyAny>>,
    prs: Option<&str>,
    mrs: bool,
    train_logprobs: Option<Vec<PyReadonlyArray1<'py, f32>>>,
    rollout_logprobs: Option<Vec<PyReadonlyArray1<'py, f32>>>,
    group_filter: bool,
    drop_rejected_from_baseline: bool,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let cfg = config(
        estimator,
        gamma,
        normalize_std,
        prs,
        mrs,
        group_filter,
        drop_rejected_from_baseline,
        seed,
    )?;
    let log_ratio = log_ratios(train_logprobs, rollout_logprobs)?;
    if mrs && log_ratio.is_none() {
        return Err(value_error("mrs needs train_logprobs and rollout_logprobs"));
    }
    let keys = keys_of(prompt)?;
    let (sample, turn) = (
        column::<u32>(sample, "sample")?,
        column::<u32>(turn, "turn")?,
    );
    let reward = column::<f64>(reward, "reward")?;
    let cols = Optional {
        correct: optional_column(correct, "correct")?,
        coverage: optional_column(coverage, "coverage")?,
        void: optional_column(void, "void")?,
        errored: optional_column(errored, "errored")?,
        truncated: optional_column(truncated, "truncated")?,
    };
    let rows = ColumnTurns::new(
        keys.as_slice()?,
        (sample.as_slice()?, turn.as_slice()?, reward.as_slice()?),
        &cols,
        log_ratio,
    )?;
    let (out, summary) = py
        .detach(|| crucible_rl::compute_columns(&rows, &cfg))
        .map_err(value_error)?;
    let reason: Vec<i8> = out
        .reason
        .iter()
        .map(|r| r.map_or(-1, |r| r as i8))
        .collect();
    let d = PyDict::new(py);
    // The vectors move into NumPy without a copy.
    d.set_item("ret", out.ret.into_pyarray(py))?;
    d.set_item("advantage", out.advantage.into_pyarray(py))?;
    d.set_item("weight", out.weight.into_pyarray(py))?;
    d.set_item("reason", reason.into_pyarray(py))?;
    let s = PyDict::new(py);
    s.set_item("rows", summary.rows)?;
    s.set_item("kept", summary.kept)?;
    s.set_item("masked", summary.masked)?;
    s.set_item("rejected", summary.rejected)?;
    for r in Reason::ALL {
        s.set_item(r.as_str(), summary.count(r))?;
    }
    d.set_item("summary", s)?;
    Ok(d)
}

#[allow(clippy::too_many_arguments)]
fn config(
    estimator: &str,
    gamma: Option<f64>,
    normalize_std: bool,
    prs: Option<&str>,
    mrs: bool,
    group_filter: bool,
    drop_rejected_from_baseline: bool,
    seed: u64,
) -> PyResult<Config> {
    let mut est = Estimator::from_name(estimator)
        .ok_or_else(|| value_error(format!("unknown estimator `{estimator}`")))?;
    match &mut est {
        Estimator::Grpo { normalize_std: n } => *n = normalize_std,
        _ if !normalize_std => return Err(value_error("normalize_std applies only to grpo")),
        _ => {}
    }
    let mut cfg = Config::new(est);
    cfg.gamma = gamma.unwrap_or(cfg.gamma);
    cfg.rejected_in_baseline = !drop_rejected_from_baseline;
    cfg.seed = seed;
    cfg.group_filter = group_filter.then(GroupFilter::default);
    cfg.mrs = mrs.then(Mrs::default);
    cfg.prs = match prs {
        None => None,
        Some("turn") => Some(Prs::default()),
        Some("trajectory") => Some(Prs {
            mode: PrsMode::PerTrajectory,
            ..Prs::default()
        }),
        Some(other) => {
            return Err(value_error(format!(
                "prs is `turn` or `trajectory`, not `{other}`"
            )));
        }
    };
    cfg.validate().map_err(value_error)?;
    Ok(cfg)
}
