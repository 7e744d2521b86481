//! The in-process judge: `Judge` (a configured `crucible eval`), the result document as a typed
//! object (`EvalResult`), and the builtin task suite the wheel carries.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crucible_judge::{
    Device, EvalConfig, Generalize, Runtime, StageLimits, ToleranceProfile, runtime,
};
use crucible_result::{EvalResult, Severity, Verdict};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use sha2::{Digest, Sha256};

use crate::convert::{to_py, value_error};

/// The builtin suite, embedded so that the wheel judges it without a checkout.
const BUILTIN: [(&str, &str); 16] = [
    ("01_relu", include_str!("../../../tasks/builtin/01_relu.py")),
    (
        "02_gelu_tanh",
        include_str!("../../../tasks/builtin/02_gelu_tanh.py"),
    ),
    (
        "03_bias_add_mul",
        include_str!("../../../tasks/builtin/03_bias_add_mul.py"),
    ),
    (
        "04_row_sum",
        include_str!("../../../tasks/builtin/04_row_sum.py"),
    ),
    (
        "05_row_max_mean",
        include_str!("../../../tasks/builtin/05_row_max_mean.py"),
    ),
    (
        "06_softmax",
        include_str!("../../../tasks/builtin/06_softmax.py"),
    ),
    (
        "07_rmsnorm",
        include_str!("../../../tasks/builtin/07_rmsnorm.py"),
    ),
    (
        "08_layernorm",
        include_str!("../../../tasks/builtin/08_layernorm.py"),
    ),
    (
        "09_matmul",
        include_str!("../../../tasks/builtin/09_matmul.py"),
    ),
    (
        "10_matmul_fp16",
        include_str!("../../../tasks/builtin/10_matmul_fp16.py"),
    ),
    (
        "11_linear_bias_relu",
        include_str!("../../../tasks/builtin/11_linear_bias_relu.py"),
    ),
    (
        "12_matmul_scale_residual",
        include_str!("../../../tasks/builtin/12_matmul_scale_residual.py"),
    ),
    (
        "13_softmax_scale",
        include_str!("../../../tasks/builtin/13_softmax_scale.py"),
    ),
    (
        "14_gelu_mul_bf16",
        include_str!("../../../tasks/builtin/14_gelu_mul_bf16.py"),
    ),
    (
        "15_depthwise_conv2d",
        include_str!("../../../tasks/builtin/15_depthwise_conv2d.py"),
    ),
    (
        "16_swish",
        include_str!("../../../tasks/builtin/16_swish.py"),
    ),
];

/// The builtin task suite: `{name: task source}`.
#[pyfunction]
pub fn builtin_tasks() -> Vec<(&'static str, &'static str)> {
    BUILTIN.to_vec()
}

/// The interpreter `scripts/bootstrap` installs for the judge (it may not exist).
#[pyfunction]
pub fn default_venv_python() -> PathBuf {
    runtime::default_venv().join("bin").join("python")
}

/// One judge result document (`crucible.result/1`), typed.
#[pyclass(frozen, module = "crucible._native", name = "EvalResult")]
pub struct PyEvalResult {
    pub inner: EvalResult,
}

#[pymethods]
impl PyEvalResult {
    /// Parses a result document (what `crucible eval --json` prints).
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<PyEvalResult> {
        let inner = serde_json::from_str(text).map_err(value_error)?;
        Ok(PyEvalResult { inner })
    }

