//! `no-kernel-launch`

use crate::checker::Checker;

declare_rule! {
    /// ## What it does
    /// Checks that at least one Triton kernel is launched (`kernel[grid](...)`) on a call path
    /// from `ModelNew.forward`: in `forward` itself, or in a helper function, a method, a
    /// submodule's `forward`, an `autograd.Function` or a custom op that it calls.
    ///
    /// ## Why is this bad?
    /// A kernel that is defined but never launched does no work; the outputs then come from
    /// somewhere else, usually PyTorch.
    ///
    /// ## Example
    /// ```python
    /// @triton.jit
    /// def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    ///     ...
    ///
    ///
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return x.clamp(min=0)
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         y = torch.empty_like(x)
    ///         grid = lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)
    ///         relu_kernel[grid](x, y, x.numel(), BLOCK=1024)
    ///         return y
    /// ```
    pub(crate) const NO_KERNEL_LAUNCH = {
        code: "no-kernel-launch",
        summary: "No Triton kernel is launched on any call path from `ModelNew.forward`.",
        strict: Reject,
        kernelbench: Flag,
        lenient: Reject,
    };
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let Some(root) = cx.fwd.root else {
        return;
    };
    let kernels: Vec<_> = cx.sem.kernels().collect();
    if kernels.is_empty() || kernels.iter().any(|&k| cx.fwd.launches(k)) {
        return;
    }
    let names: Vec<String> = kernels
        .iter()
        .take(5)
        .map(|&k| format!("`{}`", cx.sem.funcs[k].def.name.id))
        .collect();
    let message = format!(
        "no Triton kernel is launched on any call path from `ModelNew.forward` (defined: {}). \
         Launch your kernel with `kernel[grid](...)` from `forward` or from a helper that \
         `forward` calls, and return the tensor it writes.",
        names.join(", ")
    );
    let at = cx.sem.funcs[root].def.name.range.start();
    cx.report(at, message);
}
