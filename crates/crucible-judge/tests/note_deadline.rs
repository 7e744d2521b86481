//! A request's deadline leaves out the time the judge spends on the child's notes: on a GPU the
//! judge answers a candidate's `compiling` note only after the referee's precision forwards
//! ended, and a candidate waiting for that answer must not run out of its trial's time over it.
//! Its own work still counts in full.

use std::path::Path;
use std::time::Duration;

use crucible_judge::Runtime;
use crucible_judge::process::{ChannelError, HarnessProcess, Spawn};
use serde_json::{Value, json};

/// A child that notes, waits for the answer, then works `work_s`; the judge takes `judge_s`
/// over the note; the request's limit is 1 s.
fn exchange(work_s: f64, judge_s: f64) -> Option<Result<Value, ChannelError>> {
    let Ok(runtime) = Runtime::discover() else {
        eprintln!("SKIPPED: no judge Python runtime; set CRUCIBLE_PYTHON");
        return None;
    };
    let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/modules");
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let mut child = HarnessProcess::spawn(Spawn {
        python: runtime.python.clone(),
        module: "channel_noting",
        env: vec![("PYTHONPATH".into(), modules.display().to_string())],
        cwd: scratch.path().to_path_buf(),
        sandbox: None,
    })
    .expect("spawn");
    let mut on_note = |note: &str, _: &Value| {
        assert_eq!(note, "wait");
        std::thread::sleep(Duration::from_secs_f64(judge_s));
        Ok(Some(json!({"go": true})))
    };
    let reply = child.request_noting(
        &json!({"work_s": work_s}),
        Duration::from_secs(1),
        &mut on_note,
    );
    child.kill();
    Some(reply)
}

#[test]
fn the_judges_time_over_a_note_is_not_the_childs() {
    // 0.8 s of the judge's and 0.6 s of the child's: 1.4 s in all against a limit of 1 s.
    let Some(reply) = exchange(0.6, 0.8) else {
        return;
    };
    let reply = reply.expect("the child's 0.6 s fit its 1 s");
    assert_eq!(reply["answer"], json!({"go": true}));
}

#[test]
fn the_childs_own_time_after_a_note_still_counts() {
    let Some(reply) = exchange(1.5, 0.2) else {
        return;
    };
    assert!(matches!(reply, Err(ChannelError::Timeout(_))), "{reply:?}");
}