    #[getter]
    fn verdict(&self) -> &'static str {
        self.inner.verdict.as_str()
    }
    #[getter]
    fn correct(&self) -> bool {
        self.inner.correct
    }
    #[getter]
    fn speedup(&self) -> Option<f64> {
        self.inner.speedup
    }
    #[getter]
    fn speedup_matched(&self) -> Option<f64> {
        self.inner.speedup_matched
    }
    #[getter]
    fn coverage(&self) -> Option<f64> {
        self.inner.coverage
    }
    #[getter]
    fn wall_s(&self) -> f64 {
        self.inner.wall_s
    }
    #[getter]
    fn task_name(&self) -> &str {
        &self.inner.task.name
    }
    #[getter]
    fn candidate_name(&self) -> &str {
        &self.inner.candidate.name
    }
    /// True for `infra_error`: the judge failed, and the sample has no reward.
    #[getter]
    fn infra_error(&self) -> bool {
        self.inner.verdict == Verdict::InfraError
    }
    /// A hack or decoy: verdict `rejected` or any finding of severity `reject`.
    #[getter]
    fn is_hack(&self) -> bool {
        crucible_rl::reward::is_hack(&self.inner)
    }
    /// Codes of the findings of severity `flag`.
    #[getter]
    fn flags(&self) -> Vec<String> {
        self.inner
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Flag)
            .map(|f| f.code.clone())
            .collect()
    }
    /// The findings as dicts (`code`, `severity`, `message`, `line`, `column`).
    #[getter]
    fn findings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(
            py,
            &serde_json::to_value(&self.inner.findings).map_err(value_error)?,
        )
    }
    /// The whole document as plain Python objects.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &serde_json::to_value(&self.inner).map_err(value_error)?)
    }
    /// The whole document as one line of JSON.
    fn to_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.inner).map_err(value_error)
    }
    fn __repr__(&self) -> String {
        format!(
            "EvalResult(task={:?}, verdict={:?}, speedup={:?}, coverage={:?})",
            self.inner.task.name,
            self.inner.verdict.as_str(),
            self.inner.speedup,
            self.inner.coverage
        )
    }
}

/// A configured in-process judge (what `crucible eval` runs), reused across evaluations.
#[pyclass(frozen, module = "crucible._native")]
pub struct Judge {
    runtime: Runtime,
    cfg: EvalConfig,
    /// The judge reads tasks from files: each task source is written once, under a directory
    /// named by its hash, as `<task_name>.py`.
    task_dir: tempfile::TempDir,
}

/// One evaluation to run: `(task_name, task_source, candidate_source)`.
type Job = (String, String, String);

/// A job whose task file is written.
struct Prepared {
    task_path: PathBuf,
    task_src: String,
    candidate_path: PathBuf,
    candidate_src: String,
}

impl Judge {
    fn task_file(&self, task_name: &str, task_src: &str) -> std::io::Result<PathBuf> {
        let hash = Sha256::digest(task_src.as_bytes());
        let dir = self.task_dir.path().join(runtime::hex(&hash[..12]));
        let path = dir.join(format!("{task_name}.py"));
        if !path.exists() {
            std::fs::create_dir_all(&dir)?;
            // Written aside and renamed, so a concurrent evaluation never reads half a file.
            let staged = tempfile::NamedTempFile::new_in(&dir)?;
            std::fs::write(staged.path(), task_src)?;
            staged.persist(&path).map_err(|e| e.error)?;
        }
        Ok(path)
    }

    /// Writes each job's task file (a failure there is the caller's infrastructure, raised).
    fn prepare(&self, jobs: Vec<Job>) -> PyResult<Vec<Prepared>> {
        jobs.into_iter()
            .map(|(name, task_src, candidate_src)| {
                // A task name is a file stem: no directories, no hidden files.
                let stem: String = name
                    .chars()
                    .map(|c| {
                        if c == '/' || c == '\\' || c == '\0' {
                            '_'
                        } else {
                            c
                        }
                    })
                    .collect();
                let stem = if stem.is_empty() || stem.starts_with('.') {
                    format!("task{stem}")
                } else {
                    stem
                };
                let task_path = self.task_file(&stem, &task_src).map_err(|e| {
                    PyRuntimeError::new_err(format!("cannot write the task file for {name}: {e}"))
                })?;
                Ok(Prepared {
                    task_src,
                    candidate_path: PathBuf::from(format!("{stem}.candidate.py")),
                    task_path,
                    candidate_src,
                })
            })
            .collect()
    }

    fn run(&self, job: &Prepared) -> EvalResult {
        crucible_judge::evaluate(
            &self.runtime,
            &job.task_path,
            job.task_src.as_bytes(),
            &job.candidate_path,
            job.candidate_src.as_bytes(),
            &self.cfg,
        )
    }
}

