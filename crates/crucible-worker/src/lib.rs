//! A worker: claims tasks from the queue and judges them on one device.

pub mod direct;
pub mod run;

pub use run::{Evaluator, LoopConfig, LoopReport, run_worker};
