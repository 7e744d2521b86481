//! `missing-forward`

use crate::checker::Checker;
use crate::semantic::Target;

declare_rule! {
    /// ## What it does
    /// Checks that `ModelNew` (or a base class defined in the same file) has a `forward`
    /// method.
    ///
    /// ## Why is this bad?
    /// Without its own `forward`, calling `ModelNew` runs `nn.Module.forward` (an error) or an
    /// inherited implementation that is not the candidate's Triton code.
    ///
    /// ## Example
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def __init__(self):
    ///         super().__init__()
    ///
    ///     def run(self, x):
    ///         return relu_triton(x)
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def __init__(self):
    ///         super().__init__()
    ///
    ///     def forward(self, x):
    ///         return relu_triton(x)
    /// ```
    pub(crate) const MISSING_FORWARD = {
        code: "missing-forward",
        summary: "`ModelNew` has no `forward` method.",
        strict: Reject,
        kernelbench: Reject,
        lenient: Reject,
    };
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let Target::Class(class) = cx.sem.model_new else {
        return;
    };
    // Inheriting `forward` from the reference is reported by `model-new-inherits-model`.
    if cx.sem.find_method(class, "forward").is_some() || cx.sem.model_base(class).is_some() {
        return;
    }
    let at = cx.sem.classes[class].def.name.range.start();
    cx.report(
        at,
        "`ModelNew` has no `forward` method. Define `def forward(self, ...)` that launches your \
         Triton kernels and returns the outputs.",
    );
}
