//! `kernel-without-store`

use crate::checker::Checker;

declare_rule! {
    /// ## What it does
    /// Reports a kernel launched on the forward path that never writes memory: neither it nor
    /// a `@triton.jit` function it calls contains `tl.store`, a descriptor `store` or a
    /// `tl.atomic_*`.
    ///
    /// ## Why is this bad?
    /// A kernel that stores nothing has no effect. Launching one satisfies "a kernel runs"
    /// while the outputs are produced some other way.
    ///
    /// ## Example
    /// ```python
    /// @triton.jit
    /// def noop_kernel(x_ptr, n, BLOCK: tl.constexpr):
    ///     offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ///     x = tl.load(x_ptr + offs, mask=offs < n)
    /// ```
    ///
    /// ## Use instead
    /// ```python
    /// @triton.jit
    /// def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    ///     offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ///     x = tl.load(x_ptr + offs, mask=offs < n)
    ///     tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)
    /// ```
    pub(crate) const KERNEL_WITHOUT_STORE = {
        code: "kernel-without-store",
        summary: "A launched kernel never writes memory.",
        strict: Flag,
        kernelbench: Off,
        lenient: Off,
    };
}

pub(crate) fn check(cx: &mut Checker<'_, '_>) {
    let launched: Vec<_> = cx.sem.kernels().filter(|&k| cx.fwd.launches(k)).collect();
    let table = cx.kernels();
    for k in launched {
        let (_, stores) = table.closure(&[k]);
        if stores {
            continue;
        }
        let def = cx.sem.funcs[k].def;
        let message = format!(
            "the Triton kernel `{}` is launched but never writes memory (no `tl.store` or \
             `tl.atomic_*`), so it has no effect. Store the results your kernel computes into \
             the output tensor.",
            def.name.id
        );
        cx.report(def.name.range.start(), message);
    }
}
