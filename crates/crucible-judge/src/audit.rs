//! Task audit: runs null candidates against every task of a suite and reports the tasks they
//! pass, i.e. degenerate tasks (KernelBench issue #165: zeros pass `23_Softmax` in bf16).
//!
//! The nulls (zeros, ones, a copy of an input, the first input's mean broadcast) are trusted
//! outputs, so they are computed by one trusted audit process (`crucible_harness.audit`) that
//! loops over the tasks without restarting, which matters where device time is scarce. It builds
//! inputs and the reference with the referee's own code and compares with the referee's
//! `compare`, so "passes here" means "would pass the judge". A task that hangs past its deadline
//! or crashes the process is recorded as an error and the process is restarted. The fifth null,
//! the reference in disguise (the task's `Model` as `ModelNew`, with a `@triton.jit` kernel that
//! is never launched), is a candidate file and goes through the judge ([`evaluate`]) twice: in
//! full, and without the static verifier, so each defense layer is seen to refuse it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crucible_result::{FailureClass, Seeds, Severity, Verdict};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::device::Device;
use crate::judge::{EvalConfig, StageLimits, ToleranceProfile, derive_seeds, evaluate, fresh_seed};
use crate::process::{ChannelError, HarnessProcess, Spawn};
use crate::protocol::{AuditFailure, AuditReply, AuditRequest, Reply, parse_reply};
use crate::runtime::Runtime;
use crate::sandbox::Sandbox;

/// Schema tag of the audit report.
pub const SCHEMA: &str = "crucible.audit/1";

/// The null candidates the audit process computes, in report order.
pub const NULLS: [&str; 4] = ["zeros", "ones", "input-copy", "broadcast-mean"];

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot read the suite {path}: {source}")]
    Suite {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no task files (*.py) in {0}")]
    NoTasks(PathBuf),
    #[error("cannot create the audit's scratch directory: {0}")]
    Scratch(std::io::Error),
    #[error("the audit process did not start: {0}")]
    Start(String),
}

#[derive(Debug, Clone)]
pub struct AuditConfig {
    pub device: Device,
    /// Trials per task, each with fresh inputs; a null passes only if it passes all of them.
    pub trials: u32,
    /// Base seed; fresh when `None` (the report records it for replay).
    pub seed: Option<u64>,
    pub tolerance: ToleranceProfile,
    /// Task size profile; `None` picks `small` on the CPU when the task has one, else `full`.
    pub size_profile: Option<String>,
    /// Also evaluate the reference in disguise through the full judge (one evaluation per task).
    pub disguise: bool,
    /// Audit at most this many tasks (in suite order).
    pub limit: Option<usize>,
    /// Start no new task once this much time has passed.
    pub time_budget: Option<Duration>,
    /// Deadline for one task in the audit process; past it the process is killed and restarted.
    pub task_timeout: Duration,
    /// Deadline for the audit process to import torch and report ready.
    pub start_timeout: Duration,
    /// Sandbox of the disguise's candidate process.
    pub sandbox: Option<Sandbox>,
}

impl AuditConfig {
    pub fn new(device: Device) -> AuditConfig {
        AuditConfig {
            device,
            trials: 5,
            seed: None,
            tolerance: ToleranceProfile::KbV0,
            size_profile: None,
            disguise: true,
            limit: None,
            time_budget: None,
            task_timeout: Duration::from_secs(300),
            start_timeout: Duration::from_secs(120),
            sandbox: Some(Sandbox::default()),
        }
    }
}

/// One null candidate against one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NullResult {
    pub name: String,
    /// Passed every trial: the task cannot tell this null from a solution.
    pub passed: bool,
    pub trials_run: u32,
    pub trials_passed: u32,
    /// Why this null could not be built for the task (it then counts as not passing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The referee's complaint on the first failing trial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_abs: Option<f64>,
    /// Fraction of elements out of tolerance on the last trial run (near 0: nearly degenerate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mismatched_fraction: Option<f64>,
}

/// One judge evaluation of the reference in disguise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DisguiseVerdict {
    pub verdict: Verdict,
    /// The judge refused it (any verdict but `correct`).
    pub caught: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_class: Option<FailureClass>,
    /// The stage that refused it (`verify` for the static verifier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Codes of the rejecting findings.
    #[serde(default)]
    pub findings: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub wall_s: f64,
}

/// The reference in disguise, judged in full and with the runtime checks alone, so a static
/// rule that catches it does not hide a hole in the runtime defenses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DisguiseResult {
    /// The full judge (static verifier, then the processes) refused it.
    pub caught: bool,
    pub judge: DisguiseVerdict,
    /// The judge without its static verifier.
    pub runtime_only: DisguiseVerdict,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskAudit {
    /// The task file's stem.
    pub task: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_profile: Option<String>,
    /// Shape and dtype of each reference output (first trial).
    #[serde(default)]
    pub outputs: Value,
    /// The task could not be audited (it failed to load or run, hung, or crashed the process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub nulls: Vec<NullResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disguise: Option<DisguiseResult>,
    pub wall_s: f64,
}

