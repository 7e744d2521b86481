//! `missing-model-new`

use ruff_python_ast::Expr;
use ruff_text_size::Ranged;

use crate::checker::Checker;
use crate::semantic::Target;

declare_rule! {
    /// ## What it does
    /// Checks that the module defines a class named `ModelNew`.
    ///
    /// ## Why is this bad?
    /// The judge imports `ModelNew` from the candidate and runs it against the reference
    /// `Model`. Without the class (or with `ModelNew` bound by an import or an assignment to
    /// something that is not a class of this file) there is nothing to evaluate, or the
    /// evaluated code is not the candidate's.
    ///
    /// ## Example
    /// ```python
    /// class TritonModel(nn.Module):
    ///     def forward(self, x):
    ///         return relu_triton(x)
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return relu_triton(x)
    /// ```
    pub(crate) const MISSING_MODEL_NEW = {
        code: "missing-model-new",
        summary: "No `class ModelNew` is defined.",
        strict: Reject,
        kernelbench: Reject,
        lenient: Reject,
    };
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    match &cx.sem.model_new {
        Target::Class(_) => {}
        Target::Missing => cx.report_file(
            "no `class ModelNew` is defined. The judge imports `ModelNew` from this file: define \
             `class ModelNew(nn.Module)` with a `forward` that launches your Triton kernels.",
        ),
        Target::Alias(range, value) => {
            // `ModelNew = Model` is reported by `model-new-inherits-model`.
            if matches!(value, Some(Expr::Name(n)) if n.id.as_str() == "Model") {
                return;
            }
            let what = value.map_or("an import", |v| cx.text(v.range()));
            let message = format!(
                "`ModelNew` is bound to {what} instead of a class defined in this file. Define \
                 `class ModelNew(nn.Module)` here, with a `forward` that launches your Triton \
                 kernels."
            );
            cx.report(range.start(), message);
        }
    }
}
