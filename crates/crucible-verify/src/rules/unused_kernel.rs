//! `unused-kernel`

use crate::checker::Checker;

declare_rule! {
    /// ## What it does
    /// Reports a `@triton.jit` function that is neither launched on the forward path nor
    /// called from a kernel that is. When a call on the path cannot be resolved (see
    /// `no-kernel-launch`), a kernel that host code refers to may be the one it launches, and
    /// only kernels nothing refers to are reported.
    ///
    /// ## Why is this bad?
    /// Dead kernels make a solution look like more of it runs in Triton than does, and they
    /// are often the remains of a path that was replaced by PyTorch. It is reported only when
    /// some other kernel is launched (`no-kernel-launch` covers the case where none is).
    ///
    /// ## Example
    /// ```python
    /// @triton.jit
    /// def fused_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    ///     ...
    ///
    ///
    /// @triton.jit
    /// def old_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):  # never launched
    ///     ...
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// @triton.jit
    /// def fused_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    ///     ...
    /// ```
    pub(crate) const UNUSED_KERNEL = {
        code: "unused-kernel",
        summary: "A Triton kernel is defined but never launched from the forward path.",
        strict: Info,
        kernelbench: Off,
        lenient: Off,
    };
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let kernels: Vec<_> = cx.sem.kernels().collect();
    let launched: Vec<_> = kernels
        .iter()
        .copied()
        .filter(|&k| cx.fwd.launches(k))
        .collect();
    if launched.is_empty() {
        return;
    }
    let mut roots = launched;
    roots.extend(&cx.fwd.backward_kernels);
    let (used, _) = cx.kernels().closure(&roots);
    for k in kernels {
        if used.contains(&k) {
            continue;
        }
        let def = cx.sem.funcs[k].def;
        let message = format!(
            "the Triton kernel `{}` is defined but never launched from the forward path (nor \
             called by a kernel that is). Remove it, or launch it from `ModelNew.forward`.",
            def.name.id
        );
        cx.report(def.name.range.start(), message);
    }
}