impl TaskAudit {
    /// Names of the nulls that pass this task.
    pub fn passing_nulls(&self) -> Vec<&str> {
        self.nulls
            .iter()
            .filter(|n| n.passed)
            .map(|n| n.name.as_str())
            .collect()
    }

    pub fn is_degenerate(&self) -> bool {
        self.nulls.iter().any(|n| n.passed)
    }

    /// The full judge, or its runtime checks alone, accepted the reference in disguise.
    pub fn disguise_missed(&self) -> bool {
        self.disguise
            .as_ref()
            .is_some_and(|d| !d.judge.caught || !d.runtime_only.caught)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditReport {
    pub schema: String,
    pub suite: String,
    pub device: String,
    pub tolerance: String,
    pub trials: u32,
    pub seeds: Seeds,
    pub nulls: Vec<String>,
    pub disguise: bool,
    /// Tasks in the suite, and how many were audited before `--limit` or the time budget.
    pub tasks_total: usize,
    pub tasks_done: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The audit itself failed (its process would not start) after `tasks_done` tasks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    pub tasks: Vec<TaskAudit>,
    /// Tasks some null passes.
    pub degenerate: Vec<String>,
    /// Tasks whose reference in disguise the judge accepted, in full or without its verifier.
    pub disguise_missed: Vec<String>,
    /// Tasks that could not be audited.
    pub errors: Vec<String>,
    /// torch/python/device as the audit process saw them.
    #[serde(default)]
    pub env: Value,
    pub wall_s: f64,
}

/// The task files of a suite: the `.py` files of a directory in numeric-prefix order
/// (`2_x` before `10_x`), or a single file.
pub fn discover_tasks(suite: &Path) -> Result<Vec<PathBuf>, AuditError> {
    let err = |source| AuditError::Suite {
        path: suite.to_path_buf(),
        source,
    };
    if suite.is_file() {
        return Ok(vec![suite.to_path_buf()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(suite)
        .map_err(err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "py"))
        .filter(|p| p.file_name().is_none_or(|n| n != "__init__.py"))
        .collect();
    files.sort_by_key(|p| {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let digits: String = name.chars().take_while(char::is_ascii_digit).collect();
        (digits.parse::<u64>().unwrap_or(u64::MAX), name)
    });
    if files.is_empty() {
        return Err(AuditError::NoTasks(suite.to_path_buf()));
    }
    Ok(files)
}

/// The reference in disguise: the task file itself, a Triton kernel that is defined but never
/// launched, and `ModelNew` inheriting `Model`'s forward. It computes exactly the reference, so
/// only the judge's runtime checks (no launch of the file's own kernels) can refuse it.
pub fn disguise_source(task_src: &str) -> String {
    format!(
        "{task_src}\n\n# --- crucible audit: the reference in disguise ---\n\
         import triton\n\
         import triton.language as tl\n\n\n\
         @triton.jit\n\
         def crucible_decoy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n    \
         offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    \
         mask = offs < n\n    \
         tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)\n\n\n\
         class ModelNew(Model):\n    \
         \"\"\"Model's own forward; the kernel above is never launched.\"\"\"\n"
    )
}

/// The audit process, restarted on demand after a task kills or hangs it.
struct Auditor<'a> {
    runtime: &'a Runtime,
    cfg: &'a AuditConfig,
    home: PathBuf,
    process: Option<HarnessProcess>,
}

impl Auditor<'_> {
    fn process(&mut self) -> Result<&mut HarnessProcess, AuditError> {
        if self.process.is_none() {
            let mut process = HarnessProcess::spawn(Spawn {
                python: self.runtime.python.clone(),
                module: "crucible_harness.audit",
                env: crate::runtime::harness_env(self.runtime, self.cfg.device, &self.home)
                    .map_err(|e| AuditError::Start(e.to_string()))?,
                cwd: self.home.clone(),
                sandbox: None,
            })
            .map_err(|e| AuditError::Start(e.to_string()))?;
            process
                .receive(self.cfg.start_timeout)
                .map_err(|e| AuditError::Start(format!("{e}\n{}", process.log_tail(4000))))?;
            self.process = Some(process);
        }
        // Just set above when it was missing.
        self.process
            .as_mut()
            .ok_or_else(|| AuditError::Start("no process".into()))
    }

    /// Audits one task with the nulls; `Err` only when the audit process cannot be started.
    fn nulls(
        &mut self,
        task: &Path,
        seeds: &Seeds,
        audit: &mut TaskAudit,
    ) -> Result<Value, AuditError> {
        let cfg = self.cfg;
        let request = AuditRequest::Audit {
            task_path: task.to_path_buf(),
            profile: cfg.size_profile.clone().unwrap_or_else(|| "auto".into()),
            device: cfg.device.harness_name().to_string(),
            init_seed: seeds.init,
            seeds: seeds.trials.clone(),
            tolerance: cfg.tolerance.referee_tolerances(),
            nulls: NULLS.iter().map(|n| n.to_string()).collect(),
        };
        let message =
            serde_json::to_value(&request).map_err(|e| AuditError::Start(e.to_string()))?;
        let process = self.process()?;
        let reply = match process.request(&message, cfg.task_timeout) {
            Ok(reply) => reply,
            Err(e) => {
                let detail = match &e {
                    ChannelError::Timeout(limit) => format!(
                        "the task did not finish within {:.0} s (the audit process was killed \
                         and restarted)",
                        limit.as_secs_f64()
                    ),
                    _ => format!("audit process: {e}\n{}", process.log_tail(2000)),
                };
                // Whatever state it is in, a fresh process audits the next task.
                self.shutdown();
                audit.error = Some(detail);
                return Ok(Value::Null);
            }
        };
        let reply = match parse_reply::<AuditReply, AuditFailure>(reply) {
            Ok(Reply::Ok(reply)) => reply,
            Ok(Reply::Failed(failure)) => {
                audit.error = Some(format!(
                    "{} (stage {})\n{}",
                    failure.error,
                    failure.stage,
                    failure.traceback.trim_end()
                ));
                if failure.restart {
                    self.shutdown();
                }
                return Ok(Value::Null);
            }
            Err(detail) => {
                audit.error = Some(format!(
                    "the audit process broke the harness protocol: {detail}"
                ));
                self.shutdown();
                return Ok(Value::Null);
            }
        };
        audit.size_profile = Some(reply.profile);
        audit.outputs = serde_json::to_value(&reply.outputs).unwrap_or_default();
        audit.nulls = reply
            .nulls
            .into_iter()
            .map(|n| NullResult {
                name: n.name,
                passed: n.passed,
                trials_run: n.trials_run,
                trials_passed: n.trials_passed,
                skipped: n.skipped,
                message: n.message,
                max_abs: n.max_abs,
                mismatched_fraction: n.mismatched_fraction,
            })
            .collect();
        Ok(serde_json::to_value(&reply.env).unwrap_or_default())
    }

    fn shutdown(&mut self) {
        if let Some(p) = self.process.take() {
            p.shutdown();
        }
    }
}

fn run_disguise(
    runtime: &Runtime,
    cfg: &AuditConfig,
    seeds: &Seeds,
    task: &Path,
    task_src: &[u8],
) -> DisguiseResult {
    let source = disguise_source(&String::from_utf8_lossy(task_src));
    let stem = task
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "task".into());
    // The judge writes the candidate into its own scratch directory; the path only names it.
    let candidate_path = PathBuf::from(format!("disguise/{stem}.py"));
    let mut eval_cfg = EvalConfig::new(cfg.device);
    eval_cfg.seed = Some(seeds.base);
    eval_cfg.trials = cfg.trials;
    eval_cfg.tolerance = cfg.tolerance;
    eval_cfg.size_profile = cfg.size_profile.clone();
    eval_cfg.timing = None;
    eval_cfg.sandbox = cfg.sandbox.clone();
    eval_cfg.limits = StageLimits::for_device(cfg.device);
    let judge = |eval_cfg: &EvalConfig| {
        let started = Instant::now();
        let result = evaluate(
            runtime,
            task,
            task_src,
            &candidate_path,
            source.as_bytes(),
            eval_cfg,
        );
        DisguiseVerdict {
            verdict: result.verdict,
            caught: !result.correct,
            failure_class: result.failure.as_ref().map(|f| f.class),
            stage: result.failure.as_ref().map(|f| f.stage.clone()),
            findings: result
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Reject)
                .map(|f| f.code.clone())
                .collect(),
            message: result
                .failure
                .as_ref()
                .map(|f| f.message.lines().take(3).collect::<Vec<_>>().join("\n")),
            wall_s: started.elapsed().as_secs_f64(),
        }
    };
    let full = judge(&eval_cfg);
    eval_cfg.verify_policy = None;
    let runtime_only = judge(&eval_cfg);
    DisguiseResult {
        caught: full.caught,
        judge: full,
        runtime_only,
    }
}

