//! Cross-checks of a candidate's own timings against what the judge sees from outside: the wall
//! time of its timed phase (calibrated by the referee's identical loop) and the memory-bandwidth
//! floor of the task. The candidate process measures itself; this module decides whether to
//! believe it. No I/O.

use crucible_result::{Finding, Severity, Stats};

/// What the judge knows about one timed comparison, from outside the candidate process.
pub(crate) struct TimingEvidence<'a> {
    pub(crate) reference: &'a [f64],
    /// Wall time of the referee's timed phase (warm-up plus timed iterations).
    pub(crate) reference_phase_s: f64,
    pub(crate) candidate: &'a [f64],
    /// Wall time of the candidate's timed phase, measured by this process.
    pub(crate) candidate_phase_s: f64,
    pub(crate) warmup: u32,
    pub(crate) io_bytes: f64,
    pub(crate) device_name: &'a str,
}

/// Peak memory bandwidth in bytes/s by device name; unknown devices get a bound no GPU reaches
/// yet, so the floor check never fires falsely.
fn peak_bandwidth(device_name: &str) -> f64 {
    let name = device_name.to_ascii_uppercase();
    if name.contains("H200") {
        4.8e12
    } else if name.contains("H100") {
        3.35e12
    } else if name.contains("A100") {
        2.04e12
    } else if name.contains("B200") {
        8.0e12
    } else {
        10.0e12
    }
}

/// Cross-checks the candidate's own event timings against the judge's outside view.
pub(crate) fn timing_findings(t: &TimingEvidence<'_>) -> Vec<Finding> {
    let mut findings = Vec::new();
    let finding = Finding::new;
    let sum_ms = |s: &[f64]| s.iter().sum::<f64>();
    let median = |s: &[f64]| Stats::from_samples(s).map(|s| s.median_ms).unwrap_or(0.0);
    let claimed_s = sum_ms(t.candidate) / 1e3;
    if claimed_s > t.candidate_phase_s {
        findings.push(finding(
            "timing-contradiction",
            Severity::Reject,
            format!(
                "the timed iterations claim {claimed_s:.6} s in total, but the judge measured the \
                 whole timed phase from outside at {:.6} s",
                t.candidate_phase_s
            ),
        ));
    }
    // The referee's phase has the same shape (warm-up, flush, forward, sync), so its wall time
    // minus its own kernel time is the loop's fixed cost. What is left of the candidate's wall
    // time after that cost, per iteration, is an outside estimate of its forward time.
    let iterations = (t.candidate.len() as u32 + t.warmup) as f64;
    let reference_work_s = (sum_ms(t.reference) + f64::from(t.warmup) * median(t.reference)) / 1e3;
    let loop_cost_s = (t.reference_phase_s - reference_work_s).max(0.0);
    let outside_ms = (t.candidate_phase_s - loop_cost_s).max(0.0) / iterations * 1e3;
    let claimed_ms = median(t.candidate);
    if t.reference_phase_s.is_finite() && outside_ms > 2.0 * claimed_ms + 0.05 {
        findings.push(finding(
            "timing-contradiction",
            Severity::Reject,
            format!(
                "the candidate's own timer reports a median of {claimed_ms:.4} ms per forward, \
                 but measured from outside its timed phase takes {outside_ms:.4} ms per \
                 iteration; do not touch timers, events or streams"
            ),
        ));
    }
    let floor_ms = t.io_bytes / peak_bandwidth(t.device_name) * 1e3;
    if claimed_ms < floor_ms {
        findings.push(finding(
            "below-bandwidth-floor",
            Severity::Flag,
            format!(
                "a median of {claimed_ms:.4} ms is below {floor_ms:.4} ms, the time needed just to \
                 read the inputs and write the outputs once at peak memory bandwidth"
            ),
        ));
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 100 iterations of 1 ms on each side, 5 warm-ups, and 2 ms of loop cost per iteration
    /// (flush, sync, Python) on both.
    fn evidence<'a>(
        reference: &'a [f64],
        candidate: &'a [f64],
        candidate_phase_s: f64,
    ) -> TimingEvidence<'a> {
        TimingEvidence {
            reference,
            reference_phase_s: 0.105 + 0.21,
            candidate,
            candidate_phase_s,
            warmup: 5,
            io_bytes: 256e6,
            device_name: "NVIDIA H200",
        }
    }

    fn codes(findings: &[Finding]) -> Vec<&str> {
        findings.iter().map(|f| f.code.as_str()).collect()
    }

    #[test]
    fn honest_timings_raise_nothing() {
        let ms = vec![1.0; 100];
        assert!(timing_findings(&evidence(&ms, &ms, 0.105 + 0.21)).is_empty());
        let half = vec![0.5; 100];
        // Twice as fast, and the outside view agrees.
        assert!(timing_findings(&evidence(&ms, &half, 0.0525 + 0.21)).is_empty());
    }

    #[test]
    fn a_timer_that_reports_a_hundredth_is_a_contradiction() {
        let ms = vec![1.0; 100];
        let claimed = vec![0.01; 100];
        let found = timing_findings(&evidence(&ms, &claimed, 0.105 + 0.21));
        assert!(codes(&found).contains(&"timing-contradiction"), "{found:?}");
        assert_eq!(found[0].severity, Severity::Reject);
    }

    #[test]
    fn claiming_more_time_than_the_phase_took_is_a_contradiction() {
        let ms = vec![1.0; 100];
        let found = timing_findings(&evidence(&ms, &ms, 0.05));
        assert!(codes(&found).contains(&"timing-contradiction"));
    }

    #[test]
    fn beating_the_bandwidth_floor_is_flagged() {
        // 256 MB at 4.8 TB/s needs 0.053 ms; claim 0.03 ms, consistently with the wall time.
        let ms = vec![1.0; 100];
        let fast = vec![0.03; 100];
        let found = timing_findings(&evidence(&ms, &fast, 0.00315 + 0.21));
        assert_eq!(codes(&found), vec!["below-bandwidth-floor"]);
        // An unknown device gets a generous bound (10 TB/s: 0.026 ms here).
        let unknown = TimingEvidence {
            device_name: "Some Future GPU",
            ..evidence(&ms, &fast, 0.00315 + 0.21)
        };
        assert!(timing_findings(&unknown).is_empty());
    }
}
