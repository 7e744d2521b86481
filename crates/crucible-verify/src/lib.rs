//! Static verifier for candidate Triton solutions.
//!
//! [`verify`] parses a KernelBench-style candidate (imports, `@triton.jit` kernels,
//! `class ModelNew(nn.Module)` with `forward`) with Ruff's Python parser and reports the
//! findings that can be decided by reading the code alone: no `ModelNew`, no kernel launched on
//! the forward path, PyTorch doing the work in `forward`, try/except fallbacks, monkeypatching,
//! forbidden modules, streams, precision downcasts, result caches, tensor subclasses.
//! A [`Policy`] decides the severity of each rule.
//!
//! Architecture invariant: this crate does no I/O except [`Policy::from_file`].

mod attrs;
mod checker;
mod docs;
mod facts;
mod forward;
mod kernel;
mod policy;
mod rules;
mod semantic;
mod torch_api;

use crucible_result::{Finding, Severity};
use serde::Serialize;

pub use docs::rules_markdown;
pub use policy::{Error, Level, PRESETS, Policy};
pub use rules::{RULES, Rule, RuleInfo};

/// The verdict of the static verifier on one candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// In source order; findings without a position first.
    pub findings: Vec<Finding>,
}

impl Report {
    /// Whether any finding has severity `reject`.
    pub fn rejected(&self) -> bool {
        self.worst() == Some(Severity::Reject)
    }

    /// Whether any finding is `flag` or worse.
    pub fn flagged(&self) -> bool {
        self.worst() >= Some(Severity::Flag)
    }

    /// The most severe finding, if any.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }
}

/// Sources longer than this may nest deeply enough (one level per two bytes in `a+a+a...`)
/// that dropping their AST needs more stack than a worker thread has.
const DEEP_SOURCE_BYTES: usize = 16 * 1024;

/// Checks one candidate source file under `policy`.
pub fn verify(source: &str, policy: &Policy) -> Report {
    let parsed = match ruff_python_parser::parse_module(source) {
        Ok(parsed) => parsed,
        Err(err) => {
            return Report {
                findings: vec![rules::syntax_error::finding(source, &err)],
            };
        }
    };
    let (findings, too_deep) = {
        let module = parsed.syntax();
        let sem = semantic::Semantic::new(module);
        let facts = facts::ModuleFacts::collect(&sem);
        let fwd = forward::Forward::build(&sem);
        let too_deep = facts.too_deep || fwd.too_deep;
        let mut cx = checker::Checker::new(source, policy, &sem, &facts, &fwd);
        rules::run(&mut cx);
        (cx.into_findings(), too_deep)
    };
    if too_deep || source.len() > DEEP_SOURCE_BYTES {
        // Dropping a very deep AST recurses once per level: do it on a large stack. Only a
        // large source can nest deeply enough to need it.
        stacker::grow(256 << 20, move || drop(parsed));
    }
    Report { findings }
}
