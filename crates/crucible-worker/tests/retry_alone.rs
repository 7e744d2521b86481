//! A large task's retry alone has the device to itself, the warm pool's waiting pairs included: on a GPU
//! each holds two CUDA contexts, and beside them a large task retried alone on an 80 GiB H100
//! ran out of memory again. Real harness processes on the CPU (Triton's interpreter), counted
//! from /proc; this binary holds one test so that no other test's pool is counted with it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crucible_result::{FailureClass, Verdict};
use crucible_worker::engine::{EngineEvent, Probe};
use crucible_worker::{Job, JudgeOptions};

mod common;

use common::{cpu_engine_with_ready_pool, fixture, harness_descendants, runtime, wait_until};

/// What the probe saw, in order, with the harness processes alive at that moment.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Taken { prestarted: bool, alive: usize },
    MadeWay { dropped: usize },
    Finished { alive: usize },
}

#[test]
fn the_pool_kills_its_waiting_pairs_for_a_retry_alone_and_starts_none_until_it_ends() {
    let Some(runtime) = runtime() else { return };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let probe: Probe = {
        let seen = Arc::clone(&seen);
        Arc::new(move |event| {
            let entry = match event {
                EngineEvent::WorkersTaken { prestarted, .. } => Seen::Taken {
                    prestarted,
                    alive: harness_descendants().len(),
                },
                EngineEvent::MadeWay { dropped } => Seen::MadeWay { dropped },
                // Just before the run's processes are killed.
                EngineEvent::ProcessCpu { .. } => Seen::Finished {
                    alive: harness_descendants().len(),
                },
                _ => return,
            };
            seen.lock().expect("seen").push(entry);
        })
    };
    // Two at once: the engine put evaluations side by side, so it retries a fault alone.
    let engine = cpu_engine_with_ready_pool(runtime, 2, 3, probe, |base| {
        // A large task's retry clears the device (a small one's keeps the pairs: `engine.rs`);
        // the engine sets these from the GPU's memory, and on the CPU every trial is large here.
        base.large_work_bytes = 1;
        base.large_tasks = Some(Arc::new(crucible_judge::LargeTasks::new()));
    });
    let before = harness_descendants().len();
    let job = Job {
        task_name: "task_relu".into(),
        task_source: fixture("task_relu.py"),
        candidate_source: fixture("out_of_memory.py"),
        options: JudgeOptions {
            seed: Some(1),
            trials: Some(2),
            ..JudgeOptions::default()
        },
        deadline: None,
    };
    let result = engine.evaluate(&job);
    // Out of memory alone too: the candidate's.
    assert_eq!(
        result.verdict,
        Verdict::RuntimeError,
        "{:#?}",
        result.failure
    );
    assert_eq!(
        result.failure.as_ref().map(|f| f.class),
        Some(FailureClass::OutOfMemory)
    );
    assert!(
        result.findings.iter().any(|f| f.code == "retried-alone"),
        "{:#?}",
        result.findings
    );
    let seen = seen.lock().expect("seen").clone();
    let [
        Seen::Taken {
            prestarted: true, ..
        },
        Seen::Finished { .. },
        Seen::MadeWay { dropped },
        Seen::Taken {
            prestarted: true,
            alive: at_retry,
        },
        Seen::Finished {
            alive: at_retry_end,
        },
    ] = seen.as_slice()
    else {
        panic!("a first run, the pool making way, a retry on a pair it kept: {seen:?}");
    };
    // Three pairs waited before the first run; it took one and the pool refilled meanwhile.
    assert!(*dropped >= 1, "{seen:?}");
    // Two processes a pair: the retry's own is all that is left of the pool's, and no pair
    // started while it ran.
    for alive in [*at_retry, *at_retry_end] {
        assert!(
            alive + 4 <= before,
            "{alive} harness processes beside the retry, {before} with three pairs waiting: {seen:?}"
        );
    }
    // Once the retry ended the pool starts pairs again.
    wait_until("the pool refilled", Duration::from_secs(180), || {
        (engine.warm() >= 3).then_some(())
    });
}
