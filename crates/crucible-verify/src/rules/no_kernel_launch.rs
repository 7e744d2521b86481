//! `no-kernel-launch`

use crate::checker::Checker;

declare_rule! {
    /// ## What it does
    /// Checks that at least one Triton kernel is launched (`kernel[grid](...)`) on a call path
    /// from `ModelNew.forward`: in `forward` itself, or in a helper function, a method, a
    /// submodule's `forward`, an `autograd.Function` or a custom op that it calls.
    ///
    /// Submodules are found through what the methods of the file's classes store on `self`: an
    /// instance of a class of the file (`self.block = Block()`, whose `forward` or `__call__`
    /// then runs), `nn.Sequential`, `nn.ModuleList` and `nn.ModuleDict` of them (from literals,
    /// comprehensions, `*` unpacking, or `append` / `extend` / item assignment in a loop), a
    /// function of the file or a `functools.partial` of one. Calls through them are followed
    /// transitively (`for layer in self.layers: x = layer(x)`, `self.heads[name](x)`).
    ///
    /// The rule reports only when every call on those paths is resolved. A call it cannot
    /// resolve (a module or function passed in as an argument, an attribute nothing in the file
    /// assigns, `getattr`, a container filled by code it does not follow) might launch any
    /// kernel that host code refers to, so it is left to the judge's run-time check
    /// (`no-triton-launch`: the run must launch one of the file's kernels).
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
