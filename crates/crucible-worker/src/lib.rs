//! A worker: judges claimed tasks on one device. [`Engine`] runs the evaluations (warm harness
//! processes, exclusive GPU timing, reference-timing cache, several at once); [`run_worker`] is
//! the loop that claims them from the queue.

pub mod engine;
pub mod run;

pub use engine::{Control, Engine, EngineError, EngineOptions, Job, JudgeOptions, Tuning};
pub use run::{Evaluator, LoopConfig, LoopReport, run_worker};
