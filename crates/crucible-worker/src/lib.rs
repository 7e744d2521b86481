//! A worker: judges claimed tasks on one device. [`Engine`] runs the evaluations (warm harness
//! processes, exclusive GPU timing, reference-timing cache, several at once).

pub mod engine;

pub use engine::{Engine, EngineError, EngineOptions, Job, JudgeOptions, Tuning};