#[pymethods]
impl Judge {
    /// `python` is the interpreter the harness runs in (it needs torch and triton); the Python
    /// wrapper picks `CRUCIBLE_PYTHON`, the bootstrap venv or the caller's own interpreter.
    #[new]
    #[pyo3(signature = (python, *, device="cpu", trials=5, seed=None, tolerance="kb-v0",
        size_profile=None, generalize="auto", timing=true, verify_policy=Some("strict"),
        verify_policy_file=None, stage_timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        python: PathBuf,
        device: &str,
        trials: u32,
        seed: Option<u64>,
        tolerance: &str,
        size_profile: Option<String>,
        generalize: &str,
        timing: bool,
        verify_policy: Option<&str>,
        verify_policy_file: Option<PathBuf>,
        stage_timeout: Option<f64>,
    ) -> PyResult<Judge> {
        let device: Device = device.parse().map_err(value_error)?;
        let mut cfg = EvalConfig::new(device);
        if !(1..=1000).contains(&trials) {
            return Err(value_error("trials must be in 1..=1000"));
        }
        cfg.trials = trials;
        cfg.seed = seed;
        cfg.tolerance = ToleranceProfile::parse(tolerance)
            .ok_or_else(|| value_error(format!("unknown tolerance profile `{tolerance}`")))?;
        cfg.size_profile = size_profile;
        cfg.generalize = Generalize::parse(generalize)
            .ok_or_else(|| value_error(format!("unknown generalize `{generalize}`")))?;
        if !timing {
            cfg.timing = None;
        }
        if let Some(secs) = stage_timeout {
            if !(secs.is_finite() && secs > 0.0) {
                return Err(value_error(
                    "stage_timeout must be a positive number of seconds",
                ));
            }
            cfg.limits = StageLimits::uniform(device, Duration::from_secs_f64(secs));
        }
        cfg.verify_policy = match (verify_policy_file, verify_policy) {
            (Some(path), _) => Some(crate::verify::policy("strict", Some(path))?),
            (None, None | Some("off")) => None,
            (None, Some(name)) => Some(crate::verify::policy(name, None)?),
        };
        let runtime =
            Runtime::with_python(python).map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        let task_dir = tempfile::Builder::new()
            .prefix("crucible-py-tasks-")
            .tempdir()
            .map_err(|e| PyRuntimeError::new_err(format!("cannot create a task directory: {e}")))?;
        Ok(Judge {
            runtime,
            cfg,
            task_dir,
        })
    }

    #[getter]
    fn device(&self) -> String {
        self.cfg.device.to_string()
    }

    #[getter]
    fn python(&self) -> PathBuf {
        self.runtime.python.clone()
    }

    /// Judges one candidate against one task. Never raises for a bad candidate: every problem,
    /// the judge's own included, is a verdict in the result.
    #[pyo3(signature = (task_source, candidate_source, *, task_name="task"))]
    fn evaluate(
        &self,
        py: Python<'_>,
        task_source: String,
        candidate_source: String,
        task_name: &str,
    ) -> PyResult<PyEvalResult> {
        let jobs = self.prepare(vec![(task_name.to_owned(), task_source, candidate_source)])?;
        let inner = py.detach(|| self.run(&jobs[0]));
        Ok(PyEvalResult { inner })
    }

    /// Judges many `(task_name, task_source, candidate_source)` jobs, `concurrency` at a time
    /// on threads of the judge; results come back in input order.
    #[pyo3(signature = (jobs, *, concurrency=2))]
    fn evaluate_many(
        &self,
        py: Python<'_>,
        jobs: Vec<Job>,
        concurrency: usize,
    ) -> PyResult<Vec<PyEvalResult>> {
        if concurrency == 0 {
            return Err(value_error("concurrency must be at least 1"));
        }
        let jobs = self.prepare(jobs)?;
        let results = py.detach(|| self.run_all(&jobs, concurrency));
        Ok(results
            .into_iter()
            .map(|inner| PyEvalResult { inner })
            .collect())
    }

    fn __repr__(&self) -> String {
        format!(
            "Judge(device={:?}, python={:?})",
            self.cfg.device.to_string(),
            self.runtime.python
        )
    }
}

impl Judge {
    /// Workers take the next job index until none is left; each writes its own slots.
    fn run_all(&self, jobs: &[Prepared], concurrency: usize) -> Vec<EvalResult> {
        let next = AtomicUsize::new(0);
        let mut slots: Vec<Option<EvalResult>> = (0..jobs.len()).map(|_| None).collect();
        let done = std::sync::Mutex::new(&mut slots);
        std::thread::scope(|scope| {
            for _ in 0..concurrency.min(jobs.len()) {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(job) = jobs.get(i) else { break };
                        let result = self.run(job);
                        if let Ok(mut slots) = done.lock() {
                            slots[i] = Some(result);
                        }
                    }
                });
            }
        });
        slots.into_iter().flatten().collect()
    }
}
