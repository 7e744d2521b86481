//! `tensor-subclass`

use ruff_text_size::Ranged;

use crate::checker::Checker;

declare_rule! {
    /// ## What it does
    /// Reports classes deriving from `torch.Tensor` (or `torch.nn.Parameter`,
    /// `torch._C.TensorBase`), torch function or dispatch modes, methods named
    /// `__torch_function__` or `__torch_dispatch__`, and `Tensor._make_subclass`.
    ///
    /// ## Why is this bad?
    /// A tensor subclass can intercept the judge's own operations on the output: an `allclose`
    /// or a subtraction that always reports a match, or a lazy tensor that computes only when
    /// inspected, outside the timed region.
    ///
    /// ## Example
    /// ```python
    /// class AlwaysClose(torch.Tensor):
    ///     @classmethod
    ///     def __torch_function__(cls, func, types, args=(), kwargs=None):
    ///         return True
    /// ```
    ///
    /// ## Use instead
    /// Return plain tensors written by your kernels.
    pub(crate) const TENSOR_SUBCLASS = {
        code: "tensor-subclass",
        summary: "Subclasses `torch.Tensor` or defines `__torch_function__`/`__torch_dispatch__`.",
        strict: Reject,
        kernelbench: Reject,
        lenient: Reject,
    };
}

const TENSOR_BASES: &[&str] = &[
    "torch.Tensor",
    "torch.nn.Parameter",
    "torch.nn.parameter.Parameter",
    "torch._C.TensorBase",
    "torch._C._TensorBase",
    "torch.overrides.TorchFunctionMode",
    "torch.utils._python_dispatch.TorchDispatchMode",
];

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let mut found = Vec::new();
    for class in &cx.sem.classes {
        for base in class.def.bases() {
            if let Some(q) = cx.sem.qualname(base)
                && TENSOR_BASES.contains(&q.as_str())
            {
                found.push((
                    base.range().start(),
                    format!(
                        "`{}` derives from `{q}`; tensor subclasses and modes can intercept the \
                         judge's checks on your outputs. Return plain tensors.",
                        class.def.name.id
                    ),
                ));
            }
        }
    }
    for func in &cx.sem.funcs {
        let name = func.def.name.id.as_str();
        if matches!(name, "__torch_function__" | "__torch_dispatch__") {
            found.push((
                func.def.name.range.start(),
                format!(
                    "`{name}` overrides how PyTorch runs operations on your objects, which can \
                     intercept the judge's checks. Return plain tensors."
                ),
            ));
        }
    }
    for &(attr, range) in &cx.facts.attrs {
        if attr == "_make_subclass" {
            found.push((
                range.start(),
                "`_make_subclass` builds a tensor subclass, which can intercept the judge's \
                 checks. Return plain tensors."
                    .to_string(),
            ));
        }
    }
    for r in &cx.facts.refs {
        if r.qual.ends_with("._make_subclass") {
            found.push((
                r.range.start(),
                "`_make_subclass` builds a tensor subclass, which can intercept the judge's \
                 checks. Return plain tensors."
                    .to_string(),
            ));
        }
    }
    for (at, message) in found {
        cx.report(at, message);
    }
}
