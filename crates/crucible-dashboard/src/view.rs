//! What the pages show, computed from the store's records: no HTML here.

use std::collections::BTreeMap;

use crucible_queue::{FindingSummary, FinishedCounts, TaskSummary};

/// Verdict counts and throughput over a window of finished tasks.
#[derive(Debug, Default, PartialEq)]
pub struct Window {
    pub finished: usize,
    /// Evaluations a worker ran (cached and shared answers excluded).
    pub evaluated: usize,
    pub verdicts: BTreeMap<String, usize>,
}

impl Window {
    /// From the store's counts (what the live page uses: no rows leave the store).
    pub fn from_counts(counts: &FinishedCounts) -> Window {
        let mut window = Window::default();
        for (verdict, reused, n) in &counts.rows {
            let n = *n as usize;
            window.finished += n;
            if !reused {
                window.evaluated += n;
            }
            *window.verdicts.entry(verdict.clone()).or_default() += n;
        }
        window
    }
}

/// The findings that matter for integrity: rejects and flags.
pub fn integrity_findings(row: &TaskSummary) -> impl Iterator<Item = &FindingSummary> {
    row.findings
        .iter()
        .filter(|f| f.severity == "reject" || f.severity == "flag")
}

/// Honest: correct, with no reject or flag finding (a flag never counts as a clean win).
pub fn is_honest(row: &TaskSummary) -> bool {
    row.verdict.as_deref() == Some("correct") && integrity_findings(row).next().is_none()
}

/// The speedup a leaderboard ranks by: at matched precision when it was measured (a
/// precision cut does not buy a place), else the plain one.
pub fn ranking_speedup(row: &TaskSummary) -> Option<f64> {
    row.speedup_matched.or(row.speedup)
}

/// One task's standing over its finished evaluations.
#[derive(Debug, Default, PartialEq)]
pub struct TaskStanding {
    pub evaluations: usize,
    pub correct: usize,
    pub honest: usize,
    pub best_honest: Option<f64>,
    /// Rejected candidates per verifier policy (`default` when none was named).
    pub rejected_by_policy: BTreeMap<String, usize>,
}

/// Standings per task name, from summaries of finished tasks.
pub fn standings(rows: &[TaskSummary]) -> BTreeMap<String, TaskStanding> {
    let mut by_task: BTreeMap<String, TaskStanding> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.verdict.is_some()) {
        let standing = by_task.entry(row.task_name.clone()).or_default();
        standing.evaluations += 1;
        if row.verdict.as_deref() == Some("correct") {
            standing.correct += 1;
        }
        if is_honest(row) {
            standing.honest += 1;
            if let Some(speedup) = ranking_speedup(row) {
                standing.best_honest =
                    Some(standing.best_honest.map_or(speedup, |b| b.max(speedup)));
            }
        }
        if row.verdict.as_deref() == Some("rejected") {
            let policy = row
                .verify_policy
                .clone()
                .unwrap_or_else(|| "default".into());
            *standing.rejected_by_policy.entry(policy).or_default() += 1;
        }
    }
    by_task
}

/// The honest evaluations of one task, best first.
pub fn leaderboard(rows: &[TaskSummary]) -> Vec<&TaskSummary> {
    let mut honest: Vec<&TaskSummary> = rows
        .iter()
        .filter(|r| is_honest(r) && ranking_speedup(r).is_some())
        .collect();
    honest.sort_by(|a, b| {
        let key = |r: &TaskSummary| ranking_speedup(r).unwrap_or(f64::NEG_INFINITY);
        key(b).total_cmp(&key(a))
    });
    honest
}

/// Reject and flag counts per finding code.
pub fn findings_by_code(rows: &[TaskSummary]) -> BTreeMap<(String, String), usize> {
    let mut counts = BTreeMap::new();
    for finding in rows.iter().flat_map(integrity_findings) {
        *counts
            .entry((finding.code.clone(), finding.severity.clone()))
            .or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crucible_queue::TaskState;

    fn row(
        task: &str,
        verdict: &str,
        speedup: Option<f64>,
        findings: &[(&str, &str)],
    ) -> TaskSummary {
        TaskSummary {
            id: format!("{task}-{verdict}-{speedup:?}"),
            task_name: task.into(),
            client: "c".into(),
            state: TaskState::Done,
            submitted_at: 0.0,
            finished_at: Some(1.0),
            cached: false,
            verdict: Some(verdict.into()),
            speedup,
            speedup_matched: None,
            findings: findings
                .iter()
                .map(|(code, severity)| FindingSummary {
                    code: (*code).into(),
                    severity: (*severity).into(),
                    message: String::new(),
                    line: None,
                })
                .collect(),
            verify_policy: None,
        }
    }

    #[test]
    fn a_flagged_fast_kernel_does_not_lead_the_board() {
        let rows = vec![
            row("relu", "correct", Some(1.5), &[]),
            row(
                "relu",
                "correct",
                Some(9.0),
                &[("precision-downgrade", "flag")],
            ),
            row("relu", "correct", Some(2.5), &[("x", "info")]),
            row(
                "relu",
                "rejected",
                None,
                &[("torch-compute-in-forward", "reject")],
            ),
        ];
        let board = leaderboard(&rows);
        let speedups: Vec<_> = board.iter().map(|r| r.speedup.unwrap()).collect();
        assert_eq!(speedups, vec![2.5, 1.5]);
        let standing = &standings(&rows)["relu"];
        assert_eq!(
            (standing.evaluations, standing.correct, standing.honest),
            (4, 3, 2)
        );
        assert_eq!(standing.best_honest, Some(2.5));
        assert_eq!(standing.rejected_by_policy["default"], 1);
        let codes = findings_by_code(&rows);
        assert_eq!(codes.len(), 2);
    }

    #[test]
    fn matched_speedup_ranks_when_measured() {
        let mut cut = row("mm", "correct", Some(4.6), &[]);
        cut.speedup_matched = Some(0.5);
        let honest = row("mm", "correct", Some(1.6), &[]);
        let rows = vec![cut, honest];
        let board = leaderboard(&rows);
        assert_eq!(board[0].speedup, Some(1.6));
    }

    #[test]
    fn window_counts_verdicts_and_evaluations() {
        let counts = FinishedCounts {
            rows: vec![("correct".into(), true, 3), ("incorrect".into(), false, 2)],
        };
        let window = Window::from_counts(&counts);
        assert_eq!((window.finished, window.evaluated), (5, 2));
        assert_eq!(window.verdicts["incorrect"], 2);
    }
}
