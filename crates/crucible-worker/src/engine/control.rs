//! One evaluation's handle for whoever runs it (the worker loop): the stage it is in now, and a
//! way to stop it when its task is cancelled.

use std::sync::{Arc, Mutex};

use crucible_judge::{Abort, StageObserver};

/// Cheap to clone; every clone watches and stops the same evaluation.
#[derive(Debug, Clone, Default)]
pub struct Control {
    stage: Arc<StageCell>,
    abort: Abort,
}

impl Control {
    pub fn new() -> Control {
        Control::default()
    }

    /// The stage the judge started last (`start`, `trial_1`, `timing`, ...); `None` before the
    /// first.
    pub fn stage(&self) -> Option<String> {
        self.stage
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records the stage the evaluation is in (the engine's judge does this itself; other
    /// evaluators may).
    pub fn set_stage(&self, name: &str) {
        self.stage.stage_started(name);
    }

    /// Stops the evaluation: its processes are killed now (or as soon as it has them) and it
    /// ends `infra_error`, never charged to the candidate.
    pub fn cancel(&self) {
        self.abort.abort();
    }

    pub fn is_cancelled(&self) -> bool {
        self.abort.is_aborted()
    }

    pub(crate) fn observer(&self) -> Arc<dyn StageObserver> {
        self.stage.clone()
    }

    pub(crate) fn abort(&self) -> Abort {
        self.abort.clone()
    }
}

#[derive(Debug, Default)]
struct StageCell(Mutex<Option<String>>);

impl StageObserver for StageCell {
    fn stage_started(&self, name: &str) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(name.to_string());
    }
}
