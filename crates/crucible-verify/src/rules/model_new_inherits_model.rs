//! `model-new-inherits-model`

use ruff_python_ast::Expr;
use ruff_text_size::Ranged;

use crate::checker::Checker;
use crate::semantic::Target;

declare_rule! {
    /// ## What it does
    /// Reports a `ModelNew` that derives from the reference `Model` (directly or through
    /// another class of the file), or that is `Model` itself (`ModelNew = Model`).
    ///
    /// ## Why is this bad?
    /// `class ModelNew(Model): pass` passes every correctness check by running the reference
    /// PyTorch code. Even with a `forward` of its own, inheriting `Model` makes the reference's
    /// layers and methods one `super()` call away.
    ///
    /// ## Example
    /// ```python
    /// class ModelNew(Model):
    ///     pass
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return relu_triton(x)
    /// ```
    pub(crate) const MODEL_NEW_INHERITS_MODEL = {
        code: "model-new-inherits-model",
        summary: "`ModelNew` derives from (or is) the reference `Model`.",
        strict: Reject,
        kernelbench: Reject,
        lenient: Reject,
    };
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    match &cx.sem.model_new {
        Target::Class(class) => {
            if let Some(base) = cx.sem.model_base(*class) {
                cx.report(
                    base.range().start(),
                    "`ModelNew` derives from the reference `Model`, so it can run the reference \
                     PyTorch code. Derive from `nn.Module` and implement `forward` with your own \
                     Triton kernels.",
                );
            }
        }
        Target::Alias(range, Some(Expr::Name(n))) if n.id.as_str() == "Model" => {
            cx.report(
                range.start(),
                "`ModelNew = Model` evaluates the reference implementation itself. Define \
                 `class ModelNew(nn.Module)` with a `forward` that launches your Triton kernels.",
            );
        }
        _ => {}
    }
}
