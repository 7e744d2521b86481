//! The rules. Each lives in its own file with a doc comment in ruff's shape (*What it does*,
//! *Why is this bad?*, *Example*, *Use instead*); `declare_rule!` keeps that doc comment as
//! rustdoc and also as the string that `docs/verifier-rules.md` is generated from.

use crate::checker::Checker;
use crate::policy::Level;

/// A rule's identity, documentation and preset severities.
#[derive(Debug)]
pub struct RuleInfo {
    /// Stable identifier, e.g. `torch-compute-in-forward`.
    pub code: &'static str,
    /// One line for tables.
    pub summary: &'static str,
    /// Markdown: the rule's doc comment.
    pub doc: &'static str,
    pub strict: Level,
    pub kernelbench: Level,
    pub lenient: Level,
}

/// Declares a rule's [`RuleInfo`] constant; its doc comment becomes [`RuleInfo::doc`].
macro_rules! declare_rule {
    (
        $(#[doc = $doc:literal])*
        $vis:vis const $name:ident = {
            code: $code:literal,
            summary: $summary:literal,
            strict: $strict:ident,
            kernelbench: $kb:ident,
            lenient: $lenient:ident $(,)?
        };
    ) => {
        $(#[doc = $doc])*
        $vis const $name: $crate::rules::RuleInfo = $crate::rules::RuleInfo {
            code: $code,
            summary: $summary,
            doc: concat!($($doc, "\n"),*),
            strict: $crate::policy::Level::$strict,
            kernelbench: $crate::policy::Level::$kb,
            lenient: $crate::policy::Level::$lenient,
        };
    };
}

pub(crate) mod cuda_stream;
pub(crate) mod file_io;
pub(crate) mod forbidden_call;
pub(crate) mod forbidden_import;
pub(crate) mod identity_keyed_cache;
pub(crate) mod kernel_without_store;
pub(crate) mod missing_forward;
pub(crate) mod missing_model_new;
pub(crate) mod model_new_inherits_model;
pub(crate) mod monkeypatch;
pub(crate) mod no_kernel_launch;
pub(crate) mod no_triton_kernel;
pub(crate) mod precision_downcast;
pub(crate) mod shape_keyed_cache;
pub(crate) mod syntax_error;
pub(crate) mod tensor_subclass;
pub(crate) mod torch_compile;
pub(crate) mod torch_compute_in_forward;
pub(crate) mod try_except_fallback;
pub(crate) mod unexpected_import;
pub(crate) mod unused_kernel;

/// A rule: its documentation and the check that reports it.
pub struct Rule {
    pub info: RuleInfo,
    pub(crate) check: fn(&mut Checker<'_, '_>),
}

/// Every rule, in documentation order.
pub static RULES: &[Rule] = &[
    Rule {
        info: syntax_error::SYNTAX_ERROR,
        check: syntax_error::check,
    },
    Rule {
        info: missing_model_new::MISSING_MODEL_NEW,
        check: missing_model_new::check,
    },
    Rule {
        info: missing_forward::MISSING_FORWARD,
        check: missing_forward::check,
    },
    Rule {
        info: model_new_inherits_model::MODEL_NEW_INHERITS_MODEL,
        check: model_new_inherits_model::check,
    },
    Rule {
        info: no_triton_kernel::NO_TRITON_KERNEL,
        check: no_triton_kernel::check,
    },
    Rule {
        info: no_kernel_launch::NO_KERNEL_LAUNCH,
        check: no_kernel_launch::check,
    },
    Rule {
        info: unused_kernel::UNUSED_KERNEL,
        check: unused_kernel::check,
    },
    Rule {
        info: kernel_without_store::KERNEL_WITHOUT_STORE,
        check: kernel_without_store::check,
    },
    Rule {
        info: torch_compute_in_forward::TORCH_COMPUTE_IN_FORWARD,
        check: torch_compute_in_forward::check,
    },
    Rule {
        info: try_except_fallback::TRY_EXCEPT_FALLBACK,
        check: try_except_fallback::check,
    },
    Rule {
        info: monkeypatch::MONKEYPATCH,
        check: monkeypatch::check,
    },
    Rule {
        info: forbidden_import::FORBIDDEN_IMPORT,
        check: forbidden_import::check,
    },
    Rule {
        info: forbidden_call::FORBIDDEN_CALL,
        check: forbidden_call::check,
    },
    Rule {
        info: file_io::FILE_IO,
        check: file_io::check,
    },
    Rule {
        info: cuda_stream::CUDA_STREAM,
        check: cuda_stream::check,
    },
    Rule {
        info: torch_compile::TORCH_COMPILE,
        check: torch_compile::check,
    },
    Rule {
        info: precision_downcast::PRECISION_DOWNCAST,
        check: precision_downcast::check,
    },
    Rule {
        info: identity_keyed_cache::IDENTITY_KEYED_CACHE,
        check: identity_keyed_cache::check,
    },
    Rule {
        info: shape_keyed_cache::SHAPE_KEYED_CACHE,
        check: shape_keyed_cache::check,
    },
    Rule {
        info: tensor_subclass::TENSOR_SUBCLASS,
        check: tensor_subclass::check,
    },
    Rule {
        info: unexpected_import::UNEXPECTED_IMPORT,
        check: unexpected_import::check,
    },
];

/// Runs every rule the policy does not turn off.
pub(crate) fn run(cx: &mut Checker<'_, '_>) {
    for (index, rule) in RULES.iter().enumerate() {
        if cx.select(index) {
            (rule.check)(cx);
        }
    }
}