/// Audits `tasks` (as listed by [`discover_tasks`]); `on_task` sees each task as it finishes.
///
/// Task failures are part of the report, and so is an audit process that stops starting
/// (`failure`, with the tasks done before it); `Err` means the suite could not be read.
pub fn audit(
    runtime: &Runtime,
    suite: &Path,
    tasks: &[PathBuf],
    cfg: &AuditConfig,
    mut on_task: impl FnMut(&TaskAudit),
) -> Result<AuditReport, AuditError> {
    let started = Instant::now();
    let seeds = derive_seeds(cfg.seed.unwrap_or_else(fresh_seed), cfg.trials.max(1));
    let home = tempfile::Builder::new()
        .prefix("crucible-audit-")
        .tempdir()
        .map_err(AuditError::Scratch)?;
    let mut auditor = Auditor {
        runtime,
        cfg,
        home: home.path().to_path_buf(),
        process: None,
    };
    let mut report = AuditReport::empty(suite, cfg, &seeds, tasks.len());
    for (index, task) in tasks.iter().enumerate() {
        if let Some(why) = stop_before(cfg, index, tasks.len(), started) {
            report.stopped = Some(why);
            break;
        }
        let task_started = Instant::now();
        let mut entry = TaskAudit::empty(task);
        match std::fs::read(task).and_then(|src| Ok((std::fs::canonicalize(task)?, src))) {
            Err(e) => entry.error = Some(format!("cannot read the task: {e}")),
            Ok((abs, src)) => {
                let env = match auditor.nulls(&abs, &seeds, &mut entry) {
                    Ok(env) => env,
                    // Keep what was done: the report says why the rest is missing.
                    Err(e) => {
                        report.failure = Some(format!("{e} (before task {})", entry.task));
                        break;
                    }
                };
                if report.env.is_null() && !env.is_null() {
                    report.env = env;
                }
                // A task the referee cannot run says nothing about the judge.
                if cfg.disguise && entry.error.is_none() {
                    entry.disguise = Some(run_disguise(runtime, cfg, &seeds, &abs, &src));
                }
            }
        }
        entry.wall_s = task_started.elapsed().as_secs_f64();
        on_task(&entry);
        report.add(entry);
    }
    auditor.shutdown();
    report.wall_s = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Why no more tasks start (`--limit` reached, time budget spent), if so.
fn stop_before(cfg: &AuditConfig, index: usize, total: usize, started: Instant) -> Option<String> {
    if cfg.limit.is_some_and(|limit| index >= limit) {
        return Some(format!("--limit {index} reached"));
    }
    cfg.time_budget
        .filter(|budget| started.elapsed() >= *budget)
        .map(|budget| {
            format!(
                "time budget of {:.0} s spent after {index} of {total} tasks",
                budget.as_secs_f64()
            )
        })
}

impl TaskAudit {
    fn empty(task: &Path) -> TaskAudit {
        TaskAudit {
            task: task
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            path: task.display().to_string(),
            size_profile: None,
            outputs: Value::Null,
            error: None,
            nulls: Vec::new(),
            disguise: None,
            wall_s: 0.0,
        }
    }
}

impl AuditReport {
    fn empty(suite: &Path, cfg: &AuditConfig, seeds: &Seeds, tasks_total: usize) -> AuditReport {
        AuditReport {
            schema: SCHEMA.to_string(),
            suite: suite.display().to_string(),
            device: cfg.device.to_string(),
            tolerance: cfg.tolerance.name().to_string(),
            trials: cfg.trials.max(1),
            seeds: seeds.clone(),
            nulls: NULLS.iter().map(|s| s.to_string()).collect(),
            disguise: cfg.disguise,
            tasks_total,
            tasks_done: 0,
            stopped: None,
            failure: None,
            tasks: Vec::new(),
            degenerate: Vec::new(),
            disguise_missed: Vec::new(),
            errors: Vec::new(),
            env: Value::Null,
            wall_s: 0.0,
        }
    }

    /// One audited task, and the lists it belongs on.
    fn add(&mut self, entry: TaskAudit) {
        if entry.error.is_some() {
            self.errors.push(entry.task.clone());
        }
        if entry.is_degenerate() {
            self.degenerate.push(entry.task.clone());
        }
        if entry.disguise_missed() {
            self.disguise_missed.push(entry.task.clone());
        }
        self.tasks.push(entry);
        self.tasks_done += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_listed_in_numeric_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            "10_b.py",
            "2_a.py",
            "1_c.py",
            "notes.txt",
            "__init__.py",
            "x.py",
        ] {
            std::fs::write(dir.path().join(name), "").expect("write");
        }
        let names: Vec<String> = discover_tasks(dir.path())
            .expect("tasks")
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["1_c.py", "2_a.py", "10_b.py", "x.py"]);
    }

    #[test]
    fn disguise_keeps_the_task_and_adds_an_unlaunched_kernel() {
        let src = disguise_source("class Model:\n    pass\n");
        assert!(src.starts_with("class Model:"));
        assert!(src.contains("@triton.jit"));
        assert!(src.contains("class ModelNew(Model):"));
    }
}
