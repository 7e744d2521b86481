//! `no-triton-kernel`

use crate::checker::Checker;

declare_rule! {
    /// ## What it does
    /// Checks that the module defines at least one Triton kernel: a function decorated with
    /// `@triton.jit` (possibly under `@triton.autotune` or `@triton.heuristics`).
    ///
    /// ## Why is this bad?
    /// The task is to write Triton kernels. A solution without any is PyTorch (or something
    /// else) presented as a kernel.
    ///
    /// ## Example
    /// ```python
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         return torch.relu(x)
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// @triton.jit
    /// def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    ///     offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ///     x = tl.load(x_ptr + offs, mask=offs < n)
    ///     tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)
    ///
    ///
    /// class ModelNew(nn.Module):
    ///     def forward(self, x):
    ///         y = torch.empty_like(x)
    ///         relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    ///         return y
    /// ```
    pub(crate) const NO_TRITON_KERNEL = {
        code: "no-triton-kernel",
        summary: "No `@triton.jit` kernel is defined.",
        strict: Reject,
        kernelbench: Reject,
        lenient: Reject,
    };
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    if cx.sem.kernels().next().is_none() {
        cx.report_file(
            "no Triton kernel is defined. Write the computation as a `@triton.jit` function \
             (using `tl.load`/`tl.store`) and launch it from `ModelNew.forward` with \
             `kernel[grid](...)`.",
        );
    }
}
