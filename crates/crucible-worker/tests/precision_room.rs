//! One evaluation at a time, but the warm pool's waiting pairs on the device: where the judge's
//! own precision measurement finds no room beside them, the engine runs the evaluation again
//! with them gone, never leaving the measurement undone. Undone, a softmax scaled by 1.5, which
//! only that measurement refuses, was `correct` on an 80 GiB H100 with twelve pairs waiting.
//! Real harness processes on the CPU (Triton's interpreter); this binary holds one test so that
//! no other test's pool is counted with it.

use std::sync::{Arc, Mutex};

use crucible_result::{FailureClass, Verdict};
use crucible_worker::engine::{EngineEvent, Probe};
use crucible_worker::{Job, JudgeOptions};

mod common;

use common::{cpu_engine_with_ready_pool, fixture, runtime};

/// The fixture `task_wide_softmax_room_after_first_referee.py` with its marker at `marker`:
/// the engine writes task files where it likes.
fn task_with_room_after_the_first_referee(marker: &std::path::Path) -> String {
    let task = fixture("task_wide_softmax_room_after_first_referee.py");
    let line =
        "MARKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), \"first-referee\")";
    assert!(task.contains(line), "the fixture sets MARKER so");
    task.replace(
        line,
        &format!("MARKER = {:?}", marker.display().to_string()),
    )
}

#[test]
fn a_precision_measurement_without_room_beside_the_pool_is_made_with_the_device_cleared() {
    let Some(runtime) = runtime() else { return };
    let dropped = Arc::new(Mutex::new(Vec::new()));
    let probe: Probe = {
        let dropped = Arc::clone(&dropped);
        Arc::new(move |event| {
            if let EngineEvent::MadeWay { dropped: n } = event {
                dropped.lock().expect("dropped").push(n);
            }
        })
    };
    // One at a time: only the pool's pairs share the device.
    let engine = cpu_engine_with_ready_pool(runtime, 1, 2, probe, |_| {});
    let dir = tempfile::tempdir().expect("temp dir");
    let job = Job {
        task_name: "task_wide_softmax".into(),
        task_source: task_with_room_after_the_first_referee(&dir.path().join("first-referee")),
        candidate_source: fixture("atol_carried_softmax.py"),
        options: JudgeOptions {
            seed: Some(1),
            trials: Some(2),
            ..JudgeOptions::default()
        },
        deadline: None,
    };
    let result = engine.evaluate(&job);
    assert_eq!(result.verdict, Verdict::Incorrect, "{:#?}", result.failure);
    let failure = result.failure.as_ref().expect("failure");
    assert_eq!(failure.class, FailureClass::Incorrect);
    assert_eq!(failure.stage, "precision");
    let retried = result
        .findings
        .iter()
        .find(|f| f.code == "retried-alone")
        .unwrap_or_else(|| panic!("the retry is noted: {:#?}", result.findings));
    assert!(
        retried.message.contains("warm pool's waiting processes"),
        "{}",
        retried.message
    );
    let dropped = dropped.lock().expect("dropped").clone();
    assert!(
        matches!(dropped.as_slice(), [n] if *n >= 1),
        "the pool made way once, killing its waiting pairs: {dropped:?}"
    );
}
