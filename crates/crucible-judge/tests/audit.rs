//! The task audit on the CPU: the builtin suite has no degenerate task and the judge refuses
//! every reference in disguise; deliberately degenerate, broken and hanging tasks are reported
//! as such without stopping the audit.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crucible_judge::audit::{AuditConfig, AuditReport, TaskAudit, audit, discover_tasks};
use crucible_judge::{Device, Runtime};
use crucible_result::{FailureClass, Verdict};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn runtime() -> Runtime {
    Runtime::discover().expect("the judge's Python runtime (run scripts/bootstrap)")
}

fn config() -> AuditConfig {
    let mut cfg = AuditConfig::new(Device::Cpu);
    cfg.seed = Some(2024);
    cfg.disguise = false;
    cfg
}

fn run(suite: &Path, cfg: &AuditConfig) -> AuditReport {
    let tasks = discover_tasks(suite).expect("task files");
    let report = audit(&runtime(), suite, &tasks, cfg, |_| {}).expect("the audit runs");
    assert!(report.failure.is_none(), "{:?}", report.failure);
    report
}

/// A suite directory holding the given fixtures under new names (numbered, so the order is fixed).
fn suite_of(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, fixture_name) in files {
        std::fs::copy(fixture(fixture_name), dir.path().join(name)).expect("copy fixture");
    }
    dir
}

fn task<'a>(report: &'a AuditReport, name: &str) -> &'a TaskAudit {
    report
        .tasks
        .iter()
        .find(|t| t.task == name)
        .unwrap_or_else(|| panic!("no task {name} in {report:#?}"))
}

#[test]
fn builtin_suite_has_no_degenerate_task_and_every_disguise_is_caught() {
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tasks/builtin");
    let mut cfg = config();
    cfg.disguise = true;
    let report = run(&suite, &cfg);
    assert_eq!(report.tasks_done, report.tasks_total);
    assert!(report.tasks_total >= 16, "{}", report.tasks_total);
    assert!(report.errors.is_empty(), "{report:#?}");
    for t in &report.tasks {
        assert!(
            t.passing_nulls().is_empty(),
            "{} is degenerate: {:#?}",
            t.task,
            t.nulls
        );
        assert_eq!(t.size_profile.as_deref(), Some("small"), "{}", t.task);
        for null in ["zeros", "ones"] {
            let n = t.nulls.iter().find(|n| n.name == null).expect("null ran");
            assert!(n.skipped.is_none() && n.trials_run >= 1 && n.message.is_some());
        }
        // Each layer on its own: the static verifier, then the runtime checks without it.
        let disguise = t.disguise.as_ref().expect("disguise evaluated");
        let (full, runtime) = (&disguise.judge, &disguise.runtime_only);
        assert_eq!(
            (full.verdict, full.stage.as_deref()),
            (Verdict::Rejected, Some("verify")),
            "{}: {full:#?}",
            t.task
        );
        assert!(
            full.findings
                .iter()
                .any(|f| f == "model-new-inherits-model")
        );
        assert_eq!(
            (runtime.verdict, runtime.failure_class),
            (Verdict::Rejected, Some(FailureClass::Rejected)),
            "{}: {runtime:#?}",
            t.task
        );
        assert_eq!(runtime.findings, ["no-triton-launch"], "{}", t.task);
    }
    assert!(report.degenerate.is_empty() && report.disguise_missed.is_empty());
}

#[test]
fn degenerate_fixtures_are_flagged_with_the_nulls_that_pass() {
    let suite = suite_of(&[
        ("1_softmax_bf16.py", "audit_degenerate_softmax_bf16.py"),
        ("2_size1_softmax.py", "audit_degenerate_size1_softmax.py"),
        ("3_relu.py", "task_relu.py"),
    ]);
    let report = run(suite.path(), &config());
    assert_eq!(
        report.degenerate,
        ["1_softmax_bf16", "2_size1_softmax"],
        "{report:#?}"
    );
    let softmax = task(&report, "1_softmax_bf16");
    assert!(softmax.passing_nulls().contains(&"zeros"));
    assert!(!softmax.passing_nulls().contains(&"ones"));
    let zeros = &softmax.nulls[0];
    assert_eq!((zeros.trials_passed, zeros.trials_run), (5, 5));
    let size1 = task(&report, "2_size1_softmax");
    assert_eq!(size1.passing_nulls(), ["ones"]);
    assert!(task(&report, "3_relu").passing_nulls().is_empty());
    assert!(report.errors.is_empty());
}

#[test]
fn hanging_and_broken_tasks_are_errors_and_the_audit_goes_on() {
    let suite = suite_of(&[
        ("2_broken.py", "broken_task.py"),
        ("3_size1_softmax.py", "audit_degenerate_size1_softmax.py"),
    ]);
    std::fs::write(
        suite.path().join("1_hang.py"),
        "import time\nimport torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        \
         time.sleep(3600)\n        return x\n\n\ndef get_inputs():\n    return [torch.randn(4)]\n\n\n\
         def get_init_inputs():\n    return []\n",
    )
    .expect("write task");
    let mut cfg = config();
    cfg.task_timeout = Duration::from_secs(20);
    let report = run(suite.path(), &cfg);
    assert_eq!(report.errors, ["1_hang", "2_broken"], "{report:#?}");
    let hang = task(&report, "1_hang").error.as_deref().unwrap_or("");
    assert!(hang.contains("did not finish within 20 s"), "{hang}");
    let broken = task(&report, "2_broken").error.as_deref().unwrap_or("");
    assert!(broken.contains("undefined_scale"), "{broken}");
    // After the restart, the next task is audited normally.
    assert_eq!(report.degenerate, ["3_size1_softmax"]);
}

#[test]
fn limit_and_time_budget_stop_starting_tasks() {
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tasks/builtin");
    let mut cfg = config();
    cfg.limit = Some(1);
    let report = run(&suite, &cfg);
    assert_eq!(report.tasks_done, 1);
    assert!(report.stopped.as_deref().unwrap_or("").contains("--limit"));

    cfg.limit = None;
    cfg.time_budget = Some(Duration::ZERO);
    let report = run(&suite, &cfg);
    assert_eq!((report.tasks_done, report.tasks.len()), (0, 0));
    assert!(
        report
            .stopped
            .as_deref()
            .unwrap_or("")
            .contains("time budget")
    );
}
