//! What the worker's integration tests share: the judge's fixtures and runtime.

use std::path::Path;
use std::time::{Duration, Instant};

use crucible_judge::Runtime;

/// A file of `crates/crucible-judge/tests/fixtures`.
pub fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crucible-judge/tests/fixtures")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The judge's runtime, or `None` (with a message) where this machine has none.
pub fn runtime() -> Option<Runtime> {
    match Runtime::discover() {
        Ok(runtime) => Some(runtime),
        Err(error) => {
            eprintln!("SKIPPED: no judge Python runtime ({error}); set CRUCIBLE_PYTHON");
            None
        }
    }
}

/// Polls `probe` every 50 ms until it gives a value; panics after `within`.
pub fn wait_until<T>(what: &str, within: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let until = Instant::now() + within;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
