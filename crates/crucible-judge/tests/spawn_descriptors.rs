//! A sandboxed harness process spawned while other threads of the judge open and close
//! descriptors finds its sandbox and its channel intact.
//!
//! The child once moved its channel onto fd 3 between fork and exec, which closed whatever the
//! judge had on fd 3 at the fork. Another thread's file closed just before `Sandbox::prepare`
//! left fd 3 to the Landlock ruleset; the child then restricted itself with a socket and the
//! spawn failed with EBADFD ("File descriptor in bad state"), once in a CI run of hundreds of
//! spawns. Here a thread keeps taking and giving back the lowest free descriptor, which makes
//! that interleaving common.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crucible_judge::process::{HarnessProcess, Spawn};
use crucible_judge::{Runtime, Sandbox};

const SPAWNS: usize = 48;

#[test]
fn spawns_keep_sandbox_and_channel_while_other_threads_churn_descriptors() {
    let Ok(runtime) = Runtime::discover() else {
        eprintln!("SKIPPED: no judge Python runtime; set CRUCIBLE_PYTHON");
        return;
    };
    let modules = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/modules");
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                drop(std::fs::File::open("/dev/null"));
            }
        })
    };
    let mut failures = Vec::new();
    for _ in 0..SPAWNS {
        let sandbox =
            Sandbox::default().for_candidate(&[modules.as_path()], scratch.path(), &[], false);
        let spawned = HarnessProcess::spawn(Spawn {
            python: runtime.python.clone(),
            module: "channel_hello",
            env: vec![("PYTHONPATH".into(), modules.display().to_string())],
            cwd: scratch.path().to_path_buf(),
            sandbox: Some(sandbox),
        });
        match spawned {
            Ok(mut process) => match process.receive(Duration::from_secs(60)) {
                Ok(hello) if hello["ok"] == true => {}
                other => failures.push(format!("{other:?}; log: {}", process.log_tail(2000))),
            },
            Err(error) => failures.push(format!("spawn: {error}")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().expect("the churning thread");
    assert!(
        failures.is_empty(),
        "{} of {SPAWNS} spawns failed: {failures:#?}",
        failures.len()
    );
}
