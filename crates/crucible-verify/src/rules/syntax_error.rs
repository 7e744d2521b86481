//! `syntax-error`

use crucible_result::{Finding, Severity};
use ruff_python_parser::ParseError;

use crate::checker::{Checker, LineIndex};

declare_rule! {
    /// ## What it does
    /// Reports a candidate that does not parse as Python 3, with the line and column where the
    /// parser stopped.
    ///
    /// ## Why is this bad?
    /// Nothing else can be checked, and the judge could not import the file either. This rule
    /// is always `reject`; a policy cannot change it.
    ///
    /// ## Example
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x)
    ///         return relu_triton(x)
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return relu_triton(x)
    /// ```
    pub(crate) const SYNTAX_ERROR = {
        code: "syntax-error",
        summary: "The file is not valid Python.",
        strict: Reject,
        kernelbench: Reject,
        lenient: Reject,
    };
}

/// Reported by [`crate::verify`] before any analysis; nothing to do once the file parsed.
pub(crate) fn check(_cx: &mut Checker<'_, '_>) {}

/// The finding for a parse error.
pub(crate) fn finding(source: &str, err: &ParseError) -> Finding {
    let (line, column) = LineIndex::new(source).locate(source, usize::from(err.location.start()));
    Finding {
        code: SYNTAX_ERROR.code.to_string(),
        severity: Severity::Reject,
        message: format!(
            "syntax error: {}. The file must parse as Python 3 before anything else is checked.",
            err.error
        ),
        line: Some(line),
        column: Some(column),
    }
}
