//! Cancelling a task while a worker judges it, for real: the engine on the CPU with real harness
//! processes, a real SQLite store, the worker loop on its own thread. The candidate sleeps in
//! `forward`; after the cancel its evaluation's processes are gone within seconds, nothing is
//! written for it, and the worker takes the next task. The heartbeat meanwhile shows the
//! judge's stage.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crucible_judge::{Device, EvalConfig, StageLimits};
use crucible_queue::{Store, TaskSpec, TaskState, WorkerInfo};
use crucible_worker::{Engine, EngineOptions, LoopConfig, Tuning, run_worker};

mod common;

use common::{fixture, runtime, wait_until};

fn spec(name: &str, candidate: &str) -> TaskSpec {
    let mut spec = TaskSpec::new(name, fixture("task_relu.py"), candidate);
    spec.options.trials = Some(2);
    spec.options.generalize = Some("off".into());
    spec.cache = false;
    spec
}

/// Live processes below this one whose command line runs a harness module.
fn harness_processes() -> HashSet<u32> {
    let mut parent = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so read after its closing paren.
        let Some(rest) = stat.rsplit_once(") ").map(|(_, rest)| rest) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            continue;
        }
        if let Some(ppid) = fields.get(1).and_then(|p| p.parse::<u32>().ok()) {
            parent.insert(pid, ppid);
        }
    }
    let me = std::process::id();
    let descends = |mut pid: u32| {
        while let Some(&up) = parent.get(&pid) {
            if up == me {
                return true;
            }
            pid = up;
        }
        false
    };
    parent
        .keys()
        .copied()
        .filter(|&pid| descends(pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains("crucible_harness"))
                .unwrap_or(false)
        })
        .collect()
}

/// Sets the loop's stop flag when dropped, so a failed assertion inside the thread scope ends
/// the loop (after its evaluation in flight) instead of waiting for it forever.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_cancelled_evaluation_is_killed_within_seconds_and_the_worker_moves_on() {
    let Some(runtime) = runtime() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&format!("sqlite://{}", dir.path().join("q.db").display()))
        .expect("open the store");
    let mut base = EvalConfig::new(Device::Cpu);
    // Longer than the test waits: only the cancel can end the sleeping trial in time (if it
    // fails, this limit ends it and the loop drains).
    base.limits = StageLimits::uniform(Device::Cpu, Duration::from_secs(45));
    let tuning = Tuning {
        base: Some(base),
        ..Tuning::default()
    };
    // No warm pool: every harness process below this test belongs to the evaluation in flight.
    // Two at once, as a service worker runs them: an evaluation that fails while sharing the
    // device is judged again alone, which a cancelled one must not be.
    let options = EngineOptions {
        concurrency: 2,
        ..EngineOptions::plain()
    };
    let engine = Engine::with_tuning(runtime, Device::Cpu, options, tuning).expect("an engine");
    let worker = WorkerInfo {
        id: "cancel:cpu".into(),
        device: "cpu".into(),
        ..WorkerInfo::default()
    };
    let config = LoopConfig::new(worker, 2);
    let slow = store
        .submit(None, vec![spec("slow_relu", &fixture("slow_relu.py"))])
        .expect("submit")
        .remove(0);
    let stop = AtomicBool::new(false);
    let report = std::thread::scope(|scope| {
        let looping = scope.spawn(|| run_worker(&store, &engine, &config, &stop));
        let _stop = StopOnDrop(&stop);

        // The heartbeat shows the judge's stage: the candidate sleeps in its first trial.
        let stage = wait_until(
            "the slow trial in a heartbeat",
            Duration::from_secs(90),
            || {
                let workers = store.workers().ok()?;
                let flight = workers.first()?.in_flight.first()?.clone();
                (flight.task == slow)
                    .then_some(flight.stage)
                    .flatten()
                    .filter(|s| s.starts_with("trial_"))
            },
        );
        let status = store.workers().expect("workers").remove(0);
        assert_eq!(status.current_task.as_deref(), Some(slow.as_str()));
        assert_eq!(status.stage.as_deref(), Some(stage.as_str()));
        let processes = harness_processes();
        assert!(
            processes.len() >= 2,
            "the referee and the candidate run: {processes:?}"
        );

        let cancelled_at = Instant::now();
        assert!(store.cancel(&slow).expect("cancel"), "the task was running");
        // Watch every harness process below the test until 2 s after the evaluation's are
        // gone: nothing else is queued and there is no warm pool, so any new one would be the
        // cancelled evaluation started again.
        let mut gone_after = None;
        let mut started_since = HashSet::new();
        while gone_after
            .is_none_or(|at: Duration| cancelled_at.elapsed() < at + Duration::from_secs(2))
        {
            let now = harness_processes();
            started_since.extend(now.difference(&processes).copied());
            if gone_after.is_none() && now.is_disjoint(&processes) {
                gone_after = Some(cancelled_at.elapsed());
            }
            assert!(
                cancelled_at.elapsed() < Duration::from_secs(10),
                "the evaluation's processes outlived the cancel by 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let gone_after = gone_after.unwrap_or_default();
        eprintln!("cancel -> every harness process of the evaluation gone: {gone_after:.2?}");
        assert!(
            gone_after < Duration::from_secs(5),
            "took {gone_after:?} to stop"
        );
        assert!(
            started_since.is_empty(),
            "harness processes started after the cancel: {started_since:?}"
        );

        // The worker is free: the next task is judged and completed.
        let next = store
            .submit(None, vec![spec("honest_relu", &fixture("honest_relu.py"))])
            .expect("submit")
            .remove(0);
        let done = store
            .wait_terminal(std::slice::from_ref(&next), Duration::from_secs(120))
            .expect("wait")
            .remove(0);
        assert_eq!(done.state, TaskState::Done);
        let verdict = done.result.as_ref().map(|r| r["verdict"].clone());
        assert_eq!(verdict, Some(serde_json::json!("correct")));
        stop.store(true, Ordering::SeqCst);
        looping.join().expect("loop thread").expect("loop result")
    });
    assert_eq!(report.stopped, 1, "{report:?}");
    assert_eq!(report.completed, 1, "{report:?}");
    assert_eq!((report.retried, report.refused), (0, 0), "{report:?}");
    let record = store.task(&slow).expect("read").expect("known");
    assert_eq!(record.state, TaskState::Cancelled);
    assert!(record.result.is_none(), "nothing was written for it");
    let idle = store.workers().expect("workers").remove(0);
    assert!(idle.in_flight.is_empty(), "{idle:?}");
}
